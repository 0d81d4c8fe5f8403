// A row of quantized blocks as tasks of 32 weights, for the GPU decode
// product (matvec.comp): a whole block of the 32-element
// types, an eighth of a K-quant superblock. A task's weights come as two
// runs of 16 (elements `start.x ..` and `start.y ..` of the row), each with
// a scale and an offset: w = scale * q + offset, the quants read as bytes
// with unpackUnorm4x8 (the 1/255 folded into the scale). Blocks that are
// not word-aligned (Q4_0, Q5_0, Q8_0, Q6_K) are read as whole words and
// realigned in registers; K-quant blocks (16-byte aligned) in 16-byte
// loads. Needs ops_common.glsl and blocks.glsl (with one type's define)
// first, and the MAGIC specialization constant; activations are read as
// vec4 (the host takes these kernels only where the rows' offsets and
// strides are multiples of 4).

// The same buffers seen as wider elements (Vulkan allows aliased
// bindings): 16-byte weight loads and vec4 activation loads.
layout(std430, set = 0, binding = 0) readonly buffer Weights4 { uvec4 w4[]; };
layout(std430, set = 0, binding = 1) buffer Activations4 { vec4 act4[]; };

// Weights per task.
#define TASK 32u

// Four little-endian words from byte `b` (2-byte aligned): one more word
// than they span is loaded, then the halves are shifted into place (the
// weights buffer is padded past its end for the extra word).
uvec4 words_at2(uint b) {
    uint i = b >> 2u;
    uint a0 = w[i];
    uint a1 = w[i + 1u];
    uint a2 = w[i + 2u];
    uint a3 = w[i + 3u];
    uint a4 = w[i + 4u];
    if ((b & 2u) == 0u) {
        return uvec4(a0, a1, a2, a3);
    }
    return uvec4((a0 >> 16u) | (a1 << 16u), (a1 >> 16u) | (a2 << 16u),
                 (a2 >> 16u) | (a3 << 16u), (a3 >> 16u) | (a4 << 16u));
}

// The little-endian word at byte `b` (2-byte aligned).
uint word_at2(uint b) {
    uint i = b >> 2u;
    uint a0 = w[i];
    uint a1 = w[i + 1u];
    return (b & 2u) == 0u ? a0 : (a0 >> 16u) | (a1 << 16u);
}

// The f16 at byte `b` (2-byte aligned), as f32.
float half2_at(uint b) {
    return unpackHalf2x16(w[b >> 2u] >> ((b & 2u) * 8u)).x;
}

// Bit `bit` of each byte of `u`, moved to bit 4 of that byte.
uint fifth_bits(uint u, uint bit) {
    return ((u >> bit) & 0x01010101u) << 4u;
}

// Bits 4k .. 4k + 3 of `h`, one per byte, at bit 4 of each.
uint spread4(uint h, uint k) {
    return (((h >> (4u * k)) & 15u) * 0x00204081u & 0x01010101u) << 4u;
}

// Byte `k` of a K-quant block's 12 packed scale bytes, from its first 16
// bytes (d, dmin, scales).
uint k_scale_byte(uvec4 head, uint k) {
    uint word = k < 4u ? head.y : (k < 8u ? head.z : head.w);
    return (word >> (8u * (k & 3u))) & 0xFFu;
}

// The 6-bit (scale, minimum) of sub-block `j`, as scale_min_k4 reads them.
vec2 k_scale_min(uvec4 head, uint j) {
    if (j < 4u) {
        return vec2(float(k_scale_byte(head, j) & 63u), float(k_scale_byte(head, j + 4u) & 63u));
    }
    uint hi = k_scale_byte(head, j + 4u);
    return vec2(float((hi & 15u) | ((k_scale_byte(head, j - 4u) >> 6u) << 4u)),
                float((hi >> 4u) | ((k_scale_byte(head, j) >> 6u) << 4u)));
}

// What one unit of a quant byte reads as in bytes4: 1/255 through
// unpackUnorm4x8 (the scales are multiplied by 255 to undo it), exactly 1
// through the exponent trick. Needs the MAGIC specialization constant.
#ifdef INT_DOT
#define UNIT 1.0
#else
#define UNIT (MAGIC ? 1.0 : 255.0)
#endif

