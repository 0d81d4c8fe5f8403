//! The Vulkan model ops against a plain reference: the matrix product over
//! GGUF blocks as a file holds them, on random blocks (random quantized
//! values, scales drawn in the range trained models have) and random
//! activations, for every block type the kernels take, at shapes that
//! cover partial workgroups and tiles, through both the decode product
//! (both of its reductions) and the tiled prefill product.
//! The reference dequantizes with `pagoda_core::dequantize_row` (itself
//! bit-identical to the `gguf` package) and sums in f64.
//!
//! Under the validation layer with the bounds-checking kernels; with
//! `CI=true` a missing device fails the run.

mod ops_support;

use ops_support::*;
use pagoda_conformance::Rng;
use pagoda_core::QuantKind;
use pagoda_vulkan::{GluActivation, MatvecShape, Op, VulkanError, VulkanOptions};

#[test]
fn decode_products_match_a_plain_reference_for_every_block_type() {
    // Every decode kernel: the GPU product (matvec.comp) where the device
    // has subgroups, the plain product reduced by subgroup add, and
    // reduced in shared memory.
    let mut rng = Rng::new(0x5EED_0A75);
    for (subgroups, matvec) in [(true, None), (true, Some(0)), (false, Some(0))] {
        let options = VulkanOptions {
            subgroups: Some(subgroups),
            matvec_batch: matvec,
            ..VulkanOptions::from_env()
        };
        let Some(mut backend) = open_with(options) else {
            return;
        };
        let info = backend.info();
        let (used, vector) = (info.use_subgroups, info.matvec_batch);
        let worst = check_products(&mut backend, &mut rng, false);
        eprintln!(
            "worst decode product error (subgroups {used}, GPU product to batch {vector}): {worst:.2e} of Σ|w·x|"
        );
        assert_clean(&backend);
    }
}

#[test]
fn every_shape_of_the_gpu_decode_product_matches_a_plain_reference() {
    // Each specialisation of matvec.comp a device may be tuned to: rows
    // per workgroup, staged activations, the exponent trick.
    let mut rng = Rng::new(0x5EED_5A9E);
    // The types it takes.
    let quantized = &matvec_kinds()[..];
    for text in ["2m-b1-g64", "8s-b2-g64", "4m-g256"] {
        let shape = MatvecShape::parse(text).expect("a shape");
        let options = VulkanOptions {
            matvec_shape: Some(shape),
            ..VulkanOptions::from_env()
        };
        let Some(mut backend) = open_with(options) else {
            return;
        };
        if backend.info().matvec_batch == 0 {
            eprintln!("skipped: no GPU decode product on this device (subgroups of 4 or more)");
            return;
        }
        assert_eq!(backend.info().matvec_shape, shape);
        let worst = check_products_of(quantized, &mut backend, &mut rng, false);
        eprintln!("GPU decode product, shape {shape}: worst error {worst:.2e} of Σ|w·x|");
        assert_clean(&backend);
    }
}

#[test]
fn a_product_added_to_its_output_is_the_residual_sum() {
    // `accumulate` through each product kernel: the GPU decode product,
    // the plain one, and the tiled one (batch 20 without the GPU product).
    let mut rng = Rng::new(0xACC0_0001);
    for (matvec, batch) in [(None, 3usize), (Some(0), 3), (Some(0), 20)] {
        let options = VulkanOptions {
            matvec_batch: matvec,
            coopmat: Some(false),
            ..VulkanOptions::from_env()
        };
        let Some(mut backend) = open_with(options) else {
            return;
        };
        for kind in [QuantKind::Q4_0, QuantKind::Q6_K] {
            let (rows, cols) = (37, 2 * kind.block_elems().max(32));
            let weights = random_weights(&mut rng, kind, rows, cols);
            let w = dequantized(kind, &weights, rows, cols);
            let mut act: Vec<f32> = (0..batch * (cols + rows)).map(|_| rng.value()).collect();
            let before = act.clone();
            let op = Op::Matmul {
                kind,
                weights: 0,
                rows: rows as u32,
                cols: cols as u32,
                batch: batch as u32,
                x: 0,
                x_stride: cols as u32,
                y: (batch * cols) as u32,
                y_stride: rows as u32,
                accumulate: true,
            };
            backend.run_ops(&weights, &mut act, &mut [], &[op]).unwrap();
            for b in 0..batch {
                for r in 0..rows {
                    let at = batch * cols + b * rows + r;
                    let xs = &before[b * cols..][..cols];
                    let sum: f64 = w[r * cols..][..cols]
                        .iter()
                        .zip(xs)
                        .map(|(&a, &c)| f64::from(a) * f64::from(c))
                        .sum();
                    let want = f64::from(before[at]) + sum;
                    let err = (f64::from(act[at]) - want).abs();
                    assert!(
                        err <= 1e-5 * (1.0 + want.abs()),
                        "{} batch {batch}: row {r} of input {b}: got {}, want {want}",
                        kind.name(),
                        act[at]
                    );
                }
            }
        }
        assert_clean(&backend);
    }
}

