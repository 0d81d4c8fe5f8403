//! The Vulkan paged-attention benchmark in one command that builds, checks
//! and times, on whatever device Vulkan offers (`PAGODA_VULKAN_DEVICE`
//! picks one):
//!
//! ```text
//! cargo bench -p pagoda-vulkan --bench attention
//! ```
//!
//! 1. **Check**: long decode, prefill and mixed batches against the
//!    conformance suite's f64 reference, before any timing.
//! 2. **Copy bandwidth**: the best of several device-local `vkCmdCopyBuffer`s,
//!    bytes read + written per second: the baseline.
//! 3. **Decode** at contexts 512 to 32k, batch 1 and 32, head dim 64 and 128,
//!    GQA 4 (32 query heads over 8 KV heads), f16 KV: kernel time from GPU
//!    timestamps (median of 10 calls after 2 warm-ups; of 3 after 1 on a CPU
//!    device), K/V bytes read per
//!    second and their share of the copy bandwidth. Cases whose store exceeds
//!    `PAGODA_BENCH_MAX_BYTES` (default 64 MiB on a CPU device, 16 GiB
//!    otherwise) are skipped. The timed stores hold zeros: the kernels' work
//!    does not depend on the values, which the check step covers.
//! 4. **Decode variants**: one long decode case (32k, or 2k on a CPU
//!    device) with every kernel variant the device has (subgroup softmax,
//!    f16 products, each on and off), so one run says which is fastest.
//! 5. **Prefill** of 2,048 tokens (causal), f16 KV: kernel time and TFLOP/s.
//!
//! On a CPU implementation (lavapipe) every case also runs on the CPU
//! backend in the same run, and the ratio of wall times is printed.
//! Timing runs the plain kernels (no bounds checks) without validation.

use std::time::Instant;

use pagoda_conformance::{check_batch, tolerance, Rng};
use pagoda_core::backend::{AttentionShape, Backend, SeqAttention};
use pagoda_core::{KvDtype, KvGeometry, PageId, PAGE_SIZE};
use pagoda_cpu::CpuBackend;
use pagoda_vulkan::{DeviceKind, VulkanBackend, VulkanOptions};

const KV_HEADS: u32 = 8;
const Q_HEADS: u32 = 32;
/// Warm-up and timed calls per case on a GPU; a CPU device (lavapipe) runs
/// `CPU_DEVICE_REPEATS`, or the benchmark would take hours.
const REPEATS: (usize, usize) = (2, 10);
const CPU_DEVICE_REPEATS: (usize, usize) = (1, 3);

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// One timed case: `batch` sequences of `context` tokens, `new` query tokens
/// each.
struct Case {
    head_dim: u32,
    batch: u32,
    context: u32,
    new: u32,
}

struct Timing {
    kernel_ns: f64,
    wall_ns: f64,
}

fn run_case<B: Backend>(
    backend: &mut B,
    case: &Case,
    (warmup, runs): (usize, usize),
    kernel_time: impl Fn(&B) -> f64,
) -> Timing {
    let geometry = KvGeometry::new(1, KV_HEADS, case.head_dim, KvDtype::F16).unwrap();
    let per_seq = case.context.div_ceil(PAGE_SIZE as u32);
    let pages = per_seq * case.batch;
    let mut rng = Rng::new(7);
    // Pages shuffled across the pool, as a running server leaves them.
    let physical: Vec<PageId> = rng
        .permutation(pages)
        .into_iter()
        .map(PageId::from_index)
        .collect();
    let store = backend.create_kv_store(geometry, pages).unwrap();
    let shape = AttentionShape {
        q_heads: Q_HEADS,
        kv_heads: KV_HEADS,
        head_dim: case.head_dim,
        scale: 1.0 / (case.head_dim as f32).sqrt(),
        window: 0,
        softcap: 0.0,
    };
    let batch: Vec<SeqAttention<'_>> = (0..case.batch)
        .map(|s| SeqAttention {
            pages: &physical[(s * per_seq) as usize..((s + 1) * per_seq) as usize],
            context_len: case.context,
            query_start: s * case.new,
            query_len: case.new,
        })
        .collect();
    let rows = (case.batch * case.new) as usize;
    let queries: Vec<f32> = (0..rows * shape.q_row()).map(|_| rng.value()).collect();
    let mut out = vec![0.0f32; queries.len()];
    let (mut kernel, mut wall) = (Vec::new(), Vec::new());
    for i in 0..warmup + runs {
        let start = Instant::now();
        backend
            .attention(&store, 0, shape, &batch, &queries, &mut out)
            .unwrap();
        if i >= warmup {
            wall.push(start.elapsed().as_secs_f64() * 1e9);
            kernel.push(kernel_time(backend));
        }
    }
    Timing {
        kernel_ns: median(kernel),
        wall_ns: median(wall),
    }
}

/// The CPU backend's wall time for the same case, when it runs beside a CPU
/// device.
fn cpu_wall_ns(cpu: &mut Option<CpuBackend>, case: &Case, repeats: (usize, usize)) -> Option<f64> {
    cpu.as_mut()
        .map(|cpu| run_case(cpu, case, repeats, |_| 0.0).wall_ns)
}

