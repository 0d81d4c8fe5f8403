#version 450
// Y[b][r] = sum_c W[r][c] * X[b][c] for up to MAX_BATCH activation rows at
// once, so each weight row is read once for all of them (decode is bound by
// the bytes of the weights). One workgroup per output row; each invocation
// dequantizes whole blocks in registers and the workgroup sums in shared
// memory. The block type is a define (blocks.glsl).
#include "ops_common.glsl"
#include "blocks.glsl"

#define GROUP 64u
#define MAX_BATCH 8u

layout(local_size_x = 64) in;

shared float partial[MAX_BATCH][GROUP];

void main() {
    uint tid = gl_LocalInvocationID.x;
    uint blocks = p.cols / BLOCK_ELEMS;
    for (uint row = gl_WorkGroupID.x; row < p.rows; row += gl_NumWorkGroups.x) {
        uint row_base = p.w_offset + row * p.row_bytes;
        CHECK(row_base + blocks * BLOCK_BYTES <= p.w_words * 4u, FAULT_WEIGHTS)
        for (uint b0 = 0u; b0 < p.batch; b0 += MAX_BATCH) {
            uint nb = min(MAX_BATCH, p.batch - b0);
            CHECK(p.x_offset + (b0 + nb - 1u) * p.x_stride + p.cols <= p.act_words, FAULT_ACT)
            CHECK(p.y_offset + (b0 + nb - 1u) * p.y_stride + p.rows <= p.act_words, FAULT_ACT)
            float acc[MAX_BATCH];
            for (uint b = 0u; b < MAX_BATCH; b++) {
                acc[b] = 0.0;
            }
            for (uint blk = tid; blk < blocks; blk += GROUP) {
                uint base = row_base + blk * BLOCK_BYTES;
                for (uint j = 0u; j < BLOCK_ELEMS / SUB_ELEMS; j++) {
                    vec2 so = sub_scale(base, j);
                    for (uint e = j * SUB_ELEMS; e < (j + 1u) * SUB_ELEMS; e++) {
                        float v = so.x * quant(base, e) + so.y;
                        uint c = blk * BLOCK_ELEMS + e;
                        // A constant trip count unrolls, so `acc` stays in
                        // registers (a dynamic index would spill it).
                        for (uint b = 0u; b < MAX_BATCH; b++) {
                            if (b < nb) {
                                acc[b] += v * act[p.x_offset + (b0 + b) * p.x_stride + c];
                            }
                        }
                    }
                }
            }
            for (uint b = 0u; b < MAX_BATCH; b++) {
                partial[b][tid] = acc[b];
            }
            barrier();
            for (uint s = GROUP / 2u; s > 0u; s >>= 1u) {
                if (tid < s) {
                    for (uint b = 0u; b < MAX_BATCH; b++) {
                        partial[b][tid] += partial[b][tid + s];
                    }
                }
                barrier();
            }
            if (tid == 0u) {
                for (uint b = 0u; b < nb; b++) {
                    act[p.y_offset + (b0 + b) * p.y_stride + row] = partial[b][0];
                }
            }
            barrier();
        }
    }
}
