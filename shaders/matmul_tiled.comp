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
//
// With COOPMAT the same tiles are staged in f16 and multiplied as
// cooperative matrices (VK_KHR_cooperative_matrix): the tile's CM × CN
// pieces are split among the workgroup's subgroups, each summing its
// pieces over KC / CK multiply-adds of CM × CK weights by CK × CN
// activations, in f32. The shape is the host's choice among those the
// device lists (specialization constants).
#ifdef COOPMAT
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_shader_subgroup_basic : require
#endif
#include "ops_common.glsl"
#include "blocks.glsl"

#define GROUP 64u
#define TR 64u   // output rows per tile (one per invocation while loading)
#define TB 32u   // activation rows per tile
#define KC 32u   // columns per step: within one sub-block of every type
#define RI 8u    // output rows per invocation (TR / RI invocations apart)
#define BJ 4u    // activation rows per invocation (GROUP / (TR / RI) apart)

layout(local_size_x = 64) in;

#ifdef COOPMAT
layout(constant_id = 0) const uint CM = 16u;  // output rows per multiply
layout(constant_id = 1) const uint CN = 16u;  // activation rows per multiply
layout(constant_id = 2) const uint CK = 16u;  // columns per multiply
// Subgroups the workgroup has at least (64 / the widest subgroup); the
// host picks a shape whose pieces split evenly among them.
layout(constant_id = 3) const uint SUBGROUPS = 4u;
const uint PIECES = (TR / CM) * (TB / CN) / SUBGROUPS;  // per subgroup

// Where this subgroup's piece `i` starts in the tile: its first output
// row and first activation row.
uvec2 piece_at(uint i) {
    uint piece = gl_SubgroupID * PIECES + i;
    return uvec2((piece % (TR / CM)) * CM, (piece / (TR / CM)) * CN);
}
#define ELEM float16_t
// Rows 40 halves apart: 80 bytes, a multiple of the 16 that cooperative
// loads may want.
#define WS (KC + 8u)
// The output tile, column-major (an activation row's outputs together).
shared float cs[TB * TR];
#else
#define ELEM float
// Rows padded by one, so an invocation per row writes distinct banks.
#define WS (KC + 1u)
#endif
shared ELEM ws[TR * WS];
shared ELEM xs[TB * WS];

void main() {
    uint tid = gl_LocalInvocationID.x;
    uint rg = tid / (TB / BJ);   // output rows rg + 8 i
    uint bg = tid % (TB / BJ);   // activation rows bg + 8 j
    uint blocks = p.cols / BLOCK_ELEMS;
    // ACCUMULATE (aux0 bit 0): add the product to what the output held.
    bool accumulate = (p.aux0 & 1u) != 0u;
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
#ifdef COOPMAT
        coopmat<float, gl_ScopeSubgroup, CM, CN, gl_MatrixUseAccumulator> acc[PIECES];
        for (uint i = 0u; i < PIECES; i++) {
            acc[i] = coopmat<float, gl_ScopeSubgroup, CM, CN, gl_MatrixUseAccumulator>(0.0);
        }
#else
        float acc[RI][BJ];
        for (uint i = 0u; i < RI; i++) {
            for (uint j = 0u; j < BJ; j++) {
                acc[i][j] = 0.0;
            }
        }
#endif
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
                    ws[tid * WS + k] = ELEM(v.x);
                    ws[tid * WS + k + 1u] = ELEM(v.y);
                    ws[tid * WS + k + 2u] = ELEM(v.z);
                    ws[tid * WS + k + 3u] = ELEM(v.w);
                }
#else
                for (uint k = 0u; k < KC; k++) {
                    float v = 0.0;
                    if (k < kn) {
                        uint c = k0 + k;
                        uint base = row_base + (c / BLOCK_ELEMS) * BLOCK_BYTES;
                        v = so.x * quant(base, c % BLOCK_ELEMS) + so.y;
                    }
                    ws[tid * WS + k] = ELEM(v);
                }
#endif
            } else {
                for (uint k = 0u; k < KC; k++) {
                    ws[tid * WS + k] = ELEM(0.0);
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
                xs[b * WS + k] = ELEM(x);
            }
            barrier();
#ifdef COOPMAT
            // Subgroup-uniform: a whole subgroup takes part or none does.
            if (gl_SubgroupID < SUBGROUPS) {
                for (uint kk = 0u; kk < KC; kk += CK) {
                    for (uint i = 0u; i < PIECES; i++) {
                        uvec2 at = piece_at(i);
                        coopmat<float16_t, gl_ScopeSubgroup, CM, CK, gl_MatrixUseA> a;
                        coopmat<float16_t, gl_ScopeSubgroup, CK, CN, gl_MatrixUseB> x;
                        // W rows are A's rows; X rows are B's columns.
                        coopMatLoad(a, ws, at.x * WS + kk, WS, gl_CooperativeMatrixLayoutRowMajor);
                        coopMatLoad(x, xs, at.y * WS + kk, WS, gl_CooperativeMatrixLayoutColumnMajor);
                        acc[i] = coopMatMulAdd(a, x, acc[i]);
                    }
                }
            }
#else
            for (uint k = 0u; k < KC; k++) {
                float wv[RI];
                for (uint i = 0u; i < RI; i++) {
                    wv[i] = ws[(rg + (TR / RI) * i) * WS + k];
                }
                for (uint j = 0u; j < BJ; j++) {
                    float x = xs[(bg + (TB / BJ) * j) * WS + k];
                    for (uint i = 0u; i < RI; i++) {
                        acc[i][j] += wv[i] * x;
                    }
                }
            }
#endif
            barrier();
        }
#ifdef COOPMAT
        if (gl_SubgroupID < SUBGROUPS) {
            for (uint i = 0u; i < PIECES; i++) {
                uvec2 at = piece_at(i);
                coopMatStore(acc[i], cs, at.y * TR + at.x, TR, gl_CooperativeMatrixLayoutColumnMajor);
            }
        }
        barrier();
        // Neighbouring invocations on neighbouring output rows.
        for (uint i = tid; i < TR * TB; i += GROUP) {
            uint r = i % TR;
            uint b = i / TR;
            if (r < nr && b < nb) {
                uint y = p.y_offset + (b0 + b) * p.y_stride + r0 + r;
                act[y] = accumulate ? act[y] + cs[i] : cs[i];
            }
        }
        barrier();
#else
        for (uint i = 0u; i < RI; i++) {
            uint r = rg + (TR / RI) * i;
            for (uint j = 0u; j < BJ; j++) {
                uint b = bg + (TB / BJ) * j;
                if (r < nr && b < nb) {
                    uint y = p.y_offset + (b0 + b) * p.y_stride + r0 + r;
                    act[y] = accumulate ? act[y] + acc[i][j] : acc[i][j];
                }
            }
        }
#endif
    }
}
