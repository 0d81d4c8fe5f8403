//! A request's life as its caller sees it: the [`GenRequest`] it submits,
//! the [`RequestHandle`] it gets back, and the [`Event`]s the engine sends
//! there (each token as it is sampled, then exactly one terminal event).

use std::sync::mpsc::{Receiver, Sender};
use std::time::Duration;

use pagoda_core::{Request, RequestId, Timestamp};
use serde::Serialize;

use crate::error::Rejection;
use crate::model::{SamplingParams, TokenLogprobs};

/// One generation request.
#[derive(Debug, Clone, PartialEq)]
pub struct GenRequest {
    /// The caller's tag, echoed in the completion.
    pub tag: u64,
    /// Prompt token ids.
    pub prompt: Vec<u32>,
    /// Most tokens to generate.
    pub max_new_tokens: u32,
    /// How to pick tokens.
    pub sampling: SamplingParams,
    /// Seed of this request's sampler: the same request samples the same
    /// tokens whatever else runs beside it (and again after a preemption).
    pub seed: u64,
    /// Stop early when any of these tokens is sampled (a model's
    /// end-of-generation tokens: EOS, EOT, `<|im_end|>`...). The stop token
    /// is the last of the output.
    pub stop_tokens: Vec<u32>,
}

/// A request inside the engine: the caller's request and where its events
/// go. It travels through the core's queue and scheduler as one value, so
/// whichever structure hands it back (cancel, finish) hands back its sender.
#[derive(Debug)]
pub(crate) struct Queued {
    pub(crate) request: GenRequest,
    pub(crate) events: Events,
    /// Whether the model lets a request start on a cached prefix, and
    /// so whether its pages are worth caching: not a recurrent one, whose
    /// state no cached page holds.
    pub(crate) prefix_reusable: bool,
}

/// Where a request's events go: a [`RequestHandle`]'s channel or a caller's
/// [`EventSink`].
#[derive(Debug)]
pub(crate) enum Events {
    Channel(Sender<Event>),
    Sink(EventSink),
}

/// The receiver is gone (the request should be cancelled).
#[derive(Debug)]
pub(crate) struct Gone;

impl Events {
    /// Delivers `event`; `Err` when nobody listens any more.
    pub(crate) fn send(&self, event: Event) -> Result<(), Gone> {
        match self {
            Self::Channel(tx) => tx.send(event).map_err(|_| Gone),
            Self::Sink(sink) => (sink.0)(event).then_some(()).ok_or(Gone),
        }
    }
}

/// A request's events delivered by callback instead of a [`RequestHandle`]:
/// the engine thread calls it with each event, so an async runtime can wake
/// its task (e.g. through its own channel's sender) with no thread waiting
/// per request. It returns `false` once nobody listens; the engine then
/// cancels the request at its next step. It must not block: it runs inside
/// the engine's step.
pub struct EventSink(Box<dyn Fn(Event) -> bool + Send + 'static>);

impl EventSink {
    /// A sink over `deliver`.
    pub fn new(deliver: impl Fn(Event) -> bool + Send + 'static) -> Self {
        Self(Box::new(deliver))
    }
}

impl std::fmt::Debug for EventSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventSink").finish_non_exhaustive()
    }
}

impl Request for Queued {
    fn prompt(&self) -> &[u32] {
        &self.request.prompt
    }
    fn max_output_tokens(&self) -> u32 {
        self.request.max_new_tokens
    }
    fn reuses_prefix(&self) -> bool {
        // Scoring the prompt needs every prompt row's logits.
        self.prefix_reusable && self.request.sampling.prompt_logprobs.is_none()
    }
    fn shares_pages(&self) -> bool {
        self.prefix_reusable
    }
}

/// Why a finished request stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum StopReason {
    /// It generated its `max_new_tokens` (or filled the context).
    Length,
    /// It sampled one of its stop tokens.
    StopToken,
}

