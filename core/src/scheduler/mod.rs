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

pub mod metrics;
pub mod policy;
pub mod replay;

use core::fmt;

use crate::error::{AppendError, KvError};
use crate::geometry::{KvGeometry, PAGE_SIZE};
use crate::ids::{PageId, SeqId};
use crate::page_table::{Appended, PageCopy, PageTable};
use crate::pool::PagePool;
use crate::queue::{Dequeued, RequestId};
use crate::radix::{Growth, Inserted, PrefixProbe, RadixCache};
use crate::request::{Priority, Request};
use crate::time::Timestamp;

pub use metrics::{Histogram, Percentiles, SchedulerMetrics};
pub use policy::{ConfigError, Fcfs, Lpm, MatchScore, Policy, SchedulerPolicy};

const NIL: u32 = u32::MAX;
const POLICY_HEAP: usize = 0;
const AGE_HEAP: usize = 1;

/// The scheduler's limits and fairness settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SchedulerConfig {
    /// Most sequences running at once.
    pub max_batch: u32,
    /// Most tokens computed per step (decode tokens plus prefill chunks).
    pub token_budget: u32,
    /// A request waiting longer than this (microseconds) is admitted before
    /// anything the policy prefers. `None` disables the override.
    pub fairness_threshold_us: Option<u64>,
    /// Priority gained per second of waiting, in policy-score units.
    pub aging_per_second: f64,
    /// Priority of one class step (Low → Normal → High → Critical), in
    /// policy-score units.
    pub class_weight: f64,
    /// Hold back a request for a step when another request of the batch is
    /// computing the same uncached prefix, so it hits the cache instead.
    pub share_prefixes: bool,
    /// For backends that pad a batch to its longest prefill: admit a new
    /// prefill only if its chunk is within this factor of the step's first
    /// (1.0 < factor). `None` ignores lengths.
    pub length_grouping: Option<f32>,
    /// Most waiting requests passed over per step before admission stops.
    pub max_skips: u32,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        Self {
            max_batch: 64,
            token_budget: 2048,
            fairness_threshold_us: Some(5_000_000),
            aging_per_second: 0.1,
            class_weight: 10.0,
            share_prefixes: true,
            length_grouping: None,
            max_skips: 64,
        }
    }
}

impl SchedulerConfig {
    /// Checks the limits: positive batch and budget, finite non-negative
    /// weights, a grouping factor above 1.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.max_batch == 0 {
            return Err(ConfigError::ZeroLimit("max_batch"));
        }
        if self.token_budget == 0 {
            return Err(ConfigError::ZeroLimit("token_budget"));
        }
        if self.fairness_threshold_us == Some(0) {
            return Err(ConfigError::OutOfRange("fairness_threshold_ms"));
        }
        if !(self.aging_per_second.is_finite() && self.aging_per_second >= 0.0) {
            return Err(ConfigError::OutOfRange("aging_per_second"));
        }
        if !(self.class_weight.is_finite() && self.class_weight >= 0.0) {
            return Err(ConfigError::OutOfRange("class_weight"));
        }
        if let Some(f) = self.length_grouping {
            if !(f.is_finite() && f > 1.0) {
                return Err(ConfigError::OutOfRange("length_grouping"));
            }
        }
        Ok(())
    }
}

/// Why the scheduler refused a request or an entry id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum SchedError {
    /// Every scheduler slot holds a waiting or running request.
    Full,
    /// The prompt has no tokens.
    EmptyPrompt,
    /// The prompt does not fit a page-table row or the pool.
    TooLong,
    /// The entry id is unknown or its request already left.
    UnknownEntry,
    /// The entry is waiting, and the operation needs a running one.
    NotRunning,
    /// The caller's storage is unusable (empty slots, a watch table that is
    /// not a power of two).
    InvalidStorage,
    /// The configuration is invalid.
    Config(ConfigError),
}

impl fmt::Display for SchedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Full => f.write_str("scheduler is full"),
            Self::EmptyPrompt => f.write_str("request has an empty prompt"),
            Self::TooLong => f.write_str("prompt does not fit a sequence row or the KV pool"),
            Self::UnknownEntry => f.write_str("unknown scheduler entry"),
            Self::NotRunning => f.write_str("request is not running"),
            Self::InvalidStorage => f.write_str("invalid scheduler storage"),
            Self::Config(e) => write!(f, "invalid scheduler configuration: {e}"),
        }
    }
}

impl From<ConfigError> for SchedError {
    fn from(e: ConfigError) -> Self {
        Self::Config(e)
    }
}

/// A request inside the scheduler, waiting or running.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct EntryId {
    slot: u32,
    generation: u32,
}

