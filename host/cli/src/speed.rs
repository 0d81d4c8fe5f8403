//! `pagoda bench --suite speed`: a model's CPU speed beside this machine's
//! limits, both measured in the same run. Decode at batch 1 is bound by the
//! bytes it reads (weights once per token, plus the sequence's KV), so it is
//! reported as a share of the read bandwidth; prefill is bound by
//! arithmetic, so as a share of the f32 FMA peak. Then batching (16
//! sequences after a shared prompt, against batch 1), the time from
//! `pagoda run` starting to its first token, and its peak resident memory
//! against the file, the KV pool and 64 MiB.
//!
//! On a backend that runs whole steps on a device (`--backend vulkan`), the
//! decode figures are shares of the device's copy bandwidth instead, and
//! each phase's last step reports its kernel dispatches and device time.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use pagoda_engine::model::{Model, SamplingParams};
use pagoda_engine::probe::{fma_peak_gflops, read_bandwidth, ReadBandwidth};
use pagoda_engine::{
    DeviceProgram, Engine, EngineConfig, EngineStorage, Event, GenRequest, Priority,
    SchedulerConfig, StepBackend, WithBackend,
};
use serde::Serialize;

use crate::args::{ActivationsArg, BackendKind, BenchArgs, WeightArgs, WeightsArg};
use crate::error::CliError;

/// Bytes the bandwidth probe reads per pass: well past every cache.
const PROBE_BYTES: usize = 1 << 30;
/// Seconds a device decodes untimed, after a first step that builds its
/// pipelines, before the suite's first timed run.
const DEVICE_WARM_UP_S: f64 = 2.0;

/// Every figure of the suite, as `--json` writes it.
#[derive(Debug, Serialize)]
pub(crate) struct SpeedReport {
    threads: usize,
    /// The CPU kernels the products ran (`Model::kernels`), or the device.
    kernels: String,
    read_bandwidth_sum_gib_s: f64,
    read_bandwidth_xor_gib_s: f64,
    fma_peak_gflops: f64,
    weight_bytes: u64,
    kv_bytes_per_token: u64,
    decode: Vec<DecodeFigure>,
    /// With sliding-window layers: decode at the deepest context as the
    /// attention cost per key read from 8 to 512 tokens predicts it.
    deep_decode_predicted_tokens_per_s: Option<f64>,
    prefill_512_tokens_per_s: f64,
    /// `None` on a device, where the host's FMA peak says nothing.
    prefill_share_of_fma_peak: Option<f64>,
    /// Whether the prefill's products were integer ones (8-bit
    /// activations): then the share of the f32 peak can pass 100%.
    prefill_integer_products: bool,
    batch_16_tokens_per_s: f64,
    batch_16_over_batch_1: f64,
    batch_16_with_prefill_tokens_per_s: f64,
    run_to_first_token_s: Option<f64>,
    run_peak_resident_bytes: Option<u64>,
    run_resident_limit_bytes: Option<u64>,
    /// The device's copy bandwidth (read + written), the decode baseline
    /// when whole steps run on a device.
    device_copy_bandwidth_gib_s: Option<f64>,
    /// Each phase's last step on the device.
    device_steps: Vec<DeviceStep>,
}

/// One step on the device: what it dispatched and how long it took there.
#[derive(Debug, Serialize)]
struct DeviceStep {
    phase: String,
    dispatches: usize,
    barriers: usize,
    device_ms: Option<f64>,
    /// The backend's step call on the host: whole, recording, submission
    /// to completion.
    host_ms: Option<(f64, f64, f64)>,
    /// Device time per kernel, when the step was profiled
    /// (`PAGODA_VULKAN_PROFILE=1`).
    kernels: Vec<KernelShare>,
}

/// One kernel's part of a profiled device step.
#[derive(Debug, Serialize)]
struct KernelShare {
    kernel: &'static str,
    dispatches: usize,
    device_us: f64,
    /// Weight bytes read per second, for the matrix products.
    weight_gb_s: Option<f64>,
}

