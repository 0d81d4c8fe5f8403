//! `pagoda`: the host runner's command line. `pagoda bench` runs a workload
//! through the continuous-batching engine under each scheduling policy and
//! reports the figures side by side.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use pagoda_core::scheduler::{Policy, SchedulerConfig, SchedulerPolicy};
use pagoda_core::KvDtype;
use pagoda_cpu::CpuBackend;
use pagoda_host::bench::{run_policy, DriveOptions, PolicyReport};
use pagoda_host::engine::EngineConfig;
use pagoda_host::model::{Model, ModelConfig, SamplingParams, Weights};
use pagoda_host::report::BenchReport;
use pagoda_host::workload::{
    parse_trace, write_trace, Arrivals, LengthDist, WorkloadKind, WorkloadSpec,
};
use pagoda_vulkan::{VulkanBackend, VulkanOptions};

/// Seed of the embedded model's weights: fixed, so every run serves the same
/// model.
const EMBEDDED_WEIGHTS_SEED: u64 = 0x5EED_0F9A_60DA;

#[derive(Parser)]
#[command(
    name = "pagoda",
    version,
    about = "Pagoda: paged KV cache, radix prefix cache and cache-aware continuous batching"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a workload under each policy and compare throughput, latency,
    /// cache reuse, memory and overhead.
    #[command(args_override_self = true)]
    Bench(BenchArgs),
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum BackendKind {
    /// The SIMD CPU backend (pagoda-cpu).
    Cpu,
    /// The Vulkan compute backend (pagoda-vulkan).
    Vulkan,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum DtypeArg {
    F32,
    F16,
    Bf16,
}

#[derive(clap::Args)]
struct BenchArgs {
    /// Prefix structure of the synthetic workload.
    #[arg(long, value_enum, default_value_t = WorkloadKind::FewShot)]
    workload: WorkloadKind,
    /// Requests in the synthetic workload.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    requests: u32,
    /// Tokens of the shared part: few-shot prefix, chat system prompt, tree trunk.
    #[arg(long, default_value_t = 512, value_parser = clap::value_parser!(u32).range(0..=100_000))]
    shared_len: u32,
    /// Sharing groups: few-shot prefixes, conversations, trees.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    groups: u32,
    /// Length of each request's own prompt part: N, uniform:MIN:MAX or lognormal:MEDIAN:SIGMA.
    #[arg(long, default_value = "uniform:32:96")]
    prompt_len: LengthDist,
    /// Output tokens per request: N, uniform:MIN:MAX or lognormal:MEDIAN:SIGMA.
    #[arg(long, default_value = "uniform:16:48")]
    output_len: LengthDist,
    /// Poisson arrivals at this many requests per second (default: all at once, offline).
    #[arg(long)]
    rate: Option<f64>,
    /// Replay a JSON Lines trace instead of a synthetic workload.
    #[arg(long, value_name = "FILE.jsonl")]
    trace: Option<PathBuf>,
    /// Write the trace that was run (synthetic or replayed) as JSON Lines.
    #[arg(long, value_name = "FILE.jsonl")]
    save_trace: Option<PathBuf>,
    /// A policy to run, repeatable: fcfs, or lpm[:KEY=VALUE,...] with keys
    /// cache_weight, fairness_threshold_ms, score (relative|absolute).
    #[arg(long = "policy", value_name = "POLICY", default_values = ["fcfs", "lpm"])]
    policies: Vec<String>,
    /// Attention backend.
    #[arg(long, value_enum, default_value_t = BackendKind::Cpu)]
    backend: BackendKind,
    /// Threads for attention and matrix products (0: one per core).
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// Pages in the KV pool (16 tokens each).
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..=16_000_000))]
    kv_pages: u32,
    /// How the KV cache stores keys and values.
    #[arg(long, value_enum, default_value_t = DtypeArg::F16)]
    kv_dtype: DtypeArg,
    /// Most sequences running at once.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=65_536))]
    max_batch: u32,
    /// Most tokens computed per step (decode plus prefill chunks).
    #[arg(long, default_value_t = 2048, value_parser = clap::value_parser!(u32).range(1..=1_048_576))]
    token_budget: u32,
    /// Admit a request waiting longer than this first (ms); 0 turns fairness off.
    #[arg(long, default_value_t = 2000)]
    fairness_ms: u64,
    /// Sampling temperature (0: greedy).
    #[arg(long, default_value_t = 0.0)]
    temperature: f32,
    /// Sample among the K most likely tokens (0: all).
    #[arg(long, default_value_t = 0)]
    top_k: u32,
    /// Sample from the smallest set of tokens with this much probability.
    #[arg(long, default_value_t = 1.0)]
    top_p: f32,
    /// Share of requests the client cancels at a random moment within a second of arrival.
    #[arg(long, default_value_t = 0.0)]
    cancel_fraction: f64,
    /// Seed of the workload, the samplers and the cancellations.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Write every figure as JSON.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Write an SVG plot: latency distributions and hit rates per policy.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if e.kind() == clap::error::ErrorKind::InvalidSubcommand => {
            eprint!("{e}");
            eprintln!("valid commands: bench");
            return ExitCode::from(2);
        }
        Err(e) => e.exit(),
    };
    let result = match cli.command {
        Command::Bench(args) => bench(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::from(2)
        }
    }
}