impl EntryId {
    /// The slot index, dense in `0..capacity`: handy for per-request arrays.
    pub const fn index(self) -> u32 {
        self.slot
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Free,
    Waiting,
    Running,
}

/// One request's place in the scheduler. Callers only provide storage
/// (`[SchedSlot::EMPTY; N]`, or a `Vec` of them).
#[derive(Debug)]
pub struct SchedSlot<R> {
    request: Option<R>,
    state: State,
    generation: u32,
    id: RequestId,
    priority: Priority,
    arrival: u64,
    arrived_at: Timestamp,
    prompt_len: u32,
    max_output: u32,
    // Waiting: the score and where the match would grow.
    key: f64,
    scored_at: u64,
    watch: Option<u64>,
    watch_prev: u32,
    watch_next: u32,
    /// Column `h` is heap `h`'s array at this index.
    heap_item: [u32; 2],
    /// Where this entry sits in heap `h`.
    heap_pos: [u32; 2],
    skip_next: u32,
    // Running.
    seq: Option<SeqId>,
    prefilled: u32,
    /// Prompt tokens of this attempt already put in the prefix cache.
    cached_upto: u32,
    generated: u32,
    admitted: bool,
    first_token_at: Option<Timestamp>,
    run_prev: u32,
    run_next: u32,
    next_free: u32,
}

impl<R> SchedSlot<R> {
    /// A slot ready for [`Scheduler::new`].
    pub const EMPTY: Self = Self {
        request: None,
        state: State::Free,
        generation: 0,
        id: RequestId::from_bits(0),
        priority: Priority::Normal,
        arrival: 0,
        arrived_at: Timestamp(0),
        prompt_len: 0,
        max_output: 0,
        key: 0.0,
        scored_at: 0,
        watch: None,
        watch_prev: NIL,
        watch_next: NIL,
        heap_item: [NIL; 2],
        heap_pos: [NIL; 2],
        skip_next: NIL,
        seq: None,
        prefilled: 0,
        cached_upto: 0,
        generated: 0,
        admitted: false,
        first_token_at: None,
        run_prev: NIL,
        run_next: NIL,
        next_free: NIL,
    };
}

impl<R> Default for SchedSlot<R> {
    fn default() -> Self {
        Self::EMPTY
    }
}

/// What one planned item computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum WorkKind {
    /// Prompt tokens `start..start + len`, already appended to the sequence.
    Prefill {
        /// First prompt position computed.
        start: u32,
        /// Tokens computed.
        len: u32,
        /// The first chunk of this attempt: the engine starts the request's
        /// output afresh (it may have been preempted and restarted).
        first: bool,
        /// The chunk ends the prompt: the engine samples the first token.
        last: bool,
    },
    /// One token: the last sampled token, at `position`.
    Decode {
        /// Its position in the sequence.
        position: u32,
    },
}

/// One sequence's work in a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Work {
    /// The request.
    pub entry: EntryId,
    /// Its sequence in the page table.
    pub seq: SeqId,
    /// What to compute.
    pub kind: WorkKind,
    /// A copy-on-write page copy to run before this item's attention.
    pub copy: Option<PageCopy>,
}

impl Work {
    /// A placeholder for plan storage (`[Work::EMPTY; N]`); the scheduler
    /// overwrites every item it reports.
    pub const EMPTY: Self = Self {
        entry: EntryId {
            slot: NIL,
            generation: 0,
        },
        seq: SeqId {
            row: NIL,
            generation: 0,
        },
        kind: WorkKind::Decode { position: 0 },
        copy: None,
    };

    /// Tokens this item computes.
    pub fn tokens(&self) -> u32 {
        match self.kind {
            WorkKind::Prefill { len, .. } => len,
            WorkKind::Decode { .. } => 1,
        }
    }
}

/// What a step's plan holds, besides its work items.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct StepPlan {
    /// Work items written to the front of the plan slice.
    pub work: usize,
    /// Decode tokens.
    pub decode_tokens: u32,
    /// Prefill tokens.
    pub prefill_tokens: u32,
    /// Requests admitted this step.
    pub admitted: u32,
    /// Of those, admitted by the fairness threshold.
    pub overdue_admitted: u32,
    /// Prompt tokens the admitted requests found in the prefix cache: the
    /// batch's cache reuse.
    pub cached_tokens: u32,
    /// Requests held back to share a prefix being computed in the batch.
    pub deferred: u32,
    /// Requests passed over because they did not fit the pages left.
    pub skipped_for_pages: u32,
    /// Running sequences preempted for recomputation.
    pub preempted: u32,
    /// Prefill items in the step.
    pub prefills: u32,
    /// Token slots a padding backend wastes: prefill items × longest chunk
    /// − prefill tokens.
    pub padding_tokens: u32,
}

impl StepPlan {
    /// Padding as a share of the padded prefill batch, in percent.
    pub fn padding_percent(&self) -> f64 {
        let padded = self.prefill_tokens + self.padding_tokens;
        if padded == 0 {
            0.0
        } else {
            100.0 * f64::from(self.padding_tokens) / f64::from(padded)
        }
    }
}

