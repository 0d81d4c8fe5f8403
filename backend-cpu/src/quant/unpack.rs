//! Weight blocks unpacked to small integers and their scales, in the form
//! the integer dot products take. The scalar and NEON paths use these; the
//! AVX2 path unpacks the same way in registers. Bit layouts are as in
//! `pagoda_core::quant` (whose dequantization the tests check against).

use pagoda_core::quant::{e8m0_half_to_f32, f16_to_f32, IQ4_VALUES, MXFP4_VALUES};
use pagoda_core::QuantKind;

/// A 32-element block: `w = d × q + m` (`m` is 0 for the symmetric types,
/// whose offset is already taken out of `q`).
pub(super) struct Legacy {
    pub q: [i8; 32],
    pub d: f32,
    pub m: f32,
}

/// A 256-element block: `w = d × sc[k] × q − dc × c[k]` for element `e` in
/// group `k = e / 16`. `q` holds each value's bits as an `i8`: 0..=63 for
/// the K types (so they read the same unsigned), IQ4_XS's table values
/// (−127..=113, no correction) for it.
pub(super) struct KBlock {
    pub q: [u8; 256],
    pub sc: [i32; 16],
    pub c: [i32; 16],
    pub d: f32,
    pub dc: f32,
}

/// The f16 at `at`.
#[inline]
pub(super) fn half(b: &[u8], at: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([b[at], b[at + 1]]))
}

/// Whether `kind` is a 256-element super-block type, multiplied with Q8_K
/// activations and unpacked to a [`KBlock`].
pub(super) fn is_super_block(kind: QuantKind) -> bool {
    matches!(
        kind,
        QuantKind::Q2_K
            | QuantKind::Q3_K
            | QuantKind::Q4_K
            | QuantKind::Q5_K
            | QuantKind::Q6_K
            | QuantKind::IQ4_XS
    )
}

/// Whether the type's values carry a minimum (Q4_1, Q5_1).
pub(super) fn has_min(kind: QuantKind) -> bool {
    matches!(kind, QuantKind::Q4_1 | QuantKind::Q5_1)
}

/// Unpacks one legacy block (`b` starts at the block).
pub(super) fn legacy(kind: QuantKind, b: &[u8]) -> Legacy {
    let mut q = [0i8; 32];
    if kind == QuantKind::MXFP4 {
        for j in 0..16 {
            let v = b[1 + j];
            q[j] = MXFP4_VALUES[usize::from(v & 0x0f)];
            q[j + 16] = MXFP4_VALUES[usize::from(v >> 4)];
        }
        let d = e8m0_half_to_f32(b[0]);
        return Legacy { q, d, m: 0.0 };
    }
    let d = half(b, 0);
    let mut m = 0.0;
    match kind {
        QuantKind::Q8_0 => {
            for (o, &v) in q.iter_mut().zip(&b[2..34]) {
                *o = v as i8;
            }
        }
        QuantKind::IQ4_NL => {
            for j in 0..16 {
                let v = b[2 + j];
                q[j] = IQ4_VALUES[usize::from(v & 0x0f)];
                q[j + 16] = IQ4_VALUES[usize::from(v >> 4)];
            }
        }
        QuantKind::Q4_0 | QuantKind::Q4_1 => {
            let (at, off) = if kind == QuantKind::Q4_0 {
                (2, 8)
            } else {
                (4, 0)
            };
            if kind == QuantKind::Q4_1 {
                m = half(b, 2);
            }
            for j in 0..16 {
                let v = b[at + j];
                q[j] = (v & 0x0f) as i8 - off;
                q[j + 16] = (v >> 4) as i8 - off;
            }
        }
        _ => {
            // Q5_0 / Q5_1: fifth bits in a little-endian u32, then nibbles.
            let (hat, off) = if kind == QuantKind::Q5_0 {
                (2, 16)
            } else {
                (4, 0)
            };
            if kind == QuantKind::Q5_1 {
                m = half(b, 2);
            }
            let qh = u32::from_le_bytes([b[hat], b[hat + 1], b[hat + 2], b[hat + 3]]);
            for j in 0..16 {
                let v = b[hat + 4 + j];
                let h0 = (((qh >> j) & 1) << 4) as u8;
                let h1 = (((qh >> (j + 16)) & 1) << 4) as u8;
                q[j] = ((v & 0x0f) | h0) as i8 - off;
                q[j + 16] = ((v >> 4) | h1) as i8 - off;
            }
        }
    }
    Legacy { q, d, m }
}

