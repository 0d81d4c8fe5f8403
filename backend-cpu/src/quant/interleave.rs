//! Weights repacked at load into rows interleaved [`GROUP`] at a time, so
//! that one activation block meets eight rows' blocks in full registers
//! (llama.cpp's `CPU_REPACK` and ik_llama.cpp's `_R8` types do the same).
//!
//! A matrix of [`Interleaved`](WeightLayout::Interleaved) layout is groups of
//! [`GROUP`] weight rows; each group holds its blocks in column order, and
//! each block of the group is the eight rows' f16 scales (16 bytes; for
//! Q4_1 and Q5_1 then their f16 minimums; for Q5_0 and Q5_1 then their
//! fifth bits, see `q5_lane_bits`), then their payloads four bytes at a
//! time: bytes `4c..4c + 4` of row 0, of row 1, ... of row 7, then bytes
//! `4c + 4..`. A 32-byte load then gives every row's four bytes in its own
//! 32-bit lane, so the products of one block
//! come out as one vector of eight rows' sums, scaled by one vector of
//! eight rows' scales: per row and block, a Q4_0 product costs about five
//! vector instructions instead of seventeen. A last group of fewer rows is
//! padded with zero rows, which are computed and never stored.
//!
//! ```
//! use pagoda_core::QuantKind;
//! use pagoda_cpu::quant::interleave::{interleave, interleaved_len, plain_row};
//!
//! // Three Q4_0 rows of 32 weights: scale 1.0 (0x3c00), nibbles r + 1.
//! let mut plain = Vec::new();
//! for r in 0..3u8 {
//!     plain.extend_from_slice(&0x3c00u16.to_le_bytes());
//!     plain.extend(std::iter::repeat((r + 1) * 0x11).take(16));
//! }
//! let len = interleaved_len(QuantKind::Q4_0, 3, 32).unwrap();
//! assert_eq!(len, 8 * 18); // one group of eight rows, five of them padding
//! let mut packed = vec![0u8; len];
//! interleave(QuantKind::Q4_0, 3, 32, &plain, &mut packed).unwrap();
//! let mut row = vec![0u8; 18];
//! plain_row(QuantKind::Q4_0, 32, &packed, 2, &mut row);
//! assert_eq!(row, &plain[36..54]);
//! ```

use pagoda_core::QuantKind;

use super::{unpack, QMatError};
use crate::Isa;

mod low_bits;

#[cfg(target_arch = "x86_64")] // the AVX2 kernels read the layout
pub(super) use k4::{
    BLOCK as K4_GROUP_BLOCK, DMIN as K4_DMIN, MINS as K4_MINS, QS as K4_QS, SCALES as K4_SCALES,
};
#[cfg(target_arch = "x86_64")]
pub(super) use k5::{BLOCK as K5_GROUP_BLOCK, QH as K5_QH, QS as K5_QS};
#[cfg(target_arch = "x86_64")]
pub(super) use k6::{
    BLOCK as K6_GROUP_BLOCK, D as K6_D, QS as K6_QS, SCALES as K6_SCALES, SCALE_PAIRS as K6_PAIRS,
};
#[cfg(target_arch = "x86_64")]
pub(super) use low_bits::i4::{BLOCK as I4_GROUP_BLOCK, QS as I4_QS, SCALES as I4_SCALES};
#[cfg(target_arch = "x86_64")]
pub(super) use low_bits::k2::{
    BLOCK as K2_GROUP_BLOCK, DMIN as K2_DMIN, QS as K2_QS, SCALES as K2_SCALES,
};
#[cfg(target_arch = "x86_64")]
pub(super) use low_bits::k3::{
    BLOCK as K3_GROUP_BLOCK, HM as K3_HM, QS as K3_QS, SCALES as K3_SCALES,
};
use low_bits::{i4, k2, k3};

/// Weight rows interleaved together.
pub const GROUP: usize = 8;

/// Bytes of a row's payload that sit together in a 32-bit lane.
const LANE: usize = 4;

