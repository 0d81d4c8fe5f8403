//! Interleaved weights (rows repacked eight at a time) give the plain
//! layout's products: on every path this CPU has and the scalar reference,
//! with 8-bit and f32 activations, for random shapes (row counts that are
//! not whole groups included), over random row ranges and split across a
//! team. The interleaved kernels add a block's f32 terms in another order
//! than the plain ones, so the tolerance is the SIMD test's:
//! `1e-5 × Σ|w·x| + 1e-6`; a row's float does not depend on the range it
//! was computed in.

mod qmatmul_support;

use pagoda_core::QuantKind;
use pagoda_cpu::quant::interleave::{interleave, interleaved_len, interleaves};
use pagoda_cpu::{matmul, matmul_team, Isa, QuantMatrix, QuantizedActivations, Team};
use qmatmul_support::*;

#[test]
fn interleaved_weights_match_the_plain_layout() {
    let mut rng = fastrand::Rng::with_seed(41);
    let mut team = Team::new(2).unwrap();
    let mut isas = simd_paths();
    isas.push(Isa::Scalar);
    for kind in KINDS.into_iter().filter(|&k| interleaves(k)) {
        let mut ran = Vec::new();
        for f32_acts in [false, true] {
            let mut worst = 0.0f64;
            for case in 0..24 {
                let cols = random_cols(&mut rng, kind);
                // The first two: an odd number of whole groups (8 and 24
                // rows) at several activation rows, whose last group the
                // wide AVX-512 kernels pair with itself.
                let (rows, n) = match case {
                    0 => (8, 2),
                    1 => (24, 5),
                    _ => (rng.usize(1..40), rng.usize(1..20)),
                };
                let data = random_weights(&mut rng, kind, rows, cols);
                let mut packed = vec![0u8; interleaved_len(kind, rows, cols).unwrap()];
                interleave(kind, rows, cols, &data, &mut packed).unwrap();
                let plain = QuantMatrix::new(kind, rows, cols, &data).unwrap();
                let inter = QuantMatrix::interleaved(kind, rows, cols, &packed).unwrap();
                let x = random_activations(&mut rng, n, cols);
                let mut acts = QuantizedActivations::new();
                if f32_acts {
                    acts.keep_f32(&x, n, cols).unwrap();
                } else {
                    acts.quantize(kind, &x, n, cols).unwrap();
                }
                let mut want = vec![0.0f32; n * rows];
                matmul(Isa::Scalar, &plain, &acts, &mut want, 0..rows).unwrap();
                for &isa in &isas {
                    let mut got = vec![0.0f32; n * rows];
                    matmul(isa, &inter, &acts, &mut got, 0..rows).unwrap();
                    for i in 0..n {
                        let mut xq = vec![0.0f32; cols];
                        acts.dequantize_row(i, &mut xq).unwrap();
                        for r in 0..rows {
                            let (_, mag) = dot64(&weight_row(kind, &data, cols, r), &xq);
                            let (a, b) =
                                (f64::from(got[i * rows + r]), f64::from(want[i * rows + r]));
                            let tol = 1e-5 * mag + 1e-6;
                            assert!(
                                (a - b).abs() <= tol,
                                "{kind} {} (f32 activations: {f32_acts}): row {r} of {rows}, \
                                 activation row {i}: {a} vs plain scalar {b} (tol {tol})",
                                isa.name()
                            );
                            worst = worst.max((a - b).abs() / mag.max(1e-30));
                        }
                    }
                    // A sub-range gives the same floats and writes nothing
                    // else.
                    let lo = rng.usize(0..rows);
                    let hi = rng.usize(lo..=rows);
                    let mut part = vec![f32::NAN; n * rows];
                    matmul(isa, &inter, &acts, &mut part, lo..hi).unwrap();
                    for (at, (&p, &full)) in part.iter().zip(&got).enumerate() {
                        if (lo..hi).contains(&(at % rows)) {
                            assert_eq!(p.to_bits(), full.to_bits(), "{kind}: rows {lo}..{hi}");
                        } else {
                            assert!(p.is_nan(), "{kind}: rows {lo}..{hi} wrote {}", at % rows);
                        }
                    }
                    // Split across a team: the same floats.
                    let mut split = vec![0.0f32; n * rows];
                    matmul_team(&mut team, isa, &inter, &acts, &mut split).unwrap();
                    assert!(
                        split
                            .iter()
                            .zip(&got)
                            .all(|(a, b)| a.to_bits() == b.to_bits()),
                        "{kind} {}: the team's product differs",
                        isa.name()
                    );
                }
            }
            ran.push(format!("f32 activations {f32_acts}: worst {worst:.2e}"));
        }
        let paths: Vec<_> = isas.iter().map(|i| i.name()).collect();
        println!("{kind} interleaved on {paths:?}: {}", ran.join("; "));
    }
}

#[test]
fn interleaved_shapes_are_checked() {
    let kind = QuantKind::Q4_0;
    // Three rows take a whole group of eight.
    assert!(QuantMatrix::interleaved(kind, 3, 32, &[0; 8 * 18]).is_ok());
    assert!(QuantMatrix::interleaved(kind, 3, 32, &[0; 3 * 18]).is_err());
    // Types without an interleaved layout are refused.
    assert!(QuantMatrix::interleaved(QuantKind::F16, 8, 256, &[0; 8 * 512]).is_err());
}
