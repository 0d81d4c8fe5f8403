//! `pagoda`: the command line over the Pagoda engine. `pagoda bench` runs a workload
//! through the continuous-batching engine under each scheduling policy and
//! reports the figures side by side.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use pagoda_engine::model::{
    Model, ModelConfig, ModelError, SamplingError, SamplingParams, Weights,
};
use pagoda_engine::{
    BackendChoice, BackendOpenError, ConfigError, EngineConfig, KvDtype, Policy, SchedulerConfig,
    SchedulerPolicy,
};
use serde::Serialize;

use crate::bench::{BenchError, DriveOptions, PolicyReport, PolicyRun};
use crate::report::BenchReport;
use crate::workload::{
    parse_trace, write_trace, Arrivals, LengthDist, TraceError, WorkloadKind, WorkloadSpec,
};

mod bench;
mod report;
mod workload;

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

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
enum BackendKind {
    /// The SIMD CPU backend (pagoda-cpu).
    Cpu,
    /// The Vulkan compute backend (pagoda-vulkan).
    Vulkan,
}

/// The bench's options; serialized as the report's settings.
#[derive(clap::Args, Serialize)]
struct BenchArgs {
    /// Prefix structure of the synthetic workload.
    #[arg(long, value_enum, default_value_t = WorkloadKind::FewShot)]
    workload: WorkloadKind,
    /// Requests in the synthetic workload.
    #[serde(skip)]
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
    #[serde(serialize_with = "as_text")]
    prompt_len: LengthDist,
    /// Output tokens per request: N, uniform:MIN:MAX or lognormal:MEDIAN:SIGMA.
    #[arg(long, default_value = "uniform:16:48")]
    #[serde(serialize_with = "as_text")]
    output_len: LengthDist,
    /// Poisson arrivals at this many requests per second (default: all at once, offline).
    #[arg(long)]
    rate: Option<f64>,
    /// Replay a JSON Lines trace instead of a synthetic workload.
    #[arg(long, value_name = "FILE.jsonl")]
    trace: Option<PathBuf>,
    /// Write the trace that was run (synthetic or replayed) as JSON Lines.
    #[arg(long, value_name = "FILE.jsonl")]
    #[serde(skip)]
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
    #[serde(skip)]
    threads: usize,
    /// Pages in the KV pool (16 tokens each).
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..=16_000_000))]
    kv_pages: u32,
    /// How the KV cache stores keys and values: f32, f16 or bf16.
    #[arg(long, default_value = "f16", value_parser = parse_kv_dtype)]
    #[serde(serialize_with = "dtype_debug")]
    kv_dtype: KvDtype,
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
    #[serde(skip)]
    temperature: f32,
    /// Sample among the K most likely tokens (0: all).
    #[arg(long, default_value_t = 0)]
    #[serde(skip)]
    top_k: u32,
    /// Sample from the smallest set of tokens with this much probability.
    #[arg(long, default_value_t = 1.0)]
    #[serde(skip)]
    top_p: f32,
    /// Share of requests the client cancels at a random moment within a second of arrival.
    #[arg(long, default_value_t = 0.0)]
    cancel_fraction: f64,
    /// Seed of the workload, the samplers and the cancellations.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Write every figure as JSON.
    #[arg(long, value_name = "FILE")]
    #[serde(skip)]
    json: Option<PathBuf>,
    /// Write an SVG plot: latency distributions and hit rates per policy.
    #[arg(long, value_name = "FILE.svg")]
    #[serde(skip)]
    plot: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    #[serde(skip)]
    quiet: bool,
}

/// The report's settings: the options as given, plus what they resolved to.
#[derive(Serialize)]
struct Settings<'a> {
    #[serde(flatten)]
    args: &'a BenchArgs,
    /// Requests run (the trace's, when one was replayed).
    requests: usize,
    sampling: SamplingParams,
    model: ModelConfig,
}

fn as_text<S: serde::Serializer>(d: &LengthDist, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(d)
}

fn dtype_debug<S: serde::Serializer>(d: &KvDtype, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&format_args!("{d:?}"))
}

fn parse_kv_dtype(text: &str) -> Result<KvDtype, pagoda_engine::ParseKvDtypeError> {
    text.parse()
}

/// Why `pagoda bench` stopped, each with what the user can do about it.
#[derive(Debug, thiserror::Error)]
enum CliError {
    #[error(
        "--policy {text}: {error} (valid: fcfs, or lpm with optional \
         :cache_weight=N,fairness_threshold_ms=N,score=relative|absolute)"
    )]
    Policy { text: String, error: ConfigError },
    #[error("--cancel-fraction {0} must be in 0..=1")]
    CancelFraction(f64),
    #[error("--rate {0} must be a positive number of requests per second")]
    Rate(f64),
    #[error("sampling: {0}")]
    Sampling(#[from] SamplingError),
    #[error("scheduler: {0}")]
    Scheduler(ConfigError),
    #[error("model: {0}")]
    Model(#[from] ModelError),
    #[error("cannot read trace {}: {source}", path.display())]
    ReadTrace {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}", bad_trace(path, errors))]
    BadTrace {
        path: PathBuf,
        errors: Vec<TraceError>,
    },
    #[error("trace {} holds no requests", .0.display())]
    EmptyTrace(PathBuf),
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("--backend {name}: {error}")]
    Backend {
        name: &'static str,
        error: BackendOpenError,
    },
    #[error("progress bar: {0}")]
    Progress(#[from] indicatif::style::TemplateError),
    #[error("{policy} run: {error}")]
    Run { policy: String, error: BenchError },
    #[error("pages or requests unaccounted for under {}", .0.join(", "))]
    Leaks(Vec<String>),
}

/// Every bad line as `FILE:LINE: reason` (the first 20).
fn bad_trace(path: &Path, errors: &[TraceError]) -> String {
    let mut m = format!("trace {} has {} bad line(s):", path.display(), errors.len());
    for e in errors.iter().take(20) {
        m.push_str(&format!("\n  {}:{}: {}", path.display(), e.line, e.message));
    }
    m
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
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::from(2)
        }
    }
}

