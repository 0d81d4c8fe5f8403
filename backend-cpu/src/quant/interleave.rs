//! Weights repacked at load into rows interleaved [`GROUP`] at a time, so
//! that one activation block meets eight rows' blocks in full registers
//! (llama.cpp's `CPU_REPACK` and ik_llama.cpp's `_R8` types do the same).
//!
//! A matrix of [`Interleaved`](WeightLayout::Interleaved) layout is groups of
//! [`GROUP`] weight rows; each group holds its blocks in column order, and
//! each block of the group is the eight rows' f16 scales (16 bytes), then
//! their payloads four bytes at a time: bytes `4c..4c + 4` of row 0, of row
//! 1, ... of row 7, then bytes `4c + 4..`. A 32-byte load then gives every
//! row's four bytes in its own 32-bit lane, so the products of one block
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

use super::QMatError;

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

/// Whether `kind` can be interleaved: the block types whose products have
/// an interleaved kernel (Q4_0 and Q8_0: an f16 scale, then the payload).
pub fn interleaves(kind: QuantKind) -> bool {
    matches!(kind, QuantKind::Q4_0 | QuantKind::Q8_0)
}

/// Bytes of one block's payload (after its f16 scale).
fn payload(kind: QuantKind) -> usize {
    kind.block_bytes() - 2
}

/// Bytes an interleaved `rows × cols` matrix of `kind` takes (the last
/// group padded to [`GROUP`] rows).
pub fn interleaved_len(kind: QuantKind, rows: usize, cols: usize) -> Result<usize, QMatError> {
    if !interleaves(kind) {
        return Err(QMatError::Layout { kind });
    }
    let row_bytes = kind.bytes_for(cols).map_err(|e| match e {
        pagoda_core::QuantError::PartialBlock { .. } => QMatError::PartialBlock { kind, cols },
        _ => QMatError::Overflow,
    })?;
    rows.div_ceil(GROUP)
        .checked_mul(GROUP)
        .and_then(|r| r.checked_mul(row_bytes))
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
    out.fill(0);
    let (block, pay) = (kind.block_bytes(), payload(kind));
    let group_block = GROUP * block;
    let blocks = cols / kind.block_elems();
    for (r, row) in plain.chunks_exact(row_bytes.max(1)).enumerate().take(rows) {
        let (g, lane) = (r / GROUP, r % GROUP);
        for (b, src) in row.chunks_exact(block).enumerate() {
            let at = (g * blocks + b) * group_block;
            let dst = &mut out[at..at + group_block];
            dst[2 * lane..2 * lane + 2].copy_from_slice(&src[..2]);
            for (c, four) in src[2..2 + pay].chunks_exact(LANE).enumerate() {
                let to = 2 * GROUP + (c * GROUP + lane) * LANE;
                dst[to..to + LANE].copy_from_slice(four);
            }
        }
    }
    Ok(())
}

/// Row `r` of an interleaved matrix (`data`, rows of `cols` `kind`
/// elements) in GGUF's plain layout, into `out` (one row's bytes): the
/// path for every kernel that reads plain rows (f32 activations, the
/// scalar reference, embedding lookups).
pub fn plain_row(kind: QuantKind, cols: usize, data: &[u8], r: usize, out: &mut [u8]) {
    let (block, pay) = (kind.block_bytes(), payload(kind));
    let group_block = GROUP * block;
    let blocks = cols / kind.block_elems();
    let (g, lane) = (r / GROUP, r % GROUP);
    for (b, dst) in out.chunks_exact_mut(block).enumerate().take(blocks) {
        let at = (g * blocks + b) * group_block;
        let src = &data[at..at + group_block];
        dst[..2].copy_from_slice(&src[2 * lane..2 * lane + 2]);
        for (c, four) in dst[2..2 + pay].chunks_exact_mut(LANE).enumerate() {
            let from = 2 * GROUP + (c * GROUP + lane) * LANE;
            four.copy_from_slice(&src[from..from + LANE]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_rows_come_back_for_every_shape() {
        let mut rng = fastrand::Rng::with_seed(5);
        for kind in [QuantKind::Q4_0, QuantKind::Q8_0] {
            for _ in 0..50 {
                let (rows, cols) = (rng.usize(1..30), 32 * rng.usize(1..6));
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
                    assert!(row.iter().all(|&b| b == 0));
                }
            }
        }
    }

    #[test]
    fn bad_shapes_are_refused() {
        assert!(matches!(
            interleaved_len(QuantKind::Q4_K, 8, 256),
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