/// Decode at batch 1 at one context depth.
#[derive(Debug, Serialize)]
struct DecodeFigure {
    context: u32,
    tokens_per_s: f64,
    /// (weight bytes + KV bytes read per token) × tokens/s; a windowed
    /// layer reads only its window.
    read_gib_s: f64,
    share_of_bandwidth: f64,
    /// KV bytes the pool held while the sequence decoded (referenced pages
    /// × bytes per page), and what caching every layer in full would hold
    /// at the context decoding ended at.
    kv_held_bytes: u64,
    kv_full_bytes: u64,
}

/// Runs the suite on `model` (loaded from `file`, if any) and prints it.
pub(crate) fn speed(args: &BenchArgs, model: &Model, file: Option<&Path>) -> Result<(), CliError> {
    let threads = match args.threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    };
    if !args.quiet {
        eprintln!(
            "pagoda bench --suite speed: probing memory and FMA throughput on {threads} threads"
        );
    }
    let bandwidth = read_bandwidth(PROBE_BYTES, threads, 3);
    let fma = fma_peak_gflops(threads);

    let config = EngineConfig {
        kv_pages: 512,
        kv_dtype: args.kv_dtype,
        scheduler: SchedulerConfig {
            max_batch: 32,
            token_budget: args.token_budget.max(512),
            ..SchedulerConfig::default()
        },
        ..EngineConfig::default()
    };
    if !args.quiet {
        let weights = if model.is_quantized() {
            match args.weights.activations {
                ActivationsArg::Int8 => "quantized weights, 8-bit activations",
                ActivationsArg::Int8Decode => {
                    "quantized weights, 8-bit activations on decode steps"
                }
                ActivationsArg::F32 => "quantized weights, f32 activations",
            }
        } else {
            "dense f32 weights"
        };
        eprintln!("pagoda bench --suite speed: decode, prefill and batching runs ({weights})");
    }
    let kernels = args.backend.kernels(model);
    if !args.quiet {
        eprintln!("kernels: {kernels}");
    }
    let job = SpeedJob {
        model,
        config: &config,
        seed: args.seed,
        depth: args.speed_depth,
    };
    let backend = args.backend.choice(args.threads);
    let runs = backend.open(job).map_err(|error| CliError::Backend {
        name: backend.name(),
        error,
    })??;

    let weight_bytes = model.weight_bytes();
    let geometry = model.kv_geometry(args.kv_dtype).map_err(CliError::Model)?;
    let kv_bytes_per_token = geometry.bytes_per_token();
    let layers = u64::from(model.cache_layers().max(1));
    let windows = model.layer_windows();
    let device_gib_s = runs.device_copy.map(|b| b / f64::from(1u32 << 30));
    let baseline_gib_s = device_gib_s.unwrap_or(bandwidth.gib_s());
    let decode: Vec<DecodeFigure> = runs
        .decode
        .iter()
        .map(|&(context, tokens_per_s, held_layer_pages, end)| {
            // Keys a layer reads: its window, or the whole context.
            let layer_tokens: u64 = windows
                .iter()
                .map(|&w| u64::from(if w == 0 { context } else { context.min(w) }))
                .sum();
            let bytes = weight_bytes + layer_tokens * kv_bytes_per_token / layers;
            let read_gib_s = bytes as f64 * tokens_per_s / f64::from(1u32 << 30);
            let page_layer_bytes = geometry.bytes_per_page() / layers;
            DecodeFigure {
                context,
                tokens_per_s,
                read_gib_s,
                share_of_bandwidth: read_gib_s / baseline_gib_s,
                kv_held_bytes: held_layer_pages * page_layer_bytes,
                kv_full_bytes: geometry.bytes_for_tokens(u64::from(end)),
            }
        })
        .collect();
    let deep_decode_predicted_tokens_per_s = predict_deep_decode(&decode, &windows);
    // A mixture of experts' prefill multiplies by the experts each row
    // takes only.
    let params = model.active_parameters() as f64;
    let integer_prefill = model.is_quantized() && args.weights.activations == ActivationsArg::Int8;
    let prefill_gflops = 2.0 * params * runs.prefill_512 / 1e9;
    let batch_1 = decode.first().map_or(0.0, |d| d.tokens_per_s);

    let (run_s, rss, limit) = match file {
        Some(path) => {
            let (seconds, rss, kv) = time_run(path, &args.weights, args.backend)?;
            let file_bytes = std::fs::metadata(path).map_or(0, |m| m.len());
            (Some(seconds), rss, Some(file_bytes + kv + (64 << 20)))
        }
        None => (None, None, None),
    };
    let report = SpeedReport {
        threads,
        kernels,
        read_bandwidth_sum_gib_s: bandwidth.sum_gib_s,
        read_bandwidth_xor_gib_s: bandwidth.xor_gib_s,
        fma_peak_gflops: fma,
        weight_bytes,
        kv_bytes_per_token,
        decode,
        deep_decode_predicted_tokens_per_s,
        prefill_512_tokens_per_s: runs.prefill_512,
        prefill_share_of_fma_peak: device_gib_s.is_none().then(|| prefill_gflops / fma),
        prefill_integer_products: integer_prefill,
        batch_16_tokens_per_s: runs.batch_16,
        batch_16_over_batch_1: runs.batch_16 / batch_1,
        batch_16_with_prefill_tokens_per_s: runs.batch_16_whole,
        run_to_first_token_s: run_s,
        run_peak_resident_bytes: rss,
        run_resident_limit_bytes: limit,
        device_copy_bandwidth_gib_s: device_gib_s,
        device_steps: runs.device_steps,
    };
    print!("{}", table(&report, &bandwidth));
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&report).map_err(CliError::Json)?;
        crate::write(path, text)?;
    }
    Ok(())
}

