//! A scripted serving workload through pagoda-core, over storage the caller
//! hands in once: the firmware passes a `static`, the host a box. Both call
//! [`run`] and print what it writes; CI diffs the two byte for byte, so the
//! figures the microcontroller prints are checked, not just produced.
//!
//! The engine loop is the one a real engine runs, without a model: requests
//! arrive into the [`RequestQueue`], move into the [`Scheduler`] while it has
//! room, each step's plan is "computed" on a simulated clock (a fixed cost
//! per step, per prefill token and per decode token), every sampled token is
//! scripted, and finished requests cache their prompt and answer in the
//! radix cache for the follow-ups. It runs under LPM, then FCFS on the same
//! storage for comparison.
#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod report;
pub mod script;

use core::fmt;

use pagoda_core::scheduler::{
    Fcfs, Lpm, Policy, SchedError, SchedSlot, Scheduler, SchedulerConfig, Work, WorkKind,
};
use pagoda_core::{
    KvCache, KvDtype, KvGeometry, KvStorage, PageEntry, PageId, QueueSlot, RadixCache, RadixNode,
    Request, RequestQueue, SeqEntry, StorageError, Timestamp, PAGE_SIZE,
};

pub use report::Outcome;
use script::{Scripted, REQUESTS};

/// Pages in the KV pool.
pub const PAGES: usize = 48;
/// Sequences running at once (page-table rows, the batch).
pub const SEQS: usize = 4;
/// Pages per sequence: 256 tokens.
pub const ROW: usize = 16;
/// Radix nodes: one per page.
pub const NODES: usize = PAGES;
/// Radix index entries.
pub const INDEX: usize = RadixCache::index_len_for(NODES);
/// Request-queue slots.
pub const QUEUE: usize = 32;
/// Scheduler slots: waiting plus running requests.
pub const SLOTS: usize = 12;
/// The scheduler's watch table.
pub const WATCH: usize = Scheduler::<Scripted, Policy>::watch_len_for(SLOTS);
/// Steps after which a run counts as hung.
const MAX_STEPS: u64 = 100_000;

/// Simulated cost of a step, in microseconds.
const STEP_US: u64 = 2_000;
/// Simulated cost of one prefill token.
const PREFILL_TOKEN_US: u64 = 50;
/// Simulated cost of one decode token.
const DECODE_TOKEN_US: u64 = 300;

/// Everything the workload runs on, in one place so it can be one `static`.
pub struct Storage {
    pages: [PageEntry; PAGES],
    rows: [PageId; SEQS * ROW],
    seqs: [SeqEntry; SEQS],
    nodes: [RadixNode; NODES],
    index: [u64; INDEX],
    scratch: [PageId; ROW],
    queue: [QueueSlot<Scripted>; QUEUE],
    slots: [SchedSlot<Scripted>; SLOTS],
    watch: [u32; WATCH],
    plan: [Work; SEQS],
    /// A finished request's prompt and answer, to cache.
    tokens: [u32; ROW * PAGE_SIZE],
}

impl Storage {
    /// Empty storage, built at compile time.
    pub const fn new() -> Self {
        Self {
            pages: [PageEntry::EMPTY; PAGES],
            rows: [PageId::from_index(0); SEQS * ROW],
            seqs: [SeqEntry::EMPTY; SEQS],
            nodes: [RadixNode::EMPTY; NODES],
            index: [0; INDEX],
            scratch: [PageId::from_index(0); ROW],
            queue: [QueueSlot::EMPTY; QUEUE],
            slots: [SchedSlot::EMPTY; SLOTS],
            watch: [0; WATCH],
            plan: [Work::EMPTY; SEQS],
            tokens: [0; ROW * PAGE_SIZE],
        }
    }
}

impl Default for Storage {
    fn default() -> Self {
        Self::new()
    }
}

/// Why the workload failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkloadError {
    /// The storage could not build a cache or queue.
    Storage(StorageError),
    /// The scheduler refused its setup or an entry.
    Scheduler(SchedError),
    /// Requests wait and nothing can run.
    Stalled,
    /// More than [`MAX_STEPS`] steps.
    Runaway,
    /// A request was refused, or a check on the outcome failed.
    Check(&'static str),
    /// Writing the report failed.
    Output,
}

impl fmt::Display for WorkloadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Storage(e) => write!(f, "storage: {e}"),
            Self::Scheduler(e) => write!(f, "scheduler: {e}"),
            Self::Stalled => f.write_str("requests wait and nothing can run"),
            Self::Runaway => f.write_str("no end after the step limit"),
            Self::Check(what) => write!(f, "check failed: {what}"),
            Self::Output => f.write_str("could not write the report"),
        }
    }
}

impl From<StorageError> for WorkloadError {
    fn from(e: StorageError) -> Self {
        Self::Storage(e)
    }
}

impl From<SchedError> for WorkloadError {
    fn from(e: SchedError) -> Self {
        Self::Scheduler(e)
    }
}

impl From<fmt::Error> for WorkloadError {
    fn from(_: fmt::Error) -> Self {
        Self::Output
    }
}

