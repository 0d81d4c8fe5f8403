#version 450
// Paged attention for decode: one new token per sequence.
//
// One workgroup takes one work item (the same 9-word items as
// attention.comp, with one query row): the grouped query heads of one KV
// head (at most 8) over the KV range [kv_begin, kv_end). Decode only has to
// read the KV once, so the kernel is shaped around keeping many wide,
// coalesced reads in flight, as GPU decode kernels that reach the memory
// bandwidth do:
//
// - The range is walked a tile of keys at a time (112 to 16 keys: as many
//   whole pages as fit 16 KiB of shared memory with padded rows). At the
//   top of a tile every invocation issues all of its loads at once: up to
//   8 vectors of 16 bytes of the tile's key rows, consecutive invocations
//   on consecutive vectors (whole rows, so every read is coalesced), and up
//   to 8 vectors of its value column (see below). Nothing waits on a load
//   until all are issued, so a workgroup has up to 32 KiB in flight.
// - The keys go to shared memory, rows padded by one vector so that
//   neighbouring keys fall in different banks; one invocation per (head,
//   key) then scores it against its head's query (the f16 variant
//   multiplies halves and adds each 8 products in f32).
// - One online-softmax step per tile: the tile's maximum, the
//   probabilities, their sum and the rescale of the running sums, with
//   subgroup max and add where the device has subgroup arithmetic (the
//   SUBGROUP variant, one subgroup per head), or through 16-key segments
//   in shared memory otherwise.
// - Values: invocation `tid` owns the 16-byte column `tid % vecs` of every
//   `lanes`-th token of the tile (lanes = 128 / vecs), already in
//   registers, and adds it, weighted, into its accumulators for every head
//   of the item, so each value row is read once per item however many
//   heads share it. At the end the token lanes' sums are added through
//   shared memory.
//
// With a sliding window the item starts at the page of its query's window
// (the pages before it are never read) and keys before the window are
// masked.
//
// A pool split into several chunks is addressed by looping over the chunks
// with a uniform index, since the keys of one tile may lie in different
// chunks and core Vulkan only indexes descriptor arrays uniformly.
#extension GL_EXT_control_flow_attributes : require
#ifdef SUBGROUP
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif
#ifdef F16_ARITH
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#endif
#include "common.glsl"

#define WG 128u
#define MAX_HEADS 8u        // query heads per item (DECODE_MAX_HEADS in plan.rs)
#define KS_VECS 1040u       // 16-byte vectors of the key tile: 16 rows of 64 + 1
#define MAX_TILE 112u       // keys per tile at most (rows of 8 vectors)
#define MAX_LOADS 8u        // 16-byte loads per invocation per tile, of keys and of values
#define SEGMENT 16u         // keys per partial max and sum (no subgroups)
#define MAX_SEGMENTS 7u     // MAX_TILE / SEGMENT

layout(local_size_x = 128) in;

// The KV chunks of common.glsl again, read 16 bytes at a time.
layout(std430, set = 0, binding = 0) readonly buffer KvQuads { uvec4 v[]; } kv4[KV_CHUNKS];

