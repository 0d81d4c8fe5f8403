//! The command line: `pagoda bench` and its options. The options derive
//! `Serialize` and are the report's settings as given.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};
use pagoda_engine::model::{ActPrecision, Model, ModelConfig, SamplingParams};
use pagoda_engine::{BackendChoice, KvDtype, ParseKvDtypeError, Policy, DEFAULT_PREFILL_SHARE};
use serde::Serialize;

use crate::error::CliError;
use crate::workload::{LengthDist, WorkloadKind};

#[derive(Parser)]
#[command(
    name = "pagoda",
    version,
    about = "Pagoda: paged KV cache, radix prefix cache and cache-aware continuous batching"
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Run a workload under each policy and compare throughput, latency,
    /// cache reuse, memory and overhead.
    #[command(args_override_self = true)]
    Bench(BenchArgs),
    /// Generate text from a GGUF model, streamed as it is sampled.
    #[command(args_override_self = true)]
    Run(RunArgs),
    /// Serve a model over an OpenAI-compatible HTTP API.
    #[command(args_override_self = true)]
    Serve(crate::serve::ServeArgs),
    /// Chat with a model in the terminal, turn after turn.
    #[command(args_override_self = true)]
    Chat(crate::chat::ChatArgs),
    /// Write a GGUF file with a real model's shapes and random weights, for
    /// speed measurements without a download.
    #[command(args_override_self = true)]
    Synth(crate::synth::SynthArgs),
}

/// How a GGUF model's weights are held (`--weights`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum WeightsArg {
    /// As quantized, with Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K,
    /// IQ4_XS and MXFP4 matrices repacked at load into rows interleaved eight at a time (their pages of the map let
    /// go, so memory stays about the file's size), for the CPU kernels that
    /// multiply eight rows per vector: the fastest on the CPU. The Vulkan
    /// backend reads the plain layout, so there it is `quantized`.
    Repacked,
    /// Quantized in the memory map, in GGUF's plain layout: loads in
    /// milliseconds and holds about the file's size. The reference for
    /// `repacked`.
    Quantized,
    /// Dequantized to f32 at load (4 bytes a parameter): the plain
    /// reference path.
    Dense,
}

/// How quantized weights take their activations (`--activations`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum ActivationsArg {
    /// 8-bit blocks on every step, each row rounded on its own (as
    /// llama.cpp): the fastest, prompts included (1B Q4_0 prefill 1.6×
    /// f32); logits within about 3% of their range of the exact path.
    Int8,
    /// 8-bit blocks on decode steps (below 24 rows) for Q4_0, Q4_1 and
    /// K-quant weights; prompts f32, so their keys and values are exact.
    Int8Decode,
    /// f32 on every step: the dense path's logits within f32 rounding.
    F32,
}

