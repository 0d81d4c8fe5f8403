//! The scalar path against f64 products of `pagoda_core::dequantize_row`
//! weights, and multi-row products against one row at a time.
//!
//! Tolerances:
//! - against the *dequantized quantized* activations: `1e-5 × Σ|w·x| +
//!   1e-6` (only the f32 summation order differs from the f64 reference);
//! - against the original f32 activations: additionally the activation
//!   rounding, at most half a step per element, `Σ_k |w_k| × amax_B(k) /
//!   254 × 1.001` (`amax_B(k)` the largest |x| in element k's activation
//!   block: 32 elements for the legacy types, 256 for the K types, 0 for
//!   float weights, whose activations stay f32).

mod qmatmul_support;

use pagoda_core::QuantKind;
use pagoda_cpu::{matmul, ActFormat, Isa, QuantMatrix, QuantizedActivations};
use qmatmul_support::*;

/// One random case: `(weights, activations, cols, rows, n)`.
fn case(rng: &mut fastrand::Rng, kind: QuantKind) -> (Vec<u8>, Vec<f32>, usize, usize, usize) {
    let cols = random_cols(rng, kind);
    let rows = rng.usize(1..12);
    let n = rng.usize(1..20);
    (
        random_weights(rng, kind, rows, cols),
        random_activations(rng, n, cols),
        cols,
        rows,
        n,
    )
}

#[test]
fn scalar_matches_f64_reference_for_every_kind() {
    let mut rng = fastrand::Rng::with_seed(19);
    for kind in KINDS {
        let mut worst = (0.0f64, 0.0f64);
        for _ in 0..12 {
            let (data, x, cols, rows, n) = case(&mut rng, kind);
            let w = QuantMatrix::new(kind, rows, cols, &data).unwrap();
            let mut acts = QuantizedActivations::new();
            acts.quantize(kind, &x, n, cols).unwrap();
            let mut out = vec![f32::NAN; n * rows];
            matmul(Isa::Scalar, &w, &acts, &mut out, 0..rows).unwrap();
            let block = act_block(kind);
            for i in 0..n {
                let xi = &x[i * cols..(i + 1) * cols];
                let mut xq = vec![0.0f32; cols];
                acts.dequantize_row(i, &mut xq).unwrap();
                for r in 0..rows {
                    let wr = weight_row(kind, &data, cols, r);
                    let got = f64::from(out[i * rows + r]);
                    let (exact, mag) = dot64(&wr, &xq);
                    let tight = 1e-5 * mag + 1e-6;
                    assert!(
                        (got - exact).abs() <= tight,
                        "{kind} {rows}x{cols} row {r} act {i}: {got} vs {exact} (tol {tight})"
                    );
                    let (orig, _) = dot64(&wr, xi);
                    let rounding: f64 = if block == 1 {
                        0.0
                    } else {
                        wr.iter()
                            .enumerate()
                            .map(|(k, w)| {
                                let b = k / block * block;
                                let amax =
                                    xi[b..b + block].iter().fold(0.0f32, |a, v| a.max(v.abs()));
                                f64::from(w.abs()) * f64::from(amax) / 254.0
                            })
                            .sum::<f64>()
                            * 1.001
                    };
                    let loose = tight + rounding;
                    assert!(
                        (got - orig).abs() <= loose,
                        "{kind} row {r} act {i}: {got} vs f32 activations {orig} (tol {loose})"
                    );
                    worst.0 = worst.0.max((got - exact).abs() / mag.max(1e-30));
                    worst.1 = worst.1.max((got - orig).abs() / mag.max(1e-30));
                }
            }
        }
        println!(
            "{kind}: worst |err| / Σ|w·x|: {:.2e} vs quantized activations, {:.2e} vs f32",
            worst.0, worst.1
        );
    }
}

