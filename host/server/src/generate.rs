//! One HTTP request's generation: its `n` engine requests per prompt, their events
//! delivered straight into async code, and each choice's text (streaming
//! decode, stop strings) as it arrives.
//!
//! Each engine request is submitted with an [`EventSink`] that the engine
//! thread calls with every event; the sink pushes the event into a tokio
//! channel, which wakes the handler's task. No thread waits per request and
//! nothing polls. The submission's answer comes back the same way (a
//! oneshot). When the handler goes away (client disconnect, stop string)
//! the [`Generation`] is dropped: it cancels its requests at once, and the
//! engine's next send finds the channel closed as well.

use std::sync::Arc;
use std::time::{Duration, Instant};

use pagoda_engine::model::{SamplingParams, TokenLogprobs};
use pagoda_engine::{
    Canceller, Event, EventSink, GenRequest, Rejection, RejectionKind, StopReason,
};
use tokio::sync::{mpsc, oneshot};

use crate::error::ApiError;
use crate::metrics::Ending;
use crate::openai::Params;
use crate::state::{AppState, Detokenizer};

/// The most logits one request that scores its prompt may need at once
/// (its prompt rows × the vocabulary, f32: 512 MiB): scoring computes every
/// prompt row's logits, so a longer prompt is refused by name.
const MAX_SCORED_LOGITS: u64 = 1 << 27;

/// New text of one choice.
#[derive(Debug, Clone, PartialEq)]
pub struct Delta {
    /// The choice.
    pub index: u32,
    /// Its new text (may be empty on the last delta).
    pub text: String,
    /// `stop` or `length` on the choice's last delta.
    pub finish_reason: Option<&'static str>,
    /// The log probabilities of the tokens since the last delta (when the
    /// request asked for them): a token whose text is held back (a partial
    /// character, a possible stop string) comes with the next delta.
    pub logprobs: Vec<(u32, TokenLogprobs)>,
    /// The prompt's scores (with `echo` and `logprobs`), on a delta of
    /// their own before the choice's first text: prompt token `i + 1`'s
    /// at `i`.
    pub prompt_logprobs: Option<Vec<TokenLogprobs>>,
}

struct Choice {
    /// The prompt it continues (an index into `Generation::prompts`).
    prompt: usize,
    detok: Detokenizer,
    canceller: Canceller,
    tokens: u32,
    last_token: Option<Instant>,
    done: bool,
    /// Log probabilities not yet sent with a delta.
    pending: Vec<(u32, TokenLogprobs)>,
    /// `max_tokens: 0`: the one token the engine generates is dropped.
    discard: bool,
}

/// The running choices of one HTTP request: choice `p * n + i` is the
/// `i`-th sample of prompt `p` (OpenAI's order for a list of prompts).
pub struct Generation {
    state: Arc<AppState>,
    events: mpsc::UnboundedReceiver<(u32, Event)>,
    choices: Vec<Choice>,
    arrived: Instant,
    /// Prompt tokens, each prompt counted once (as OpenAI does), summed.
    pub prompt_tokens: u32,
    /// The prompts (for `echo`).
    pub prompts: Vec<Vec<u32>>,
    /// Per prompt, its tokens served from the prefix cache (the most any of
    /// its choices found, as its request's last admission saw it).
    cached: Vec<u32>,
}

/// The HTTP error for an engine rejection.
pub fn rejection_error(rejection: &Rejection) -> ApiError {
    use axum::http::StatusCode;
    let message = rejection.to_string();
    match rejection.kind() {
        RejectionKind::QueueFull => ApiError {
            retry_after: Some(1),
            ..ApiError::new(StatusCode::TOO_MANY_REQUESTS, "queue_full", message)
        },
        RejectionKind::EngineStopped => ApiError {
            retry_after: Some(5),
            ..ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "engine_stopped", message)
        },
        RejectionKind::PromptFillsContext | RejectionKind::LargerThanPool => {
            ApiError::invalid("prompt", message)
        }
        RejectionKind::EmptyPrompt | RejectionKind::TokenOutOfVocabulary => {
            ApiError::invalid("prompt", message)
        }
        RejectionKind::ZeroMaxTokens => ApiError::invalid("max_tokens", message),
        RejectionKind::InvalidSampling => ApiError::invalid("temperature", message),
        _ => ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "engine_error", message),
    }
}

