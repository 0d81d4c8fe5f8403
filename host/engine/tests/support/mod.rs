//! Shared by the GGUF model tests: where the model and the Python reference
//! are (outside CI a missing one skips the test with one line; with
//! `CI=true` it fails), running the reference, and our logits at every
//! position of a prompt through the paged forward pass.

#![allow(dead_code)]

use std::path::Path;

use pagoda_core::backend::{Backend, SeqAttention};
use pagoda_core::scheduler::{Fcfs, Policy, SchedulerConfig};
use pagoda_core::{KvDtype, PageId, Priority, Slot, PAGE_SIZE};
use pagoda_cpu::CpuBackend;
use pagoda_engine::model::{Model, SamplingParams, StateRow, StepInput};
use pagoda_engine::{Engine, EngineConfig, EngineStorage, Event, GenRequest, StepBackend};

#[path = "../../../../tests/support/env.rs"]
mod env;
pub use env::*;

pub mod dense_ref;
pub mod tiny;

/// The tiny models make_tiny_gguf.py writes that every backend must run
/// as the NumPy reference does (`{name}.gguf`): one per architecture and
/// per feature of one (Llama 3 scaling, YaRN).
pub const TINY_MODELS: [&str; 46] = [
    "qwen2",
    "llama",
    "qwen3",
    "llama3",
    "phi3",
    "gemma3",
    "gemma2",
    "mixtral",
    "qwen3moe",
    "qwen2moe",
    "granite",
    "granitemoe",
    "yarn",
    "smollm3",
    "olmo2",
    "qwen2moe_defaults",
    "lowbits",
    "glm4",
    "glm4_fused",
    "glm4moe",
    "qwen2vl",
    "qwen3vl",
    "qwen3vlmoe",
    "ernie4_5",
    "ernie4_5_moe",
    "seed_oss",
    "olmoe",
    "exaone",
    "exaone4",
    "exaone4_full",
    "mistral3",
    "hunyuan_dense",
    "command_r",
    "cohere2",
    "olmo3",
    "olmo3_yarn",
    "lfm2",
    "lfm2moe",
    "qwen35",
    "qwen35moe",
    "qwen3next",
    "minimax_m2",
    "granite_hybrid",
    "granite_hybrid_moe",
    "nemotron_h",
    "nemotron_h_moe",
];

/// A scratch folder named `name` holding every file make_tiny_gguf.py
/// writes, or `None` (the test skipped, with one line) without the Python
/// reference.
pub fn tiny_models(name: &str) -> Option<std::path::PathBuf> {
    let python = require_python(name)?;
    let dir = scratch_dir(name);
    run_reference(&python, "make_tiny_gguf.py", &[dir.as_os_str()]);
    Some(dir)
}

/// Writes `prompts` for forward_ref.py (one line of ids each).
pub fn write_prompts(path: &Path, prompts: &[Vec<u32>]) {
    let text: String = prompts
        .iter()
        .map(|p| p.iter().map(u32::to_string).collect::<Vec<_>>().join(" ") + "\n")
        .collect();
    std::fs::write(path, text).unwrap();
}

/// Logits at every position of `tokens` (`[tokens, vocab]`), by the model's
/// paged forward pass on the CPU backend with a KV cache of `dtype`; the
/// prompt goes in chunks of `chunk` tokens over scattered pages.
pub fn logits_every_position(
    model: &Model,
    tokens: &[u32],
    dtype: KvDtype,
    chunk: usize,
) -> Vec<f32> {
    logits_of_last(model, tokens, dtype, chunk, tokens.len())
}

/// [`logits_every_position`] for the last `tail` positions only
/// (`[tail, vocab]`).
pub fn logits_of_last(
    model: &Model,
    tokens: &[u32],
    dtype: KvDtype,
    chunk: usize,
    tail: usize,
) -> Vec<f32> {
    let c = model.config();
    let mut backend = CpuBackend::new();
    let pages_needed = tokens.len().div_ceil(PAGE_SIZE);
    let total = 2 * pages_needed as u32 + 1;
    let mut store = backend
        .create_kv_store(c.kv_geometry(dtype).unwrap(), total)
        .unwrap();
    // Pages out of order: total-1, total-3, ...
    let pages: Vec<PageId> = (0..pages_needed)
        .map(|i| PageId::from_index(total - 1 - 2 * i as u32))
        .collect();
    // The backend's own team runs the products too, as in an engine.
    let mut act = backend.activations();
    let mut all = Vec::with_capacity(tokens.len() * c.vocab as usize);
    let mut logits = Vec::new();
    let mut start = 0;
    while start < tokens.len() {
        let end = (start + chunk).min(tokens.len());
        let positions: Vec<u32> = (start as u32..end as u32).collect();
        let slots: Vec<Slot> = positions
            .iter()
            .map(|&p| pages[p as usize / PAGE_SIZE].slot(p % PAGE_SIZE as u32))
            .collect();
        let seqs = [SeqAttention {
            pages: &pages,
            context_len: end as u32,
            query_start: 0,
            query_len: (end - start) as u32,
        }];
        let first_sampled = tokens.len().saturating_sub(tail).max(start);
        let rows: Vec<u32> = (first_sampled.min(end) - start..end - start)
            .map(|r| r as u32)
            .collect();
        let input = StepInput {
            places: &[],
            groups: &[],
            tokens: &tokens[start..end],
            positions: &positions,
            slots: &slots,
            seqs: &seqs,
            states: &[StateRow { row: 0, owner: 1 }],
            sample_rows: &rows,
            prompt_rows: end - start,
        };
        model
            .forward(&mut backend, &mut store, &input, &mut act, &mut logits)
            .unwrap_or_else(|e| panic!("forward: {e:?}"));
        all.extend_from_slice(&logits);
        start = end;
    }
    all
}