#[test]
fn many_rows_equal_one_row_at_a_time() {
    let mut rng = fastrand::Rng::with_seed(20);
    for isa in [Isa::Scalar, Isa::detect()] {
        for kind in KINDS {
            let (data, x, cols, rows, _) = case(&mut rng, kind);
            let n = rng.usize(1..=16) + if rng.bool() { 16 } else { 0 };
            let x = if x.len() >= n * cols {
                x[..n * cols].to_vec()
            } else {
                random_activations(&mut rng, n, cols)
            };
            let w = QuantMatrix::new(kind, rows, cols, &data).unwrap();
            let mut acts = QuantizedActivations::new();
            acts.quantize(kind, &x, n, cols).unwrap();
            let mut all = vec![0.0f32; n * rows];
            matmul(isa, &w, &acts, &mut all, 0..rows).unwrap();
            for i in 0..n {
                let mut one = QuantizedActivations::new();
                one.quantize(kind, &x[i * cols..(i + 1) * cols], 1, cols)
                    .unwrap();
                let mut single = vec![0.0f32; rows];
                matmul(isa, &w, &one, &mut single, 0..rows).unwrap();
                // Float weights with 24 or more rows take the dense panel
                // product, and on AVX2 Q4_0, Q4_1, Q8_0, the K-quants and
                // IQ4_XS from 5 rows take the interleaved kernels; both add in
                // another order: within f32 summation error there, bit for
                // bit everywhere else.
                let panel = acts.format() == ActFormat::F32 && n >= 24;
                let interleaved = cfg!(target_arch = "x86_64")
                    && acts.format() != ActFormat::F32
                    && matches!(
                        kind,
                        QuantKind::Q4_0
                            | QuantKind::Q4_1
                            | QuantKind::Q8_0
                            | QuantKind::Q2_K
                            | QuantKind::Q3_K
                            | QuantKind::Q4_K
                            | QuantKind::Q5_K
                            | QuantKind::Q6_K
                            | QuantKind::IQ4_XS
                    )
                    && n >= 5;
                if isa != Isa::Scalar && (panel || interleaved) {
                    for r in 0..rows {
                        let wr = weight_row(kind, &data, cols, r);
                        let (_, mag) = dot64(&wr, &x[i * cols..(i + 1) * cols]);
                        let (a, b) = (all[i * rows + r], single[r]);
                        assert!(
                            f64::from((a - b).abs()) <= 1e-5 * mag + 1e-6,
                            "{kind} {isa:?} act row {i} of {n}: {a} vs {b}"
                        );
                    }
                    continue;
                }
                assert_eq!(
                    &all[i * rows..(i + 1) * rows],
                    &single[..],
                    "{kind} {isa:?} act row {i} of {n}"
                );
            }
        }
    }
}

#[test]
fn a_row_range_writes_only_its_rows() {
    let mut rng = fastrand::Rng::with_seed(21);
    for kind in KINDS {
        let (data, x, cols, rows, n) = case(&mut rng, kind);
        let w = QuantMatrix::new(kind, rows, cols, &data).unwrap();
        let mut acts = QuantizedActivations::new();
        acts.quantize(kind, &x, n, cols).unwrap();
        let mut full = vec![0.0f32; n * rows];
        matmul(Isa::detect(), &w, &acts, &mut full, 0..rows).unwrap();
        let (a, b) = (rng.usize(0..=rows), rng.usize(0..=rows));
        let range = a.min(b)..a.max(b);
        let mut part = vec![-7.0f32; n * rows];
        matmul(Isa::detect(), &w, &acts, &mut part, range.clone()).unwrap();
        for i in 0..n {
            for r in 0..rows {
                let want = if range.contains(&r) {
                    full[i * rows + r]
                } else {
                    -7.0
                };
                assert_eq!(
                    part[i * rows + r],
                    want,
                    "{kind} rows {range:?}, act {i}, row {r}"
                );
            }
        }
    }
}

/// Quantized weights with f32 activations (`keep_f32`): the scalar path
/// and the detected SIMD path against the f64 product of the dequantized
/// weights and the unrounded activations, within f32 summation error
/// `1e-5 × Σ|w·x| + 1e-6`, for one and for many activation rows.
#[test]
fn f32_activations_match_f64_reference_for_every_kind() {
    let mut rng = fastrand::Rng::with_seed(24);
    for isa in [Isa::Scalar, Isa::detect()] {
        for kind in KINDS {
            let mut worst = 0.0f64;
            for _ in 0..12 {
                let (data, x, cols, rows, n) = case(&mut rng, kind);
                let w = QuantMatrix::new(kind, rows, cols, &data).unwrap();
                let mut acts = QuantizedActivations::new();
                acts.keep_f32(&x, n, cols).unwrap();
                let mut out = vec![f32::NAN; n * rows];
                matmul(isa, &w, &acts, &mut out, 0..rows).unwrap();
                for i in 0..n {
                    let xi = &x[i * cols..(i + 1) * cols];
                    for r in 0..rows {
                        let wr = weight_row(kind, &data, cols, r);
                        let got = f64::from(out[i * rows + r]);
                        let (exact, mag) = dot64(&wr, xi);
                        let tol = 1e-5 * mag + 1e-6;
                        assert!(
                            (got - exact).abs() <= tol,
                            "{kind} {isa:?} {rows}x{cols} row {r} act {i}: {got} vs {exact} (tol {tol})"
                        );
                        worst = worst.max((got - exact).abs() / mag.max(1e-30));
                    }
                }
            }
            println!("{kind} {isa:?} f32 activations: worst |err| / Σ|w·x| {worst:.2e}");
        }
    }
}
