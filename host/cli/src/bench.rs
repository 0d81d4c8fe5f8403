//! Running one trace through the engine under one policy, and measuring it.
//!
//! Arrivals follow the trace on the engine's clock: a request is submitted
//! once its arrival time has passed, and the engine sleeps while nothing is
//! running and the next arrival is ahead. Latencies are measured from each
//! request's arrival time in the trace.

use std::time::Duration;

use pagoda_engine::model::{Model, SamplingParams};
use pagoda_engine::{
    Audit, Backend, BoxError, Completion, Engine, EngineConfig, EngineStorage, Event, GenRequest,
    Policy, PoolStats, Rejection, RejectionKind, RequestHandle, SchedulerPolicy, StepReport,
    Timestamp, WithBackend,
};
use serde::Serialize;

use crate::workload::TraceEntry;

/// How the trace is driven, besides the engine's configuration.
#[derive(Debug, Clone, Copy)]
pub struct DriveOptions {
    /// Sampling for every request.
    pub sampling: SamplingParams,
    /// Seed of the samplers and of cancellations.
    pub seed: u64,
    /// Share of requests the client cancels at a random moment (0 to 1).
    pub cancel_fraction: f64,
    /// Concurrency at which the bookkeeping share is reported separately.
    pub concurrency_mark: u32,
}

/// Exact percentiles of a list of latencies, in milliseconds.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Latency {
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

impl Latency {
    /// Nearest-rank percentiles of `values` (ms).
    pub fn of(values: &[f64]) -> Self {
        if values.is_empty() {
            return Self::default();
        }
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        let rank = |p: f64| {
            let i = ((p / 100.0) * v.len() as f64).ceil() as usize;
            v[i.clamp(1, v.len()) - 1]
        };
        Self {
            mean: v.iter().sum::<f64>() / v.len() as f64,
            p50: rank(50.0),
            p95: rank(95.0),
            p99: rank(99.0),
            max: v[v.len() - 1],
        }
    }
}

/// What became of a request, as the report counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OutcomeKind {
    /// It ran to the end.
    Finished,
    /// The client cancelled it.
    Cancelled,
    /// The engine refused it.
    Rejected,
    /// The engine stopped on an error before it finished.
    Failed,
}

/// One request in the report.
#[derive(Debug, Clone, Serialize)]
pub struct RequestRecord {
    /// Index in the trace.
    pub index: u64,
    /// What became of it.
    pub outcome: OutcomeKind,
    /// Why it was refused, if it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rejection: Option<RejectionKind>,
    /// The refusal in words, if it was refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Prompt tokens.
    pub prompt_tokens: u32,
    /// Generated tokens.
    pub output_tokens: u32,
    /// Time to first token (ms), if it got one.
    pub ttft_ms: Option<f64>,
    /// Arrival to finish (ms), if it finished.
    pub e2e_ms: Option<f64>,
    /// Arrival to (last) admission (ms), if it was admitted.
    pub queue_ms: Option<f64>,
    /// Preemptions it suffered.
    pub preemptions: u32,
}

