//! The scheduler: which waiting requests join the running batch each step,
//! how many tokens each computes, and what happens when pages run out.
//!
//! One engine step, as [`Scheduler::schedule`] plans it:
//!
//! 1. Prompt pages computed in the previous step go to the prefix cache, so
//!    requests waiting on the same prefix hit it.
//! 2. Waiting requests whose cached prefix grew are scored again: the radix
//!    cache's growth journal names the places it grew, and each waiting
//!    request watches the one place that would extend its match
//!    ([`PrefixProbe::next_key`](crate::PrefixProbe)), so an insert rescored
//!    only the requests it helps. Evictions only shorten matches; those are
//!    caught when a request is popped, because its score is confirmed against
//!    the cache before it is admitted.
//! 3. Every running sequence in decode gets one token, highest priority
//!    first. A sequence that needs a page when none is free or evictable
//!    preempts the lowest-priority running sequence (released and requeued
//!    for recomputation), never evicting a running sequence's pages.
//! 4. Running prefills get their next chunk within the token budget.
//! 5. New requests are admitted: first any request waiting past the fairness
//!    threshold (oldest first, overriding the policy), then the policy's
//!    choice from a heap ordered by priority class, policy score and an age
//!    boost. A request that does not fit the pages left is passed over and
//!    lighter ones behind it are admitted; an overdue one that does not fit
//!    stops admission instead, so pages free up for it.
//!
//! The age boost costs nothing per step: a request's priority is
//! `class + score + rate × (now − arrival)`, and since `rate × now` is the
//! same for everyone the heap orders by `class + score − rate × arrival`,
//! which never changes while the request waits.
//!
//! ## Modules
//!
//! [`config`] holds the limits, [`plan`] the step plan the engine reads,
//! `heap` the indexed heap, `waiting` the waiting heaps and watch table,
//! `running` the run list, chunking and preemption, `admission` the choice
//! of new requests, `slots` the slot array; this file the [`Scheduler`] and
//! its public API. The free slots, the run list and the entries admission
//! passes over are [`crate::list`] stacks and lists threaded through the
//! slot array; only the watch table's hash chains are linked by hand (see
//! `waiting`).

mod admission;
pub mod config;
mod error;
mod heap;
pub mod metrics;
pub mod plan;
pub mod policy;
pub mod replay;
mod running;
mod slots;
mod waiting;

use core::fmt;

use crate::error::{KvError, StorageError};
use crate::ids::SeqId;
use crate::kv_cache::KvCache;
use crate::list::{List, Stack, NIL};
use crate::queue::{Dequeued, RequestId};
use crate::radix::Inserted;
use crate::request::{Priority, Request};
use crate::time::Timestamp;

use heap::IndexedHeap;
use plan::Planning;
use slots::{Free, Run, State};
use waiting::{ByAge, ByPolicy};

pub use config::{SchedulerConfig, DEFAULT_PREFILL_SHARE};
pub use error::SchedError;
pub use metrics::{Histogram, Percentiles, SchedulerMetrics};
pub use plan::{StepPlan, Work, WorkKind};
pub use policy::{ConfigError, Fcfs, Lpm, MatchScore, Policy, SchedulerPolicy};
pub use slots::{EntryId, SchedSlot};

/// A request that left the scheduler.
#[derive(Debug)]
pub struct Finished<R> {
    /// The request.
    pub request: R,
    /// What caching its pages did; an error if the tokens given were not the
    /// sequence's (its pages were released all the same).
    pub cached: Result<Inserted, KvError>,
}

/// The scheduler over caller-provided storage; see the [module docs](self).
pub struct Scheduler<'s, R, P = Policy> {
    slots: &'s mut [SchedSlot<R>],
    watch: &'s mut [u32],
    watch_shift: u32,
    /// Waiting entries by policy priority, and by age for the fairness
    /// override.
    by_policy: IndexedHeap<ByPolicy>,
    by_age: IndexedHeap<ByAge>,
    /// Free slots.
    free: Stack<Free>,
    /// Running entries in priority order (class, then arrival).
    run: List<Run>,
    waiting: u32,
    policy: P,
    config: SchedulerConfig,
    max_context: u32,
    epoch: Option<Timestamp>,
    growth_cursor: u64,
    metrics: SchedulerMetrics,
}

