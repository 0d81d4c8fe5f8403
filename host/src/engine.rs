//! The continuous-batching engine: requests enter the core's request queue,
//! the scheduler plans each step (admission, chunked prefill, decode,
//! preemption), the model computes it through the backend, sampled tokens go
//! back to the scheduler, and finished requests leave at once with their
//! pages cached in the radix tree.
//!
//! One step, in order:
//! 1. waiting requests move from the queue into free scheduler slots;
//! 2. [`Scheduler::schedule`] plans the step: the pages of every work item
//!    are already appended, cached prefixes are already matched;
//! 3. the batch is packed (tokens, positions, KV slots, one
//!    [`SeqAttention`] per sequence) and copy-on-write copies run;
//! 4. the model computes the step and samples the sequences that finished
//!    their prompt or decoded;
//! 5. each sampled token is recorded; a request that reached its output
//!    limit (or sampled its stop token) is finished: its full pages enter the
//!    radix cache and the rest return to the pool.
//!
//! All storage is allocated once in [`EngineStorage`] and borrowed by the
//! core's structures, exactly as an embedded host would hand in statics.

use std::collections::HashMap;
use std::fmt;
use std::time::Instant;

use pagoda_core::backend::{Backend, SeqAttention};
use pagoda_core::queue::QueueSlot;
use pagoda_core::scheduler::{
    EntryId, Policy, SchedError, SchedSlot, Scheduler, SchedulerConfig, StepPlan, Work, WorkKind,
};
use pagoda_core::{
    KvCache, KvDtype, KvError, KvGeometry, KvStorage, PageCopy, PageEntry, PageId, PoolStats,
    Priority, RadixCache, RadixNode, RadixStats, Request, RequestId, RequestQueue, SeqEntry,
    SeqError, Slot, StorageError, Timestamp, PAGE_SIZE,
};

use crate::model::{Activations, ForwardError, Model, ModelError, Sampler, SamplingParams};

/// One generation request.
#[derive(Debug, Clone, PartialEq)]
pub struct GenRequest {
    /// The caller's tag, echoed in the outcome.
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
    /// Stop early when this token is sampled.
    pub stop_token: Option<u32>,
}

impl Request for GenRequest {
    fn prompt(&self) -> &[u32] {
        &self.prompt
    }
    fn max_output_tokens(&self) -> u32 {
        self.max_new_tokens
    }
}

/// The engine's limits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EngineConfig {
    /// Batch and token budgets, fairness.
    pub scheduler: SchedulerConfig,
    /// Which waiting request goes first.
    pub policy: Policy,
    /// Pages in the KV pool.
    pub kv_pages: u32,
    /// How the KV cache stores keys and values.
    pub kv_dtype: KvDtype,
    /// Requests the queue holds before refusing.
    pub queue_capacity: u32,
    /// Requests the scheduler considers at once (waiting plus running); the
    /// rest wait in the queue.
    pub scheduler_slots: u32,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            scheduler: SchedulerConfig::default(),
            policy: Policy::Lpm(pagoda_core::scheduler::Lpm::default()),
            kv_pages: 2048,
            kv_dtype: KvDtype::F16,
            queue_capacity: 65_536,
            scheduler_slots: 1024,
        }
    }
}

/// Why a request was refused, with the request's tag.
#[derive(Debug, Clone, PartialEq)]
pub enum Rejection {
    /// The prompt or its sampling parameters do not fit the model.
    Invalid(String),
    /// The request queue refused it (empty, larger than the pool, full).
    Queue(String),
    /// The scheduler refused it (prompt fills the context).
    Scheduler(String),
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Invalid(m) => write!(f, "invalid request: {m}"),
            Self::Queue(m) => write!(f, "refused by the queue: {m}"),
            Self::Scheduler(m) => write!(f, "refused by the scheduler: {m}"),
        }
    }
}

/// Why a finished request stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum StopReason {
    /// It generated its `max_new_tokens` (or filled the context).
    Length,
    /// It sampled its stop token.
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
}

/// What became of a request.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// It ran to the end.
    Finished(Completion),
    /// It was cancelled (waiting or running); its pages were freed.
    Cancelled {
        /// The request's tag.
        tag: u64,
    },
    /// It was refused.
    Rejected {
        /// The request's tag.
        tag: u64,
        /// Why.
        reason: Rejection,
    },
}

/// Why a step failed.
#[derive(Debug)]
pub enum EngineError<E> {
    /// The backend failed (out of memory, device lost, ...).
    Backend(E),
    /// The model refused the batch (a bug: requests are checked at submit).
    Model(ModelError),
    /// The core refused an operation (a bug: the scheduler's plan is valid).
    Core(String),
}

