#version 450
// Y[b][r] = sum_c W[r][c] * X[b][c] for up to MAX_BATCH activation rows at
// once, so each weight row is read once for all of them (decode is bound by
// the bytes of the weights). One workgroup per output row; each invocation
// dequantizes whole blocks in registers and the workgroup sums in shared
// memory. The block type is a define: F32, F16, Q4_0, Q4_1, Q8_0.
#include "ops_common.glsl"

#define GROUP 64u
#define MAX_BATCH 8u

layout(local_size_x = 64) in;

shared float partial[MAX_BATCH][GROUP];

#if defined(F32)
#define BLOCK_ELEMS 1u
#define BLOCK_BYTES 4u
#elif defined(F16)
#define BLOCK_ELEMS 1u
#define BLOCK_BYTES 2u
#elif defined(Q4_0)
#define BLOCK_ELEMS 32u
#define BLOCK_BYTES 18u
#elif defined(Q4_1)
#define BLOCK_ELEMS 32u
#define BLOCK_BYTES 20u
#elif defined(Q8_0)
#define BLOCK_ELEMS 32u
#define BLOCK_BYTES 34u
#endif

// Element `e` of the block at byte `base`.
float weight(uint base, uint e) {
#if defined(F32)
    return uintBitsToFloat(w[base >> 2u]);
#elif defined(F16)
    return half_at(base);
#elif defined(Q4_0)
    uint q = byte_at(base + 2u + (e & 15u));
    q = e < 16u ? (q & 15u) : (q >> 4u);
    return half_at(base) * (float(q) - 8.0);
#elif defined(Q4_1)
    uint q = byte_at(base + 4u + (e & 15u));
    q = e < 16u ? (q & 15u) : (q >> 4u);
    return half_at(base) * float(q) + half_at(base + 2u);
#elif defined(Q8_0)
    return half_at(base) * float(int8_at(base + 2u + e));
#endif
}

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
                for (uint e = 0u; e < BLOCK_ELEMS; e++) {
                    float v = weight(base, e);
                    uint c = blk * BLOCK_ELEMS + e;
                    for (uint b = 0u; b < nb; b++) {
                        acc[b] += v * act[p.x_offset + (b0 + b) * p.x_stride + c];
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