fn bench(args: BenchArgs) -> Result<(), String> {
    let policies = args
        .policies
        .iter()
        .map(|p| parse_policy(p))
        .collect::<Result<Vec<_>, _>>()?;
    if !(0.0..=1.0).contains(&args.cancel_fraction) {
        return Err(format!(
            "--cancel-fraction {} must be in 0..=1",
            args.cancel_fraction
        ));
    }
    if let Some(rate) = args.rate {
        if !(rate.is_finite() && rate > 0.0) {
            return Err(format!(
                "--rate {rate} must be a positive number of requests per second"
            ));
        }
    }
    let sampling = SamplingParams {
        temperature: args.temperature,
        top_k: args.top_k,
        top_p: args.top_p,
    };
    sampling.validate().map_err(|e| format!("sampling: {e}"))?;
    if args.threads > 0 {
        // The matrix products' thread pool reads this on first use; keep it
        // to the same count as the attention backend.
        std::env::set_var("MATMUL_NUM_THREADS", args.threads.to_string());
    }
    let model_config = ModelConfig::EMBEDDED;
    let weights =
        Weights::seeded(model_config, EMBEDDED_WEIGHTS_SEED).map_err(|e| e.to_string())?;
    let model = Model::new(weights);

    let (trace, source) = match &args.trace {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read trace {}: {e}", path.display()))?;
            let trace = parse_trace(&text, model_config.vocab).map_err(|errors| {
                let mut m = format!("trace {} has {} bad line(s):", path.display(), errors.len());
                for e in errors.iter().take(20) {
                    m.push_str(&format!("\n  {}:{}: {}", path.display(), e.line, e.message));
                }
                m
            })?;
            if trace.is_empty() {
                return Err(format!("trace {} holds no requests", path.display()));
            }
            (trace, format!("trace {}", path.display()))
        }
        None => {
            let spec = WorkloadSpec {
                kind: args.workload,
                requests: args.requests,
                shared_len: args.shared_len,
                groups: args.groups,
                prompt_len: args.prompt_len,
                output_len: args.output_len,
                arrivals: args.rate.map_or(Arrivals::Offline, Arrivals::Poisson),
                vocab: model_config.vocab,
                seed: args.seed,
            };
            let arrivals = args
                .rate
                .map_or("offline".to_string(), |r| format!("Poisson {r}/s"));
            (
                spec.generate(),
                format!(
                    "{} · {} requests · {arrivals}",
                    args.workload, args.requests
                ),
            )
        }
    };
    if let Some(path) = &args.save_trace {
        std::fs::write(path, write_trace(&trace))
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }

    let scheduler = SchedulerConfig {
        max_batch: args.max_batch,
        token_budget: args.token_budget,
        fairness_threshold_us: (args.fairness_ms > 0)
            .then(|| args.fairness_ms.saturating_mul(1000)),
        ..SchedulerConfig::default()
    };
    scheduler
        .validate()
        .map_err(|e| format!("scheduler: {e}"))?;
    let engine = EngineConfig {
        scheduler,
        policy: policies[0],
        kv_pages: args.kv_pages,
        kv_dtype: match args.kv_dtype {
            DtypeArg::F32 => KvDtype::F32,
            DtypeArg::F16 => KvDtype::F16,
            DtypeArg::Bf16 => KvDtype::Bf16,
        },
        queue_capacity: (trace.len() as u32).max(1),
        scheduler_slots: args.max_batch.saturating_mul(4).max(1024),
    };
    let options = DriveOptions {
        sampling,
        seed: args.seed,
        cancel_fraction: args.cancel_fraction,
        concurrency_mark: args.max_batch.min(256),
    };

    let backend_desc = match args.backend {
        BackendKind::Cpu => {
            let probe = CpuBackend::with_threads(args.threads).map_err(|e| e.to_string())?;
            format!(
                "cpu backend ({:?}, {} threads)",
                probe.isa(),
                probe.threads()
            )
        }
        BackendKind::Vulkan => {
            let probe = VulkanBackend::new(&VulkanOptions::from_env())
                .map_err(|e| format!("--backend vulkan: {e}"))?;
            format!("vulkan backend ({})", probe.info().name)
        }
    };
    let title = format!(
        "pagoda bench · {source} · embedded model ({:.1} M params) · {backend_desc} · {} KV pages · seed {}",
        model_config.parameters() as f64 / 1e6,
        args.kv_pages,
        args.seed
    );
    if !args.quiet {
        eprintln!("{title}");
    }

    let mut reports: Vec<PolicyReport> = Vec::new();
    for policy in &policies {
        let bar = if args.quiet {
            ProgressBar::hidden()
        } else {
            ProgressBar::new(trace.len() as u64)
        };
        bar.set_style(
            ProgressStyle::with_template("{prefix:>6} [{bar:32}] {pos}/{len} requests · {elapsed}")
                .map_err(|e| e.to_string())?
                .progress_chars("=> "),
        );
        bar.set_prefix(policy.name());
        let tick = || bar.inc(1);
        let report = match args.backend {
            BackendKind::Cpu => {
                let backend = CpuBackend::with_threads(args.threads).map_err(|e| e.to_string())?;
                run_policy(&model, backend, &engine, *policy, &trace, &options, tick)
            }
            BackendKind::Vulkan => {
                let backend = VulkanBackend::new(&VulkanOptions::from_env())
                    .map_err(|e| format!("--backend vulkan: {e}"))?;
                run_policy(&model, backend, &engine, *policy, &trace, &options, tick)
            }
        }
        .map_err(|e| format!("{} run: {e}", policy.name()))?;
        bar.finish_and_clear();
        reports.push(report);
    }

    let mut report = BenchReport {
        title,
        settings: serde_json::json!({
            "workload": args.workload.to_string(),
            "requests": trace.len(),
            "shared_len": args.shared_len,
            "groups": args.groups,
            "prompt_len": args.prompt_len.to_string(),
            "output_len": args.output_len.to_string(),
            "rate": args.rate,
            "trace": args.trace.as_ref().map(|p| p.display().to_string()),
            "policies": args.policies,
            "backend": if args.backend == BackendKind::Vulkan { "vulkan" } else { "cpu" },
            "kv_pages": args.kv_pages,
            "kv_dtype": format!("{:?}", engine.kv_dtype),
            "max_batch": args.max_batch,
            "token_budget": args.token_budget,
            "fairness_ms": args.fairness_ms,
            "sampling": sampling,
            "cancel_fraction": args.cancel_fraction,
            "seed": args.seed,
            "model": model_config,
        }),
        policies: reports,
    };
    report.compare_to_fcfs();
    print!("{}", report.table());
    if let Some(path) = &args.json {
        std::fs::write(path, report.json())
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    if let Some(path) = &args.plot {
        std::fs::write(path, report.svg())
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    let leaks: Vec<&str> = report
        .policies
        .iter()
        .filter(|p| !p.leak_free)
        .map(|p| p.policy.as_str())
        .collect();
    if !leaks.is_empty() {
        return Err(format!(
            "pages or requests unaccounted for under {}",
            leaks.join(", ")
        ));
    }
    Ok(())
}

/// `fcfs` or `lpm[:key=value,...]`, with the valid choices in every error.
fn parse_policy(text: &str) -> Result<Policy, String> {
    let (name, params) = text.split_once(':').unwrap_or((text, ""));
    let pairs: Vec<(&str, &str)> = params
        .split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| p.split_once('=').unwrap_or((p, "")))
        .collect();
    Policy::parse(name.trim(), &pairs).map_err(|e| {
        format!(
            "--policy {text}: {e} (valid: fcfs, or lpm with optional \
             :cache_weight=N,fairness_threshold_ms=N,score=relative|absolute)"
        )
    })
}
