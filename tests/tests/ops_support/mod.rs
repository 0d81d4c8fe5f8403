//! Shared by the Vulkan op tests (`vulkan_ops.rs`, `vulkan_int8.rs`):
//! opening the backend under the validation layer, random GGUF blocks, the
//! f64 reference of a product, and the check of every block type's product
//! at shapes that cover partial workgroups and tiles.

#![allow(dead_code)]

use half::f16;
use pagoda_conformance::{dot_and_magnitude, rounding_bound, Rng};
use pagoda_core::{dequantize_row, QuantKind};
use pagoda_vulkan::{matmul_kernel, matmul_kernels, VulkanBackend, VulkanOptions};

pub fn open() -> Option<VulkanBackend> {
    open_with(VulkanOptions::from_env())
}

/// A backend with `options`, under the validation layer with the
/// bounds-checking kernels; f32 activations in the GPU decode product
/// unless `options` ask for 8-bit ones (which their own test checks).
pub fn open_with(options: VulkanOptions) -> Option<VulkanBackend> {
    let options = VulkanOptions {
        validation: Some(true),
        bounds_checks: Some(true),
        integer_dot: options.integer_dot.or(Some(false)),
        ..options
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

/// Where a block's f16 scales sit: (offset, low, high); a minimum field is
/// written as `-8 d` (Q4_1) or `-16 d` (Q5_1) after `d`.
pub fn scale_fields(kind: QuantKind) -> &'static [(usize, f32, f32)] {
    match kind {
        QuantKind::Q4_0 | QuantKind::Q4_1 => &[(0, 1e-3, 5e-3)],
        QuantKind::Q5_0 | QuantKind::Q5_1 => &[(0, 5e-4, 3e-3)],
        QuantKind::Q8_0 => &[(0, 1e-4, 5e-4)],
        QuantKind::Q4_K | QuantKind::Q5_K => &[(0, 2e-4, 5e-4), (2, 2e-4, 5e-4)],
        QuantKind::Q6_K => &[(208, 3e-5, 1e-4)],
        QuantKind::Q2_K => &[(80, 1e-3, 3e-3), (82, 1e-3, 3e-3)],
        QuantKind::Q3_K => &[(108, 5e-4, 1e-3)],
        QuantKind::IQ4_NL => &[(0, 1e-4, 5e-4)],
        QuantKind::IQ4_XS => &[(0, 5e-6, 2e-5)],
        _ => &[],
    }
}

/// Random rows of `kind`: quantized values random, each block's scales an
/// f16 drawn near trained models' magnitudes.
pub fn random_weights(rng: &mut Rng, kind: QuantKind, rows: usize, cols: usize) -> Vec<u8> {
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
                let mut d = 0.0;
                for &(at, low, high) in scale_fields(kind) {
                    d = low + (high - low) * (rng.below(1000) as f32 / 1000.0);
                    put(&mut block[at..at + 2], d);
                }
                match kind {
                    QuantKind::Q4_1 => put(&mut block[2..4], -8.0 * d),
                    QuantKind::Q5_1 => put(&mut block[2..4], -16.0 * d),
                    _ => {}
                }
            }
        }
    }
    out
}

/// Every block type the product takes.
pub const KINDS: [QuantKind; 14] = [
    QuantKind::F32,
    QuantKind::F16,
    QuantKind::Q4_0,
    QuantKind::Q4_1,
    QuantKind::Q5_0,
    QuantKind::Q5_1,
    QuantKind::Q8_0,
    QuantKind::Q4_K,
    QuantKind::Q5_K,
    QuantKind::Q6_K,
    QuantKind::Q2_K,
    QuantKind::Q3_K,
    QuantKind::IQ4_NL,
    QuantKind::IQ4_XS,
];

/// The block types with a GPU decode product (matrix-vector kernels):
/// the quantized ones but Q2_K, Q3_K and the IQ4 types.
pub fn matvec_kinds() -> Vec<QuantKind> {
    KINDS
        .into_iter()
        .filter(|&k| matmul_kernels(k).is_some_and(|m| m.vector.is_some()))
        .collect()
}

pub fn dequantized(kind: QuantKind, weights: &[u8], rows: usize, cols: usize) -> Vec<f32> {
    let row_bytes = kind.bytes_for(cols).unwrap();
    let mut out = vec![0f32; rows * cols];
    for (r, row) in out.chunks_exact_mut(cols).enumerate() {
        dequantize_row(kind, &weights[r * row_bytes..][..row_bytes], row).unwrap();
    }
    out
}