impl ActivationsArg {
    /// The engine's precision for this choice.
    pub(crate) fn precision(self) -> ActPrecision {
        match self {
            Self::Int8Decode => ActPrecision::Int8Decode,
            Self::F32 => ActPrecision::F32,
            Self::Int8 => ActPrecision::Int8,
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum BackendKind {
    /// The SIMD CPU backend (pagoda-cpu).
    Cpu,
    /// The Vulkan compute backend (pagoda-vulkan).
    Vulkan,
}

/// What `pagoda bench` measures.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Suite {
    /// The workload under each scheduling policy, side by side.
    Policies,
    /// The model's speed beside the machine's limits.
    Speed,
}

impl BackendKind {
    /// The kernels `model`'s products run on this backend: the CPU's
    /// instruction set and each weight type's layout, or the device.
    pub(crate) fn kernels(self, model: &Model) -> String {
        match self {
            Self::Cpu => model.kernels(),
            Self::Vulkan if model.whole_steps_on_device() => {
                "vulkan: whole steps on the device".to_string()
            }
            Self::Vulkan => {
                "vulkan: attention on the device, the rest of each step on the CPU".to_string()
            }
        }
    }

    /// The engine's choice for this kind, with `threads` CPU workers.
    pub(crate) fn choice(self, threads: usize) -> BackendChoice {
        match self {
            Self::Cpu => BackendChoice::Cpu { threads },
            Self::Vulkan => BackendChoice::Vulkan,
        }
    }
}

/// How a GGUF model's weights are loaded and multiplied: the options
/// `run`, `chat`, `bench` and `serve` share.
#[derive(clap::Args, Serialize, Debug, Clone)]
pub(crate) struct WeightArgs {
    /// How the weights are held: repacked for the CPU's kernels (the
    /// default), quantized in the memory map's plain layout, or
    /// dequantized to f32 at load.
    #[arg(long, value_enum, default_value_t = WeightsArg::Repacked)]
    pub(crate) weights: WeightsArg,
    /// The default since quantized weights became it; accepted so older
    /// scripts keep working.
    #[arg(long, hide = true, conflicts_with = "weights")]
    pub(crate) quantized: bool,
    /// How quantized weights take their activations: 8-bit blocks on
    /// every step (the default, as llama.cpp), 8-bit on decode steps only,
    /// or f32 throughout (exact). Ignored with dense weights.
    #[arg(long, value_enum, default_value_t = ActivationsArg::Int8)]
    pub(crate) activations: ActivationsArg,
    /// Keep repacked weights in a cache file in this directory (created
    /// if missing): a load that finds the model's there maps it instead of
    /// repacking; one that does not repacks, and writes the file on a
    /// thread of its own while the model runs (as large as the repacked
    /// matrices: about the model file). Writing it deletes the files of
    /// this model path's earlier versions.
    #[arg(long, env = "PAGODA_REPACK_CACHE", value_name = "DIR")]
    pub(crate) repack_cache: Option<PathBuf>,
}

/// `--chat-template`: the options `run`, `chat` and `serve` share.
#[derive(clap::Args, Debug, Clone, Default)]
pub(crate) struct TemplateArgs {
    /// A chat template (Jinja, the text of a Hugging Face
    /// `chat_template`) in place of the model file's own
    /// `tokenizer.chat_template`: chat with a base model that has none, or
    /// mend one that is wrong. Its `bos_token` and `eos_token` are the
    /// model's.
    #[arg(long, value_name = "FILE.jinja", requires = "model")]
    pub(crate) chat_template: Option<PathBuf>,
}

/// `pagoda run`'s options.
#[derive(clap::Args)]
pub(crate) struct RunArgs {
    /// The model: a GGUF file of an architecture the README lists (llama,
    /// Mixtral included, qwen2, qwen2moe, qwen3, qwen3moe, phi3, gemma2,
    /// gemma3, granite, granitemoe, smollm3, olmo2, gpt-oss, glm4, glm4moe,
    /// deepseek2, the Qwen-VL text models, ernie4_5, ernie4_5-moe,
    /// seed_oss, olmoe, exaone, exaone4, mistral3, hunyuan-dense,
    /// command-r, cohere2, lfm2, lfm2moe, qwen35, qwen35moe, qwen3next,
    /// minimax-m2, granitehybrid, nemotron_h, nemotron_h_moe).
    #[arg(long, value_name = "FILE.gguf")]
    pub(crate) model: PathBuf,
    #[command(flatten)]
    pub(crate) weights: WeightArgs,
    #[command(flatten)]
    pub(crate) template: TemplateArgs,
    /// Wrap the prompt in the model's chat template as one user turn.
    #[arg(long)]
    pub(crate) chat: bool,
    /// A system message before the user's turn (with --chat).
    #[arg(long, requires = "chat")]
    pub(crate) system: Option<String>,
    /// The prompt (default: read standard input).
    #[arg(long, conflicts_with = "prompts")]
    pub(crate) prompt: Option<String>,
    /// Run every non-empty line of FILE as its own prompt, in continuous batches.
    #[arg(long, value_name = "FILE")]
    pub(crate) prompts: Option<PathBuf>,
    /// Most tokens to generate per prompt (the model's context also bounds it).
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) max_tokens: u32,
    /// Sampling temperature (0: greedy).
    #[arg(long, default_value_t = 0.0)]
    pub(crate) temperature: f32,
    /// Sample among the K most likely tokens (0: all).
    #[arg(long, default_value_t = 0)]
    pub(crate) top_k: u32,
    /// Sample from the smallest set of tokens with this much probability.
    #[arg(long, default_value_t = 1.0)]
    pub(crate) top_p: f32,
    /// Drop tokens less likely than this times the most likely one (0: off).
    #[arg(long, default_value_t = 0.0)]
    pub(crate) min_p: f32,
    /// Penalise the prompt's and output's tokens: their positive logits
    /// are divided by this, the others multiplied (1: off; llama.cpp's
    /// --repeat-penalty).
    #[arg(long, alias = "repeat-penalty", default_value_t = 1.0)]
    pub(crate) repetition_penalty: f32,
    /// Subtract this from the logit of every token already in the output.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub(crate) presence_penalty: f32,
    /// Subtract this once per time a token is already in the output.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub(crate) frequency_penalty: f32,
    /// Seed of the sampler.
    #[arg(long, default_value_t = 0)]
    pub(crate) seed: u64,
    /// Stop when the text contains this string (repeatable); it is not printed.
    #[arg(long)]
    pub(crate) stop: Vec<String>,
    /// Print one JSON object per prompt: prompt_ids, output_ids, text, timings.
    #[arg(long)]
    pub(crate) json: bool,
    /// Attention backend.
    #[arg(long, value_enum, default_value_t = BackendKind::Cpu)]
    pub(crate) backend: BackendKind,
    /// Threads for attention and matrix products (0: one per core).
    #[arg(long, default_value_t = 0)]
    pub(crate) threads: usize,
    /// Pages in the KV pool, 16 tokens each (default: enough for every prompt at its longest).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=16_000_000))]
    pub(crate) kv_pages: Option<u32>,
    /// How the KV cache stores keys and values: f32, f16 or bf16.
    #[arg(long, default_value = "f16", value_parser = parse_kv_dtype)]
    pub(crate) kv_dtype: KvDtype,
    /// Most sequences running at once.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=65_536))]
    pub(crate) max_batch: u32,
    /// Decode first: while a step decodes, prefill takes at most this share
    /// of the token budget (1: no cap, for the most throughput on a batch
    /// of prompts).
    #[arg(long, default_value_t = DEFAULT_PREFILL_SHARE, value_parser = parse_prefill_share)]
    pub(crate) prefill_share: f32,
    /// No load and speed lines on standard error.
    #[arg(long)]
    pub(crate) quiet: bool,
}

/// The bench's options; serialized as the report's settings.
#[derive(clap::Args, Serialize)]
pub(crate) struct BenchArgs {
    /// What to measure: `policies` (the workload under each policy) or
    /// `speed` (decode, prefill and batching against this machine's read
    /// bandwidth and FMA peak).
    #[arg(long, value_enum, default_value_t = Suite::Policies)]
    pub(crate) suite: Suite,
    /// The speed suite's deepest decode context (tokens; the model's own
    /// context also bounds it): less for large models on few cores, where
    /// the 4,096-token prompt takes minutes.
    #[arg(long, default_value_t = 4096, value_name = "TOKENS")]
    pub(crate) speed_depth: usize,
    /// Run on this GGUF model instead of the embedded random-weight one.
    #[arg(long, value_name = "FILE.gguf")]
    pub(crate) model: Option<PathBuf>,
    #[command(flatten)]
    #[serde(flatten)]
    pub(crate) weights: WeightArgs,
    /// Prefix structure of the synthetic workload.
    #[arg(long, value_enum, default_value_t = WorkloadKind::FewShot)]
    pub(crate) workload: WorkloadKind,
    /// Requests in the synthetic workload.
    #[serde(skip)]
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub(crate) requests: u32,
    /// Tokens of the shared part: few-shot prefix, chat system prompt, tree trunk.
    #[arg(long, default_value_t = 512, value_parser = clap::value_parser!(u32).range(0..=100_000))]
    pub(crate) shared_len: u32,
    /// Sharing groups: few-shot prefixes, conversations, trees, RAG documents, agents.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub(crate) groups: u32,
    /// Length of each request's own prompt part: N, uniform:MIN:MAX or lognormal:MEDIAN:SIGMA.
    #[arg(long, default_value = "uniform:32:96")]
    #[serde(serialize_with = "as_text")]
    pub(crate) prompt_len: LengthDist,
    /// Output tokens per request: N, uniform:MIN:MAX or lognormal:MEDIAN:SIGMA.
    #[arg(long, default_value = "uniform:16:48")]
    #[serde(serialize_with = "as_text")]
    pub(crate) output_len: LengthDist,
    /// Poisson arrivals at this many requests per second (default: all at once, offline).
    #[arg(long)]
    pub(crate) rate: Option<f64>,
    /// Replay a JSON Lines trace instead of a synthetic workload.
    #[arg(long, value_name = "FILE.jsonl")]
    pub(crate) trace: Option<PathBuf>,
    /// Write the trace that was run (synthetic or replayed) as JSON Lines.
    #[arg(long, value_name = "FILE.jsonl")]
    #[serde(skip)]
    pub(crate) save_trace: Option<PathBuf>,
    /// A policy to run, repeatable: fcfs, or lpm[:KEY=VALUE,...] with keys
    /// cache_weight, fairness_threshold_ms, score (relative|absolute),
    /// prefill_share.
    #[arg(long = "policy", value_name = "POLICY", default_values = ["fcfs", "lpm"])]
    pub(crate) policies: Vec<String>,
    /// Attention backend.
    #[arg(long, value_enum, default_value_t = BackendKind::Cpu)]
    pub(crate) backend: BackendKind,
    /// Threads for attention and matrix products (0: one per core).
    #[arg(long, default_value_t = 0)]
    #[serde(skip)]
    pub(crate) threads: usize,
    /// Pages in the KV pool (16 tokens each).
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..=16_000_000))]
    pub(crate) kv_pages: u32,
    /// How the KV cache stores keys and values: f32, f16 or bf16.
    #[arg(long, default_value = "f16", value_parser = parse_kv_dtype)]
    #[serde(serialize_with = "dtype_debug")]
    pub(crate) kv_dtype: KvDtype,
    /// Most sequences running at once.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=65_536))]
    pub(crate) max_batch: u32,
    /// Most tokens computed per step (decode plus prefill chunks).
    #[arg(long, default_value_t = 2048, value_parser = clap::value_parser!(u32).range(1..=1_048_576))]
    pub(crate) token_budget: u32,
    /// Decode first: while a step decodes, prefill takes at most this share
    /// of the token budget (1: no cap, the old behaviour, for offline
    /// throughput); a policy's own prefill_share overrides it.
    #[arg(long, default_value_t = DEFAULT_PREFILL_SHARE, value_parser = parse_prefill_share)]
    pub(crate) prefill_share: f32,
    /// Admit a request waiting longer than this first (ms); 0 turns fairness off.
    #[arg(long, default_value_t = 2000)]
    pub(crate) fairness_ms: u64,
    /// Sampling temperature (0: greedy).
    #[arg(long, default_value_t = 0.0)]
    #[serde(skip)]
    pub(crate) temperature: f32,
    /// Sample among the K most likely tokens (0: all).
    #[arg(long, default_value_t = 0)]
    #[serde(skip)]
    pub(crate) top_k: u32,
    /// Sample from the smallest set of tokens with this much probability.
    #[arg(long, default_value_t = 1.0)]
    #[serde(skip)]
    pub(crate) top_p: f32,
    /// Share of requests the client cancels at a random moment within a second of arrival.
    #[arg(long, default_value_t = 0.0)]
    pub(crate) cancel_fraction: f64,
    /// Seed of the workload, the samplers and the cancellations.
    #[arg(long, default_value_t = 0)]
    pub(crate) seed: u64,
    /// Write every figure as JSON.
    #[arg(long, value_name = "FILE")]
    #[serde(skip)]
    pub(crate) json: Option<PathBuf>,
    /// Write an SVG plot: latency distributions and hit rates per policy.
    #[arg(long, value_name = "FILE.svg")]
    #[serde(skip)]
    pub(crate) plot: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    #[serde(skip)]
    pub(crate) quiet: bool,
}