/// The report as a table: figure, value, what it is compared with, target.
fn table(r: &SpeedReport, bw: &ReadBandwidth) -> String {
    let mut rows: Vec<[String; 4]> = vec![
        [
            "read bandwidth (sum / xor loop)".into(),
            format!(
                "{:.1} / {:.1} GiB/s",
                r.read_bandwidth_sum_gib_s, r.read_bandwidth_xor_gib_s
            ),
            if bw.consistent() {
                "loops agree".into()
            } else {
                "LOOPS DISAGREE: distrust".into()
            },
            String::new(),
        ],
        [
            "f32 FMA peak".into(),
            format!("{:.1} GFLOP/s", r.fma_peak_gflops),
            format!("{} threads", r.threads),
            String::new(),
        ],
    ];
    if let Some(gib_s) = r.device_copy_bandwidth_gib_s {
        rows.push([
            "device copy bandwidth".into(),
            format!("{gib_s:.1} GiB/s"),
            "read + written, the better of vkCmdCopyBuffer and a copy kernel".into(),
            String::new(),
        ]);
    }
    let (baseline, decode_target) = match r.device_copy_bandwidth_gib_s {
        Some(_) => ("device copy bandwidth", "≥ 70%"),
        None => ("read bandwidth", "≥ 50%"),
    };
    for d in &r.decode {
        rows.push([
            format!("decode, batch 1, context {}", d.context),
            format!(
                "{:.1} tok/s = {:.2} GiB/s read",
                d.tokens_per_s, d.read_gib_s
            ),
            format!("{:.0}% of {baseline}", 100.0 * d.share_of_bandwidth),
            decode_target.into(),
        ]);
        if d.kv_held_bytes < d.kv_full_bytes {
            // Sliding-window layers gave back what left their window.
            rows.push([
                "  KV held while decoding".into(),
                format!("{:.1} MiB", d.kv_held_bytes as f64 / f64::from(1u32 << 20)),
                format!(
                    "{:.0}% of {:.1} MiB for every layer in full",
                    100.0 * d.kv_held_bytes as f64 / d.kv_full_bytes as f64,
                    d.kv_full_bytes as f64 / f64::from(1u32 << 20)
                ),
                String::new(),
            ]);
        }
    }
    if let (Some(predicted), Some(deep)) = (r.deep_decode_predicted_tokens_per_s, r.decode.last()) {
        rows.push([
            format!("  context {}, as keys read predict", deep.context),
            format!("{predicted:.1} tok/s"),
            format!(
                "measured {:.2}× (each key costing what it did from 8 to 512)",
                deep.tokens_per_s / predicted
            ),
            "≥ 0.9×".into(),
        ]);
    }
    rows.push(match r.prefill_share_of_fma_peak {
        Some(share) => [
            "prefill, 512 tokens".into(),
            format!("{:.1} tok/s", r.prefill_512_tokens_per_s),
            if r.prefill_integer_products {
                format!("{:.0}% of f32 FMA peak, int8", 100.0 * share)
            } else {
                format!("{:.0}% of FMA peak", 100.0 * share)
            },
            "≥ 40%".into(),
        ],
        None => [
            "prefill, 512 tokens".into(),
            format!("{:.1} tok/s", r.prefill_512_tokens_per_s),
            "on the device".into(),
            String::new(),
        ],
    });
    rows.push([
        "16 sequences decoding after a shared 128-token prompt".into(),
        format!("{:.1} tok/s", r.batch_16_tokens_per_s),
        format!("{:.1}× batch 1", r.batch_16_over_batch_1),
        "≥ 3×".into(),
    ]);
    rows.push([
        "  the same, their own 8-token prefills included".into(),
        format!("{:.1} tok/s", r.batch_16_with_prefill_tokens_per_s),
        format!(
            "{:.1}× batch 1",
            r.batch_16_with_prefill_tokens_per_s
                / r.decode.first().map_or(f64::NAN, |d| d.tokens_per_s)
        ),
        String::new(),
    ]);
    for step in &r.device_steps {
        rows.push([
            format!("device step: {}", step.phase),
            format!("{} dispatches, {} barriers", step.dispatches, step.barriers),
            match step.device_ms {
                Some(ms) => format!(
                    "{ms:.2} ms on the device = {:.1} µs per dispatch",
                    1e3 * ms / step.dispatches.max(1) as f64
                ),
                None => "no GPU timestamps".into(),
            },
            String::new(),
        ]);
        if let Some((whole, recording, waiting)) = step.host_ms {
            rows.push([
                "  its call on the host".into(),
                format!("{whole:.2} ms"),
                format!("recording {recording:.2} ms, submitted to done {waiting:.2} ms"),
                String::new(),
            ]);
        }
        let profiled: f64 = step.kernels.iter().map(|k| k.device_us).sum();
        for k in &step.kernels {
            rows.push([
                format!("  {} ×{}", k.kernel, k.dispatches),
                format!("{:.1} µs", k.device_us),
                match k.weight_gb_s {
                    Some(gb) => format!(
                        "{:.0}% of the profiled step, weights at {gb:.1} GB/s",
                        100.0 * k.device_us / profiled
                    ),
                    None => format!(
                        "{:.0}% of the profiled step",
                        100.0 * k.device_us / profiled
                    ),
                },
                String::new(),
            ]);
        }
    }
    if let Some(s) = r.run_to_first_token_s {
        rows.push([
            "pagoda run: start to first token".into(),
            format!("{s:.2} s"),
            "process start to exit, 1 token".into(),
            "< 0.5 s".into(),
        ]);
    }
    if let (Some(rss), Some(limit)) = (r.run_peak_resident_bytes, r.run_resident_limit_bytes) {
        rows.push([
            "pagoda run: peak resident memory".into(),
            format!("{:.0} MiB", rss as f64 / f64::from(1u32 << 20)),
            format!(
                "file + KV pool + 64 MiB = {:.0} MiB",
                limit as f64 / f64::from(1u32 << 20)
            ),
            // A verdict, not just the target: over the limit is a miss.
            if rss <= limit {
                "≤ the limit: met".into()
            } else {
                format!(
                    "≤ the limit: OVER by {:.0} MiB",
                    (rss - limit) as f64 / f64::from(1u32 << 20)
                )
            },
        ]);
    }
    let widths: Vec<usize> = (0..4)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in &rows {
        for (c, cell) in row.iter().enumerate() {
            let pad = widths[c] - cell.chars().count();
            out.push_str(cell);
            out.push_str(&" ".repeat(pad + 2));
        }
        out.truncate(out.trim_end().len());
        out.push('\n');
    }
    out
}

