#version 450
// Paged attention for decode: one new token per sequence.
//
// One workgroup takes one work item (the same 9-word items as
// attention.comp, with one query row): the grouped query heads of one KV
// head over the KV range [kv_begin, kv_end). Decode is bound by reading the
// KV once, so the kernel is shaped around the reads rather than around a
// tile of queries:
//
// - Keys are scored token-parallel, BLOCK (128) at a time. Each key's row is
//   read straight from the pool, 16 bytes per load, by one invocation, or by
//   G = 4 neighbouring invocations of one subgroup that split the row and
//   add their partial dot products with subgroup shuffles (the SUBGROUP
//   variant, chosen at run time where the device has subgroup shuffles). A
//   key is read once for every query head of its group.
// - The online softmax then runs once per block: a max over 16-key
//   segments, the probabilities, the sums, a rescale of the accumulators.
//   Four barriers per 128 keys.
// - Values are read row by row, 8 bytes per invocation, consecutive
//   invocations on consecutive words, so a row is one coalesced read.
//   Each invocation owns a few output elements of one head (and, when the
//   heads × elements are fewer than the workgroup, a share of the block's
//   tokens, summed at the end through shared memory).
//
// The F16_ARITH variant (chosen for f16 stores where the device has
// shaderFloat16) multiplies query and key halves in f16 and adds each
// 8-element product in f32; values and the softmax stay f32.
//
// A pool split into several chunks is addressed by looping over the chunks
// with a uniform index, since keys of one block may lie in different chunks
// and core Vulkan only indexes descriptor arrays uniformly.
#extension GL_EXT_control_flow_attributes : require
#ifdef SUBGROUP
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#endif
#ifdef F16_ARITH
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#endif
#include "common.glsl"

#define WG 128u
#define BLOCK 128u          // keys per softmax step
#define SEGMENT 16u         // keys per partial max and sum
#define SEGMENTS 8u         // BLOCK / SEGMENT
#define MAX_HEADS 16u       // query heads per item (16 × 128 or 8 × 256 floats of queries)
#define MAX_UNITS 8u        // value units one invocation owns at most
#ifdef SUBGROUP
#define G 4u
#else
#define G 1u
#endif

layout(local_size_x = 128) in;

// The KV chunks of common.glsl again, read 8 and 16 bytes at a time.
layout(std430, set = 0, binding = 0) readonly buffer KvPairs { uvec2 v[]; } kv2[KV_CHUNKS];
layout(std430, set = 0, binding = 0) readonly buffer KvQuads { uvec4 v[]; } kv4[KV_CHUNKS];

