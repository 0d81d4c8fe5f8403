//! Text ↔ token ids from a GGUF's own `tokenizer.ggml.*` metadata, as
//! llama.cpp reads it: byte-level BPE (`gpt2`, with the pre-tokenizer
//! `tokenizer.ggml.pre` names) or SentencePiece-style BPE (`llama`).
//!
//! Written here rather than taken from the `tokenizers` crate: that crate
//! builds from a `tokenizer.json`, not from GGUF arrays, would need its
//! pipeline reassembled per `pre` name anyway, and brings onig/regex
//! machinery for patterns that are a few lines to scan by hand; the tests
//! hold this code to the Python `tokenizers` and `sentencepiece` libraries.
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let bytes = std::fs::read("SmolLM2-135M-Instruct.Q4_1.gguf")?;
//! let gguf = pagoda_core::gguf::Gguf::parse(&bytes)?;
//! let tok = pagoda_engine::tokenizer::Tokenizer::from_gguf(&gguf)?;
//! let ids = tok.encode("<|im_start|>user\nHi!", true, true);
//! assert_eq!(tok.decode(&ids, false), "<|im_start|>user\nHi!");
//! # Ok(()) }
//! ```

mod bpe;
mod chars;
mod error;
mod pretokenize;
mod special;
mod spm;
mod stream;
mod vocab;

use pagoda_core::gguf::Gguf;

pub use error::TokenizerError;
pub use pretokenize::PreTokenizer;
pub use stream::StreamDecoder;
pub use vocab::TokenType;

use bpe::Bpe;
use special::{Fragment, Specials};
use spm::Spm;
use vocab::{optional_bool, optional_id, Vocab};

/// Texts llama.cpp treats as ending generation when they are tokens.
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "<|end_of_text|>",
    "<｜end▁of▁sentence｜>",
];

/// The tokens that end a generation: the file's end tokens and those of
/// [`EOG_TEXTS`] the vocabulary has. A harmony vocabulary (gpt-oss: it has
/// `<|return|>` and `<|call|>`) ends on those two, not on `<|end|>`, which
/// closes its reasoning message before the answer (llama.cpp's rule).
fn end_of_generation(vocab: &Vocab, ids: [Option<u32>; 3]) -> Vec<u32> {
    let mut eog: Vec<u32> = ids.into_iter().flatten().collect();
    eog.extend(EOG_TEXTS.iter().filter_map(|t| vocab.id(t)));
    if let (Some(ret), Some(call)) = (vocab.id("<|return|>"), vocab.id("<|call|>")) {
        let end = vocab.id("<|end|>");
        eog.retain(|&id| Some(id) != end);
        eog.extend([ret, call]);
    }
    eog.sort_unstable();
    eog.dedup();
    eog
}

#[derive(Debug, Clone)]
enum Model {
    Bpe(Box<Bpe>),
    Spm(Box<Spm>),
}

/// A model's tokenizer, built once from its file and shared read-only.
#[derive(Debug, Clone)]
pub struct Tokenizer {
    vocab: Vocab,
    model: Model,
    specials: Specials,
    bos: Option<u32>,
    eos: Option<u32>,
    add_bos: bool,
    add_eos: bool,
    eog: Vec<u32>,
}

impl Tokenizer {
    /// Reads the tokenizer a GGUF describes, refusing metadata that
    /// disagrees with itself (array lengths, merges naming unknown pieces,
    /// ids out of range) or names a model or pre-tokenizer not implemented.
    pub fn from_gguf(gguf: &Gguf<'_>) -> Result<Tokenizer, TokenizerError> {
        let kind = gguf.get_str("tokenizer.ggml.model")?;
        let vocab = Vocab::from_gguf(gguf)?;
        let n = vocab.len();
        let id = |key| optional_id(gguf, key, n);
        let bos = id("tokenizer.ggml.bos_token_id")?;
        let eos = id("tokenizer.ggml.eos_token_id")?;
        let unk = id("tokenizer.ggml.unknown_token_id")?;
        let eot = id("tokenizer.ggml.eot_token_id")?;
        let eom = id("tokenizer.ggml.eom_token_id")?;
        let mut never_bos = false;
        let (model, bos_default) = match kind {
            "gpt2" => {
                let pre = if gguf.get("tokenizer.ggml.pre").is_some() {
                    gguf.get_str("tokenizer.ggml.pre")?
                } else {
                    "default"
                };
                // GLM's chat template writes its own `[gMASK]<sop>`, and
                // llama.cpp never adds a BOS for its files whatever they
                // say (their BOS is `[gMASK]`).
                never_bos = pre == "glm4";
                let pre = PreTokenizer::from_name(pre)?;
                // llama.cpp adds a BOS to Tekken's and Llama 3's files
                // unless they say otherwise.
                let bos_default = matches!(pre, PreTokenizer::Tekken | PreTokenizer::Llama3);
                (
                    Model::Bpe(Box::new(Bpe::from_gguf(gguf, &vocab, pre)?)),
                    bos_default,
                )
            }
            "llama" => {
                let prefix = optional_bool(gguf, "tokenizer.ggml.add_space_prefix", true)?;
                (Model::Spm(Box::new(Spm::new(&vocab, unk, prefix))), true)
            }
            other => return Err(TokenizerError::UnsupportedModel(other.to_owned())),
        };
        let add_bos =
            !never_bos && optional_bool(gguf, "tokenizer.ggml.add_bos_token", bos_default)?;
        let add_eos = optional_bool(gguf, "tokenizer.ggml.add_eos_token", false)?;
        let eog = end_of_generation(&vocab, [eos, eot, eom]);
        Ok(Tokenizer {
            specials: Specials::new(&vocab),
            vocab,
            model,
            bos,
            eos,
            add_bos,
            add_eos,
            eog,
        })
    }