/// Runs `pagoda run` on one short prompt for one token as a new process
/// (weights and activations as the bench's flags say, on the same
/// backend): seconds from start to exit, its peak resident bytes and KV
/// pool bytes.
fn time_run(
    model: &Path,
    weights: &WeightArgs,
    backend: BackendKind,
) -> Result<(f64, Option<u64>, u64), CliError> {
    let exe = std::env::current_exe().map_err(CliError::Child)?;
    let start = Instant::now();
    let mut command = Command::new(exe);
    command
        .args([
            "run",
            "--quiet",
            "--json",
            "--max-tokens",
            "1",
            "--prompt",
            "Hello",
        ])
        .arg("--model")
        .arg(model)
        .args(match weights.weights {
            WeightsArg::Repacked => ["--weights", "repacked"],
            WeightsArg::Quantized => ["--weights", "quantized"],
            WeightsArg::Dense => ["--weights", "dense"],
        })
        .args(match weights.activations {
            ActivationsArg::Int8Decode => ["--activations", "int8-decode"],
            ActivationsArg::F32 => ["--activations", "f32"],
            ActivationsArg::Int8 => ["--activations", "int8"],
        })
        .args(match backend {
            BackendKind::Cpu => ["--backend", "cpu"],
            BackendKind::Vulkan => ["--backend", "vulkan"],
        });
    if let Some(dir) = &weights.repack_cache {
        command.arg("--repack-cache").arg(dir);
    }
    let out = command.output().map_err(CliError::Child)?;
    let seconds = start.elapsed().as_secs_f64();
    if !out.status.success() {
        return Err(CliError::Failed);
    }
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).map_err(CliError::Json)?;
    let rss = json["memory"]["peak_resident_bytes"].as_u64();
    let kv = json["memory"]["kv_pool_bytes"].as_u64().unwrap_or(0);
    Ok((seconds, rss, kv))
}

