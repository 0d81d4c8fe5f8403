#version 450
// Decode product for quantized blocks on GPUs, several rows per workgroup:
// Y[b][r] (+)= sum_c W[r][c] * X[b][c], MAX_BATCH activation rows a pass.
//
// A workgroup takes ROWS output rows; its invocations split the columns
// into tasks of 32 weights (a block of the 32-element types, an eighth of
// a K-quant superblock; task.glsl), neighbouring invocations on
// neighbouring tasks. An invocation loads its task of every row first
// (ROWS wide loads in flight), then the task's activations once for all
// the rows: activations are read once per ROWS rows, not once per row,
// which is what keeps a decode product from being bound by the cache
// traffic of re-reading them (on an H100, 1.6x the bandwidth of a row per
// subgroup on Q4_0 and Q8_0, the same on Q4_K). Sums meet by subgroupAdd,
// then across the subgroups in shared memory. ACCUMULATE (aux0 bit 0) adds
// the product to what the output held (the residual connection, fused).
//
// Specialization constants (the host's MatvecShape): ROWS (2, 4 or 8);
// MAX_BATCH, the activation rows a pass takes (1, 2, 4 or 8); the workgroup's
// size (64, 128 or 256);
// INT_DOT (a kernel variant, for devices with VK_KHR_shader_integer_dot_
// product): the activations come rounded to 8 bits, each run of 16 on its
// own scale (quantize.comp, once per input however many products read it;
// x_offset and x_stride then address the rounded copy, in words), so a
// workgroup reads a quarter of the bytes, and the rows' weight bytes meet
// them in packed 4 × 8-bit dot products summed in integers, where the
// float product takes a conversion and a multiply-add per weight. The
// results are what the weights give on the rounded activations (as
// llama.cpp's Q8_1 products), not the exact f32 product. STAGE does not
// apply to it.
// STAGE, which first copies a pass's activations into shared memory with
// coalesced loads (an invocation's own 128 contiguous bytes would
// otherwise make each of its vec4 loads touch 32 cache lines a subgroup),
// stored transposed so that each invocation reads its task back without
// bank conflicts; MAGIC, the exponent trick for quant bytes (task.glsl).
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#ifdef INT_DOT
#extension GL_EXT_integer_dot_product : require
#endif
#include "ops_common.glsl"
#include "blocks.glsl"

layout(constant_id = 0) const uint ROWS = 4u;
layout(constant_id = 1) const bool STAGE = false;
layout(constant_id = 2) const bool MAGIC = false;
layout(constant_id = 3) const uint MAX_BATCH = 4u;
// Invocations per workgroup (64, 128 or 256): constant 4.
layout(local_size_x_id = 4) in;
#define GROUP gl_WorkGroupSize.x

#include "task.glsl"

// Subgroups a workgroup may have: the host takes this kernel only on
// devices whose subgroups have at least 4 invocations.
#define MAX_SUBGROUPS 64u
// vec4s of activations per task, and the staging buffer's pitch between
// the transposed rows (one more than the tasks a pass, so the 8 vec4
// stores of neighbouring invocations fall in different banks).
#define TASK4 (TASK / 4u)
#define PITCH (GROUP + 1u)

shared float sums[ROWS * MAX_BATCH][MAX_SUBGROUPS];
// A pass's activations when STAGE: vec4 v of the pass at
// (v % TASK4) * PITCH + v / TASK4 (one vec4 when not staged).
const uint STAGED = STAGE ? TASK4 * PITCH : 1u;
shared vec4 staged[STAGED];

// Copies the `n4` vec4s of activations from vec4 `from` into `staged`.
void stage(uint from, uint n4) {
    for (uint i = 0u; i < TASK4; i++) {
        uint v = i * GROUP + gl_LocalInvocationID.x;
        if (v < n4) {
            staged[(v % TASK4) * PITCH + v / TASK4] = act4[from + v];
        }
    }
}

// The staged vec4 `v` of the pass.
vec4 staged_at(uint v) {
    return staged[(v % TASK4) * PITCH + v / TASK4];
}

