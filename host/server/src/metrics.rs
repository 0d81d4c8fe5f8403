//! Prometheus text exposition with vLLM's metric names where the meaning is
//! the same (so vLLM dashboards and routers read Pagoda), Pagoda's own under
//! `pagoda:`. Written by hand: the names carry colons and vLLM's exact
//! suffixes, which the text format allows and a registry crate would only
//! wrap.

use std::fmt::Write;
use std::sync::Mutex;
use std::time::Duration;

use pagoda_engine::EngineStats;

const TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];
const ITL_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
];
const LATENCY_BUCKETS: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
];

/// A cumulative histogram over fixed bounds.
#[derive(Debug, Clone)]
struct Histogram {
    bounds: &'static [f64],
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            counts: vec![0; bounds.len()],
            sum: 0.0,
            count: 0,
        }
    }

    fn observe(&mut self, seconds: f64) {
        for (bound, count) in self.bounds.iter().zip(&mut self.counts) {
            if seconds <= *bound {
                *count += 1;
            }
        }
        self.sum += seconds;
        self.count += 1;
    }

    fn write(&self, out: &mut String, name: &str, help: &str, label: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        for (bound, count) in self.bounds.iter().zip(&self.counts) {
            let _ = writeln!(out, "{name}_bucket{{{label},le=\"{bound:?}\"}} {count}");
        }
        let _ = writeln!(out, "{name}_bucket{{{label},le=\"+Inf\"}} {}", self.count);
        let _ = writeln!(out, "{name}_sum{{{label}}} {}", self.sum);
        let _ = writeln!(out, "{name}_count{{{label}}} {}", self.count);
    }
}

#[derive(Debug)]
struct Inner {
    ttft: Histogram,
    itl: Histogram,
    e2e: Histogram,
    queue: Histogram,
    prompt_tokens: u64,
    generation_tokens: u64,
    finished_stop: u64,
    finished_length: u64,
    finished_abort: u64,
    rejected: u64,
}

/// The server's request metrics (the engine's come from its stats).
#[derive(Debug)]
pub struct Metrics {
    inner: Mutex<Inner>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            inner: Mutex::new(Inner {
                ttft: Histogram::new(TTFT_BUCKETS),
                itl: Histogram::new(ITL_BUCKETS),
                e2e: Histogram::new(LATENCY_BUCKETS),
                queue: Histogram::new(LATENCY_BUCKETS),
                prompt_tokens: 0,
                generation_tokens: 0,
                finished_stop: 0,
                finished_length: 0,
                finished_abort: 0,
                rejected: 0,
            }),
        }
    }
}

/// How a request ended, for `vllm:request_success_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// A stop token or stop string.
    Stop,
    /// Its token limit or the context.
    Length,
    /// Cancelled (the client went away) or failed.
    Abort,
}