/// A K block's per-16 scales `sc` and corrections `c`, `d` and `dc` (see
/// [`KBlock`]).
#[inline]
pub(super) fn k_scales(kind: QuantKind, b: &[u8]) -> ([i32; 16], [i32; 16], f32, f32) {
    let (sc, c, d, dc) = k_scale_bits(kind, b);
    (sc, c, f16_to_f32(d), f16_to_f32(dc))
}

/// [`k_scales`] with `d` and `dc` left as f16 bits, for callers that
/// convert them in hardware.
#[inline(always)]
pub(super) fn k_scale_bits(kind: QuantKind, b: &[u8]) -> ([i32; 16], [i32; 16], u16, u16) {
    let (mut sc, mut c) = ([0i32; 16], [0i32; 16]);
    let bits = |at: usize| u16::from_le_bytes([b[at], b[at + 1]]);
    match kind {
        QuantKind::Q2_K => {
            // One byte per 16: the scale's nibble, then the minimum's.
            for g in 0..16 {
                sc[g] = i32::from(b[g] & 0x0f);
                c[g] = i32::from(b[g] >> 4);
            }
            return (sc, c, bits(80), bits(82));
        }
        QuantKind::Q3_K => {
            // 6-bit scales stored plus 32; values stored plus 4.
            let scales = q3_k_scale_bytes(&b[96..108]);
            for g in 0..16 {
                sc[g] = i32::from(scales[g]) - 32;
                c[g] = 4 * sc[g];
            }
            return (sc, c, bits(108), bits(108));
        }
        QuantKind::IQ4_XS => {
            // One 6-bit scale (plus 32) per 32 values; signed values, no
            // correction.
            let scales = iq4_xs_scale_bytes(b);
            for g in 0..16 {
                sc[g] = i32::from(scales[g / 2]) - 32;
            }
            return (sc, c, bits(0), bits(0));
        }
        _ => {}
    }
    if kind == QuantKind::Q6_K {
        for g in 0..16 {
            sc[g] = i32::from(b[192 + g] as i8);
            c[g] = 32 * sc[g];
        }
        return (sc, c, bits(208), bits(208));
    }
    let (scales, mins) = k4_scales_mins(&b[4..16]);
    for j in 0..8 {
        for g in [2 * j, 2 * j + 1] {
            sc[g] = i32::from(scales[j]);
            c[g] = i32::from(mins[j]);
        }
    }
    (sc, c, bits(0), bits(2))
}

/// The eight 6-bit scales and eight 6-bit minimums of a Q4_K or Q5_K block
/// from its 12 packed bytes (`p`), by masks on 32-bit words: all of them at
/// once rather than one per-pair call. Sub-blocks 0–3 keep
/// scale and minimum in the low six bits of bytes 0–3 and 4–7; sub-blocks
/// 4–7 take their low four bits from the nibbles of bytes 8–11 and their
/// top two from the top bits of bytes 0–3 (scales) and 4–7 (minimums).
/// The test checks it against `pagoda_core::quant::k_scale_min`.
#[inline(always)]
pub(super) fn k4_scales_mins(p: &[u8]) -> ([u8; 8], [u8; 8]) {
    let (scales, mins) = k4_scale_words(p);
    (scales.to_le_bytes(), mins.to_le_bytes())
}