#[test]
fn prefill_products_match_a_plain_reference_for_every_block_type() {
    // Both kernels: in cooperative matrices where the device has them,
    // and the f32 tiles.
    let mut rng = Rng::new(0x7113_D0A7);
    for coopmat in [true, false] {
        let options = VulkanOptions {
            coopmat: Some(coopmat),
            ..VulkanOptions::from_env()
        };
        let Some(mut backend) = open_with(options) else {
            return;
        };
        let used = backend.info().use_coopmat;
        eprintln!("{}", backend.info());
        // Where CI runs the cooperative-matrix lavapipe, it must be used.
        if coopmat && std::env::var("PAGODA_EXPECT_COOPMAT").is_ok_and(|v| v == "1") {
            assert!(used, "no cooperative-matrix product on {}", backend.info());
        }
        let worst = check_products(&mut backend, &mut rng, true);
        eprintln!("worst prefill product error (cooperative matrix {used}): {worst:.2e} of Σ|w·x|");
        assert_clean(&backend);
    }
}

#[test]
fn embedding_rows_equal_the_dequantized_rows() {
    let Some(mut backend) = open() else {
        return;
    };
    let mut rng = Rng::new(0xE3BE_D000);
    for kind in KINDS {
        let (rows, cols) = (50, if kind.block_elems() == 256 { 512 } else { 96 });
        let weights = random_weights(&mut rng, kind, rows, cols);
        let want = dequantized(kind, &weights, rows, cols);
        let mut meta: Vec<u32> = vec![7, 0, 49, 7, 23];
        let batch = meta.len();
        let mut act = vec![0f32; batch * cols + 3];
        let op = Op::Embed {
            kind,
            weights: 0,
            rows: rows as u32,
            cols: cols as u32,
            batch: batch as u32,
            tokens: 0,
            y: 3,
            y_stride: cols as u32,
            // A power of two, so the scaled rows are as exact as the rows.
            scale: 0.5,
        };
        backend
            .run_ops(&weights, &mut act, &mut meta, &[op])
            .unwrap();
        assert_eq!(&act[..3], &[0.0; 3], "nothing before y is written");
        for (b, &t) in [7usize, 0, 49, 7, 23].iter().enumerate() {
            let got = &act[3 + b * cols..][..cols];
            let row = &want[t * cols..][..cols];
            for (g, w) in got.iter().zip(row) {
                let w = 0.5 * w;
                assert!(
                    (g - w).abs() <= 1e-6 * w.abs().max(1e-3),
                    "{} token {t}: {g} vs {w}",
                    kind.name()
                );
            }
        }
    }
    assert_clean(&backend);
}

