#version 450
// Paged attention for any mix of decode, prefill and chunked prefill.
//
// One workgroup takes one work item: a tile of query vectors (up to
// MAX_VECTORS = `hcount` query heads of one KV head's group × `rcount`
// consecutive new tokens of one sequence) over the KV range [kv_begin,
// kv_end). It walks that range a page at a time: the page's 16 keys are
// widened into shared memory once and scored against every vector of the
// tile, so keys and values are read once per tile, not once per query head
// (grouped-query heads share them). Scores never leave shared memory: an
// online softmax keeps a running max and sum per vector and rescales the
// accumulator, which lives in registers. New tokens are causal among
// themselves (a key at a later position than the query is masked). With a
// sliding window, a key before the query's window is masked too, and the
// item starts at the page of its first row's window: the pages before it
// are never read (the core may have given them back).
//
// A tile that covers the whole context writes normalised outputs. A decode
// tile over a long context is split across the KV length into several items
// (so one sequence fills the device); each writes its running max, sum and
// unnormalised accumulator to `partials`, and merge.comp combines them.
//
// Each score is one invocation's dot product from shared memory, so the hot
// loop needs no cross-lane reduction and no shader assumes a subgroup width.
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"

#define WG 128u
#define MAX_VECTORS 16u
#define MAX_DIM 256u
#define MAX_PAIRS 8u           // (MAX_VECTORS * MAX_DIM / 2) / WG

layout(local_size_x = 128) in;

