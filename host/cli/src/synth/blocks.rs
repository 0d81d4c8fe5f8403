//! Random tensor contents in each block layout: random quantized values with
//! each block's scales set so weights land near the magnitudes of trained
//! models (|w| around 0.01 to 0.1). Nothing here quantizes: the point is
//! realistic bytes for speed measurements, not a meaningful model.

use std::io::{self, Write};

use half::f16;
use pagoda_core::QuantKind;

/// Where a block's f16 scale fields sit, and the range each is drawn from.
struct ScaleField {
    offset: usize,
    low: f32,
    high: f32,
    /// A minimum stored as `-factor × d` (Q4_1, Q5_1) instead of drawn.
    min_of_d: Option<f32>,
}

const fn field(offset: usize, low: f32, high: f32) -> ScaleField {
    ScaleField {
        offset,
        low,
        high,
        min_of_d: None,
    }
}

const fn min_field(offset: usize, factor: f32) -> ScaleField {
    ScaleField {
        offset,
        low: 0.0,
        high: 0.0,
        min_of_d: Some(factor),
    }
}

const Q4_0: [ScaleField; 1] = [field(0, 4e-3, 8e-3)];
const Q4_1: [ScaleField; 2] = [field(0, 4e-3, 8e-3), min_field(2, 8.0)];
const Q5_0: [ScaleField; 1] = [field(0, 2e-3, 4e-3)];
const Q5_1: [ScaleField; 2] = [field(0, 2e-3, 4e-3), min_field(2, 16.0)];
const Q8_0: [ScaleField; 1] = [field(0, 2e-4, 4e-4)];
const K_SCALES: [ScaleField; 2] = [field(0, 2e-4, 5e-4), field(2, 2e-4, 5e-4)];
const Q6_K: [ScaleField; 1] = [field(208, 3e-5, 1e-4)];
const Q2_K: [ScaleField; 2] = [field(80, 1e-3, 3e-3), field(82, 1e-3, 3e-3)];
const Q3_K: [ScaleField; 1] = [field(108, 5e-4, 1e-3)];
const IQ4_NL: [ScaleField; 1] = [field(0, 1e-4, 5e-4)];
const IQ4_XS: [ScaleField; 1] = [field(0, 5e-6, 2e-5)];

/// The scale fields of one block of `kind` (empty for float kinds).
fn scale_fields(kind: QuantKind) -> &'static [ScaleField] {
    use QuantKind as K;
    match kind {
        K::Q4_0 => &Q4_0,
        K::Q4_1 => &Q4_1,
        K::Q5_0 => &Q5_0,
        K::Q5_1 => &Q5_1,
        K::Q8_0 => &Q8_0,
        K::Q4_K | K::Q5_K => &K_SCALES,
        K::Q6_K => &Q6_K,
        K::Q2_K => &Q2_K,
        K::Q3_K => &Q3_K,
        K::IQ4_NL => &IQ4_NL,
        K::IQ4_XS => &IQ4_XS,
        // MXFP4's scale is an exponent byte, drawn in `write_random`.
        K::F32 | K::F16 | K::BF16 | K::MXFP4 => &[],
    }
}

/// Blocks generated per write: about a megabyte.
const CHUNK_BYTES: usize = 1 << 20;

/// Writes `elems` random elements of `kind` to `out`: floats uniform in
/// `center ± spread`, quantized blocks with random values and drawn scales.
pub(crate) fn write_random(
    rng: &mut fastrand::Rng,
    kind: QuantKind,
    elems: u64,
    center: f32,
    spread: f32,
    out: &mut dyn Write,
) -> io::Result<()> {
    let block_bytes = kind.block_bytes();
    let blocks = elems / kind.block_elems() as u64;
    let per_chunk = (CHUNK_BYTES / block_bytes).max(1) as u64;
    let mut buf = vec![0u8; per_chunk as usize * block_bytes];
    let mut done = 0u64;
    while done < blocks {
        let n = per_chunk.min(blocks - done) as usize;
        let chunk = &mut buf[..n * block_bytes];
        match kind {
            QuantKind::F32 => {
                for b in chunk.chunks_exact_mut(4) {
                    let v = center + spread * (2.0 * rng.f32() - 1.0);
                    b.copy_from_slice(&v.to_le_bytes());
                }
            }
            QuantKind::F16 | QuantKind::BF16 => {
                for b in chunk.chunks_exact_mut(2) {
                    let v = center + spread * (2.0 * rng.f32() - 1.0);
                    let bits = if kind == QuantKind::F16 {
                        f16::from_f32(v).to_bits()
                    } else {
                        half::bf16::from_f32(v).to_bits()
                    };
                    b.copy_from_slice(&bits.to_le_bytes());
                }
            }
            _ => {
                rng.fill(chunk);
                for block in chunk.chunks_exact_mut(block_bytes) {
                    if kind == QuantKind::MXFP4 {
                        // 2^-10..2^-7 times values up to 12: |w| to about 0.1.
                        block[0] = rng.u8(118..122);
                    }
                    let mut d = 0.0f32;
                    for f in scale_fields(kind) {
                        let v = match f.min_of_d {
                            Some(factor) => -factor * d,
                            None => {
                                d = f.low + (f.high - f.low) * rng.f32();
                                d
                            }
                        };
                        block[f.offset..f.offset + 2]
                            .copy_from_slice(&f16::from_f32(v).to_bits().to_le_bytes());
                    }
                }
            }
        }
        out.write_all(chunk)?;
        done += n as u64;
    }
    Ok(())
}
