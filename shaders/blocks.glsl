// Dequantizing one element of a GGUF block in registers, for every block
// type the loader takes (layouts as ggml's, which core/src/quant mirrors).
// `weight_of(kind, base, e)` picks the type at run time (for ops that touch
// one row, like the embedding lookup); a kernel that defines one of F32 ...
// Q6_K gets BLOCK_ELEMS, BLOCK_BYTES and `weight(base, e)` for that type,
// fixed at compile time. Needs ops_common.glsl first. (Q2_K, Q3_K, IQ4_NL
// and IQ4_XS have the decode and tiled products; no matrix-vector kernels.)

// GGML type ids.
#define KIND_F32 0u
#define KIND_F16 1u
#define KIND_Q4_0 2u
#define KIND_Q4_1 3u
#define KIND_Q5_0 6u
#define KIND_Q5_1 7u
#define KIND_Q8_0 8u
#define KIND_Q2_K 10u
#define KIND_Q3_K 11u
#define KIND_Q4_K 12u
#define KIND_Q5_K 13u
#define KIND_Q6_K 14u
#define KIND_IQ4_NL 20u
#define KIND_IQ4_XS 23u

// The sixteen values an IQ4 index names (llama.cpp's kvalues_iq4nl).
const float IQ4_VALUES[16] = float[16](-127.0, -104.0, -83.0, -65.0, -49.0, -35.0, -22.0, -10.0,
                                       1.0, 13.0, 25.0, 38.0, 53.0, 69.0, 89.0, 113.0);

// The 6-bit scale (stored plus 32) of Q3_K group `g` (of 16 values), its
// 12 packed scale bytes at `s`: the low nibble (g < 8) or high nibble of
// byte g % 8, and bit pair g / 4 of byte 8 + g % 4.
int q3_k_scale(uint s, uint g) {
    uint low = g < 8u ? (byte_at(s + g) & 15u) : (byte_at(s + g - 8u) >> 4u);
    uint high = (byte_at(s + 8u + g % 4u) >> (2u * (g / 4u))) & 3u;
    return int(low | (high << 4u)) - 32;
}

// The 6-bit scale (stored plus 32) of IQ4_XS sub-block `j` (of 32 values)
// of the block at `base`.
int iq4_xs_scale(uint base, uint j) {
    uint high = byte_at(base + 2u) | (byte_at(base + 3u) << 8u);
    uint low = (byte_at(base + 4u + j / 2u) >> (4u * (j % 2u))) & 15u;
    return int(low | (((high >> (2u * j)) & 3u) << 4u)) - 32;
}

// Q2_K's and Q3_K's 2-bit value of element `e`: plane (e % 128) / 32 of
// the byte 32 × (e / 128) + e % 32 of the values at `qs`.
uint two_bits_at(uint qs, uint e) {
    return (byte_at(qs + 32u * (e / 128u) + e % 32u) >> (2u * ((e % 128u) / 32u))) & 3u;
}

// Q3_K's value of element `e` less its 4 (a set high bit cancels it).
float q3_k_value(uint base, uint e) {
    uint h = (byte_at(base + e % 32u) >> (e / 32u)) & 1u;
    return float(two_bits_at(base + 32u, e)) + 4.0 * float(h) - 4.0;
}

// The IQ4 value of element `e` of 32 whose 16 index bytes are at `qs`.
float iq4_value(uint qs, uint e) {
    uint q = byte_at(qs + (e & 15u));
    return IQ4_VALUES[e < 16u ? (q & 15u) : (q >> 4u)];
}

// The little-endian u32 at byte `b` (any alignment).
uint u32_at(uint b) {
    return byte_at(b) | (byte_at(b + 1u) << 8u) | (byte_at(b + 2u) << 16u) | (byte_at(b + 3u) << 24u);
}