impl<E: fmt::Display> fmt::Display for EngineError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Backend(e) => write!(f, "backend error: {e}"),
            Self::Model(e) => write!(f, "model error: {e}"),
            Self::Core(e) => write!(f, "engine bookkeeping error: {e}"),
        }
    }
}

impl<E: fmt::Debug + fmt::Display> std::error::Error for EngineError<E> {}

impl<E> From<KvError> for EngineError<E> {
    fn from(e: KvError) -> Self {
        Self::Core(e.to_string())
    }
}

impl<E> From<StorageError> for EngineError<E> {
    fn from(e: StorageError) -> Self {
        Self::Core(e.to_string())
    }
}

impl<E> From<SeqError> for EngineError<E> {
    fn from(e: SeqError) -> Self {
        Self::Core(e.to_string())
    }
}

impl<E> From<SchedError> for EngineError<E> {
    fn from(e: SchedError) -> Self {
        Self::Core(e.to_string())
    }
}

/// What one step did and where its time went.
#[derive(Debug, Clone, Copy, Default)]
pub struct StepReport {
    /// The scheduler's plan summary.
    pub plan: StepPlan,
    /// Sequences running after the step.
    pub running: u32,
    /// Microseconds in the queue, the scheduler, batch packing and finishing
    /// (radix insertion, page release): the engine's bookkeeping.
    pub bookkeeping_us: u64,
    /// Microseconds in copy-on-write copies, the forward pass and sampling.
    pub compute_us: u64,
}

/// Every buffer the engine's core structures live in, allocated once.
pub struct EngineStorage {
    pages: Vec<PageEntry>,
    rows: Vec<PageId>,
    seqs: Vec<SeqEntry>,
    nodes: Vec<RadixNode>,
    index: Vec<u64>,
    queue: Vec<QueueSlot<GenRequest>>,
    slots: Vec<SchedSlot<GenRequest>>,
    watch: Vec<u32>,
    scratch: Vec<PageId>,
}

impl EngineStorage {
    /// Storage for `config` and a model whose context is `max_context`
    /// tokens.
    pub fn new(config: &EngineConfig, max_context: u32) -> Self {
        let pages_per_seq = max_context.div_ceil(PAGE_SIZE as u32) as usize;
        let max_seqs = config.scheduler.max_batch as usize;
        let nodes = config.kv_pages.max(1) as usize;
        let slots = config.scheduler_slots.max(1) as usize;
        Self {
            pages: vec![PageEntry::EMPTY; config.kv_pages as usize],
            rows: vec![PageId::from_index(0); max_seqs * pages_per_seq],
            seqs: vec![SeqEntry::EMPTY; max_seqs],
            nodes: vec![RadixNode::EMPTY; nodes],
            index: vec![0; RadixCache::index_len_for(nodes)],
            queue: (0..config.queue_capacity.max(1))
                .map(|_| QueueSlot::EMPTY)
                .collect(),
            slots: (0..slots).map(|_| SchedSlot::EMPTY).collect(),
            watch: vec![0; Scheduler::<GenRequest>::watch_len_for(slots)],
            scratch: vec![PageId::from_index(0); pages_per_seq],
        }
    }
}

/// A running request's engine-side state.
#[derive(Debug)]
struct Live {
    id: RequestId,
    output: Vec<u32>,
    rng: fastrand::Rng,
    arrived: Timestamp,
    admitted: Option<Timestamp>,
    first_token: Option<Timestamp>,
    starts: u32,
}

/// The packed batch of one step (buffers reused across steps).
#[derive(Debug, Default)]
struct Batch {
    tokens: Vec<u32>,
    positions: Vec<u32>,
    slots: Vec<Slot>,
    /// Per sequence: work index, query start, query length, context length.
    seqs: Vec<(usize, u32, u32, u32)>,
    sample_rows: Vec<u32>,
    /// Work index of each sample row.
    samplers: Vec<usize>,
    copies: Vec<PageCopy>,
}

/// The engine over a backend `B`; see the [module docs](self).
pub struct Engine<'s, B: Backend> {
    model: &'s Model,
    backend: B,
    store: B::KvStore,
    queue: RequestQueue<'s, GenRequest>,
    kv: KvCache<'s>,
    sched: Scheduler<'s, GenRequest>,
    plan: Vec<Work>,
    live: Vec<Option<Live>>,
    entries: HashMap<RequestId, EntryId>,
    outcomes: Vec<Outcome>,
    batch: Batch,
    activations: Activations,
    logits: Vec<f32>,
    sampler: Sampler,
    epoch: Instant,
    geometry: KvGeometry,
}

