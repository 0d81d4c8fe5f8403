#version 450
// Writes new keys and values into their slots; the slot list (page, offset
// pairs) is in meta from word `seq_offset`. Inputs are rows of
// [k|v][kv_head][head_dim], one per slot: words already in the store's
// dtype (the host converted them), or with FROM_F32 f32 values that are
// converted here, rounded to nearest even (a step program's keys and
// values, which never leave the device).
#include "common.glsl"

layout(local_size_x = 128) in;

layout(std430, set = 0, binding = 1) readonly buffer Input { uint inputs[]; };
layout(std430, set = 0, binding = 3) readonly buffer Meta { uint meta[]; };

#ifdef FROM_F32
// f32 to bf16 bits, rounded to nearest even; NaN stays NaN.
uint to_bf16(uint bits) {
    if ((bits & 0x7FFFFFFFu) > 0x7F800000u) {
        return (bits >> 16) | 0x40u;
    }
    return (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
}

// Word `j` of a head row in the store's dtype, from the f32 row at `src`
// (whose bounds the caller checked).
uint packed(uint src, uint j) {
    if (p.dtype == 0u) {
        return inputs[src + j];
    }
    uint a = inputs[src + 2u * j];
    uint b = inputs[src + 2u * j + 1u];
    if (p.dtype == 1u) {
        return packHalf2x16(vec2(uintBitsToFloat(a), uintBitsToFloat(b)));
    }
    return to_bf16(a) | (to_bf16(b) << 16);
}
#endif

void main() {
    uint rw = row_words();
    uint slot_words = 2u * p.kv_heads * rw;
    for (uint i = gl_WorkGroupID.x; i < p.count; i += gl_NumWorkGroups.x) {
        uint m = p.seq_offset + 2u * i;
        CHECK(m + 1u < p.meta_words, FAULT_META)
        uint page = meta[m];
        uint offset = meta[m + 1u];
        CHECK(page < p.pages && offset < PAGE_SIZE, FAULT_PAGE)
        uint c = chunk_of(page);
        CHECK(c < p.chunks, FAULT_KV)
        uint base = page_base(page);
        for (uint w = gl_LocalInvocationID.x; w < slot_words; w += gl_WorkGroupSize.x) {
            uint kv_sel = w / (p.kv_heads * rw);
            uint head = (w / rw) % p.kv_heads;
            uint j = w % rw;
            uint dst = base + row_offset(p.layer, kv_sel, head, offset) + j;
            CHECK(dst < (page % p.pages_per_chunk + 1u) * p.page_words, FAULT_KV)
#ifdef FROM_F32
            uint src = p.input_offset + ((i * 2u + kv_sel) * p.kv_heads + head) * p.head_dim;
            CHECK(src + p.head_dim <= p.input_words, FAULT_INPUT)
            kv[c].words[dst] = packed(src, j);
#else
            uint src = p.input_offset + i * slot_words + w;
            CHECK(src < p.input_words, FAULT_INPUT)
            kv[c].words[dst] = inputs[src];
#endif
        }
    }
}
