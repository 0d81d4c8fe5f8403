//! Every SIMD path against the scalar reference on the same quantized
//! inputs, with 8-bit and with f32 activations. Integer block sums are
//! exact on every path, so only the order of the f32 adds differs:
//! tolerance `1e-5 × Σ|w·x| + 1e-6` (Σ in f64 over the dequantized weights
//! and activations). A product over a sub-range of weight rows gives the
//! full product's floats bit for bit there and leaves the rest alone.

mod qmatmul_support;

use pagoda_cpu::{matmul, Isa, QuantMatrix, QuantizedActivations};
use qmatmul_support::*;

#[test]
fn simd_matches_scalar_for_every_kind() {
    for isa in simd_paths() {
        simd_matches_scalar_on(isa);
    }
}

fn simd_matches_scalar_on(isa: Isa) {
    let mut rng = fastrand::Rng::with_seed(23);
    for (kind, f32_acts) in KINDS.iter().flat_map(|&k| [(k, false), (k, true)]) {
        let mut worst = 0.0f64;
        for _ in 0..16 {
            let cols = random_cols(&mut rng, kind);
            let (rows, n) = (rng.usize(1..10), rng.usize(1..20));
            let data = random_weights(&mut rng, kind, rows, cols);
            let x = random_activations(&mut rng, n, cols);
            let w = QuantMatrix::new(kind, rows, cols, &data).unwrap();
            let mut acts = QuantizedActivations::new();
            if f32_acts {
                acts.keep_f32(&x, n, cols).unwrap();
            } else {
                acts.quantize(kind, &x, n, cols).unwrap();
            }
            let (mut simd, mut scalar) = (vec![0.0f32; n * rows], vec![0.0f32; n * rows]);
            matmul(isa, &w, &acts, &mut simd, 0..rows).unwrap();
            matmul(Isa::Scalar, &w, &acts, &mut scalar, 0..rows).unwrap();
            // A sub-range of rows (tiles of several weight rows start
            // elsewhere) gives the same floats there and writes nothing else.
            let lo = rng.usize(0..rows);
            let hi = rng.usize(lo..=rows);
            let mut part = vec![f32::NAN; n * rows];
            matmul(isa, &w, &acts, &mut part, lo..hi).unwrap();
            for (at, (&p, &full)) in part.iter().zip(&simd).enumerate() {
                if (lo..hi).contains(&(at % rows)) {
                    assert_eq!(
                        p.to_bits(),
                        full.to_bits(),
                        "{kind}: rows {lo}..{hi} of {rows}"
                    );
                } else {
                    assert!(
                        p.is_nan(),
                        "{kind}: rows {lo}..{hi} wrote row {}",
                        at % rows
                    );
                }
            }
            for i in 0..n {
                let mut xq = vec![0.0f32; cols];
                acts.dequantize_row(i, &mut xq).unwrap();
                for r in 0..rows {
                    let (_, mag) = dot64(&weight_row(kind, &data, cols, r), &xq);
                    let (a, b) = (
                        f64::from(simd[i * rows + r]),
                        f64::from(scalar[i * rows + r]),
                    );
                    let tol = 1e-5 * mag + 1e-6;
                    assert!(
                        (a - b).abs() <= tol,
                        "{kind} {} (f32 activations: {f32_acts}): {a} vs scalar {b} (tol {tol})",
                        isa.name()
                    );
                    worst = worst.max((a - b).abs() / mag.max(1e-30));
                }
            }
        }
        println!(
            "{kind} {} (f32 activations: {f32_acts}): worst |simd − scalar| / Σ|w·x| = {worst:.2e}",
            isa.name()
        );
    }
}

/// Prefill-sized products (enough activation rows that the weights are
/// widened to an f32 panel and multiplied as a dense product), alone and
/// split over a team, against a float64 sum of the dequantized weights
/// times the activations: tolerance `1e-5 × Σ|w·x| + 1e-6`.
#[test]
fn prefill_panels_match_a_float64_product() {
    let isa = Isa::detect();
    let mut rng = fastrand::Rng::with_seed(29);
    let mut team = pagoda_cpu::Team::new(3).unwrap();
    for kind in KINDS {
        let mut worst = 0.0f64;
        for round in 0..4 {
            let cols = random_cols(&mut rng, kind);
            let (rows, n) = (rng.usize(1..40), rng.usize(24..70));
            let data = random_weights(&mut rng, kind, rows, cols);
            let x = random_activations(&mut rng, n, cols);
            let w = QuantMatrix::new(kind, rows, cols, &data).unwrap();
            let mut acts = QuantizedActivations::new();
            acts.keep_f32(&x, n, cols).unwrap();
            let mut out = vec![f32::NAN; n * rows];
            if round % 2 == 0 {
                matmul(isa, &w, &acts, &mut out, 0..rows).unwrap();
            } else {
                pagoda_cpu::matmul_team(&mut team, isa, &w, &acts, &mut out).unwrap();
            }
            for r in 0..rows {
                let wr = weight_row(kind, &data, cols, r);
                for i in 0..n {
                    let (exact, mag) = dot64(&wr, &x[i * cols..(i + 1) * cols]);
                    let got = f64::from(out[i * rows + r]);
                    let tol = 1e-5 * mag + 1e-6;
                    assert!(
                        (got - exact).abs() <= tol,
                        "{kind} {} rows {rows} × {n}: {got} vs {exact} (tol {tol})",
                        isa.name()
                    );
                    worst = worst.max((got - exact).abs() / mag.max(1e-30));
                }
            }
        }
        println!(
            "{kind} {} panels: worst |got − f64| / Σ|w·x| = {worst:.2e}",
            isa.name()
        );
    }
}
