//! One engine step, in order:
//! 1. cancellations sent through handles are applied (pages freed before
//!    anything is computed);
//! 2. waiting requests move from the queue into free scheduler slots;
//! 3. the scheduler plans the step: the pages of every work item are
//!    already appended, cached prefixes are already matched;
//! 4. the batch is packed (tokens, positions, KV slots, one
//!    [`SeqAttention`] per sequence) and copy-on-write copies run;
//! 5. the model computes the step and samples the sequences that finished
//!    their prompt or decoded;
//! 6. each sampled token is streamed to its handle; a request that reached
//!    its output limit (or sampled its stop token) is finished: its full
//!    pages enter the radix cache and the rest return to the pool.

use std::time::Instant;

use crate::backend::StepBackend;
use pagoda_core::backend::SeqAttention;
use pagoda_core::scheduler::{EntryId, SchedError};
use pagoda_core::Timestamp;

use crate::engine::{Engine, Live};
use crate::error::{EngineError, Rejection};
use crate::metrics::StepReport;
use crate::model::{ForwardError, GroupRows, StepInput, TokenLogprobs};
use crate::request::{Completion, Event, StopReason};

impl<B: StepBackend> Engine<'_, B> {
    /// Runs one step at the engine's clock: applies cancellations (freeing
    /// pages before anything is computed), moves queued requests into the
    /// scheduler, plans, packs, computes, samples and streams each token,
    /// and finishes requests that are done. On an error every request the
    /// engine held gets [`Event::Failed`].
    pub fn step(&mut self) -> Result<StepReport, EngineError<B::Error>> {
        let result = self.try_step();
        if result.is_err() {
            self.fail_all();
        }
        result
    }

    fn try_step(&mut self) -> Result<StepReport, EngineError<B::Error>> {
        let started = Instant::now();
        self.apply_cancels();
        let now = self.now();
        self.pull_from_queue();
        let plan = self.sched.schedule(now, &mut self.kv, &mut self.plan);
        let work = &self.plan[..plan.work];
        self.batch
            .pack(work, &mut self.live, &self.sched, &self.kv, now)?;
        let packed = Instant::now();

        let sampled = self.compute(plan.work)?;
        let computed = Instant::now();

        let now = self.now();
        for (entry, token, logprobs) in sampled {
            self.accept_token(entry, token, logprobs, now)?;
        }
        let compute_us = computed.duration_since(packed).as_micros() as u64;
        let total_us = started.elapsed().as_micros() as u64;
        Ok(StepReport {
            plan,
            running: self.sched.running(),
            bookkeeping_us: total_us.saturating_sub(compute_us),
            compute_us,
        })
    }

    /// Moves queued requests into free scheduler slots, best class first.
    fn pull_from_queue(&mut self) {
        while (self.sched.waiting() + self.sched.running()) < self.live.len() as u32 {
            let Some(dequeued) = self.queue.try_dequeue() else {
                break;
            };
            let id = dequeued.id;
            let arrived = dequeued.enqueued_at;
            let seed = dequeued.request.request.seed;
            let prompt_len = dequeued.request.request.prompt.len();
            match self.sched.add_dequeued(dequeued, &self.kv) {
                Ok(entry) => {
                    self.entries.insert(id, entry);
                    self.live[entry.index() as usize] = Some(Live {
                        id,
                        output: Vec::new(),
                        sent: 0,
                        rng: fastrand::Rng::with_seed(seed),
                        arrived,
                        admitted: None,
                        first_token: None,
                        starts: 0,
                        cached_tokens: 0,
                        constraint: None,
                        prompt_logprobs: Vec::new(),
                        prompt_sent: false,
                    });
                }
                Err((queued, error)) => {
                    let reason = match error {
                        SchedError::EmptyPrompt => Rejection::EmptyPrompt,
                        SchedError::TooLong => Rejection::PromptFillsContext {
                            prompt_len,
                            max_context: self.max_context,
                        },
                        other => Rejection::Scheduler(other),
                    };
                    let _ = queued.events.send(Event::Rejected(reason));
                }
            }
        }
    }

    /// Runs the step's batch and samples its rows: each sampled row's
    /// entry, token and (where asked) log probabilities.
    #[allow(clippy::type_complexity)]
    fn compute(
        &mut self,
        work: usize,
    ) -> Result<Vec<(EntryId, u32, Option<Box<TokenLogprobs>>)>, EngineError<B::Error>> {
        if work == 0 {
            return Ok(Vec::new());
        }
        let b = &self.batch;
        if !b.copies.is_empty() {
            self.backend
                .copy_pages(&mut self.store, &b.copies)
                .map_err(EngineError::Backend)?;
        }
        // Each group's page rows: group 0's, then the others'.
        let groups = self.kv.groups().count();
        let mut group_seqs = Vec::with_capacity(groups as usize);
        for g in 0..groups {
            let mut seqs = Vec::with_capacity(b.seqs.len());
            for &(i, query_start, query_len, context_len) in &b.seqs {
                seqs.push(SeqAttention {
                    pages: self.kv.group_pages(self.plan[i].seq, g)?,
                    context_len,
                    query_start,
                    query_len,
                });
            }
            group_seqs.push(seqs);
        }
        let group_rows: Vec<GroupRows<'_>> = group_seqs[1..]
            .iter()
            .zip(&b.group_slots)
            .map(|(seqs, slots)| GroupRows { slots, seqs })
            .collect();
        let input = StepInput {
            tokens: &b.tokens,
            positions: &b.positions,
            slots: &b.slots,
            seqs: &group_seqs[0],
            places: &self.places,
            groups: &group_rows,
            states: &b.states,
            sample_rows: &b.sample_rows,
            prompt_rows: b.prompt_rows,
        };
        // A step whose every sampled row is greedy, on logits nothing
        // adjusts, needs only the tokens (and no prompt is scored).
        let mut greedy = !b.samplers.is_empty() && b.scorers.is_empty();
        for &i in &b.samplers {
            let entry = self.plan[i].entry;
            let request = self.sched.request(entry).ok_or(SchedError::UnknownEntry)?;
            let produced = self.live[entry.index() as usize]
                .as_ref()
                .map_or(0, |live| live.output.len());
            let sampling = &request.request.sampling;
            greedy &= sampling.temperature == 0.0
                && !sampling.adjusts_logits(produced)
                && sampling.logprobs.is_none()
                && sampling.constraint.is_none();
        }
        // The constrained rows' masks, prepared on a thread of their own
        // while the model runs (they depend only on the tokens so far).
        let constrained: Vec<usize> = if greedy {
            Vec::new()
        } else {
            b.samplers
                .iter()
                .map(|&i| self.plan[i].entry.index() as usize)
                .filter(|&e| {
                    self.live[e]
                        .as_ref()
                        .is_some_and(|l| l.constraint.is_some())
                })
                .collect()
        };
        let any_constrained = !constrained.is_empty();
        let live = &mut self.live;
        let prepare_masks = move || -> Vec<usize> {
            let mut failed = Vec::new();
            for &e in &constrained {
                let state = live[e].as_mut().and_then(|l| l.constraint.as_mut());
                if state.is_some_and(|c| c.prepare().is_err()) {
                    failed.push(e);
                }
            }
            failed
        };
        let mut tokens = Vec::new();
        let (backend, store, prepared) = (&mut self.backend, &mut self.store, &mut self.prepared);
        let (activations, logits, model) = (&mut self.activations, &mut self.logits, self.model);
        let mut run = || {
            if greedy {
                backend.greedy_step(
                    model,
                    store,
                    prepared,
                    &input,
                    activations,
                    logits,
                    &mut tokens,
                )
            } else {
                backend.forward_step(model, store, prepared, &input, activations, logits)
            }
        };
        // No thread for a step without constraints.
        let (result, failed) = if !any_constrained {
            (run(), Vec::new())
        } else {
            std::thread::scope(|scope| {
                let masks = scope.spawn(prepare_masks);
                let result = run();
                // The thread only runs matchers, which catch their own
                // panics: a failed join is treated as no failure.
                (result, masks.join().unwrap_or_default())
            })
        };
        // A constraint that cannot go on: its request is cancelled at the
        // next step's start (this step's row samples unmasked).
        for e in failed {
            if let Some(l) = self.live[e].as_mut() {
                l.constraint = None;
                self.dropped.push(l.id);
            }
        }
        result.map_err(|e| match e {
            ForwardError::Model(e) => EngineError::Model(e),
            ForwardError::Backend(e) => EngineError::Backend(e),
        })?;
        let vocab = self.model.config().vocab as usize;
        // Prompt scores first, from rows nothing adjusts.
        for &(i, position, row) in &b.scorers {
            let entry = self.plan[i].entry;
            let request = &self
                .sched
                .request(entry)
                .ok_or(SchedError::UnknownEntry)?
                .request;
            let top = request.sampling.prompt_logprobs.unwrap_or(0) as usize;
            let token = *request
                .prompt
                .get(position as usize)
                .ok_or(EngineError::Invariant("a scored row past the prompt"))?;
            let logits = self
                .logits
                .get(row * vocab..(row + 1) * vocab)
                .ok_or(EngineError::Invariant("fewer logits than scored rows"))?;
            if let Some(live) = self.live[entry.index() as usize].as_mut() {
                live.prompt_logprobs
                    .push(TokenLogprobs::of(logits, token, top));
            }
        }
        let mut sampled = Vec::with_capacity(b.samplers.len());
        for (k, &i) in b.samplers.iter().enumerate() {
            let row = *b
                .sampler_rows
                .get(k)
                .ok_or(EngineError::Invariant("a sampler without a row"))?;
            let entry = self.plan[i].entry;
            if greedy {
                let token = *tokens
                    .get(k)
                    .ok_or(EngineError::Invariant("fewer tokens than sample rows"))?;
                sampled.push((entry, token, None));
                continue;
            }
            let request = &self
                .sched
                .request(entry)
                .ok_or(SchedError::UnknownEntry)?
                .request;
            let live = self.live[entry.index() as usize]
                .as_mut()
                .ok_or(EngineError::Invariant("sampled entry has no state"))?;
            let logits = self
                .logits
                .get_mut(row * vocab..(row + 1) * vocab)
                .ok_or(EngineError::Invariant("fewer logits than sample rows"))?;
            let sampling = &request.sampling;
            let adjusts = sampling.adjusts_logits(live.output.len());
            // Log probabilities come from the raw logits, before anything
            // adjusts them (kept aside where something will), unless the
            // request asks for them after the adjustments.
            let keep_raw = adjusts && !sampling.logprobs_processed;
            if keep_raw && sampling.logprobs.is_some() {
                self.raw_logits.clear();
                self.raw_logits.extend_from_slice(logits);
            }
            if adjusts {
                sampling.adjust_logits(
                    logits,
                    &request.prompt,
                    &live.output,
                    &request.stop_tokens,
                    &mut self.scratch_tokens,
                );
            }
            if sampling.logprobs_processed && sampling.logprobs.is_some() {
                self.raw_logits.clear();
                self.raw_logits.extend_from_slice(logits);
            }
            if let Some(constraint) = live.constraint.as_ref() {
                constraint.apply(logits);
            }
            let token = self.sampler.sample(logits, sampling, &mut live.rng);
            if let Some(constraint) = live.constraint.as_mut() {
                if constraint.accept(token).is_err() {
                    self.dropped.push(live.id);
                    live.constraint = None;
                }
            }
            let logprobs = sampling.logprobs.map(|top| {
                // The copy taken before the mask (raw or processed), or
                // the row itself when it was not changed before that.
                let kept = keep_raw || sampling.logprobs_processed;
                let raw = if kept { &self.raw_logits[..] } else { logits };
                Box::new(TokenLogprobs::of(raw, token, top as usize))
            });
            sampled.push((entry, token, logprobs));
        }
        Ok(sampled)
    }

    /// Records a sampled token and streams it (unless a recomputation after
    /// preemption already sent it); finishes the request when it is done.
    fn accept_token(
        &mut self,
        entry: EntryId,
        token: u32,
        logprobs: Option<Box<TokenLogprobs>>,
        now: Timestamp,
    ) -> Result<(), EngineError<B::Error>> {
        let index = entry.index() as usize;
        let live = self.live[index]
            .as_mut()
            .ok_or(EngineError::Invariant("token for an entry with no state"))?;
        live.output.push(token);
        live.first_token.get_or_insert(now);
        let position = live.output.len() as u32 - 1;
        let queued = self.sched.request(entry).ok_or(SchedError::UnknownEntry)?;
        if queued.request.sampling.prompt_logprobs.is_some() && !live.prompt_sent {
            live.prompt_sent = true;
            let scores = std::mem::take(&mut live.prompt_logprobs);
            if queued.events.send(Event::PromptLogprobs(scores)).is_err() {
                self.dropped.push(live.id);
            }
        }
        if position >= live.sent {
            live.sent = position + 1;
            let event = Event::Token {
                token,
                index: position,
                logprobs,
            };
            if queued.events.send(event).is_err() {
                // The handle is gone: cancel at the next step's start.
                self.dropped.push(live.id);
            }
        }
        // A complete constraint (its grammar's end reached) ends the output
        // as a stop token does.
        let complete = live.constraint.as_ref().is_some_and(|c| c.is_finished());
        let stop_token = queued.request.stop_tokens.contains(&token) || complete;
        let at_limit = self.sched.record_token(entry, now)?;
        if !(at_limit || stop_token) {
            return Ok(());
        }
        let live = self.live[index]
            .take()
            .ok_or(EngineError::Invariant("finished entry has no state"))?;
        let request = &self
            .sched
            .request(entry)
            .ok_or(SchedError::UnknownEntry)?
            .request;
        let mut tokens = Vec::with_capacity(request.prompt.len() + live.output.len());
        tokens.extend_from_slice(&request.prompt);
        tokens.extend_from_slice(&live.output);
        let finished = self.sched.finish(entry, &tokens, now, &mut self.kv)?;
        self.entries.remove(&live.id);
        let queued = finished.request;
        let completion = Completion {
            tag: queued.request.tag,
            prompt_len: queued.request.prompt.len() as u32,
            output: live.output,
            stop: if stop_token && !at_limit {
                StopReason::StopToken
            } else {
                StopReason::Length
            },
            arrived: live.arrived,
            admitted: live.admitted.unwrap_or(now),
            first_token: live.first_token.unwrap_or(now),
            finished: now,
            preemptions: live.starts.saturating_sub(1),
            cached_tokens: live.cached_tokens,
        };
        // A dropped handle no longer wants it; the request is done anyway.
        let _ = queued.events.send(Event::Finished(completion));
        Ok(())
    }
}
