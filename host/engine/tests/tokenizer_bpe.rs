//! Byte-level BPE on SmolLM2's real vocabulary against the Hugging Face
//! `tokenizers` library, run with the same vocabulary and merges under each
//! pre-tokenizer name's original pipeline.

mod tokenizer_support;

use std::time::Instant;

use pagoda_core::gguf::Gguf;
use pagoda_engine::tokenizer::{StreamDecoder, Tokenizer};
use tokenizer_support::*;

/// Characters of the corpus whose byte has no piece in SmolLM2's vocabulary.
const LACKING: &[char] = &['\u{4}', '\u{6}'];

/// SmolLM2's tokenizer metadata rewritten as a tokenizer-only file whose
/// `tokenizer.ggml.pre` is `pre`.
fn with_pre(gguf: &Gguf<'_>, pre: &str) -> Vec<u8> {
    let strs = |key| {
        gguf.get_str_array(key)
            .unwrap()
            .iter()
            .map(|b| String::from_utf8(b.to_vec()).unwrap())
            .collect()
    };
    let types = gguf
        .get_i32_array("tokenizer.ggml.token_type")
        .unwrap()
        .iter()
        .collect();
    gguf_bytes(&[
        ("tokenizer.ggml.model", Meta::Str("gpt2".into())),
        ("tokenizer.ggml.pre", Meta::Str(pre.into())),
        (
            "tokenizer.ggml.tokens",
            Meta::Strs(strs("tokenizer.ggml.tokens")),
        ),
        ("tokenizer.ggml.token_type", Meta::I32s(types)),
        (
            "tokenizer.ggml.merges",
            Meta::Strs(strs("tokenizer.ggml.merges")),
        ),
        ("tokenizer.ggml.bos_token_id", Meta::U32(1)),
        ("tokenizer.ggml.eos_token_id", Meta::U32(2)),
    ])
}

fn check_pre(model: &std::path::Path, python: &std::path::Path, pre: &str) {
    let dir = scratch_dir(&format!("tokenizer_bpe_{pre}"));
    let d = dir.to_str().unwrap();
    run_reference(python, &["bpe", model.to_str().unwrap(), pre, d]);
    let bytes = std::fs::read(model).unwrap();
    let gguf = Gguf::parse(&bytes).unwrap();
    let file = if pre == "smollm" {
        bytes.clone()
    } else {
        with_pre(&gguf, pre)
    };
    let t0 = Instant::now();
    let tok = Tokenizer::from_gguf(&Gguf::parse(&file).unwrap()).unwrap();
    let built = t0.elapsed();

    let texts = read_hex_lines(&dir.join("texts.hex"));
    let special = read_id_lines(&dir.join("ids_special.txt"));
    let plain = read_id_lines(&dir.join("ids_plain.txt"));
    assert_eq!(texts.len(), special.len());
    let t0 = Instant::now();
    let ours: Vec<Vec<u32>> = texts.iter().map(|t| tok.encode(t, false, true)).collect();
    let encoded = t0.elapsed();
    let total: usize = ours.iter().map(Vec::len).sum();
    let mut bad = 0;
    for (i, (t, want)) in texts.iter().zip(&special).enumerate() {
        if &ours[i] != want {
            bad += 1;
            eprintln!(
                "{pre} special #{i} {t:?}\n ours {:?}\n want {want:?}",
                ours[i]
            );
        }
        let plain_ours = tok.encode(t, false, false);
        if plain_ours != plain[i] {
            bad += 1;
            eprintln!(
                "{pre} plain #{i} {t:?}\n ours {plain_ours:?}\n want {:?}",
                plain[i]
            );
        }
        // Round trips, but for the control characters whose bytes SmolLM2's
        // vocabulary has no piece for (both encoders drop them).
        if !t.contains(LACKING) {
            assert_eq!(&tok.decode(&ours[i], false), t, "round trip #{i}");
            assert_eq!(&tok.decode(&plain_ours, false), t, "plain round trip #{i}");
        }
    }
    assert_eq!(
        bad,
        0,
        "{pre}: {bad} of {} encodings differ",
        2 * texts.len()
    );
    // The reference's last text is one long document (about 10k tokens).
    let long = texts.last().unwrap();
    let t0 = Instant::now();
    let n = tok.encode(long, false, true).len();
    eprintln!(
        "{pre}: {} bytes -> {n} tokens in {:?}",
        long.len(),
        t0.elapsed()
    );
    eprintln!(
        "{pre}: {} texts, {total} tokens identical to the reference; built in {built:?}, encoded in {encoded:?} (test profile, opt-level 1)",
        texts.len()
    );
}