// The 6-bit scale and minimum of sub-block `j` of a Q4_K/Q5_K block whose
// 12 packed scale bytes start at `s`.
void scale_min_k4(uint j, uint s, out float sc, out float m) {
    if (j < 4u) {
        sc = float(byte_at(s + j) & 63u);
        m = float(byte_at(s + j + 4u) & 63u);
    } else {
        sc = float((byte_at(s + j + 4u) & 15u) | ((byte_at(s + j - 4u) >> 6u) << 4u));
        m = float((byte_at(s + j + 4u) >> 4u) | ((byte_at(s + j) >> 6u) << 4u));
    }
}

float weight_of(uint kind, uint base, uint e) {
    if (kind == KIND_F32) {
        return uintBitsToFloat(u32_at(base));
    } else if (kind == KIND_F16) {
        return half_at(base);
    } else if (kind == KIND_Q4_0) {
        uint q = byte_at(base + 2u + (e & 15u));
        q = e < 16u ? (q & 15u) : (q >> 4u);
        return half_at(base) * (float(q) - 8.0);
    } else if (kind == KIND_Q4_1) {
        uint q = byte_at(base + 4u + (e & 15u));
        q = e < 16u ? (q & 15u) : (q >> 4u);
        return half_at(base) * float(q) + half_at(base + 2u);
    } else if (kind == KIND_Q5_0) {
        uint q = byte_at(base + 6u + (e & 15u));
        q = (e < 16u ? (q & 15u) : (q >> 4u)) | (((u32_at(base + 2u) >> e) & 1u) << 4u);
        return half_at(base) * (float(q) - 16.0);
    } else if (kind == KIND_Q5_1) {
        uint q = byte_at(base + 8u + (e & 15u));
        q = (e < 16u ? (q & 15u) : (q >> 4u)) | (((u32_at(base + 4u) >> e) & 1u) << 4u);
        return half_at(base) * float(q) + half_at(base + 2u);
    } else if (kind == KIND_Q8_0) {
        return half_at(base) * float(int8_at(base + 2u + e));
    } else if (kind == KIND_Q2_K) {
        uint sc = byte_at(base + e / 16u);
        return half_at(base + 80u) * float(sc & 15u) * float(two_bits_at(base + 16u, e))
            - half_at(base + 82u) * float(sc >> 4u);
    } else if (kind == KIND_Q3_K) {
        return half_at(base + 108u) * float(q3_k_scale(base + 96u, e / 16u)) * q3_k_value(base, e);
    } else if (kind == KIND_IQ4_NL) {
        return half_at(base) * iq4_value(base + 2u, e);
    } else if (kind == KIND_IQ4_XS) {
        uint j = e / 32u;
        return half_at(base) * float(iq4_xs_scale(base, j)) * iq4_value(base + 8u + 16u * j, e % 32u);
    } else if (kind == KIND_Q4_K || kind == KIND_Q5_K) {
        uint j = e / 64u;
        uint l = e % 64u;
        uint sub = 2u * j + (l < 32u ? 0u : 1u);
        float sc;
        float m;
        scale_min_k4(sub, base + 4u, sc, m);
        uint qs = kind == KIND_Q4_K ? base + 16u : base + 48u;
        uint q = byte_at(qs + 32u * j + (l & 31u));
        q = l < 32u ? (q & 15u) : (q >> 4u);
        if (kind == KIND_Q5_K) {
            q |= ((byte_at(base + 16u + (l & 31u)) >> sub) & 1u) << 4u;
        }
        return half_at(base) * sc * float(q) - half_at(base + 2u) * m;
    } else {
        // Q6_K: ql[128], qh[64], scales[16] (i8), d.
        uint n = e / 128u;
        uint r = e % 128u;
        uint quarter = r / 32u;
        uint l = r % 32u;
        uint lo = byte_at(base + 64u * n + l + (quarter & 1u) * 32u);
        lo = quarter >= 2u ? (lo >> 4u) : (lo & 15u);
        uint hi = (byte_at(base + 128u + 32u * n + l) >> (2u * quarter)) & 3u;
        int q = int(lo | (hi << 4u)) - 32;
        float sc = float(int8_at(base + 192u + 8u * n + l / 16u + 2u * quarter));
        return half_at(base + 208u) * sc * float(q);
    }
}

