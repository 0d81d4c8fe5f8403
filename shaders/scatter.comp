#version 450
// Writes new keys and values into their slots. The host has already
// converted them to the store's dtype: rows of [k|v][kv_head][head_dim]
// words, one per slot; the slot list (page, offset pairs) is in meta.
#include "common.glsl"

layout(local_size_x = 128) in;

layout(std430, set = 0, binding = 1) readonly buffer Input { uint inputs[]; };
layout(std430, set = 0, binding = 3) readonly buffer Meta { uint meta[]; };

void main() {
    uint rw = row_words();
    uint slot_words = 2u * p.kv_heads * rw;
    for (uint i = gl_WorkGroupID.x; i < p.count; i += gl_NumWorkGroups.x) {
        CHECK(2u * i + 1u < p.meta_words, FAULT_META)
        uint page = meta[2u * i];
        uint offset = meta[2u * i + 1u];
        CHECK(page < p.pages && offset < PAGE_SIZE, FAULT_PAGE)
        uint c = chunk_of(page);
        CHECK(c < p.chunks, FAULT_KV)
        uint base = page_base(page);
        for (uint w = gl_LocalInvocationID.x; w < slot_words; w += gl_WorkGroupSize.x) {
            uint kv_sel = w / (p.kv_heads * rw);
            uint head = (w / rw) % p.kv_heads;
            uint j = w % rw;
            uint dst = base + row_offset(p.layer, kv_sel, head, offset) + j;
            uint src = i * slot_words + w;
            CHECK(src < p.input_words, FAULT_INPUT)
            CHECK(dst < (page % p.pages_per_chunk + 1u) * p.page_words, FAULT_KV)
            kv[c].words[dst] = inputs[src];
        }
    }
}