/// How a [`QuantMatrix`](super::QuantMatrix)'s rows are laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightLayout {
    /// GGUF's rows, back to back (a file's bytes used in place).
    Plain,
    /// Groups of [`GROUP`] rows interleaved (see the module docs).
    Interleaved,
}

/// Whether `kind` can be interleaved: the types whose products have an
/// interleaved kernel (Q4_0 and Q8_0: an f16 scale, then the payload; Q4_1:
/// an f16 scale and minimum; Q5_0 and Q5_1, as Q4_0 and Q4_1 with their
/// fifth bits; Q4_K, whose 6-bit scales and minimums are unpacked to
/// bytes, and Q5_K, which adds its fifth bits; Q6_K, whose six bits a value
/// are regrouped so that three masks and three shifts unpack them; IQ4_XS,
/// whose indices are laid out as Q4_K's nibbles and its scales as bytes;
/// Q2_K and Q3_K, whose per-16 scales are spread to bytes, see
/// `low_bits`).
pub fn interleaves(kind: QuantKind) -> bool {
    matches!(
        kind,
        QuantKind::IQ4_XS
            | QuantKind::MXFP4
            | QuantKind::Q2_K
            | QuantKind::Q3_K
            | QuantKind::Q4_0
            | QuantKind::Q4_1
            | QuantKind::Q5_0
            | QuantKind::Q5_1
            | QuantKind::Q8_0
            | QuantKind::Q4_K
            | QuantKind::Q5_K
            | QuantKind::Q6_K
    )
}

/// Whether `isa` multiplies interleaved `kind` rows in place: AVX2 and the
/// VNNI sets do for every type [`interleaves`] takes. Elsewhere (NEON,
/// scalar) every product copies interleaved rows back to plain ones first,
/// so a loader should keep such a matrix plain.
pub fn multiplies_in_place(isa: Isa, kind: QuantKind) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        interleaves(kind) && isa.base() == Isa::Avx2
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (isa, kind);
        false
    }
}

/// f16 fields that open a block of `kind` (scale; Q4_1 and Q5_1: scale,
/// minimum).
fn heads(kind: QuantKind) -> usize {
    if matches!(kind, QuantKind::Q4_1 | QuantKind::Q5_1) {
        2
    } else {
        1
    }
}

/// Whether a legacy block's payload opens with 32 fifth bits (Q5_0, Q5_1).
fn has_fifth_bits(kind: QuantKind) -> bool {
    matches!(kind, QuantKind::Q5_0 | QuantKind::Q5_1)
}

/// A Q5_0 or Q5_1 block's fifth bits (`qh`, bit `v` for value `v`) laid out
/// for the kernel, which meets the nibbles four bytes at a time: byte `k`
/// holds in bit `2c` the bit of value `4c + k` (the low nibble of byte `k`
/// of chunk `c`) and in bit `2c + 1` that of value `16 + 4c + k` (its
/// high nibble), so one shift by `2c` brings chunk `c`'s bits to bits 0
/// and 1 of each byte, as for Q5_K.
fn q5_lane_bits(qh: u32) -> [u8; LANE] {
    // Each half of `qh` is a 4 × 4 bit matrix (bit `4c + k`: row `c`,
    // column `k`); transposed, nibble `k` holds column `k`, whose bits are
    // then spread to the even (low half) and odd (high half) bits of byte
    // `k`: a few dozen operations a block, where a loop over the 32 bits
    // takes a few hundred.
    let (lo, hi) = (transpose4x4(qh as u16), transpose4x4((qh >> 16) as u16));
    std::array::from_fn(|k| {
        let nibble = |v: u16| ((v >> (4 * k)) & 0xf) as u8;
        spread_even(nibble(lo)) | (spread_even(nibble(hi)) << 1)
    })
}