impl<R, P: fmt::Debug> fmt::Debug for Scheduler<'_, R, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scheduler")
            .field("policy", &self.policy)
            .field("config", &self.config)
            .field("waiting", &self.waiting)
            .field("running", &self.run.len())
            .finish_non_exhaustive()
    }
}

impl<'s, R: Request, P: SchedulerPolicy> Scheduler<'s, R, P> {
    /// The watch-table length to pair with `slots` entries.
    pub const fn watch_len_for(slots: usize) -> usize {
        slots.next_power_of_two()
    }

    /// A scheduler for up to `slots.len()` waiting and running requests
    /// whose sequences hold at most `max_context_tokens` tokens (the
    /// page-table row's length, or less to keep a prompt within the pool).
    /// Longer prompts are refused at [`add`](Self::add) and output is capped
    /// so a sequence never outgrows its row. `watch` (a power of two; see
    /// [`watch_len_for`](Self::watch_len_for)) indexes waiting requests by
    /// where their cached prefix would grow.
    pub fn new(
        slots: &'s mut [SchedSlot<R>],
        watch: &'s mut [u32],
        config: SchedulerConfig,
        policy: P,
        max_context_tokens: u32,
    ) -> Result<Self, SchedError> {
        config.validate()?;
        if slots.is_empty() || watch.is_empty() {
            return Err(StorageError::Empty.into());
        }
        if slots.len() >= NIL as usize || watch.len() as u64 > 1 << 32 {
            return Err(StorageError::TooLarge.into());
        }
        if !watch.len().is_power_of_two() {
            return Err(StorageError::Mismatched.into());
        }
        for slot in slots.iter_mut() {
            let generation = slot.generation;
            *slot = SchedSlot {
                generation,
                ..SchedSlot::EMPTY
            };
        }
        // Index 0 on top, as the slots were handed in.
        let free = Stack::with_all(slots);
        watch.fill(NIL);
        let watch_shift = 64 - watch.len().trailing_zeros();
        Ok(Self {
            slots,
            watch,
            watch_shift,
            by_policy: IndexedHeap::new(),
            by_age: IndexedHeap::new(),
            free,
            run: List::new(),
            waiting: 0,
            policy,
            config,
            max_context: max_context_tokens,
            epoch: None,
            growth_cursor: 0,
            metrics: SchedulerMetrics::default(),
        })
    }

    /// The active policy.
    pub fn policy(&self) -> &P {
        &self.policy
    }

    /// The configuration.
    pub fn config(&self) -> &SchedulerConfig {
        &self.config
    }

    /// The decode-first prefill share in force: the policy's if it sets
    /// one, else the configuration's.
    pub fn prefill_share(&self) -> Option<f32> {
        self.policy.prefill_share().or(self.config.prefill_share)
    }

    /// Requests waiting.
    pub fn waiting(&self) -> u32 {
        self.waiting
    }

    /// Sequences running.
    pub fn running(&self) -> u32 {
        self.run.len()
    }

    /// Whether nothing waits or runs.
    pub fn is_idle(&self) -> bool {
        self.waiting == 0 && self.run.is_empty()
    }

    /// The measurements so far.
    pub fn metrics(&self) -> &SchedulerMetrics {
        &self.metrics
    }

    /// The request behind an entry.
    pub fn request(&self, entry: EntryId) -> Option<&R> {
        self.live(entry).ok()?.request.as_ref()
    }

    /// The queue id the entry was added with.
    pub fn request_id(&self, entry: EntryId) -> Option<RequestId> {
        self.live(entry).ok().map(|s| s.id)
    }

    /// The entry's sequence, while it runs.
    pub fn sequence(&self, entry: EntryId) -> Option<SeqId> {
        self.live(entry).ok()?.seq
    }

    /// Tokens the entry has generated in its current attempt.
    pub fn generated(&self, entry: EntryId) -> Option<u32> {
        self.live(entry).ok().map(|s| s.generated)
    }

