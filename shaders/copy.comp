#version 450
// Copy-on-write: copies the leading `slots` tokens of every layer, keys and
// values, of a source page to a destination page. Meta holds (src, dst,
// slots) triples; the rest of the destination is left alone.
#include "common.glsl"

layout(local_size_x = 128) in;

layout(std430, set = 0, binding = 3) readonly buffer Meta { uint meta[]; };

void main() {
    uint rw = row_words();
    for (uint i = gl_WorkGroupID.x; i < p.count; i += gl_NumWorkGroups.x) {
        CHECK(3u * i + 2u < p.meta_words, FAULT_META)
        uint src = meta[3u * i];
        uint dst = meta[3u * i + 1u];
        uint slots = meta[3u * i + 2u];
        CHECK(src < p.pages && dst < p.pages && slots <= PAGE_SIZE, FAULT_PAGE)
        uint cs = chunk_of(src);
        uint cd = chunk_of(dst);
        CHECK(cs < p.chunks && cd < p.chunks, FAULT_KV)
        uint run = slots * rw;             // words per (layer, k|v, head)
        uint runs = p.layers * 2u * p.kv_heads;
        for (uint w = gl_LocalInvocationID.x; w < runs * run; w += gl_WorkGroupSize.x) {
            uint r = w / run;
            uint offset = r * PAGE_SIZE * rw + w % run;
            kv[cd].words[page_base(dst) + offset] = kv[cs].words[page_base(src) + offset];
        }
    }
}