/// The KV-cache state a step works on.
#[derive(Debug)]
pub struct KvState<'k, 'a> {
    /// The page pool.
    pub pool: &'k mut PagePool<'a>,
    /// The page tables.
    pub table: &'k mut PageTable<'a>,
    /// The prefix cache.
    pub radix: &'k mut RadixCache<'a>,
    /// Scratch for one row of page ids (at least the table's pages per
    /// sequence).
    pub scratch: &'k mut [PageId],
}

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
    heap_len: [u32; 2],
    free_head: u32,
    run_head: u32,
    run_tail: u32,
    running: u32,
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
            .field("running", &self.running)
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
        let n = slots.len();
        if n == 0
            || n >= NIL as usize
            || !watch.len().is_power_of_two()
            || watch.len() as u64 > 1 << 32
        {
            return Err(SchedError::InvalidStorage);
        }
        for (i, slot) in slots.iter_mut().enumerate() {
            let generation = slot.generation;
            *slot = SchedSlot {
                generation,
                next_free: if i + 1 < n { i as u32 + 1 } else { NIL },
                ..SchedSlot::EMPTY
            };
        }
        watch.fill(NIL);
        let watch_shift = 64 - watch.len().trailing_zeros();
        Ok(Self {
            slots,
            watch,
            watch_shift,
            heap_len: [0; 2],
            free_head: 0,
            run_head: NIL,
            run_tail: NIL,
            running: 0,
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

    /// Requests waiting.
    pub fn waiting(&self) -> u32 {
        self.waiting
    }

    /// Sequences running.
    pub fn running(&self) -> u32 {
        self.running
    }

    /// Whether nothing waits or runs.
    pub fn is_idle(&self) -> bool {
        self.waiting == 0 && self.running == 0
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
    pub fn set_policy(&mut self, policy: P, radix: &RadixCache<'_>) {
        self.policy = policy;
        self.rescore_all(radix);
    }

    /// Changes the configuration (validated first); the waiting set is
    /// re-ordered because the weights may have changed.
    pub fn set_config(
        &mut self,
        config: SchedulerConfig,
        radix: &RadixCache<'_>,
    ) -> Result<(), SchedError> {
        config.validate()?;
        self.config = config;
        self.rescore_all(radix);
        Ok(())
    }

    /// Adds a request taken from the [`RequestQueue`](crate::RequestQueue).
    pub fn add_dequeued(
        &mut self,
        dequeued: Dequeued<R>,
        radix: &RadixCache<'_>,
    ) -> Result<EntryId, (R, SchedError)> {
        self.add(
            dequeued.request,
            dequeued.id,
            dequeued.priority,
            dequeued.arrival,
            dequeued.enqueued_at,
            radix,
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
        radix: &RadixCache<'_>,
    ) -> Result<EntryId, (R, SchedError)> {
        let prompt_len = request.prompt().len();
        if prompt_len == 0 {
            return Err((request, SchedError::EmptyPrompt));
        }
        if prompt_len >= self.max_context as usize {
            return Err((request, SchedError::TooLong));
        }
        if self.free_head == NIL {
            return Err((request, SchedError::Full));
        }
        let index = self.free_head;
        // The last sampled token is never appended, so a sequence holds
        // prompt + output − 1 tokens: this cap keeps it inside its row.
        let max_output = request
            .max_output_tokens()
            .min(self.max_context - prompt_len as u32);
        let slot = &mut self.slots[index as usize];
        self.free_head = slot.next_free;
        let generation = slot.generation;
        // `heap_item` is a column of the heap arrays, not this entry's.
        let heap_item = slot.heap_item;
        *slot = SchedSlot {
            heap_item,
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
        self.enter_waiting(index, radix);
        Ok(EntryId {
            slot: index,
            generation,
        })
    }

    /// Plans one engine step; see the [module docs](self). Work items are
    /// written to the front of `plan`; their pages are already appended, so
    /// the engine writes each item's keys and values to
    /// [`PageTable::slot_mapping`] and runs attention. Call it again only
    /// after the engine has run the previous plan: pages computed then are
    /// cached now.
    pub fn schedule(
        &mut self,
        now: Timestamp,
        kv: &mut KvState<'_, '_>,
        plan: &mut [Work],
    ) -> StepPlan {
        let mut step = StepPlan::default();
        self.cache_computed_prompts(kv);
        self.sync_cache(kv.radix);
        let mut budget = self.config.token_budget;
        self.plan_decodes(kv, plan, &mut step, &mut budget);
        self.plan_prefill_chunks(kv, plan, &mut step, &mut budget);
        self.admit(now, kv, plan, &mut step, &mut budget);
        // Padding over the step's prefill items.
        let mut longest = 0;
        for w in &plan[..step.work] {
            if let WorkKind::Prefill { len, .. } = w.kind {
                longest = longest.max(len);
            }
        }
        step.padding_tokens = step.prefills * longest - step.prefill_tokens;
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
        slot.generated += 1;
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
    /// (prompt then generated tokens), releases its sequence and records its
    /// latencies. The pages are released even if `tokens` are not the
    /// sequence's ([`Finished::cached`] says so).
    pub fn finish(
        &mut self,
        entry: EntryId,
        tokens: &[u32],
        now: Timestamp,
        kv: &mut KvState<'_, '_>,
    ) -> Result<Finished<R>, SchedError> {
        let slot = self.live(entry)?;
        if slot.state != State::Running {
            return Err(SchedError::NotRunning);
        }
        let seq = slot.seq.ok_or(SchedError::NotRunning)?;
        let cached = kv.radix.insert(kv.table, seq, tokens, kv.pool);
        let released = kv.table.release(seq, kv.pool);
        debug_assert!(released.is_ok());
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
    pub fn cancel(&mut self, entry: EntryId, kv: &mut KvState<'_, '_>) -> Result<R, SchedError> {
        let slot = self.live(entry)?;
        match slot.state {
            State::Waiting => self.leave_waiting(entry.slot),
            State::Running => {
                if let Some(seq) = slot.seq {
                    let released = kv.table.release(seq, kv.pool);
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

    // ---- steps -------------------------------------------------------------

    /// Caches the full prompt pages running prefills computed so far, so
    /// requests waiting on the same prefix can hit them.
    fn cache_computed_prompts(&mut self, kv: &mut KvState<'_, '_>) {
        let mut cursor = self.run_head;
        while cursor != NIL {
            let slot = &self.slots[cursor as usize];
            let next = slot.run_next;
            let done = slot.prefilled / PAGE_SIZE as u32 * PAGE_SIZE as u32;
            if let (Some(seq), Some(request), true) =
                (slot.seq, &slot.request, done > slot.cached_upto)
            {
                let cached =
                    kv.radix
                        .insert(kv.table, seq, &request.prompt()[..done as usize], kv.pool);
                debug_assert!(cached.is_ok(), "{cached:?}");
                self.slots[cursor as usize].cached_upto = done;
                // Watch where this prefill grows the cache next.
                if self.policy.cache_aware() {
                    self.score(cursor, kv.radix);
                }
            }
            cursor = next;
        }
    }

    /// Scores again the waiting requests whose match the cache grew under.
    fn sync_cache(&mut self, radix: &RadixCache<'_>) {
        if !self.policy.cache_aware() {
            self.growth_cursor = radix.growth_cursor();
            return;
        }
        match radix.growth_since(self.growth_cursor) {
            Growth::Overflowed => self.rescore_all(radix),
            Growth::Keys(keys) => {
                for key in keys {
                    let mut cursor = self.watch[self.watch_bucket(key)];
                    while cursor != NIL {
                        let next = self.slots[cursor as usize].watch_next;
                        let s = &self.slots[cursor as usize];
                        if s.watch == Some(key) && s.state == State::Waiting {
                            self.rescore(cursor, radix);
                            self.metrics.rescored += 1;
                        }
                        cursor = next;
                    }
                }
            }
        }
        self.growth_cursor = radix.growth_cursor();
    }

    fn plan_decodes(
        &mut self,
        kv: &mut KvState<'_, '_>,
        plan: &mut [Work],
        step: &mut StepPlan,
        budget: &mut u32,
    ) {
        let mut cursor = self.run_head;
        while cursor != NIL && step.work < plan.len() && *budget > 0 {
            let slot = &self.slots[cursor as usize];
            let mut next = slot.run_next;
            let in_decode = slot.prefilled == slot.prompt_len
                && slot.generated >= 1
                && slot.generated < slot.max_output;
            let Some(seq) = slot.seq.filter(|_| in_decode) else {
                cursor = next;
                continue;
            };
            // A decode always gets its page: preempt from the bottom if need be.
            if let Some(appended) =
                self.append_or_preempt(cursor, &mut next, seq, 1, true, kv, step)
            {
                plan[step.work] = Work {
                    entry: self.entry_id(cursor),
                    seq,
                    kind: WorkKind::Decode {
                        position: appended.first_position,
                    },
                    copy: appended.copy,
                };
                step.work += 1;
                step.decode_tokens += 1;
                *budget -= 1;
            }
            cursor = next;
        }
    }

    fn plan_prefill_chunks(
        &mut self,
        kv: &mut KvState<'_, '_>,
        plan: &mut [Work],
        step: &mut StepPlan,
        budget: &mut u32,
    ) {
        let mut cursor = self.run_head;
        while cursor != NIL && step.work < plan.len() && *budget > 0 {
            let slot = &self.slots[cursor as usize];
            let mut next = slot.run_next;
            let (Some(seq), true) = (slot.seq, slot.prefilled < slot.prompt_len) else {
                cursor = next;
                continue;
            };
            let start = slot.prefilled;
            let len = (slot.prompt_len - start).min(*budget);
            // Preempt only when nothing else progresses this step (or this
            // would deadlock); otherwise others will free pages: wait a step.
            let may_preempt = step.work == 0;
            if let Some(appended) =
                self.append_or_preempt(cursor, &mut next, seq, len, may_preempt, kv, step)
            {
                self.push_prefill(cursor, seq, start, len, false, appended.copy, plan, step);
                *budget -= len;
            }
            cursor = next;
        }
    }

    fn admit(
        &mut self,
        now: Timestamp,
        kv: &mut KvState<'_, '_>,
        plan: &mut [Work],
        step: &mut StepPlan,
        budget: &mut u32,
    ) {
        // Pages promised to running prefills for their remaining chunks.
        let mut reserved: u64 = 0;
        let mut cursor = self.run_head;
        while cursor != NIL {
            let s = &self.slots[cursor as usize];
            if let Some(seq) = s.seq {
                let held = kv.table.pages(seq).map_or(0, |p| p.len() as u64);
                let whole = KvGeometry::pages_for_tokens(u64::from(s.prompt_len) + 1);
                reserved += whole.saturating_sub(held);
            }
            cursor = s.run_next;
        }
        let threshold = self
            .policy
            .fairness_threshold_us()
            .or(self.config.fairness_threshold_us);
        let mut skipped = NIL;
        let mut skips = 0;
        let mut first_prefill_len: Option<u32> = None;
        while self.running < self.config.max_batch
            && *budget > 0
            && step.work < plan.len()
            && skips <= self.config.max_skips
        {
            // The fairness override first, then the policy's choice.
            let oldest = self.heap_top(AGE_HEAP);
            let overdue = oldest != NIL
                && threshold
                    .is_some_and(|t| now.micros_since(self.slots[oldest as usize].arrived_at) > t);
            let candidate = if overdue {
                oldest
            } else {
                self.heap_top(POLICY_HEAP)
            };
            if candidate == NIL {
                break;
            }
            // Confirm the score against the cache as it is now.
            if !overdue
                && self.policy.cache_aware()
                && self.slots[candidate as usize].scored_at != kv.radix.version()
            {
                let before = self.slots[candidate as usize].key;
                self.rescore(candidate, kv.radix);
                if self.slots[candidate as usize].key < before {
                    continue;
                }
            }
            let slot = &self.slots[candidate as usize];
            let Some(request) = slot.request.as_ref() else {
                debug_assert!(false, "waiting entries hold a request");
                break;
            };
            let prompt = request.prompt();
            let lookup = &prompt[..prompt.len() - 1];
            // Wait a step for a prefix another running request is computing.
            if !overdue
                && self.config.share_prefixes
                && self.policy.cache_aware()
                && self.shares_inflight_prefix(candidate)
            {
                self.skip(candidate, &mut skipped);
                step.deferred += 1;
                self.metrics.shared_prefix_deferrals += 1;
                skips += 1;
                continue;
            }
            let matched_pages = kv.radix.peek_pages(lookup, kv.scratch);
            let matched = matched_pages * PAGE_SIZE as u32;
            let chunk = (slot.prompt_len - matched).min(*budget);
            if let (Some(factor), Some(first)) = (self.config.length_grouping, first_prefill_len) {
                let (lo, hi) = (first.min(chunk) as f32, first.max(chunk) as f32);
                if !overdue && hi > lo * factor {
                    self.skip(candidate, &mut skipped);
                    skips += 1;
                    continue;
                }
            }
            // Pages: the whole prompt (and the first output token) minus the
            // matched pages, plus matched pages that are evictable now (they
            // stop being evictable once shared).
            let whole = KvGeometry::pages_for_tokens(u64::from(slot.prompt_len) + 1);
            let evictable = kv.scratch[..matched_pages as usize]
                .iter()
                .filter(|&&p| kv.pool.refcount(p) == Ok(0))
                .count() as u64;
            let needed = whole - u64::from(matched_pages) + evictable;
            let available = u64::from(kv.pool.available_pages()).saturating_sub(reserved);
            if needed > available {
                // Hold the pages that free up for an overdue request, unless
                // even the whole pool could never hold it.
                if overdue && whole <= u64::from(kv.pool.total_pages()) {
                    break;
                }
                self.skip(candidate, &mut skipped);
                step.skipped_for_pages += 1;
                skips += 1;
                continue;
            }
            // Admit: share the cached prefix, append the first chunk.
            let hit = kv.radix.match_prefix(lookup, kv.scratch, kv.pool);
            debug_assert_eq!(hit.pages, matched_pages);
            let Ok(seq) = kv
                .table
                .create_with_prefix(&kv.scratch[..matched_pages as usize], kv.pool)
            else {
                break; // no free row
            };
            let appended = match kv.table.append(seq, chunk, kv.pool, kv.radix) {
                Ok(a) => a,
                Err(_) => {
                    let released = kv.table.release(seq, kv.pool);
                    debug_assert!(released.is_ok());
                    self.skip(candidate, &mut skipped);
                    skips += 1;
                    continue;
                }
            };
            self.leave_waiting(candidate);
            let s = &mut self.slots[candidate as usize];
            s.state = State::Running;
            s.seq = Some(seq);
            s.prefilled = matched;
            s.cached_upto = matched;
            s.generated = 0;
            let (wait, first_time, prompt_len) =
                (now.micros_since(s.arrived_at), !s.admitted, s.prompt_len);
            s.admitted = true;
            // Keep watching: the key is where this request's computed pages
            // will grow the cache, which the in-batch sharing check reads.
            self.link_running(candidate);
            reserved += whole.saturating_sub(u64::from(matched_pages + appended.pages_added));
            self.push_prefill(
                candidate,
                seq,
                matched,
                chunk,
                true,
                appended.copy,
                plan,
                step,
            );
            *budget -= chunk;
            first_prefill_len.get_or_insert(chunk);
            step.admitted += 1;
            step.cached_tokens += matched;
            if overdue {
                step.overdue_admitted += 1;
                self.metrics.fairness_overrides += 1;
            }
            if first_time {
                self.metrics.wait.record(wait);
            }
            self.metrics.prompt_tokens += u64::from(prompt_len);
            self.metrics.cached_tokens += u64::from(matched);
        }
        // Passed-over requests go back in line.
        while skipped != NIL {
            let next = self.slots[skipped as usize].skip_next;
            self.slots[skipped as usize].skip_next = NIL;
            self.heap_push(POLICY_HEAP, skipped);
            self.heap_push(AGE_HEAP, skipped);
            skipped = next;
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn push_prefill(
        &mut self,
        index: u32,
        seq: SeqId,
        start: u32,
        len: u32,
        first: bool,
        copy: Option<PageCopy>,
        plan: &mut [Work],
        step: &mut StepPlan,
    ) {
        let slot = &mut self.slots[index as usize];
        slot.prefilled = start + len;
        let last = slot.prefilled == slot.prompt_len;
        plan[step.work] = Work {
            entry: EntryId {
                slot: index,
                generation: slot.generation,
            },
            seq,
            kind: WorkKind::Prefill {
                start,
                len,
                first,
                last,
            },
            copy,
        };
        step.work += 1;
        step.prefills += 1;
        step.prefill_tokens += len;
    }

    /// Whether a running prefill is computing the page this waiting request
    /// would match next.
    fn shares_inflight_prefix(&self, candidate: u32) -> bool {
        let Some(key) = self.slots[candidate as usize].watch else {
            return false;
        };
        let mut cursor = self.run_head;
        while cursor != NIL {
            let s = &self.slots[cursor as usize];
            // Its prompt pages are not all cached yet (those computed in the
            // last step are cached at the start of the next).
            let uncached = (s.cached_upto / PAGE_SIZE as u32) < s.prompt_len / PAGE_SIZE as u32;
            if uncached && s.watch == Some(key) {
                return true;
            }
            cursor = s.run_next;
        }
        false
    }

    fn skip(&mut self, index: u32, skipped: &mut u32) {
        self.heap_remove(POLICY_HEAP, index);
        self.heap_remove(AGE_HEAP, index);
        self.slots[index as usize].skip_next = *skipped;
        *skipped = index;
    }

    /// Preempts the lowest-priority running sequence so `cursor` can get
    /// pages. `next` is the caller's place in the running list: the victim is
    /// the list's tail, so if it was `next`, nothing follows any more.
    /// Returns whether `cursor` itself was the victim.
    /// Appends `len` tokens to the running entry at `cursor`. When the pool
    /// is exhausted and `may_preempt`, preempts from the bottom of the running
    /// list until the append fits or the entry itself was preempted (`None`).
    /// Any other refusal is `None` too: `add` caps output at the row's length.
    #[allow(clippy::too_many_arguments)]
    fn append_or_preempt(
        &mut self,
        cursor: u32,
        next: &mut u32,
        seq: SeqId,
        len: u32,
        may_preempt: bool,
        kv: &mut KvState<'_, '_>,
        step: &mut StepPlan,
    ) -> Option<Appended> {
        loop {
            match kv.table.append(seq, len, kv.pool, kv.radix) {
                Ok(appended) => return Some(appended),
                Err(AppendError::PoolExhausted { .. }) if may_preempt => {
                    if self.preempt_lowest(cursor, next, kv, step) {
                        return None;
                    }
                }
                Err(_) => return None,
            }
        }
    }

    fn preempt_lowest(
        &mut self,
        cursor: u32,
        next: &mut u32,
        kv: &mut KvState<'_, '_>,
        step: &mut StepPlan,
    ) -> bool {
        let victim = self.run_tail;
        if victim == *next {
            *next = NIL;
        }
        self.preempt(victim, kv);
        step.preempted += 1;
        victim == cursor
    }

    /// Releases a running sequence and puts its request back in line with
    /// its original arrival, to be computed again.
    fn preempt(&mut self, index: u32, kv: &mut KvState<'_, '_>) {
        if let Some(seq) = self.slots[index as usize].seq.take() {
            let released = kv.table.release(seq, kv.pool);
            debug_assert!(released.is_ok());
        }
        self.unlink_running(index);
        let s = &mut self.slots[index as usize];
        s.prefilled = 0;
        s.cached_upto = 0;
        s.generated = 0;
        s.state = State::Waiting;
        self.metrics.preemptions += 1;
        self.enter_waiting(index, kv.radix);
    }

    // ---- waiting set -------------------------------------------------------

    fn enter_waiting(&mut self, index: u32, radix: &RadixCache<'_>) {
        self.slots[index as usize].state = State::Waiting;
        self.score(index, radix);
        self.heap_push(POLICY_HEAP, index);
        self.heap_push(AGE_HEAP, index);
        self.waiting += 1;
    }

    fn leave_waiting(&mut self, index: u32) {
        self.heap_remove(POLICY_HEAP, index);
        self.heap_remove(AGE_HEAP, index);
        // A running prefill keeps its watch key (for in-batch sharing); a
        // finished or cancelled entry's is dropped in `free_slot`.
        self.waiting -= 1;
    }

    /// Computes an entry's match, key and watch without touching heaps.
    /// Policies that ignore the cache skip the lookup.
    fn score(&mut self, index: u32, radix: &RadixCache<'_>) {
        self.unwatch(index);
        let s = &self.slots[index as usize];
        let probe = if self.policy.cache_aware() {
            let prompt = s.request.as_ref().map_or(&[][..], |r| r.prompt());
            radix.probe_prefix(&prompt[..prompt.len().saturating_sub(1)])
        } else {
            PrefixProbe::default()
        };
        let score = self.policy.score(probe.tokens, s.prompt_len);
        let age = s
            .arrived_at
            .micros_since(self.epoch.unwrap_or(s.arrived_at)) as f64
            / 1e6;
        let key = self.config.class_weight * s.priority.index() as f64 + score
            - self.config.aging_per_second * age;
        let version = radix.version();
        let s = &mut self.slots[index as usize];
        s.key = key;
        s.scored_at = version;
        s.watch = probe.next_key;
        self.rewatch(index);
    }

    /// Scores a waiting entry again and fixes its heap place.
    fn rescore(&mut self, index: u32, radix: &RadixCache<'_>) {
        self.score(index, radix);
        if self.slots[index as usize].heap_pos[POLICY_HEAP] != NIL {
            self.heap_fix(POLICY_HEAP, index);
        }
    }

    fn rescore_all(&mut self, radix: &RadixCache<'_>) {
        let len = self.heap_len[POLICY_HEAP];
        for i in 0..len {
            let index = self.slots[i as usize].heap_item[POLICY_HEAP];
            self.score(index, radix);
        }
        // Heapify bottom-up: O(n).
        for i in (0..len / 2).rev() {
            self.sift_down(POLICY_HEAP, i);
        }
        self.growth_cursor = radix.growth_cursor();
        self.metrics.full_rescores += 1;
    }

    fn watch_bucket(&self, key: u64) -> usize {
        (key >> self.watch_shift) as usize
    }

    fn rewatch(&mut self, index: u32) {
        let Some(key) = self.slots[index as usize].watch else {
            return;
        };
        let bucket = self.watch_bucket(key);
        let head = self.watch[bucket];
        let s = &mut self.slots[index as usize];
        s.watch_prev = NIL;
        s.watch_next = head;
        if head != NIL {
            self.slots[head as usize].watch_prev = index;
        }
        self.watch[bucket] = index;
    }

    fn unwatch(&mut self, index: u32) {
        let s = &self.slots[index as usize];
        let Some(key) = s.watch else {
            return;
        };
        let (prev, next) = (s.watch_prev, s.watch_next);
        if prev == NIL {
            let bucket = self.watch_bucket(key);
            self.watch[bucket] = next;
        } else {
            self.slots[prev as usize].watch_next = next;
        }
        if next != NIL {
            self.slots[next as usize].watch_prev = prev;
        }
        let s = &mut self.slots[index as usize];
        s.watch = None;
        s.watch_prev = NIL;
        s.watch_next = NIL;
    }

    // ---- running list (priority order: class, then arrival) -----------------

    fn runs_before(&self, a: u32, b: u32) -> bool {
        let (x, y) = (&self.slots[a as usize], &self.slots[b as usize]);
        (core::cmp::Reverse(x.priority), x.arrival) < (core::cmp::Reverse(y.priority), y.arrival)
    }

    fn link_running(&mut self, index: u32) {
        let mut after = self.run_tail;
        while after != NIL && self.runs_before(index, after) {
            after = self.slots[after as usize].run_prev;
        }
        let next = if after == NIL {
            self.run_head
        } else {
            self.slots[after as usize].run_next
        };
        let s = &mut self.slots[index as usize];
        s.run_prev = after;
        s.run_next = next;
        if after == NIL {
            self.run_head = index;
        } else {
            self.slots[after as usize].run_next = index;
        }
        if next == NIL {
            self.run_tail = index;
        } else {
            self.slots[next as usize].run_prev = index;
        }
        self.running += 1;
    }

    fn unlink_running(&mut self, index: u32) {
        let s = &self.slots[index as usize];
        let (prev, next) = (s.run_prev, s.run_next);
        if prev == NIL {
            self.run_head = next;
        } else {
            self.slots[prev as usize].run_next = next;
        }
        if next == NIL {
            self.run_tail = prev;
        } else {
            self.slots[next as usize].run_prev = prev;
        }
        let s = &mut self.slots[index as usize];
        s.run_prev = NIL;
        s.run_next = NIL;
        s.seq = None;
        self.running -= 1;
    }

    // ---- slots --------------------------------------------------------------

    fn entry_id(&self, index: u32) -> EntryId {
        EntryId {
            slot: index,
            generation: self.slots[index as usize].generation,
        }
    }

    fn live(&self, entry: EntryId) -> Result<&SchedSlot<R>, SchedError> {
        self.slots
            .get(entry.slot as usize)
            .filter(|s| s.generation == entry.generation && s.state != State::Free)
            .ok_or(SchedError::UnknownEntry)
    }

    fn live_mut(&mut self, entry: EntryId) -> Result<&mut SchedSlot<R>, SchedError> {
        self.slots
            .get_mut(entry.slot as usize)
            .filter(|s| s.generation == entry.generation && s.state != State::Free)
            .ok_or(SchedError::UnknownEntry)
    }

    /// Frees a slot that is in no heap and no running list.
    fn free_slot(&mut self, index: u32) -> Option<R> {
        self.unwatch(index);
        let free_head = self.free_head;
        let s = &mut self.slots[index as usize];
        let request = s.request.take();
        debug_assert!(request.is_some(), "live entries hold a request");
        s.state = State::Free;
        s.generation = s.generation.wrapping_add(1);
        s.next_free = free_head;
        self.free_head = index;
        request
    }

    // ---- the two heaps (columns of the slot array) ---------------------------

    fn before(&self, h: usize, a: u32, b: u32) -> bool {
        let (x, y) = (&self.slots[a as usize], &self.slots[b as usize]);
        if h == POLICY_HEAP {
            match x.key.total_cmp(&y.key) {
                core::cmp::Ordering::Greater => true,
                core::cmp::Ordering::Less => false,
                core::cmp::Ordering::Equal => x.arrival < y.arrival,
            }
        } else {
            (x.arrived_at, x.arrival) < (y.arrived_at, y.arrival)
        }
    }

    fn heap_top(&self, h: usize) -> u32 {
        if self.heap_len[h] == 0 {
            NIL
        } else {
            self.slots[0].heap_item[h]
        }
    }

    fn heap_set(&mut self, h: usize, pos: u32, index: u32) {
        self.slots[pos as usize].heap_item[h] = index;
        self.slots[index as usize].heap_pos[h] = pos;
    }

    fn heap_push(&mut self, h: usize, index: u32) {
        let pos = self.heap_len[h];
        self.heap_len[h] += 1;
        self.heap_set(h, pos, index);
        self.sift_up(h, pos);
    }

    fn heap_remove(&mut self, h: usize, index: u32) {
        let pos = self.slots[index as usize].heap_pos[h];
        if pos == NIL {
            return;
        }
        self.heap_len[h] -= 1;
        let last = self.heap_len[h];
        let moved = self.slots[last as usize].heap_item[h];
        self.slots[last as usize].heap_item[h] = NIL;
        self.slots[index as usize].heap_pos[h] = NIL;
        if pos != last {
            self.heap_set(h, pos, moved);
            self.sift_down(h, pos);
            self.sift_up(h, self.slots[moved as usize].heap_pos[h]);
        }
    }

    fn heap_fix(&mut self, h: usize, index: u32) {
        let pos = self.slots[index as usize].heap_pos[h];
        self.sift_up(h, pos);
        let pos = self.slots[index as usize].heap_pos[h];
        self.sift_down(h, pos);
    }

    fn sift_up(&mut self, h: usize, mut pos: u32) {
        let index = self.slots[pos as usize].heap_item[h];
        while pos > 0 {
            let parent = (pos - 1) / 2;
            let above = self.slots[parent as usize].heap_item[h];
            if !self.before(h, index, above) {
                break;
            }
            self.heap_set(h, pos, above);
            pos = parent;
        }
        self.heap_set(h, pos, index);
    }

    fn sift_down(&mut self, h: usize, mut pos: u32) {
        let len = self.heap_len[h];
        let index = self.slots[pos as usize].heap_item[h];
        loop {
            let left = 2 * pos + 1;
            if left >= len {
                break;
            }
            let right = left + 1;
            let mut child = left;
            let left_item = self.slots[left as usize].heap_item[h];
            if right < len {
                let right_item = self.slots[right as usize].heap_item[h];
                if self.before(h, right_item, left_item) {
                    child = right;
                }
            }
            let below = self.slots[child as usize].heap_item[h];
            if !self.before(h, below, index) {
                break;
            }
            self.heap_set(h, pos, below);
            pos = child;
        }
        self.heap_set(h, pos, index);
    }
}
