#version 450
// Rotary position embedding, in place, over `batch` rows of `rows` heads of
// `cols` elements: the first 2 × aux2 elements of each head rotate by the
// angle tables (f32 [position][aux2]) of cos at byte w_offset and sin at
// byte aux1, the position of row b being meta[aux0 + b]. Halves (aux3 = 0)
// pair i with i + aux2; interleaved (aux3 = 1) pair 2i with 2i + 1.
#include "ops_common.glsl"

layout(local_size_x = 64) in;

void main() {
    uint half_dim = p.aux2;
    uint per_row = p.rows * half_dim;
    uint total = p.batch * per_row;
    for (uint t = gl_GlobalInvocationID.x; t < total; t += gl_NumWorkGroups.x * gl_WorkGroupSize.x) {
        uint b = t / per_row;
        uint head = (t % per_row) / half_dim;
        uint i = t % half_dim;
        CHECK(p.aux0 + b < p.meta_words, FAULT_META)
        uint pos = meta[p.aux0 + b];
        uint table = pos * half_dim + i;
        CHECK(p.w_offset / 4u + table < p.w_words && p.aux1 / 4u + table < p.w_words, FAULT_WEIGHTS)
        float c = uintBitsToFloat(w[p.w_offset / 4u + table]);
        float s = uintBitsToFloat(w[p.aux1 / 4u + table]);
        uint base = p.x_offset + b * p.x_stride + head * p.cols;
        uint a = p.aux3 == 0u ? base + i : base + 2u * i;
        uint z = p.aux3 == 0u ? base + i + half_dim : base + 2u * i + 1u;
        CHECK(z < p.act_words, FAULT_ACT)
        float x0 = act[a];
        float x1 = act[z];
        act[a] = x0 * c - x1 * s;
        act[z] = x0 * s + x1 * c;
    }
}
