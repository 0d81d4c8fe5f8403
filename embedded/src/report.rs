//! What a run measured, the checks on it, and the report text both the
//! firmware and the host print (the figures CI compares).

use core::fmt::{self, Write};

use pagoda_core::scheduler::{
    Histogram, Percentiles, Policy, SchedulerMetrics, SchedulerPolicy, StepPlan,
};
use pagoda_core::{PoolStats, QueueStats, RadixStats};

use crate::script::REQUESTS;
use crate::{WorkloadError, NODES, PAGES, QUEUE, ROW, SEQS, SLOTS};

/// One policy's run over the script.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The policy's name.
    pub policy: &'static str,
    /// Steps planned.
    pub steps: u64,
    /// Most pages referenced by running sequences after a step.
    pub peak_referenced: u32,
    /// Tokens prefill items computed, over all steps.
    pub prefill_tokens: u64,
    /// Decode tokens, over all steps.
    pub decode_tokens: u64,
    /// What the scheduler measured, less its histograms (8 KiB): kept on
    /// the stack, so only what the report prints.
    pub metrics: Measured,
    /// The pool at the end.
    pub pool: PoolStats,
    /// The prefix cache at the end.
    pub radix: RadixStats,
    /// The request queue's counters.
    pub queue: QueueStats,
    /// Pages still referenced at the end: zero unless something leaks.
    pub leaked_pages: u32,
}

impl Outcome {
    pub(crate) fn new(policy: Policy) -> Self {
        Self {
            policy: policy.name(),
            steps: 0,
            peak_referenced: 0,
            prefill_tokens: 0,
            decode_tokens: 0,
            metrics: Measured::default(),
            pool: PoolStats::default(),
            radix: RadixStats::default(),
            queue: QueueStats::default(),
            leaked_pages: 0,
        }
    }

    pub(crate) fn record_step(&mut self, step: &StepPlan, referenced: u32) {
        self.peak_referenced = self.peak_referenced.max(referenced);
        self.prefill_tokens += u64::from(step.prefill_tokens);
        self.decode_tokens += u64::from(step.decode_tokens);
    }

    pub(crate) fn finish(
        &mut self,
        metrics: &SchedulerMetrics,
        pool: PoolStats,
        radix: RadixStats,
        queue: QueueStats,
        leaked_pages: u32,
    ) {
        self.metrics = Measured::from(metrics);
        self.pool = pool;
        self.radix = radix;
        self.queue = queue;
        self.leaked_pages = leaked_pages;
    }

    /// What must hold after any run: every request finished, nothing leaked,
    /// the pool's books balance.
    pub fn check(&self) -> Result<(), WorkloadError> {
        let all = REQUESTS as u64;
        if self.metrics.finished != all || self.queue.dequeued != all {
            return Err(WorkloadError::Check("not every request finished"));
        }
        if self.leaked_pages != 0 || self.pool.referenced_pages != 0 {
            return Err(WorkloadError::Check("pages leaked"));
        }
        let p = &self.pool;
        if p.free_pages + p.evictable_pages != p.total_pages
            || p.allocated_total.checked_sub(p.freed_total) != Some(u64::from(p.pages_in_use()))
        {
            return Err(WorkloadError::Check("the pool's counts do not add up"));
        }
        if u64::from(self.radix.nodes) != u64::from(p.evictable_pages) {
            return Err(WorkloadError::Check("cached pages and radix nodes differ"));
        }
        Ok(())
    }

    /// Writes this run's figures.
    pub fn write(&self, out: &mut impl Write) -> fmt::Result {
        let m = &self.metrics;
        writeln!(out, "policy {}", self.policy)?;
        writeln!(
            out,
            "  requests: finished {} cancelled {} preempted {} steps {}",
            m.finished, m.cancelled, m.preemptions, self.steps
        )?;
        writeln!(
            out,
            "  tokens: prompt {} cached {} (hit rate {:.2} %) generated {} computed prefill {} decode {}",
            m.prompt_tokens,
            m.cached_tokens,
            100.0 * m.cache_hit_rate,
            m.generated_tokens,
            self.prefill_tokens,
            self.decode_tokens
        )?;
        latency(out, "ttft", m.ttft)?;
        latency(out, "tpot", m.tpot)?;
        latency(out, "e2e", m.e2e)?;
        latency(out, "wait", m.wait)?;
        writeln!(
            out,
            "  throughput: {:.3} req/s {:.1} tok/s (simulated clock, {} us)",
            m.requests_per_second, m.tokens_per_second, self.pool.at.0
        )?;
        writeln!(
            out,
            "  policy: shared-prefix deferrals {} fairness overrides {} rescored {} full rescores {}",
            m.shared_prefix_deferrals, m.fairness_overrides, m.rescored, m.full_rescores
        )?;
        let p = &self.pool;
        writeln!(
            out,
            "  pool: {} pages, peak referenced {}; at the end free {} cached {} referenced {} ({:.1} % in use, {:.1} % of their slots unused)",
            p.total_pages,
            self.peak_referenced,
            p.free_pages,
            p.evictable_pages,
            p.referenced_pages,
            p.utilization_percent(),
            p.fragmentation_percent()
        )?;
        writeln!(
            out,
            "  pool churn: allocated {} freed {} evictions {} pages reclaimed {}",
            p.allocated_total, p.freed_total, p.evictions, p.pages_reclaimed
        )?;
        let r = &self.radix;
        writeln!(
            out,
            "  radix: {} of {} nodes; looked up {} tokens, hit {} ({:.2} %); inserted {} deduplicated {} declined {} evicted {}",
            r.nodes,
            r.capacity,
            r.tokens_requested,
            r.tokens_hit,
            100.0 * r.hit_rate(),
            r.inserted_pages,
            r.deduplicated_pages,
            r.declined_pages,
            r.evicted_pages
        )?;
        let q = &self.queue;
        writeln!(
            out,
            "  queue: enqueued {} dequeued {} rejected {} cancelled {}",
            q.enqueued, q.dequeued, q.rejected, q.cancelled
        )?;
        writeln!(out, "  leaked pages {}", self.leaked_pages)
    }
}

