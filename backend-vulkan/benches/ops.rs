//! The Vulkan model ops' matrix products, timed as decode reads them: one
//! transformer layer's seven projections as one program (one submission,
//! seven dispatches, a barrier after each), per block type, on whatever
//! device Vulkan offers (`PAGODA_VULKAN_DEVICE` picks one):
//!
//! ```text
//! cargo bench -p pagoda-vulkan --bench ops
//! ```
//!
//! 1. **Check**: each type's product against `dequantize_row` + f64 sums on
//!    a small random matrix, before any timing.
//! 2. **Bandwidth**: device-local copies by `vkCmdCopyBuffer` and by a copy
//!    kernel (bytes read + written per second; the better is the baseline),
//!    and a read kernel's rate, each after half a second of copies (GPUs
//!    raise their clocks under load).
//! 3. **Layer**: each decode product the device has (the GPU one, four rows
//!    a workgroup sharing activations; the plain one) at batches 1, 16 and
//!    32, on Llama 3 8B's layer shapes
//!    (hidden 4096, 8 KV heads of 128, FFN 14336; 218 M weights) on a GPU,
//!    a small layer (hidden 1024, FFN 2816; 10 M weights) on a CPU device,
//!    where the point is that it runs. Device time from GPU timestamps
//!    (median of 10 programs after a fifth of a second of them; 3 on a CPU
//!    device); weight bytes read per second and their share of the copy
//!    bandwidth.
//! 4. **Prefill**: the same layer at 512 activation rows (64 on a CPU
//!    device) in Q4_0 and Q4_K, as GFLOP/s (2 × rows × columns × batch per
//!    product), through the f32 tiled product and, where the device has
//!    `VK_KHR_cooperative_matrix`, the cooperative-matrix one.
//!
//! Weights are random blocks with small scales; the kernels' work does not
//! depend on the values. Timing runs the plain kernels without validation.

