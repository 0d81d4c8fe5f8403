//! Why a GGUF's tokenizer metadata was refused.

use pagoda_core::gguf::GgufError;
use thiserror::Error;

/// A tokenizer could not be built from a file's metadata. Every variant is
/// caused by the file, so callers report it rather than panic.
#[derive(Debug, Error)]
pub enum TokenizerError {
    /// A key is missing or holds the wrong type.
    #[error("tokenizer metadata: {0}")]
    Gguf(#[from] GgufError),
    /// `tokenizer.ggml.model` names a model this crate does not implement.
    #[error("unsupported tokenizer model `{0}` (expected `gpt2` or `llama`)")]
    UnsupportedModel(String),
    /// `tokenizer.ggml.pre` names a pre-tokenizer this crate does not know;
    /// guessing would silently produce other ids than the model was trained on.
    #[error("unsupported pre-tokenizer `{0}` (known: default, gpt-2, smollm, llama-bpe, qwen2)")]
    UnsupportedPre(String),
    /// The vocabulary is empty or larger than `u32` ids can address.
    #[error("vocabulary has {0} tokens")]
    BadVocabSize(u64),
    /// A token's text is not UTF-8.
    #[error("token {0} is not UTF-8")]
    TokenNotUtf8(u32),
    /// A per-token array's length disagrees with the token list's.
    #[error("`{key}` has {found} entries, the vocabulary {expected}")]
    LengthMismatch {
        /// The array's key.
        key: &'static str,
        /// Its length.
        found: u64,
        /// The number of tokens.
        expected: u64,
    },
    /// A token type outside 1..=6 (llama.cpp's enum; 0 is "undefined").
    #[error("token {id} has type {ty}, outside 0..=6")]
    BadTokenType {
        /// The token.
        id: u32,
        /// Its type.
        ty: i32,
    },
    /// A merge is not two space-separated pieces.
    #[error("merge {index} `{text}` is not `left right`")]
    BadMerge {
        /// Its index (its rank).
        index: usize,
        /// Its text.
        text: String,
    },
    /// A merge names a piece, or yields a piece, that is not in the vocabulary.
    #[error("merge {index} `{text}` names a token not in the vocabulary")]
    MergeUnknownToken {
        /// Its index.
        index: usize,
        /// Its text.
        text: String,
    },
    /// A special token id (BOS, EOS, ...) is not a token.
    #[error("`{key}` = {id} is outside the vocabulary of {vocab}")]
    IdOutOfRange {
        /// The key.
        key: &'static str,
        /// Its value.
        id: u32,
        /// The vocabulary size.
        vocab: u32,
    },
}
