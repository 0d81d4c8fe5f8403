//! What one policy's run measured: per-request records counted by outcome
//! kind, latency percentiles, and the sums over steps that make the
//! [`PolicyReport`].

use pagoda_engine::{
    Audit, Completion, PoolStats, Rejection, RejectionKind, StepReport, Timestamp,
};
use serde::Serialize;

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
    /// Prompt tokens served from the prefix cache at admission, over the
    /// prompt tokens admitted, in percent; each request counts once, at its
    /// first admission (a preempted request readmitted hits its own
    /// recomputed pages, which is no saving a cache policy earned).
    pub cache_hit_rate_pct: f64,
    /// The trace's offline upper bound on that hit rate over the prompts
    /// this run admitted (see [`crate::workload::hit_rate_bound_pct`]).
    pub hit_rate_bound_pct: f64,
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
    /// The decode-first budget this run had: the most prefill tokens a
    /// step that decodes could take (`None`: whatever the decodes left).
    pub prefill_cap_tokens: Option<u32>,
    /// The share of the token budget that cap came from.
    pub prefill_share: Option<f32>,
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

/// Sums over steps and outcomes.
pub(crate) struct Accumulator {
    records: Vec<Option<RequestRecord>>,
    mark: u32,
    steps: u64,
    batch_sum: u64,
    peak_running: u32,
    prefill_tokens: u64,
    decode_tokens: u64,
    first_prompt_tokens: u64,
    first_cached_tokens: u64,
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
    pub(crate) fn new(requests: usize, mark: u32) -> Self {
        Self {
            records: vec![None; requests],
            mark,
            steps: 0,
            batch_sum: 0,
            peak_running: 0,
            prefill_tokens: 0,
            decode_tokens: 0,
            first_prompt_tokens: 0,
            first_cached_tokens: 0,
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

    pub(crate) fn step(&mut self, step: &StepReport, pool: &PoolStats) {
        let p = &step.plan;
        self.steps += 1;
        self.batch_sum += p.work as u64;
        let running_in_step = p.work as u32;
        self.peak_running = self.peak_running.max(running_in_step);
        self.prefill_tokens += u64::from(p.prefill_tokens);
        self.decode_tokens += u64::from(p.decode_tokens);
        self.first_prompt_tokens += u64::from(p.first_prompt_tokens);
        self.first_cached_tokens += u64::from(p.first_cached_tokens);
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

    pub(crate) fn finished(&mut self, index: usize, c: &Completion) {
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

    pub(crate) fn rejected(&mut self, index: usize, reason: &Rejection) {
        self.blank(index, OutcomeKind::Rejected, Some(reason));
    }

    pub(crate) fn blank(&mut self, index: usize, outcome: OutcomeKind, reason: Option<&Rejection>) {
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

    pub(crate) fn finish(
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
            cache_hit_rate_pct: pct(self.first_cached_tokens, self.first_prompt_tokens),
            hit_rate_bound_pct: 0.0,
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
            prefill_cap_tokens: None,
            prefill_share: None,
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
