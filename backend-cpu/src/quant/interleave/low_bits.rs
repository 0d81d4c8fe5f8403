//! The group blocks of the low-bit types: IQ4_XS ([`i4`]), whose indices
//! are regrouped into Q4_K's nibble order, and Q2_K ([`k2`]) and Q3_K
//! ([`k3`]), whose 2-bit planes stay as the file has them (each 32-byte
//! span of a half block holds four planes of 32 values) and whose
//! per-16 scales are spread to bytes. Each `*_to_group` places one row's
//! block in its lane; each `*_from_group` takes it back bit for bit.

use super::{gather, spread, unpack, GROUP};

/// A group's IQ4_XS block: the eight rows' `d` (f16, 16 bytes), their
/// 6-bit scales as bytes, stored plus 32 as in the file (64: sub-block
/// `j`'s eight at `16 + 8j`), then their indices four bytes at a time
/// (1,024), each row's 128 bytes laid out as Q4_K's nibbles: byte `32i +
/// k` holds index `64i + k` in its low nibble and `64i + 32 + k` in its
/// high one (the file holds sub-block `j`'s as IQ4_NL's, `32j + k` and
/// `32j + 16 + k`). The kernels then read it as Q4_K's group block, with
/// one table lookup per nibble vector; 16 bytes a group more than the
/// file (1.5%).
pub(in super::super) mod i4 {
    pub const D: usize = 0;
    pub const SCALES: usize = 16;
    pub const QS: usize = SCALES + 64;
    pub const BLOCK: usize = QS + 8 * 128;
}

/// A group's Q2_K block: the eight rows' `d` (16 bytes), their `dmin`
/// (16), their per-16 scale bytes as the file has them (low nibble the
/// scale, high the minimum; 128: sub-block `s`'s eight at `32 + 8s`), then
/// their 64 bytes of 2-bit values four at a time (512): load `8h + c`
/// holds bytes `32h + 4c..` of each row, whose plane `p` (bits `2p..2p +
/// 2`) are values `128h + 32p + 4c..` of sub-block `8h + 2p + c / 4`.
/// Exactly eight rows' bytes (672).
pub(in super::super) mod k2 {
    pub const D: usize = 0;
    pub const DMIN: usize = 16;
    pub const SCALES: usize = 32;
    pub const QS: usize = SCALES + 128;
    pub const BLOCK: usize = QS + 8 * 64;
}

/// A group's Q3_K block: the eight rows' `d` (16 bytes), their sixteen
/// 6-bit scales as bytes, stored plus 32 (128: sub-block `s`'s eight at
/// `16 + 8s`), their 32 bytes of high bits four at a time (256: load `c`
/// holds bytes `4c..` of each row, bit `4h + p` of which is the high bit
/// of the values plane `p` of load `8h + c` below holds), then their 2-bit
/// values as [`k2`]'s (512). 32 bytes a group more than the file (3.6%).
pub(in super::super) mod k3 {
    pub const D: usize = 0;
    pub const SCALES: usize = 16;
    pub const HM: usize = SCALES + 128;
    pub const QS: usize = HM + 8 * 32;
    pub const BLOCK: usize = QS + 8 * 64;
}

/// One IQ4_XS block (136 bytes) of row `lane` into its group's block (see
/// [`i4`]).
pub(super) fn iq4_xs_to_group(src: &[u8], dst: &mut [u8], lane: usize) {
    let (src, dst, lane) = (&src[..136], &mut dst[..i4::BLOCK], lane % GROUP);
    dst[i4::D + 2 * lane..i4::D + 2 * lane + 2].copy_from_slice(&src[0..2]);
    for (j, scale) in unpack::iq4_xs_scale_bytes(src).into_iter().enumerate() {
        dst[i4::SCALES + 8 * j + lane] = scale;
    }
    // Index `v` of the file's sub-block `v / 32` sits in nibble
    // `(v % 32) / 16` of byte `16 (v / 32) + v % 16`.
    let index = |v: usize| (src[8 + 16 * (v / 32) + v % 16] >> (4 * ((v % 32) / 16))) & 0x0f;
    let nibbles: [u8; 128] = std::array::from_fn(|at| {
        let (i, k) = (at / 32, at % 32);
        index(64 * i + k) | (index(64 * i + 32 + k) << 4)
    });
    spread(&nibbles, &mut dst[i4::QS..], lane);
}

