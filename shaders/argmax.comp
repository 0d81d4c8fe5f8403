#version 450
// Greedy sampling on the device: meta[aux0 + b] = the index of the largest
// of `cols` logits in row b (the lowest index among equals, as the CPU
// sampler picks). One workgroup per row, as wide as the device allows up
// to 1,024 invocations (specialization constant 0, a power of two), each
// with several loads in flight: a vocabulary of 128k logits read by 64
// invocations one load at a time took 200 µs on an H200.
#include "ops_common.glsl"

layout(local_size_x_id = 0) in;
#define GROUP gl_WorkGroupSize.x
// Loads each invocation issues before it compares any.
#define UNROLL 8u
#define NONE 0xFFFFFFFFu
shared float best_value[1024];
shared uint best_index[1024];

void main() {
    uint tid = gl_LocalInvocationID.x;
    for (uint b = gl_WorkGroupID.x; b < p.batch; b += gl_NumWorkGroups.x) {
        uint x = p.x_offset + b * p.x_stride;
        CHECK(x + p.cols <= p.act_words, FAULT_ACT)
        CHECK(p.aux0 + b < p.meta_words, FAULT_META)
        float value = -1.0 / 0.0;
        uint index = NONE;
        // Each invocation's indices rise, so keeping the first of equals
        // keeps the lowest.
        for (uint i0 = 0u; i0 < p.cols; i0 += UNROLL * GROUP) {
            float v[UNROLL];
            for (uint u = 0u; u < UNROLL; u++) {
                uint i = i0 + u * GROUP + tid;
                v[u] = i < p.cols ? act[x + i] : 0.0;
            }
            for (uint u = 0u; u < UNROLL; u++) {
                uint i = i0 + u * GROUP + tid;
                if (i < p.cols && (v[u] > value || index == NONE)) {
                    value = v[u];
                    index = i;
                }
            }
        }
        best_value[tid] = value;
        best_index[tid] = index;
        barrier();
        for (uint s = GROUP / 2u; s > 0u; s >>= 1u) {
            if (tid < s) {
                float v = best_value[tid + s];
                uint i = best_index[tid + s];
                bool better = i != NONE && (best_index[tid] == NONE
                    || v > best_value[tid] || (v == best_value[tid] && i < best_index[tid]));
                if (better) {
                    best_value[tid] = v;
                    best_index[tid] = i;
                }
            }
            barrier();
        }
        if (tid == 0u) {
            meta[p.aux0 + b] = best_index[0];
        }
        barrier();
    }
}
