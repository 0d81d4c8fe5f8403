//! Random weight blocks with sane scales, random activations, and the f64
//! reference product built from `pagoda_core::dequantize_row` (checked
//! bit-for-bit against the `gguf` Python package in core's tests).

#![allow(dead_code)]

use half::{bf16, f16};
use pagoda_core::{dequantize_row, QuantKind};
use pagoda_cpu::Isa;

/// Every weight type the loader takes.
pub const KINDS: [QuantKind; 16] = QuantKind::ALL;

/// Every SIMD path this CPU can run, best first; prints the paths built
/// for this architecture that it cannot (machines of one kind come with
/// and without AVX-512, so a run says which it checked).
pub fn simd_paths() -> Vec<Isa> {
    let (ran, skipped): (Vec<Isa>, Vec<Isa>) = Isa::ALL
        .iter()
        .filter(|&&isa| isa != Isa::Scalar)
        .partition(|isa| isa.is_supported());
    let names = |isas: &[Isa]| isas.iter().map(|i| i.name()).collect::<Vec<_>>();
    println!(
        "SIMD paths run: {:?}; skipped, the CPU lacks them: {:?}",
        names(&ran),
        names(&skipped)
    );
    ran
}

/// A random f16 bit pattern for a value in `lo..hi`.
fn half_bits(rng: &mut fastrand::Rng, lo: f32, hi: f32) -> [u8; 2] {
    f16::from_f32(lo + (hi - lo) * rng.f32())
        .to_bits()
        .to_le_bytes()
}

/// `rows` random rows of `cols` `kind` elements: random quantized bits,
/// scales of 0.001..0.01 and minimums of −0.005..0.005 (so dequantized
/// weights are ordinary numbers, not overflow or denormal noise).
pub fn random_weights(
    rng: &mut fastrand::Rng,
    kind: QuantKind,
    rows: usize,
    cols: usize,
) -> Vec<u8> {
    let elems = rows * cols;
    match kind {
        QuantKind::F32 => (0..elems)
            .flat_map(|_| (rng.f32() * 2.0 - 1.0).to_le_bytes())
            .collect(),
        QuantKind::F16 => (0..elems)
            .flat_map(|_| f16::from_f32(rng.f32() * 2.0 - 1.0).to_bits().to_le_bytes())
            .collect(),
        QuantKind::BF16 => (0..elems)
            .flat_map(|_| {
                bf16::from_f32(rng.f32() * 2.0 - 1.0)
                    .to_bits()
                    .to_le_bytes()
            })
            .collect(),
        _ => {
            let bytes = kind.bytes_for(cols).unwrap() * rows;
            let mut data: Vec<u8> = (0..bytes).map(|_| rng.u8(..)).collect();
            for b in data.chunks_exact_mut(kind.block_bytes()) {
                if kind == QuantKind::MXFP4 {
                    // An exponent byte: scales of 2^-12..2^-6.
                    b[0] = rng.u8(116..123);
                    continue;
                }
                let (d_at, m_at) = match kind {
                    QuantKind::Q6_K => (208, None),
                    QuantKind::Q3_K => (108, None),
                    QuantKind::Q2_K => (80, Some((82, 0.0005))),
                    QuantKind::Q4_1 | QuantKind::Q5_1 => (0, Some((2, -0.005))),
                    QuantKind::Q4_K | QuantKind::Q5_K => (0, Some((2, 0.0005))),
                    _ => (0, None),
                };
                b[d_at..d_at + 2].copy_from_slice(&half_bits(rng, 0.001, 0.01));
                if let Some((at, lo)) = m_at {
                    b[at..at + 2].copy_from_slice(&half_bits(rng, lo, 0.005));
                }
            }
            data
        }
    }
}

/// `n × cols` activations, roughly unit-sized with some larger outliers.
pub fn random_activations(rng: &mut fastrand::Rng, n: usize, cols: usize) -> Vec<f32> {
    (0..n * cols)
        .map(|_| {
            let v = rng.f32() * 2.0 - 1.0;
            if rng.u8(..) < 8 {
                v * 8.0
            } else {
                v
            }
        })
        .collect()
}

/// Row `r` of the weights, dequantized by `pagoda_core`.
pub fn weight_row(kind: QuantKind, data: &[u8], cols: usize, r: usize) -> Vec<f32> {
    let rb = kind.bytes_for(cols).unwrap();
    let mut w = vec![0.0f32; cols];
    dequantize_row(kind, &data[r * rb..(r + 1) * rb], &mut w).unwrap();
    w
}

/// `(Σ w·x, Σ |w·x|)` in f64.
pub fn dot64(w: &[f32], x: &[f32]) -> (f64, f64) {
    w.iter().zip(x).fold((0.0, 0.0), |(s, a), (&w, &x)| {
        let p = f64::from(w) * f64::from(x);
        (s + p, a + p.abs())
    })
}

/// Elements per activation block for `kind` weights, as llama.cpp pairs
/// them: the weights' own block (32 or 256; 1 for float weights, whose
/// activations stay f32).
pub fn act_block(kind: QuantKind) -> usize {
    kind.block_elems()
}

/// A random row length for `kind`: for the 32-element types, whole blocks
/// but mostly not a multiple of 256; any length for the float types.
pub fn random_cols(rng: &mut fastrand::Rng, kind: QuantKind) -> usize {
    match kind.block_elems() {
        1 => rng.usize(1..300),
        // Now and then longer than the interleaved kernel's span of 32
        // blocks it unpacks at a time (SmolLM2's FFN rows are 48).
        32 if rng.usize(..4) == 0 => 32 * rng.usize(24..80),
        32 => 32 * rng.usize(1..24),
        _ => 256 * rng.usize(1..4),
    }
}
