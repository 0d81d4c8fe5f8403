#version 450
// Gated linear unit: y = act(gate) * up over `batch` rows of `cols`, gate at
// x_offset and up at aux0 (both with stride x_stride), y at y_offset
// (y_stride); act is silu (aux1 0: SwiGLU) or GELU's tanh approximation
// (aux1 1: GeGLU), written as g·σ(2u) with u = √(2/π)(g + 0.044715 g³), so
// nothing overflows for large |g|.
#include "ops_common.glsl"

layout(local_size_x = 64) in;

void main() {
    uint total = p.batch * p.cols;
    for (uint t = gl_GlobalInvocationID.x; t < total; t += gl_NumWorkGroups.x * gl_WorkGroupSize.x) {
        uint b = t / p.cols;
        uint i = t % p.cols;
        uint g = p.x_offset + b * p.x_stride + i;
        uint u = p.aux0 + b * p.x_stride + i;
        uint y = p.y_offset + b * p.y_stride + i;
        CHECK(g < p.act_words && u < p.act_words && y < p.act_words, FAULT_ACT)
        float gate = act[g];
        float z = p.aux1 == 1u ? 1.5957691 * gate * (1.0 + 0.044715 * gate * gate) : gate;
        act[y] = gate / (1.0 + exp(-z)) * act[u];
    }
}
