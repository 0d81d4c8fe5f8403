//! Malformed tokenizer metadata is refused with a typed error, and no input
//! makes `encode`, `decode` or the stream decoder panic.

mod tokenizer_support;

use pagoda_core::gguf::{Gguf, GgufError};
use pagoda_engine::tokenizer::{StreamDecoder, Tokenizer, TokenizerError};
use proptest::prelude::*;
use tokenizer_support::*;

fn strs(v: &[&str]) -> Meta {
    Meta::Strs(v.iter().map(|s| s.to_string()).collect())
}

/// A tiny byte-level vocabulary: a control token, a few pieces, two merges.
fn gpt2(pre: &str) -> Vec<(&'static str, Meta)> {
    vec![
        ("tokenizer.ggml.model", Meta::Str("gpt2".into())),
        ("tokenizer.ggml.pre", Meta::Str(pre.into())),
        (
            "tokenizer.ggml.tokens",
            strs(&["<s>", "a", "b", "ab", "Ġ", "Ġa", "Ã", "©"]),
        ),
        (
            "tokenizer.ggml.token_type",
            Meta::I32s(vec![3, 1, 1, 1, 1, 1, 1, 1]),
        ),
        ("tokenizer.ggml.merges", strs(&["a b", "Ġ a"])),
        ("tokenizer.ggml.bos_token_id", Meta::U32(0)),
    ]
}

