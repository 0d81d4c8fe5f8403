#version 450
// Combines the partial softmax states of a split decode (attention.comp)
// into normalised outputs. Each merge entry is one query vector: its output
// row and query head, its first partial record, the number of splits and
// the stride between their records. A split that saw no key (max -inf)
// weighs nothing.
#include "common.glsl"

layout(local_size_x = 128) in;

layout(std430, set = 0, binding = 2) writeonly buffer Output { float outputs[]; };
layout(std430, set = 0, binding = 3) readonly buffer Meta { uint meta[]; };
layout(std430, set = 0, binding = 4) readonly buffer Partials { float partials[]; };

const float NEG_INF = -1.0 / 0.0;

void main() {
    uint dim = p.head_dim;
    uint record = dim + 2u;
    for (uint i = gl_WorkGroupID.x; i < p.count; i += gl_NumWorkGroups.x) {
        uint rec = p.item_offset + i * 5u;
        CHECK(rec + 4u < p.meta_words, FAULT_META)
        uint row = meta[rec];
        uint head = meta[rec + 1u];
        uint first = meta[rec + 2u];
        uint splits = meta[rec + 3u];
        uint stride = meta[rec + 4u];
        CHECK((first + (splits - 1u) * stride + 1u) * record <= p.partial_words, FAULT_PARTIAL)
        CHECK(p.output_offset + (row * p.q_heads + head + 1u) * dim <= p.output_words, FAULT_OUTPUT)
        float m = NEG_INF;
        for (uint s = 0u; s < splits; s++) {
            m = max(m, partials[(first + s * stride) * record]);
        }
        float total = 0.0;
        for (uint s = 0u; s < splits; s++) {
            uint at = (first + s * stride) * record;
            float ms = partials[at];
            total += ms == NEG_INF ? 0.0 : partials[at + 1u] * exp(ms - m);
        }
        for (uint d = gl_LocalInvocationID.x; d < dim; d += gl_WorkGroupSize.x) {
            float sum = 0.0;
            for (uint s = 0u; s < splits; s++) {
                uint at = (first + s * stride) * record;
                float ms = partials[at];
                sum += ms == NEG_INF ? 0.0 : partials[at + 2u + d] * exp(ms - m);
            }
            outputs[p.output_offset + (row * p.q_heads + head) * dim + d] = sum / total;
        }
    }
}