/// Every figure of one policy's run.
#[derive(Debug, Clone, Serialize)]
pub struct PolicyReport {
    /// The policy's name.
    pub policy: String,
    /// Requests in the trace.
    pub requests: u64,
    /// Of those, finished.
    pub finished: u64,
    /// Cancelled by the client.
    pub cancelled: u64,
    /// Refused, with their reasons.
    pub rejected: u64,
    /// Wall time from the first arrival to the last outcome (s).
    pub duration_s: f64,
    /// Finished requests per second.
    pub requests_per_s: f64,
    /// Prompt tokens computed per second (cache hits excluded).
    pub prefill_tokens_per_s: f64,
    /// Tokens generated per second.
    pub decode_tokens_per_s: f64,
    /// Prompt tokens computed.
    pub prefill_tokens: u64,
    /// Tokens generated.
    pub decode_tokens: u64,
    /// Time to first token (ms).
    pub ttft_ms: Latency,
    /// Time per output token after the first (ms).
    pub tpot_ms: Latency,
    /// Arrival to last token (ms).
    pub e2e_ms: Latency,
    /// Arrival to admission (ms): mean and max are the queue wait.
    pub queue_wait_ms: Latency,
    /// Prompt tokens served from the prefix cache at admission, over all
    /// prompt tokens admitted (cached plus computed), in percent.
    pub cache_hit_rate_pct: f64,
    /// This hit rate minus FCFS's, in percentage points (FCFS run first).
    pub hit_rate_gain_over_fcfs_pp: Option<f64>,
    /// Pages holding data over the pool, time-weighted mean (%).
    pub pool_utilization_pct: f64,
    /// Highest utilisation seen (%).
    pub pool_peak_utilization_pct: f64,
    /// Empty token slots in pages holding data, time-weighted mean (%).
    pub fragmentation_pct: f64,
    /// Pages allocated per second.
    pub pages_allocated_per_s: f64,
    /// Pages freed or evicted per second.
    pub pages_freed_per_s: f64,
    /// Eviction events.
    pub evictions: u64,
    /// Pages reclaimed from the prefix cache.
    pub pages_evicted: u64,
    /// Running sequences preempted for recomputation.
    pub preemptions: u64,
    /// Engine steps.
    pub steps: u64,
    /// Mean sequences per step.
    pub mean_batch: f64,
    /// Most sequences running at once.
    pub peak_running: u32,
    /// Share of step time in scheduling and cache bookkeeping (%).
    pub bookkeeping_pct: f64,
    /// The same share over steps with at least `concurrency_mark`
    /// sequences running, if any.
    pub bookkeeping_pct_at_mark: Option<f64>,
    /// The mark.
    pub concurrency_mark: u32,
    /// Share of step time in model compute (%).
    pub compute_pct: f64,
    /// Where every page and request ended up.
    pub audit: Audit,
    /// Every page free or cached and every request accounted for.
    pub leak_free: bool,
    /// A digest of every generated token (FNV-1a over each finished
    /// request's trace index and tokens, in trace order).
    pub output_digest: String,
    /// Per request.
    pub per_request: Vec<RequestRecord>,
}

/// Why a run could not complete.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The engine could not be built.
    #[error("cannot build the engine: {0}")]
    Build(#[source] BoxError),
    /// A step failed.
    #[error("step failed: {0}")]
    Step(#[source] BoxError),
}

/// One policy's run, generic over the backend [`BackendChoice`] opens.
///
/// [`BackendChoice`]: pagoda_engine::BackendChoice
pub struct PolicyRun<'a, F: FnMut()> {
    /// The model.
    pub model: &'a Model,
    /// The engine's configuration (its policy is replaced).
    pub config: &'a EngineConfig,
    /// The policy to run.
    pub policy: Policy,
    /// The requests.
    pub trace: &'a [TraceEntry],
    /// How they are driven.
    pub options: &'a DriveOptions,
    /// Called once per request accounted for (for a progress bar).
    pub on_outcome: F,
}

impl<F: FnMut()> WithBackend for PolicyRun<'_, F> {
    type Output = Result<PolicyReport, BenchError>;

    fn run<B>(self, backend: B) -> Self::Output
    where
        B: Backend,
        B::Error: std::error::Error + Send + Sync + 'static,
    {
        run_policy(
            self.model,
            backend,
            self.config,
            self.policy,
            self.trace,
            self.options,
            self.on_outcome,
        )
    }
}