/// The model whose pages the queue sizes requests by: 4 layers, 2 KV heads
/// of 64, f16 (32 KiB per page).
fn geometry() -> Result<KvGeometry, WorkloadError> {
    KvGeometry::new(4, 2, 64, KvDtype::F16).map_err(|_| WorkloadError::Check("geometry"))
}

fn config() -> SchedulerConfig {
    SchedulerConfig {
        max_batch: SEQS as u32,
        token_budget: 256,
        max_skips: SLOTS as u32,
        ..SchedulerConfig::default()
    }
}

/// Runs the script under LPM, then under FCFS on the same storage, and
/// writes the report to `out`. Fails when a run stalls, hangs, leaks a page
/// or loses a request.
pub fn run(storage: &mut Storage, out: &mut impl fmt::Write) -> Result<(), WorkloadError> {
    report::header(out)?;
    let lpm = Policy::lpm(Lpm::default()).map_err(SchedError::from)?;
    let lpm = run_policy(storage, lpm)?;
    lpm.write(out)?;
    let fcfs = run_policy(storage, Policy::Fcfs(Fcfs))?;
    fcfs.write(out)?;
    report::compare(out, &lpm, &fcfs)?;
    Ok(())
}

/// Runs the whole script under `policy` on freshly built structures.
pub fn run_policy(storage: &mut Storage, policy: Policy) -> Result<Outcome, WorkloadError> {
    let mut kv = KvCache::new(KvStorage {
        pages: &mut storage.pages,
        rows: &mut storage.rows,
        seqs: &mut storage.seqs,
        nodes: &mut storage.nodes,
        index: &mut storage.index,
        scratch: &mut storage.scratch,
    })?;
    let queue = RequestQueue::new(&mut storage.queue, geometry()?, PAGES as u32)?;
    let mut scheduler = Scheduler::new(
        &mut storage.slots,
        &mut storage.watch,
        config(),
        policy,
        kv.max_context_tokens(),
    )?;
    let plan = &mut storage.plan;
    let tokens = &mut storage.tokens;
    let mut outcome = Outcome::new(policy);
    let mut now = Timestamp(0);
    let mut next = 0;
    loop {
        // Arrivals up to now join the queue at their arrival time.
        while let Some(r) = Scripted::get(next).filter(|_| script::arrival_us(next) <= now.0) {
            let at = Timestamp(script::arrival_us(next));
            if queue.enqueue(r, script::priority(next), at).is_err() {
                return Err(WorkloadError::Check("the queue refused a request"));
            }
            next += 1;
        }
        // The queue feeds the scheduler while it has room.
        while (scheduler.waiting() + scheduler.running()) < SLOTS as u32 {
            let Some(dequeued) = queue.try_dequeue() else {
                break;
            };
            if scheduler.add_dequeued(dequeued, &kv).is_err() {
                return Err(WorkloadError::Check("the scheduler refused a request"));
            }
        }
        let later = (next < REQUESTS).then(|| Timestamp(script::arrival_us(next)));
        if scheduler.is_idle() {
            match later {
                Some(t) => {
                    now = now.max(t);
                    continue;
                }
                None => break,
            }
        }
        if outcome.steps >= MAX_STEPS {
            return Err(WorkloadError::Runaway);
        }
        let step = scheduler.schedule(now, &mut kv, plan);
        outcome.steps += 1;
        outcome.record_step(&step, kv.referenced_pages());
        if step.work == 0 {
            // Nothing could run: only a later arrival can change that.
            match later {
                Some(t) if t > now => {
                    now = t;
                    continue;
                }
                _ => return Err(WorkloadError::Stalled),
            }
        }
        let cost = STEP_US
            + PREFILL_TOKEN_US * u64::from(step.prefill_tokens)
            + DECODE_TOKEN_US * u64::from(step.decode_tokens);
        now = Timestamp(now.0 + cost);
        for work in plan.get(..step.work).unwrap_or(&[]) {
            let samples = match work.kind {
                WorkKind::Prefill { last, .. } => last,
                WorkKind::Decode { .. } => true,
            };
            if samples && scheduler.record_token(work.entry, now)? {
                let len = answer(&scheduler, work.entry, tokens);
                let done = scheduler.finish(work.entry, &tokens[..len], now, &mut kv)?;
                if done.cached.is_err() {
                    return Err(WorkloadError::Check("caching a finished request failed"));
                }
            }
        }
    }
    outcome.finish(
        scheduler.metrics(),
        kv.pool_stats(now),
        kv.radix_stats(),
        queue.stats(),
        kv.referenced_pages(),
    );
    outcome.check()?;
    Ok(outcome)
}

/// Writes the entry's prompt and scripted answer to `tokens`; returns their
/// length.
fn answer(
    scheduler: &Scheduler<'_, Scripted>,
    entry: pagoda_core::scheduler::EntryId,
    tokens: &mut [u32],
) -> usize {
    let Some(request) = scheduler.request(entry) else {
        return 0;
    };
    let generated = scheduler.generated(entry).unwrap_or(0);
    let prompt = request.prompt();
    let index = request.index as usize;
    let answer = (0..generated).map(|k| script::output_token(index, k));
    let mut len = 0;
    for (slot, token) in tokens.iter_mut().zip(prompt.iter().copied().chain(answer)) {
        *slot = token;
        len += 1;
    }
    len
}