#[test]
fn norm_rope_swiglu_add_and_argmax_match_plain_references() {
    let Some(mut backend) = open() else {
        return;
    };
    let mut rng = Rng::new(0x0E1E_3E27);
    let (batch, heads, head_dim, half, table_rows) = (3usize, 4usize, 64usize, 24usize, 40usize);
    let cols = heads * head_dim;
    let gains: Vec<f32> = (0..cols).map(|_| 1.0 + 0.2 * rng.value()).collect();
    let cos: Vec<f32> = (0..table_rows * half).map(|_| rng.value()).collect();
    let sin: Vec<f32> = (0..table_rows * half).map(|_| rng.value()).collect();
    let mut weights = f32_bytes(&gains);
    weights.extend(f32_bytes(&cos));
    weights.extend(f32_bytes(&sin));
    let (cos_at, sin_at) = ((4 * cols) as u64, (4 * cols + 4 * table_rows * half) as u64);
    let x: Vec<f32> = (0..batch * cols).map(|_| rng.value()).collect();
    let positions = [5u32, 0, 39];

    // Rotary in both pair orders, gating with both activations, RMSNorm
    // and LayerNorm.
    for (interleaved, activation, centered) in [
        (false, GluActivation::Silu, false),
        (true, GluActivation::GeluTanh, true),
    ] {
        // Rows off zero on average, so that taking the mean off matters.
        let offset = if centered { 0.75 } else { 0.0 };
        let x: Vec<f32> = x.iter().map(|v| v + offset).collect();
        // act: x | normed | up | product
        let mut act = x.clone();
        act.extend((0..batch * cols).map(|_| 0.0));
        act.extend((0..batch * cols).map(|_| rng.value()));
        act.extend((0..batch * cols).map(|_| 0.0));
        let up: Vec<f32> = act[2 * batch * cols..3 * batch * cols].to_vec();
        let mut meta: Vec<u32> = positions.to_vec();
        meta.extend([0u32; 3]);
        let n = (batch * cols) as u32;
        let ops = [
            Op::RmsNorm {
                gains: 0,
                cols: cols as u32,
                batch: batch as u32,
                x: 0,
                x_stride: cols as u32,
                y: n,
                y_stride: cols as u32,
                eps: 1e-5,
                centered,
            },
            Op::Rope {
                cos: cos_at,
                sin: sin_at,
                table_rows: table_rows as u32,
                half: half as u32,
                interleaved,
                heads: heads as u32,
                head_dim: head_dim as u32,
                batch: batch as u32,
                x: n,
                x_stride: cols as u32,
                positions: 0,
            },
            Op::Glu {
                activation,
                cols: cols as u32,
                batch: batch as u32,
                gate: n,
                up: 2 * n,
                stride: cols as u32,
                y: 3 * n,
                y_stride: cols as u32,
            },
            Op::Add {
                cols: cols as u32,
                batch: batch as u32,
                x: 3 * n,
                x_stride: cols as u32,
                y: 0,
                y_stride: cols as u32,
            },
            Op::Argmax {
                cols: cols as u32,
                batch: batch as u32,
                x: 0,
                x_stride: cols as u32,
                out: 3,
            },
        ];
        backend
            .run_ops(&weights, &mut act, &mut meta, &ops)
            .unwrap();

        // The same program on the host, in f64.
        for b in 0..batch {
            let xb: Vec<f64> = x[b * cols..][..cols]
                .iter()
                .map(|&v| f64::from(v))
                .collect();
            let mean = xb.iter().sum::<f64>() / cols as f64;
            let shift = if centered { mean } else { 0.0 };
            let ms = xb.iter().map(|v| (v - shift).powi(2)).sum::<f64>() / cols as f64;
            let inv = 1.0 / (ms + 1e-5f64).sqrt();
            let mut h: Vec<f64> = xb
                .iter()
                .zip(&gains)
                .map(|(v, &g)| (v - shift) * inv * f64::from(g))
                .collect();
            let p = positions[b] as usize;
            for head in 0..heads {
                for i in 0..half {
                    let (a, z) = if interleaved {
                        (2 * i, 2 * i + 1)
                    } else {
                        (i, i + half)
                    };
                    let (a, z) = (head * head_dim + a, head * head_dim + z);
                    let (c, s) = (f64::from(cos[p * half + i]), f64::from(sin[p * half + i]));
                    let (x0, x1) = (h[a], h[z]);
                    h[a] = x0 * c - x1 * s;
                    h[z] = x0 * s + x1 * c;
                }
            }
            let normed = &act[batch * cols + b * cols..][..cols];
            for (i, (&g, w)) in normed.iter().zip(&h).enumerate() {
                assert!(
                    (f64::from(g) - w).abs() <= 1e-5 * w.abs().max(1.0),
                    "norm+rope {b}/{i}: {g} vs {w}"
                );
            }
            let mut out = xb.clone();
            for i in 0..cols {
                let g = h[i];
                let gated = match activation {
                    GluActivation::Silu => g / (1.0 + (-g).exp()),
                    GluActivation::GeluTanh => {
                        let inner =
                            (2.0 / std::f64::consts::PI).sqrt() * (g + 0.044715 * g * g * g);
                        0.5 * g * (1.0 + inner.tanh())
                    }
                };
                out[i] += gated * f64::from(up[b * cols + i]);
            }
            for (i, (&g, w)) in act[b * cols..][..cols].iter().zip(&out).enumerate() {
                assert!(
                    (f64::from(g) - w).abs() <= 1e-5 * w.abs().max(1.0),
                    "{activation:?}+add {b}/{i}: {g} vs {w}"
                );
            }
            let best = act[b * cols..][..cols]
                .iter()
                .enumerate()
                .fold(
                    0,
                    |best, (i, &v)| if v > act[b * cols + best] { i } else { best },
                );
            assert_eq!(meta[3 + b] as usize, best, "argmax of row {b}");
        }
    }

    // Ties go to the lowest index, wherever the maximum repeats.
    let mut act = vec![0.5f32; 300];
    for i in [17, 200, 299] {
        act[i] = 2.0;
    }
    let mut meta = vec![9u32];
    let op = Op::Argmax {
        cols: 300,
        batch: 1,
        x: 0,
        x_stride: 300,
        out: 0,
    };
    backend
        .run_ops(&[0u8; 4], &mut act, &mut meta, &[op])
        .unwrap();
    assert_eq!(meta, [17]);
    assert_clean(&backend);
}

