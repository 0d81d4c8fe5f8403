#version 450
// Greedy sampling on the device: meta[aux0 + b] = the index of the largest
// of `cols` logits in row b (the lowest index among equals, as the CPU
// sampler picks). One workgroup per row.
#include "ops_common.glsl"

#define GROUP 64u
layout(local_size_x = 64) in;
shared float best_value[GROUP];
shared uint best_index[GROUP];

void main() {
    uint tid = gl_LocalInvocationID.x;
    for (uint b = gl_WorkGroupID.x; b < p.batch; b += gl_NumWorkGroups.x) {
        uint x = p.x_offset + b * p.x_stride;
        CHECK(x + p.cols <= p.act_words, FAULT_ACT)
        CHECK(p.aux0 + b < p.meta_words, FAULT_META)
        float value = -1.0 / 0.0;
        uint index = 0xFFFFFFFFu;
        for (uint i = tid; i < p.cols; i += GROUP) {
            float v = act[x + i];
            if (v > value || index == 0xFFFFFFFFu) {
                value = v;
                index = i;
            }
        }
        best_value[tid] = value;
        best_index[tid] = index;
        barrier();
        for (uint s = GROUP / 2u; s > 0u; s >>= 1u) {
            if (tid < s) {
                float v = best_value[tid + s];
                uint i = best_index[tid + s];
                bool better = i != 0xFFFFFFFFu && (best_index[tid] == 0xFFFFFFFFu
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