#[test]
fn smollm_matches_reference() {
    let (Some(model), Some(python)) = (
        require_model("smollm_matches_reference"),
        require_python("smollm_matches_reference"),
    ) else {
        return;
    };
    check_pre(&model, &python, "smollm");
}

#[test]
fn other_pre_tokenizers_match_reference() {
    let (Some(model), Some(python)) = (
        require_model("other_pre_tokenizers_match_reference"),
        require_python("other_pre_tokenizers_match_reference"),
    ) else {
        return;
    };
    // `dbrx`: Llama 3's split without its whole-word shortcut.
    for pre in [
        "gpt-2",
        "llama-bpe",
        "qwen2",
        "dbrx",
        "deepseek-v3",
        "deepseek-llm",
        "seed-coder",
        "tekken",
        "kimi-k2",
    ] {
        check_pre(&model, &python, pre);
    }
}

/// Random id sequences (half single-byte pieces, so characters split across
/// tokens): `decode` equals the reference's decoder and streamed chunks
/// concatenate to it, each chunk whole characters.
#[test]
fn decode_and_stream_match_reference() {
    let (Some(model), Some(python)) = (
        require_model("decode_and_stream_match_reference"),
        require_python("decode_and_stream_match_reference"),
    ) else {
        return;
    };
    let dir = scratch_dir("tokenizer_bpe_stream");
    run_reference(
        &python,
        &[
            "bpe",
            model.to_str().unwrap(),
            "smollm",
            dir.to_str().unwrap(),
        ],
    );
    let bytes = std::fs::read(&model).unwrap();
    let tok = Tokenizer::from_gguf(&Gguf::parse(&bytes).unwrap()).unwrap();
    let seqs = read_id_lines(&dir.join("random_ids.txt"));
    let want = read_hex_lines(&dir.join("random_decoded.hex"));
    let mut replaced = 0;
    for (ids, want) in seqs.iter().zip(&want) {
        assert_eq!(&tok.decode(ids, false), want, "{ids:?}");
        let mut stream = StreamDecoder::new(false);
        let mut chunks: Vec<String> = ids.iter().map(|&id| stream.push(&tok, id)).collect();
        chunks.push(stream.finish());
        assert_eq!(&chunks.concat(), want, "{ids:?}");
        let fffd = |s: &str| s.matches('\u{FFFD}').count();
        assert_eq!(chunks.iter().map(|c| fffd(c)).sum::<usize>(), fffd(want));
        replaced += fffd(want);
    }
    eprintln!(
        "{} random sequences decoded and streamed as the reference ({replaced} U+FFFD)",
        seqs.len()
    );
}

#[test]
fn metadata_of_smollm() {
    let Some(model) = require_model("metadata_of_smollm") else {
        return;
    };
    let bytes = std::fs::read(&model).unwrap();
    let tok = Tokenizer::from_gguf(&Gguf::parse(&bytes).unwrap()).unwrap();
    // Values llama.cpp's converter wrote into the file.
    assert_eq!(tok.vocab_size(), 49152);
    assert_eq!(
        (tok.bos(), tok.eos(), tok.add_bos()),
        (Some(1), Some(2), false)
    );
    assert_eq!(tok.token_text(2), Some("<|im_end|>"));
    assert_eq!(tok.end_of_generation(), &[0, 2]);
    assert_eq!(tok.encode("<|im_start|>", true, true), vec![1]);
}

fn smollm() -> Option<&'static Tokenizer> {
    static TOK: std::sync::OnceLock<Option<Tokenizer>> = std::sync::OnceLock::new();
    TOK.get_or_init(|| {
        let model = require_model("smollm_round_trips")?;
        let bytes = std::fs::read(model).ok()?;
        Tokenizer::from_gguf(&Gguf::parse(&bytes).ok()?).ok()
    })
    .as_ref()
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

    /// Any text whose bytes all have pieces comes back from decode(encode).
    #[test]
    fn smollm_round_trips(text in "(?s).{0,64}", parse in proptest::prelude::any::<bool>()) {
        let Some(tok) = smollm() else { return Ok(()) };
        // Bytes SmolLM2 has no piece for: the controls above, and the lead
        // bytes 0xF1/0xF2 (planes 4 to 11).
        let lacking = |c: char| LACKING.contains(&c) || ('\u{40000}'..'\u{C0000}').contains(&c)
            || matches!(c, '\u{13}' | '\u{14}' | '\u{16}' | '\u{1d}');
        let text: String = text.chars().filter(|&c| !lacking(c)).collect();
        proptest::prop_assert_eq!(tok.decode(&tok.encode(&text, false, parse), false), text);
    }
}