/// [`q5_lane_bits`] undone.
fn q5_plain_bits(lane_bits: [u8; LANE]) -> u32 {
    let (mut lo, mut hi) = (0u16, 0u16);
    for (k, &byte) in lane_bits.iter().enumerate() {
        lo |= u16::from(gather_even(byte)) << (4 * k);
        hi |= u16::from(gather_even(byte >> 1)) << (4 * k);
    }
    u32::from(transpose4x4(lo)) | (u32::from(transpose4x4(hi)) << 16)
}

/// The 4 × 4 bit matrix `x` (bit `4r + c`) transposed, by two swaps of
/// off-diagonal blocks (1 × 1, then 2 × 2).
fn transpose4x4(mut x: u16) -> u16 {
    let t = (x ^ (x >> 3)) & 0x0a0a;
    x ^= t ^ (t << 3);
    let t = (x ^ (x >> 6)) & 0x00cc;
    x ^ t ^ (t << 6)
}

/// Bits 0..4 of `n` moved to bits 0, 2, 4 and 6.
fn spread_even(n: u8) -> u8 {
    let n = (n | (n << 2)) & 0x33;
    (n | (n << 1)) & 0x55
}

/// Bits 0, 2, 4 and 6 of `b` gathered to bits 0..4.
fn gather_even(b: u8) -> u8 {
    let b = b & 0x55;
    let b = (b | (b >> 1)) & 0x33;
    (b | (b >> 2)) & 0x0f
}

/// A group's Q4_K block: the eight rows' `d` (f16, 16 bytes), their `dmin`
/// (16), their scales (64: sub-block `j`'s eight at `32 + 8j`), their
/// minimums in pairs (64: sub-blocks `2k` and `2k + 1` of row `r` at
/// `96 + 16k + 2r`), then their 128 bytes of nibbles four at a time as for
/// the other types (1,024). The scales unpacked to bytes cost 32 bytes a
/// group (2.8%) and save the kernel unpacking eight rows' 6-bit fields.
mod k4 {
    pub const D: usize = 0;
    pub const DMIN: usize = 16;
    pub const SCALES: usize = 32;
    pub const MINS: usize = 96;
    pub const QS: usize = 160;
    pub const BLOCK: usize = QS + 8 * 128;
}

/// A group's Q5_K block: as [`k4`]'s, with the eight rows' 32 bytes of
/// fifth bits four at a time (256; lane `r` of load `c` holds bytes
/// `4c..4c + 4` of row `r`, the bits of the values its nibbles at the same
/// place hold) before the nibbles.
mod k5 {
    pub const QH: usize = super::k4::QS;
    pub const QS: usize = QH + 8 * 32;
    pub const BLOCK: usize = QS + 8 * 128;
}

/// A group's Q6_K block: the eight rows' `d` (f16, 16 bytes), their 16
/// scales in eight pairs (128: pair `p` of row `r` at `16 + 16p + 2r`, the
/// pairs' scales given by [`SCALE_PAIRS`](k6::SCALE_PAIRS)), then 16 steps
/// of three 32-byte vectors (1,536), each lane four bytes of one row. Step
/// `i`'s vectors hold in bits 0..6 of byte `k` the values `4i + k`,
/// `64 + 4i + k` and `128 + 4i + k`, and in bits 6..8 two bits each of
/// value `192 + 4i + k` (its bits 0..2, 2..4 and 4..6): three masks give
/// three values' vectors, three shifts and masks the fourth's, where
/// GGUF's split of four low bits and two high bits takes about twice the
/// instructions. The block is exactly eight rows' bytes (1,680).
mod k6 {
    pub const D: usize = 0;
    pub const SCALES: usize = 16;
    pub const QS: usize = SCALES + 8 * 16;
    pub const BLOCK: usize = QS + 16 * 3 * 32;
    /// The two scales (sub-blocks of 16 values) of each pair: the four
    /// scales one step's vectors need (`i / 4`, `4 + i / 4`, `8 + i / 4`,
    /// `12 + i / 4`) come in two pairs, and pairs 0..4 take the activation
    /// sums of the first eight sub-blocks, pairs 4..8 of the last eight.
    pub const SCALE_PAIRS: [(usize, usize); 8] = [
        (0, 4),
        (1, 5),
        (2, 6),
        (3, 7),
        (8, 12),
        (9, 13),
        (10, 14),
        (11, 15),
    ];
}

