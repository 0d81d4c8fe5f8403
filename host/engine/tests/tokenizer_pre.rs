//! Each pre-tokenizer's pieces against the Hugging Face `tokenizers`
//! pre-tokenizer of the original model's tokenizer.json: checks the split
//! itself, which ids alone may not show (SmolLM2's vocabulary has no
//! multi-digit pieces, so `llama-bpe`'s digit triples and `qwen2`'s single
//! digits give the same ids there).

mod tokenizer_support;

use pagoda_engine::tokenizer::PreTokenizer;
use tokenizer_support::*;

fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn pieces_match_reference() {
    let Some(python) = require_python("pieces_match_reference") else {
        return;
    };
    let dir = scratch_dir("tokenizer_pre");
    run_reference(&python, &["pre", dir.to_str().unwrap()]);
    let texts = read_hex_lines(&dir.join("texts.hex"));
    for name in [
        "smollm",
        "gpt-2",
        "llama-bpe",
        "qwen2",
        "qwen35",
        "starcoder",
        "refact",
        "mpt",
        "olmo",
        "dbrx",
        "gpt-4o",
        "minimax-m2",
        "deepseek-v3",
        "deepseek-llm",
        "seed-coder",
        "tekken",
        "kimi-k2",
    ] {
        let pre = PreTokenizer::from_name(name).unwrap();
        let want = std::fs::read_to_string(dir.join(format!("pieces_{name}.txt"))).unwrap();
        let want: Vec<&str> = want.lines().collect();
        assert_eq!(want.len(), texts.len());
        let mut pieces = 0;
        for (t, want) in texts.iter().zip(&want) {
            let mut ours = Vec::new();
            pre.split(t, &mut |p| ours.push(hex(p)));
            pieces += ours.len();
            assert_eq!(ours.join(" "), *want, "{name}: {t:?}");
        }
        eprintln!(
            "{name}: {} texts, {pieces} pieces as the reference splits them",
            texts.len()
        );
    }
}
