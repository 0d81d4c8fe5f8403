#version 450
// RMSNorm: y = x / sqrt(mean(x²) + eps) * g for each of `batch` rows of
// `cols`, with the gains g as f32 at byte w_offset; with aux0 set, LayerNorm
// without a bias (Cohere's): y = (x - mean) / sqrt(var + eps) * g, the
// variance summed over the centred values in a second pass over the row. One workgroup per row,
// as wide as the device allows up to 512 invocations (specialization
// constant 0, a power of two): a decode step has one row, so the row's
// reads must be spread over many invocations, each with several loads in
// flight, or the norm waits on one load at a time (64 invocations took
// 32 µs a row of 4,096 on an H200).
//
// ROUND (rms_norm_round) also writes the normed rows rounded to 8 bits for
// the integer-dot products that read them, as quantize.comp would in a
// dispatch of its own: row b's copy at word aux2 + b * aux3.
#include "ops_common.glsl"
#ifdef ROUND
#include "round8.glsl"
layout(std430, set = 0, binding = 1) buffer Activations4 { vec4 act4[]; };
layout(std430, set = 0, binding = 1) buffer ActivationWords4 { uvec4 actw4[]; };
#endif

layout(local_size_x_id = 0) in;
#define GROUP gl_WorkGroupSize.x
// Loads each invocation issues before it uses any.
#define UNROLL 8u
shared float partial[1024];

// The workgroup's sum of each invocation's `value`, in every invocation.
float workgroup_sum(float value, uint tid) {
    partial[tid] = value;
    barrier();
    for (uint s = GROUP / 2u; s > 0u; s >>= 1u) {
        if (tid < s) {
            partial[tid] += partial[tid + s];
        }
        barrier();
    }
    float total = partial[0];
    barrier();
    return total;
}

void main() {
    uint tid = gl_LocalInvocationID.x;
    CHECK(p.w_offset / 4u + p.cols <= p.w_words, FAULT_WEIGHTS)
    uint g = p.w_offset / 4u;
    bool centered = p.aux0 != 0u;
    for (uint b = gl_WorkGroupID.x; b < p.batch; b += gl_NumWorkGroups.x) {
        uint x = p.x_offset + b * p.x_stride;
        uint y = p.y_offset + b * p.y_stride;
        CHECK(x + p.cols <= p.act_words && y + p.cols <= p.act_words, FAULT_ACT)
        float mean = 0.0;
        if (centered) {
            float sum = 0.0;
            for (uint i = tid; i < p.cols; i += GROUP) {
                sum += act[x + i];
            }
            mean = workgroup_sum(sum, tid) / float(p.cols);
        }
        float sum = 0.0;
        for (uint i0 = 0u; i0 < p.cols; i0 += UNROLL * GROUP) {
            float v[UNROLL];
            for (uint u = 0u; u < UNROLL; u++) {
                uint i = i0 + u * GROUP + tid;
                v[u] = i < p.cols ? act[x + i] - mean : 0.0;
            }
            for (uint u = 0u; u < UNROLL; u++) {
                sum += v[u] * v[u];
            }
        }
        float total = workgroup_sum(sum, tid);
        float inv = inversesqrt(total / float(p.cols) + p.eps);
        for (uint i0 = 0u; i0 < p.cols; i0 += UNROLL * GROUP) {
            float v[UNROLL];
            float gain[UNROLL];
            for (uint u = 0u; u < UNROLL; u++) {
                uint i = i0 + u * GROUP + tid;
                v[u] = i < p.cols ? act[x + i] : 0.0;
                gain[u] = i < p.cols ? uintBitsToFloat(w[g + i]) : 0.0;
            }
            for (uint u = 0u; u < UNROLL; u++) {
                uint i = i0 + u * GROUP + tid;
                if (i < p.cols) {
                    act[y + i] = (v[u] - mean) * inv * gain[u];
                }
            }
        }
#ifdef ROUND
        // The row's runs of 16, read back once the workgroup wrote them.
        memoryBarrierBuffer();
        barrier();
        uint runs = p.cols / 16u;
        uint copy = p.aux2 + b * p.aux3;
        CHECK(copy + 5u * runs <= p.act_words, FAULT_ACT)
        for (uint r = tid; r < runs; r += GROUP) {
            uint at = y / 4u + 4u * r;
            float scale;
            uvec4 q = round_run(act4[at], act4[at + 1u], act4[at + 2u], act4[at + 3u], scale);
            actw4[copy / 4u + r] = q;
            act[copy + 4u * runs + r] = scale;
        }
#endif
        barrier();
    }
}
