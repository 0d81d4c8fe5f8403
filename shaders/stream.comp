#version 450
// Bandwidth probe: streams `rows` 16-byte words from byte w_offset of the
// weights. aux1 = 0 reads them and writes one sum per workgroup at
// y_offset (read bandwidth); aux1 = 1 copies them into the activations at
// element y_offset (copy bandwidth, as a kernel moves bytes, where
// vkCmdCopyBuffer may take a slower copy engine). Neighbouring invocations
// on neighbouring words, four words in flight per invocation.
#include "ops_common.glsl"

layout(std430, set = 0, binding = 0) readonly buffer Weights4 { uvec4 w4[]; };
layout(std430, set = 0, binding = 1) buffer Activations4 { vec4 act4[]; };

layout(local_size_x = 256) in;

shared uint sums[256];

void main() {
    uint tid = gl_LocalInvocationID.x;
    uint first = p.w_offset / 16u;
    uint n = p.rows;
    uint step = gl_NumWorkGroups.x * 256u;
    uvec4 s = uvec4(0u);
    CHECK(p.w_offset + 16u * n <= p.w_words * 4u, FAULT_WEIGHTS)
    CHECK(p.aux1 == 0u || p.y_offset + 4u * n <= p.act_words, FAULT_ACT)
    for (uint i = gl_WorkGroupID.x * 256u + tid; i < n; i += 4u * step) {
        uvec4 a = w4[first + i];
        uvec4 b = i + step < n ? w4[first + i + step] : uvec4(0u);
        uvec4 c = i + 2u * step < n ? w4[first + i + 2u * step] : uvec4(0u);
        uvec4 d = i + 3u * step < n ? w4[first + i + 3u * step] : uvec4(0u);
        if (p.aux1 == 1u) {
            uint y = p.y_offset / 4u + i;
            act4[y] = uintBitsToFloat(a);
            if (i + step < n) act4[y + step] = uintBitsToFloat(b);
            if (i + 2u * step < n) act4[y + 2u * step] = uintBitsToFloat(c);
            if (i + 3u * step < n) act4[y + 3u * step] = uintBitsToFloat(d);
        } else {
            s ^= a ^ b ^ c ^ d;
        }
    }
    if (p.aux1 == 0u) {
        sums[tid] = s.x ^ s.y ^ s.z ^ s.w;
        barrier();
        if (tid == 0u) {
            uint t = 0u;
            for (uint k = 0u; k < 256u; k++) {
                t ^= sums[k];
            }
            act[p.y_offset + gl_WorkGroupID.x] = uintBitsToFloat(t & 0x007FFFFFu);
        }
    }
}