/// The scheduler's figures the report prints.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Measured {
    /// Time to first token.
    pub ttft: Option<Percentiles>,
    /// Time per output token.
    pub tpot: Option<Percentiles>,
    /// Arrival to finish.
    pub e2e: Option<Percentiles>,
    /// Arrival to admission.
    pub wait: Option<Percentiles>,
    /// Requests finished.
    pub finished: u64,
    /// Requests cancelled.
    pub cancelled: u64,
    /// Sequences preempted.
    pub preemptions: u64,
    /// Prompt tokens admitted.
    pub prompt_tokens: u64,
    /// Of those, found in the prefix cache.
    pub cached_tokens: u64,
    /// `cached_tokens / prompt_tokens`.
    pub cache_hit_rate: f64,
    /// Tokens generated.
    pub generated_tokens: u64,
    /// Requests per second of simulated time.
    pub requests_per_second: f64,
    /// Tokens per second of simulated time.
    pub tokens_per_second: f64,
    /// Requests held back to share a prefix.
    pub shared_prefix_deferrals: u64,
    /// Admissions by the fairness threshold.
    pub fairness_overrides: u64,
    /// Waiting requests rescored as the cache grew.
    pub rescored: u64,
    /// Rescorings of the whole waiting set.
    pub full_rescores: u64,
}

impl From<&SchedulerMetrics> for Measured {
    fn from(m: &SchedulerMetrics) -> Self {
        let summary = |h: &Histogram| h.summary();
        Self {
            ttft: summary(&m.ttft),
            tpot: summary(&m.tpot),
            e2e: summary(&m.e2e),
            wait: summary(&m.wait),
            finished: m.finished,
            cancelled: m.cancelled,
            preemptions: m.preemptions,
            prompt_tokens: m.prompt_tokens,
            cached_tokens: m.cached_tokens,
            cache_hit_rate: m.cache_hit_rate(),
            generated_tokens: m.generated_tokens,
            requests_per_second: m.requests_per_second(),
            tokens_per_second: m.tokens_per_second(),
            shared_prefix_deferrals: m.shared_prefix_deferrals,
            fairness_overrides: m.fairness_overrides,
            rescored: m.rescored,
            full_rescores: m.full_rescores,
        }
    }
}

fn latency(out: &mut impl Write, name: &str, p: Option<Percentiles>) -> fmt::Result {
    match p {
        Some(s) => writeln!(
            out,
            "  {name} us: p50 {} p95 {} p99 {} max {} mean {:.1}",
            s.p50, s.p95, s.p99, s.max, s.mean
        ),
        None => writeln!(out, "  {name} us: none"),
    }
}

/// The setup, before any run.
pub(crate) fn header(out: &mut impl Write) -> fmt::Result {
    writeln!(
        out,
        "pagoda-embedded: {REQUESTS} scripted requests on 4 shared system prompts, 8 of them follow-ups"
    )?;
    writeln!(
        out,
        "storage: {PAGES} pages, {SEQS} sequences x {} tokens, {NODES} radix nodes, {QUEUE} queue slots, {SLOTS} scheduler slots",
        ROW * pagoda_core::PAGE_SIZE
    )
}

/// LPM against FCFS.
pub(crate) fn compare(out: &mut impl Write, lpm: &Outcome, fcfs: &Outcome) -> fmt::Result {
    let gain = 100.0 * (lpm.metrics.cache_hit_rate - fcfs.metrics.cache_hit_rate);
    writeln!(
        out,
        "lpm vs fcfs: hit rate {gain:+.2} points, cached tokens {} vs {}, steps {} vs {}",
        lpm.metrics.cached_tokens, fcfs.metrics.cached_tokens, lpm.steps, fcfs.steps
    )?;
    writeln!(out, "ok")
}