/// Bytes of one group's block: eight rows' blocks of the same columns.
fn group_block(kind: QuantKind) -> usize {
    match kind {
        QuantKind::IQ4_XS => i4::BLOCK,
        QuantKind::Q2_K => k2::BLOCK,
        QuantKind::Q3_K => k3::BLOCK,
        QuantKind::Q4_K => k4::BLOCK,
        QuantKind::Q5_K => k5::BLOCK,
        QuantKind::Q6_K => k6::BLOCK,
        _ => GROUP * kind.block_bytes(),
    }
}

/// Bytes an interleaved `rows × cols` matrix of `kind` takes (the last
/// group padded to [`GROUP`] rows; `rows` = [`GROUP`] gives one group's).
pub fn interleaved_len(kind: QuantKind, rows: usize, cols: usize) -> Result<usize, QMatError> {
    if !interleaves(kind) {
        return Err(QMatError::Layout { kind });
    }
    kind.bytes_for(cols).map_err(|e| match e {
        pagoda_core::QuantError::PartialBlock { .. } => QMatError::PartialBlock { kind, cols },
        _ => QMatError::Overflow,
    })?;
    let blocks = cols / kind.block_elems();
    rows.div_ceil(GROUP)
        .checked_mul(blocks)
        .and_then(|n| n.checked_mul(group_block(kind)))
        .ok_or(QMatError::Overflow)
}

/// Repacks `plain` (`rows` GGUF rows of `cols` `kind` elements) into `out`
/// ([`interleaved_len`] bytes), padding rows zero.
pub fn interleave(
    kind: QuantKind,
    rows: usize,
    cols: usize,
    plain: &[u8],
    out: &mut [u8],
) -> Result<(), QMatError> {
    let len = interleaved_len(kind, rows, cols)?;
    let row_bytes = kind.bytes_for(cols).map_err(|_| QMatError::Overflow)?;
    let expected = rows * row_bytes;
    if plain.len() != expected {
        return Err(QMatError::DataLength {
            expected,
            found: plain.len(),
        });
    }
    if out.len() != len {
        return Err(QMatError::OutputLength {
            expected: len,
            found: out.len(),
        });
    }
    let (block, gblock) = (kind.block_bytes(), group_block(kind));
    let blocks = cols / kind.block_elems();
    // Only a last, partial group has padding lanes; every other byte is
    // written below.
    if !rows.is_multiple_of(GROUP) {
        let last = rows / GROUP * blocks * gblock;
        out[last..].fill(0);
    }
    for (r, row) in plain.chunks_exact(row_bytes.max(1)).enumerate().take(rows) {
        let (g, lane) = (r / GROUP, r % GROUP);
        for (b, src) in row.chunks_exact(block).enumerate() {
            let at = (g * blocks + b) * gblock;
            let dst = &mut out[at..at + gblock];
            match kind {
                QuantKind::Q6_K => k6_to_group(src, dst, lane),
                QuantKind::IQ4_XS => low_bits::iq4_xs_to_group(src, dst, lane),
                QuantKind::Q2_K => low_bits::q2_k_to_group(src, dst, lane),
                QuantKind::Q3_K => low_bits::q3_k_to_group(src, dst, lane),
                QuantKind::Q4_K | QuantKind::Q5_K => {
                    k_to_group(src, dst, lane, kind == QuantKind::Q5_K)
                }
                QuantKind::MXFP4 => mxfp4_to_group(src, dst, lane),
                _ => legacy_to_group(kind, src, dst, lane),
            }
        }
    }
    Ok(())
}

