#version 450
// Gated linear unit: y = act(gate) * up over `batch` rows of `cols`, gate at
// x_offset and up at aux0 (both with stride x_stride), y at y_offset
// (y_stride); act is silu (aux1 0: SwiGLU) or GELU's tanh approximation
// (aux1 1: GeGLU), written as g·σ(2u) with u = √(2/π)(g + 0.044715 g³), so
// nothing overflows for large |g|.
//
// ROUND (swiglu_round) also writes the rows rounded to 8 bits for the
// integer-dot products that read them, as quantize.comp would in a
// dispatch of its own (row b's copy at word aux2 + b * aux3): one
// invocation per run of 16 outputs.
#include "ops_common.glsl"
#ifdef ROUND
#include "round8.glsl"
layout(std430, set = 0, binding = 1) buffer ActivationWords4 { uvec4 actw4[]; };
#endif

layout(local_size_x = 64) in;

// Whether element `i` of row `b` lies within the activations (gate, up
// and output).
bool inside(uint b, uint i) {
    return p.x_offset + b * p.x_stride + i < p.act_words
        && p.aux0 + b * p.x_stride + i < p.act_words
        && p.y_offset + b * p.y_stride + i < p.act_words;
}

// The gated unit of element `i` of row `b`, written to y and returned.
float gated(uint b, uint i) {
    uint g = p.x_offset + b * p.x_stride + i;
    uint u = p.aux0 + b * p.x_stride + i;
    uint y = p.y_offset + b * p.y_stride + i;
    float gate = act[g];
    float z = p.aux1 == 1u ? 1.5957691 * gate * (1.0 + 0.044715 * gate * gate) : gate;
    float v = gate / (1.0 + exp(-z)) * act[u];
    act[y] = v;
    return v;
}

#ifdef ROUND
void main() {
    uint runs = p.cols / 16u;
    uint total = p.batch * runs;
    for (uint t = gl_GlobalInvocationID.x; t < total; t += gl_NumWorkGroups.x * gl_WorkGroupSize.x) {
        uint b = t / runs;
        uint r = t % runs;
        // The run's last element is its furthest, in each of the three.
        CHECK(inside(b, 16u * r + 15u), FAULT_ACT)
        vec4 x[4];
        for (uint j = 0u; j < 4u; j++) {
            uint i = 16u * r + 4u * j;
            x[j] = vec4(gated(b, i), gated(b, i + 1u), gated(b, i + 2u), gated(b, i + 3u));
        }
        uint copy = p.aux2 + b * p.aux3;
        CHECK(copy + 5u * runs <= p.act_words, FAULT_ACT)
        float scale;
        actw4[copy / 4u + r] = round_run(x[0], x[1], x[2], x[3], scale);
        act[copy + 4u * runs + r] = scale;
    }
}
#else
void main() {
    uint total = p.batch * p.cols;
    for (uint t = gl_GlobalInvocationID.x; t < total; t += gl_NumWorkGroups.x * gl_WorkGroupSize.x) {
        CHECK(inside(t / p.cols, t % p.cols), FAULT_ACT)
        gated(t / p.cols, t % p.cols);
    }
}
#endif
