// Rounding activations to 8 bits for the integer-dot GPU decode product
// (matvec.comp with INT_DOT, fed by quantize.comp): each run of 16 on its
// own scale, its largest magnitude over 127.

// The run of 16 activations `x0 .. x3` as 16 signed bytes, and its scale.
uvec4 round_run(vec4 x0, vec4 x1, vec4 x2, vec4 x3, out float scale) {
    vec4 m = max(max(abs(x0), abs(x1)), max(abs(x2), abs(x3)));
    float amax = max(max(m.x, m.y), max(m.z, m.w));
    scale = amax / 127.0;
    float inv = amax > 0.0 ? 1.0 / amax : 0.0;
    // packSnorm4x8 rounds clamp(v, -1, 1) * 127 to the nearest integer.
    return uvec4(packSnorm4x8(x0 * inv), packSnorm4x8(x1 * inv),
                 packSnorm4x8(x2 * inv), packSnorm4x8(x3 * inv));
}
