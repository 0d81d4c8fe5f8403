#version 450
// The residual add: y += x over `batch` rows of `cols`.
#include "ops_common.glsl"

layout(local_size_x = 64) in;

void main() {
    uint total = p.batch * p.cols;
    for (uint t = gl_GlobalInvocationID.x; t < total; t += gl_NumWorkGroups.x * gl_WorkGroupSize.x) {
        uint b = t / p.cols;
        uint i = t % p.cols;
        uint x = p.x_offset + b * p.x_stride + i;
        uint y = p.y_offset + b * p.y_stride + i;
        CHECK(x < p.act_words && y < p.act_words, FAULT_ACT)
        act[y] += act[x];
    }
}