/// [`k4_scales_mins`] as two little-endian words (byte `j` is sub-block
/// `j`'s), for vector code that widens them in one instruction.
#[inline(always)]
pub(super) fn k4_scale_words(p: &[u8]) -> (u64, u64) {
    const LOW6: u32 = 0x3f3f_3f3f;
    const LOW4: u32 = 0x0f0f_0f0f;
    const TOP2: u32 = 0x0303_0303;
    let word = |i: usize| u32::from_le_bytes([p[4 * i], p[4 * i + 1], p[4 * i + 2], p[4 * i + 3]]);
    let (a, b, c) = (word(0), word(1), word(2));
    let scales_hi = (c & LOW4) | (((a >> 6) & TOP2) << 4);
    let mins_hi = ((c >> 4) & LOW4) | (((b >> 6) & TOP2) << 4);
    let join = |lo: u32, hi: u32| u64::from(lo) | (u64::from(hi) << 32);
    (join(a & LOW6, scales_hi), join(b & LOW6, mins_hi))
}

/// The sixteen 6-bit scales (stored plus 32) of a Q3_K block from its 12
/// packed bytes (`p`), by masks on 32-bit words: bytes 0–7 give the low
/// four bits (low nibbles for scales 0–7, high for 8–15), and bit pair
/// `j / 4` of byte `8 + j % 4` the top two. The test checks it against
/// `pagoda_core::quant::q3_k_scale`.
#[inline(always)]
pub(super) fn q3_k_scale_bytes(p: &[u8]) -> [u8; 16] {
    const LOW4: u32 = 0x0f0f_0f0f;
    const TOP2: u32 = 0x0303_0303;
    let word = |i: usize| u32::from_le_bytes([p[4 * i], p[4 * i + 1], p[4 * i + 2], p[4 * i + 3]]);
    let (a, b, t) = (word(0), word(1), word(2));
    let words = [
        (a & LOW4) | ((t & TOP2) << 4),
        (b & LOW4) | (((t >> 2) & TOP2) << 4),
        ((a >> 4) & LOW4) | (((t >> 4) & TOP2) << 4),
        ((b >> 4) & LOW4) | (((t >> 6) & TOP2) << 4),
    ];
    let mut out = [0u8; 16];
    for (o, w) in out.chunks_exact_mut(4).zip(words) {
        o.copy_from_slice(&w.to_le_bytes());
    }
    out
}

/// The eight 6-bit scales (stored plus 32) of an IQ4_XS block (`b` the
/// whole block) as the bytes of a little-endian word: the low nibbles of
/// bytes 4–7 in turn and the 2-bit fields of the u16 at bytes 2–3, each
/// spread to a byte of its own by shifts and masks (no per-scale loop).
/// Checked against `pagoda_core::quant::iq4_xs_scale`.
#[inline(always)]
pub(super) fn iq4_xs_scale_word(b: &[u8]) -> u64 {
    let low = u64::from(u32::from_le_bytes([b[4], b[5], b[6], b[7]]));
    let low = (low | (low << 16)) & 0x0000_ffff_0000_ffff;
    let low = (low | (low << 8)) & 0x00ff_00ff_00ff_00ff;
    let low = (low | (low << 4)) & 0x0f0f_0f0f_0f0f_0f0f;
    let high = u64::from(u16::from_le_bytes([b[2], b[3]]));
    let high = (high | (high << 24)) & 0x0000_00ff_0000_00ff;
    let high = (high | (high << 12)) & 0x000f_000f_000f_000f;
    let high = (high | (high << 6)) & 0x0303_0303_0303_0303;
    low | (high << 4)
}

/// [`iq4_xs_scale_word`]'s eight scales.
#[inline(always)]
pub(super) fn iq4_xs_scale_bytes(b: &[u8]) -> [u8; 8] {
    iq4_xs_scale_word(b).to_le_bytes()
}