/// A tiny SentencePiece vocabulary with all 256 byte pieces.
fn spm() -> Vec<(&'static str, Meta)> {
    let mut tokens: Vec<String> = ["<unk>", "<s>", "</s>", "▁", "a", "b", "▁a", "ab"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut types = vec![2, 3, 3, 1, 1, 1, 1, 1];
    for b in 0..=255u8 {
        tokens.push(format!("<0x{b:02X}>"));
        types.push(6);
    }
    let scores = (0..tokens.len()).map(|i| -(i as f32)).collect();
    vec![
        ("tokenizer.ggml.model", Meta::Str("llama".into())),
        ("tokenizer.ggml.tokens", Meta::Strs(tokens)),
        ("tokenizer.ggml.scores", Meta::F32s(scores)),
        ("tokenizer.ggml.token_type", Meta::I32s(types)),
        ("tokenizer.ggml.bos_token_id", Meta::U32(1)),
        ("tokenizer.ggml.eos_token_id", Meta::U32(2)),
        ("tokenizer.ggml.unknown_token_id", Meta::U32(0)),
    ]
}

fn build(kvs: &[(&str, Meta)]) -> Result<Tokenizer, TokenizerError> {
    let bytes = gguf_bytes(kvs);
    Tokenizer::from_gguf(&Gguf::parse(&bytes).unwrap())
}

fn set(
    mut kvs: Vec<(&'static str, Meta)>,
    key: &'static str,
    value: Meta,
) -> Vec<(&'static str, Meta)> {
    kvs.retain(|(k, _)| *k != key);
    kvs.push((key, value));
    kvs
}

fn without(mut kvs: Vec<(&'static str, Meta)>, key: &str) -> Vec<(&'static str, Meta)> {
    kvs.retain(|(k, _)| *k != key);
    kvs
}

#[test]
fn well_formed_files_load() {
    for pre in ["default", "gpt-2", "smollm", "llama-bpe", "qwen2"] {
        build(&gpt2(pre)).unwrap();
    }
    // Byte-level files get no BOS unless they ask, but Tekken's and Llama
    // 3's do (as llama.cpp reads them), and any file's own key decides.
    assert!(!build(&gpt2("qwen2")).unwrap().add_bos());
    assert!(build(&gpt2("tekken")).unwrap().add_bos());
    assert!(build(&gpt2("pixtral")).unwrap().add_bos());
    assert!(build(&gpt2("llama-bpe")).unwrap().add_bos());
    // GLM's, split as Llama 3's, never.
    assert!(!build(&gpt2("glm4")).unwrap().add_bos());
    let asks = |pre, add| set(gpt2(pre), "tokenizer.ggml.add_bos_token", Meta::Bool(add));
    assert!(!build(&asks("tekken", false)).unwrap().add_bos());
    assert!(build(&asks("qwen2", true)).unwrap().add_bos());
    let tok = build(&spm()).unwrap();
    // SentencePiece defaults when the file is silent: BOS added, space prefix.
    assert!(tok.add_bos());
    // "▁ab▁a": "▁a" (score -6) outranks "ab" (-7) and merges first, leftmost
    // first, after which "ab" no longer has its "a".
    assert_eq!(tok.encode("ab a", true, false), vec![1, 6, 5, 6]);
}

#[test]
fn malformed_metadata_is_refused() {
    let err = |kvs: Vec<(&'static str, Meta)>| build(&kvs).unwrap_err();
    assert!(matches!(
        err(set(gpt2("smollm"), "tokenizer.ggml.pre", Meta::Str("mystery".into()))),
        TokenizerError::UnsupportedPre(p) if p == "mystery"
    ));
    assert!(matches!(
        err(set(gpt2("smollm"), "tokenizer.ggml.model", Meta::Str("bert".into()))),
        TokenizerError::UnsupportedModel(m) if m == "bert"
    ));
    assert!(matches!(
        err(set(
            spm(),
            "tokenizer.ggml.scores",
            Meta::F32s(vec![0.0; 3])
        )),
        TokenizerError::LengthMismatch {
            key: "tokenizer.ggml.scores",
            found: 3,
            expected: 264
        }
    ));
    assert!(matches!(
        err(set(
            gpt2("smollm"),
            "tokenizer.ggml.token_type",
            Meta::I32s(vec![1; 7])
        )),
        TokenizerError::LengthMismatch {
            key: "tokenizer.ggml.token_type",
            found: 7,
            expected: 8
        }
    ));
    assert!(matches!(
        err(set(
            gpt2("smollm"),
            "tokenizer.ggml.token_type",
            Meta::I32s(vec![1, 1, 1, 9, 1, 1, 1, 1])
        )),
        TokenizerError::BadTokenType { id: 3, ty: 9 }
    ));
    assert!(matches!(
        err(set(
            gpt2("smollm"),
            "tokenizer.ggml.merges",
            strs(&["a b", "a c"])
        )),
        TokenizerError::MergeUnknownToken { index: 1, .. }
    ));
    // "b a" names known pieces but yields "ba", which is not a token.
    assert!(matches!(
        err(set(gpt2("smollm"), "tokenizer.ggml.merges", strs(&["b a"]))),
        TokenizerError::MergeUnknownToken { index: 0, .. }
    ));
    assert!(matches!(
        err(set(gpt2("smollm"), "tokenizer.ggml.merges", strs(&["ab"]))),
        TokenizerError::BadMerge { index: 0, .. }
    ));
    assert!(matches!(
        err(set(spm(), "tokenizer.ggml.bos_token_id", Meta::U32(264))),
        TokenizerError::IdOutOfRange {
            key: "tokenizer.ggml.bos_token_id",
            id: 264,
            vocab: 264
        }
    ));
    assert!(matches!(
        err(set(
            spm(),
            "tokenizer.ggml.eos_token_id",
            Meta::Str("</s>".into())
        )),
        TokenizerError::Gguf(GgufError::WrongType { .. })
    ));
    assert!(matches!(
        err(without(gpt2("smollm"), "tokenizer.ggml.merges")),
        TokenizerError::Gguf(GgufError::MissingKey { .. })
    ));
    assert!(matches!(
        err(set(spm(), "tokenizer.ggml.tokens", Meta::Strs(vec![]))),
        TokenizerError::BadVocabSize(0)
    ));
}

fn tokenizers() -> Vec<Tokenizer> {
    let mut all: Vec<Tokenizer> = ["gpt-2", "smollm", "llama-bpe", "qwen2"]
        .iter()
        .map(|p| build(&gpt2(p)).unwrap())
        .collect();
    all.push(build(&spm()).unwrap());
    all
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn encode_never_panics(text in any::<String>(), add in any::<bool>(), parse in any::<bool>()) {
        for tok in tokenizers() {
            let ids = tok.encode(&text, add, parse);
            prop_assert!(ids.iter().all(|&id| id < tok.vocab_size()));
        }
    }

    /// Any ids, in range or not: the streamed chunks make up `decode`.
    #[test]
    fn stream_concatenates_to_decode(ids in proptest::collection::vec(0u32..300, 0..40), skip in any::<bool>()) {
        for tok in tokenizers() {
            let mut stream = StreamDecoder::new(skip);
            let mut text: String = ids.iter().map(|&id| stream.push(&tok, id)).collect();
            text.push_str(&stream.finish());
            prop_assert_eq!(text, tok.decode(&ids, skip));
        }
    }

    /// SentencePiece with full byte fallback spells any text back exactly.
    #[test]
    fn spm_round_trips(text in any::<String>()) {
        let tok = build(&spm()).unwrap();
        prop_assert_eq!(tok.decode(&tok.encode(&text, true, false), true), text);
    }
}