    /// Switches policy while requests wait: the waiting set is re-ordered
    /// once (O(n)) by the new policy; nothing is lost, running sequences are
    /// untouched.
    pub fn set_policy(&mut self, policy: P, kv: &KvCache<'_>) {
        self.policy = policy;
        self.rescore_all(kv.radix());
    }

    /// Changes the configuration (validated first); the waiting set is
    /// re-ordered because the weights may have changed.
    pub fn set_config(
        &mut self,
        config: SchedulerConfig,
        kv: &KvCache<'_>,
    ) -> Result<(), SchedError> {
        config.validate()?;
        self.config = config;
        self.rescore_all(kv.radix());
        Ok(())
    }

    /// Adds a request taken from the [`RequestQueue`](crate::RequestQueue).
    pub fn add_dequeued(
        &mut self,
        dequeued: Dequeued<R>,
        kv: &KvCache<'_>,
    ) -> Result<EntryId, (R, SchedError)> {
        self.add(
            dequeued.request,
            dequeued.id,
            dequeued.priority,
            dequeued.arrival,
            dequeued.enqueued_at,
            kv,
        )
    }

    /// Adds a waiting request. `arrival` orders requests that arrived at the
    /// same time (the queue's arrival counter). Refused, handing the request
    /// back, when the scheduler is full or the prompt is empty or leaves no
    /// room in the context to generate; `max_output_tokens` is capped to the
    /// room left.
    pub fn add(
        &mut self,
        request: R,
        id: RequestId,
        priority: Priority,
        arrival: u64,
        arrived_at: Timestamp,
        kv: &KvCache<'_>,
    ) -> Result<EntryId, (R, SchedError)> {
        let prompt_len = request.prompt().len();
        if prompt_len == 0 {
            return Err((request, SchedError::EmptyPrompt));
        }
        if prompt_len >= self.max_context as usize {
            return Err((request, SchedError::TooLong));
        }
        let Some(index) = self.free.pop(self.slots) else {
            return Err((request, SchedError::Full));
        };
        // The last sampled token is never appended, so a sequence holds
        // prompt + output − 1 tokens: this cap keeps it inside its row.
        let max_output = request
            .max_output_tokens()
            .min(self.max_context - prompt_len as u32);
        let slot = &mut self.slots[index as usize];
        let generation = slot.generation;
        // The heap cells' columns belong to the heaps, not to this entry.
        let (by_policy, by_age) = (slot.by_policy.column_only(), slot.by_age.column_only());
        *slot = SchedSlot {
            by_policy,
            by_age,
            request: Some(request),
            state: State::Waiting,
            generation,
            id,
            priority,
            arrival,
            arrived_at,
            prompt_len: prompt_len as u32,
            max_output,
            ..SchedSlot::EMPTY
        };
        self.epoch.get_or_insert(arrived_at);
        let first = self
            .metrics
            .first_arrival
            .map_or(arrived_at, |t| t.min(arrived_at));
        self.metrics.first_arrival = Some(first);
        self.enter_waiting(index, kv.radix());
        Ok(EntryId {
            slot: index,
            generation,
        })
    }

    /// Plans one engine step; see the [module docs](self). Work items are
    /// written to the front of `plan`; their pages are already appended, so
    /// the engine writes each item's keys and values to
    /// [`KvCache::slot_mapping`] and runs attention. Call it again only
    /// after the engine has run the previous plan: pages computed then are
    /// cached now.
    pub fn schedule(
        &mut self,
        now: Timestamp,
        kv: &mut KvCache<'_>,
        plan: &mut [Work],
    ) -> StepPlan {
        self.cache_computed_prompts(kv);
        self.sync_cache(kv.radix());
        let mut planning = Planning {
            kv,
            plan,
            step: StepPlan::default(),
            budget: self.config.token_budget,
        };
        self.plan_decodes(&mut planning);
        // Decode first: while this step decodes, prefill gets at most the
        // share of the budget (the policy's, else the config's).
        if planning.step.decode_tokens > 0 {
            if let Some(cap) = self.config.prefill_cap(self.prefill_share()) {
                planning.budget = planning.budget.min(cap);
            }
        }
        self.plan_prefill_chunks(&mut planning);
        self.admit(now, &mut planning);
        let mut step = planning.step;
        // Padding over the step's prefill items.
        let mut longest = 0;
        for w in planning.plan.get(..step.work).unwrap_or(&[]) {
            if let WorkKind::Prefill { len, .. } = w.kind {
                longest = longest.max(len);
            }
        }
        step.padding_tokens = step
            .prefills
            .saturating_mul(longest)
            .saturating_sub(step.prefill_tokens);
        step
    }

