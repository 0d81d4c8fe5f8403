//! The 256-element "K" super-block formats (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K).
//! Each function takes exactly one block and its 256 outputs.

use super::scale;

/// The 6-bit scale and minimum of sub-block `j` (0..8), packed in 12 bytes:
/// sub-blocks 0..4 keep theirs in the low 6 bits of bytes `j` and `j + 4`;
/// sub-blocks 4..8 take 4 bits from byte `j + 4` and their top 2 bits from
/// the spare high bits of bytes `j − 4` and `j`. Public so that SIMD
/// kernels elsewhere read the packing from here; `s` must hold 12 bytes.
pub fn scale_min(s: &[u8], j: usize) -> (u8, u8) {
    if j < 4 {
        (s[j] & 63, s[j + 4] & 63)
    } else {
        (
            (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4),
            (s[j + 4] >> 4) | ((s[j] >> 6) << 4),
        )
    }
}

/// The 6-bit scale of Q3_K sub-block `j` (0..16, stored plus 32) from the
/// block's 12 scale bytes `s`: its low four bits are the low (`j < 8`) or
/// high nibble of byte `j % 8`, its top two bits pair `j / 4` of byte
/// `8 + j % 4`. Public for the SIMD kernels, as [`scale_min`].
pub fn q3_k_scale(s: &[u8], j: usize) -> u8 {
    let low = if j < 8 { s[j] & 0x0f } else { s[j - 8] >> 4 };
    let high = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
    low | (high << 4)
}

/// Q2_K: 16 bytes of scales (low nibble) and minimums (high nibble), 64
/// bytes of 2-bit values, f16 `d`, f16 `dmin`. Each 128 outputs take 32
/// bytes, four 2-bit planes of them (plane `p` is bits `2p..2p + 2`), each
/// plane 32 outputs of two sub-blocks; `x = (d × sc) × q − dmin × m`.
pub(super) fn q2_k(b: &[u8], out: &mut [f32]) {
    let scales = &b[0..16];
    let qs = &b[16..80];
    let d = scale(b, 80);
    let dmin = scale(b, 82);
    for (g, y) in out.chunks_exact_mut(16).enumerate() {
        let (half, plane, second) = (g / 8, (g / 2) % 4, g % 2);
        let sc = scales[g];
        let dl = d * f32::from(sc & 0x0f);
        let ml = dmin * f32::from(sc >> 4);
        let q = &qs[32 * half + 16 * second..][..16];
        for (o, &v) in y.iter_mut().zip(q) {
            *o = dl * f32::from((v >> (2 * plane)) & 3) - ml;
        }
    }
}

/// Q3_K: 32 bytes of high bits, 64 bytes of 2-bit values laid out as
/// Q2_K's, 12 bytes of 6-bit scales ([`q3_k_scale`]), f16 `d`. Output
/// `e`'s high bit is bit `e / 32` of byte `e % 32`, and a clear high bit
/// takes 4 off: `x = (d × (sc − 32)) × (q − 4 × !h)`.
pub(super) fn q3_k(b: &[u8], out: &mut [f32]) {
    let hmask = &b[0..32];
    let qs = &b[32..96];
    let scales = &b[96..108];
    let d = scale(b, 108);
    for (g, y) in out.chunks_exact_mut(16).enumerate() {
        let (half, plane, second) = (g / 8, (g / 2) % 4, g % 2);
        let dl = d * f32::from(i16::from(q3_k_scale(scales, g)) - 32);
        let q = &qs[32 * half + 16 * second..][..16];
        let h = &hmask[16 * second..][..16];
        for ((o, &v), &hb) in y.iter_mut().zip(q).zip(h) {
            let low = i16::from((v >> (2 * plane)) & 3);
            let high = (hb >> (4 * half + plane)) & 1;
            *o = dl * f32::from(low - if high == 0 { 4 } else { 0 });
        }
    }
}

