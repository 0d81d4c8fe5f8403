//! The 32-element block formats (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1). Each function
//! takes exactly one block and its 32 outputs.

use super::scale;

/// Q8_0: f16 `d`, then 32 `i8`; `x = q × d`.
pub(super) fn q8_0(b: &[u8], out: &mut [f32]) {
    let d = scale(b, 0);
    for (o, &q) in out.iter_mut().zip(&b[2..34]) {
        *o = f32::from(q as i8) * d;
    }
}

/// Q4_0: f16 `d`, then 16 bytes of nibbles; element `j` is the low nibble of
/// byte `j`, element `j + 16` its high nibble; `x = (q − 8) × d`.
pub(super) fn q4_0(b: &[u8], out: &mut [f32]) {
    let d = scale(b, 0);
    let (lo, hi) = out.split_at_mut(16);
    for (j, &q) in b[2..18].iter().enumerate() {
        lo[j] = f32::from(i16::from(q & 0x0f) - 8) * d;
        hi[j] = f32::from(i16::from(q >> 4) - 8) * d;
    }
}

/// Q4_1: f16 `d`, f16 `m`, then 16 bytes of nibbles as in Q4_0; `x = q × d + m`.
pub(super) fn q4_1(b: &[u8], out: &mut [f32]) {
    let d = scale(b, 0);
    let m = scale(b, 2);
    let (lo, hi) = out.split_at_mut(16);
    for (j, &q) in b[4..20].iter().enumerate() {
        lo[j] = f32::from(q & 0x0f) * d + m;
        hi[j] = f32::from(q >> 4) * d + m;
    }
}

/// The fifth bits of a Q5 block: a little-endian u32, bit `j` for element `j`.
fn fifth_bits(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// The two 5-bit values byte `j` of a Q5 block's nibbles makes (elements `j`
/// and `j + 16`).
fn q5_pair(qh: u32, q: u8, j: usize) -> (u8, u8) {
    let hi0 = ((qh >> j) & 1) as u8;
    let hi1 = ((qh >> (j + 16)) & 1) as u8;
    ((q & 0x0f) | (hi0 << 4), (q >> 4) | (hi1 << 4))
}

/// Q5_0: f16 `d`, 4 bytes of fifth bits, 16 bytes of nibbles; `x = (q − 16) × d`.
pub(super) fn q5_0(b: &[u8], out: &mut [f32]) {
    let d = scale(b, 0);
    let qh = fifth_bits(b, 2);
    let (lo, hi) = out.split_at_mut(16);
    for (j, &q) in b[6..22].iter().enumerate() {
        let (a, c) = q5_pair(qh, q, j);
        lo[j] = f32::from(i16::from(a) - 16) * d;
        hi[j] = f32::from(i16::from(c) - 16) * d;
    }
}

/// Q5_1: f16 `d`, f16 `m`, 4 bytes of fifth bits, 16 bytes of nibbles;
/// `x = q × d + m`.
pub(super) fn q5_1(b: &[u8], out: &mut [f32]) {
    let d = scale(b, 0);
    let m = scale(b, 2);
    let qh = fifth_bits(b, 4);
    let (lo, hi) = out.split_at_mut(16);
    for (j, &q) in b[8..24].iter().enumerate() {
        let (a, c) = q5_pair(qh, q, j);
        lo[j] = f32::from(a) * d + m;
        hi[j] = f32::from(c) * d + m;
    }
}