    /// Records a token the engine sampled for a running entry. Returns
    /// whether the entry has now generated its `max_output_tokens` (the
    /// engine should [`finish`](Self::finish) it).
    pub fn record_token(&mut self, entry: EntryId, now: Timestamp) -> Result<bool, SchedError> {
        let slot = self.live_mut(entry)?;
        if slot.state != State::Running {
            return Err(SchedError::NotRunning);
        }
        slot.generated = slot.generated.saturating_add(1);
        let arrived = slot.arrived_at;
        let first = slot.first_token_at.is_none();
        if first {
            slot.first_token_at = Some(now);
        }
        let done = slot.generated >= slot.max_output;
        self.metrics.generated_tokens += 1;
        if first {
            self.metrics.ttft.record(now.micros_since(arrived));
        }
        Ok(done)
    }

    /// Finishes a running request: caches its full pages under `tokens`
    /// (prompt then generated tokens; none for a request that does not
    /// [share its pages](Request::shares_pages)), releases its sequence and
    /// records its latencies. The pages are released even if `tokens` are
    /// not the sequence's ([`Finished::cached`] says so).
    pub fn finish(
        &mut self,
        entry: EntryId,
        tokens: &[u32],
        now: Timestamp,
        kv: &mut KvCache<'_>,
    ) -> Result<Finished<R>, SchedError> {
        let slot = self.live(entry)?;
        if slot.state != State::Running {
            return Err(SchedError::NotRunning);
        }
        let seq = slot.seq.ok_or(SchedError::NotRunning)?;
        let cached = if slot.shares_pages() {
            kv.finish(seq, tokens)
        } else {
            kv.release(seq)
                .map(|()| Inserted::default())
                .map_err(KvError::from)
        };
        let slot = &self.slots[entry.slot as usize];
        let (arrived, first, generated) = (slot.arrived_at, slot.first_token_at, slot.generated);
        self.metrics.e2e.record(now.micros_since(arrived));
        if let Some(first) = first {
            if generated > 1 {
                self.metrics
                    .tpot
                    .record(now.micros_since(first) / u64::from(generated - 1));
            }
        }
        self.metrics.finished += 1;
        self.metrics.last_finish = Some(self.metrics.last_finish.map_or(now, |t| t.max(now)));
        self.unlink_running(entry.slot);
        let request = self.free_slot(entry.slot).ok_or(SchedError::UnknownEntry)?;
        Ok(Finished { request, cached })
    }

    /// Cancels a waiting or running request at any moment: a running one's
    /// pages are released at once. Hands the request back.
    pub fn cancel(&mut self, entry: EntryId, kv: &mut KvCache<'_>) -> Result<R, SchedError> {
        let slot = self.live(entry)?;
        match slot.state {
            State::Waiting => self.leave_waiting(entry.slot),
            State::Running => {
                if let Some(seq) = slot.seq {
                    let released = kv.release(seq);
                    debug_assert!(released.is_ok());
                }
                self.unlink_running(entry.slot);
            }
            State::Free => return Err(SchedError::UnknownEntry),
        }
        self.metrics.cancelled += 1;
        self.free_slot(entry.slot).ok_or(SchedError::UnknownEntry)
    }

    /// Visits every entry (waiting and running) with its id and request.
    pub fn for_each(&self, mut visit: impl FnMut(EntryId, &R, bool)) {
        for (i, slot) in self.slots.iter().enumerate() {
            if let Some(request) = &slot.request {
                let id = EntryId {
                    slot: i as u32,
                    generation: slot.generation,
                };
                visit(id, request, slot.state == State::Running);
            }
        }
    }
}
