//! Bounded mutation test of everything built from a model file's metadata:
//! hundreds of mutants of the real SmolLM2 file (bytes flipped in the
//! vocabulary, merges, token types, special ids, chat template and
//! hyper-parameters) go through the tokenizer, the chat template and the
//! model configuration, and then through encoding, decoding and rendering.
//! None may panic: each step succeeds or returns its typed error.

mod support;

use std::panic::{catch_unwind, AssertUnwindSafe};

use pagoda_core::gguf::{Gguf, Value};
use pagoda_engine::chat::{ChatMessage, ChatTemplate};
use pagoda_engine::model::ModelConfig;
use pagoda_engine::tokenizer::{StreamDecoder, Tokenizer};

/// Texts every mutant tokenizer encodes.
const TEXTS: [&str; 4] = [
    "Hello, world! 12345 café",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n",
    "   \t\n  def f(x):\n\treturn x ** 2  ",
    "日本語 😀 ÿ\u{0}",
];

/// A small deterministic generator (xorshift), so a failure reproduces.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Byte ranges of the metadata values worth mutating: tokenizer arrays and
/// strings, special ids, the chat template, the architecture's numbers.
fn targets(file: &Gguf<'_>) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut kvs = file.metadata().peekable();
    while let Some(kv) = kvs.next() {
        let start = kv.offset;
        let end = kvs.peek().map_or(file.data_offset(), |next| next.offset);
        let key = kv.key;
        let wanted = key.starts_with("tokenizer.") || key.starts_with("llama.");
        if wanted || matches!(kv.value, Value::String(_)) {
            out.push((start, end));
        }
    }
    out
}

/// Builds everything from `bytes` and uses it; whether a tokenizer was
/// built (and so exercised).
fn exercise(bytes: &[u8], rng: &mut Rng) -> bool {
    let Ok(file) = Gguf::parse(bytes) else {
        return false;
    };
    let _ = ModelConfig::from_gguf(&file);
    let Ok(tokenizer) = Tokenizer::from_gguf(&file) else {
        return false;
    };
    for text in TEXTS {
        let ids = tokenizer.encode(text, true, true);
        let _ = tokenizer.decode(&ids, false);
    }
    let vocab = u64::from(tokenizer.vocab_size());
    let random: Vec<u32> = (0..64).map(|_| rng.below(vocab + 8) as u32).collect();
    let _ = tokenizer.decode(&random, true);
    let mut stream = StreamDecoder::continuing(true);
    for &id in &random {
        let _ = stream.push(&tokenizer, id);
    }
    let _ = stream.finish();
    let text_of = |id: Option<u32>| {
        id.and_then(|id| tokenizer.token_text(id))
            .unwrap_or_default()
            .to_string()
    };
    if let Ok(Some(template)) =
        ChatTemplate::from_gguf(&file, &text_of(tokenizer.bos()), &text_of(tokenizer.eos()))
    {
        let messages = [
            ChatMessage::new("system", "Be brief."),
            ChatMessage::new("user", "Hi <b>&</b>"),
        ];
        let _ = template.render(&messages, true);
    }
    true
}

#[test]
fn mutated_metadata_never_panics_the_tokenizer_template_or_config() {
    let Some(path) = support::require_model("mutated_metadata_never_panics") else {
        return;
    };
    let mut bytes = std::fs::read(&path).unwrap();
    let (ranges, data_offset) = {
        let file = Gguf::parse(&bytes).unwrap();
        (targets(&file), file.data_offset())
    };
    // Only the metadata is mutated (tensor data is not read here).
    let mut rng = Rng(0x5EED_1234_ABCD_EF01);
    let mut built = 0;
    const MUTANTS: usize = 240;
    for case in 0..MUTANTS {
        let (start, end) = ranges[rng.below(ranges.len() as u64) as usize];
        let mut undo = Vec::new();
        for _ in 0..1 + rng.below(3) {
            let at = start + rng.below((end - start) as u64) as usize;
            undo.push((at, bytes[at]));
            bytes[at] = match rng.below(4) {
                0 => bytes[at] ^ (1 << rng.below(8)),
                1 => 0,
                2 => 0xFF,
                _ => rng.next() as u8,
            };
        }
        let mut inner = Rng(rng.next());
        let result = catch_unwind(AssertUnwindSafe(|| exercise(&bytes, &mut inner)));
        let Ok(tokenizer_built) = result else {
            panic!("mutant {case} (bytes {undo:?} in {start}..{end}) panicked");
        };
        built += usize::from(tokenizer_built);
        for (at, old) in undo.into_iter().rev() {
            bytes[at] = old;
        }
    }
    assert!(data_offset > 0);
    eprintln!("{built} of {MUTANTS} mutants built a tokenizer; none panicked");
    // Enough mutants must get past the parser to exercise the tokenizer.
    assert!(
        built >= MUTANTS / 4,
        "only {built} of {MUTANTS} mutants built a tokenizer"
    );
}
