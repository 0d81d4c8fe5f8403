//! Fuzzes what is built from a model file's metadata: any input that parses
//! as GGUF goes through the tokenizer, the chat template and the model
//! configuration and program (every architecture's builder), then encoding,
//! decoding, streaming and rendering; each
//! succeeds or returns its typed error, none panics. Seed the corpus with a
//! tokenizer-only file (e.g. `tests/reference/tokenizer_ref.py` writes one)
//! so mutations start from valid vocabularies:
//!   cargo +nightly fuzz run text -- -max_total_time=60
#![no_main]

use libfuzzer_sys::fuzz_target;
use pagoda_core::gguf::Gguf;
use pagoda_engine::chat::{ChatMessage, ChatTemplate};
use pagoda_engine::model::{Model, ModelConfig};
use pagoda_engine::tokenizer::{StreamDecoder, Tokenizer};

fuzz_target!(|data: &[u8]| {
    let Ok(file) = Gguf::parse(data) else { return };
    let _ = ModelConfig::from_gguf(&file);
    // Every architecture's builder reads the file's tensors by name.
    let _ = Model::from_gguf(&file);
    let Ok(tokenizer) = Tokenizer::from_gguf(&file) else {
        return;
    };
    // The input's own bytes double as text and as ids.
    let text = String::from_utf8_lossy(&data[..data.len().min(256)]);
    let ids = tokenizer.encode(&text, true, true);
    let _ = tokenizer.decode(&ids, false);
    let raw: Vec<u32> = data
        .chunks(2)
        .take(64)
        .map(|c| u32::from(c[0]) << 8 | u32::from(*c.last().unwrap()))
        .collect();
    let mut stream = StreamDecoder::continuing(true);
    for &id in &raw {
        let _ = stream.push(&tokenizer, id);
    }
    let _ = stream.finish();
    let piece = |id: Option<u32>| {
        id.and_then(|id| tokenizer.token_text(id))
            .unwrap_or_default()
            .to_string()
    };
    if let Ok(Some(template)) =
        ChatTemplate::from_gguf(&file, &piece(tokenizer.bos()), &piece(tokenizer.eos()))
    {
        let _ = template.render(&[ChatMessage::new("user", text.as_ref())], true);
    }
});