/// Unpacks one K block (`b` starts at the block).
pub(super) fn kquant(kind: QuantKind, b: &[u8]) -> KBlock {
    let (sc, c, d, dc) = k_scales(kind, b);
    let mut k = KBlock {
        q: [0; 256],
        sc,
        c,
        d,
        dc,
    };
    match kind {
        QuantKind::Q2_K | QuantKind::Q3_K => {
            // Two halves of 32 bytes of 2-bit values (four planes of 32
            // values each); Q3_K's third bits, one plane of 32 bytes per 32
            // values, before them.
            let (qs, three) = if kind == QuantKind::Q3_K {
                (&b[32..96], true)
            } else {
                (&b[16..80], false)
            };
            for (e, q) in k.q.iter_mut().enumerate() {
                let (half, plane, l) = (e / 128, (e / 32) % 4, e % 32);
                let mut v = (qs[32 * half + l] >> (2 * plane)) & 3;
                if three {
                    v |= ((b[l] >> (e / 32)) & 1) << 2;
                }
                *q = v;
            }
            return k;
        }
        QuantKind::IQ4_XS => {
            for (e, q) in k.q.iter_mut().enumerate() {
                let (sub, l) = (e / 32, e % 32);
                let byte = b[8 + 16 * sub + l % 16];
                let index = if l < 16 { byte & 0x0f } else { byte >> 4 };
                *q = IQ4_VALUES[usize::from(index)] as u8;
            }
            return k;
        }
        _ => {}
    }
    if kind == QuantKind::Q6_K {
        // 128 bytes of low nibbles, 64 of high 2-bit pairs.
        let (ql, qh) = (&b[0..128], &b[128..192]);
        for n in 0..2 {
            let (ql, qh, y) = (&ql[64 * n..], &qh[32 * n..], &mut k.q[128 * n..]);
            for l in 0..32 {
                y[l] = (ql[l] & 0x0f) | ((qh[l] & 3) << 4);
                y[l + 32] = (ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4);
                y[l + 64] = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4);
                y[l + 96] = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4);
            }
        }
        return k;
    }
    // Q4_K / Q5_K: after the scales, (Q5_K) 32 bytes of fifth bits, then
    // 128 bytes of nibbles.
    let five = kind == QuantKind::Q5_K;
    let qs = if five { &b[48..176] } else { &b[16..144] };
    for i in 0..4 {
        let q = &qs[32 * i..32 * i + 32];
        for l in 0..32 {
            let (mut lo, mut hi) = (q[l] & 0x0f, q[l] >> 4);
            if five {
                let qh = b[16 + l];
                lo |= ((qh >> (2 * i)) & 1) << 4;
                hi |= ((qh >> (2 * i + 1)) & 1) << 4;
            }
            k.q[64 * i + l] = lo;
            k.q[64 * i + 32 + l] = hi;
        }
    }
    k
}

#[cfg(test)]
mod tests {
    use super::*;
    use pagoda_core::quant::k_scale_min;

    /// Fills `bytes` from the xorshift state `rng`.
    fn random_bytes(rng: &mut u64, bytes: &mut [u8]) {
        for byte in bytes {
            *rng ^= *rng << 13;
            *rng ^= *rng >> 7;
            *rng ^= *rng << 17;
            *byte = (*rng >> 56) as u8;
        }
    }

    #[test]
    fn q3_k_and_iq4_xs_scales_agree_with_the_core_unpacking() {
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..10_000 {
            let mut b = [0u8; 136];
            random_bytes(&mut rng, &mut b);
            let q3 = q3_k_scale_bytes(&b[..12]);
            for (j, &s) in q3.iter().enumerate() {
                assert_eq!(s, pagoda_core::quant::q3_k_scale(&b[..12], j), "Q3_K {j}");
            }
            let iq4 = iq4_xs_scale_bytes(&b);
            for (j, &s) in iq4.iter().enumerate() {
                assert_eq!(s, pagoda_core::quant::iq4_xs_scale(&b, j), "IQ4_XS {j}");
            }
        }
    }

    #[test]
    fn k4_scales_mins_agree_with_the_pairwise_unpacking() {
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..10_000 {
            let mut p = [0u8; 12];
            random_bytes(&mut rng, &mut p);
            let (scales, mins) = k4_scales_mins(&p);
            for j in 0..8 {
                assert_eq!(
                    (scales[j], mins[j]),
                    k_scale_min(&p, j),
                    "{p:?} sub-block {j}"
                );
            }
        }
    }
}