/// The engine runs, generic over the backend.
struct SpeedJob<'a> {
    model: &'a Model,
    config: &'a EngineConfig,
    seed: u64,
    /// The deepest decode context asked for (`--speed-depth`).
    depth: usize,
}

/// What the engine runs measured.
struct SpeedRuns {
    /// (context, decode tokens/s, pages × layers per page the pool held
    /// while decoding, the context decoding ended at) at batch 1.
    decode: Vec<(u32, f64, u64, u32)>,
    /// Prompt tokens/s of a 512-token prefill.
    prefill_512: f64,
    /// Output tokens/s of 16 sequences decoding together, from the first
    /// token on (as batch 1 is timed).
    batch_16: f64,
    /// The same run's output tokens/s from submission, the prefill of each
    /// request's own 8 tokens included.
    batch_16_whole: f64,
    /// The device's copy bandwidth in bytes/s, if the backend has a device.
    device_copy: Option<f64>,
    /// Each phase's last step, when whole steps ran on a device.
    device_steps: Vec<DeviceStep>,
}

/// When each request of one `generate` call got its first token and ended.
struct Generated {
    started: Instant,
    first: Vec<Instant>,
    ended: Vec<Instant>,
    tokens: Vec<usize>,
    /// The most pool pages held at the end of a step in which every
    /// request decoded.
    decoding_pages: u32,
}

