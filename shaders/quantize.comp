#version 450
// Rounds `batch` rows of `cols` activations (from element x_offset,
// x_stride apart; both multiples of 4, `cols` of 32) to 8 bits for the
// integer-dot GPU decode product, once for every product that reads them
// (where each of that product's workgroups would otherwise read the f32
// rows and round them again). Row b's copy starts at word
// y_offset + b * y_stride (a multiple of 4): cols / 4 words of signed
// bytes, then cols / 16 scales (f32), one per run of 16 (round8.glsl).
// One invocation per run.
#include "ops_common.glsl"
#include "round8.glsl"

layout(local_size_x = 64) in;
// The activations again, as vec4 to read and as words to write.
layout(std430, set = 0, binding = 1) buffer Activations4 { vec4 act4[]; };
layout(std430, set = 0, binding = 1) buffer ActivationWords4 { uvec4 actw4[]; };

void main() {
    uint runs = p.cols / 16u;
    uint total = p.batch * runs;
    CHECK(p.batch == 0u || p.x_offset + (p.batch - 1u) * p.x_stride + p.cols <= p.act_words, FAULT_ACT)
    CHECK(p.batch == 0u || p.y_offset + (p.batch - 1u) * p.y_stride + 5u * runs <= p.act_words, FAULT_ACT)
    for (uint i = gl_GlobalInvocationID.x; i < total; i += gl_NumWorkGroups.x * 64u) {
        uint b = i / runs;
        uint r = i % runs;
        uint x = (p.x_offset + b * p.x_stride) / 4u + 4u * r;
        float scale;
        uvec4 q = round_run(act4[x], act4[x + 1u], act4[x + 2u], act4[x + 3u], scale);
        uint y = p.y_offset + b * p.y_stride;
        actw4[y / 4u + r] = q;
        act[y + 4u * runs + r] = scale;
    }
}
