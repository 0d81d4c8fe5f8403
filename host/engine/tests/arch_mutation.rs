//! Bounded mutation test of the architecture builders: hundreds of mutants
//! of the tiny models make_tiny_gguf.py writes (bytes of their
//! `{arch}.*` metadata values flipped, zeroed or saturated: expert counts and
//! widths, Granite's multipliers, YaRN's parameters, windows, soft caps,
//! rotary bases, latent ranks, expert groups, logit scales, convolution
//! taps, state-space widths and per-layer KV heads) go through the loader, and every model that loads runs a
//! short prompt through the paged forward pass. None may panic: each load
//! builds a model or returns its typed error, and a model that loads runs.

mod support;

use std::panic::{catch_unwind, AssertUnwindSafe};

use pagoda_core::gguf::{Gguf, Value};
use pagoda_core::KvDtype;
use pagoda_engine::model::{Model, ModelConfig};

/// The tiny models mutated: every architecture whose builder reads
/// metadata of its own.
const FILES: [&str; 33] = [
    "mixtral",
    "qwen3moe",
    "qwen2moe",
    "granitemoe",
    "yarn",
    "smollm3",
    "olmo2",
    "gemma3",
    "phi3",
    "gpt_oss",
    "glm4",
    "glm4moe",
    "deepseek2_lite",
    "deepseek2_v3",
    "deepseek2_legacy",
    "ernie4_5_moe",
    "seed_oss",
    "exaone4",
    "mistral3",
    "hunyuan_dense",
    "command_r",
    "cohere2",
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

/// Mutants of each file.
const MUTANTS: usize = 96;

/// Byte ranges of the architecture's own metadata (`{arch}.*`): a number's
/// or flag's value bytes (the last of its entry), or a whole entry (key,
/// type and value) for arrays and strings.
fn targets(file: &Gguf<'_>, arch: &str) -> Vec<(usize, usize)> {
    let prefix = format!("{arch}.");
    let mut out = Vec::new();
    let mut kvs = file.metadata().peekable();
    while let Some(kv) = kvs.next() {
        let end = kvs.peek().map_or(file.data_offset(), |next| next.offset);
        if !kv.key.starts_with(&prefix) {
            continue;
        }
        let width = match kv.value {
            Value::U8(_) | Value::I8(_) | Value::Bool(_) => 1,
            Value::U16(_) | Value::I16(_) => 2,
            Value::U32(_) | Value::I32(_) | Value::F32(_) => 4,
            Value::U64(_) | Value::I64(_) | Value::F64(_) => 8,
            Value::String(_) | Value::Array(_) => end - kv.offset,
        };
        out.push((end - width, end));
    }
    out
}

/// Loads `bytes` (dense) and, if that builds a model, runs a prompt
/// through it; whether a model was built.
fn exercise(bytes: &[u8]) -> bool {
    let Ok(file) = Gguf::parse(bytes) else {
        return false;
    };
    let Ok(model) = Model::from_gguf(&file) else {
        return false;
    };
    // Within the (maybe mutated) context: past it, a step is refused by
    // name, which `logits_every_position` does not expect.
    let len = model.config().max_context.min(9);
    let prompt: Vec<u32> = (0..len).map(|i| (i * 29 + 3) % 256).collect();
    let logits = support::logits_every_position(&model, &prompt, KvDtype::F32, 4);
    assert_eq!(logits.len(), prompt.len() * model.config().vocab as usize);
    true
}

#[test]
fn mutated_architecture_metadata_never_panics_the_loader_or_a_step() {
    let Some(dir) = support::tiny_models("arch_mutation") else {
        return;
    };
    let mut rng = fastrand::Rng::with_seed(16);
    for name in FILES {
        let mut bytes = std::fs::read(dir.join(format!("{name}.gguf"))).unwrap();
        let ranges = {
            let file = Gguf::parse(&bytes).unwrap();
            let arch = file.get_str("general.architecture").unwrap().to_string();
            targets(&file, &arch)
        };
        assert!(!ranges.is_empty(), "{name}: no metadata of its own");
        assert!(exercise(&bytes), "{name}: the file itself must load");
        let mut built = 0;
        for case in 0..MUTANTS {
            let (start, end) = ranges[rng.usize(..ranges.len())];
            let mut undo = Vec::new();
            for _ in 0..rng.usize(1..=3) {
                let at = rng.usize(start..end);
                undo.push((at, bytes[at]));
                bytes[at] = match rng.u8(..4) {
                    0 => bytes[at] ^ (1 << rng.u8(..8)),
                    1 => 0,
                    2 => 0xFF,
                    _ => rng.u8(..),
                };
            }
            let result = catch_unwind(AssertUnwindSafe(|| exercise(&bytes)));
            let Ok(loaded) = result else {
                panic!("{name} mutant {case} (bytes {undo:?} in {start}..{end}) panicked");
            };
            built += usize::from(loaded);
            for (at, old) in undo.into_iter().rev() {
                bytes[at] = old;
            }
        }
        eprintln!("{name}: {built} of {MUTANTS} mutants loaded and ran; none panicked");
    }
}

/// A block count far past the file's tensors is refused by the
/// configuration, by name, before anything is sized by it: a mutant of
/// one took 37 s and 16 GB, the configuration spreading a per-layer key
/// given once over every block before the builder counted the tensors.
#[test]
fn a_block_count_past_the_tensors_is_refused_before_it_sizes_anything() {
    let Some(dir) = support::tiny_models("arch_mutation_blocks") else {
        return;
    };
    for name in ["qwen35", "lfm2", "llama"] {
        let mut bytes = std::fs::read(dir.join(format!("{name}.gguf"))).unwrap();
        let at = {
            let file = Gguf::parse(&bytes).unwrap();
            let mut kvs = file.metadata().peekable();
            let mut at = None;
            while let Some(kv) = kvs.next() {
                let end = kvs.peek().map_or(file.data_offset(), |next| next.offset);
                if kv.key.ends_with(".block_count") {
                    at = Some(end - 4);
                }
            }
            at.expect("a block count")
        };
        bytes[at..at + 4].copy_from_slice(&0xE893_0004u32.to_le_bytes());
        let file = Gguf::parse(&bytes).unwrap();
        // The configuration itself refuses it (its per-layer values would
        // be the first thing sized by the count).
        let err = ModelConfig::from_gguf(&file).expect_err("a lying block count");
        assert!(Model::from_gguf(&file).is_err());
        let message = err.to_string();
        assert!(
            message.contains("block_count") && message.contains("tensors"),
            "{name}: {message}"
        );
    }
}