// Elements and bytes of one block of `kind`.
uint block_elems_of(uint kind) {
    if (kind == KIND_F32 || kind == KIND_F16) return 1u;
    if (kind <= KIND_Q8_0 || kind == KIND_IQ4_NL) return 32u;
    return 256u;
}

uint block_bytes_of(uint kind) {
    if (kind == KIND_F32) return 4u;
    if (kind == KIND_F16) return 2u;
    if (kind == KIND_Q4_0) return 18u;
    if (kind == KIND_Q4_1) return 20u;
    if (kind == KIND_Q5_0) return 22u;
    if (kind == KIND_Q5_1) return 24u;
    if (kind == KIND_Q8_0) return 34u;
    if (kind == KIND_Q2_K) return 84u;
    if (kind == KIND_Q3_K) return 110u;
    if (kind == KIND_IQ4_NL) return 18u;
    if (kind == KIND_IQ4_XS) return 136u;
    if (kind == KIND_Q4_K) return 144u;
    if (kind == KIND_Q5_K) return 176u;
    return 210u;
}

#if defined(F32)
#define KIND KIND_F32
#elif defined(F16)
#define KIND KIND_F16
#elif defined(Q4_0)
#define KIND KIND_Q4_0
#elif defined(Q4_1)
#define KIND KIND_Q4_1
#elif defined(Q5_0)
#define KIND KIND_Q5_0
#elif defined(Q5_1)
#define KIND KIND_Q5_1
#elif defined(Q8_0)
#define KIND KIND_Q8_0
#elif defined(Q4_K)
#define KIND KIND_Q4_K
#elif defined(Q5_K)
#define KIND KIND_Q5_K
#elif defined(Q6_K)
#define KIND KIND_Q6_K
#elif defined(Q2_K)
#define KIND KIND_Q2_K
#elif defined(Q3_K)
#define KIND KIND_Q3_K
#elif defined(IQ4_NL)
#define KIND KIND_IQ4_NL
#elif defined(IQ4_XS)
#define KIND KIND_IQ4_XS
#endif

#ifdef KIND
// With the type fixed, the compiler folds the branches away.
#define BLOCK_ELEMS block_elems_of(KIND)
#define BLOCK_BYTES block_bytes_of(KIND)

// A block splits into sub-blocks that share one scale (and minimum): the
// matrix product decodes those once per sub-block, then only the quants.
// (Scales of 16 elements, Q2_K's, Q3_K's and Q6_K's, stay in quant(): the
// tiled product steps 32 columns within one sub-block.)
#if defined(F32) || defined(F16)
#define SUB_ELEMS 1u
#elif defined(Q2_K) || defined(Q3_K) || defined(Q6_K)
#define SUB_ELEMS 256u
#else
#define SUB_ELEMS 32u
#endif

// (scale, offset) of sub-block `j` of the block at `base`: a weight is
// scale × quant(base, e) + offset.
vec2 sub_scale(uint base, uint j) {
#if defined(F32) || defined(F16)
    return vec2(1.0, 0.0);
#elif defined(Q4_0) || defined(Q5_0) || defined(Q8_0)
    return vec2(half_at(base), 0.0);
#elif defined(Q4_1) || defined(Q5_1)
    return vec2(half_at(base), half_at(base + 2u));
#elif defined(Q4_K) || defined(Q5_K)
    float sc;
    float m;
    scale_min_k4(j, base + 4u, sc, m);
    return vec2(half_at(base) * sc, -half_at(base + 2u) * m);
#elif defined(Q2_K)
    // Scales and minimums of 16: all in quant().
    return vec2(1.0, 0.0);
#elif defined(Q3_K)
    return vec2(half_at(base + 108u), 0.0);
#elif defined(IQ4_NL)
    return vec2(half_at(base), 0.0);
#elif defined(IQ4_XS)
    return vec2(half_at(base) * float(iq4_xs_scale(base, j)), 0.0);
#else
    // Q6_K: d for the whole block; each element's 8-bit sub-block scale
    // is folded into quant().
    return vec2(half_at(base + 208u), 0.0);
#endif
}