/// A request that ran to the end.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    /// The request's tag.
    pub tag: u64,
    /// Prompt tokens.
    pub prompt_len: u32,
    /// Generated tokens.
    pub output: Vec<u32>,
    /// Why it stopped.
    pub stop: StopReason,
    /// When it was submitted.
    pub arrived: Timestamp,
    /// When its first prompt chunk was scheduled (its last admission, if it
    /// was preempted).
    pub admitted: Timestamp,
    /// When its first token was sampled.
    pub first_token: Timestamp,
    /// When it finished.
    pub finished: Timestamp,
    /// Times it was preempted and recomputed.
    pub preemptions: u32,
    /// Prompt tokens served from the prefix cache at its last admission
    /// (whole pages; never the prompt's last token, which is computed to
    /// sample from).
    pub cached_tokens: u32,
}

/// What the engine tells a request's handle.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A token was sampled: output token number `index` (from 0). Each index
    /// is sent once, even when a preempted request recomputes its tokens.
    Token {
        /// The token id.
        token: u32,
        /// Its place in the output.
        index: u32,
        /// Its log probability and the most likely tokens', when the
        /// request's [`SamplingParams::logprobs`](crate::model::SamplingParams::logprobs)
        /// asks.
        logprobs: Option<Box<TokenLogprobs>>,
    },
    /// The prompt's scores, when the request's
    /// [`SamplingParams::prompt_logprobs`](crate::model::SamplingParams::prompt_logprobs)
    /// asks: entry `i` is prompt token `i + 1`'s (the first has no context
    /// to be scored in). Sent once, before the first token.
    PromptLogprobs(Vec<TokenLogprobs>),
    /// Terminal: it ran to the end.
    Finished(Completion),
    /// Terminal: it was cancelled (through its handle or by the owner); its
    /// pages were freed.
    Cancelled,
    /// Terminal: it was refused after submission (by the scheduler).
    Rejected(Rejection),
    /// Terminal: the engine stopped on an error before it finished.
    Failed,
}

impl Event {
    /// Whether this is the request's last event.
    pub fn is_terminal(&self) -> bool {
        !matches!(self, Self::Token { .. } | Self::PromptLogprobs(_))
    }
}

/// Cancels one request from any thread; cheap to clone. Cancelling a request
/// that already ended does nothing.
#[derive(Debug, Clone)]
pub struct Canceller {
    id: RequestId,
    cancels: Sender<RequestId>,
}

impl Canceller {
    pub(crate) fn new(id: RequestId, cancels: Sender<RequestId>) -> Self {
        Self { id, cancels }
    }

    /// The request's id.
    pub fn id(&self) -> RequestId {
        self.id
    }

    /// Asks the engine to cancel the request; it does so at the start of its
    /// next step, before computing anything, and frees the request's pages.
    pub fn cancel(&self) {
        // The engine is gone: nothing runs, so nothing is left to cancel.
        let _ = self.cancels.send(self.id);
    }
}

/// The caller's side of one submitted request: its id, its events, and
/// cancellation. Dropping the handle cancels the request.
#[derive(Debug)]
pub struct RequestHandle {
    events: Receiver<Event>,
    canceller: Canceller,
}

impl RequestHandle {
    pub(crate) fn new(id: RequestId, events: Receiver<Event>, cancels: Sender<RequestId>) -> Self {
        Self {
            events,
            canceller: Canceller::new(id, cancels),
        }
    }

    /// The request's id.
    pub fn id(&self) -> RequestId {
        self.canceller.id
    }

    /// Cancels the request (see [`Canceller::cancel`]); its terminal event
    /// follows as usual ([`Event::Cancelled`], or whatever happened first).
    pub fn cancel(&self) {
        self.canceller.cancel();
    }

    /// A canceller for another thread.
    pub fn canceller(&self) -> Canceller {
        self.canceller.clone()
    }

    /// The next event if one is there; `None` when none is, or when the
    /// engine is gone and every event has been read.
    pub fn try_recv(&self) -> Option<Event> {
        self.events.try_recv().ok()
    }

    /// Waits for the next event; `None` once the engine is gone and every
    /// event has been read (the terminal event is always sent first). With
    /// a synchronous [`Engine`](crate::Engine), wait only on a thread other
    /// than the one that steps it.
    pub fn recv(&self) -> Option<Event> {
        self.events.recv().ok()
    }

    /// Waits for the next event at most `timeout`.
    pub fn recv_timeout(&self, timeout: Duration) -> Option<Event> {
        self.events.recv_timeout(timeout).ok()
    }
}

impl Drop for RequestHandle {
    fn drop(&mut self) {
        self.canceller.cancel();
    }
}
