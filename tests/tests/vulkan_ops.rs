//! The Vulkan model ops against a plain reference: the matrix product over
//! GGUF blocks as a file holds them, on random blocks (random quantized
//! values, scales drawn in the range trained models have) and random
//! activations, for every block type the kernels take, at shapes that
//! cover partial workgroups and batches beyond one pass of the kernel.
//! The reference dequantizes with `pagoda_core::dequantize_row` (itself
//! bit-identical to the `gguf` package) and sums in f64.
//!
//! Under the validation layer with the bounds-checking kernels; with
//! `CI=true` a missing device fails the run.

use half::f16;
use pagoda_conformance::Rng;
use pagoda_core::{dequantize_row, QuantKind};
use pagoda_vulkan::{matmul_kernel, VulkanBackend, VulkanError, VulkanOptions};

fn open() -> Option<VulkanBackend> {
    let options = VulkanOptions {
        validation: Some(true),
        bounds_checks: Some(true),
        ..VulkanOptions::from_env()
    };
    match VulkanBackend::new(&options) {
        Ok(b) => Some(b),
        Err(e) if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!("CI=true needs a Vulkan device with validation layers: {e}")
        }
        Err(e) => {
            eprintln!("skipping Vulkan op tests: {e}");
            None
        }
    }
}

/// Random rows of `kind`: quantized values random, each block's scale (and
/// minimum) an f16 drawn near trained models' magnitudes.
fn random_weights(rng: &mut Rng, kind: QuantKind, rows: usize, cols: usize) -> Vec<u8> {
    let bytes = kind.bytes_for(cols).unwrap() * rows;
    let mut out: Vec<u8> = (0..bytes).map(|_| rng.next_u64() as u8).collect();
    let put = |b: &mut [u8], v: f32| b.copy_from_slice(&f16::from_f32(v).to_bits().to_le_bytes());
    match kind {
        QuantKind::F32 => {
            for c in out.chunks_exact_mut(4) {
                c.copy_from_slice(&(rng.value() * 0.1).to_le_bytes());
            }
        }
        QuantKind::F16 => {
            for c in out.chunks_exact_mut(2) {
                put(c, rng.value() * 0.1);
            }
        }
        _ => {
            for block in out.chunks_exact_mut(kind.block_bytes()) {
                let d = 1e-3 + 4e-3 * (rng.below(1000) as f32 / 1000.0);
                put(&mut block[0..2], d);
                if matches!(kind, QuantKind::Q4_1) {
                    put(&mut block[2..4], -8.0 * d);
                }
            }
        }
    }
    out
}

#[test]
fn matmul_matches_a_plain_reference_for_every_block_type() {
    let Some(mut backend) = open() else {
        return;
    };
    let mut rng = Rng::new(0x5EED_0A75);
    let kinds = [
        QuantKind::F32,
        QuantKind::F16,
        QuantKind::Q4_0,
        QuantKind::Q4_1,
        QuantKind::Q8_0,
    ];
    let mut worst = 0.0f64;
    for kind in kinds {
        assert!(matmul_kernel(kind).is_some());
        for (rows, cols, batch) in [
            (1, 32, 1),
            (7, 64, 3),
            (64, 576, 8),
            (130, 1024, 11),
            (3, 2048, 17),
        ] {
            let weights = random_weights(&mut rng, kind, rows, cols);
            let x: Vec<f32> = (0..batch * cols).map(|_| rng.value()).collect();
            let got = backend
                .matmul(kind, &weights, rows, cols, &x, batch)
                .unwrap_or_else(|e| panic!("{} {rows}x{cols}x{batch}: {e}", kind.name()));
            assert_eq!(got.len(), batch * rows);
            let row_bytes = kind.bytes_for(cols).unwrap();
            let mut w = vec![0f32; cols];
            for r in 0..rows {
                dequantize_row(kind, &weights[r * row_bytes..][..row_bytes], &mut w).unwrap();
                for b in 0..batch {
                    let xs = &x[b * cols..][..cols];
                    let want: f64 = w
                        .iter()
                        .zip(xs)
                        .map(|(&a, &c)| f64::from(a) * f64::from(c))
                        .sum();
                    let scale: f64 = w
                        .iter()
                        .zip(xs)
                        .map(|(&a, &c)| (f64::from(a) * f64::from(c)).abs())
                        .sum();
                    let err = (f64::from(got[b * rows + r]) - want).abs() / scale.max(1e-30);
                    worst = worst.max(err);
                    // f32 sums of `cols` products, in a different order.
                    assert!(
                        err <= 1e-5,
                        "{} {rows}x{cols} batch {batch}: row {r} of input {b}: got {}, want {want} (error {err:.2e} of Σ|w·x|)",
                        kind.name(),
                        got[b * rows + r]
                    );
                }
            }
        }
    }
    eprintln!("worst matmul error: {worst:.2e} of Σ|w·x|");
    let messages = backend.validation_messages();
    assert!(messages.is_empty(), "validation layer: {messages:#?}");
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
        err(backend.matmul(QuantKind::Q6_K, &[0u8; 210], 1, 256, &[0f32; 256], 1)),
        VulkanError::Unsupported(_)
    ));
    // A good call still works after the refusals.
    let y = backend.matmul(QuantKind::Q4_0, &w, 2, 32, &x, 1).unwrap();
    assert_eq!(y, vec![0.0, 0.0]);
    let messages = backend.validation_messages();
    assert!(messages.is_empty(), "validation layer: {messages:#?}");
}