fn main() {
    let options = VulkanOptions {
        bounds_checks: Some(false),
        validation: Some(false),
        ..VulkanOptions::from_env()
    };
    let mut gpu = match VulkanBackend::new(&options) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("no Vulkan device to benchmark: {e}");
            return;
        }
    };
    let on_cpu = gpu.info().kind == DeviceKind::Cpu;
    let repeats = if on_cpu { CPU_DEVICE_REPEATS } else { REPEATS };
    println!("device: {}", gpu.info());

    // 1. Check before timing.
    for (dtype, dim) in [
        (KvDtype::F16, 128),
        (KvDtype::F16, 64),
        (KvDtype::F32, 128),
        (KvDtype::Bf16, 256),
    ] {
        let err = check_batch(
            &mut gpu,
            dtype,
            dim,
            4,
            2,
            &[(4097, 1), (700, 64), (17, 5)],
            1,
        );
        assert!(err < tolerance(dtype), "{dtype:?} dim {dim}: error {err}");
        println!(
            "check: {dtype:?} head dim {dim}: max normalised error {err:.2e} (tolerance {:.0e})",
            tolerance(dtype)
        );
    }

    // 2. The baseline.
    let copy_bytes: u64 = if on_cpu { 512 << 20 } else { 2 << 30 };
    let copy = gpu.copy_bandwidth(copy_bytes, 10).unwrap();
    println!("copy bandwidth: {:.1} GB/s (read + written)", copy / 1e9);

    let budget: u64 = std::env::var("PAGODA_BENCH_MAX_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if on_cpu { 64 << 20 } else { 16 << 30 });
    let mut cpu = on_cpu.then(CpuBackend::new);
    let kernel_ns = |b: &VulkanBackend| b.last_timings().iter().map(|t| t.nanos).sum::<f64>();

    // 3. Decode.
    println!();
    println!("decode (f16 KV, GQA 4: {Q_HEADS} query heads over {KV_HEADS} KV heads)");
    println!(
        "{:>4} {:>5} {:>7} {:>11} {:>10} {:>9}{}",
        "dim",
        "batch",
        "context",
        "kernel µs",
        "KV GB/s",
        "of copy",
        if on_cpu {
            "   cpu wall µs  cpu/vulkan wall"
        } else {
            ""
        }
    );
    for head_dim in [64, 128] {
        for batch in [1, 32] {
            for context in [512, 2048, 8192, 32768] {
                let case = Case {
                    head_dim,
                    batch,
                    context,
                    new: 1,
                };
                let geometry = KvGeometry::new(1, KV_HEADS, head_dim, KvDtype::F16).unwrap();
                let store_bytes =
                    u64::from(context.div_ceil(16) * batch) * geometry.bytes_per_page();
                if store_bytes > budget {
                    continue;
                }
                let t = run_case(&mut gpu, &case, repeats, kernel_ns);
                let kv_bytes = u64::from(batch) * u64::from(context) * geometry.bytes_per_token();
                let gbs = kv_bytes as f64 / t.kernel_ns;
                print!(
                    "{head_dim:>4} {batch:>5} {context:>7} {:>11.1} {gbs:>10.1} {:>8.0}%",
                    t.kernel_ns / 1e3,
                    100.0 * gbs * 1e9 / copy
                );
                if let Some(c) = cpu_wall_ns(&mut cpu, &case, repeats) {
                    print!("   {:>11.1}  {:>15.2}", c / 1e3, c / t.wall_ns);
                }
                println!();
            }
        }
    }

    // 4. Every decode variant the device has, on one long case, so that one
    // run on a new device says which the backend should prefer.
    let case = Case {
        head_dim: 128,
        batch: 1,
        context: if on_cpu { 2048 } else { 32768 },
        new: 1,
    };
    let geometry = KvGeometry::new(1, KV_HEADS, case.head_dim, KvDtype::F16).unwrap();
    let kv_bytes = u64::from(case.context) * geometry.bytes_per_token();
    println!();
    println!(
        "decode variants (f16 KV, dim {}, batch 1, context {})",
        case.head_dim, case.context
    );
    let mut seen = Vec::new();
    for (subgroups, float16) in [(true, true), (true, false), (false, true), (false, false)] {
        let variant_options = VulkanOptions {
            subgroups: Some(subgroups),
            float16: Some(float16),
            ..options.clone()
        };
        let Ok(mut variant) = VulkanBackend::new(&variant_options) else {
            continue;
        };
        let used = (variant.info().use_subgroups, variant.info().use_float16);
        if seen.contains(&used) {
            continue;
        }
        seen.push(used);
        let t = run_case(&mut variant, &case, repeats, kernel_ns);
        let gbs = kv_bytes as f64 / t.kernel_ns;
        println!(
            "subgroups {:<5} f16 products {:<5} kernel {:>9.1} µs {gbs:>8.1} GB/s {:>5.0}% of copy",
            used.0,
            used.1,
            t.kernel_ns / 1e3,
            100.0 * gbs * 1e9 / copy
        );
    }

    // 5. Prefill.
    println!();
    println!("prefill (2,048 new tokens, causal, f16 KV, GQA 4)");
    for head_dim in [64, 128] {
        let case = Case {
            head_dim,
            batch: 1,
            context: 2048,
            new: 2048,
        };
        let t = run_case(&mut gpu, &case, repeats, kernel_ns);
        // Q·K and P·V: 2 flops per multiply-add, over the causal triangle.
        let pairs = 2048.0 * 2049.0 / 2.0;
        let flops = 4.0 * pairs * f64::from(Q_HEADS) * f64::from(head_dim);
        print!(
            "head dim {head_dim}: kernel {:.2} ms, {:.2} TFLOP/s",
            t.kernel_ns / 1e6,
            flops / t.kernel_ns / 1e3
        );
        if let Some(c) = cpu_wall_ns(&mut cpu, &case, repeats) {
            print!(
                ", cpu {:.2} ms wall, cpu/vulkan wall {:.2}",
                c / 1e6,
                c / t.wall_ns
            );
        }
        println!();
    }
}
