//! What a structured output costs per token, in isolation: the
//! llguidance mask for a JSON schema over a real model's vocabulary,
//! computed (`prepare`), applied to a row of logits (`apply`) and advanced
//! (`accept`) token by token along a sampled answer, on one thread:
//!
//! ```text
//! PAGODA_MODEL=SmolLM2.gguf [PAGODA_GEMMA_MODEL=gemma3.gguf] \
//!     cargo bench -p pagoda-engine --bench constraint
//! ```
//!
//! The answer is sampled from random logits under the mask (seeded), so
//! every step is a real step of the grammar; each figure is the median over
//! the steps of 20 answers, with the slowest step beside it. The engine
//! prepares a step's masks on a thread of its own while the model runs, so
//! this is the time that thread needs, not time added to the step unless
//! it exceeds the step's.

use std::path::PathBuf;
use std::time::Instant;

use pagoda_engine::structured::{OutputSpec, Structured};
use pagoda_engine::TextModel;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn schema() -> serde_json::Value {
    serde_json::json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 24},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
            "tags": {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "maxItems": 4},
            "address": {"type": "object", "properties": {
                "city": {"type": "string", "maxLength": 16},
                "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                "required": ["city", "zip"], "additionalProperties": false}
        },
        "required": ["name", "age", "tags", "address"],
        "additionalProperties": false
    })
}

fn bench(path: PathBuf) {
    let text = match TextModel::load(&path) {
        Ok(t) => t,
        Err(e) => {
            println!("{}: cannot load: {e}", path.display());
            return;
        }
    };
    let vocab = text.model.config().vocab;
    let started = Instant::now();
    let structured = Structured::new(&text.tokenizer, vocab).expect("the vocabulary's token trie");
    let trie = started.elapsed().as_secs_f64();
    let started = Instant::now();
    let constraint = structured
        .compile(&OutputSpec::JsonSchema(schema()))
        .expect("the schema compiles");
    let compile = started.elapsed().as_secs_f64();
    let mut rng = fastrand::Rng::with_seed(7);
    let mut logits = vec![0f32; vocab as usize];
    let (mut prepare, mut apply, mut accept) = (Vec::new(), Vec::new(), Vec::new());
    let mut tokens = 0;
    for _ in 0..20 {
        let mut state = constraint.0.start();
        for _ in 0..200 {
            if state.is_finished() {
                break;
            }
            for l in logits.iter_mut() {
                *l = rng.f32() * 8.0;
            }
            let t = Instant::now();
            state.prepare().expect("a mask");
            prepare.push(t.elapsed().as_secs_f64());
            let t = Instant::now();
            state.apply(&mut logits);
            apply.push(t.elapsed().as_secs_f64());
            let token = (0..logits.len())
                .max_by(|&a, &b| logits[a].total_cmp(&logits[b]))
                .expect("a vocabulary") as u32;
            let t = Instant::now();
            state.accept(token).expect("an allowed token");
            accept.push(t.elapsed().as_secs_f64());
            tokens += 1;
        }
    }
    let slowest = prepare.iter().cloned().fold(0.0, f64::max);
    println!(
        "{} ({vocab} tokens): trie {:.0} ms once, schema compiled in {:.1} ms; per token over {tokens} steps: \
         mask {:.0} µs (slowest {:.0} µs), apply {:.0} µs, accept {:.0} µs",
        path.file_name().map_or("model".into(), |n| n.to_string_lossy()),
        trie * 1e3,
        compile * 1e3,
        median(prepare) * 1e6,
        slowest * 1e6,
        median(apply) * 1e6,
        median(accept) * 1e6,
    );
}

fn main() {
    let models: Vec<PathBuf> = ["PAGODA_MODEL", "PAGODA_GEMMA_MODEL"]
        .iter()
        .filter_map(|v| std::env::var_os(v).map(PathBuf::from))
        .collect();
    if models.is_empty() {
        println!("set PAGODA_MODEL (and PAGODA_GEMMA_MODEL) to a GGUF file to measure");
    }
    for path in models {
        bench(path);
    }
}