impl<'s, B: Backend> Engine<'s, B> {
    /// Builds the engine: the KV store on the backend, the core's
    /// structures over `storage`.
    pub fn new(
        model: &'s Model,
        mut backend: B,
        config: &EngineConfig,
        storage: &'s mut EngineStorage,
    ) -> Result<Self, EngineError<B::Error>> {
        let mc = model.config();
        let geometry = mc
            .kv_geometry(config.kv_dtype)
            .map_err(EngineError::Model)?;
        config
            .scheduler
            .validate()
            .map_err(|e| EngineError::Core(e.to_string()))?;
        let store = backend
            .create_kv_store(geometry, config.kv_pages)
            .map_err(EngineError::Backend)?;
        let EngineStorage {
            pages,
            rows,
            seqs,
            nodes,
            index,
            queue,
            slots,
            watch,
            scratch,
        } = storage;
        let kv = KvCache::new(KvStorage {
            pages,
            rows,
            seqs,
            nodes,
            index,
            scratch,
        })?;
        let queue = RequestQueue::new(queue, geometry, config.kv_pages)?;
        // One engine-side state per scheduler slot, indexed by entry.
        let live = (0..slots.len()).map(|_| None).collect();
        let max_context = kv.table().max_tokens_per_sequence().min(mc.max_context);
        let sched = Scheduler::new(slots, watch, config.scheduler, config.policy, max_context)?;
        Ok(Self {
            model,
            backend,
            store,
            queue,
            kv,
            sched,
            plan: vec![Work::EMPTY; config.scheduler.max_batch as usize],
            live,
            entries: HashMap::new(),
            outcomes: Vec::new(),
            batch: Batch::default(),
            activations: Activations::default(),
            logits: Vec::new(),
            sampler: Sampler::default(),
            epoch: Instant::now(),
            geometry,
        })
    }

    /// Microseconds since the engine was built: the clock of every
    /// timestamp it reports.
    pub fn now(&self) -> Timestamp {
        Timestamp(self.epoch.elapsed().as_micros() as u64)
    }

