//! Weight block layouts and their scalar dequantization.
//!
//! Every backend reads quantized weights through these definitions, so a
//! layout is written down once. The layouts are GGML's (llama.cpp's): a row
//! of `n` weights is `n / block_elems` blocks of `block_bytes` bytes each,
//! scales stored as little-endian IEEE half floats. The code here is scalar
//! and follows each format's definition step by step (same operation order
//! as the reference), so its output is the exact value the format encodes.

mod half;
mod iquants;
mod kquants;
mod legacy;

use core::fmt;

pub use half::{bf16_to_f32, e8m0_half_to_f32, f16_to_f32};
pub use iquants::{iq4_xs_scale, IQ4_VALUES, MXFP4_VALUES};
pub use kquants::{q3_k_scale, scale_min as k_scale_min};

/// A weight type this crate can lay out and dequantize, by its GGML name.
// GGML's names (`Q4_K`), so they read as in every other tool.
#[allow(non_camel_case_types)]
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum QuantKind {
    /// 32-bit float, one element per block.
    F32,
    /// IEEE half float.
    F16,
    /// bfloat16 (the top half of an f32).
    BF16,
    /// 32 signed bytes with one f16 scale.
    Q8_0,
    /// 32 4-bit values (offset 8) with one f16 scale.
    Q4_0,
    /// 32 4-bit values with an f16 scale and an f16 minimum.
    Q4_1,
    /// 32 5-bit values (offset 16) with one f16 scale.
    Q5_0,
    /// 32 5-bit values with an f16 scale and an f16 minimum.
    Q5_1,
    /// 256 2-bit values in 16 sub-blocks with 4-bit scales and minimums.
    Q2_K,
    /// 256 3-bit values in 16 sub-blocks with 6-bit signed scales.
    Q3_K,
    /// 256 4-bit values in 8 sub-blocks with 6-bit scales and minimums.
    Q4_K,
    /// 256 5-bit values in 8 sub-blocks with 6-bit scales and minimums.
    Q5_K,
    /// 256 6-bit values in 16 sub-blocks with 8-bit scales.
    Q6_K,
    /// 32 4-bit indices into a fixed non-linear table, one f16 scale.
    IQ4_NL,
    /// 256 4-bit indices into IQ4_NL's table, 8 sub-blocks with 6-bit
    /// signed scales.
    IQ4_XS,
    /// 32 4-bit E2M1 floats with one power-of-two (E8M0) scale: OCP's
    /// microscaling format, gpt-oss's experts.
    MXFP4,
}

impl QuantKind {
    /// Every kind, in GGML id order.
    pub const ALL: [QuantKind; 16] = [
        QuantKind::F32,
        QuantKind::F16,
        QuantKind::Q4_0,
        QuantKind::Q4_1,
        QuantKind::Q5_0,
        QuantKind::Q5_1,
        QuantKind::Q8_0,
        QuantKind::Q2_K,
        QuantKind::Q3_K,
        QuantKind::Q4_K,
        QuantKind::Q5_K,
        QuantKind::Q6_K,
        QuantKind::IQ4_NL,
        QuantKind::IQ4_XS,
        QuantKind::BF16,
        QuantKind::MXFP4,
    ];

    /// The kind a GGML type id names, or `None` for ids this crate does not
    /// lay out (other quantizations, or no type at all).
    pub const fn from_ggml_id(id: u32) -> Option<QuantKind> {
        Some(match id {
            0 => QuantKind::F32,
            1 => QuantKind::F16,
            2 => QuantKind::Q4_0,
            3 => QuantKind::Q4_1,
            6 => QuantKind::Q5_0,
            7 => QuantKind::Q5_1,
            8 => QuantKind::Q8_0,
            10 => QuantKind::Q2_K,
            11 => QuantKind::Q3_K,
            12 => QuantKind::Q4_K,
            13 => QuantKind::Q5_K,
            14 => QuantKind::Q6_K,
            20 => QuantKind::IQ4_NL,
            23 => QuantKind::IQ4_XS,
            30 => QuantKind::BF16,
            39 => QuantKind::MXFP4,
            _ => return None,
        })
    }