fn write(path: &Path, contents: String) -> Result<(), CliError> {
    std::fs::write(path, contents).map_err(|source| CliError::Write {
        path: path.to_path_buf(),
        source,
    })
}

fn bench(args: BenchArgs) -> Result<(), CliError> {
    let policies = args
        .policies
        .iter()
        .map(|p| parse_policy(p))
        .collect::<Result<Vec<_>, _>>()?;
    if !(0.0..=1.0).contains(&args.cancel_fraction) {
        return Err(CliError::CancelFraction(args.cancel_fraction));
    }
    if let Some(rate) = args.rate {
        if !(rate.is_finite() && rate > 0.0) {
            return Err(CliError::Rate(rate));
        }
    }
    let sampling = SamplingParams {
        temperature: args.temperature,
        top_k: args.top_k,
        top_p: args.top_p,
    };
    sampling.validate()?;
    if args.threads > 0 {
        // The matrix products' thread pool reads this on first use; keep it
        // to the same count as the attention backend.
        std::env::set_var("MATMUL_NUM_THREADS", args.threads.to_string());
    }
    let model_config = ModelConfig::EMBEDDED;
    let model = Model::new(Weights::seeded(model_config, EMBEDDED_WEIGHTS_SEED)?);

    let (trace, source) = match &args.trace {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|source| CliError::ReadTrace {
                path: path.clone(),
                source,
            })?;
            let trace =
                parse_trace(&text, model_config.vocab).map_err(|errors| CliError::BadTrace {
                    path: path.clone(),
                    errors,
                })?;
            if trace.is_empty() {
                return Err(CliError::EmptyTrace(path.clone()));
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
        write(path, write_trace(&trace))?;
    }

    let scheduler = SchedulerConfig {
        max_batch: args.max_batch,
        token_budget: args.token_budget,
        fairness_threshold_us: (args.fairness_ms > 0)
            .then(|| args.fairness_ms.saturating_mul(1000)),
        ..SchedulerConfig::default()
    };
    scheduler.validate().map_err(CliError::Scheduler)?;
    let engine = EngineConfig {
        scheduler,
        policy: policies[0],
        kv_pages: args.kv_pages,
        kv_dtype: args.kv_dtype,
        queue_capacity: (trace.len() as u32).max(1),
        scheduler_slots: args.max_batch.saturating_mul(4).max(1024),
    };
    let options = DriveOptions {
        sampling,
        seed: args.seed,
        cancel_fraction: args.cancel_fraction,
        concurrency_mark: args.max_batch.min(256),
    };

    let backend = match args.backend {
        BackendKind::Cpu => BackendChoice::Cpu {
            threads: args.threads,
        },
        BackendKind::Vulkan => BackendChoice::Vulkan,
    };
    let backend_error = |error| CliError::Backend {
        name: backend.name(),
        error,
    };
    let backend_desc = backend.describe().map_err(backend_error)?;
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
            ProgressStyle::with_template(
                "{prefix:>6} [{bar:32}] {pos}/{len} requests · {elapsed}",
            )?
            .progress_chars("=> "),
        );
        bar.set_prefix(policy.name());
        let run = PolicyRun {
            model: &model,
            config: &engine,
            policy: *policy,
            trace: &trace,
            options: &options,
            on_outcome: || bar.inc(1),
        };
        let report = backend
            .open(run)
            .map_err(backend_error)?
            .map_err(|error| CliError::Run {
                policy: policy.name().to_string(),
                error,
            })?;
        bar.finish_and_clear();
        reports.push(report);
    }

    let settings = Settings {
        args: &args,
        requests: trace.len(),
        sampling,
        model: model_config,
    };
    let mut report = BenchReport {
        title,
        // A struct of numbers and strings always converts.
        settings: serde_json::to_value(&settings).unwrap_or_default(),
        policies: reports,
    };
    report.compare_to_fcfs();
    print!("{}", report.table());
    if let Some(path) = &args.json {
        write(path, report.json())?;
    }
    if let Some(path) = &args.plot {
        write(path, report.svg())?;
    }
    let leaks: Vec<String> = report
        .policies
        .iter()
        .filter(|p| !p.leak_free)
        .map(|p| p.policy.clone())
        .collect();
    if !leaks.is_empty() {
        return Err(CliError::Leaks(leaks));
    }
    Ok(())
}

/// `fcfs` or `lpm[:key=value,...]`, with the valid choices in every error.
fn parse_policy(text: &str) -> Result<Policy, CliError> {
    let (name, params) = text.split_once(':').unwrap_or((text, ""));
    let pairs: Vec<(&str, &str)> = params
        .split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| p.split_once('=').unwrap_or((p, "")))
        .collect();
    Policy::parse(name.trim(), &pairs).map_err(|error| CliError::Policy {
        text: text.to_string(),
        error,
    })
}