pub fn assert_clean(backend: &VulkanBackend) {
    let messages = backend.validation_messages();
    assert!(messages.is_empty(), "validation layer: {messages:#?}");
}

/// Shapes `(rows, cols, batch)` for `kind`: decode batches (1, 3, 8: the
/// decode product) and prefill batches (9, 33, 70: the tiled product), with
/// row counts that leave partial workgroups and partial tiles (64 rows ×
/// 32 activation rows), and for one-element blocks columns that leave a
/// partial step of the tile (32 columns).
pub fn product_shapes(kind: QuantKind, prefill: bool) -> Vec<(usize, usize, usize)> {
    let k = kind.block_elems().max(32);
    let mut shapes = if prefill {
        vec![(3, 2 * k, 9), (70, k, 33), (130, 2 * k, 70)]
    } else {
        vec![
            (1, k, 1),
            (7, 2 * k, 3),
            (65, 3 * k, 8),
            (64, if k == 32 { 576 } else { 6 * k }, 8),
            // Two passes of the GPU decode product.
            (33, 2 * k, 16),
            // Rows of 300 or 320 tasks of 32 weights: passes of 128
            // tasks, the last one partial (the GPU product's staged
            // activations).
            (5, if k == 32 { 300 * 32 } else { 40 * k }, 2),
        ]
    };
    if kind.block_elems() == 1 {
        shapes.push(if prefill { (9, 100, 40) } else { (5, 100, 3) });
    }
    shapes
}

/// Error allowed the cooperative-matrix product, relative to Σ|w·x|: it
/// rounds both operands to f16 (2^-11 relative each, so 9.8e-4 on a
/// product), and weights below f16's normal range (6.1e-5, where Q6_K's
/// smallest test scales put some) lose more; the f32 kernels are held to
/// 1e-5.
pub const COOPMAT_TOLERANCE: f64 = 2e-3;

/// Runs the product at every shape of every block type and compares each
/// output with the f64 sum of the dequantized products; returns the worst
/// error relative to Σ|w·x|.
pub fn check_products(backend: &mut VulkanBackend, rng: &mut Rng, prefill: bool) -> f64 {
    check_products_of(&KINDS, backend, rng, prefill)
}

/// [`check_products`] for some block types.
pub fn check_products_of(
    kinds: &[QuantKind],
    backend: &mut VulkanBackend,
    rng: &mut Rng,
    prefill: bool,
) -> f64 {
    let mut worst = 0.0f64;
    for &kind in kinds {
        assert!(matmul_kernel(kind).is_some());
        for (rows, cols, batch) in product_shapes(kind, prefill) {
            let info = backend.info();
            let vector = batch as u32 <= info.matvec_batch
                && matmul_kernels(kind).is_some_and(|k| k.vector.is_some());
            let rounded = vector && info.use_integer_dot;
            let tolerance = if batch > 8 && info.use_coopmat && !vector {
                COOPMAT_TOLERANCE
            } else {
                1e-5
            };
            let weights = random_weights(rng, kind, rows, cols);
            let x: Vec<f32> = (0..batch * cols).map(|_| rng.value()).collect();
            let got = backend
                .matmul(kind, &weights, rows, cols, &x, batch)
                .unwrap_or_else(|e| panic!("{} {rows}x{cols}x{batch}: {e}", kind.name()));
            assert_eq!(got.len(), batch * rows);
            let w = dequantized(kind, &weights, rows, cols);
            for r in 0..rows {
                let wr = &w[r * cols..][..cols];
                for b in 0..batch {
                    let xs = &x[b * cols..][..cols];
                    let (want, scale) = dot_and_magnitude(wr, xs);
                    let err = (f64::from(got[b * rows + r]) - want).abs() / scale.max(1e-30);
                    worst = worst.max(err);
                    // f32 sums of `cols` products, in a different order;
                    // with 8-bit activations, also what rounding each run
                    // of 16 to its largest magnitude / 127 can move them.
                    let tolerance = if rounded {
                        tolerance + 1.01 * rounding_bound(wr, xs) / scale.max(1e-30)
                    } else {
                        tolerance
                    };
                    assert!(
                        err <= tolerance,
                        "{} {rows}x{cols} batch {batch}: row {r} of input {b}: got {}, want {want} (error {err:.2e} of Σ|w·x|)",
                        kind.name(),
                        got[b * rows + r]
                    );
                }
            }
        }
    }
    worst
}

/// f32 bytes of `values`, for tables and gains in the weights buffer.
pub fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}
