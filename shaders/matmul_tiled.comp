#version 450
// Prefill product: Y[b][r] = sum_c W[r][c] * X[b][c] for batches larger
// than the decode kernel's (matmul.comp). One workgroup computes a tile of
// TR output rows × TB activation rows, KC columns at a time: each
// invocation dequantizes KC weights of one row into shared memory (one
// scale decode, since KC never crosses a sub-block) and the workgroup
// stages the TB × KC activations beside them; then every invocation adds
// 8 rows × 4 activation rows of products from shared memory. So each
// weight is dequantized once per TB activation rows, and each activation
// read once per TR output rows. The block type is a define (blocks.glsl).
#include "ops_common.glsl"
#include "blocks.glsl"

#define GROUP 64u
#define TR 64u   // output rows per tile (one per invocation while loading)
#define TB 32u   // activation rows per tile
#define KC 32u   // columns per step: within one sub-block of every type
#define RI 8u    // output rows per invocation (TR / RI invocations apart)
#define BJ 4u    // activation rows per invocation (GROUP / (TR / RI) apart)

layout(local_size_x = 64) in;

// Rows padded by one, so an invocation per row writes distinct banks.
shared float ws[TR][KC + 1u];
shared float xs[TB][KC + 1u];

void main() {
    uint tid = gl_LocalInvocationID.x;
    uint rg = tid / (TB / BJ);   // output rows rg + 8 i
    uint bg = tid % (TB / BJ);   // activation rows bg + 8 j
    uint blocks = p.cols / BLOCK_ELEMS;
    uint row_tiles = (p.rows + TR - 1u) / TR;
    uint tiles = row_tiles * ((p.batch + TB - 1u) / TB);
    for (uint tile = gl_WorkGroupID.x; tile < tiles; tile += gl_NumWorkGroups.x) {
        uint r0 = (tile % row_tiles) * TR;
        uint b0 = (tile / row_tiles) * TB;
        uint nr = min(TR, p.rows - r0);
        uint nb = min(TB, p.batch - b0);
        CHECK(p.w_offset + (r0 + nr - 1u) * p.row_bytes + blocks * BLOCK_BYTES <= p.w_words * 4u, FAULT_WEIGHTS)
        CHECK(p.x_offset + (b0 + nb - 1u) * p.x_stride + p.cols <= p.act_words, FAULT_ACT)
        CHECK(p.y_offset + (b0 + nb - 1u) * p.y_stride + p.rows <= p.act_words, FAULT_ACT)
        float acc[RI][BJ];
        for (uint i = 0u; i < RI; i++) {
            for (uint j = 0u; j < BJ; j++) {
                acc[i][j] = 0.0;
            }
        }
        uint row_base = p.w_offset + (r0 + tid) * p.row_bytes;
        for (uint k0 = 0u; k0 < p.cols; k0 += KC) {
            // Weights: invocation `tid` dequantizes row r0 + tid.
            uint kn = min(KC, p.cols - k0);
            if (tid < nr) {
                uint e0 = k0 % BLOCK_ELEMS;
                vec2 so = sub_scale(row_base + (k0 / BLOCK_ELEMS) * BLOCK_BYTES, e0 / SUB_ELEMS);
#ifdef QUANT4
                // Quantized columns come in whole blocks of 32 or 256, so
                // the step is one block (or within one) and never partial.
                uint base = row_base + (k0 / BLOCK_ELEMS) * BLOCK_BYTES;
                for (uint k = 0u; k < KC; k += 4u) {
                    vec4 v = so.x * quant4(base, e0 + k) + so.y;
                    ws[tid][k] = v.x;
                    ws[tid][k + 1u] = v.y;
                    ws[tid][k + 2u] = v.z;
                    ws[tid][k + 3u] = v.w;
                }
#else
                for (uint k = 0u; k < KC; k++) {
                    float v = 0.0;
                    if (k < kn) {
                        uint c = k0 + k;
                        uint base = row_base + (c / BLOCK_ELEMS) * BLOCK_BYTES;
                        v = so.x * quant(base, c % BLOCK_ELEMS) + so.y;
                    }
                    ws[tid][k] = v;
                }
#endif
            } else {
                for (uint k = 0u; k < KC; k++) {
                    ws[tid][k] = 0.0;
                }
            }
            // Activations: neighbouring invocations on neighbouring columns.
            for (uint i = tid; i < TB * KC; i += GROUP) {
                uint b = i / KC;
                uint k = i % KC;
                float x = 0.0;
                if (b < nb && k < kn) {
                    x = act[p.x_offset + (b0 + b) * p.x_stride + k0 + k];
                }
                xs[b][k] = x;
            }
            barrier();
            for (uint k = 0u; k < KC; k++) {
                float wv[RI];
                for (uint i = 0u; i < RI; i++) {
                    wv[i] = ws[rg + (TR / RI) * i][k];
                }
                for (uint j = 0u; j < BJ; j++) {
                    float x = xs[bg + (TB / BJ) * j][k];
                    for (uint i = 0u; i < RI; i++) {
                        acc[i][j] += wv[i] * x;
                    }
                }
            }
            barrier();
        }
        for (uint i = 0u; i < RI; i++) {
            uint r = rg + (TR / RI) * i;
            for (uint j = 0u; j < BJ; j++) {
                uint b = bg + (TB / BJ) * j;
                if (r < nr && b < nb) {
                    act[p.y_offset + (b0 + b) * p.y_stride + r0 + r] = acc[i][j];
                }
            }
        }
    }
}