    /// The backend's name.
    pub fn backend_name(&self) -> &'static str {
        self.backend.name()
    }

    /// The KV geometry.
    pub fn geometry(&self) -> KvGeometry {
        self.geometry
    }

    /// Bytes the backend's KV store holds.
    pub fn kv_bytes(&self) -> u64 {
        self.backend.memory_bytes(&self.store)
    }

    /// Submits a request arriving at `arrived`. A request that can never run
    /// (tokens outside the vocabulary, bad sampling parameters, a prompt
    /// that fills the context, more pages than the pool) is refused at once:
    /// its outcome is [`Outcome::Rejected`] and `None` comes back.
    pub fn submit(
        &mut self,
        request: GenRequest,
        priority: Priority,
        arrived: Timestamp,
    ) -> Option<RequestId> {
        let tag = request.tag;
        if let Err(reason) = self.check(&request) {
            self.outcomes.push(Outcome::Rejected { tag, reason });
            return None;
        }
        // The queue's timestamp is the arrival: latencies count from it.
        match self.queue.enqueue(request, priority, arrived) {
            Ok(id) => Some(id),
            Err(rejected) => {
                self.outcomes.push(Outcome::Rejected {
                    tag,
                    reason: Rejection::Queue(rejected.error.to_string()),
                });
                None
            }
        }
    }

    fn check(&self, request: &GenRequest) -> Result<(), Rejection> {
        let mc = self.model.config();
        if let Some(&t) = request.prompt.iter().find(|&&t| t >= mc.vocab) {
            return Err(Rejection::Invalid(format!(
                "prompt token {t} is outside the vocabulary (0..{})",
                mc.vocab
            )));
        }
        if request.max_new_tokens == 0 {
            return Err(Rejection::Invalid("max_new_tokens is 0".into()));
        }
        request
            .sampling
            .validate()
            .map_err(|e| Rejection::Invalid(e.to_string()))
    }

    /// Cancels a request wherever it is: in the queue, waiting in the
    /// scheduler, or running (its pages are freed at once). Returns whether
    /// it was found.
    pub fn cancel(&mut self, id: RequestId) -> bool {
        if let Some(request) = self.queue.remove(id) {
            self.outcomes.push(Outcome::Cancelled { tag: request.tag });
            return true;
        }
        let Some(entry) = self.entries.remove(&id) else {
            return false;
        };
        match self.sched.cancel(entry, &mut self.kv) {
            Ok(request) => {
                self.live[entry.index() as usize] = None;
                self.outcomes.push(Outcome::Cancelled { tag: request.tag });
                true
            }
            Err(_) => false,
        }
    }

    /// Whether nothing is queued, waiting or running.
    pub fn is_idle(&self) -> bool {
        self.queue.is_empty() && self.sched.is_idle()
    }

    /// Requests running now.
    pub fn running(&self) -> u32 {
        self.sched.running()
    }

    /// Requests waiting (queue plus scheduler).
    pub fn waiting(&self) -> u32 {
        self.queue.len() as u32 + self.sched.waiting()
    }

    /// Outcomes since the last call, in the order they happened.
    pub fn take_outcomes(&mut self) -> Vec<Outcome> {
        std::mem::take(&mut self.outcomes)
    }

    /// The page pool's metrics now.
    pub fn pool_stats(&self) -> PoolStats {
        self.kv.pool_stats(self.now())
    }

    /// The prefix cache's metrics.
    pub fn radix_stats(&self) -> RadixStats {
        self.kv.radix_stats()
    }

    /// The scheduler (its metrics and policy).
    pub fn scheduler(&self) -> &Scheduler<'s, GenRequest> {
        &self.sched
    }

    /// Checks that nothing leaked: no sequence, no referenced page, every
    /// page free or cached. Meaningful when the engine is idle.
    pub fn audit(&self) -> Audit {
        let stats = self.kv.pool_stats(self.now());
        Audit {
            total_pages: stats.total_pages,
            free_pages: stats.free_pages,
            cached_pages: stats.evictable_pages,
            referenced_pages: stats.referenced_pages,
            active_sequences: self.kv.active_sequences(),
            waiting: self.waiting(),
            running: self.running(),
        }
    }

    /// Runs one step at the engine's clock; see the [module docs](self).
    pub fn step(&mut self) -> Result<StepReport, EngineError<B::Error>> {
        let started = Instant::now();
        let now = self.now();
        self.pull_from_queue();
        let plan = self.sched.schedule(now, &mut self.kv, &mut self.plan);
        self.pack(plan.work, now)?;
        let packed = Instant::now();

        let sampled = self.compute(plan.work)?;
        let computed = Instant::now();

        let now = self.now();
        for (entry, token) in sampled {
            self.accept_token(entry, token, now)?;
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
            let seed = dequeued.request.seed;
            match self.sched.add_dequeued(dequeued, &self.kv) {
                Ok(entry) => {
                    self.entries.insert(id, entry);
                    self.live[entry.index() as usize] = Some(Live {
                        id,
                        output: Vec::new(),
                        rng: fastrand::Rng::with_seed(seed),
                        arrived,
                        admitted: None,
                        first_token: None,
                        starts: 0,
                    });
                }
                Err((request, error)) => self.outcomes.push(Outcome::Rejected {
                    tag: request.tag,
                    reason: Rejection::Scheduler(error.to_string()),
                }),
            }
        }
    }

    /// Packs the plan's work items into one batch.
    fn pack(&mut self, work: usize, now: Timestamp) -> Result<(), EngineError<B::Error>> {
        let b = &mut self.batch;
        b.tokens.clear();
        b.positions.clear();
        b.slots.clear();
        b.seqs.clear();
        b.sample_rows.clear();
        b.samplers.clear();
        b.copies.clear();
        for (i, w) in self.plan[..work].iter().enumerate() {
            let live = self.live[w.entry.index() as usize]
                .as_mut()
                .ok_or_else(|| EngineError::Core("planned entry has no state".into()))?;
            let request = self
                .sched
                .request(w.entry)
                .ok_or(SchedError::UnknownEntry)?;
            let query_start = b.tokens.len() as u32;
            let (first_position, len, samples) = match w.kind {
                WorkKind::Prefill {
                    start,
                    len,
                    first,
                    last,
                } => {
                    if first {
                        // A fresh start (or a restart after preemption): the
                        // output and the sampler begin again.
                        live.output.clear();
                        live.rng = fastrand::Rng::with_seed(request.seed);
                        live.admitted = Some(now);
                        live.starts += 1;
                    }
                    let prompt = request
                        .prompt
                        .get(start as usize..(start + len) as usize)
                        .ok_or_else(|| EngineError::Core("prefill past the prompt".into()))?;
                    b.tokens.extend_from_slice(prompt);
                    (start, len, last)
                }
                WorkKind::Decode { position } => {
                    let token = *live
                        .output
                        .last()
                        .ok_or_else(|| EngineError::Core("decode before any token".into()))?;
                    b.tokens.push(token);
                    (position, 1, true)
                }
            };
            b.positions.extend(first_position..first_position + len);
            let at = b.slots.len();
            b.slots.resize(at + len as usize, Slot(0));
            self.kv
                .slot_mapping(w.seq, first_position, &mut b.slots[at..])?;
            b.seqs.push((i, query_start, len, first_position + len));
            if samples {
                b.sample_rows.push(query_start + len - 1);
                b.samplers.push(i);
            }
            if let Some(copy) = w.copy {
                b.copies.push(copy);
            }
        }
        Ok(())
    }

    /// Runs the packed batch and samples; returns (entry, token) pairs.
    fn compute(&mut self, work: usize) -> Result<Vec<(EntryId, u32)>, EngineError<B::Error>> {
        if work == 0 {
            return Ok(Vec::new());
        }
        let b = &self.batch;
        if !b.copies.is_empty() {
            self.backend
                .copy_pages(&mut self.store, &b.copies)
                .map_err(EngineError::Backend)?;
        }
        let mut seqs = Vec::with_capacity(b.seqs.len());
        for &(i, query_start, query_len, context_len) in &b.seqs {
            seqs.push(SeqAttention {
                pages: self.kv.pages(self.plan[i].seq)?,
                context_len,
                query_start,
                query_len,
            });
        }
        let input = crate::model::StepInput {
            tokens: &b.tokens,
            positions: &b.positions,
            slots: &b.slots,
            seqs: &seqs,
            sample_rows: &b.sample_rows,
        };
        self.model
            .forward(
                &mut self.backend,
                &mut self.store,
                &input,
                &mut self.activations,
                &mut self.logits,
            )
            .map_err(|e| match e {
                ForwardError::Model(e) => EngineError::Model(e),
                ForwardError::Backend(e) => EngineError::Backend(e),
            })?;
        let vocab = self.model.config().vocab as usize;
        let mut sampled = Vec::with_capacity(b.samplers.len());
        for (row, &i) in b.samplers.iter().enumerate() {
            let entry = self.plan[i].entry;
            let request = self.sched.request(entry).ok_or(SchedError::UnknownEntry)?;
            let live = self.live[entry.index() as usize]
                .as_mut()
                .ok_or_else(|| EngineError::Core("sampled entry has no state".into()))?;
            let logits = &self.logits[row * vocab..(row + 1) * vocab];
            let token = self
                .sampler
                .sample(logits, &request.sampling, &mut live.rng);
            sampled.push((entry, token));
        }
        Ok(sampled)
    }

    /// Records a sampled token; finishes the request when it is done.
    fn accept_token(
        &mut self,
        entry: EntryId,
        token: u32,
        now: Timestamp,
    ) -> Result<(), EngineError<B::Error>> {
        let index = entry.index() as usize;
        let live = self.live[index]
            .as_mut()
            .ok_or_else(|| EngineError::Core("token for an entry with no state".into()))?;
        live.output.push(token);
        live.first_token.get_or_insert(now);
        let at_limit = self.sched.record_token(entry, now)?;
        let stop_token = self
            .sched
            .request(entry)
            .is_some_and(|r| r.stop_token == Some(token));
        if !(at_limit || stop_token) {
            return Ok(());
        }
        let live = self.live[index]
            .take()
            .ok_or_else(|| EngineError::Core("finished entry has no state".into()))?;
        let request = self.sched.request(entry).ok_or(SchedError::UnknownEntry)?;
        let mut tokens = Vec::with_capacity(request.prompt.len() + live.output.len());
        tokens.extend_from_slice(&request.prompt);
        tokens.extend_from_slice(&live.output);
        let finished = self.sched.finish(entry, &tokens, now, &mut self.kv)?;
        self.entries.remove(&live.id);
        self.outcomes.push(Outcome::Finished(Completion {
            tag: finished.request.tag,
            prompt_len: finished.request.prompt.len() as u32,
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
        }));
        Ok(())
    }
}

/// Where every page and request is; see [`Engine::audit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Audit {
    /// Pages in the pool.
    pub total_pages: u32,
    /// Pages on the free list.
    pub free_pages: u32,
    /// Pages the prefix cache keeps (reclaimable).
    pub cached_pages: u32,
    /// Pages some sequence still references.
    pub referenced_pages: u32,
    /// Sequences in the page table.
    pub active_sequences: u32,
    /// Requests still waiting.
    pub waiting: u32,
    /// Requests still running.
    pub running: u32,
}

impl Audit {
    /// Whether the engine is idle and every page is free or cached.
    pub fn is_clean(&self) -> bool {
        self.referenced_pages == 0
            && self.active_sequences == 0
            && self.waiting == 0
            && self.running == 0
            && self.free_pages + self.cached_pages == self.total_pages
    }
}
