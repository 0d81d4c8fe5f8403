#version 450
// RMSNorm: y = x / sqrt(mean(x²) + eps) * g for each of `batch` rows of
// `cols`, with the gains g as f32 at byte w_offset. One workgroup per row.
#include "ops_common.glsl"

#define GROUP 64u
layout(local_size_x = 64) in;
shared float partial[GROUP];

void main() {
    uint tid = gl_LocalInvocationID.x;
    CHECK(p.w_offset / 4u + p.cols <= p.w_words, FAULT_WEIGHTS)
    for (uint b = gl_WorkGroupID.x; b < p.batch; b += gl_NumWorkGroups.x) {
        uint x = p.x_offset + b * p.x_stride;
        uint y = p.y_offset + b * p.y_stride;
        CHECK(x + p.cols <= p.act_words && y + p.cols <= p.act_words, FAULT_ACT)
        float sum = 0.0;
        for (uint i = tid; i < p.cols; i += GROUP) {
            float v = act[x + i];
            sum += v * v;
        }
        partial[tid] = sum;
        barrier();
        for (uint s = GROUP / 2u; s > 0u; s >>= 1u) {
            if (tid < s) {
                partial[tid] += partial[tid + s];
            }
            barrier();
        }
        float inv = inversesqrt(partial[0] / float(p.cols) + p.eps);
        barrier();
        for (uint i = tid; i < p.cols; i += GROUP) {
            act[y + i] = act[x + i] * inv * uintBitsToFloat(w[p.w_offset / 4u + i]);
        }
        barrier();
    }
}