/// Rows far longer than a workgroup's invocations times its unrolled loads
/// (a Llama-3 row, a vocabulary of logits, odd lengths that end mid-pass):
/// the norm and the argmax still read every element once.
#[test]
fn norm_and_argmax_cover_long_rows() {
    let Some(mut backend) = open() else {
        return;
    };
    let mut rng = Rng::new(0x10C6_A7E5);
    for cols in [4096usize, 9_001, 70_013] {
        let batch = 2usize;
        let gains: Vec<f32> = (0..cols).map(|_| 1.0 + 0.2 * rng.value()).collect();
        let x: Vec<f32> = (0..batch * cols).map(|_| rng.value()).collect();
        let mut act = x.clone();
        act.resize(2 * batch * cols, 0.0);
        // Row 1's maximum repeats late in the row: the first one wins.
        let peak = cols - 3;
        act[cols + peak] = 5.0;
        act[cols + cols - 1] = 5.0;
        let x1 = act[..batch * cols].to_vec();
        let mut meta = vec![u32::MAX; batch];
        let n = (batch * cols) as u32;
        let ops = [
            Op::RmsNorm {
                gains: 0,
                cols: cols as u32,
                batch: batch as u32,
                x: 0,
                x_stride: cols as u32,
                y: n,
                y_stride: cols as u32,
                eps: 1e-6,
                centered: false,
            },
            Op::Argmax {
                cols: cols as u32,
                batch: batch as u32,
                x: 0,
                x_stride: cols as u32,
                out: 0,
            },
        ];
        backend
            .run_ops(&f32_bytes(&gains), &mut act, &mut meta, &ops)
            .unwrap();
        for b in 0..batch {
            let row = &x1[b * cols..][..cols];
            let ms = row.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>() / cols as f64;
            let inv = 1.0 / (ms + 1e-6).sqrt();
            for (i, (&got, (&v, &g))) in act[batch * cols + b * cols..][..cols]
                .iter()
                .zip(row.iter().zip(&gains))
                .enumerate()
            {
                let want = f64::from(v) * inv * f64::from(g);
                assert!(
                    (f64::from(got) - want).abs() <= 1e-5 * want.abs().max(1.0),
                    "norm of {cols}, row {b}, element {i}: {got} vs {want}"
                );
            }
            let best = row
                .iter()
                .enumerate()
                .fold(0, |best, (i, &v)| if v > row[best] { i } else { best });
            assert_eq!(meta[b] as usize, best, "argmax of {cols}, row {b}");
        }
        assert_eq!(meta[1] as usize, peak);
    }
    assert_clean(&backend);
}