layout(std430, set = 0, binding = 1) readonly buffer Input { float inputs[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Output { float outputs[]; };
layout(std430, set = 0, binding = 3) readonly buffer Meta { uint meta[]; };
layout(std430, set = 0, binding = 4) writeonly buffer Partials { float partials[]; };

shared float q_s[2048];                    // the item's queries: heads × head_dim
#ifdef F16_ARITH
shared f16vec2 qh_s[1024];                 // the same, as f16 pairs
#endif
shared float s_s[MAX_HEADS * BLOCK];       // scores, then probabilities, of a block
shared float bmax_s[MAX_HEADS * SEGMENTS]; // per-segment max
shared float bsum_s[MAX_HEADS * SEGMENTS]; // per-segment sum
shared float m_s[2][MAX_HEADS];            // running max, double-buffered
shared float l_s[MAX_HEADS];               // running sum
shared float alpha_s[MAX_HEADS];           // rescale of this block

const float NEG_INF = -1.0 / 0.0;

uint meta_at(uint i) {
#ifdef BOUNDS_CHECK
    if (i >= p.meta_words) { atomicOr(fault, FAULT_META); return 0u; }
#endif
    return meta[i];
}

// 16 bytes of chunk `c` at word `word` (a multiple of 4).
uvec4 load4(uint c, uint word) {
#ifdef BOUNDS_CHECK
    if (c >= p.chunks || word / 4u >= kv4[c].v.length()) { atomicOr(fault, FAULT_KV); return uvec4(0u); }
#endif
    if (p.chunks == 1u) {
        return kv4[0].v[word / 4u];
    }
    uvec4 r = uvec4(0u);
    for (uint i = 0u; i < p.chunks; i++) {
        if (i == c) {
            r = kv4[i].v[word / 4u];
        }
    }
    return r;
}

// 8 bytes of chunk `c` at word `word` (a multiple of 2).
uvec2 load2(uint c, uint word) {
#ifdef BOUNDS_CHECK
    if (c >= p.chunks || word / 2u >= kv2[c].v.length()) { atomicOr(fault, FAULT_KV); return uvec2(0u); }
#endif
    if (p.chunks == 1u) {
        return kv2[0].v[word / 2u];
    }
    uvec2 r = uvec2(0u);
    for (uint i = 0u; i < p.chunks; i++) {
        if (i == c) {
            r = kv2[i].v[word / 2u];
        }
    }
    return r;
}

// Two elements of one word, widened (f16 or bf16).
vec2 widen_word(uint w) {
    if (p.dtype == 1u) {
        return unpackHalf2x16(w);
    }
    return vec2(uintBitsToFloat(w << 16), uintBitsToFloat(w & 0xFFFF0000u));
}

// The elements of 8 bytes: 2 (f32, in .xy) or 4.
vec4 widen2(uvec2 w) {
    if (p.dtype == 0u) {
        return vec4(uintBitsToFloat(w.x), uintBitsToFloat(w.y), 0.0, 0.0);
    }
    return vec4(widen_word(w.x), widen_word(w.y));
}

void main() {
    uint tid = gl_LocalInvocationID.x;
    uint dim = p.head_dim;
    uint group = p.q_heads / p.kv_heads;
    uint rw = row_words();
    uint quads = rw / 4u;                       // 16-byte loads per row
    uint per_quad = p.dtype == 0u ? 4u : 8u;    // elements per 16 bytes
    uint pairs = rw / 2u;                       // 8-byte value units per row
    uint per_pair = p.dtype == 0u ? 2u : 4u;    // elements per 8 bytes
#ifdef SUBGROUP
    // Which key this invocation helps score, and its part of the row, from
    // its place in its subgroup (so the G invocations of a key share one).
    uint lane = gl_SubgroupInvocationID % G;
    uint key_slot = gl_SubgroupID * (gl_SubgroupSize / G) + gl_SubgroupInvocationID / G;
    uint key_slots = gl_NumSubgroups * (gl_SubgroupSize / G);
#else
    uint lane = 0u;
    uint key_slot = tid;
    uint key_slots = WG;
#endif
    for (uint item = gl_WorkGroupID.x; item < p.count; item += gl_NumWorkGroups.x) {
        uint rec = p.item_offset + item * 9u;
        uint seq = meta_at(rec);
        uint kv_head = meta_at(rec + 1u);
        uint head0 = meta_at(rec + 2u);
        uint hcount = meta_at(rec + 3u);
        uint i0 = meta_at(rec + 4u);
        uint kv_begin = meta_at(rec + 6u);
        uint kv_end = meta_at(rec + 7u);
        uint partial = meta_at(rec + 8u);
        uint srec = p.seq_offset + seq * 4u;
        uint pages_at = meta_at(srec);
        uint query_start = meta_at(srec + 2u);
#ifdef BOUNDS_CHECK
        if (hcount > MAX_HEADS || hcount * dim > 2048u || kv_head >= p.kv_heads) {
            atomicOr(fault, FAULT_META);
            hcount = 0u;
            kv_end = kv_begin;
        }
#endif
        uint q_row = (query_start + i0) * p.q_heads + kv_head * group + head0;

        // The item's queries.
        for (uint e = tid; e < hcount * dim; e += WG) {
            uint src = q_row * dim + e;
#ifdef BOUNDS_CHECK
            if (src >= p.input_words) { atomicOr(fault, FAULT_INPUT); q_s[e] = 0.0; continue; }
#endif
            q_s[e] = inputs[src];
        }
        if (tid < hcount) {
            m_s[0][tid] = NEG_INF;
            l_s[tid] = 0.0;
        }
        barrier();
#ifdef F16_ARITH
        for (uint e = tid; e < hcount * dim / 2u; e += WG) {
            qh_s[e] = f16vec2(q_s[2u * e], q_s[2u * e + 1u]);
        }
#endif

        // Value units: (head, 8-byte column) pairs; when there are fewer
        // than invocations, several invocations share a unit's tokens.
        uint units = hcount * pairs;
        uint lanes = units >= WG ? 1u : WG / units;
        vec4 acc[MAX_UNITS];
        [[unroll]] for (uint k = 0u; k < MAX_UNITS; k++) {
            acc[k] = vec4(0.0);
        }
        uint cur = 0u;
        barrier();

        for (uint blk = kv_begin; blk < kv_end; blk += BLOCK) {
            // 1. Scores of the block's keys, for every head of the item.
            for (uint kt = key_slot; kt < BLOCK; kt += key_slots) {
                uint pos = blk + kt;
                bool valid = pos < kv_end;
                float dots[MAX_HEADS];
                [[unroll]] for (uint h = 0u; h < MAX_HEADS; h++) {
                    dots[h] = 0.0;
                }
                if (valid) {
                    uint page = meta_at(pages_at + pos / PAGE_SIZE);
#ifdef BOUNDS_CHECK
                    if (page >= p.pages) { atomicOr(fault, FAULT_PAGE); page = 0u; }
#endif
                    uint c = chunk_of(page);
                    uint row = page_base(page) + row_offset(p.layer, 0u, kv_head, pos % PAGE_SIZE);
                    for (uint j = lane; j < quads; j += G) {
                        uvec4 w = load4(c, row + 4u * j);
                        uint d = j * per_quad;
#ifdef F16_ARITH
                        // f16 stores only: 8 halves, multiplied in f16.
                        f16vec2 k0 = unpackFloat2x16(w.x);
                        f16vec2 k1 = unpackFloat2x16(w.y);
                        f16vec2 k2 = unpackFloat2x16(w.z);
                        f16vec2 k3 = unpackFloat2x16(w.w);
                        [[unroll]] for (uint h = 0u; h < MAX_HEADS; h++) {
                            if (h < hcount) {
                                uint qa = (h * dim + d) / 2u;
                                f16vec2 s = qh_s[qa] * k0 + qh_s[qa + 1u] * k1
                                    + qh_s[qa + 2u] * k2 + qh_s[qa + 3u] * k3;
                                dots[h] += float(s.x) + float(s.y);
                            }
                        }
#else
                        vec4 lo;
                        vec4 hi;
                        if (p.dtype == 0u) {
                            lo = uintBitsToFloat(w);
                            hi = vec4(0.0);
                        } else {
                            lo = vec4(widen_word(w.x), widen_word(w.y));
                            hi = vec4(widen_word(w.z), widen_word(w.w));
                        }
                        [[unroll]] for (uint h = 0u; h < MAX_HEADS; h++) {
                            if (h < hcount) {
                                uint qa = h * dim + d;
                                float s = dot(lo, vec4(q_s[qa], q_s[qa + 1u], q_s[qa + 2u], q_s[qa + 3u]));
                                if (per_quad == 8u) {
                                    s += dot(hi, vec4(q_s[qa + 4u], q_s[qa + 5u], q_s[qa + 6u], q_s[qa + 7u]));
                                }
                                dots[h] += s;
                            }
                        }
#endif
                    }
                }
#ifdef SUBGROUP
                [[unroll]] for (uint h = 0u; h < MAX_HEADS; h++) {
                    if (h < hcount) {
                        dots[h] += subgroupShuffleXor(dots[h], 1u);
                        dots[h] += subgroupShuffleXor(dots[h], 2u);
                    }
                }
#endif
                if (lane == 0u) {
                    [[unroll]] for (uint h = 0u; h < MAX_HEADS; h++) {
                        if (h < hcount) {
                            s_s[h * BLOCK + kt] = valid ? dots[h] * p.scale : NEG_INF;
                        }
                    }
                }
            }
            barrier();

            // 2. The max of each 16-key segment.
            for (uint u = tid; u < hcount * SEGMENTS; u += WG) {
                uint at = (u / SEGMENTS) * BLOCK + (u % SEGMENTS) * SEGMENT;
                float m = NEG_INF;
                for (uint t = 0u; t < SEGMENT; t++) {
                    m = max(m, s_s[at + t]);
                }
                bmax_s[u] = m;
            }
            barrier();

            // 3. Probabilities against the new running max, segment sums,
            // and each head's new max and rescale.
            for (uint u = tid; u < hcount * SEGMENTS; u += WG) {
                uint h = u / SEGMENTS;
                float m_old = m_s[cur][h];
                float m_new = m_old;
                for (uint j = 0u; j < SEGMENTS; j++) {
                    m_new = max(m_new, bmax_s[h * SEGMENTS + j]);
                }
                uint at = h * BLOCK + (u % SEGMENTS) * SEGMENT;
                float sum = 0.0;
                for (uint t = 0u; t < SEGMENT; t++) {
                    float s = s_s[at + t];
                    float prob = s == NEG_INF ? 0.0 : exp(s - m_new);
                    s_s[at + t] = prob;
                    sum += prob;
                }
                bsum_s[u] = sum;
                if (u % SEGMENTS == 0u) {
                    m_s[1u - cur][h] = m_new;
                    alpha_s[h] = m_old == NEG_INF ? 0.0 : exp(m_old - m_new);
                }
            }
            barrier();

            // 4. Values, and each head's running sum.
            if (tid < hcount) {
                float sum = 0.0;
                for (uint j = 0u; j < SEGMENTS; j++) {
                    sum += bsum_s[tid * SEGMENTS + j];
                }
                l_s[tid] = l_s[tid] * alpha_s[tid] + sum;
            }
            uint tokens = min(BLOCK, kv_end - blk);
            [[unroll]] for (uint k = 0u; k < MAX_UNITS; k++) {
                uint slot = tid + k * WG;
                if (slot < units * lanes) {
                    uint u = slot % units;
                    uint h = u / pairs;
                    uint col = 2u * (u % pairs);
                    vec4 a = acc[k] * alpha_s[h];
                    for (uint t = slot / units; t < tokens; t += lanes) {
                        uint pos = blk + t;
                        uint page = meta_at(pages_at + pos / PAGE_SIZE);
#ifdef BOUNDS_CHECK
                        if (page >= p.pages) { atomicOr(fault, FAULT_PAGE); page = 0u; }
#endif
                        uint row = page_base(page) + row_offset(p.layer, 1u, kv_head, pos % PAGE_SIZE);
                        vec4 v = widen2(load2(chunk_of(page), row + col));
                        a += s_s[h * BLOCK + t] * v;
                    }
                    acc[k] = a;
                }
            }
            cur = 1u - cur;
            barrier();
        }

        // Invocations that shared a unit's tokens add up their sums.
        if (lanes > 1u) {
            if (tid < units * lanes) {
                s_s[4u * tid] = acc[0].x;
                s_s[4u * tid + 1u] = acc[0].y;
                s_s[4u * tid + 2u] = acc[0].z;
                s_s[4u * tid + 3u] = acc[0].w;
            }
            barrier();
            if (tid < units) {
                vec4 a = vec4(0.0);
                for (uint l = 0u; l < lanes; l++) {
                    uint at = 4u * (l * units + tid);
                    a += vec4(s_s[at], s_s[at + 1u], s_s[at + 2u], s_s[at + 3u]);
                }
                acc[0] = a;
            }
        }

        // Results: normalised outputs, or this split's partial state.
        [[unroll]] for (uint k = 0u; k < MAX_UNITS; k++) {
            uint u = tid + k * WG;
            if (u < units) {
                uint h = u / pairs;
                uint d = (u % pairs) * per_pair;
                for (uint e = 0u; e < per_pair; e++) {
                    if (partial == NO_PARTIAL) {
                        uint dst = (q_row + h) * dim + d + e;
#ifdef BOUNDS_CHECK
                        if (dst >= p.output_words) { atomicOr(fault, FAULT_OUTPUT); continue; }
#endif
                        outputs[dst] = acc[k][e] / l_s[h];
                    } else {
                        uint dst = (partial + h) * (dim + 2u) + 2u + d + e;
#ifdef BOUNDS_CHECK
                        if (dst >= p.partial_words) { atomicOr(fault, FAULT_PARTIAL); continue; }
#endif
                        partials[dst] = acc[k][e];
                    }
                }
            }
        }
        if (partial != NO_PARTIAL && tid < hcount) {
            uint dst = (partial + tid) * (dim + 2u);
#ifdef BOUNDS_CHECK
            if (dst + 1u >= p.partial_words) { atomicOr(fault, FAULT_PARTIAL); } else
#endif
            {
                partials[dst] = m_s[cur][tid];
                partials[dst + 1u] = l_s[tid];
            }
        }
        barrier();
    }
}