/// Runs `trace` on a fresh engine with `policy`, holding one handle per
/// request; `on_outcome` is called once per request accounted for.
pub fn run_policy<B>(
    model: &Model,
    backend: B,
    config: &EngineConfig,
    policy: Policy,
    trace: &[TraceEntry],
    options: &DriveOptions,
    mut on_outcome: impl FnMut(),
) -> Result<PolicyReport, BenchError>
where
    B: Backend,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    let config = EngineConfig { policy, ..*config };
    let mut storage = EngineStorage::new(&config, model.config().max_context);
    let mut engine = Engine::new(model, backend, &config, &mut storage)
        .map_err(|e| BenchError::Build(Box::new(e)))?;

    // Client-side cancellations: (time, trace index), sorted by time.
    let mut rng = fastrand::Rng::with_seed(options.seed ^ 0xC0FF_EE00);
    let mut cancels: Vec<(u64, usize)> = Vec::new();
    for (i, e) in trace.iter().enumerate() {
        let delay = rng.u64(0..1_000_000);
        if rng.f64() < options.cancel_fraction {
            cancels.push((e.arrival_us + delay, i));
        }
    }
    cancels.sort_unstable();
    // One handle per submitted request until its terminal event; `open`
    // lists the trace indices still waiting for one.
    let mut handles: Vec<Option<RequestHandle>> = (0..trace.len()).map(|_| None).collect();
    let mut open: Vec<usize> = Vec::new();

    let mut acc = Accumulator::new(trace.len(), options.concurrency_mark);
    let start = engine.now();
    let start_pool = engine.pool_stats();
    let mut next = 0;
    let mut next_cancel = 0;
    loop {
        let now = engine.now();
        while next < trace.len() && trace[next].arrival_us <= now.0 {
            let e = &trace[next];
            let request = GenRequest {
                tag: next as u64,
                prompt: e.prompt.clone(),
                max_new_tokens: e.max_tokens,
                sampling: options.sampling,
                seed: options.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ next as u64,
                stop_token: None,
            };
            match engine.submit(request, e.priority, Timestamp(start.0 + e.arrival_us)) {
                Ok(handle) => {
                    handles[next] = Some(handle);
                    open.push(next);
                }
                Err(reason) => {
                    acc.rejected(next, &reason);
                    on_outcome();
                }
            }
            next += 1;
        }
        while next_cancel < cancels.len() && cancels[next_cancel].0 <= now.0 {
            if let Some(Some(handle)) = handles.get(cancels[next_cancel].1) {
                handle.cancel();
            }
            next_cancel += 1;
        }
        poll(&mut handles, &mut open, &mut acc, &mut on_outcome);
        // An idle engine has sent every terminal event: `open` is empty.
        if engine.is_idle() {
            if next == trace.len() {
                break;
            }
            let wait = trace[next].arrival_us.saturating_sub(engine.now().0);
            std::thread::sleep(Duration::from_micros(wait.min(50_000)));
            continue;
        }
        let step = engine.step().map_err(|e| BenchError::Step(Box::new(e)))?;
        acc.step(&step, &engine.pool_stats());
    }
    poll(&mut handles, &mut open, &mut acc, &mut on_outcome);
    let end_pool = engine.pool_stats();
    let duration_s = engine.now().micros_since(start) as f64 / 1e6;
    let audit = engine.audit();
    Ok(acc.finish(
        config.policy.name(),
        duration_s,
        &start_pool,
        &end_pool,
        audit,
    ))
}

/// Reads every event that arrived; a terminal one closes its handle.
fn poll(
    handles: &mut [Option<RequestHandle>],
    open: &mut Vec<usize>,
    acc: &mut Accumulator,
    on_outcome: &mut impl FnMut(),
) {
    let mut i = 0;
    while i < open.len() {
        let index = open[i];
        let mut done = false;
        if let Some(handle) = &handles[index] {
            while let Some(event) = handle.try_recv() {
                match event {
                    Event::Token { .. } => continue,
                    Event::Finished(c) => acc.finished(index, &c),
                    Event::Cancelled => acc.blank(index, OutcomeKind::Cancelled, None),
                    Event::Rejected(reason) => acc.rejected(index, &reason),
                    Event::Failed => acc.blank(index, OutcomeKind::Failed, None),
                }
                done = true;
                break;
            }
        }
        if done {
            handles[index] = None;
            open.swap_remove(i);
            on_outcome();
        } else {
            i += 1;
        }
    }
}