/// [`iq4_xs_to_group`] undone (`dst`: the row's block).
pub(super) fn iq4_xs_from_group(src: &[u8], dst: &mut [u8], lane: usize) {
    let (src, dst, lane) = (&src[..i4::BLOCK], &mut dst[..136], lane % GROUP);
    dst[0..2].copy_from_slice(&src[i4::D + 2 * lane..i4::D + 2 * lane + 2]);
    let scales: [u8; 8] = std::array::from_fn(|j| src[i4::SCALES + 8 * j + lane]);
    let mut high = 0u16;
    for (j, &s) in scales.iter().enumerate() {
        high |= u16::from(s >> 4 & 3) << (2 * j);
    }
    dst[2..4].copy_from_slice(&high.to_le_bytes());
    for k in 0..4 {
        dst[4 + k] = (scales[2 * k] & 0x0f) | ((scales[2 * k + 1] & 0x0f) << 4);
    }
    let mut nibbles = [0u8; 128];
    gather(&src[i4::QS..], &mut nibbles, lane);
    let index = |v: usize| (nibbles[32 * (v / 64) + v % 32] >> (4 * ((v % 64) / 32))) & 0x0f;
    for (at, byte) in dst[8..136].iter_mut().enumerate() {
        let (j, k) = (at / 16, at % 16);
        *byte = index(32 * j + k) | (index(32 * j + 16 + k) << 4);
    }
}

/// One Q2_K block (84 bytes) of row `lane` into its group's block (see
/// [`k2`]).
pub(super) fn q2_k_to_group(src: &[u8], dst: &mut [u8], lane: usize) {
    let (src, dst, lane) = (&src[..84], &mut dst[..k2::BLOCK], lane % GROUP);
    dst[k2::D + 2 * lane..k2::D + 2 * lane + 2].copy_from_slice(&src[80..82]);
    dst[k2::DMIN + 2 * lane..k2::DMIN + 2 * lane + 2].copy_from_slice(&src[82..84]);
    for (s, &scale) in src[..16].iter().enumerate() {
        dst[k2::SCALES + 8 * s + lane] = scale;
    }
    spread(&src[16..80], &mut dst[k2::QS..], lane);
}

/// [`q2_k_to_group`] undone (`dst`: the row's block).
pub(super) fn q2_k_from_group(src: &[u8], dst: &mut [u8], lane: usize) {
    let (src, dst, lane) = (&src[..k2::BLOCK], &mut dst[..84], lane % GROUP);
    dst[80..82].copy_from_slice(&src[k2::D + 2 * lane..k2::D + 2 * lane + 2]);
    dst[82..84].copy_from_slice(&src[k2::DMIN + 2 * lane..k2::DMIN + 2 * lane + 2]);
    for (s, scale) in dst[..16].iter_mut().enumerate() {
        *scale = src[k2::SCALES + 8 * s + lane];
    }
    gather(&src[k2::QS..], &mut dst[16..80], lane);
}

/// One Q3_K block (110 bytes) of row `lane` into its group's block (see
/// [`k3`]).
pub(super) fn q3_k_to_group(src: &[u8], dst: &mut [u8], lane: usize) {
    let (src, dst, lane) = (&src[..110], &mut dst[..k3::BLOCK], lane % GROUP);
    dst[k3::D + 2 * lane..k3::D + 2 * lane + 2].copy_from_slice(&src[108..110]);
    for (s, scale) in unpack::q3_k_scale_bytes(&src[96..108])
        .into_iter()
        .enumerate()
    {
        dst[k3::SCALES + 8 * s + lane] = scale;
    }
    spread(&src[..32], &mut dst[k3::HM..k3::QS], lane);
    spread(&src[32..96], &mut dst[k3::QS..], lane);
}

/// [`q3_k_to_group`] undone (`dst`: the row's block): the sixteen 6-bit
/// scales packed back into 12 bytes (low nibbles of 0..8 in bytes 0..8,
/// of 8..16 in their high nibbles, the top two bits of scale `s` at bits
/// `2 (s / 4)` of byte `8 + s % 4`), which fill them exactly.
pub(super) fn q3_k_from_group(src: &[u8], dst: &mut [u8], lane: usize) {
    let (src, dst, lane) = (&src[..k3::BLOCK], &mut dst[..110], lane % GROUP);
    dst[108..110].copy_from_slice(&src[k3::D + 2 * lane..k3::D + 2 * lane + 2]);
    let scales: [u8; 16] = std::array::from_fn(|s| src[k3::SCALES + 8 * s + lane]);
    let packed = &mut dst[96..108];
    packed.fill(0);
    for (s, &scale) in scales.iter().enumerate() {
        packed[s % 8] |= (scale & 0x0f) << (4 * (s / 8));
        packed[8 + s % 4] |= ((scale >> 4) & 3) << (2 * (s / 4));
    }
    gather(&src[k3::HM..k3::QS], &mut dst[..32], lane);
    gather(&src[k3::QS..], &mut dst[32..96], lane);
}
