//! Typed errors of the engine: why a request was refused ([`Rejection`],
//! one variant per cause, so a server maps each to a status) and why a step
//! failed ([`EngineError`]).

use pagoda_core::queue::QueueError;
use pagoda_core::scheduler::{ConfigError, SchedError};
use pagoda_core::{KvError, SeqError, StorageError};
use serde::Serialize;

use crate::model::{ModelError, SamplingError};

/// Why a request was refused. A refused request changed nothing.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Rejection {
    /// The prompt has no tokens.
    #[error("the prompt is empty")]
    EmptyPrompt,
    /// A prompt token is not in the model's vocabulary.
    #[error("prompt token {token} is outside the vocabulary (0..{vocab})")]
    TokenOutOfVocabulary {
        /// The token.
        token: u32,
        /// The vocabulary size.
        vocab: u32,
    },
    /// `max_new_tokens` is zero: there is nothing to generate.
    #[error("max_new_tokens is 0")]
    ZeroMaxTokens,
    /// The sampling parameters are out of range.
    #[error("invalid sampling parameters: {0}")]
    Sampling(#[source] SamplingError),
    /// The prompt leaves no room for one generated token in the context.
    #[error("the prompt of {prompt_len} tokens fills the context of {max_context}")]
    PromptFillsContext {
        /// Prompt tokens.
        prompt_len: usize,
        /// Tokens a sequence can hold.
        max_context: u32,
    },
    /// Prompt plus reserved output needs more pages than the whole pool.
    #[error("request needs {pages} KV pages but the whole pool has {pool_pages}")]
    LargerThanPool {
        /// Pages the request needs.
        pages: u64,
        /// Pages in the pool.
        pool_pages: u32,
    },
    /// Every queue slot holds a waiting request.
    #[error("the request queue is full")]
    QueueFull,
    /// The queue refused it for another reason.
    #[error("refused by the queue: {0}")]
    Queue(#[source] QueueError),
    /// The scheduler refused it.
    #[error("refused by the scheduler: {0}")]
    Scheduler(#[source] SchedError),
    /// The engine stopped (shut down or failed) before taking it.
    #[error("the engine has stopped")]
    EngineStopped,
}

/// The kind of a [`Rejection`], without its data: what reports count and a
/// server maps to a status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RejectionKind {
    /// [`Rejection::EmptyPrompt`].
    EmptyPrompt,
    /// [`Rejection::TokenOutOfVocabulary`].
    TokenOutOfVocabulary,
    /// [`Rejection::ZeroMaxTokens`].
    ZeroMaxTokens,
    /// [`Rejection::Sampling`].
    InvalidSampling,
    /// [`Rejection::PromptFillsContext`].
    PromptFillsContext,
    /// [`Rejection::LargerThanPool`].
    LargerThanPool,
    /// [`Rejection::QueueFull`].
    QueueFull,
    /// [`Rejection::Queue`].
    Queue,
    /// [`Rejection::Scheduler`].
    Scheduler,
    /// [`Rejection::EngineStopped`].
    EngineStopped,
}

impl Rejection {
    /// Its kind.
    pub fn kind(&self) -> RejectionKind {
        match self {
            Self::EmptyPrompt => RejectionKind::EmptyPrompt,
            Self::TokenOutOfVocabulary { .. } => RejectionKind::TokenOutOfVocabulary,
            Self::ZeroMaxTokens => RejectionKind::ZeroMaxTokens,
            Self::Sampling(_) => RejectionKind::InvalidSampling,
            Self::PromptFillsContext { .. } => RejectionKind::PromptFillsContext,
            Self::LargerThanPool { .. } => RejectionKind::LargerThanPool,
            Self::QueueFull => RejectionKind::QueueFull,
            Self::Queue(_) => RejectionKind::Queue,
            Self::Scheduler(_) => RejectionKind::Scheduler,
            Self::EngineStopped => RejectionKind::EngineStopped,
        }
    }
}

impl From<QueueError> for Rejection {
    fn from(e: QueueError) -> Self {
        match e {
            QueueError::EmptyPrompt => Self::EmptyPrompt,
            QueueError::TooLarge { pages, pool_pages } => {
                Self::LargerThanPool { pages, pool_pages }
            }
            QueueError::Full => Self::QueueFull,
            other => Self::Queue(other),
        }
    }
}

/// Why the engine could not be built or a step failed. After a failed step
/// the engine has failed every request it held (each handle got
/// [`Event::Failed`](crate::Event::Failed)).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError<E> {
    /// The backend failed (out of memory, device lost, ...).
    #[error("backend error: {0}")]
    Backend(E),
    /// The model refused the batch or its configuration.
    #[error("model error: {0}")]
    Model(#[from] ModelError),
    /// The KV cache refused an operation (a bug: the plan is valid).
    #[error("KV cache error: {0}")]
    Kv(#[from] KvError),
    /// The engine's storage cannot hold the configured structures.
    #[error("engine storage: {0}")]
    Storage(#[from] StorageError),
    /// The scheduler refused an operation (a bug: the plan is valid).
    #[error("scheduler error: {0}")]
    Scheduler(#[from] SchedError),
    /// The scheduler configuration is invalid.
    #[error("invalid scheduler configuration: {0}")]
    Config(#[from] ConfigError),
    /// The engine's own bookkeeping disagrees with the core's (a bug).
    #[error("engine bookkeeping error: {0}")]
    Invariant(&'static str),
}

impl<E> From<SeqError> for EngineError<E> {
    fn from(e: SeqError) -> Self {
        Self::Kv(e.into())
    }
}
