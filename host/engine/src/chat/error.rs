//! Why a chat template could not be loaded or rendered.

use pagoda_core::gguf::GgufError;

/// A chat template's failure. Templates come from model files, so every
/// failure they can cause lands here instead of panicking.
#[derive(Debug, thiserror::Error)]
pub enum ChatTemplateError {
    /// The template does not parse.
    #[error("chat template does not compile (line {}): {message}", fmt_line(*line))]
    Syntax {
        /// The 1-based line of the error, when known.
        line: Option<usize>,
        /// The parser's explanation.
        message: String,
    },
    /// The template called `raise_exception(message)`, the way templates
    /// refuse a conversation they cannot format (e.g. roles that do not
    /// alternate).
    #[error("chat template raised an exception: {0}")]
    Raised(String),
    /// The template ran more instructions than a render may (a hostile or
    /// runaway loop).
    #[error("chat template ran past its instruction budget")]
    OutOfFuel,
    /// The rendered prompt would exceed the size a render may produce.
    #[error("chat template output exceeds {limit} bytes")]
    OutputTooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// Any other error while rendering (an unknown filter, a bad operation,
    /// a message that does not serialize).
    #[error("chat template failed to render (line {}): {message}", fmt_line(*line))]
    Render {
        /// The 1-based line of the error, when known.
        line: Option<usize>,
        /// The renderer's explanation.
        message: String,
    },
    /// `tokenizer.chat_template` exists in the GGUF but is not a UTF-8 string.
    #[error("GGUF tokenizer.chat_template: {0}")]
    Gguf(GgufError),
}

fn fmt_line(line: Option<usize>) -> String {
    line.map_or_else(|| "?".to_string(), |l| l.to_string())
}

/// Carried as the source of a minijinja error so that the render can tell a
/// template's own `raise_exception` from the engine's errors.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(super) struct Raised(pub(super) String);

/// Carried as the source of the write error a capped output raises.
#[derive(Debug, thiserror::Error)]
#[error("output too large")]
pub(super) struct TooLarge;