/// The scale and minimum of sub-blocks `2i` and `2i + 1` (the `i`th 64
/// outputs of a Q4_K or Q5_K block), each already multiplied by the block's
/// `d` or `dmin`.
#[inline]
fn pair_scales(d: f32, dmin: f32, scales: &[u8], i: usize) -> ((f32, f32), (f32, f32)) {
    let (sc1, m1) = scale_min(scales, 2 * i);
    let (sc2, m2) = scale_min(scales, 2 * i + 1);
    (
        (d * f32::from(sc1), dmin * f32::from(m1)),
        (d * f32::from(sc2), dmin * f32::from(m2)),
    )
}

/// Q4_K: f16 `d`, f16 `dmin`, 12 bytes of scales and minimums, 128 bytes of
/// nibbles. Each 64 outputs take 32 bytes: low nibbles with sub-block `2i`,
/// high nibbles with `2i + 1`; `x = (d × sc) × q − dmin × m`.
pub(super) fn q4_k(b: &[u8], out: &mut [f32]) {
    let d = scale(b, 0);
    let dmin = scale(b, 2);
    let scales = &b[4..16];
    let qs = &b[16..144];
    for (i, (chunk, q)) in out
        .chunks_exact_mut(64)
        .zip(qs.chunks_exact(32))
        .enumerate()
    {
        let ((d1, m1), (d2, m2)) = pair_scales(d, dmin, scales, i);
        let (lo, hi) = chunk.split_at_mut(32);
        for l in 0..32 {
            lo[l] = d1 * f32::from(q[l] & 0x0f) - m1;
            hi[l] = d2 * f32::from(q[l] >> 4) - m2;
        }
    }
}

/// Q5_K: as Q4_K with 32 bytes of fifth bits after the scales: for the `i`th
/// 64 outputs, bit `2i` of byte `l` tops low nibble `l`, bit `2i + 1` the
/// high nibble.
pub(super) fn q5_k(b: &[u8], out: &mut [f32]) {
    let d = scale(b, 0);
    let dmin = scale(b, 2);
    let scales = &b[4..16];
    let qh = &b[16..48];
    let qs = &b[48..176];
    for (i, (chunk, q)) in out
        .chunks_exact_mut(64)
        .zip(qs.chunks_exact(32))
        .enumerate()
    {
        let ((d1, m1), (d2, m2)) = pair_scales(d, dmin, scales, i);
        let (lo, hi) = chunk.split_at_mut(32);
        for l in 0..32 {
            let h1 = ((qh[l] >> (2 * i)) & 1) << 4;
            let h2 = ((qh[l] >> (2 * i + 1)) & 1) << 4;
            lo[l] = d1 * f32::from((q[l] & 0x0f) | h1) - m1;
            hi[l] = d2 * f32::from((q[l] >> 4) | h2) - m2;
        }
    }
}

/// Q6_K: 128 bytes of low nibbles, 64 bytes of high 2-bit pairs, 16 `i8`
/// scales, f16 `d`. Each 128 outputs take 64 low bytes, 32 high bytes and 8
/// scales; `x = (d × sc) × (q − 32)`.
pub(super) fn q6_k(b: &[u8], out: &mut [f32]) {
    let ql = &b[0..128];
    let qh = &b[128..192];
    let sc = &b[192..208];
    let d = scale(b, 208);
    for (n, y) in out.chunks_exact_mut(128).enumerate() {
        let ql = &ql[64 * n..64 * n + 64];
        let qh = &qh[32 * n..32 * n + 32];
        let sc = &sc[8 * n..8 * n + 8];
        for l in 0..32 {
            let is = l / 16;
            let q1 = (ql[l] & 0x0f) | ((qh[l] & 3) << 4);
            let q2 = (ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4);
            let q3 = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4);
            let q4 = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4);
            let s = |k: usize| d * f32::from(sc[is + k] as i8);
            y[l] = s(0) * f32::from(i16::from(q1) - 32);
            y[l + 32] = s(2) * f32::from(i16::from(q2) - 32);
            y[l + 64] = s(4) * f32::from(i16::from(q3) - 32);
            y[l + 96] = s(6) * f32::from(i16::from(q4) - 32);
        }
    }
}
