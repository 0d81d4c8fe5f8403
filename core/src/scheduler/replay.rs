//! Replaying a request trace through the real scheduler, page pool and
//! prefix cache on a simulated clock, to compare policies on the same
//! traffic: the cache-hit-rate gain of LPM over FCFS, and what it does to
//! waiting and latency percentiles.
//!
//! Only the compute is simulated (a [`CostModel`] says how long a step
//! takes); admission, chunking, caching, eviction and preemption are the
//! code the engine runs. Finished requests cache their prompt pages (the
//! simulator generates no real tokens).

use core::fmt;

use super::{
    Policy, SchedError, SchedSlot, Scheduler, SchedulerConfig, SchedulerMetrics, Work, WorkKind,
};
use crate::error::StorageError;
use crate::kv_cache::{KvCache, KvStorage};
use crate::queue::RequestId;
use crate::request::{Priority, Request};
use crate::time::Timestamp;

/// One request of a trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceRequest<'t> {
    /// When it arrives.
    pub arrival: Timestamp,
    /// Its prompt tokens.
    pub prompt: &'t [u32],
    /// Tokens it generates (at least 1).
    pub output_tokens: u32,
    /// Its class.
    pub priority: Priority,
}

impl Request for TraceRequest<'_> {
    fn prompt(&self) -> &[u32] {
        self.prompt
    }

    fn max_output_tokens(&self) -> u32 {
        self.output_tokens.max(1)
    }
}

/// How long a simulated step takes: a fixed cost plus a cost per prefill
/// token and per decoding sequence, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CostModel {
    /// Fixed cost of a step.
    pub step_us: f64,
    /// Cost of one prefill token.
    pub prefill_token_us: f64,
    /// Cost of one decode token.
    pub decode_token_us: f64,
}

impl Default for CostModel {
    /// Roughly a small model on one CPU socket.
    fn default() -> Self {
        Self {
            step_us: 2_000.0,
            prefill_token_us: 50.0,
            decode_token_us: 300.0,
        }
    }
}

impl CostModel {
    fn step(&self, prefill: u32, decode: u32) -> u64 {
        let us = self.step_us
            + self.prefill_token_us * f64::from(prefill)
            + self.decode_token_us * f64::from(decode);
        if us.is_finite() && us > 1.0 {
            us as u64
        } else {
            1
        }
    }
}

/// The storage a replay runs on; every run starts it afresh.
#[derive(Debug)]
pub struct ReplayStorage<'a, 't> {
    /// The KV cache's storage: the pool's size, page-table rows (at least
    /// `max_batch` sequences), radix nodes and index, a scratch row.
    pub kv: KvStorage<'a>,
    /// Scheduler slots: how many requests may wait or run at once.
    pub slots: &'a mut [SchedSlot<TraceRequest<'t>>],
    /// Scheduler watch table.
    pub watch: &'a mut [u32],
    /// The step plan (at least `max_batch`).
    pub plan: &'a mut [Work],
}

/// Why a replay stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReplayError {
    /// The storage cannot build a pool, table or cache.
    Storage(StorageError),
    /// The scheduler refused its storage or configuration.
    Scheduler(SchedError),
    /// Requests are not in arrival order.
    UnsortedTrace,
    /// Requests wait, nothing runs and nothing can be admitted.
    Stalled {
        /// Simulated time, in microseconds.
        at_us: u64,
    },
}

impl fmt::Display for ReplayError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Storage(e) => write!(f, "replay storage: {e}"),
            Self::Scheduler(e) => write!(f, "replay scheduler: {e}"),
            Self::UnsortedTrace => f.write_str("trace is not in arrival order"),
            Self::Stalled { at_us } => write!(f, "replay stalled at {at_us} µs"),
        }
    }
}

impl core::error::Error for ReplayError {}

impl From<StorageError> for ReplayError {
    fn from(e: StorageError) -> Self {
        Self::Storage(e)
    }
}

impl From<SchedError> for ReplayError {
    fn from(e: SchedError) -> Self {
        Self::Scheduler(e)
    }
}

