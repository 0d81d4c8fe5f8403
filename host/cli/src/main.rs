//! `pagoda`: the command line over the Pagoda engine. `pagoda run`
//! generates text from a GGUF model; `pagoda bench` runs a workload through
//! the continuous-batching engine under each scheduling policy and reports
//! the figures side by side.

use std::path::Path;
use std::process::ExitCode;

use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use pagoda_engine::model::{Model, ModelConfig, SamplingParams};
use pagoda_engine::{
    EngineConfig, OpenError, SchedulerConfig, SchedulerPolicy, TextModel, WeightMode,
};

use crate::args::{parse_policy, BenchArgs, Cli, Command, Settings, Suite};
use crate::bench::{DriveOptions, PolicyRun};
use crate::error::CliError;
use crate::measure::PolicyReport;
use crate::report::BenchReport;
use crate::trace::{parse_trace, write_trace, Vocabulary};
use crate::workload::{Arrivals, WorkloadSpec};

mod answer;
mod args;
mod bench;
mod chat;
mod error;
mod measure;
mod report;
mod run;
mod serve;
mod speed;
mod synth;
mod trace;
mod workload;

/// Seed of the embedded model's weights: fixed, so every run serves the same
/// model.
const EMBEDDED_WEIGHTS_SEED: u64 = 0x5EED_0F9A_60DA;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if e.kind() == clap::error::ErrorKind::InvalidSubcommand => {
            eprint!("{e}");
            eprintln!("valid commands: bench, chat, run, serve, synth");
            return ExitCode::from(2);
        }
        Err(e) => e.exit(),
    };
    let result = match cli.command {
        Command::Bench(args) => bench(args),
        Command::Run(args) => run::run(args),
        Command::Serve(args) => serve::serve(args),
        Command::Chat(args) => chat::chat(args),
        Command::Synth(args) => synth::synth(args).map_err(CliError::from),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::from(2)
        }
    }
}

/// `--weights` and `--activations` as the engine's weight mode for
/// `backend` (whose device reads the plain layout when it is Vulkan).
pub(crate) fn weight_mode(
    weights: args::WeightsArg,
    activations: args::ActivationsArg,
    backend: args::BackendKind,
) -> WeightMode {
    let precision = activations.precision();
    match (weights, backend) {
        (args::WeightsArg::Repacked, args::BackendKind::Cpu) => WeightMode::Repacked(precision),
        (args::WeightsArg::Repacked | args::WeightsArg::Quantized, _) => {
            WeightMode::Quantized(precision)
        }
        (args::WeightsArg::Dense, _) => WeightMode::Dequantized,
    }
}

/// Opens a GGUF model with its tokenizer and template, the weights held
/// as the options say for `backend`; a failure names the file.
pub(crate) fn open_model(
    path: &Path,
    weights: &args::WeightArgs,
    backend: args::BackendKind,
) -> Result<TextModel, CliError> {
    let mode = weight_mode(weights.weights, weights.activations, backend);
    let cache = weights.repack_cache.as_deref();
    TextModel::open_cached(path, mode, cache).map_err(|error| CliError::Load {
        path: path.to_path_buf(),
        error: Box::new(error),
    })
}

/// [`open_model`] with `--chat-template`'s file (if given) compiled in
/// place of the model's own template.
pub(crate) fn open_chat_model(
    path: &Path,
    weights: &args::WeightArgs,
    template: &args::TemplateArgs,
    backend: args::BackendKind,
) -> Result<TextModel, CliError> {
    let Some(file) = &template.chat_template else {
        return open_model(path, weights, backend);
    };
    let source = std::fs::read_to_string(file).map_err(|source| CliError::ReadTemplate {
        path: file.clone(),
        source,
    })?;
    let mode = weight_mode(weights.weights, weights.activations, backend);
    let cache = weights.repack_cache.as_deref();
    TextModel::open_with_template(path, mode, cache, Some(&source)).map_err(|error| match error {
        OpenError::ChatTemplate(error) => CliError::BadTemplate {
            path: file.clone(),
            error,
        },
        error => CliError::Load {
            path: path.to_path_buf(),
            error: Box::new(error),
        },
    })
}