    /// The GGML type id (`ggml_type`) stored in GGUF tensor infos.
    pub const fn ggml_id(self) -> u32 {
        match self {
            QuantKind::F32 => 0,
            QuantKind::F16 => 1,
            QuantKind::Q4_0 => 2,
            QuantKind::Q4_1 => 3,
            QuantKind::Q5_0 => 6,
            QuantKind::Q5_1 => 7,
            QuantKind::Q8_0 => 8,
            QuantKind::Q2_K => 10,
            QuantKind::Q3_K => 11,
            QuantKind::Q4_K => 12,
            QuantKind::Q5_K => 13,
            QuantKind::Q6_K => 14,
            QuantKind::IQ4_NL => 20,
            QuantKind::IQ4_XS => 23,
            QuantKind::BF16 => 30,
            QuantKind::MXFP4 => 39,
        }
    }

    /// The GGML name (`Q4_K`, `F16`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            QuantKind::F32 => "F32",
            QuantKind::F16 => "F16",
            QuantKind::BF16 => "BF16",
            QuantKind::Q8_0 => "Q8_0",
            QuantKind::Q4_0 => "Q4_0",
            QuantKind::Q4_1 => "Q4_1",
            QuantKind::Q5_0 => "Q5_0",
            QuantKind::Q5_1 => "Q5_1",
            QuantKind::Q2_K => "Q2_K",
            QuantKind::Q3_K => "Q3_K",
            QuantKind::Q4_K => "Q4_K",
            QuantKind::Q5_K => "Q5_K",
            QuantKind::Q6_K => "Q6_K",
            QuantKind::IQ4_NL => "IQ4_NL",
            QuantKind::IQ4_XS => "IQ4_XS",
            QuantKind::MXFP4 => "MXFP4",
        }
    }

    /// Elements per block: a row's length must be a multiple of it.
    pub const fn block_elems(self) -> usize {
        match self {
            QuantKind::F32 | QuantKind::F16 | QuantKind::BF16 => 1,
            QuantKind::Q8_0
            | QuantKind::Q4_0
            | QuantKind::Q4_1
            | QuantKind::Q5_0
            | QuantKind::Q5_1
            | QuantKind::IQ4_NL
            | QuantKind::MXFP4 => 32,
            QuantKind::Q2_K
            | QuantKind::Q3_K
            | QuantKind::Q4_K
            | QuantKind::Q5_K
            | QuantKind::Q6_K
            | QuantKind::IQ4_XS => 256,
        }
    }

    /// Bytes per block.
    pub const fn block_bytes(self) -> usize {
        match self {
            QuantKind::F32 => 4,
            QuantKind::F16 | QuantKind::BF16 => 2,
            QuantKind::Q8_0 => 34,
            QuantKind::Q4_0 => 18,
            QuantKind::Q4_1 => 20,
            QuantKind::Q5_0 => 22,
            QuantKind::Q5_1 => 24,
            QuantKind::Q2_K => 84,
            QuantKind::Q3_K => 110,
            QuantKind::Q4_K => 144,
            QuantKind::Q5_K => 176,
            QuantKind::Q6_K => 210,
            QuantKind::IQ4_NL => 18,
            QuantKind::IQ4_XS => 136,
            QuantKind::MXFP4 => 17,
        }
    }

    /// Bytes that `elems` elements occupy, refusing counts that are not whole
    /// blocks and byte counts that overflow `usize`.
    pub const fn bytes_for(self, elems: usize) -> Result<usize, QuantError> {
        if !elems.is_multiple_of(self.block_elems()) {
            return Err(QuantError::PartialBlock { kind: self, elems });
        }
        match (elems / self.block_elems()).checked_mul(self.block_bytes()) {
            Some(bytes) => Ok(bytes),
            None => Err(QuantError::Overflow { kind: self, elems }),
        }
    }
}