    /// The ids of `text`. `add_special` adds BOS (and EOS) where the file
    /// asks for them; `parse_special` turns control tokens' texts (e.g.
    /// `<|im_start|>`) into their ids instead of spelling them out.
    pub fn encode(&self, text: &str, add_special: bool, parse_special: bool) -> Vec<u32> {
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        if add_special && self.add_bos {
            out.extend(self.bos);
        }
        // SentencePiece's leading space goes before the text and after each
        // special token, as llama.cpp does.
        let mut after_special = true;
        self.specials
            .split(text, parse_special, &mut |fragment| match fragment {
                Fragment::Text(t) => {
                    match &self.model {
                        Model::Bpe(bpe) => bpe.encode(&self.vocab, t, &mut out),
                        Model::Spm(spm) => spm.encode(&self.vocab, t, after_special, &mut out),
                    }
                    after_special = false;
                }
                Fragment::Token(id) => {
                    out.push(id);
                    after_special = true;
                }
            });
        if add_special && self.add_eos {
            out.extend(self.eos);
        }
        out
    }

    /// The text of `ids`; `skip_special` drops control tokens. Bytes that
    /// are not UTF-8 become U+FFFD. Ids outside the vocabulary are ignored.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> String {
        let mut bytes = Vec::new();
        let mut first = true;
        for &id in ids {
            if self.piece(id, skip_special, first, &mut bytes) {
                first = false;
            }
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// Appends the bytes of one token; `first` strips SentencePiece's
    /// leading space. Returns whether the token counted (was not skipped).
    pub(crate) fn piece(
        &self,
        id: u32,
        skip_special: bool,
        first: bool,
        out: &mut Vec<u8>,
    ) -> bool {
        let Some(text) = self.token_text(id) else {
            return false;
        };
        let ty = self.vocab.ty(id);
        if ty == TokenType::Control {
            if !skip_special {
                out.extend_from_slice(text.as_bytes());
            }
            return !skip_special;
        }
        match &self.model {
            Model::Bpe(bpe) => match ty {
                TokenType::UserDefined | TokenType::Unknown => {
                    out.extend_from_slice(text.as_bytes())
                }
                _ => bpe.token_bytes(text, out),
            },
            Model::Spm(spm) => {
                let at = out.len();
                spm.token_bytes(&self.vocab, id, text, out);
                if first && spm.space_prefix && out.get(at) == Some(&b' ') {
                    out.remove(at);
                }
            }
        }
        true
    }

    /// The bytes one token stands for (its piece decoded, a SentencePiece
    /// space kept; a byte-fallback token's one byte; a control token's
    /// text); empty for an id outside the vocabulary.
    pub fn token_bytes(&self, id: u32) -> Vec<u8> {
        let mut out = Vec::new();
        self.piece(id, false, false, &mut out);
        out
    }

    /// Number of tokens (ids are below it).
    pub fn vocab_size(&self) -> u32 {
        self.vocab.len()
    }

    /// The beginning-of-sequence token, if the file names one.
    pub fn bos(&self) -> Option<u32> {
        self.bos
    }

    /// The end-of-sequence token, if the file names one.
    pub fn eos(&self) -> Option<u32> {
        self.eos
    }

    /// Whether `encode(.., add_special = true, ..)` prepends BOS.
    pub fn add_bos(&self) -> bool {
        self.add_bos && self.bos.is_some()
    }

    /// Every id that ends generation, sorted: EOS, EOT, EOM and the control
    /// tokens llama.cpp's end-of-generation set names (`<|im_end|>`,
    /// `<|eot_id|>`, `<|endoftext|>`, ...).
    pub fn end_of_generation(&self) -> &[u32] {
        &self.eog
    }

    /// The piece of `id` as the vocabulary writes it (e.g. `<|im_start|>`,
    /// or `Ġthe` in byte-level spelling).
    pub fn token_text(&self, id: u32) -> Option<&str> {
        self.vocab.text(id)
    }

    /// The kind of `id`, if it is a token.
    pub fn token_type(&self, id: u32) -> Option<TokenType> {
        (id < self.vocab.len()).then(|| self.vocab.ty(id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eog_of(texts: &[&str], eos: Option<u32>) -> Vec<u32> {
        let texts: Vec<String> = texts.iter().map(|t| t.to_string()).collect();
        let file = vocab::tests::tokens_file(&texts);
        let vocab = Vocab::from_gguf(&Gguf::parse(&file).unwrap()).unwrap();
        end_of_generation(&vocab, [eos, None, None])
    }

    /// A harmony vocabulary ends on `<|return|>` and `<|call|>`, not on
    /// `<|end|>` (it closes the reasoning); any other keeps `<|end|>`.
    #[test]
    fn harmony_vocabularies_end_on_return_and_call_not_end() {
        let harmony = ["a", "<|end|>", "<|return|>", "<|call|>", "<|endoftext|>"];
        assert_eq!(eog_of(&harmony, Some(2)), [2, 3, 4]);
        assert_eq!(eog_of(&["a", "<|end|>", "<|endoftext|>"], None), [1, 2]);
        assert_eq!(eog_of(&["a", "<|end|>", "<|return|>"], None), [1]);
    }
}