/// One policy's run over a trace.
#[derive(Debug, Clone)]
pub struct ReplayReport {
    /// The policy's name.
    pub policy: &'static str,
    /// What the scheduler measured.
    pub metrics: SchedulerMetrics,
    /// Steps run.
    pub steps: u64,
    /// Requests refused (empty or too long).
    pub rejected: u64,
    /// Pages still referenced after the run: always zero unless a bug leaks.
    pub leaked_pages: u32,
}

/// The same trace under FCFS and under another policy.
#[derive(Debug, Clone)]
pub struct Comparison {
    /// The FCFS baseline.
    pub fcfs: ReplayReport,
    /// The chosen policy.
    pub chosen: ReplayReport,
}

impl Comparison {
    /// Cache hit rate of the chosen policy minus FCFS's, in percentage
    /// points.
    pub fn hit_rate_gain_points(&self) -> f64 {
        100.0 * (self.chosen.metrics.cache_hit_rate() - self.fcfs.metrics.cache_hit_rate())
    }
}

/// Replays `trace` (sorted by arrival) under `policy`.
pub fn replay<'t>(
    trace: &[TraceRequest<'t>],
    storage: &mut ReplayStorage<'_, 't>,
    config: SchedulerConfig,
    policy: Policy,
    cost: CostModel,
) -> Result<ReplayReport, ReplayError> {
    if trace.windows(2).any(|w| w[0].arrival > w[1].arrival) {
        return Err(ReplayError::UnsortedTrace);
    }
    let mut kv = KvCache::new(storage.kv.reborrow())?;
    // A prompt must fit its row and the whole pool.
    let mut scheduler = Scheduler::new(
        &mut *storage.slots,
        &mut *storage.watch,
        config,
        policy,
        kv.max_context_tokens(),
    )?;
    let plan = &mut *storage.plan;
    let mut now = trace.first().map_or(Timestamp(0), |r| r.arrival);
    let mut next = 0;
    let mut steps = 0u64;
    let mut rejected = 0u64;
    loop {
        // Arrivals up to now join, as long as there is room.
        while let Some(request) = trace.get(next).filter(|r| r.arrival <= now) {
            let id = RequestId::from_bits(next as u64);
            match scheduler.add(
                *request,
                id,
                request.priority,
                next as u64,
                request.arrival,
                &kv,
            ) {
                Ok(_) => next += 1,
                Err((_, SchedError::Full)) => break,
                Err(_) => {
                    rejected += 1;
                    next += 1;
                }
            }
        }
        if scheduler.is_idle() {
            match trace.get(next) {
                Some(r) => {
                    now = now.max(r.arrival);
                    continue;
                }
                None => break,
            }
        }
        let step = scheduler.schedule(now, &mut kv, plan);
        steps += 1;
        if step.work == 0 {
            // Nothing could run: only a later arrival can change that.
            match trace.get(next) {
                Some(r) if r.arrival > now => {
                    now = r.arrival;
                    continue;
                }
                _ => {
                    return Err(ReplayError::Stalled {
                        at_us: now.micros(),
                    })
                }
            }
        }
        now = Timestamp(now.micros() + cost.step(step.prefill_tokens, step.decode_tokens));
        for work in plan.get(..step.work).unwrap_or(&[]) {
            let samples = match work.kind {
                WorkKind::Prefill { last, .. } => last,
                WorkKind::Decode { .. } => true,
            };
            if !samples {
                continue;
            }
            if scheduler.record_token(work.entry, now)? {
                let prompt = scheduler.request(work.entry).map_or(&[][..], |r| r.prompt);
                scheduler.finish(work.entry, prompt, now, &mut kv)?;
            }
        }
    }
    Ok(ReplayReport {
        policy: super::SchedulerPolicy::name(&policy),
        metrics: scheduler.metrics().clone(),
        steps,
        rejected,
        leaked_pages: kv.referenced_pages(),
    })
}

/// Replays `trace` under FCFS and under `policy`, on the same storage one
/// after the other.
pub fn compare<'t>(
    trace: &[TraceRequest<'t>],
    storage: &mut ReplayStorage<'_, 't>,
    config: SchedulerConfig,
    policy: Policy,
    cost: CostModel,
) -> Result<Comparison, ReplayError> {
    let fcfs = replay(trace, storage, config, Policy::Fcfs(super::Fcfs), cost)?;
    let chosen = replay(trace, storage, config, policy, cost)?;
    Ok(Comparison { fcfs, chosen })
}
