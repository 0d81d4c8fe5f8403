//! SentencePiece-style BPE (`llama`) against `sentencepiece` itself: the
//! reference trains a tiny BPE model with byte fallback, writes it as a
//! tokenizer-only GGUF the way llama.cpp's converter does, and encodes and
//! decodes the corpus with the library.

mod tokenizer_support;

use pagoda_core::gguf::Gguf;
use pagoda_engine::tokenizer::{StreamDecoder, TokenType, Tokenizer};
use tokenizer_support::*;

#[test]
fn spm_matches_sentencepiece() {
    let Some(python) = require_python("spm_matches_sentencepiece") else {
        return;
    };
    let dir = scratch_dir("tokenizer_spm");
    run_reference(&python, &["spm", dir.to_str().unwrap()]);
    let bytes = std::fs::read(dir.join("spm.gguf")).unwrap();
    let tok = Tokenizer::from_gguf(&Gguf::parse(&bytes).unwrap()).unwrap();
    let texts = read_hex_lines(&dir.join("texts.hex"));
    let want = read_id_lines(&dir.join("ids_plain.txt"));
    let decoded = read_hex_lines(&dir.join("decoded.hex"));
    assert_eq!(texts.len(), want.len());
    let (mut bad, mut fallback) = (0, 0);
    for (i, t) in texts.iter().enumerate() {
        let ours = tok.encode(t, false, false);
        if ours != want[i] {
            bad += 1;
            eprintln!("#{i} {t:?}\n ours {ours:?}\n want {:?}", want[i]);
        }
        fallback += usize::from(
            ours.iter()
                .any(|&id| tok.token_type(id) == Some(TokenType::Byte)),
        );
        // The file says add_bos_token: BOS first, then the same ids.
        let with_bos = tok.encode(t, true, false);
        assert_eq!(with_bos.first().copied(), tok.bos());
        assert_eq!(&with_bos[1..], &want[i][..]);
        // Decoding, with or without the BOS, is what sentencepiece decodes.
        assert_eq!(tok.decode(&want[i], true), decoded[i], "decode #{i}");
        assert_eq!(
            tok.decode(&with_bos, true),
            decoded[i],
            "decode with BOS #{i}"
        );
        assert_eq!(&decoded[i], t, "round trip #{i}");
        let mut stream = StreamDecoder::new(true);
        let mut chunks: Vec<String> = with_bos.iter().map(|&id| stream.push(&tok, id)).collect();
        chunks.push(stream.finish());
        assert_eq!(chunks.concat(), decoded[i], "stream #{i}");
    }
    assert_eq!(
        bad,
        0,
        "{bad} of {} encodings differ from sentencepiece",
        texts.len()
    );
    assert!(fallback > 20, "only {fallback} texts used byte fallback");
    eprintln!(
        "{} texts ({fallback} with byte fallback) encode and decode as sentencepiece does (vocab {})",
        texts.len(),
        tok.vocab_size()
    );
}

/// Gemma 3's 262,144-token SentencePiece vocabulary (no space prefix, byte
/// fallback, control tokens such as `<start_of_turn>`) against
/// transformers' conversion of the same GGUF arrays, on the corpus: ids
/// without special-token parsing, and decodes.
#[test]
fn gemma3_vocabulary_matches_transformers() {
    let Some(model) = require_gemma("gemma3_vocabulary_matches_transformers") else {
        return;
    };
    let Some(python) = require_python("gemma3_vocabulary_matches_transformers") else {
        return;
    };
    let dir = scratch_dir("tokenizer_gemma3");
    run_reference(
        &python,
        &["gemma", model.to_str().unwrap(), dir.to_str().unwrap()],
    );
    let bytes = std::fs::read(&model).unwrap();
    let tok = Tokenizer::from_gguf(&Gguf::parse(&bytes).unwrap()).unwrap();
    assert_eq!(tok.vocab_size(), 262_144);
    let texts = read_hex_lines(&dir.join("texts.hex"));
    let want = read_id_lines(&dir.join("ids_plain.txt"));
    let decoded = read_hex_lines(&dir.join("decoded.hex"));
    let mut bad = 0;
    for (i, t) in texts.iter().enumerate() {
        let ours = tok.encode(t, false, false);
        if ours != want[i] {
            bad += 1;
            if bad <= 5 {
                eprintln!("#{i} {t:?}\n ours {ours:?}\n want {:?}", want[i]);
            }
        }
        assert_eq!(tok.decode(&want[i], false), decoded[i], "decode #{i}");
    }
    assert_eq!(bad, 0, "{bad} of {} encodings differ", texts.len());
    // BOS first (add_bos_token), no space prefix.
    let ids = tok.encode("Hello", true, false);
    assert_eq!(ids.first().copied(), tok.bos());
    assert_eq!(tok.decode(&ids[1..], false), "Hello");
    eprintln!(
        "{} texts encode and decode as transformers does",
        texts.len()
    );
}
