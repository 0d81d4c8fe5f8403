//! What every handler shares: the engine client, the model's text side
//! (tokenizer, chat template, or the embedded model's bytes), the limits,
//! the metrics and whether the server is draining.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use pagoda_engine::chat::{ChatTemplate, StopStrings};
use pagoda_engine::structured::{Structured, StructuredError};
use pagoda_engine::tokenizer::{TokenType, Tokenizer};
use pagoda_engine::{EngineClient, TextStream};

use crate::access::Access;
use crate::metrics::Metrics;

/// How text becomes tokens and back.
#[derive(Debug)]
pub enum Vocab {
    /// One token per UTF-8 byte (the embedded random-weight model; output
    /// ids decode as `id % 256`); no chat template, no end-of-generation
    /// token.
    Bytes,
    /// A GGUF model's tokenizer and chat template.
    Model {
        /// Text to ids and back.
        tokenizer: Box<Tokenizer>,
        /// The model's chat template, if it has one.
        chat: Option<Box<ChatTemplate>>,
    },
}

impl Vocab {
    /// The prompt's tokens (special tokens parsed); `add_special` adds BOS
    /// as the model wants (not for a rendered chat template, which has it).
    pub fn encode(&self, text: &str, add_special: bool) -> Vec<u32> {
        match self {
            Self::Bytes => text.bytes().map(u32::from).collect(),
            Self::Model { tokenizer, .. } => tokenizer.encode(text, add_special, true),
        }
    }

    /// The bytes token `id` stands for (a log probability's `bytes`).
    pub fn token_bytes(&self, id: u32) -> Vec<u8> {
        match self {
            Self::Bytes => vec![(id % 256) as u8],
            Self::Model { tokenizer, .. } => tokenizer.token_bytes(id),
        }
    }

    /// The text of `ids` (special tokens written out).
    pub fn decode(&self, ids: &[u32]) -> String {
        match self {
            Self::Bytes => {
                let bytes: Vec<u8> = ids.iter().map(|&id| (id % 256) as u8).collect();
                String::from_utf8_lossy(&bytes).into_owned()
            }
            Self::Model { tokenizer, .. } => tokenizer.decode(ids, false),
        }
    }

    /// The id of `text` where it is one control token of the vocabulary
    /// (a marker a grammar names as a token, not as text).
    pub fn control_id(&self, text: &str) -> Option<u32> {
        match self {
            Self::Bytes => None,
            Self::Model { tokenizer, .. } => match tokenizer.encode(text, false, true)[..] {
                [id] => (tokenizer.token_type(id) == Some(TokenType::Control)).then_some(id),
                _ => None,
            },
        }
    }

    /// Ids the vocabulary holds; `None` for the byte vocabulary, which
    /// reads any id as `id % 256`.
    pub fn size(&self) -> Option<u32> {
        match self {
            Self::Bytes => None,
            Self::Model { tokenizer, .. } => Some(tokenizer.vocab_size()),
        }
    }

    /// Tokens that end a generation.
    pub fn stop_tokens(&self) -> Vec<u32> {
        match self {
            Self::Bytes => Vec::new(),
            Self::Model { tokenizer, .. } => tokenizer.end_of_generation().to_vec(),
        }
    }

    /// A decoder for one choice that ends at the first of `stops`, with
    /// special tokens written out where `special`.
    pub fn detokenizer(&self, stops: &[String], special: bool) -> Detokenizer {
        match self {
            Self::Bytes => Detokenizer::Bytes {
                pending: Vec::new(),
                stops: StopStrings::new(stops),
            },
            Self::Model { .. } if special => {
                Detokenizer::Model(TextStream::with_special_tokens(stops))
            }
            Self::Model { .. } => Detokenizer::Model(TextStream::new(stops)),
        }
    }
}

/// One choice's text as its tokens arrive.
#[derive(Debug)]
pub enum Detokenizer {
    /// Bytes, with an incomplete UTF-8 tail held back.
    Bytes {
        /// Bytes not yet emitted.
        pending: Vec<u8>,
        /// Stop strings.
        stops: StopStrings,
    },
    /// The model's tokenizer.
    Model(TextStream),
}