#[test]
fn resident_weights_serve_many_programs() {
    let Some(mut backend) = open() else {
        return;
    };
    let mut rng = Rng::new(0x4E51_D347);
    let (rows, cols) = (32usize, 256usize);
    let weights = random_weights(&mut rng, QuantKind::Q4_K, rows, cols);
    let resident = backend.upload_weights(&weights).unwrap();
    assert_eq!(resident.bytes(), weights.len() as u64);
    let w = dequantized(QuantKind::Q4_K, &weights, rows, cols);
    for _ in 0..3 {
        let mut act: Vec<f32> = (0..cols).map(|_| rng.value()).collect();
        act.resize(cols + rows, 0.0);
        let op = Op::Matmul {
            kind: QuantKind::Q4_K,
            weights: 0,
            rows: rows as u32,
            cols: cols as u32,
            batch: 1,
            x: 0,
            x_stride: cols as u32,
            y: cols as u32,
            y_stride: rows as u32,
            accumulate: false,
        };
        let x = act[..cols].to_vec();
        backend
            .run_ops_on(&resident, &mut act, &mut [], &[op])
            .unwrap();
        for r in 0..rows {
            let want: f64 = w[r * cols..][..cols]
                .iter()
                .zip(&x)
                .map(|(&a, &b)| f64::from(a) * f64::from(b))
                .sum();
            assert!((f64::from(act[cols + r]) - want).abs() <= 1e-4 * want.abs().max(1.0));
        }
    }
    assert_clean(&backend);
}

#[test]
fn matmul_refuses_mismatched_operands_and_unsupported_types() {
    let Some(mut backend) = open() else {
        return;
    };
    let w = vec![0u8; 18 * 2];
    let x = vec![0f32; 32];
    let err = |r: Result<Vec<f32>, VulkanError>| r.expect_err("must be refused");
    // Two Q4_0 rows of 32 are 36 bytes; one byte short is refused.
    assert!(matches!(
        err(backend.matmul(QuantKind::Q4_0, &w[..35], 2, 32, &x, 1)),
        VulkanError::Shape(_)
    ));
    // Rows that are not whole blocks.
    assert!(matches!(
        err(backend.matmul(QuantKind::Q4_0, &w, 2, 31, &x[..31], 1)),
        VulkanError::Shape(_)
    ));
    // Inputs that are not batch × cols.
    assert!(matches!(
        err(backend.matmul(QuantKind::Q4_0, &w, 2, 32, &x[..31], 1)),
        VulkanError::Shape(_)
    ));
    assert!(matches!(
        err(backend.matmul(QuantKind::BF16, &[0u8; 64], 1, 32, &[0f32; 32], 1)),
        VulkanError::Unsupported(_)
    ));
    // Programs: an output past the activations, a token past the
    // vocabulary, a position past the table, misaligned gains.
    let mut act = vec![0f32; 64];
    let mut meta = vec![3u32];
    let embed = |rows| Op::Embed {
        kind: QuantKind::Q4_0,
        weights: 0,
        rows,
        cols: 32,
        batch: 1,
        tokens: 0,
        y: 0,
        y_stride: 32,
        scale: 1.0,
    };
    assert!(matches!(
        err(backend
            .run_ops(&w, &mut act, &mut meta, &[embed(2)])
            .map(|()| vec![])),
        VulkanError::Shape(_)
    ));
    let past = Op::Add {
        cols: 40,
        batch: 2,
        x: 0,
        x_stride: 40,
        y: 0,
        y_stride: 40,
    };
    assert!(matches!(
        err(backend
            .run_ops(&w, &mut act, &mut meta, &[past])
            .map(|()| vec![])),
        VulkanError::Shape(_)
    ));
    let norm = Op::RmsNorm {
        gains: 2,
        cols: 4,
        batch: 1,
        x: 0,
        x_stride: 4,
        y: 0,
        y_stride: 4,
        eps: 1e-5,
        centered: false,
    };
    assert!(matches!(
        err(backend
            .run_ops(&w, &mut act, &mut meta, &[norm])
            .map(|()| vec![])),
        VulkanError::Shape(_)
    ));
    let rope = Op::Rope {
        cos: 0,
        sin: 0,
        table_rows: 3,
        half: 1,
        interleaved: false,
        heads: 1,
        head_dim: 2,
        batch: 1,
        x: 0,
        x_stride: 2,
        positions: 0,
    };
    assert!(matches!(
        err(backend
            .run_ops(&[0u8; 16], &mut act, &mut meta, &[rope])
            .map(|()| vec![])),
        VulkanError::Shape(_)
    ));
    assert_eq!(act, vec![0f32; 64], "a refused program changes nothing");
    // A good call still works after the refusals.
    let y = backend.matmul(QuantKind::Q4_0, &w, 2, 32, &x, 1).unwrap();
    assert_eq!(y, vec![0.0, 0.0]);
    let messages = backend.validation_messages();
    assert!(messages.is_empty(), "validation layer: {messages:#?}");
}