impl fmt::Display for QuantKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a row could not be dequantized. Nothing is written when it is returned.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum QuantError {
    /// The row length is not a whole number of blocks.
    PartialBlock {
        /// The weight type.
        kind: QuantKind,
        /// The requested element count.
        elems: usize,
    },
    /// The row's byte count does not fit in `usize`.
    Overflow {
        /// The weight type.
        kind: QuantKind,
        /// The requested element count.
        elems: usize,
    },
    /// The input bytes are not exactly the blocks the output needs.
    LengthMismatch {
        /// The weight type.
        kind: QuantKind,
        /// Bytes the output length needs.
        expected: usize,
        /// Bytes given.
        found: usize,
    },
}

impl fmt::Display for QuantError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            QuantError::PartialBlock { kind, elems } => write!(
                f,
                "{elems} {kind} elements are not whole blocks of {}",
                kind.block_elems()
            ),
            QuantError::Overflow { kind, elems } => {
                write!(f, "{elems} {kind} elements overflow the byte count")
            }
            QuantError::LengthMismatch {
                kind,
                expected,
                found,
            } => write!(
                f,
                "{kind} row needs {expected} bytes for its output, got {found}"
            ),
        }
    }
}

impl core::error::Error for QuantError {}

/// Dequantizes `bytes` (whole blocks of `kind`) into `out`, one f32 per
/// element: `bytes` must hold exactly `out.len()` elements. Refuses (and
/// writes nothing) when `out.len()` is not whole blocks or the byte count
/// does not match.
pub fn dequantize_row(kind: QuantKind, bytes: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    let expected = kind.bytes_for(out.len())?;
    if bytes.len() != expected {
        return Err(QuantError::LengthMismatch {
            kind,
            expected,
            found: bytes.len(),
        });
    }
    let blocks = bytes
        .chunks_exact(kind.block_bytes())
        .zip(out.chunks_exact_mut(kind.block_elems()));
    match kind {
        QuantKind::F32 => blocks.for_each(|(b, o)| o[0] = f32::from_le_bytes(le4(b, 0))),
        QuantKind::F16 => blocks.for_each(|(b, o)| o[0] = f16_to_f32(le2(b, 0))),
        QuantKind::BF16 => blocks.for_each(|(b, o)| o[0] = bf16_to_f32(le2(b, 0))),
        QuantKind::Q8_0 => blocks.for_each(|(b, o)| legacy::q8_0(b, o)),
        QuantKind::Q4_0 => blocks.for_each(|(b, o)| legacy::q4_0(b, o)),
        QuantKind::Q4_1 => blocks.for_each(|(b, o)| legacy::q4_1(b, o)),
        QuantKind::Q5_0 => blocks.for_each(|(b, o)| legacy::q5_0(b, o)),
        QuantKind::Q5_1 => blocks.for_each(|(b, o)| legacy::q5_1(b, o)),
        QuantKind::Q2_K => blocks.for_each(|(b, o)| kquants::q2_k(b, o)),
        QuantKind::Q3_K => blocks.for_each(|(b, o)| kquants::q3_k(b, o)),
        QuantKind::Q4_K => blocks.for_each(|(b, o)| kquants::q4_k(b, o)),
        QuantKind::Q5_K => blocks.for_each(|(b, o)| kquants::q5_k(b, o)),
        QuantKind::Q6_K => blocks.for_each(|(b, o)| kquants::q6_k(b, o)),
        QuantKind::IQ4_NL => blocks.for_each(|(b, o)| iquants::iq4_nl(b, o)),
        QuantKind::IQ4_XS => blocks.for_each(|(b, o)| iquants::iq4_xs(b, o)),
        QuantKind::MXFP4 => blocks.for_each(|(b, o)| iquants::mxfp4(b, o)),
    }
    Ok(())
}

/// Little-endian u16 at `at`; callers pass blocks of the right size.
#[inline]
fn le2(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

/// Four bytes at `at`; callers pass blocks of the right size.
#[inline]
fn le4(b: &[u8], at: usize) -> [u8; 4] {
    [b[at], b[at + 1], b[at + 2], b[at + 3]]
}

/// The f16 scale stored at `at` of a block, as f32.
#[inline]
fn scale(b: &[u8], at: usize) -> f32 {
    f16_to_f32(le2(b, at))
}
