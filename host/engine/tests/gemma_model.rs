//! Gemma 3 270M (Q4_K_M, from the PyPI wheels `scripts/fetch-model.sh
//! gemma3` assembles) loaded from its GGUF file and run by the engine,
//! against the independent NumPy forward pass (tests/reference/forward_ref.py,
//! written from Gemma 3's definition, float64 over the tensors the `gguf`
//! package dequantizes: Q5_0, Q4_K, Q6_K and Q8_0 here): logits at every
//! position of short prompts and at the last positions of one longer than
//! the 512-token window of its local layers, and greedy continuations
//! through the `Engine`; then its tokenizer against transformers'
//! conversion of the same GGUF vocabulary on the tokenizer corpus.
//! Without the model or the Python venv the tests skip with one line
//! (`bash scripts/fetch-model.sh gemma3`); under `CI=true` they fail.

mod support;

use std::path::PathBuf;
use std::sync::OnceLock;

use pagoda_core::scheduler::SchedulerConfig;
use pagoda_core::KvDtype;
use pagoda_engine::model::{Model, ModelFile};
use pagoda_engine::tokenizer::Tokenizer;
use pagoda_engine::{EngineConfig, KvLayout};

/// Our logits may differ from the f64 reference by this fraction of the
/// reference's logit range (f32 compute; the KV cache's rounding).
/// Measured: printed by the test.
const TOLERANCE_F32: f32 = 2e-5;
const TOLERANCE_F16: f32 = 3e-3;
/// A reference step whose top two logits are closer than this is a near
/// tie: our choice may differ there, and the comparison stops.
const NEAR_TIE: f32 = 0.05;
const GREEDY_TOKENS: u32 = 16;
/// Positions of the long prompt compared (its last ones, past the window).
const TAIL: usize = 8;

/// Texts whose ids (our tokenizer's, BOS first; the tokenizer is checked
/// on its own below) are the prompts: two get greedy continuations.
const TEXTS: [&str; 3] = [
    "The capital of France is",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "Once upon a time, in a small village by the sea, there lived",
];

struct Fixture {
    model: Model,
    quantized: Model,
    prompts: Vec<Vec<u32>>,
    long: Vec<u32>,
    dir: PathBuf,
}

fn fixture() -> Option<&'static Fixture> {
    static FIXTURE: OnceLock<Option<Fixture>> = OnceLock::new();
    FIXTURE
        .get_or_init(|| {
            let path = support::require_gemma("gemma_model")?;
            let python = support::require_python("gemma_model")?;
            let file = ModelFile::open(&path).expect("open the model");
            let gguf = file.gguf().unwrap();
            let tok = Tokenizer::from_gguf(&gguf).expect("the tokenizer");
            let prompts: Vec<Vec<u32>> = TEXTS.iter().map(|t| tok.encode(t, true, false)).collect();
            // Past the window: about 600 tokens of story.
            let long = tok.encode(&TEXTS[2].repeat(45), true, false);
            assert!(long.len() > 560, "{} tokens", long.len());
            let dir = support::scratch_dir("gemma_model");
            // Both jobs in one run of the reference, which reads and
            // dequantizes the model once (longer than its forward passes).
            let mut args = vec![path.clone().into_os_string()];
            for (name, prompts, greedy, tail) in [
                ("short", prompts.as_slice(), GREEDY_TOKENS, 0),
                ("long", std::slice::from_ref(&long), 0, TAIL),
            ] {
                let out = dir.join(name);
                std::fs::create_dir_all(&out).unwrap();
                let file = out.join("prompts.txt");
                support::write_prompts(&file, prompts);
                args.extend([
                    out.into_os_string(),
                    file.into_os_string(),
                    greedy.to_string().into(),
                    "2".into(),
                    tail.to_string().into(),
                ]);
            }
            support::run_reference(&python, "forward_ref.py", &args);
            let model = Model::from_gguf(&gguf).expect("load the model");
            let quantized = Model::load(&path).expect("load the model in place");
            Some(Fixture {
                model,
                quantized,
                prompts,
                long,
                dir,
            })
        })
        .as_ref()
}