impl WithBackend for SpeedJob<'_> {
    type Output = Result<SpeedRuns, CliError>;

    fn run<B>(self, backend: B) -> Self::Output
    where
        B: StepBackend,
        B::Error: std::error::Error + Send + Sync + 'static,
    {
        let mut storage = EngineStorage::for_model(self.config, self.model, B::KV_GROUPS);
        // Layers each pool page holds.
        let per_page = u64::from(
            storage
                .layout()
                .per_group()
                .unwrap_or(self.model.cache_layers()),
        );
        let mut engine = Engine::new(self.model, backend, self.config, &mut storage)
            .map_err(|e| CliError::Engine(Box::new(e)))?;
        let device_copy = engine.device_copy_bandwidth();
        let mut device_steps = Vec::new();
        let mut record = |phase: String, step: Option<DeviceProgram>| {
            if let Some(p) = step {
                device_steps.push(DeviceStep {
                    phase,
                    dispatches: p.dispatches,
                    barriers: p.barriers,
                    device_ms: p.device_seconds.map(|s| s * 1e3),
                    host_ms: p.host_seconds.map(|(a, b, c)| (a * 1e3, b * 1e3, c * 1e3)),
                    kernels: p
                        .profile
                        .iter()
                        .map(|k| KernelShare {
                            kernel: k.kernel,
                            dispatches: k.dispatches,
                            device_us: k.seconds * 1e6,
                            weight_gb_s: (k.weight_bytes > 0 && k.seconds > 0.0)
                                .then(|| k.weight_bytes as f64 / k.seconds * 1e-9),
                        })
                        .collect(),
                });
            }
        };
        let vocab = self.model.config().vocab;
        let mut rng = fastrand::Rng::with_seed(self.seed);
        let mut tokens = |n: usize| -> Vec<u32> { (0..n).map(|_| rng.u32(0..vocab)).collect() };
        // A GPU builds its pipelines at the first step (seconds on a fresh
        // machine, the device idle meanwhile) and raises its clocks only
        // after a second or so of work (an H200 took 1.5 s from 345 to
        // 1,980 MHz): there the first timed decode of an 8B model ran at
        // 0.62x the speed of the next. So a device first decodes untimed,
        // as llama-bench's warm-up run does.
        if device_copy.is_some() {
            generate(&mut engine, vec![tokens(8)], 2)?;
            let warm_from = Instant::now();
            while warm_from.elapsed().as_secs_f64() < DEVICE_WARM_UP_S {
                generate(&mut engine, vec![tokens(8)], 32)?;
            }
        }
        let mut decode = Vec::new();
        // 4,096 tokens deep (`--speed-depth`), or as deep as the model's
        // context allows.
        let deep = self.depth.max(8).min(
            (self.model.config().max_context as usize)
                .saturating_sub(64)
                .max(8),
        );
        // 512 deep too: a sliding-window model's local layers (Gemma 3's
        // window) read as much there as at 4,096.
        let mut depths = vec![(8usize, 64u32), (512.min(deep), 64), (deep, 64)];
        depths.dedup_by_key(|d| d.0);
        for (context, new) in depths {
            let prompt = tokens(context);
            let g = generate(&mut engine, vec![prompt], new)?;
            let span = g.ended[0].duration_since(g.first[0]).as_secs_f64();
            record(
                format!("decode, batch 1, context {context}"),
                engine.last_device_step(),
            );
            decode.push((
                context as u32,
                (g.tokens[0].saturating_sub(1)) as f64 / span,
                u64::from(g.decoding_pages) * per_page,
                context as u32 + new,
            ));
        }
        let g = generate(&mut engine, vec![tokens(512)], 1)?;
        let prefill_512 = 512.0 / g.first[0].duration_since(g.started).as_secs_f64();
        record("prefill, 512 tokens".into(), engine.last_device_step());
        // The shared prompt is computed once and cached; then 16 requests
        // that extend it decode together.
        let shared = tokens(128);
        generate(&mut engine, vec![shared.clone()], 1)?;
        let prompts: Vec<Vec<u32>> = (0..16)
            .map(|_| {
                let mut p = shared.clone();
                p.extend(tokens(8));
                p
            })
            .collect();
        let g = generate(&mut engine, prompts, 64)?;
        let last = g.ended.iter().max().copied().unwrap_or(g.started);
        let total: usize = g.tokens.iter().sum();
        let batch_16_whole = total as f64 / last.duration_since(g.started).as_secs_f64();
        // As at batch 1, decoding starts at the first token (each
        // request's first token comes out of its prefill step).
        let first = g.first.iter().min().copied().unwrap_or(g.started);
        let decoded = total.saturating_sub(g.tokens.len());
        let batch_16 = decoded as f64 / last.duration_since(first).as_secs_f64();
        record("decode, batch 16".into(), engine.last_device_step());
        Ok(SpeedRuns {
            decode,
            prefill_512,
            batch_16,
            batch_16_whole,
            device_copy,
            device_steps,
        })
    }
}