layout(std430, set = 0, binding = 1) readonly buffer Input { float inputs[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Output { float outputs[]; };
layout(std430, set = 0, binding = 3) readonly buffer Meta { uint meta[]; };
layout(std430, set = 0, binding = 4) writeonly buffer Partials { float partials[]; };

shared float q_s[2048];                              // tile queries: vectors × head_dim
shared float k_s[PAGE_SIZE * (MAX_DIM + 1u)];        // one page of keys, padded rows
shared float s_s[MAX_VECTORS * PAGE_SIZE];           // scores of this page
shared float m_s[2][MAX_VECTORS];                    // running max, double-buffered
shared float l_s[MAX_VECTORS];                       // running sum
shared float p_s[MAX_VECTORS * PAGE_SIZE];           // probabilities of this page
shared float alpha_s[MAX_VECTORS];                   // rescale of this page

uint meta_at(uint i) {
#ifdef BOUNDS_CHECK
    if (i >= p.meta_words) { atomicOr(fault, FAULT_META); return 0u; }
#endif
    return meta[i];
}

// Two consecutive elements (d even) of a key or value row, widened to f32.
vec2 load_pair(uint c, uint word) {
#ifdef BOUNDS_CHECK
    if (word + (p.dtype == 0u ? 1u : 0u) >= kv[c].words.length()) {
        atomicOr(fault, FAULT_KV);
        return vec2(0.0);
    }
#endif
    if (p.dtype == 0u) {
        return vec2(uintBitsToFloat(kv[c].words[word]), uintBitsToFloat(kv[c].words[word + 1u]));
    }
    uint w = kv[c].words[word];
    if (p.dtype == 1u) {
        return unpackHalf2x16(w);
    }
    return vec2(uintBitsToFloat(w << 16), uintBitsToFloat(w & 0xFFFF0000u));
}

// Word of element d (d even) inside a row.
uint pair_word(uint d) {
    return p.dtype == 0u ? d : d / 2u;
}

const float NEG_INF = -1.0 / 0.0;

void main() {
    uint tid = gl_LocalInvocationID.x;
    uint dim = p.head_dim;
    uint group = p.q_heads / p.kv_heads;
    uint half_dim = dim / 2u;
    uint rw = row_words();
    for (uint item = gl_WorkGroupID.x; item < p.count; item += gl_NumWorkGroups.x) {
        uint rec = p.item_offset + item * 9u;
        uint seq = meta_at(rec);
        uint kv_head = meta_at(rec + 1u);
        uint head0 = meta_at(rec + 2u);
        uint hcount = meta_at(rec + 3u);
        uint i0 = meta_at(rec + 4u);
        uint rcount = meta_at(rec + 5u);
        uint kv_begin = meta_at(rec + 6u);
        uint kv_end = meta_at(rec + 7u);
        uint partial = meta_at(rec + 8u);
        uint srec = p.seq_offset + seq * 4u;
        uint pages_at = meta_at(srec);
        uint context_len = meta_at(srec + 1u);
        uint query_start = meta_at(srec + 2u);
        uint query_len = meta_at(srec + 3u);
        uint first_pos = context_len - query_len + i0;   // position of the tile's first row
        uint window_page = first_visible(first_pos) / PAGE_SIZE * PAGE_SIZE;
        kv_begin = min(max(kv_begin, window_page), kv_end);
        uint vectors = hcount * rcount;
        uint pairs = vectors * half_dim;
#ifdef BOUNDS_CHECK
        if (vectors > MAX_VECTORS || dim > MAX_DIM || kv_head >= p.kv_heads) {
            atomicOr(fault, FAULT_META);
            vectors = 0u;
            pairs = 0u;
            kv_end = kv_begin;
        }
#endif

        // The tile's queries.
        for (uint e = tid; e < vectors * dim; e += WG) {
            uint v = e / dim;
            uint src = p.input_offset + (query_start + i0 + v / hcount) * p.q_heads * dim
                + (kv_head * group + head0 + v % hcount) * dim + e % dim;
#ifdef BOUNDS_CHECK
            if (src >= p.input_words) { atomicOr(fault, FAULT_INPUT); q_s[e] = 0.0; continue; }
#endif
            q_s[e] = inputs[src];
        }
        if (tid < vectors) {
            m_s[0][tid] = NEG_INF;
            l_s[tid] = 0.0;
        }
        vec2 acc[MAX_PAIRS];
        for (uint j = 0u; j < MAX_PAIRS; j++) {
            acc[j] = vec2(0.0);
        }
        uint cur = 0u;
        barrier();

        uint end_page = (kv_end + PAGE_SIZE - 1u) / PAGE_SIZE;
        for (uint pi = kv_begin / PAGE_SIZE; pi < end_page; pi++) {
            uint page = meta_at(pages_at + pi);
            uint c = chunk_of(page);
#ifdef BOUNDS_CHECK
            if (page >= p.pages || c >= p.chunks) { atomicOr(fault, FAULT_PAGE); page = 0u; c = 0u; }
#endif
            uint base = page_base(page);
            uint keys_at = base + row_offset(p.layer, 0u, kv_head, 0u);
            uint values_at = base + row_offset(p.layer, 1u, kv_head, 0u);
            uint tok0 = pi * PAGE_SIZE;

            // This page's keys into shared memory, widened to f32.
            for (uint e = tid; e < PAGE_SIZE * half_dim; e += WG) {
                uint t = e / half_dim;
                uint d = (e % half_dim) * 2u;
                vec2 k = load_pair(c, keys_at + t * rw + pair_word(d));
                k_s[t * (dim + 1u) + d] = k.x;
                k_s[t * (dim + 1u) + d + 1u] = k.y;
            }
            barrier();

            // Scores: one invocation per (vector, key), masked outside the
            // item's range and after the query's own position.
            for (uint s = tid; s < vectors * PAGE_SIZE; s += WG) {
                uint v = s / PAGE_SIZE;
                uint t = s % PAGE_SIZE;
                uint pos = tok0 + t;
                float score = NEG_INF;
                uint q_pos = first_pos + v / hcount;
                if (pos >= kv_begin && pos < kv_end && pos <= q_pos && pos >= first_visible(q_pos)) {
                    // Four independent sums shorten the dependency chain.
                    vec4 dot_qk = vec4(0.0);
                    uint qa = v * dim;
                    uint ka = t * (dim + 1u);
                    for (uint d = 0u; d < dim; d += 4u) {
                        dot_qk += vec4(q_s[qa + d], q_s[qa + d + 1u], q_s[qa + d + 2u], q_s[qa + d + 3u])
                            * vec4(k_s[ka + d], k_s[ka + d + 1u], k_s[ka + d + 2u], k_s[ka + d + 3u]);
                    }
                    score = soft_cap((dot_qk.x + dot_qk.y + dot_qk.z + dot_qk.w) * p.scale);
                }
                s_s[s] = score;
            }
            barrier();

            // Online softmax: probabilities against the new running max; the
            // first invocation of each vector updates its max, sum and rescale.
            for (uint s = tid; s < vectors * PAGE_SIZE; s += WG) {
                uint v = s / PAGE_SIZE;
                float page_max = NEG_INF;
                for (uint t = 0u; t < PAGE_SIZE; t++) {
                    page_max = max(page_max, s_s[v * PAGE_SIZE + t]);
                }
                float m_old = m_s[cur][v];
                float m_new = max(m_old, page_max);
                float score = s_s[s];
                p_s[s] = score == NEG_INF ? 0.0 : exp(score - m_new);
                if (s % PAGE_SIZE == 0u) {
                    float alpha = m_old == NEG_INF ? 0.0 : exp(m_old - m_new);
                    float sum = 0.0;
                    for (uint t = 0u; t < PAGE_SIZE; t++) {
                        float st = s_s[v * PAGE_SIZE + t];
                        sum += st == NEG_INF ? 0.0 : exp(st - m_new);
                    }
                    alpha_s[v] = alpha;
                    l_s[v] = l_s[v] * alpha + sum;
                    m_s[1u - cur][v] = m_new;
                }
            }
            barrier();

            // Accumulate: each invocation owns element pairs of the tile's
            // outputs; consecutive invocations read consecutive values.
            for (uint j = 0u; j < MAX_PAIRS; j++) {
                uint k = tid + j * WG;
                if (k < pairs) {
                    uint v = k / half_dim;
                    uint d = (k % half_dim) * 2u;
                    // All 16 loads are issued before any is used, so their
                    // latencies overlap (masked keys have probability 0 and are skipped).
                    vec2 vals[PAGE_SIZE];
                    [[unroll]] for (uint t = 0u; t < PAGE_SIZE; t++) {
                        vals[t] = load_pair(c, values_at + t * rw + pair_word(d));
                    }
                    vec2 a = acc[j] * alpha_s[v];
                    [[unroll]] for (uint t = 0u; t < PAGE_SIZE; t++) {
                        // A masked slot may hold anything (inf · 0 is NaN).
                        float prob = p_s[v * PAGE_SIZE + t];
                        a += prob == 0.0 ? vec2(0.0) : prob * vals[t];
                    }
                    acc[j] = a;
                }
            }
            cur = 1u - cur;
        }
        barrier();

        // Results: normalised outputs, or this split's partial state.
        for (uint j = 0u; j < MAX_PAIRS; j++) {
            uint k = tid + j * WG;
            if (k < pairs) {
                uint v = k / half_dim;
                uint d = (k % half_dim) * 2u;
                if (partial == NO_PARTIAL) {
                    uint dst = p.output_offset + (query_start + i0 + v / hcount) * p.q_heads * dim
                        + (kv_head * group + head0 + v % hcount) * dim + d;
#ifdef BOUNDS_CHECK
                    if (dst + 1u >= p.output_words) { atomicOr(fault, FAULT_OUTPUT); continue; }
#endif
                    vec2 o = acc[j] / l_s[v];
                    outputs[dst] = o.x;
                    outputs[dst + 1u] = o.y;
                } else {
                    uint dst = (partial + v) * (dim + 2u) + 2u + d;
#ifdef BOUNDS_CHECK
                    if (dst + 1u >= p.partial_words) { atomicOr(fault, FAULT_PARTIAL); continue; }
#endif
                    partials[dst] = acc[j].x;
                    partials[dst + 1u] = acc[j].y;
                }
            }
        }
        if (partial != NO_PARTIAL && tid < vectors) {
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