/// The largest |ours - reference| over all logits, and the reference's
/// range (max - min), for a tolerance relative to the logits' scale.
pub fn max_diff(ours: &[f32], reference: &[f32]) -> (f32, f32) {
    assert_eq!(ours.len(), reference.len(), "logit counts differ");
    let diff = ours
        .iter()
        .zip(reference)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    let (lo, hi) = reference
        .iter()
        .fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), &x| {
            (lo.min(x), hi.max(x))
        });
    (diff, hi - lo)
}

/// The index of the largest logit and its lead over the second largest.
pub fn top_two(logits: &[f32]) -> (u32, f32) {
    let (mut best, mut first, mut second) = (0, f32::NEG_INFINITY, f32::NEG_INFINITY);
    for (i, &x) in logits.iter().enumerate() {
        if x > first {
            (second, first, best) = (first, x, i);
        } else if x > second {
            second = x;
        }
    }
    (best as u32, first - second)
}

/// An engine of `kv_pages` pages and a step budget of `token_budget`
/// tokens, first come first served, up to 8 sequences at once, with no
/// wall-clock fairness: the same schedule, and so the same output, on every
/// run.
pub fn fcfs_config(kv_pages: u32, token_budget: u32) -> EngineConfig {
    EngineConfig {
        scheduler: SchedulerConfig {
            max_batch: 8,
            token_budget,
            fairness_threshold_us: None,
            ..SchedulerConfig::default()
        },
        policy: Policy::Fcfs(Fcfs),
        kv_pages,
        kv_dtype: KvDtype::F32,
        queue_capacity: 64,
        scheduler_slots: 32,
        cache_events: 0,
    }
}

/// Greedy continuations of `prompts`, `tokens` each, batched in one
/// engine on the CPU backend with a KV cache of `dtype`.
pub fn greedy_outputs(
    model: &Model,
    dtype: KvDtype,
    prompts: &[Vec<u32>],
    tokens: u32,
) -> Vec<Vec<u32>> {
    let config = EngineConfig {
        kv_pages: 64,
        kv_dtype: dtype,
        ..EngineConfig::default()
    };
    // Grouped by windows, as `pagoda run` pages a model on the CPU.
    greedy_run(model, &config, true, prompts, tokens).outputs
}

/// What [`greedy_run`] saw.
pub struct GreedyRun {
    /// Each prompt's continuation.
    pub outputs: Vec<Vec<u32>>,
    /// The most pages the pool held at the end of a step that only decoded.
    pub decoding_peak: u32,
    /// Prompt tokens the prefix cache served.
    pub cached_tokens: u32,
    /// Sequences preempted.
    pub preempted: u32,
}

/// Greedy continuations on the CPU backend under `config`, the cache's
/// layers grouped by their windows or not.
pub fn greedy_run(
    model: &Model,
    config: &EngineConfig,
    grouped: bool,
    prompts: &[Vec<u32>],
    tokens: u32,
) -> GreedyRun {
    let mut storage = EngineStorage::for_model(config, model, grouped);
    let mut engine = Engine::new(model, CpuBackend::new(), config, &mut storage).unwrap();
    let handles: Vec<_> = prompts
        .iter()
        .enumerate()
        .map(|(i, prompt)| {
            let request = GenRequest {
                tag: i as u64,
                prompt: prompt.clone(),
                max_new_tokens: tokens,
                sampling: SamplingParams::GREEDY,
                seed: 0,
                stop_tokens: Vec::new(),
            };
            let now = engine.now();
            engine.submit(request, Priority::Normal, now).unwrap()
        })
        .collect();
    let (mut steps, mut decoding_peak, mut cached_tokens, mut preempted) = (0, 0, 0, 0);
    while !engine.is_idle() {
        let report = engine.step().unwrap();
        cached_tokens += report.plan.cached_tokens;
        preempted += report.plan.preempted;
        if report.plan.prefill_tokens == 0 && engine.running() == prompts.len() as u32 {
            decoding_peak = decoding_peak.max(engine.pool_stats().referenced_pages);
        }
        steps += 1;
        assert!(steps < 10_000, "no progress");
    }
    let outputs = handles
        .iter()
        .map(|handle| {
            let mut output = None;
            while let Some(event) = handle.try_recv() {
                if let Event::Finished(done) = event {
                    output = Some(done.output);
                }
            }
            output.expect("the request finished")
        })
        .collect();
    GreedyRun {
        outputs,
        decoding_peak,
        cached_tokens,
        preempted,
    }
}

/// forward_ref.py's greedy continuation: each step's token and the gap
/// between the top two logits there.
pub fn read_greedy(path: &Path) -> Vec<(u32, f32)> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|line| {
            let (token, gap) = line.split_once(' ').expect("token gap");
            (token.parse().unwrap(), gap.parse().unwrap())
        })
        .collect()
}

/// Checks `ours` against the reference's greedy tokens: equal up to the
/// first difference, which must come after a near tie (top-2 gap below
/// `near_tie`); the comparison stops there. Returns the tokens that agree.
pub fn agree_until_a_near_tie(
    label: &str,
    ours: &[u32],
    reference: &[(u32, f32)],
    near_tie: f32,
) -> usize {
    assert_eq!(ours.len(), reference.len(), "{label}");
    for (step, (&token, &(want, gap))) in ours.iter().zip(reference).enumerate() {
        if token != want {
            assert!(
                gap < near_tie,
                "{label} step {step}: {token} where the reference has {want} (top-2 gap {gap})"
            );
            println!(
                "{label}: near tie at step {step} (reference top-2 gap {gap:.4}): ours {token}, reference {want}; comparison stops there"
            );
            return step;
        }
    }
    ours.len()
}
