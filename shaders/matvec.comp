#version 450
// Decode product for quantized blocks, shaped to read weights at memory
// bandwidth on GPUs: Y[b][r] (+)= sum_c W[r][c] * X[b][c] for batches of
// activation rows, MAX_BATCH at a time, each weight read once per pass.
//
// One subgroup per output row. A row is split into tasks of 32 weights
// (a whole block of the 32-element types; an eighth of a K-quant
// superblock), neighbouring lanes on neighbouring tasks so a subgroup's
// loads cover one contiguous run of the row. Each lane takes its tasks
// two at a time and issues both tasks' loads before using any, so many
// wide loads are in flight per lane (what decode on a GPU is bound by).
// A task's weights come as two runs of 16 (elements `start.x ..` and
// `start.y ..` of the row), each with a scale and an offset:
// w = scale * q + offset, q read as bytes with unpackUnorm4x8 (the 1/255
// folded into the scale). Blocks that are not word-aligned (Q4_0, Q5_0,
// Q8_0, Q6_K) are read as whole words and realigned in registers.
// Activations are read as vec4 (the host takes this kernel only when the
// rows' offsets and strides are multiples of 4). Partial sums meet by
// subgroupAdd. ACCUMULATE (aux0 bit 0) adds the product to what the output
// held: the residual connection, fused.
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "ops_common.glsl"
#include "blocks.glsl"
#include "task.glsl"

#define MAX_BATCH 8u

layout(local_size_x = 128) in;

void main() {
    uint lane = gl_SubgroupInvocationID;
    uint lanes = gl_SubgroupSize;
    uint slot = gl_SubgroupID;
    uint slots = gl_NumSubgroups;
    uint tasks = p.cols / TASK;
    bool accumulate = (p.aux0 & 1u) != 0u;
    for (uint first = gl_WorkGroupID.x * slots; first < p.rows; first += gl_NumWorkGroups.x * slots) {
        uint row = first + slot;
        // Whole subgroups leave together, so subgroupAdd stays uniform.
        if (row >= p.rows) {
            break;
        }
        CHECK(p.w_offset + (row + 1u) * p.row_bytes + 16u <= p.w_words * 4u, FAULT_WEIGHTS)
        uint row_base = p.w_offset + row * p.row_bytes;
        for (uint b0 = 0u; b0 < p.batch; b0 += MAX_BATCH) {
            uint nb = min(MAX_BATCH, p.batch - b0);
            CHECK(p.x_offset + (b0 + nb - 1u) * p.x_stride + p.cols <= p.act_words, FAULT_ACT)
            CHECK(p.y_offset + (b0 + nb - 1u) * p.y_stride + p.rows <= p.act_words, FAULT_ACT)
            uint x4 = (p.x_offset + b0 * p.x_stride) / 4u;
            uint stride4 = p.x_stride / 4u;
            float acc[MAX_BATCH];
            for (uint b = 0u; b < MAX_BATCH; b++) {
                acc[b] = 0.0;
            }
            // Two tasks per lane per pass, both loaded before either is
            // used; a lane past the row's end repeats its last task and
            // adds nothing for it.
            for (uint t = lane; t < tasks; t += 2u * lanes) {
                uint t2 = t + lanes;
                bool second = t2 < tasks;
                Task k1 = load_task(row_base, t);
                Task k2 = load_task(row_base, second ? t2 : t);
                for (uint b = 0u; b < MAX_BATCH; b++) {
                    if (b < nb) {
                        float s = task_dot(k1, load_acts(k1.start, x4 + b * stride4));
                        if (second) {
                            s += task_dot(k2, load_acts(k2.start, x4 + b * stride4));
                        }
                        acc[b] += s;
                    }
                }
            }
            for (uint b = 0u; b < MAX_BATCH; b++) {
                if (b < nb) {
                    float s = subgroupAdd(acc[b]);
                    if (lane == 0u) {
                        uint y = p.y_offset + (b0 + b) * p.y_stride + row;
                        act[y] = accumulate ? act[y] + s : s;
                    }
                }
            }
        }
    }
}