/// A one-choice generation's whole text, how it ended and its tokens' log
/// probabilities.
pub type Answer = (String, Option<&'static str>, Vec<(u32, TokenLogprobs)>);

/// The most choices one request may ask for: its prompts times `n`.
pub const MAX_CHOICES: usize = 128;

/// The 400 for `prompts` prompts of `n` choices each past [`MAX_CHOICES`].
pub fn too_many_choices(prompts: usize, n: u32) -> ApiError {
    ApiError::invalid(
        "prompt",
        format!("{prompts} prompts of {n} choices each are over the {MAX_CHOICES} choices one request may ask for"),
    )
}

impl Generation {
    /// Submits `params.n` requests for each of `prompts`; refused as a
    /// whole if any is refused (the others are cancelled).
    pub async fn start(
        state: Arc<AppState>,
        prompts: Vec<Vec<u32>>,
        params: &Params,
    ) -> Result<Self, ApiError> {
        let arrived = Instant::now();
        let context = state.limits.max_context;
        let batch = prompts.len();
        // "the prompt" alone, "prompt 3" in a list.
        let which = |p: usize| {
            if batch == 1 {
                "the prompt".to_string()
            } else {
                format!("prompt {p}")
            }
        };
        if prompts.is_empty() {
            return Err(ApiError::invalid("prompt", "the list of prompts is empty"));
        }
        if batch.saturating_mul(params.n as usize) > MAX_CHOICES {
            return Err(too_many_choices(batch, params.n));
        }
        let mut rooms = Vec::with_capacity(batch);
        for (p, prompt) in prompts.iter().enumerate() {
            let tokens = u32::try_from(prompt.len()).unwrap_or(u32::MAX);
            if prompt.is_empty() {
                return Err(ApiError::invalid(
                    "prompt",
                    format!("{} is empty", which(p)),
                ));
            }
            if tokens >= context {
                return Err(ApiError::invalid(
                    "prompt",
                    format!("{} has {tokens} tokens; the context holds {context} (prompt plus at least one new token)", which(p)),
                ));
            }
            if params.echo && params.logprobs.is_some() {
                let vocab = u64::from(state.limits.logits.max(1));
                let most = MAX_SCORED_LOGITS / vocab;
                if u64::from(tokens) > most {
                    return Err(ApiError::invalid(
                        "echo",
                        format!("scoring a prompt computes its logits at every position: at most {most} prompt tokens with this vocabulary, not {tokens} ({})", which(p)),
                    ));
                }
            }
            rooms.push(context - tokens);
        }
        let prompt_tokens = prompts
            .iter()
            .map(|p| u32::try_from(p.len()).unwrap_or(u32::MAX))
            .fold(0u32, u32::saturating_add);
        // A model's own end-of-generation tokens (unless `ignore_eos`), and
        // the request's `stop_token_ids`.
        let mut stop_tokens = if params.ignore_eos {
            Vec::new()
        } else {
            state.vocab.stop_tokens()
        };
        stop_tokens.extend_from_slice(&params.stop_token_ids);
        // The structured output, compiled (and checked) before anything is
        // submitted; on the blocking pool, as the first one builds the
        // vocabulary's trie.
        let constraint = match params.output.clone() {
            None => None,
            Some((spec, field)) => {
                let compiler = Arc::clone(&state);
                let compiled = tokio::task::spawn_blocking(move || {
                    compiler
                        .structured()
                        .map_err(|e| e.to_string())
                        .and_then(|s| s.compile(&spec).map_err(|e| e.to_string()))
                })
                .await
                .map_err(|e| ApiError::invalid(field, e.to_string()))?;
                Some(compiled.map_err(|e| {
                    ApiError::invalid(field, format!("the structured output is invalid: {e}"))
                })?)
            }
        };
        if let Some(size) = state.vocab.size() {
            let beyond = |id: &u32| *id >= size;
            if let Some(id) = params
                .logit_bias
                .iter()
                .map(|(id, _)| id)
                .find(|id| beyond(id))
            {
                return Err(ApiError::invalid(
                    "logit_bias",
                    format!("token {id} is not below the vocabulary's {size}"),
                ));
            }
            if let Some(id) = params.stop_token_ids.iter().find(|id| beyond(id)) {
                return Err(ApiError::invalid(
                    "stop_token_ids",
                    format!("token {id} is not below the vocabulary's {size}"),
                ));
            }
        }
        // `max_tokens: 0` (scoring the prompt): the engine generates one
        // token, which is dropped.
        let discard = params.max_tokens == Some(0);
        let (tx, events) = mpsc::unbounded_channel();
        // Built before the first submission: if this future is dropped
        // midway (the client left), its `Drop` cancels what was accepted.
        let mut generation = Self {
            state: Arc::clone(&state),
            events,
            choices: Vec::new(),
            arrived,
            prompt_tokens,
            cached: vec![0; batch],
            prompts,
        };
        let samples = (0..batch).flat_map(|p| (0..params.n).map(move |i| (p, i)));
        for (index, (p, sample)) in (0u32..).zip(samples) {
            let room = rooms[p];
            let max_new_tokens = params.max_tokens.map_or(room, |m| m.clamp(1, room));
            let request = GenRequest {
                tag: u64::from(index),
                prompt: generation.prompts[p].clone(),
                max_new_tokens,
                sampling: SamplingParams {
                    temperature: params.temperature,
                    top_k: params.top_k,
                    top_p: params.top_p,
                    min_p: params.min_p,
                    presence_penalty: params.presence_penalty,
                    frequency_penalty: params.frequency_penalty,
                    repetition_penalty: params.repetition_penalty,
                    logit_bias: params.logit_bias.clone(),
                    min_tokens: params.min_tokens,
                    logprobs: params.logprobs,
                    logprobs_processed: params.logprobs_processed,
                    // `echo` with `logprobs` scores the prompt.
                    prompt_logprobs: params.logprobs.filter(|_| params.echo),
                    constraint: constraint.clone(),
                },
                // Sample `i` of every prompt: the seed of sample `i` of
                // that prompt asked alone.
                seed: params.seed.wrapping_add(u64::from(sample)),
                stop_tokens: stop_tokens.clone(),
            };
            let (submitted_tx, submitted) = oneshot::channel();
            let tx = tx.clone();
            // Runs on the engine thread: an unbounded send never blocks, and
            // fails once the `Generation` (its receiver) is gone, which
            // makes the engine cancel the request.
            let sink = EventSink::new(move |event| tx.send((index, event)).is_ok());
            state
                .client
                .submit_to(request, params.priority, sink, move |answer| {
                    // Nobody awaits the answer any more: cancel at once.
                    if let Err(Ok(canceller)) = submitted_tx.send(answer) {
                        canceller.cancel();
                    }
                });
            let refused = match submitted.await {
                Ok(Ok(canceller)) => {
                    generation.choices.push(Choice {
                        prompt: p,
                        detok: state.vocab.detokenizer(&params.stop, params.special_tokens),
                        canceller,
                        tokens: 0,
                        last_token: None,
                        done: false,
                        pending: Vec::new(),
                        discard,
                    });
                    continue;
                }
                Ok(Err(rejection)) => rejection_error(&rejection),
                Err(_) => rejection_error(&Rejection::EngineStopped),
            };
            // Refused as a whole: dropping `generation` cancels the others.
            state.metrics.rejected();
            return Err(refused);
        }
        Ok(generation)
    }

    /// The vocabulary the choices decode with.
    pub fn vocab(&self) -> &crate::state::Vocab {
        &self.state.vocab
    }

    /// The choices: prompts times `n`.
    pub fn choice_count(&self) -> usize {
        self.choices.len()
    }

    /// The prompt choice `index` continues (empty for no such choice).
    pub fn prompt_of(&self, index: u32) -> &[u32] {
        self.choices
            .get(index as usize)
            .and_then(|c| self.prompts.get(c.prompt))
            .map_or(&[], Vec::as_slice)
    }

    /// Prompt tokens served from the prefix cache, summed over the prompts.
    pub fn cached_tokens(&self) -> u32 {
        self.cached.iter().copied().fold(0, u32::saturating_add)
    }

    /// The whole text of a one-choice generation and how it ended: every
    /// delta, awaited (the first error ends it).
    pub async fn text(&mut self) -> Result<(String, Option<&'static str>), ApiError> {
        self.text_and_logprobs()
            .await
            .map(|(text, reason, _)| (text, reason))
    }

    /// [`Generation::text`] with its tokens' log probabilities (empty unless
    /// the request asked for them).
    pub async fn text_and_logprobs(&mut self) -> Result<Answer, ApiError> {
        let mut text = String::new();
        let mut reason = None;
        let mut logprobs = Vec::new();
        while let Some(delta) = self.next().await {
            let delta = delta?;
            text.push_str(&delta.text);
            reason = delta.finish_reason.or(reason);
            logprobs.extend(delta.logprobs);
        }
        Ok((text, reason, logprobs))
    }

    /// Tokens generated so far, over all choices.
    pub fn completion_tokens(&self) -> u32 {
        self.choices.iter().map(|c| c.tokens).sum()
    }

    /// The next delta, `None` when every choice is done. A choice the engine
    /// cancelled or failed ends with an error.
    pub async fn next(&mut self) -> Option<Result<Delta, ApiError>> {
        loop {
            if self.choices.iter().all(|c| c.done) {
                return None;
            }
            let (index, event) = match self.events.recv().await {
                Some(e) => e,
                None => return Some(Err(stopped())),
            };
            let Some(choice) = self.choices.get_mut(index as usize) else {
                continue;
            };
            if choice.done {
                continue;
            }
            let prompt_tokens = self
                .prompts
                .get(choice.prompt)
                .map_or(0, |p| u32::try_from(p.len()).unwrap_or(u32::MAX));
            let metrics = &self.state.metrics;
            match event {
                Event::PromptLogprobs(scores) => {
                    return Some(Ok(Delta {
                        index,
                        text: String::new(),
                        finish_reason: None,
                        logprobs: Vec::new(),
                        prompt_logprobs: Some(scores),
                    }));
                }
                Event::Token { .. } if choice.discard => {}
                Event::Token {
                    token, logprobs, ..
                } => {
                    if let Some(lp) = logprobs {
                        choice.pending.push((token, *lp));
                    }
                    let now = Instant::now();
                    match choice.last_token {
                        None => metrics.first_token(now - self.arrived),
                        Some(before) => metrics.inter_token(now - before),
                    }
                    choice.last_token = Some(now);
                    choice.tokens += 1;
                    let (text, stopped) = choice.detok.push(&self.state.vocab, token);
                    if stopped {
                        choice.done = true;
                        choice.canceller.cancel();
                        metrics.ended(
                            Ending::Stop,
                            self.arrived.elapsed(),
                            None,
                            prompt_tokens,
                            choice.tokens,
                        );
                        return Some(Ok(Delta {
                            index,
                            text,
                            finish_reason: Some("stop"),
                            logprobs: std::mem::take(&mut choice.pending),
                            prompt_logprobs: None,
                        }));
                    }
                    if !text.is_empty() {
                        return Some(Ok(Delta {
                            index,
                            text,
                            finish_reason: None,
                            logprobs: std::mem::take(&mut choice.pending),
                            prompt_logprobs: None,
                        }));
                    }
                }
                Event::Finished(done) => {
                    choice.done = true;
                    if let Some(cached) = self.cached.get_mut(choice.prompt) {
                        *cached = (*cached).max(done.cached_tokens);
                    }
                    let (ending, reason) = match done.stop {
                        StopReason::StopToken => (Ending::Stop, "stop"),
                        StopReason::Length => (Ending::Length, "length"),
                    };
                    let queue =
                        Duration::from_micros(done.admitted.0.saturating_sub(done.arrived.0));
                    metrics.ended(
                        ending,
                        self.arrived.elapsed(),
                        Some(queue),
                        prompt_tokens,
                        choice.tokens,
                    );
                    let text = choice.detok.finish();
                    return Some(Ok(Delta {
                        index,
                        text,
                        finish_reason: Some(reason),
                        logprobs: std::mem::take(&mut choice.pending),
                        prompt_logprobs: None,
                    }));
                }
                Event::Rejected(rejection) => {
                    choice.done = true;
                    return Some(Err(rejection_error(&rejection)));
                }
                Event::Cancelled | Event::Failed => {
                    choice.done = true;
                    metrics.ended(
                        Ending::Abort,
                        self.arrived.elapsed(),
                        None,
                        prompt_tokens,
                        choice.tokens,
                    );
                    return Some(Err(stopped()));
                }
            }
        }
    }
}

fn stopped() -> ApiError {
    ApiError {
        retry_after: Some(5),
        ..ApiError::new(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "engine_stopped",
            "the engine stopped before the request finished",
        )
    }
}

impl Drop for Generation {
    fn drop(&mut self) {
        // The engine would notice the closed channel at its next token;
        // cancel now, so a waiting or prefilling request stops at once.
        for choice in &self.choices {
            if !choice.done {
                choice.canceller.cancel();
            }
        }
    }
}