// Four bytes of `u` as floats, each times 1/UNIT. The exponent trick puts a
// byte in the low mantissa bits of 2^23, so one subtraction gives it
// exactly: adds, where unpackUnorm4x8 takes integer-to-float conversions.
vec4 bytes4(uint u) {
    if (MAGIC) {
        uvec4 b = (uvec4(u) >> uvec4(0u, 8u, 16u, 24u)) & 0xFFu;
        return uintBitsToFloat(b | 0x4B000000u) - 8388608.0;
    }
    return unpackUnorm4x8(u);
}

// One task's weights: q[0..3] the first run's 16 bytes, q[4..7] the
// second's (as four bytes per word), the runs' first elements within the
// row, and each run's (scale × UNIT, offset).
struct Task {
    uvec4 lo;
    uvec4 hi;
    uvec2 start;
    vec4 sm;  // (scale, offset) of the first run, then of the second
};

Task load_task(uint row_base, uint t) {
    Task k;
#if defined(Q4_0)
    uint base = row_base + 18u * t;
    uvec4 q = words_at2(base + 2u);
    float d = half2_at(base);
    k.lo = q & 0x0F0F0F0Fu;
    k.hi = (q >> 4u) & 0x0F0F0F0Fu;
    k.start = uvec2(0u, 16u) + TASK * t;
    k.sm = vec4(UNIT * d, -8.0 * d, UNIT * d, -8.0 * d);
#elif defined(Q4_1)
    uint base = row_base + 20u * t;
    uint i = base >> 2u;
    vec2 dm = unpackHalf2x16(w[i]);
    uvec4 q = uvec4(w[i + 1u], w[i + 2u], w[i + 3u], w[i + 4u]);
    k.lo = q & 0x0F0F0F0Fu;
    k.hi = (q >> 4u) & 0x0F0F0F0Fu;
    k.start = uvec2(0u, 16u) + TASK * t;
    k.sm = vec4(UNIT * dm.x, dm.y, UNIT * dm.x, dm.y);
#elif defined(Q5_0)
    uint base = row_base + 22u * t;
    uvec4 q = words_at2(base + 6u);
    uint h = word_at2(base + 2u);
    float d = half2_at(base);
    k.lo = (q & 0x0F0F0F0Fu) | uvec4(spread4(h, 0u), spread4(h, 1u), spread4(h, 2u), spread4(h, 3u));
    k.hi = ((q >> 4u) & 0x0F0F0F0Fu) | uvec4(spread4(h, 4u), spread4(h, 5u), spread4(h, 6u), spread4(h, 7u));
    k.start = uvec2(0u, 16u) + TASK * t;
    k.sm = vec4(UNIT * d, -16.0 * d, UNIT * d, -16.0 * d);
#elif defined(Q5_1)
    uint base = row_base + 24u * t;
    uint i = base >> 2u;
    vec2 dm = unpackHalf2x16(w[i]);
    uint h = w[i + 1u];
    uvec4 q = uvec4(w[i + 2u], w[i + 3u], w[i + 4u], w[i + 5u]);
    k.lo = (q & 0x0F0F0F0Fu) | uvec4(spread4(h, 0u), spread4(h, 1u), spread4(h, 2u), spread4(h, 3u));
    k.hi = ((q >> 4u) & 0x0F0F0F0Fu) | uvec4(spread4(h, 4u), spread4(h, 5u), spread4(h, 6u), spread4(h, 7u));
    k.start = uvec2(0u, 16u) + TASK * t;
    k.sm = vec4(UNIT * dm.x, dm.y, UNIT * dm.x, dm.y);
#elif defined(Q8_0)
    uint base = row_base + 34u * t;
    // Signed bytes made unsigned (+128), so unpackUnorm4x8 reads them.
    k.lo = words_at2(base + 2u) ^ 0x80808080u;
    k.hi = words_at2(base + 18u) ^ 0x80808080u;
    float d = half2_at(base);
    k.start = uvec2(0u, 16u) + TASK * t;
    k.sm = vec4(UNIT * d, -128.0 * d, UNIT * d, -128.0 * d);
#elif defined(Q4_K) || defined(Q5_K)
    // Superblock t / 8; its 64-element group j, half h: quants at bytes
    // 32j + 16h (low nibbles: elements 64j + 16h ..; high: 64j + 32 + 16h ..).
    uint sub = t % 8u;
    uint j = sub / 2u;
    uint hh = sub % 2u;
    uint base = row_base + BLOCK_BYTES * (t / 8u);
    // d, dmin and the 12 packed scale bytes: one 16-byte load.
    uvec4 head = w4[base >> 4u];
    vec2 dm = unpackHalf2x16(head.x);
#if defined(Q4_K)
    uvec4 q = w4[(base + 16u + 32u * j + 16u * hh) >> 4u];
#else
    uvec4 q = w4[(base + 48u + 32u * j + 16u * hh) >> 4u];
    uvec4 qh = w4[(base + 16u + 16u * hh) >> 4u];
#endif
    vec2 sm0 = k_scale_min(head, 2u * j);
    vec2 sm1 = k_scale_min(head, 2u * j + 1u);
    float sc0 = sm0.x;
    float m0 = sm0.y;
    float sc1 = sm1.x;
    float m1 = sm1.y;
    k.lo = q & 0x0F0F0F0Fu;
    k.hi = (q >> 4u) & 0x0F0F0F0Fu;
#if defined(Q5_K)
    k.lo |= uvec4(fifth_bits(qh.x, 2u * j), fifth_bits(qh.y, 2u * j),
                  fifth_bits(qh.z, 2u * j), fifth_bits(qh.w, 2u * j));
    k.hi |= uvec4(fifth_bits(qh.x, 2u * j + 1u), fifth_bits(qh.y, 2u * j + 1u),
                  fifth_bits(qh.z, 2u * j + 1u), fifth_bits(qh.w, 2u * j + 1u));
#endif
    k.start = 256u * (t / 8u) + 64u * j + 16u * hh + uvec2(0u, 32u);
    k.sm = vec4(UNIT * dm.x * sc0, -dm.y * m0, UNIT * dm.x * sc1, -dm.y * m1);
#elif defined(Q6_K)
    // Superblock t / 8; its 128-element half n, 16-element lane group hh,
    // quarter parity pq: low bits at ql bytes 64n + 32pq + 16hh (low
    // nibbles: quarter pq, high: quarter pq + 2), high bits at qh bytes
    // 128 + 32n + 16hh (bits 2·quarter).
    uint sub = t % 8u;
    uint n = sub / 4u;
    uint hh = sub % 2u;
    uint pq = (sub / 2u) % 2u;
    uint base = row_base + 210u * (t / 8u);
    uvec4 ql = words_at2(base + 64u * n + 32u * pq + 16u * hh);
    uvec4 qh = words_at2(base + 128u + 32u * n + 16u * hh);
    uint s = base + 192u + 8u * n + hh + 2u * pq;
    float sc0 = float(int8_at(s));
    float sc1 = float(int8_at(s + 4u));
    float d = half2_at(base + 208u);
    k.lo = (ql & 0x0F0F0F0Fu) | (((qh >> (2u * pq)) & 0x03030303u) << 4u);
    k.hi = ((ql >> 4u) & 0x0F0F0F0Fu) | (((qh >> (2u * pq + 4u)) & 0x03030303u) << 4u);
    k.start = 256u * (t / 8u) + 128u * n + 32u * pq + 16u * hh + uvec2(0u, 64u);
    k.sm = vec4(UNIT * d * sc0, -32.0 * d * sc0, UNIT * d * sc1, -32.0 * d * sc1);
#endif
    return k;
}