/// Sums over steps and outcomes.
struct Accumulator {
    records: Vec<Option<RequestRecord>>,
    mark: u32,
    steps: u64,
    batch_sum: u64,
    peak_running: u32,
    prefill_tokens: u64,
    decode_tokens: u64,
    cached_tokens: u64,
    preemptions: u64,
    bookkeeping_us: u64,
    compute_us: u64,
    mark_bookkeeping_us: u64,
    mark_total_us: u64,
    util_weighted: f64,
    frag_weighted: f64,
    weight: f64,
    peak_util: f64,
    tpot: Vec<f64>,
    /// Each finished request's tokens, by trace index.
    outputs: Vec<Vec<u32>>,
}

impl Accumulator {
    fn new(requests: usize, mark: u32) -> Self {
        Self {
            records: vec![None; requests],
            mark,
            steps: 0,
            batch_sum: 0,
            peak_running: 0,
            prefill_tokens: 0,
            decode_tokens: 0,
            cached_tokens: 0,
            preemptions: 0,
            bookkeeping_us: 0,
            compute_us: 0,
            mark_bookkeeping_us: 0,
            mark_total_us: 0,
            util_weighted: 0.0,
            frag_weighted: 0.0,
            weight: 0.0,
            peak_util: 0.0,
            tpot: Vec::new(),
            outputs: vec![Vec::new(); requests],
        }
    }

    fn step(&mut self, step: &StepReport, pool: &PoolStats) {
        let p = &step.plan;
        self.steps += 1;
        self.batch_sum += p.work as u64;
        let running_in_step = p.work as u32;
        self.peak_running = self.peak_running.max(running_in_step);
        self.prefill_tokens += u64::from(p.prefill_tokens);
        self.decode_tokens += u64::from(p.decode_tokens);
        self.cached_tokens += u64::from(p.cached_tokens);
        self.preemptions += u64::from(p.preempted);
        self.bookkeeping_us += step.bookkeeping_us;
        self.compute_us += step.compute_us;
        let total = step.bookkeeping_us + step.compute_us;
        if running_in_step >= self.mark {
            self.mark_bookkeeping_us += step.bookkeeping_us;
            self.mark_total_us += total;
        }
        let w = total.max(1) as f64;
        let util = pool.utilization_percent();
        self.util_weighted += util * w;
        self.frag_weighted += pool.fragmentation_percent() * w;
        self.weight += w;
        self.peak_util = self.peak_util.max(util);
    }

    fn finished(&mut self, index: usize, c: &Completion) {
        let ms = |a: Timestamp, b: Timestamp| b.micros_since(a) as f64 / 1e3;
        if c.output.len() > 1 {
            self.tpot
                .push(ms(c.first_token, c.finished) / (c.output.len() - 1) as f64);
        }
        if let Some(slot) = self.outputs.get_mut(index) {
            *slot = c.output.clone();
        }
        self.record(
            index,
            RequestRecord {
                index: index as u64,
                outcome: OutcomeKind::Finished,
                rejection: None,
                reason: None,
                prompt_tokens: c.prompt_len,
                output_tokens: c.output.len() as u32,
                ttft_ms: Some(ms(c.arrived, c.first_token)),
                e2e_ms: Some(ms(c.arrived, c.finished)),
                queue_ms: Some(ms(c.arrived, c.admitted)),
                preemptions: c.preemptions,
            },
        );
    }

    fn rejected(&mut self, index: usize, reason: &Rejection) {
        self.blank(index, OutcomeKind::Rejected, Some(reason));
    }

    fn blank(&mut self, index: usize, outcome: OutcomeKind, reason: Option<&Rejection>) {
        self.record(
            index,
            RequestRecord {
                index: index as u64,
                outcome,
                rejection: reason.map(Rejection::kind),
                reason: reason.map(ToString::to_string),
                prompt_tokens: 0,
                output_tokens: 0,
                ttft_ms: None,
                e2e_ms: None,
                queue_ms: None,
                preemptions: 0,
            },
        );
    }

    fn record(&mut self, index: usize, record: RequestRecord) {
        if let Some(slot) = self.records.get_mut(index) {
            *slot = Some(record);
        }
    }