use pagoda_conformance::{dot_and_magnitude, rounding_bound, Rng};
use pagoda_core::{dequantize_row, QuantKind};
use pagoda_vulkan::{DeviceKind, MatvecShape, Op, VulkanBackend, VulkanOptions, VulkanWeights};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Random blocks of `kind` with every f16 field small and positive (scales
/// and minimums alike), so no block holds an infinity or NaN.
fn random_weights(rng: &mut Rng, kind: QuantKind, rows: usize, cols: usize) -> Vec<u8> {
    let bytes = kind.bytes_for(cols).expect("whole blocks") * rows;
    let mut out: Vec<u8> = (0..bytes).map(|_| rng.next_u64() as u8).collect();
    let small = half::f16::from_f32(2e-3).to_bits().to_le_bytes();
    let fields: &[usize] = match kind {
        QuantKind::F32 | QuantKind::F16 | QuantKind::BF16 => &[],
        QuantKind::Q4_1 | QuantKind::Q5_1 | QuantKind::Q4_K | QuantKind::Q5_K => &[0, 2],
        QuantKind::Q6_K => &[208],
        _ => &[0],
    };
    if kind == QuantKind::F16 {
        for c in out.chunks_exact_mut(2) {
            c.copy_from_slice(&small);
        }
    }
    if kind == QuantKind::F32 {
        for c in out.chunks_exact_mut(4) {
            c.copy_from_slice(&1e-3f32.to_le_bytes());
        }
    }
    for block in out.chunks_exact_mut(kind.block_bytes()) {
        for &at in fields {
            block[at..at + 2].copy_from_slice(&small);
        }
    }
    out
}

const KINDS: [QuantKind; 6] = [
    QuantKind::Q4_0,
    QuantKind::Q4_K,
    QuantKind::Q5_K,
    QuantKind::Q6_K,
    QuantKind::Q8_0,
    QuantKind::F16,
];

fn check(backend: &mut VulkanBackend, rng: &mut Rng) {
    // The integer-dot variant rounds the activations to 8 bits: its bound
    // is what that rounding can move the sums, over the f32 sums' own.
    let rounded = backend.info().use_integer_dot;
    for kind in KINDS {
        let (rows, cols, batch) = (16, 512, 3);
        let w = random_weights(rng, kind, rows, cols);
        let x: Vec<f32> = (0..batch * cols).map(|_| rng.value()).collect();
        let got = backend
            .matmul(kind, &w, rows, cols, &x, batch)
            .expect("check product runs");
        let row_bytes = kind.bytes_for(cols).expect("whole blocks");
        let mut dq = vec![0f32; cols];
        for r in 0..rows {
            dequantize_row(kind, &w[r * row_bytes..][..row_bytes], &mut dq).expect("dequantize");
            for b in 0..batch {
                let xs = &x[b * cols..][..cols];
                let (want, scale) = dot_and_magnitude(&dq, xs);
                let err = (f64::from(got[b * rows + r]) - want).abs() / scale.max(1e-30);
                let bound = if rounded && kind != QuantKind::F16 {
                    1e-5 + 1.01 * rounding_bound(&dq, xs) / scale.max(1e-30)
                } else {
                    1e-5
                };
                assert!(
                    err <= bound,
                    "{} check failed: error {err:.2e}",
                    kind.name()
                );
            }
        }
    }
    if rounded {
        println!(
            "check: every type's product agrees with the f64 reference (≤ 1e-5 of Σ|w·x|, \
             and for the products on 8-bit activations what rounding them can move)"
        );
    } else {
        println!("check: every type's product agrees with the f64 reference (≤ 1e-5 of Σ|w·x|)");
    }
}

fn main() {
    let options = VulkanOptions {
        validation: Some(false),
        bounds_checks: Some(false),
        ..VulkanOptions::from_env()
    };
    let mut backend = match VulkanBackend::new(&options) {
        Ok(b) => b,
        Err(e) => {
            println!("no Vulkan device: {e}");
            return;
        }
    };
    let cpu_device = backend.info().kind == DeviceKind::Cpu;
    println!("device: {}", backend.info());
    let mut rng = Rng::new(0x0B5E_4C11);
    check(&mut backend, &mut rng);

    let copy = backend
        .copy_bandwidth(if cpu_device { 256 << 20 } else { 2 << 30 }, 5)
        .expect("copy bandwidth");
    println!(
        "copy bandwidth: {:.1} GB/s (read + write, vkCmdCopyBuffer)",
        copy / 1e9
    );
    let (kernel_copy, kernel_read) = backend
        .kernel_bandwidth(if cpu_device { 64 << 20 } else { 1 << 30 }, 5)
        .expect("kernel bandwidth");
    println!(
        "kernel bandwidth: copy {:.1} GB/s (read + write), read {:.1} GB/s",
        kernel_copy / 1e9,
        kernel_read / 1e9
    );
    // Decode figures are shares of the better copy.
    let copy = copy.max(kernel_copy);
    // The plain decode product beside the GPU one, where they differ; or,
    // with PAGODA_BENCH_MATVEC_SHAPES (a comma list such as `4,8s,4sm`),
    // the GPU product in each of those specialisations instead, each first
    // checked against the reference, and the prefill section left out.
    let sweep: Vec<MatvecShape> = std::env::var("PAGODA_BENCH_MATVEC_SHAPES")
        .map(|v| v.split(',').filter_map(MatvecShape::parse).collect())
        .unwrap_or_default();
    let mut others: Vec<(String, VulkanBackend)> = Vec::new();
    if backend.info().matvec_batch > 0 {
        if sweep.is_empty() {
            let plain = VulkanOptions {
                matvec_batch: Some(0),
                ..options.clone()
            };
            others.extend(VulkanBackend::new(&plain).ok().map(|b| ("plain".into(), b)));
            // The GPU product on the other activations: 8-bit in integer
            // dot products, or f32, whichever the default is not.
            if backend.info().integer_dot.is_some() {
                let flipped = VulkanOptions {
                    integer_dot: Some(!backend.info().use_integer_dot),
                    ..options.clone()
                };
                if let Ok(mut b) = VulkanBackend::new(&flipped) {
                    check(&mut b, &mut rng);
                    let label = if b.info().use_integer_dot {
                        "8-bit acts"
                    } else {
                        "f32 acts"
                    };
                    others.push((label.into(), b));
                }
            }
        }
        for &shape in &sweep {
            let with = VulkanOptions {
                matvec_shape: Some(shape),
                ..options.clone()
            };
            if let Ok(mut b) = VulkanBackend::new(&with) {
                check(&mut b, &mut rng);
                others.push((format!("shape {shape}"), b));
            }
        }
    }
    dispatch_cost(&mut backend);

    let (hidden, kv, ffn, shape) = if cpu_device {
        (
            1024usize,
            256usize,
            2816usize,
            "small (hidden 1024, FFN 2816)",
        )
    } else {
        (4096, 1024, 14336, "Llama 3 8B")
    };
    let (warm, timed) = if cpu_device { (1, 3) } else { (2, 10) };
    // (rows, cols) of q, k, v, o, gate, up, down.
    let mats = [
        (hidden, hidden),
        (kv, hidden),
        (kv, hidden),
        (hidden, hidden),
        (ffn, hidden),
        (ffn, hidden),
        (hidden, ffn),
    ];
    let batches: &[usize] = if sweep.is_empty() {
        &[1, 16, 32]
    } else {
        &[1, 16]
    };
    // Batch-1 time of Q4_0 and Q4_K per label, for the sweep's choice.
    let mut q4_nanos: Vec<(String, f64)> = Vec::new();
    println!("\n{shape} layer: 7 products in one submission, device time (median of {timed})");
    println!(
        "{:<6} {:<10} {:>5} {:>10} {:>12} {:>10} {:>8}",
        "type", "kernels", "batch", "MiB", "µs/layer", "GB/s", "of copy"
    );
    for kind in KINDS {
        let mut weights = Vec::new();
        let mut offsets = Vec::new();
        for &(rows, cols) in &mats {
            offsets.push(weights.len() as u64);
            weights.extend(random_weights(&mut rng, kind, rows, cols));
            weights.resize(weights.len().next_multiple_of(256), 0);
        }
        let mut runs: Vec<(&str, &mut VulkanBackend)> = vec![("default", &mut backend)];
        for (label, b) in others.iter_mut() {
            // F16 has no GPU decode product to vary.
            if kind == QuantKind::F16 && (label.starts_with("shape") || label.ends_with("acts")) {
                continue;
            }
            runs.push((label.as_str(), b));
        }
        for (label, backend) in runs {
            let resident = match backend.upload_weights(&weights) {
                Ok(r) => r,
                Err(e) => {
                    println!("{:<6} skipped: {e}", kind.name());
                    continue;
                }
            };
            for &batch in batches {
                let Some(ns) = layer_nanos(
                    backend,
                    &resident,
                    kind,
                    &mats,
                    &offsets,
                    batch,
                    &mut rng,
                    (warm, timed),
                ) else {
                    println!("{:<6} no timestamps on this device", kind.name());
                    continue;
                };
                let bytes = weights.len() as f64;
                let rate = bytes / (ns * 1e-9);
                println!(
                    "{:<6} {:<10} {:>5} {:>10.1} {:>12.1} {:>10.1} {:>7.0}%",
                    kind.name(),
                    label,
                    batch,
                    bytes / (1u64 << 20) as f64,
                    ns / 1e3,
                    rate / 1e9,
                    100.0 * rate / copy
                );
                // The sweep compares its shapes (the default's own run,
                // timed first on a device perhaps still clocking up, apart).
                if batch == 1
                    && label != "default"
                    && matches!(kind, QuantKind::Q4_0 | QuantKind::Q4_K)
                {
                    match q4_nanos.iter_mut().find(|(l, _)| l == label) {
                        Some((_, t)) => *t += ns,
                        None => q4_nanos.push((label.to_string(), ns)),
                    }
                }
            }
        }
    }
    if !sweep.is_empty() {
        let best = q4_nanos
            .iter()
            .filter(|(l, _)| l.starts_with("shape "))
            .min_by(|a, b| a.1.total_cmp(&b.1));
        if let Some((label, ns)) = best {
            println!(
                "fastest at batch 1 on Q4_0 + Q4_K: {} ({:.1} µs for the two layers)",
                label.trim_start_matches("shape "),
                ns / 1e3
            );
        }
        return;
    }
    drop(others);
    prefill(backend, options, &mats, cpu_device, (warm, timed), &mut rng);
}

/// Device time of one program of the layer's products at `batch`
/// (median of `timed` after `warm`), if the device has timestamps.
#[allow(clippy::too_many_arguments)]
fn layer_nanos(
    backend: &mut VulkanBackend,
    resident: &VulkanWeights,
    kind: QuantKind,
    mats: &[(usize, usize)],
    offsets: &[u64],
    batch: usize,
    rng: &mut Rng,
    (warm, timed): (usize, usize),
) -> Option<f64> {
    let width = mats.iter().map(|&(r, c)| r.max(c)).max().unwrap_or(0);
    let mut act: Vec<f32> = (0..2 * batch * width).map(|_| rng.value()).collect();
    let ops: Vec<Op> = mats
        .iter()
        .zip(offsets)
        .map(|(&(rows, cols), &at)| Op::Matmul {
            kind,
            weights: at,
            rows: rows as u32,
            cols: cols as u32,
            batch: batch as u32,
            x: 0,
            x_stride: width as u32,
            y: (batch * width) as u32,
            y_stride: width as u32,
            accumulate: false,
        })
        .collect();
    // At least `warm` programs and a fifth of a second first, so a GPU
    // has raised its clocks.
    let started = std::time::Instant::now();
    let mut warmed = 0;
    while warmed < warm || started.elapsed().as_secs_f64() < 0.2 {
        backend
            .run_ops_on(resident, &mut act, &mut [], &ops)
            .expect("layer program runs");
        warmed += 1;
    }
    let mut times = Vec::new();
    for _ in 0..timed {
        backend
            .run_ops_on(resident, &mut act, &mut [], &ops)
            .expect("layer program runs");
        times.extend(backend.last_program_nanos());
    }
    (!times.is_empty()).then(|| median(times))
}

/// The layer's products at a prefill batch, GFLOP/s through each prefill
/// kernel the device has: the f32 tiles, and cooperative matrices.
fn prefill(
    backend: VulkanBackend,
    options: VulkanOptions,
    mats: &[(usize, usize)],
    cpu_device: bool,
    runs: (usize, usize),
    rng: &mut Rng,
) {
    let batch = if cpu_device { 64 } else { 512 };
    let flops: f64 = mats
        .iter()
        .map(|&(r, c)| 2.0 * (r * c * batch) as f64)
        .sum();
    // The backend's own prefill kernel first, then (where that is the
    // cooperative one) the f32 tiles on a second backend.
    let shape = backend
        .info()
        .cooperative_matrix
        .filter(|_| backend.info().use_coopmat);
    println!(
        "\nthe layer's products at {batch} rows (prefill), device time (median of {})",
        runs.1
    );
    println!(
        "{:<6} {:<22} {:>12} {:>10}",
        "type", "kernel", "µs/layer", "GFLOP/s"
    );
    let tiles = "tiles, f32".to_string();
    let mut backends = match shape {
        Some(s) => vec![(backend, format!("cooperative {}x{}x{}", s.m, s.n, s.k))],
        None => vec![(backend, tiles.clone())],
    };
    if shape.is_some() {
        let tiled = VulkanOptions {
            coopmat: Some(false),
            ..options
        };
        match VulkanBackend::new(&tiled) {
            Ok(b) => backends.push((b, tiles)),
            Err(e) => println!("no second backend: {e}"),
        }
    }
    for kind in [QuantKind::Q4_0, QuantKind::Q4_K] {
        let mut weights = Vec::new();
        let mut offsets = Vec::new();
        for &(rows, cols) in mats {
            offsets.push(weights.len() as u64);
            weights.extend(random_weights(rng, kind, rows, cols));
            weights.resize(weights.len().next_multiple_of(256), 0);
        }
        for (backend, label) in &mut backends {
            let resident = backend.upload_weights(&weights).expect("weights fit");
            match layer_nanos(backend, &resident, kind, mats, &offsets, batch, rng, runs) {
                Some(ns) => println!(
                    "{:<6} {:<22} {:>12.1} {:>10.1}",
                    kind.name(),
                    label,
                    ns / 1e3,
                    flops / ns
                ),
                None => println!("{:<6} no timestamps on this device", kind.name()),
            }
        }
    }
}

/// Device time per dispatch of a chain of small dependent kernels (256
/// adds of 4,096 elements, a barrier between each): what a step pays per
/// dispatch beyond its work.
fn dispatch_cost(backend: &mut VulkanBackend) {
    let n = 4096u32;
    let chain: Vec<Op> = (0..256)
        .map(|_| Op::Add {
            cols: n,
            batch: 1,
            x: 0,
            x_stride: n,
            y: n,
            y_stride: n,
        })
        .collect();
    let Ok(weights) = backend.upload_weights(&[0u8; 256]) else {
        return;
    };
    let mut act = vec![0f32; 2 * n as usize];
    let mut times = Vec::new();
    for _ in 0..12 {
        if backend
            .run_ops_on(&weights, &mut act, &mut [], &chain)
            .is_err()
        {
            return;
        }
        times.extend(backend.last_program_nanos());
    }
    if !times.is_empty() {
        println!(
            "dispatch + barrier: {:.2} µs each (256 dependent adds of {n} elements, median of {})",
            median(times) / 256e3,
            12
        );
    }
}