// A task's activations from the staged pass, its runs at `start`
// (elements from the pass's first).
TaskActs staged_acts(uvec2 start) {
    uint a = start.x / 4u;
    uint b = start.y / 4u;
    return TaskActs(staged_at(a), staged_at(a + 1u), staged_at(a + 2u), staged_at(a + 3u),
                    staged_at(b), staged_at(b + 1u), staged_at(b + 2u), staged_at(b + 3u));
}

void main() {
    uint tid = gl_LocalInvocationID.x;
    uint tasks = p.cols / TASK;
    bool accumulate = (p.aux0 & 1u) != 0u;
    for (uint r0 = gl_WorkGroupID.x * ROWS; r0 < p.rows; r0 += gl_NumWorkGroups.x * ROWS) {
        uint last = min(p.rows, r0 + ROWS) - 1u;
        CHECK(p.w_offset + (last + 1u) * p.row_bytes + 16u <= p.w_words * 4u, FAULT_WEIGHTS)
        // Rows past the end repeat the last one and are not written.
        uint base[ROWS];
        for (uint r = 0u; r < ROWS; r++) {
            base[r] = p.w_offset + min(r0 + r, last) * p.row_bytes;
        }
        for (uint b0 = 0u; b0 < p.batch; b0 += MAX_BATCH) {
            uint nb = min(MAX_BATCH, p.batch - b0);
            CHECK(p.x_offset + (b0 + nb - 1u) * p.x_stride + p.cols <= p.act_words, FAULT_ACT)
            CHECK(p.y_offset + (b0 + nb - 1u) * p.y_stride + p.rows <= p.act_words, FAULT_ACT)
            uint x4 = (p.x_offset + b0 * p.x_stride) / 4u;
            uint stride4 = p.x_stride / 4u;
            float acc[ROWS][MAX_BATCH];
            for (uint r = 0u; r < ROWS; r++) {
                for (uint b = 0u; b < MAX_BATCH; b++) {
                    acc[r][b] = 0.0;
                }
            }
            // Passes of GROUP tasks; every invocation runs every pass, so
            // the staging barriers are met in uniform control flow.
            for (uint t0 = 0u; t0 < tasks; t0 += GROUP) {
                uint t = t0 + tid;
                bool live = t < tasks;
                Task k[ROWS];
                if (live) {
                    for (uint r = 0u; r < ROWS; r++) {
                        k[r] = load_task(base[r], t);
                    }
                }
                for (uint b = 0u; b < MAX_BATCH; b++) {
#ifdef INT_DOT
                    if (b < nb && live) {
                        TaskActs8 x8 = load_acts8(k[0].start, p.x_offset + (b0 + b) * p.x_stride);
                        for (uint r = 0u; r < ROWS; r++) {
                            acc[r][b] += task_dot8(k[r], x8);
                        }
                    }
#else
                    if (b < nb) {
                        TaskActs x;
                        if (STAGE) {
                            barrier();
                            stage(x4 + b * stride4 + t0 * TASK4, min(GROUP, tasks - t0) * TASK4);
                            barrier();
                            if (live) {
                                x = staged_acts(k[0].start - TASK * t0);
                            }
                        } else if (live) {
                            x = load_acts(k[0].start, x4 + b * stride4);
                        }
                        if (live) {
                            for (uint r = 0u; r < ROWS; r++) {
                                acc[r][b] += task_dot(k[r], x);
                            }
                        }
                    }
#endif
                }
            }
            for (uint r = 0u; r < ROWS; r++) {
                for (uint b = 0u; b < MAX_BATCH; b++) {
                    if (b < nb) {
                        float s = subgroupAdd(acc[r][b]);
                        if (subgroupElect()) {
                            sums[r * MAX_BATCH + b][gl_SubgroupID] = s;
                        }
                    }
                }
            }
            barrier();
            if (tid < ROWS * MAX_BATCH) {
                uint r = tid / MAX_BATCH;
                uint b = tid % MAX_BATCH;
                if (b < nb && r0 + r <= last) {
                    float s = 0.0;
                    for (uint g = 0u; g < gl_NumSubgroups; g++) {
                        s += sums[tid][g];
                    }
                    uint y = p.y_offset + (b0 + b) * p.y_stride + r0 + r;
                    act[y] = accumulate ? act[y] + s : s;
                }
            }
            barrier();
        }
    }
}