    fn finish(
        self,
        policy: &str,
        duration_s: f64,
        start_pool: &PoolStats,
        end_pool: &PoolStats,
        audit: Audit,
    ) -> PolicyReport {
        let requests = self.records.len() as u64;
        let records_by_index: Vec<Option<OutcomeKind>> = self
            .records
            .iter()
            .map(|r| r.as_ref().map(|r| r.outcome))
            .collect();
        let records: Vec<RequestRecord> = self.records.into_iter().flatten().collect();
        let count = |kind: OutcomeKind| records.iter().filter(|r| r.outcome == kind).count() as u64;
        let (finished, cancelled, rejected, failed) = (
            count(OutcomeKind::Finished),
            count(OutcomeKind::Cancelled),
            count(OutcomeKind::Rejected),
            count(OutcomeKind::Failed),
        );
        // FNV-1a over every finished request's index and tokens, in trace
        // order.
        let mut digest: u64 = 0xcbf2_9ce4_8422_2325;
        for (index, output) in self.outputs.iter().enumerate() {
            let finished_here = matches!(
                records_by_index.get(index),
                Some(Some(OutcomeKind::Finished))
            );
            if !finished_here {
                continue;
            }
            for &t in std::iter::once(&(index as u32)).chain(output) {
                for b in t.to_le_bytes() {
                    digest = (digest ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
                }
            }
        }
        let collect = |f: fn(&RequestRecord) -> Option<f64>| -> Vec<f64> {
            records
                .iter()
                .filter(|r| r.outcome == OutcomeKind::Finished)
                .filter_map(f)
                .collect()
        };
        let per_s = |x: f64| {
            if duration_s > 0.0 {
                x / duration_s
            } else {
                0.0
            }
        };
        let admitted_tokens = self.cached_tokens + self.prefill_tokens;
        let total_us = self.bookkeeping_us + self.compute_us;
        let pct = |a: u64, b: u64| {
            if b == 0 {
                0.0
            } else {
                100.0 * a as f64 / b as f64
            }
        };
        let weight = self.weight.max(1.0);
        PolicyReport {
            policy: policy.to_string(),
            requests,
            finished,
            cancelled,
            rejected,
            duration_s,
            requests_per_s: per_s(finished as f64),
            prefill_tokens_per_s: per_s(self.prefill_tokens as f64),
            decode_tokens_per_s: per_s(self.decode_tokens as f64),
            prefill_tokens: self.prefill_tokens,
            decode_tokens: self.decode_tokens,
            ttft_ms: Latency::of(&collect(|r| r.ttft_ms)),
            tpot_ms: Latency::of(&self.tpot),
            e2e_ms: Latency::of(&collect(|r| r.e2e_ms)),
            queue_wait_ms: Latency::of(&collect(|r| r.queue_ms)),
            cache_hit_rate_pct: pct(self.cached_tokens, admitted_tokens),
            hit_rate_gain_over_fcfs_pp: None,
            pool_utilization_pct: self.util_weighted / weight,
            pool_peak_utilization_pct: self.peak_util,
            fragmentation_pct: self.frag_weighted / weight,
            pages_allocated_per_s: per_s(
                (end_pool.allocated_total - start_pool.allocated_total) as f64,
            ),
            pages_freed_per_s: per_s((end_pool.freed_total - start_pool.freed_total) as f64),
            evictions: end_pool.evictions - start_pool.evictions,
            pages_evicted: end_pool.pages_reclaimed - start_pool.pages_reclaimed,
            preemptions: self.preemptions,
            steps: self.steps,
            mean_batch: if self.steps == 0 {
                0.0
            } else {
                self.batch_sum as f64 / self.steps as f64
            },
            peak_running: self.peak_running,
            bookkeeping_pct: pct(self.bookkeeping_us, total_us),
            bookkeeping_pct_at_mark: (self.mark_total_us > 0)
                .then(|| pct(self.mark_bookkeeping_us, self.mark_total_us)),
            concurrency_mark: self.mark,
            compute_pct: pct(self.compute_us, total_us),
            leak_free: audit.is_clean()
                && failed == 0
                && requests == finished + cancelled + rejected,
            audit,
            output_digest: format!("{digest:016x}"),
            per_request: records,
        }
    }
}