// The quant of element `e` (already offset for the symmetric types).
float quant(uint base, uint e) {
#if defined(F32)
    return uintBitsToFloat(u32_at(base));
#elif defined(F16)
    return half_at(base);
#elif defined(Q4_0)
    uint q = byte_at(base + 2u + (e & 15u));
    return float(e < 16u ? (q & 15u) : (q >> 4u)) - 8.0;
#elif defined(Q4_1)
    uint q = byte_at(base + 4u + (e & 15u));
    return float(e < 16u ? (q & 15u) : (q >> 4u));
#elif defined(Q5_0)
    uint q = byte_at(base + 6u + (e & 15u));
    q = (e < 16u ? (q & 15u) : (q >> 4u)) | (((u32_at(base + 2u) >> e) & 1u) << 4u);
    return float(q) - 16.0;
#elif defined(Q5_1)
    uint q = byte_at(base + 8u + (e & 15u));
    q = (e < 16u ? (q & 15u) : (q >> 4u)) | (((u32_at(base + 4u) >> e) & 1u) << 4u);
    return float(q);
#elif defined(Q8_0)
    return float(int8_at(base + 2u + e));
#elif defined(Q2_K)
    uint sc = byte_at(base + e / 16u);
    return half_at(base + 80u) * float(sc & 15u) * float(two_bits_at(base + 16u, e))
        - half_at(base + 82u) * float(sc >> 4u);
#elif defined(Q3_K)
    return float(q3_k_scale(base + 96u, e / 16u)) * q3_k_value(base, e);
#elif defined(IQ4_NL)
    return iq4_value(base + 2u, e);
#elif defined(IQ4_XS)
    return iq4_value(base + 8u + 16u * (e / 32u), e % 32u);
#elif defined(Q4_K) || defined(Q5_K)
    uint j = e / 64u;
    uint l = e % 64u;
    uint qs = KIND == KIND_Q4_K ? base + 16u : base + 48u;
    uint q = byte_at(qs + 32u * j + (l & 31u));
    q = l < 32u ? (q & 15u) : (q >> 4u);
#if defined(Q5_K)
    q |= ((byte_at(base + 16u + (l & 31u)) >> (2u * j + (l < 32u ? 0u : 1u))) & 1u) << 4u;
#endif
    return float(q);
#else
    uint n = e / 128u;
    uint r = e % 128u;
    uint quarter = r / 32u;
    uint l = r % 32u;
    uint lo = byte_at(base + 64u * n + l + (quarter & 1u) * 32u);
    lo = quarter >= 2u ? (lo >> 4u) : (lo & 15u);
    uint hi = (byte_at(base + 128u + 32u * n + l) >> (2u * quarter)) & 3u;
    float sc = float(int8_at(base + 192u + 8u * n + l / 16u + 2u * quarter));
    return sc * float(int(lo | (hi << 4u)) - 32);
#endif
}

#if !defined(F32) && !defined(F16)
// The quantized types take their quants four at a time: consecutive
// elements sit in consecutive bytes (or nibbles, or bits), so one unaligned
// 4-byte load (two word loads at most) serves four elements, where quant()
// loads a word per element. Kernels use it where QUANT4 is defined.
#define QUANT4

// The little-endian u32 of bytes b .. b + 3 (any alignment). The second
// word is read only when the bytes reach into it, so never past them.
uint word_at(uint b) {
    uint i = b >> 2u;
    uint s = (b & 3u) * 8u;
    uint lo = w[i];
    if (s != 0u) {
        lo = (lo >> s) | (w[i + 1u] << (32u - s));
    }
    return lo;
}

vec4 low_nibbles(uint u) {
    return vec4(uvec4(u, u >> 8u, u >> 16u, u >> 24u) & 15u);
}

vec4 high_nibbles(uint u) {
    return vec4(uvec4(u >> 4u, u >> 12u, u >> 20u, u >> 28u) & 15u);
}

// Bit `bit` of each of the four bytes of `u`, as 0 or 1.
vec4 byte_bits(uint u, uint bit) {
    return vec4((uvec4(u, u >> 8u, u >> 16u, u >> 24u) >> bit) & 1u);
}

