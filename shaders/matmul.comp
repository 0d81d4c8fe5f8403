#version 450
// Decode product: Y[b][r] = sum_c W[r][c] * X[b][c] for up to MAX_BATCH
// activation rows at once, so each weight row is read once for all of them
// (decode is bound by the bytes of the weights). The host takes the tiled
// kernel (matmul_tiled.comp) for larger batches.
//
// Several output rows per workgroup, so that short rows (576 columns are 18
// Q4 blocks) still keep every invocation busy: the invocations of a row
// split it into chunks of CHUNK elements (a block's elements as well as its
// blocks), neighbouring invocations on neighbouring chunks. Each chunk lies
// within one sub-block, so its scale is decoded once and then only quants,
// four at a time (quant4).
// The row's partial sums are added by subgroupAdd in the SUBGROUP variant
// (one subgroup per row, no barrier), else 4 rows of 16 invocations each
// meet in shared memory behind one barrier. The block type is a define
// (blocks.glsl). ACCUMULATE (aux0 bit 0) adds the product to what the
// output held (the residual connection, fused).
#ifdef SUBGROUP
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif
#include "ops_common.glsl"
#include "blocks.glsl"

#define GROUP 64u
#define MAX_BATCH 8u

#if defined(F32) || defined(F16)
#define CHUNK 1u
#elif defined(Q2_K) || defined(Q3_K) || defined(Q4_K) || defined(Q5_K) || defined(Q6_K) || defined(IQ4_XS)
#define CHUNK 16u
#else
#define CHUNK 8u
#endif

layout(local_size_x = 64) in;

#ifndef SUBGROUP
// Rows per workgroup, and invocations per row.
#define SLOTS 4u
#define LANES 16u
shared float partial[MAX_BATCH][GROUP];
#endif

void main() {
    uint tid = gl_LocalInvocationID.x;
#ifdef SUBGROUP
    // One row per subgroup. The place among the subgroup's active
    // invocations and their number, so partial subgroups stay right.
    uint lane = subgroupExclusiveAdd(1u);
    uint lanes = subgroupAdd(1u);
    uint slot = gl_SubgroupID;
    uint slots = gl_NumSubgroups;
#else
    uint lane = tid % LANES;
    uint lanes = LANES;
    uint slot = tid / LANES;
    uint slots = SLOTS;
#endif
    uint blocks = p.cols / BLOCK_ELEMS;
    bool accumulate = (p.aux0 & 1u) != 0u;
    uint items = p.cols / CHUNK;
    uint per_block = BLOCK_ELEMS / CHUNK;
    // Every invocation runs the same iterations (the checks and barriers
    // stay uniform); rows past the end just add nothing.
    for (uint first = gl_WorkGroupID.x * slots; first < p.rows; first += gl_NumWorkGroups.x * slots) {
        uint row = first + slot;
        bool live = row < p.rows;
        uint last = min(p.rows, first + slots) - 1u;
        CHECK(p.w_offset + last * p.row_bytes + blocks * BLOCK_BYTES <= p.w_words * 4u, FAULT_WEIGHTS)
        uint row_base = p.w_offset + row * p.row_bytes;
        for (uint b0 = 0u; b0 < p.batch; b0 += MAX_BATCH) {
            uint nb = min(MAX_BATCH, p.batch - b0);
            CHECK(p.x_offset + (b0 + nb - 1u) * p.x_stride + p.cols <= p.act_words, FAULT_ACT)
            CHECK(p.y_offset + (b0 + nb - 1u) * p.y_stride + p.rows <= p.act_words, FAULT_ACT)
            float acc[MAX_BATCH];
            for (uint b = 0u; b < MAX_BATCH; b++) {
                acc[b] = 0.0;
            }
            if (live) {
                for (uint it = lane; it < items; it += lanes) {
                    uint e0 = (it % per_block) * CHUNK;
                    uint base = row_base + (it / per_block) * BLOCK_BYTES;
                    vec2 so = sub_scale(base, e0 / SUB_ELEMS);
                    uint x0 = p.x_offset + b0 * p.x_stride + it * CHUNK;
#ifdef QUANT4
                    for (uint e = 0u; e < CHUNK; e += 4u) {
                        vec4 v = so.x * quant4(base, e0 + e) + so.y;
                        // A constant trip count unrolls, so `acc` stays in
                        // registers (a dynamic index would spill it).
                        for (uint b = 0u; b < MAX_BATCH; b++) {
                            if (b < nb) {
                                uint x = x0 + b * p.x_stride + e;
                                acc[b] += dot(v, vec4(act[x], act[x + 1u], act[x + 2u], act[x + 3u]));
                            }
                        }
                    }
#else
                    for (uint e = 0u; e < CHUNK; e++) {
                        float v = so.x * quant(base, e0 + e) + so.y;
                        for (uint b = 0u; b < MAX_BATCH; b++) {
                            if (b < nb) {
                                acc[b] += v * act[x0 + b * p.x_stride + e];
                            }
                        }
                    }
#endif
                }
            }
#ifdef SUBGROUP
            for (uint b = 0u; b < MAX_BATCH; b++) {
                if (b < nb) {
                    float s = subgroupAdd(acc[b]);
                    if (live && lane == 0u) {
                        uint y = p.y_offset + (b0 + b) * p.y_stride + row;
                        act[y] = accumulate ? act[y] + s : s;
                    }
                }
            }
#else
            for (uint b = 0u; b < MAX_BATCH; b++) {
                partial[b][tid] = acc[b];
            }
            barrier();
            // Invocation `lane` of a row adds up activation row `lane`.
            if (live && lane < nb) {
                float s = 0.0;
                for (uint i = 0u; i < LANES; i++) {
                    s += partial[lane][slot * LANES + i];
                }
                uint y = p.y_offset + (b0 + lane) * p.y_stride + row;
                act[y] = accumulate ? act[y] + s : s;
            }
            barrier();
#endif
        }
    }
}