/// One MXFP4 block (an E8M0 byte, then Q4_0's nibbles) of row `lane` into
/// its group's block: the eight rows' exponent bytes, then their nibbles
/// four bytes at a time as Q4_0's (the group block is eight plain ones').
fn mxfp4_to_group(src: &[u8], dst: &mut [u8], lane: usize) {
    dst[lane] = src[0];
    spread(&src[1..17], &mut dst[GROUP..], lane);
}

/// [`mxfp4_to_group`] undone (`dst`: the row's block).
fn mxfp4_from_group(src: &[u8], dst: &mut [u8], lane: usize) {
    dst[0] = src[lane];
    gather(&src[GROUP..], &mut dst[1..17], lane);
}

/// One legacy block (an f16 scale, Q4_1's and Q5_1's minimum, Q5_0's and
/// Q5_1's fifth bits, then the payload) of row `lane` into its group's
/// block.
fn legacy_to_group(kind: QuantKind, src: &[u8], dst: &mut [u8], lane: usize) {
    let heads = heads(kind);
    for h in 0..heads {
        let at = 2 * (GROUP * h + lane);
        dst[at..at + 2].copy_from_slice(&src[2 * h..2 * h + 2]);
    }
    let (mut src, mut dst) = (&src[2 * heads..], &mut dst[2 * GROUP * heads..]);
    if has_fifth_bits(kind) {
        let qh = u32::from_le_bytes([src[0], src[1], src[2], src[3]]);
        dst[LANE * lane..LANE * lane + LANE].copy_from_slice(&q5_lane_bits(qh));
        (src, dst) = (&src[LANE..], &mut dst[GROUP * LANE..]);
    }
    spread(src, dst, lane);
}

/// Places a row's payload four bytes at a time in its lane of the group's.
/// Each step takes one chunk's eight lanes of `dst`, so the copy's place
/// in them is fixed and its bounds check provable: loading an 8B model
/// moves a billion chunks.
fn spread(src: &[u8], dst: &mut [u8], lane: usize) {
    let at = (lane % GROUP) * LANE;
    for (four, lanes) in src
        .chunks_exact(LANE)
        .zip(dst.chunks_exact_mut(GROUP * LANE))
    {
        lanes[at..at + LANE].copy_from_slice(four);
    }
}

/// Takes a row's payload back out of its lane (`dst` its length).
fn gather(src: &[u8], dst: &mut [u8], lane: usize) {
    let at = (lane % GROUP) * LANE;
    for (four, lanes) in dst
        .chunks_exact_mut(LANE)
        .zip(src.chunks_exact(GROUP * LANE))
    {
        four.copy_from_slice(&lanes[at..at + LANE]);
    }
}

/// One Q4_K block (144 bytes) or, with `five`, Q5_K block (176) of row
/// `lane` into its group's block (see [`k4`], [`k5`]).
fn k_to_group(src: &[u8], dst: &mut [u8], lane: usize, five: bool) {
    dst[k4::D + 2 * lane..k4::D + 2 * lane + 2].copy_from_slice(&src[0..2]);
    dst[k4::DMIN + 2 * lane..k4::DMIN + 2 * lane + 2].copy_from_slice(&src[2..4]);
    let (scales, mins) = unpack::k4_scales_mins(&src[4..16]);
    for j in 0..8 {
        dst[k4::SCALES + 8 * j + lane] = scales[j];
        dst[k4::MINS + 16 * (j / 2) + 2 * lane + j % 2] = mins[j];
    }
    if five {
        spread(&src[16..48], &mut dst[k5::QH..k5::QS], lane);
        spread(&src[48..176], &mut dst[k5::QS..], lane);
    } else {
        spread(&src[16..144], &mut dst[k4::QS..], lane);
    }
}