#[test]
fn weights_split_across_bindings_serve_products_from_each() {
    // Bindings of one matrix each: three matrices take three bindings, and
    // each product reads its own.
    let (rows, cols, kind) = (24usize, 64usize, QuantKind::Q4_0);
    let bytes = kind.bytes_for(cols).unwrap() * rows;
    let Some(mut backend) = open_with(VulkanOptions {
        max_weight_chunk_bytes: Some(bytes as u64 + 64),
        ..VulkanOptions::from_env()
    }) else {
        return;
    };
    let mut rng = Rng::new(0x5B117);
    let mut weights = Vec::new();
    let mut cuts = Vec::new();
    for _ in 0..3 {
        weights.resize(weights.len().next_multiple_of(16), 0);
        cuts.push(weights.len() as u64);
        weights.extend(random_weights(&mut rng, kind, rows, cols));
    }
    // Without cuts they do not fit one binding.
    assert!(matches!(
        backend.upload_weights(&weights),
        Err(VulkanError::Unsupported(_))
    ));
    let resident = backend.upload_weights_split(&weights, &cuts).unwrap();
    assert_eq!(resident.bindings(), 3);
    let x: Vec<f32> = (0..cols).map(|_| rng.value()).collect();
    let mut act = x.clone();
    act.resize(cols + 3 * rows, 0.0);
    let ops: Vec<Op> = (0..3)
        .map(|m| Op::Matmul {
            kind,
            weights: cuts[m],
            rows: rows as u32,
            cols: cols as u32,
            batch: 1,
            x: 0,
            x_stride: cols as u32,
            y: (cols + m * rows) as u32,
            y_stride: rows as u32,
            accumulate: false,
        })
        .collect();
    backend
        .run_ops_on(&resident, &mut act, &mut [], &ops)
        .unwrap();
    for (m, &at) in cuts.iter().enumerate() {
        let w = dequantized(kind, &weights[at as usize..][..bytes], rows, cols);
        for r in 0..rows {
            let want: f64 = w[r * cols..][..cols]
                .iter()
                .zip(&x)
                .map(|(&a, &b)| f64::from(a) * f64::from(b))
                .sum();
            let got = f64::from(act[cols + m * rows + r]);
            assert!(
                (got - want).abs() <= 1e-5 * (1.0 + want.abs()),
                "matrix {m} row {r}: {got} vs {want}"
            );
        }
    }
    // A product reaching past its binding is refused before anything runs.
    let straddling = Op::Matmul {
        kind,
        weights: cuts[1] - 16,
        rows: rows as u32,
        cols: cols as u32,
        batch: 1,
        x: 0,
        x_stride: cols as u32,
        y: cols as u32,
        y_stride: rows as u32,
        accumulate: false,
    };
    assert!(backend
        .run_ops_on(&resident, &mut act, &mut [], &[straddling])
        .is_err());
    assert_clean(&backend);
}