// A task's activations: the two runs of 16 (a, then b).
struct TaskActs {
    vec4 a0;
    vec4 a1;
    vec4 a2;
    vec4 a3;
    vec4 b0;
    vec4 b1;
    vec4 b2;
    vec4 b3;
};

// The activations a task with runs at `start` meets in the row whose
// element 0 is vec4 `x4`.
TaskActs load_acts(uvec2 start, uint x4) {
    uint a = x4 + start.x / 4u;
    uint b = x4 + start.y / 4u;
    return TaskActs(act4[a], act4[a + 1u], act4[a + 2u], act4[a + 3u],
                    act4[b], act4[b + 1u], act4[b + 2u], act4[b + 3u]);
}

// The task's products with its activations.
float task_dot(Task k, TaskActs x) {
    float qa = dot(bytes4(k.lo.x), x.a0) + dot(bytes4(k.lo.y), x.a1)
             + dot(bytes4(k.lo.z), x.a2) + dot(bytes4(k.lo.w), x.a3);
    float qb = dot(bytes4(k.hi.x), x.b0) + dot(bytes4(k.hi.y), x.b1)
             + dot(bytes4(k.hi.z), x.b2) + dot(bytes4(k.hi.w), x.b3);
    vec4 one = vec4(1.0);
    float sa = dot(x.a0 + x.a1 + x.a2 + x.a3, one);
    float sb = dot(x.b0 + x.b1 + x.b2 + x.b3, one);
    return k.sm.x * qa + k.sm.y * sa + k.sm.z * qb + k.sm.w * sb;
}