/// The model's chat template, or why it has none.
pub(crate) fn template_of(
    model: &TextModel,
) -> Result<&pagoda_engine::chat::ChatTemplate, CliError> {
    match (&model.chat, &model.chat_error) {
        (Some(template), _) => Ok(template),
        (None, Some(error)) => Err(CliError::BrokenTemplate(error.to_string())),
        (None, None) => Err(CliError::NoChatTemplate),
    }
}

pub(crate) fn write(path: &Path, contents: String) -> Result<(), CliError> {
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
        ..SamplingParams::GREEDY
    };
    sampling.validate()?;
    let mut loaded = match &args.model {
        Some(path) => Some(open_model(path, &args.weights, args.backend)?),
        None => None,
    };
    // Measured with no cache file being written beside the runs.
    if let Some(used) = loaded.as_mut().and_then(TextModel::wait_for_repack_cache) {
        eprintln!("pagoda bench: {used}");
    }
    let embedded;
    let (model, model_name) = match (&loaded, &args.model) {
        (Some(loaded), Some(path)) => (
            &loaded.model,
            format!("{} ({})", path.display(), loaded.info.architecture),
        ),
        _ => {
            embedded = Model::seeded(ModelConfig::EMBEDDED, EMBEDDED_WEIGHTS_SEED)?;
            (&embedded, "embedded model".to_string())
        }
    };
    let model_config = *model.config();
    if args.suite == Suite::Speed {
        return speed::speed(&args, model, args.model.as_deref());
    }
    // Trace text goes through the model's tokenizer (bytes for the embedded one).
    let tokenize = |text: &str| match &loaded {
        Some(m) => m.tokenizer.encode(text, true, true),
        None => Vec::new(),
    };
    let vocabulary = match &loaded {
        Some(_) => Vocabulary {
            size: model_config.vocab,
            tokenize: &tokenize,
        },
        None => Vocabulary::bytes(model_config.vocab),
    };

    let (trace, source) = match &args.trace {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|source| CliError::ReadTrace {
                path: path.clone(),
                source,
            })?;
            let trace = parse_trace(&text, &vocabulary).map_err(|errors| CliError::BadTrace {
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
        prefill_share: Some(args.prefill_share),
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
        cache_events: 0,
    };
    let options = DriveOptions {
        sampling: sampling.clone(),
        seed: args.seed,
        cancel_fraction: args.cancel_fraction,
        concurrency_mark: args.max_batch.min(256),
    };

    let backend = args.backend.choice(args.threads);
    let backend_error = |error| CliError::Backend {
        name: backend.name(),
        error,
    };
    let backend_desc = backend.describe().map_err(backend_error)?;
    let kernels = args.backend.kernels(model);
    let title = format!(
        "pagoda bench · {source} · {model_name} ({:.1} M params) · {backend_desc} · kernels {kernels} · {} KV pages · seed {}",
        model.parameters() as f64 / 1e6,
        args.kv_pages,
        args.seed
    );
    // The title once, on standard output above the table it heads, before
    // the runs so a long run shows what it is running.
    println!("{title}");

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
            model,
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
        let mut report = report;
        let share = policy.prefill_share().or(scheduler.prefill_share);
        report.prefill_cap_tokens = scheduler.prefill_cap(share);
        report.prefill_share = share.filter(|_| report.prefill_cap_tokens.is_some());
        // The bound over the prompts this run did not refuse.
        let refused: std::collections::HashSet<u64> = report
            .per_request
            .iter()
            .filter(|r| r.outcome == measure::OutcomeKind::Rejected)
            .map(|r| r.index)
            .collect();
        report.hit_rate_bound_pct = workload::hit_rate_bound_pct(
            trace
                .iter()
                .enumerate()
                .filter(|(i, _)| !refused.contains(&(*i as u64)))
                .map(|(_, e)| e.prompt.as_slice()),
            pagoda_engine::PAGE_SIZE,
        );
        reports.push(report);
    }

    let settings = Settings {
        args: &args,
        requests: trace.len(),
        sampling,
        model: model_config,
        kernels,
    };
    let mut report = BenchReport {
        title,
        // A struct of numbers and strings always converts.
        settings: serde_json::to_value(&settings).unwrap_or_default(),
        hit_rate_bound_pct: workload::hit_rate_bound_pct(
            trace.iter().map(|e| e.prompt.as_slice()),
            pagoda_engine::PAGE_SIZE,
        ),
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