/// The report's settings: the options as given, plus what they resolved to.
#[derive(Serialize)]
pub(crate) struct Settings<'a> {
    #[serde(flatten)]
    pub(crate) args: &'a BenchArgs,
    /// Requests run (the trace's, when one was replayed).
    pub(crate) requests: usize,
    pub(crate) sampling: SamplingParams,
    pub(crate) model: ModelConfig,
    /// The kernels the products ran (`Model::kernels`), or the device.
    pub(crate) kernels: String,
}

fn as_text<S: serde::Serializer>(d: &LengthDist, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(d)
}

fn dtype_debug<S: serde::Serializer>(d: &KvDtype, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&format_args!("{d:?}"))
}

fn parse_kv_dtype(text: &str) -> Result<KvDtype, ParseKvDtypeError> {
    text.parse()
}

/// A decode-first prefill share: a number in `(0, 1]`.
pub(crate) fn parse_prefill_share(text: &str) -> Result<f32, String> {
    match text.trim().parse::<f32>() {
        Ok(share) if share > 0.0 && share <= 1.0 => Ok(share),
        Ok(_) => Err("the share must be in (0, 1]; 1 turns the cap off".into()),
        Err(e) => Err(format!("not a number: {e}")),
    }
}

/// `fcfs` or `lpm[:key=value,...]`, with the valid choices in every error.
pub(crate) fn parse_policy(text: &str) -> Result<Policy, CliError> {
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