/// Keys all layers read for one token at `context`: a windowed layer reads
/// its window at most.
fn layer_keys(windows: &[u32], context: u32) -> f64 {
    windows
        .iter()
        .map(|&w| f64::from(if w == 0 { context } else { context.min(w) }))
        .sum()
}

/// For a model with sliding-window layers: the deepest decode's tokens/s
/// if each key read cost what the keys added from the first depth to the
/// second did. Deeper, only the global layers read more keys; a figure
/// near the measured one says the window holds (the local layers read no
/// more) and the global layers explain the rest.
fn predict_deep_decode(decode: &[DecodeFigure], windows: &[u32]) -> Option<f64> {
    let [first, mid, deep] = decode else {
        return None;
    };
    if windows.iter().all(|&w| w == 0) {
        return None;
    }
    let step = |d: &DecodeFigure| 1.0 / d.tokens_per_s;
    let keys = |d: &DecodeFigure| layer_keys(windows, d.context);
    let per_key = (step(mid) - step(first)) / (keys(mid) - keys(first));
    let predicted = step(mid) + per_key * (keys(deep) - keys(mid));
    (predicted > 0.0).then(|| 1.0 / predicted)
}

/// Submits `prompts` together, greedy, `max_new` tokens each, and steps
/// until all end.
fn generate<B>(
    engine: &mut Engine<'_, B>,
    prompts: Vec<Vec<u32>>,
    max_new: u32,
) -> Result<Generated, CliError>
where
    B: StepBackend,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    let started = Instant::now();
    let n = prompts.len();
    let mut handles = Vec::with_capacity(n);
    for (i, prompt) in prompts.into_iter().enumerate() {
        let request = GenRequest {
            tag: i as u64,
            prompt,
            max_new_tokens: max_new,
            sampling: SamplingParams::GREEDY,
            seed: i as u64,
            stop_tokens: Vec::new(),
        };
        let handle = engine
            .submit(request, Priority::Normal, engine.now())
            .map_err(CliError::Rejected)?;
        handles.push(handle);
    }
    let mut g = Generated {
        started,
        first: vec![started; n],
        ended: vec![started; n],
        tokens: vec![0; n],
        decoding_pages: 0,
    };
    while !engine.is_idle() {
        let report = engine.step().map_err(|e| CliError::Engine(Box::new(e)))?;
        if report.plan.prefill_tokens == 0 && engine.running() == n as u32 {
            let held = engine.pool_stats().referenced_pages;
            g.decoding_pages = g.decoding_pages.max(held);
        }
        let now = Instant::now();
        for (i, handle) in handles.iter().enumerate() {
            while let Some(event) = handle.try_recv() {
                match event {
                    Event::Token { .. } => {
                        if g.tokens[i] == 0 {
                            g.first[i] = now;
                        }
                        g.tokens[i] += 1;
                    }
                    Event::Finished(_) => g.ended[i] = now,
                    Event::PromptLogprobs(_) => {}
                    Event::Rejected(reason) => return Err(CliError::Rejected(reason)),
                    Event::Cancelled | Event::Failed => return Err(CliError::Failed),
                }
            }
        }
    }
    Ok(g)
}