#[test]
fn gemma3_config_comes_from_the_file() {
    let Some(f) = fixture() else { return };
    let c = f.quantized.config();
    assert_eq!(
        (c.vocab, c.hidden, c.layers, c.q_heads, c.kv_heads, c.head_dim),
        (262_144, 640, 18, 4, 1, 256)
    );
    assert_eq!(f.quantized.architecture(), "gemma3");
    assert!(f.quantized.is_tied());
    assert_eq!(f.model.config(), c);
}

#[test]
fn gemma3_logits_match_the_reference() {
    let Some(f) = fixture() else { return };
    let runs = [
        ("dense", &f.model, KvDtype::F32, TOLERANCE_F32),
        ("quantized", &f.quantized, KvDtype::F32, TOLERANCE_F32),
        ("quantized", &f.quantized, KvDtype::F16, TOLERANCE_F16),
    ];
    for (name, model, dtype, tolerance) in runs {
        let cases = f
            .prompts
            .iter()
            .enumerate()
            .map(|(i, p)| (format!("short/logits_{i}.f32"), p, p.len()))
            .chain([("long/logits_0.f32".to_string(), &f.long, TAIL)]);
        for (file, tokens, tail) in cases {
            let reference = support::read_f32s(&f.dir.join(&file));
            let ours = support::logits_of_last(model, tokens, dtype, 64, tail);
            let (diff, range) = support::max_diff(&ours, &reference);
            println!(
                "{name} {dtype:?} {file} ({} tokens, last {tail}): max |diff| {diff:.3e}, logit range {range:.2} ({:.2e} of it)",
                tokens.len(),
                diff / range
            );
            assert!(
                diff <= tolerance * range,
                "{name} {dtype:?} {file}: max |diff| {diff} > {tolerance} × range {range}"
            );
        }
    }
}

#[test]
fn gemma3_windowed_pages_leave_the_pool_and_change_no_token() {
    let Some(f) = fixture() else { return };
    let config = EngineConfig {
        kv_pages: 128,
        kv_dtype: KvDtype::F32,
        scheduler: SchedulerConfig {
            // Chunks of 128: windowed pages go mid-prefill too.
            token_budget: 128,
            ..SchedulerConfig::default()
        },
        ..EngineConfig::default()
    };
    let model = &f.quantized;
    let prompts = std::slice::from_ref(&f.long);
    let support::GreedyRun {
        outputs: grouped,
        decoding_peak: held,
        ..
    } = support::greedy_run(model, &config, true, prompts, 8);
    let support::GreedyRun {
        outputs: every_layer,
        decoding_peak: held_full,
        ..
    } = support::greedy_run(model, &config, false, prompts, 8);
    // The same arithmetic over the same keys, from other pages.
    assert_eq!(grouped, every_layer);
    let layout = KvLayout::for_model(model);
    let groups = layout.groups();
    assert_eq!(
        (groups.full(), groups.windowed(), groups.window()),
        (1, 5, 512)
    );
    // Decoding at ~600 tokens: every page of the global group, a window
    // and a page of each windowed one; against 18 layers' pages per token
    // page without groups.
    let context = (f.long.len() + 8) as u64;
    assert!(u64::from(held) <= groups.pages_at(context));
    let bytes_grouped = f64::from(held) * 3.0;
    let bytes_full = f64::from(held_full) * 18.0;
    println!(
        "{} tokens: grouped pages held {held} (3 layers each), one group {held_full} (18 layers \
         each): {:.1}% of the bytes",
        f.long.len(),
        100.0 * bytes_grouped / bytes_full
    );
    // Without dropping, each token page would take a page in all six groups.
    assert!(held < held_full * groups.count());
}

#[test]
fn gemma3_greedy_continuations_match_the_reference() {
    let Some(f) = fixture() else { return };
    for (name, model) in [("dense", &f.model), ("quantized", &f.quantized)] {
        let outputs = support::greedy_outputs(model, KvDtype::F32, &f.prompts[..2], GREEDY_TOKENS);
        for (i, ours) in outputs.iter().enumerate() {
            let reference = support::read_greedy(&f.dir.join(format!("short/greedy_{i}.txt")));
            let label = format!("{name} prompt {i}");
            let same = support::agree_until_a_near_tie(&label, ours, &reference, NEAR_TIE);
            println!("{label}: {same} of {GREEDY_TOKENS} greedy tokens agree");
        }
    }
}
