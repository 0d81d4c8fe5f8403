//! The table-lookup 4-bit formats (IQ4_NL, IQ4_XS, MXFP4): each 4-bit
//! index picks one of sixteen fixed values, spaced closer near zero where
//! most weights lie. Each function takes exactly one block and its outputs.

use super::{half::e8m0_half_to_f32, scale};

/// The sixteen values an IQ4 index names, as llama.cpp's `kvalues_iq4nl`.
pub const IQ4_VALUES: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// The sixteen E2M1 floats an MXFP4 index names, doubled to integers (as
/// llama.cpp's `kvalues_mxfp4`): the block scale is halved to match, so
/// products over them stay in integers.
pub const MXFP4_VALUES: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// 32 outputs from 16 bytes of indices laid out as Q4_0's (element `j`
/// the low nibble of byte `j`, element `j + 16` its high nibble), times
/// `d`.
fn indices(d: f32, qs: &[u8], out: &mut [f32]) {
    let (lo, hi) = out.split_at_mut(16);
    for (j, &q) in qs[..16].iter().enumerate() {
        lo[j] = d * f32::from(IQ4_VALUES[usize::from(q & 0x0f)]);
        hi[j] = d * f32::from(IQ4_VALUES[usize::from(q >> 4)]);
    }
}

/// IQ4_NL: f16 `d`, then 16 bytes of indices; `x = d × value`.
pub(super) fn iq4_nl(b: &[u8], out: &mut [f32]) {
    indices(scale(b, 0), &b[2..18], out);
}

/// MXFP4: an E8M0 exponent byte `e`, then 16 bytes of indices laid out as
/// IQ4_NL's; `x = 2^(e − 128) × doubled value`, exact.
pub(super) fn mxfp4(b: &[u8], out: &mut [f32]) {
    let d = e8m0_half_to_f32(b[0]);
    let (lo, hi) = out.split_at_mut(16);
    for (j, &q) in b[1..17].iter().enumerate() {
        lo[j] = d * f32::from(MXFP4_VALUES[usize::from(q & 0x0f)]);
        hi[j] = d * f32::from(MXFP4_VALUES[usize::from(q >> 4)]);
    }
}

/// The 6-bit scale of IQ4_XS sub-block `j` (0..8, stored plus 32): four
/// bits from nibble `j % 2` of the low-scale byte `j / 2`, two from bits
/// `2j..2j + 2` of the high-scale word. `b` is the whole block.
pub fn iq4_xs_scale(b: &[u8], j: usize) -> u8 {
    let high = u16::from_le_bytes([b[2], b[3]]);
    let low = (b[4 + j / 2] >> (4 * (j % 2))) & 0x0f;
    low | ((((high >> (2 * j)) & 3) as u8) << 4)
}

/// IQ4_XS: f16 `d`, a u16 of high scale bits, 4 bytes of low scale bits,
/// then 8 sub-blocks of 16 bytes of indices (each as IQ4_NL's); `x = (d ×
/// (sc − 32)) × value`.
pub(super) fn iq4_xs(b: &[u8], out: &mut [f32]) {
    let d = scale(b, 0);
    for (j, (y, qs)) in out
        .chunks_exact_mut(32)
        .zip(b[8..136].chunks_exact(16))
        .enumerate()
    {
        let dl = d * f32::from(i16::from(iq4_xs_scale(b, j)) - 32);
        indices(dl, qs, y);
    }
}
