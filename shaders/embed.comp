#version 450
// The embedding lookup: row meta[aux0 + b] of the `rows` × `cols` matrix at
// byte w_offset (GGML type aux1, rows of row_bytes), dequantized into the
// activation row b at y_offset (y_stride), times `eps` (the op's scale). A
// token id out of range is a fault (the host validates ids first). One
// workgroup per batch row.
#include "ops_common.glsl"
#include "blocks.glsl"

layout(local_size_x = 64) in;

void main() {
    uint elems = block_elems_of(p.aux1);
    uint bytes = block_bytes_of(p.aux1);
    for (uint b = gl_WorkGroupID.x; b < p.batch; b += gl_NumWorkGroups.x) {
        CHECK(p.aux0 + b < p.meta_words, FAULT_META)
        uint token = meta[p.aux0 + b];
        CHECK(token < p.rows, FAULT_TOKEN)
        uint row = p.w_offset + token * p.row_bytes;
        CHECK(row + p.row_bytes <= p.w_words * 4u, FAULT_WEIGHTS)
        uint y = p.y_offset + b * p.y_stride;
        CHECK(y + p.cols <= p.act_words, FAULT_ACT)
        for (uint i = gl_LocalInvocationID.x; i < p.cols; i += gl_WorkGroupSize.x) {
            act[y + i] = weight_of(p.aux1, row + (i / elems) * bytes, i % elems) * p.eps;
        }
    }
}