#ifdef INT_DOT
// The activations as words: their rounded copies (quantize.comp).
layout(std430, set = 0, binding = 1) buffer ActivationWords4 { uvec4 actw4[]; };

// A task's activations rounded to 8 bits, each run of 16 on its own scale
// (its largest magnitude over 127): 16 signed bytes a run, the scale, and
// the sum of the run's rounded values (for the blocks' offsets).
struct TaskActs8 {
    uvec4 a;
    uvec4 b;
    vec2 scale;
    ivec2 sum;
};

// The sum of the four signed bytes of each word of `q`.
int byte_sum(uvec4 q) {
    int s = dotPacked4x8EXT(0x01010101u, int(q.x));
    s = s + dotPacked4x8EXT(0x01010101u, int(q.y));
    s = s + dotPacked4x8EXT(0x01010101u, int(q.z));
    return s + dotPacked4x8EXT(0x01010101u, int(q.w));
}

// The activations a task with runs at `start` meets, from the rounded
// copy of a row (quantize.comp) whose first word is `row` (a multiple of
// 4): each run's 16 bytes, its scale, and the sum of its bytes.
TaskActs8 load_acts8(uvec2 start, uint row) {
    TaskActs8 r;
    r.a = actw4[(row + start.x / 4u) / 4u];
    r.b = actw4[(row + start.y / 4u) / 4u];
    uint scales = row + p.cols / 4u;
    r.scale = vec2(act[scales + start.x / 16u], act[scales + start.y / 16u]);
    r.sum = ivec2(byte_sum(r.a), byte_sum(r.b));
    return r;
}

// The task's products with its rounded activations: unsigned weight bytes
// times signed activation bytes, four at a time, summed exactly in
// integers (a plain add after each: the sums cannot overflow, and a
// saturating add may cost more); then each run's scales and offset once.
float task_dot8(Task k, TaskActs8 x) {
    int qa = dotPacked4x8EXT(k.lo.x, int(x.a.x));
    qa = qa + dotPacked4x8EXT(k.lo.y, int(x.a.y));
    qa = qa + dotPacked4x8EXT(k.lo.z, int(x.a.z));
    qa = qa + dotPacked4x8EXT(k.lo.w, int(x.a.w));
    int qb = dotPacked4x8EXT(k.hi.x, int(x.b.x));
    qb = qb + dotPacked4x8EXT(k.hi.y, int(x.b.y));
    qb = qb + dotPacked4x8EXT(k.hi.z, int(x.b.z));
    qb = qb + dotPacked4x8EXT(k.hi.w, int(x.b.w));
    return x.scale.x * (k.sm.x * float(qa) + k.sm.y * float(x.sum.x))
         + x.scale.y * (k.sm.z * float(qb) + k.sm.w * float(x.sum.y));
}
#endif