/// [`k_to_group`] undone (`dst`: the row's block).
fn k_from_group(src: &[u8], dst: &mut [u8], lane: usize, five: bool) {
    dst[0..2].copy_from_slice(&src[k4::D + 2 * lane..k4::D + 2 * lane + 2]);
    dst[2..4].copy_from_slice(&src[k4::DMIN + 2 * lane..k4::DMIN + 2 * lane + 2]);
    let scales: [u8; 8] = std::array::from_fn(|j| src[k4::SCALES + 8 * j + lane]);
    let mins: [u8; 8] = std::array::from_fn(|j| src[k4::MINS + 16 * (j / 2) + 2 * lane + j % 2]);
    dst[4..16].copy_from_slice(&k4_pack(&scales, &mins));
    if five {
        gather(&src[k5::QH..k5::QS], &mut dst[16..48], lane);
        gather(&src[k5::QS..], &mut dst[48..176], lane);
    } else {
        gather(&src[k4::QS..], &mut dst[16..144], lane);
    }
}

/// Bytes 0..4 of every byte pair's six-bit values, four values a word.
const LOW6: u32 = 0x3f3f_3f3f;
const LOW4: u32 = 0x0f0f_0f0f;
const LOW2: u32 = 0x0303_0303;

/// The little-endian word at `at` of `b`.
fn word(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// One Q6_K block (210 bytes) of row `lane` into its group's block (see
/// [`k6`]), four values a word: in GGUF's order value `l + 32j` of each
/// half (`l` below 32) takes the low (`j` < 2) or high nibble of
/// `ql[l + 32 (j mod 2)]` and bits `2j..2j + 2` of `qh[l]`, so the words
/// at `l`, `32 + l` of a half's `ql` and at `l` of its `qh` hold that
/// half's values `l`, `32 + l`, `64 + l` and `96 + l` (four each).
fn k6_to_group(src: &[u8], dst: &mut [u8], lane: usize) {
    // Whole blocks, so that the indices below need no checks.
    let (src, dst, lane) = (&src[..210], &mut dst[..k6::BLOCK], lane % GROUP);
    dst[k6::D + 2 * lane..k6::D + 2 * lane + 2].copy_from_slice(&src[208..210]);
    for (p, &(s1, s2)) in k6::SCALE_PAIRS.iter().enumerate() {
        let at = k6::SCALES + 16 * p + 2 * lane;
        dst[at] = src[192 + s1];
        dst[at + 1] = src[192 + s2];
    }
    for l in (0..32).step_by(LANE) {
        // Values l.., 32 + l.., ..., 224 + l.. of the block.
        let mut v = [0u32; 8];
        for half in 0..2 {
            let (lo, hi, h) = (
                word(src, 64 * half + l),
                word(src, 64 * half + 32 + l),
                word(src, 128 + 32 * half + l),
            );
            v[4 * half] = (lo & LOW4) | ((h & LOW2) << 4);
            v[4 * half + 1] = (hi & LOW4) | (((h >> 2) & LOW2) << 4);
            v[4 * half + 2] = ((lo >> 4) & LOW4) | (((h >> 4) & LOW2) << 4);
            v[4 * half + 3] = ((hi >> 4) & LOW4) | (((h >> 6) & LOW2) << 4);
        }
        // Step i = l / 4 holds values 4i.., 64 + 4i.., 128 + 4i.. and
        // 192 + 4i..; step i + 8 the same 32 on.
        for (step, [a, b, c, d]) in [
            (l / LANE, [v[0], v[2], v[4], v[6]]),
            (l / LANE + 8, [v[1], v[3], v[5], v[7]]),
        ] {
            let at = k6::QS + 96 * step + LANE * lane;
            let bytes = [
                a | ((d & LOW2) << 6),
                b | (((d >> 2) & LOW2) << 6),
                c | (((d >> 4) & LOW2) << 6),
            ];
            for (t, byte) in bytes.into_iter().enumerate() {
                dst[at + 32 * t..at + 32 * t + LANE].copy_from_slice(&byte.to_le_bytes());
            }
        }
    }
}

/// [`k6_to_group`] undone (`dst`: the row's block).
fn k6_from_group(src: &[u8], dst: &mut [u8], lane: usize) {
    let (src, dst, lane) = (&src[..k6::BLOCK], &mut dst[..210], lane % GROUP);
    dst[208..210].copy_from_slice(&src[k6::D + 2 * lane..k6::D + 2 * lane + 2]);
    for (p, &(s1, s2)) in k6::SCALE_PAIRS.iter().enumerate() {
        let at = k6::SCALES + 16 * p + 2 * lane;
        dst[192 + s1] = src[at];
        dst[192 + s2] = src[at + 1];
    }
    for l in (0..32).step_by(LANE) {
        let mut v = [0u32; 8];
        for (k, step) in [l / LANE, l / LANE + 8].into_iter().enumerate() {
            let at = k6::QS + 96 * step + LANE * lane;
            let (x, y, z) = (word(src, at), word(src, at + 32), word(src, at + 64));
            v[k] = x & LOW6;
            v[2 + k] = y & LOW6;
            v[4 + k] = z & LOW6;
            v[6 + k] = ((x >> 6) & LOW2) | (((y >> 6) & LOW2) << 2) | (((z >> 6) & LOW2) << 4);
        }
        for half in 0..2 {
            let [a, a2, b, b2] = [
                v[4 * half],
                v[4 * half + 1],
                v[4 * half + 2],
                v[4 * half + 3],
            ];
            let lo = (a & LOW4) | ((b & LOW4) << 4);
            let hi = (a2 & LOW4) | ((b2 & LOW4) << 4);
            let h = ((a >> 4) & LOW2)
                | (((a2 >> 4) & LOW2) << 2)
                | (((b >> 4) & LOW2) << 4)
                | (((b2 >> 4) & LOW2) << 6);
            for (at, w) in [
                (64 * half + l, lo),
                (64 * half + 32 + l, hi),
                (128 + 32 * half + l, h),
            ] {
                dst[at..at + LANE].copy_from_slice(&w.to_le_bytes());
            }
        }
    }
}

/// Packs eight 6-bit scales and minimums into a Q4_K block's 12 bytes: the
/// inverse of [`unpack::k4_scales_mins`] (16 six-bit fields fill the 96
/// bits, so every block comes back bit for bit).
fn k4_pack(scales: &[u8; 8], mins: &[u8; 8]) -> [u8; 12] {
    let mut p = [0u8; 12];
    for j in 0..4 {
        p[j] = (scales[j] & 0x3f) | ((scales[j + 4] >> 4) << 6);
        p[j + 4] = (mins[j] & 0x3f) | ((mins[j + 4] >> 4) << 6);
        p[j + 8] = (scales[j + 4] & 0x0f) | ((mins[j + 4] & 0x0f) << 4);
    }
    p
}

/// Row `r` of an interleaved matrix (`data`, rows of `cols` `kind`
/// elements) in GGUF's plain layout, into `out` (one row's bytes): the
/// path for every kernel that reads plain rows (f32 activations, the
/// scalar reference, embedding lookups).
pub fn plain_row(kind: QuantKind, cols: usize, data: &[u8], r: usize, out: &mut [u8]) {
    let (block, gblock) = (kind.block_bytes(), group_block(kind));
    let blocks = cols / kind.block_elems();
    let (g, lane) = (r / GROUP, r % GROUP);
    for (b, dst) in out.chunks_exact_mut(block).enumerate().take(blocks) {
        let at = (g * blocks + b) * gblock;
        let src = &data[at..at + gblock];
        match kind {
            QuantKind::Q6_K => k6_from_group(src, dst, lane),
            QuantKind::IQ4_XS => low_bits::iq4_xs_from_group(src, dst, lane),
            QuantKind::Q2_K => low_bits::q2_k_from_group(src, dst, lane),
            QuantKind::Q3_K => low_bits::q3_k_from_group(src, dst, lane),
            QuantKind::Q4_K | QuantKind::Q5_K => {
                k_from_group(src, dst, lane, kind == QuantKind::Q5_K)
            }
            QuantKind::MXFP4 => mxfp4_from_group(src, dst, lane),
            _ => legacy_from_group(kind, src, dst, lane),
        }
    }
}

/// [`legacy_to_group`] undone (`dst`: the row's block).
fn legacy_from_group(kind: QuantKind, src: &[u8], dst: &mut [u8], lane: usize) {
    let heads = heads(kind);
    for h in 0..heads {
        let at = 2 * (GROUP * h + lane);
        dst[2 * h..2 * h + 2].copy_from_slice(&src[at..at + 2]);
    }
    let (mut src, mut dst) = (&src[2 * GROUP * heads..], &mut dst[2 * heads..]);
    if has_fifth_bits(kind) {
        let mut bits = [0u8; LANE];
        bits.copy_from_slice(&src[LANE * lane..LANE * lane + LANE]);
        dst[..LANE].copy_from_slice(&q5_plain_bits(bits).to_le_bytes());
        (src, dst) = (&src[GROUP * LANE..], &mut dst[LANE..]);
    }
    gather(src, dst, lane);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_rows_come_back_for_every_shape() {
        let mut rng = fastrand::Rng::with_seed(5);
        for kind in QuantKind::ALL.into_iter().filter(|&k| interleaves(k)) {
            for _ in 0..50 {
                let (rows, cols) = (rng.usize(1..30), kind.block_elems() * rng.usize(1..6));
                let row_bytes = kind.bytes_for(cols).unwrap();
                let plain: Vec<u8> = (0..rows * row_bytes).map(|_| rng.u8(..)).collect();
                let mut packed = vec![0u8; interleaved_len(kind, rows, cols).unwrap()];
                interleave(kind, rows, cols, &plain, &mut packed).unwrap();
                let mut row = vec![0u8; row_bytes];
                for r in 0..rows {
                    plain_row(kind, cols, &packed, r, &mut row);
                    assert_eq!(row, &plain[r * row_bytes..(r + 1) * row_bytes]);
                }
                // Padding rows are zero blocks.
                for r in rows..rows.div_ceil(GROUP) * GROUP {
                    plain_row(kind, cols, &packed, r, &mut row);
                    assert!(row.iter().all(|&b| b == 0), "{kind}: padding row {r}");
                }
            }
        }
    }

    /// The fifth bits' layout, bit by bit as its doc states, and back.
    #[test]
    fn q5_lane_bits_follow_their_definition() {
        let mut rng = fastrand::Rng::with_seed(9);
        for qh in [0, u32::MAX, 1, 1 << 31]
            .into_iter()
            .chain((0..2000).map(|_| rng.u32(..)))
        {
            let bits = q5_lane_bits(qh);
            for (k, &byte) in bits.iter().enumerate() {
                for c in 0..4 {
                    let low = (qh >> (4 * c + k)) & 1;
                    let high = (qh >> (16 + 4 * c + k)) & 1;
                    assert_eq!(u32::from(byte >> (2 * c)) & 1, low, "{qh:#x}");
                    assert_eq!(u32::from(byte >> (2 * c + 1)) & 1, high, "{qh:#x}");
                }
            }
            assert_eq!(q5_plain_bits(bits), qh);
        }
    }

    #[test]
    fn bad_shapes_are_refused() {
        assert!(matches!(
            interleaved_len(QuantKind::F16, 8, 256),
            Err(QMatError::Layout { .. })
        ));
        assert!(matches!(
            interleaved_len(QuantKind::Q4_0, 8, 33),
            Err(QMatError::PartialBlock { .. })
        ));
        let mut out = vec![0u8; 8 * 18];
        assert!(matches!(
            interleave(QuantKind::Q4_0, 1, 32, &[0; 17], &mut out),
            Err(QMatError::DataLength { .. })
        ));
        assert!(matches!(
            interleave(QuantKind::Q4_0, 1, 32, &[0; 18], &mut out[1..]),
            Err(QMatError::OutputLength { .. })
        ));
    }
}