impl Metrics {
    fn with(&self, f: impl FnOnce(&mut Inner)) {
        // A poisoned lock only means a panic elsewhere; the counts are plain.
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut inner);
    }

    /// A choice's first token came `after` its arrival.
    pub fn first_token(&self, after: Duration) {
        self.with(|m| m.ttft.observe(after.as_secs_f64()));
    }

    /// A later token came `gap` after the one before.
    pub fn inter_token(&self, gap: Duration) {
        self.with(|m| m.itl.observe(gap.as_secs_f64()));
    }

    /// A choice ended after `e2e`, having waited `queue` (when known), with
    /// `prompt` and `generated` tokens.
    pub fn ended(
        &self,
        ending: Ending,
        e2e: Duration,
        queue: Option<Duration>,
        prompt: u32,
        generated: u32,
    ) {
        self.with(|m| {
            match ending {
                Ending::Stop => m.finished_stop += 1,
                Ending::Length => m.finished_length += 1,
                Ending::Abort => m.finished_abort += 1,
            }
            m.e2e.observe(e2e.as_secs_f64());
            if let Some(q) = queue {
                m.queue.observe(q.as_secs_f64());
            }
            m.prompt_tokens += u64::from(prompt);
            m.generation_tokens += u64::from(generated);
        });
    }

    /// A request was refused.
    pub fn rejected(&self) {
        self.with(|m| m.rejected += 1);
    }

    /// The exposition text: the server's metrics and `stats` from the engine.
    pub fn render(
        &self,
        model: &str,
        stats: Option<&EngineStats>,
        page_size: u32,
        pages: u32,
    ) -> String {
        let label = format!(
            "model_name=\"{}\"",
            model.replace('\\', "\\\\").replace('"', "\\\"")
        );
        let mut out = String::new();
        let mut line = |name: &str, kind: &str, help: &str, labels: &str, value: String| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name}{{{labels}}} {value}"
            );
        };
        line(
            "vllm:cache_config_info",
            "gauge",
            "The KV cache's configuration.",
            &format!("{label},block_size=\"{page_size}\",num_gpu_blocks=\"{pages}\""),
            "1".into(),
        );
        if let Some(s) = stats {
            let usage = if s.pool.total_pages == 0 {
                0.0
            } else {
                f64::from(s.pool.referenced_pages) / f64::from(s.pool.total_pages)
            };
            line(
                "vllm:num_requests_running",
                "gauge",
                "Requests in the running batch.",
                &label,
                s.running.to_string(),
            );
            line(
                "vllm:num_requests_waiting",
                "gauge",
                "Requests waiting to run.",
                &label,
                s.waiting.to_string(),
            );
            line(
                "vllm:kv_cache_usage_perc",
                "gauge",
                "Fraction of KV pages referenced (1 = full).",
                &label,
                usage.to_string(),
            );
            line(
                "vllm:prefix_cache_queries_total",
                "counter",
                "Prompt tokens looked up in the prefix cache.",
                &label,
                s.radix.tokens_requested.to_string(),
            );
            line(
                "vllm:prefix_cache_hits_total",
                "counter",
                "Prompt tokens found in the prefix cache.",
                &label,
                s.radix.tokens_hit.to_string(),
            );
            line(
                "vllm:num_preemptions_total",
                "counter",
                "Preemptions (recomputed later).",
                &label,
                s.scheduler.preemptions.to_string(),
            );
            line(
                "pagoda:kv_pages_free",
                "gauge",
                "KV pages on the free list.",
                &label,
                s.pool.free_pages.to_string(),
            );
            line(
                "pagoda:kv_pages_evictable",
                "gauge",
                "KV pages only the prefix cache holds.",
                &label,
                s.pool.evictable_pages.to_string(),
            );
            line(
                "pagoda:cached_prompt_tokens_total",
                "counter",
                "Prompt tokens served from the prefix cache.",
                &label,
                s.scheduler.cached_tokens.to_string(),
            );
        }
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        line(
            "vllm:prompt_tokens_total",
            "counter",
            "Prompt tokens of finished requests.",
            &label,
            inner.prompt_tokens.to_string(),
        );
        line(
            "vllm:generation_tokens_total",
            "counter",
            "Generated tokens of finished requests.",
            &label,
            inner.generation_tokens.to_string(),
        );
        line(
            "pagoda:requests_rejected_total",
            "counter",
            "Requests refused at submission.",
            &label,
            inner.rejected.to_string(),
        );
        let name = "vllm:request_success_total";
        let _ = writeln!(
            out,
            "# HELP {name} Finished requests by reason.\n# TYPE {name} counter"
        );
        for (reason, n) in [
            ("stop", inner.finished_stop),
            ("length", inner.finished_length),
            ("abort", inner.finished_abort),
        ] {
            let _ = writeln!(out, "{name}{{{label},finished_reason=\"{reason}\"}} {n}");
        }
        inner.ttft.write(
            &mut out,
            "vllm:time_to_first_token_seconds",
            "Time to first token.",
            &label,
        );
        inner.itl.write(
            &mut out,
            "vllm:inter_token_latency_seconds",
            "Time between tokens.",
            &label,
        );
        inner.e2e.write(
            &mut out,
            "vllm:e2e_request_latency_seconds",
            "Arrival to finish.",
            &label,
        );
        inner.queue.write(
            &mut out,
            "vllm:request_queue_time_seconds",
            "Arrival to first scheduling.",
            &label,
        );
        out
    }
}
