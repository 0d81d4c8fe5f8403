//! Why `pagoda bench` or `pagoda run` stops: one variant per cause, each
//! message saying what the user can change.

use std::path::{Path, PathBuf};

use pagoda_engine::chat::ChatTemplateError;
use pagoda_engine::model::{ModelError, SamplingError};
use pagoda_engine::{BackendOpenError, BoxError, ConfigError, OpenError, Rejection};

use crate::bench::BenchError;
use crate::trace::TraceError;

/// Why `pagoda bench` or `pagoda run` stopped, each with what the user can
/// do about it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CliError {
    #[error("serve: {0}")]
    Serve(#[from] crate::serve::ServeError),
    #[error("synth: {0}")]
    Synth(#[from] crate::synth::SynthError),
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
    #[error("cannot load {}: {error}", path.display())]
    Load {
        path: PathBuf,
        error: Box<OpenError>,
    },
    #[error("cannot read prompts from {}: {source}", path.display())]
    ReadPrompts {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot read the prompt from standard input: {0}")]
    Stdin(std::io::Error),
    #[error("cannot write to standard output: {0}")]
    Stdout(std::io::Error),
    #[error("the prompt is empty (give --prompt TEXT, --prompts FILE or text on standard input)")]
    EmptyPrompt,
    #[error("the prompt is {tokens} tokens; the model's context is {context}")]
    PromptTooLong { tokens: usize, context: u32 },
    #[error("the model file has no chat template (tokenizer.chat_template): a base model continues text; use `pagoda run` without --chat, or give a template with --chat-template FILE")]
    NoChatTemplate,
    #[error(
        "the model file's chat template does not compile ({0}); give one with --chat-template FILE"
    )]
    BrokenTemplate(String),
    #[error("--chat-template renders --chat's turn: give --chat too (without it the prompt is raw text)")]
    TemplateWithoutChat,
    #[error("cannot read the chat template {}: {source}", path.display())]
    ReadTemplate {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the chat template {}: {error}", path.display())]
    BadTemplate {
        path: PathBuf,
        error: ChatTemplateError,
    },
    #[error("chat template: {0}")]
    Template(#[from] ChatTemplateError),
    #[error("the engine: {0}")]
    Engine(BoxError),
    #[error("the request was refused: {0}")]
    Rejected(Rejection),
    #[error("the engine failed during the run")]
    Failed,
    #[error("cannot run `pagoda run` as a child process: {0}")]
    Child(std::io::Error),
    #[error("JSON output: {0}")]
    Json(serde_json::Error),
}

/// Every bad line as `FILE:LINE: reason` (the first 20).
fn bad_trace(path: &Path, errors: &[TraceError]) -> String {
    let mut m = format!("trace {} has {} bad line(s):", path.display(), errors.len());
    for e in errors.iter().take(20) {
        m.push_str(&format!("\n  {}:{}: {}", path.display(), e.line, e.message));
    }
    m
}
