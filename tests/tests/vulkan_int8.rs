//! The GPU decode product on 8-bit activations (`matvec_dot_*`, integer
//! dot products), forced on wherever the device has
//! `VK_KHR_shader_integer_dot_product`: every block type's product within
//! what rounding its activations can move it (the f32 sums' tolerance plus
//! Σ|w| × each run of 16's largest magnitude / 254), and the norm and
//! gated unit that round the rows they write in place of a `quantize`.
//! Under the validation layer with the bounds-checking kernels; with
//! `CI=true` a missing device fails the run.

mod ops_support;

use ops_support::*;
use pagoda_conformance::{dot_and_magnitude, rounding_bound, Rng};
use pagoda_core::QuantKind;
use pagoda_vulkan::{GluActivation, MatvecShape, Op, VulkanOptions};

#[test]
fn the_gpu_decode_product_on_8_bit_activations_stays_within_their_rounding() {
    // The integer-dot variant of matvec.comp, forced on wherever the
    // device has VK_KHR_shader_integer_dot_product (accelerated or not),
    // in the default shape and with one activation row a pass.
    let mut rng = Rng::new(0x1D07_8B17);
    for text in ["4m", "2m-b1-g64", "8m-b8"] {
        let options = VulkanOptions {
            integer_dot: Some(true),
            matvec_shape: MatvecShape::parse(text),
            ..VulkanOptions::from_env()
        };
        let Some(mut backend) = open_with(options) else {
            return;
        };
        let info = backend.info();
        if info.integer_dot.is_none() || info.matvec_batch == 0 {
            eprintln!("skipped: no integer dot product or no GPU decode product on this device");
            return;
        }
        assert!(info.use_integer_dot);
        let worst = check_products_of(&matvec_kinds(), &mut backend, &mut rng, false);
        eprintln!("GPU decode product on 8-bit activations, shape {text}: worst error {worst:.2e} of Σ|w·x|");
        assert_clean(&backend);
    }
}

/// A norm and a gated unit feeding 8-bit products write the rounded rows
/// themselves (no quantize dispatch between), and the products still stay
/// within the rounding of what those ops wrote.
#[test]
fn norm_and_gated_unit_round_the_rows_their_8_bit_products_read() {
    let Some(mut backend) = open_with(VulkanOptions {
        integer_dot: Some(true),
        ..VulkanOptions::from_env()
    }) else {
        return;
    };
    let info = backend.info();
    if info.integer_dot.is_none() || info.matvec_batch == 0 {
        eprintln!("skipped: no integer dot product or no GPU decode product on this device");
        return;
    }
    let mut rng = Rng::new(0x0F05_ED08);
    let (kind, rows, cols, batch) = (QuantKind::Q4_K, 37usize, 512usize, 3usize);
    let weights = random_weights(&mut rng, kind, rows, cols);
    let w = dequantized(kind, &weights, rows, cols);
    let gains: Vec<f32> = (0..cols).map(|_| 1.0 + 0.2 * rng.value()).collect();
    let mut all = weights.clone();
    all.resize(all.len().next_multiple_of(16), 0);
    let gains_at = all.len() as u64;
    all.extend(f32_bytes(&gains));
    // act: x | normed | gate | up | gated | y1 | y2
    let n = (batch * cols) as u32;
    let mut act: Vec<f32> = (0..5 * batch * cols).map(|_| rng.value()).collect();
    act.resize(5 * batch * cols + 2 * batch * rows, 0.0);
    let y1 = 5 * n;
    let y2 = y1 + (batch * rows) as u32;
    let product = |x, y| Op::Matmul {
        kind,
        weights: 0,
        rows: rows as u32,
        cols: cols as u32,
        batch: batch as u32,
        x,
        x_stride: cols as u32,
        y,
        y_stride: rows as u32,
        accumulate: false,
    };
    let ops = [
        Op::RmsNorm {
            gains: gains_at,
            cols: cols as u32,
            batch: batch as u32,
            x: 0,
            x_stride: cols as u32,
            y: n,
            y_stride: cols as u32,
            eps: 1e-5,
            centered: false,
        },
        product(n, y1),
        Op::Glu {
            activation: GluActivation::Silu,
            cols: cols as u32,
            batch: batch as u32,
            gate: 2 * n,
            up: 3 * n,
            stride: cols as u32,
            y: 4 * n,
            y_stride: cols as u32,
        },
        product(4 * n, y2),
    ];
    backend.run_ops(&all, &mut act, &mut [], &ops).unwrap();
    assert_eq!(
        backend.last_program_dispatches(),
        ops.len(),
        "no quantize between"
    );
    // Each product against the rows its input op wrote (as the device
    // holds them), within their rounding.
    for (input, out) in [(n, y1), (4 * n, y2)] {
        for b in 0..batch {
            let xs = &act[input as usize + b * cols..][..cols];
            for r in 0..rows {
                let wr = &w[r * cols..][..cols];
                let (want, scale) = dot_and_magnitude(wr, xs);
                let got = f64::from(act[out as usize + b * rows + r]);
                let bound = 1e-5 * scale + 1.01 * rounding_bound(wr, xs);
                assert!(
                    (got - want).abs() <= bound,
                    "input at {input}, row {r} of {b}: {got} vs {want}"
                );
            }
        }
    }
    assert_clean(&backend);
}