impl Detokenizer {
    /// The final text `token` adds and whether a stop string appeared.
    pub fn push(&mut self, vocab: &Vocab, token: u32) -> (String, bool) {
        match (self, vocab) {
            (Self::Bytes { pending, stops }, _) => {
                if stops.is_stopped() {
                    return (String::new(), true);
                }
                // Ids past 255 (the embedded model's vocabulary is larger)
                // wrap onto bytes, so every token shows.
                pending.push((token % 256) as u8);
                let text = take_utf8(pending, false);
                let out = stops.push(&text);
                (out.emit, out.stopped)
            }
            (Self::Model(stream), Vocab::Model { tokenizer, .. }) => {
                let piece = stream.push(tokenizer, token);
                (piece.text, piece.stopped)
            }
            (Self::Model(_), Vocab::Bytes) => (String::new(), false),
        }
    }

    /// What is held back at the end.
    pub fn finish(&mut self) -> String {
        match self {
            Self::Bytes { pending, stops } => {
                if stops.is_stopped() {
                    return String::new();
                }
                let tail = take_utf8(pending, true);
                let out = stops.push(&tail);
                let mut text = out.emit;
                if !out.stopped {
                    text.push_str(&stops.finish());
                }
                text
            }
            Self::Model(stream) => stream.finish(),
        }
    }
}

/// Takes the complete UTF-8 prefix of `pending` (all of it, lossily, at the
/// end or after an invalid sequence).
fn take_utf8(pending: &mut Vec<u8>, end: bool) -> String {
    match std::str::from_utf8(pending) {
        Ok(s) => {
            let s = s.to_string();
            pending.clear();
            s
        }
        Err(e) if e.error_len().is_none() && !end => {
            let valid = e.valid_up_to();
            let text = String::from_utf8_lossy(&pending[..valid]).into_owned();
            pending.drain(..valid);
            text
        }
        Err(_) => {
            let s = String::from_utf8_lossy(pending).into_owned();
            pending.clear();
            s
        }
    }
}

/// The server's limits.
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// Largest request body in bytes (413 above).
    pub max_body_bytes: usize,
    /// The model's context in tokens (prompt plus output).
    pub max_context: u32,
    /// Pages in the KV pool (for `vllm:cache_config_info`).
    pub kv_pages: u32,
    /// The model's logits per row (its vocabulary, padding included).
    pub logits: u32,
}

/// What every handler shares.
#[derive(Debug)]
pub struct AppState {
    /// The engine thread.
    pub client: EngineClient,
    /// The model's text side.
    pub vocab: Vocab,
    /// The name `/v1/models` lists and responses echo.
    pub model_name: String,
    /// Limits.
    pub limits: Limits,
    /// Request metrics.
    pub metrics: Metrics,
    /// Unix time the server started (the model's `created`).
    pub created: u64,
    /// Who may call it.
    pub access: Access,
    /// Structured outputs over the vocabulary, built on first use.
    structured: OnceLock<Result<Structured, StructuredError>>,
    draining: AtomicBool,
    kv_debug: AtomicBool,
}

impl AppState {
    /// State over a running engine, open to every caller.
    pub fn new(
        client: EngineClient,
        vocab: Vocab,
        model_name: String,
        limits: Limits,
    ) -> Arc<Self> {
        Self::with_access(client, vocab, model_name, limits, Access::default())
    }

    /// State over a running engine, open to those `access` lets in.
    pub fn with_access(
        client: EngineClient,
        vocab: Vocab,
        model_name: String,
        limits: Limits,
        access: Access,
    ) -> Arc<Self> {
        let created = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Arc::new(Self {
            client,
            vocab,
            model_name,
            limits,
            metrics: Metrics::default(),
            created,
            access,
            structured: OnceLock::new(),
            draining: AtomicBool::new(false),
            kv_debug: AtomicBool::new(false),
        })
    }

    /// The vocabulary's structured-output compiler, built on the first
    /// call (a few hundred milliseconds for a large vocabulary).
    pub fn structured(&self) -> Result<&Structured, &StructuredError> {
        self.structured
            .get_or_init(|| match &self.vocab {
                Vocab::Bytes => Structured::for_bytes(self.limits.logits),
                Vocab::Model { tokenizer, .. } => Structured::new(tokenizer, self.limits.logits),
            })
            .as_ref()
    }

    /// Whether shutdown has begun (`/health` answers 503).
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    /// Serves `GET /debug/kv_blocks` (with KV events on, so a subscriber
    /// can check its mirror of the cache).
    pub fn enable_kv_debug(&self) {
        self.kv_debug.store(true, Ordering::SeqCst);
    }

    /// Whether `GET /debug/kv_blocks` is served.
    pub fn kv_debug(&self) -> bool {
        self.kv_debug.load(Ordering::SeqCst)
    }

    /// Marks the server as draining.
    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }
}
