//! An answer's text as `pagoda chat` and `pagoda run --chat` read it as
//! it streams: reasoning (harmony's analysis channel, or the text between
//! think tags) apart from the content, by the server's splitters.

use pagoda_server::harmony::{is_harmony, Piece, Splitter};
use pagoda_server::reasoning::{ThinkSplitter, ThinkTags};

/// How an answer's text splits into reasoning and content as it streams.
pub(crate) enum Reader {
    /// Harmony's channels (gpt-oss).
    Harmony(Splitter),
    /// Think tags (Qwen3, DeepSeek-R1, Magistral...).
    Think(ThinkSplitter, bool),
    /// All content.
    Plain,
}

impl Reader {
    /// The reader of an answer to `prompt`, rendered by `template`.
    pub(crate) fn of(template: &str, prompt: &str) -> Self {
        if is_harmony(template) {
            return Self::Harmony(Splitter::default());
        }
        match ThinkTags::of(template, prompt) {
            Some(tags) => Self::Think(ThinkSplitter::new(tags), tags.tags.special),
            None => Self::Plain,
        }
    }

    /// Whether the answer is decoded with its special tokens written out
    /// (harmony's headers, Magistral's tags).
    pub(crate) fn special(&self) -> bool {
        match self {
            Self::Harmony(_) => true,
            Self::Think(_, special) => *special,
            Self::Plain => false,
        }
    }

    /// The pieces `text` completes.
    pub(crate) fn push(&mut self, text: &str) -> Vec<Piece> {
        match self {
            Self::Harmony(s) => s.push(text),
            Self::Think(s, _) => s.push(text),
            Self::Plain => vec![Piece::Content(text.to_string())],
        }
    }

    /// What is held at the answer's end.
    pub(crate) fn finish(&mut self) -> Vec<Piece> {
        match self {
            Self::Harmony(s) => s.finish(),
            Self::Think(s, _) => s.finish(),
            Self::Plain => Vec::new(),
        }
    }
}