// quant(base, e) .. quant(base, e + 3), for `e` a multiple of 4.
vec4 quant4(uint base, uint e) {
#if defined(Q4_0)
    uint u = word_at(base + 2u + (e & 15u));
    return (e < 16u ? low_nibbles(u) : high_nibbles(u)) - 8.0;
#elif defined(Q4_1)
    uint u = word_at(base + 4u + (e & 15u));
    return e < 16u ? low_nibbles(u) : high_nibbles(u);
#elif defined(Q5_0) || defined(Q5_1)
#if defined(Q5_0)
    uint u = word_at(base + 6u + (e & 15u));
    uint h = word_at(base + 2u) >> e;
#else
    uint u = word_at(base + 8u + (e & 15u));
    uint h = word_at(base + 4u) >> e;
#endif
    vec4 q = (e < 16u ? low_nibbles(u) : high_nibbles(u))
        + 16.0 * vec4(uvec4(h, h >> 1u, h >> 2u, h >> 3u) & 1u);
#if defined(Q5_0)
    return q - 16.0;
#else
    return q;
#endif
#elif defined(Q8_0)
    int u = int(word_at(base + 2u + e));
    return vec4(bitfieldExtract(u, 0, 8), bitfieldExtract(u, 8, 8),
                bitfieldExtract(u, 16, 8), bitfieldExtract(u, 24, 8));
#elif defined(Q2_K) || defined(Q3_K)
    // Four values of one group of 16: consecutive bytes of one plane.
    uint plane = (e % 128u) / 32u;
    uint at = 32u * (e / 128u) + e % 32u;
    uint u = word_at(base + (KIND == KIND_Q2_K ? 16u : 32u) + at) >> (2u * plane);
    vec4 q = vec4(uvec4(u, u >> 8u, u >> 16u, u >> 24u) & 3u);
#if defined(Q2_K)
    uint sc = byte_at(base + e / 16u);
    return half_at(base + 80u) * float(sc & 15u) * q - half_at(base + 82u) * float(sc >> 4u);
#else
    q += 4.0 * byte_bits(word_at(base + e % 32u), e / 32u) - 4.0;
    return float(q3_k_scale(base + 96u, e / 16u)) * q;
#endif
#elif defined(IQ4_NL) || defined(IQ4_XS)
    uint qs = KIND == KIND_IQ4_NL ? base + 2u : base + 8u + 16u * (e / 32u);
    uint l = e % 32u;
    uint u = word_at(qs + (l & 15u));
    uvec4 n = l < 16u ? (uvec4(u, u >> 8u, u >> 16u, u >> 24u) & 15u)
                      : ((uvec4(u, u >> 8u, u >> 16u, u >> 24u) >> 4u) & 15u);
    return vec4(IQ4_VALUES[n.x], IQ4_VALUES[n.y], IQ4_VALUES[n.z], IQ4_VALUES[n.w]);
#elif defined(Q4_K) || defined(Q5_K)
    uint j = e / 64u;
    uint l = e % 64u;
    uint qs = KIND == KIND_Q4_K ? base + 16u : base + 48u;
    uint u = word_at(qs + 32u * j + (l & 31u));
    vec4 q = l < 32u ? low_nibbles(u) : high_nibbles(u);
#if defined(Q5_K)
    q += 16.0 * byte_bits(word_at(base + 16u + (l & 31u)), 2u * j + (l < 32u ? 0u : 1u));
#endif
    return q;
#else
    uint n = e / 128u;
    uint r = e % 128u;
    uint quarter = r / 32u;
    uint l = r % 32u;
    uint u = word_at(base + 64u * n + l + (quarter & 1u) * 32u);
    vec4 lo = quarter >= 2u ? high_nibbles(u) : low_nibbles(u);
    uint h = word_at(base + 128u + 32u * n + l) >> (2u * quarter);
    vec4 hi = vec4(uvec4(h, h >> 8u, h >> 16u, h >> 24u) & 3u);
    float sc = float(int8_at(base + 192u + 8u * n + l / 16u + 2u * quarter));
    return sc * (lo + 16.0 * hi - 32.0);
#endif
}
#endif
#endif