layout(std430, set = 0, binding = 1) readonly buffer Input { float inputs[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Output { float outputs[]; };
layout(std430, set = 0, binding = 3) readonly buffer Meta { uint meta[]; };
layout(std430, set = 0, binding = 4) writeonly buffer Partials { float partials[]; };

// The key tile, row r at r * (vecs + 1); after the last tile, the token
// lanes' value sums (as float bits).
shared uvec4 k_s[KS_VECS];
#ifdef F16_ARITH
shared f16vec2 qh_s[MAX_HEADS * 128u];     // the item's queries as f16 pairs
#else
shared vec4 q_s[MAX_HEADS * 64u];          // the item's queries, heads × head_dim / 4
#endif
shared float s_s[MAX_HEADS * MAX_TILE];    // scores, then probabilities, of a tile
#ifndef SUBGROUP
shared float bmax_s[MAX_HEADS * MAX_SEGMENTS];
shared float bsum_s[MAX_HEADS * MAX_SEGMENTS];
#endif
shared float m_s[2][MAX_HEADS];            // running max, double-buffered
shared float l_s[MAX_HEADS];               // running sum
shared float alpha_s[MAX_HEADS];           // rescale of this tile

const float NEG_INF = -1.0 / 0.0;

uint meta_at(uint i) {
#ifdef BOUNDS_CHECK
    if (i >= p.meta_words) { atomicOr(fault, FAULT_META); return 0u; }
#endif
    return meta[i];
}

float input_at(uint i) {
    i += p.input_offset;
#ifdef BOUNDS_CHECK
    if (i >= p.input_words) { atomicOr(fault, FAULT_INPUT); return 0.0; }
#endif
    return inputs[i];
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

// Vector `j` (16 bytes) of token `pos`'s key (kv_sel 0) or value (1) row.
uvec4 kv_vector(uint pages_at, uint pos, uint kv_sel, uint kv_head, uint j) {
    uint page = meta_at(pages_at + pos / PAGE_SIZE);
#ifdef BOUNDS_CHECK
    if (page >= p.pages) { atomicOr(fault, FAULT_PAGE); page = 0u; }
#endif
    uint row = page_base(page) + row_offset(p.layer, kv_sel, kv_head, pos % PAGE_SIZE);
    return load4(chunk_of(page), row + 4u * j);
}

// Two elements of one word, widened (f16 or bf16).
vec2 widen_word(uint w) {
    if (p.dtype == 1u) {
        return unpackHalf2x16(w);
    }
    return vec2(uintBitsToFloat(w << 16), uintBitsToFloat(w & 0xFFFF0000u));
}

// The first four elements of a vector (all of them for f32).
vec4 widen_lo(uvec4 w) {
    if (p.dtype == 0u) {
        return uintBitsToFloat(w);
    }
    return vec4(widen_word(w.x), widen_word(w.y));
}

// The last four elements of a vector of halves (zero for f32).
vec4 widen_hi(uvec4 w) {
    if (p.dtype == 0u) {
        return vec4(0.0);
    }
    return vec4(widen_word(w.z), widen_word(w.w));
}

void main() {
    uint tid = gl_LocalInvocationID.x;
    uint dim = p.head_dim;
    uint group = p.q_heads / p.kv_heads;
    uint vecs = row_words() / 4u;               // 16-byte vectors per row
    uint per_vec = p.dtype == 0u ? 4u : 8u;     // elements per vector
    uint stride = vecs + 1u;                    // padded key row in k_s
    uint lanes = WG / vecs;                     // token lanes of the value pass
    uint col = tid % vecs;                      // this invocation's value column
    uint lane = tid / vecs;                     // and token lane (idle if >= lanes)
    // Whole pages of keys that fit the key tile, and whose values the token
    // lanes take in MAX_LOADS loads each.
    uint tile = min(min(KS_VECS / (PAGE_SIZE * stride) * PAGE_SIZE, MAX_TILE),
                    lanes * MAX_LOADS / PAGE_SIZE * PAGE_SIZE);
#ifdef SUBGROUP
    // This invocation's place among its subgroup's active invocations, and
    // their number: the softmax splits a head's keys by these, so it stays
    // right even where a device launches partial subgroups.
    uint sg_lane = subgroupExclusiveAdd(1u);
    uint sg_width = subgroupAdd(1u);
#endif
    if (tile == 0u) {
#ifdef BOUNDS_CHECK
        if (tid == 0u) { atomicOr(fault, FAULT_META); }
#endif
        return;
    }
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
        uint context_len = meta_at(srec + 1u);
        uint query_start = meta_at(srec + 2u);
        uint query_len = meta_at(srec + 3u);
        uint first_key = first_visible(context_len - query_len + i0);
        kv_begin = min(max(kv_begin, first_key / PAGE_SIZE * PAGE_SIZE), kv_end);
#ifdef BOUNDS_CHECK
        if (hcount > MAX_HEADS || hcount * dim > MAX_HEADS * 256u || kv_head >= p.kv_heads) {
            atomicOr(fault, FAULT_META);
            hcount = 0u;
            kv_end = kv_begin;
        }
#endif
        uint q_row = (query_start + i0) * p.q_heads + kv_head * group + head0;

        // The item's queries.
#ifdef F16_ARITH
        for (uint e = tid; e < hcount * dim / 2u; e += WG) {
            uint src = q_row * dim + 2u * e;
            qh_s[e] = f16vec2(input_at(src), input_at(src + 1u));
        }
#else
        for (uint e = tid; e < hcount * dim / 4u; e += WG) {
            uint src = q_row * dim + 4u * e;
            q_s[e] = vec4(input_at(src), input_at(src + 1u), input_at(src + 2u), input_at(src + 3u));
        }
#endif
        if (tid < hcount) {
            m_s[0][tid] = NEG_INF;
            l_s[tid] = 0.0;
        }
        vec4 acc[2u * MAX_HEADS];   // per head: elements 0-3 and 4-7 of the column
        [[unroll]] for (uint k = 0u; k < 2u * MAX_HEADS; k++) {
            acc[k] = vec4(0.0);
        }
        uint cur = 0u;

        for (uint blk = kv_begin; blk < kv_end; blk += tile) {
            uint n = min(tile, kv_end - blk);

            // 1. Every load of the tile, issued before any is used.
            uvec4 kr[MAX_LOADS];
            uvec4 vr[MAX_LOADS];
            [[unroll]] for (uint i = 0u; i < MAX_LOADS; i++) {
                uint v = tid + i * WG;
                kr[i] = uvec4(0u);
                if (v < n * vecs) {
                    kr[i] = kv_vector(pages_at, blk + v / vecs, 0u, kv_head, v % vecs);
                }
            }
            [[unroll]] for (uint i = 0u; i < MAX_LOADS; i++) {
                uint t = lane + i * lanes;
                vr[i] = uvec4(0u);
                if (lane < lanes && t < n) {
                    vr[i] = kv_vector(pages_at, blk + t, 1u, kv_head, col);
                }
            }
            [[unroll]] for (uint i = 0u; i < MAX_LOADS; i++) {
                uint v = tid + i * WG;
                if (v < n * vecs) {
                    k_s[(v / vecs) * stride + v % vecs] = kr[i];
                }
            }
            barrier();

            // 2. Scores, one invocation per (head, key).
            for (uint pr = tid; pr < hcount * tile; pr += WG) {
                uint h = pr / tile;
                uint key = pr % tile;
                float s = NEG_INF;
                if (key < n && blk + key >= first_key) {
                    float d = 0.0;
                    uint kb = key * stride;
                    for (uint j = 0u; j < vecs; j++) {
                        uvec4 w = k_s[kb + j];
#ifdef F16_ARITH
                        // f16 stores only: 8 halves, multiplied in f16.
                        uint qa = (h * dim) / 2u + 4u * j;
                        f16vec2 s2 = qh_s[qa] * unpackFloat2x16(w.x) + qh_s[qa + 1u] * unpackFloat2x16(w.y)
                            + qh_s[qa + 2u] * unpackFloat2x16(w.z) + qh_s[qa + 3u] * unpackFloat2x16(w.w);
                        d += float(s2.x) + float(s2.y);
#else
                        if (p.dtype == 0u) {
                            d += dot(uintBitsToFloat(w), q_s[(h * dim) / 4u + j]);
                        } else {
                            uint qa = (h * dim) / 4u + 2u * j;
                            d += dot(widen_lo(w), q_s[qa]) + dot(widen_hi(w), q_s[qa + 1u]);
                        }
#endif
                    }
                    s = soft_cap(d * p.scale);
                }
                s_s[h * tile + key] = s;
            }
            barrier();

            // 3. One online-softmax step: each head's new max, the
            // probabilities, their sum, the rescale of the running sums.
#ifdef SUBGROUP
            for (uint h = gl_SubgroupID; h < hcount; h += gl_NumSubgroups) {
                float m_old = m_s[cur][h];
                float m = NEG_INF;
                for (uint k = sg_lane; k < n; k += sg_width) {
                    m = max(m, s_s[h * tile + k]);
                }
                float m_new = max(m_old, subgroupMax(m));
                float sum = 0.0;
                for (uint k = sg_lane; k < tile; k += sg_width) {
                    float s = s_s[h * tile + k];
                    float prob = s == NEG_INF ? 0.0 : exp(s - m_new);
                    s_s[h * tile + k] = prob;
                    sum += prob;
                }
                sum = subgroupAdd(sum);
                if (subgroupElect()) {
                    float alpha = m_old == NEG_INF ? 0.0 : exp(m_old - m_new);
                    m_s[1u - cur][h] = m_new;
                    alpha_s[h] = alpha;
                    l_s[h] = l_s[h] * alpha + sum;
                }
            }
            barrier();
#else
            uint segs = tile / SEGMENT;
            for (uint u = tid; u < hcount * segs; u += WG) {
                uint at = (u / segs) * tile + (u % segs) * SEGMENT;
                float m = NEG_INF;
                for (uint t = 0u; t < SEGMENT; t++) {
                    m = max(m, s_s[at + t]);
                }
                bmax_s[u] = m;
            }
            barrier();
            for (uint u = tid; u < hcount * segs; u += WG) {
                uint h = u / segs;
                float m_old = m_s[cur][h];
                float m_new = m_old;
                for (uint j = 0u; j < segs; j++) {
                    m_new = max(m_new, bmax_s[h * segs + j]);
                }
                uint at = h * tile + (u % segs) * SEGMENT;
                float sum = 0.0;
                for (uint t = 0u; t < SEGMENT; t++) {
                    float s = s_s[at + t];
                    float prob = s == NEG_INF ? 0.0 : exp(s - m_new);
                    s_s[at + t] = prob;
                    sum += prob;
                }
                bsum_s[u] = sum;
                if (u % segs == 0u) {
                    m_s[1u - cur][h] = m_new;
                    alpha_s[h] = m_old == NEG_INF ? 0.0 : exp(m_old - m_new);
                }
            }
            barrier();
            if (tid < hcount) {
                float sum = 0.0;
                for (uint j = 0u; j < segs; j++) {
                    sum += bsum_s[tid * segs + j];
                }
                l_s[tid] = l_s[tid] * alpha_s[tid] + sum;
            }
#endif

            // 4. Values: this invocation's column of its tokens, into every
            // head's accumulators. The next tile's first barrier keeps the
            // probabilities until all are done.
            if (lane < lanes) {
                [[unroll]] for (uint h = 0u; h < MAX_HEADS; h++) {
                    if (h < hcount) {
                        acc[2u * h] *= alpha_s[h];
                        acc[2u * h + 1u] *= alpha_s[h];
                    }
                }
                [[unroll]] for (uint i = 0u; i < MAX_LOADS; i++) {
                    uint t = lane + i * lanes;
                    if (t < n) {
                        vec4 lo = widen_lo(vr[i]);
                        vec4 hi = widen_hi(vr[i]);
                        [[unroll]] for (uint h = 0u; h < MAX_HEADS; h++) {
                            if (h < hcount) {
                                float prob = s_s[h * tile + t];
                                acc[2u * h] += prob * lo;
                                acc[2u * h + 1u] += prob * hi;
                            }
                        }
                    }
                }
            }
            cur = 1u - cur;
        }
        barrier();

        // The token lanes' sums added up, four heads at a time, in the key
        // tile's memory; then normalised outputs, or this split's partial
        // state.
        for (uint h0 = 0u; h0 < hcount; h0 += 4u) {
            uint hn = min(4u, hcount - h0);
            [[unroll]] for (uint h = 0u; h < MAX_HEADS; h++) {
                if (h >= h0 && h < h0 + hn && lane < lanes) {
                    uint at = (((h - h0) * lanes + lane) * vecs + col) * 2u;
                    k_s[at] = floatBitsToUint(acc[2u * h]);
                    k_s[at + 1u] = floatBitsToUint(acc[2u * h + 1u]);
                }
            }
            barrier();
            for (uint o = tid; o < hn * vecs * 2u; o += WG) {
                uint hh = o / (2u * vecs);
                uint r = o % (2u * vecs);   // column * 2 + which half of it
                if (per_vec == 4u && r % 2u == 1u) {
                    continue;
                }
                vec4 a = vec4(0.0);
                for (uint l = 0u; l < lanes; l++) {
                    a += uintBitsToFloat(k_s[(hh * lanes + l) * vecs * 2u + r]);
                }
                uint h = h0 + hh;
                uint d = (r / 2u) * per_vec + (r % 2u) * 4u;
                for (uint e = 0u; e < 4u; e++) {
                    if (partial == NO_PARTIAL) {
                        uint dst = p.output_offset + (q_row + h) * dim + d + e;
#ifdef BOUNDS_CHECK
                        if (dst >= p.output_words) { atomicOr(fault, FAULT_OUTPUT); continue; }
#endif
                        outputs[dst] = a[e] / l_s[h];
                    } else {
                        uint dst = (partial + h) * (dim + 2u) + 2u + d + e;
#ifdef BOUNDS_CHECK
                        if (dst >= p.partial_words) { atomicOr(fault, FAULT_PARTIAL); continue; }
#endif
                        partials[dst] = a[e];
                    }
                }
            }
            barrier();
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
