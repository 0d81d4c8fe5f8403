//! What the scheduler measures: latency percentiles from fixed-bucket
//! histograms (no allocation), throughput, cache reuse, waiting and
//! preemption.

use crate::time::Timestamp;

/// Sub-buckets per power of two: percentiles are exact to 1/8 (12.5 %) of
/// the value, whatever its magnitude.
const SUB_BITS: u32 = 3;
const SUB: usize = 1 << SUB_BITS;
const BUCKETS: usize = (64 - SUB_BITS as usize + 1) * SUB;

/// A latency histogram in microseconds with log-linear buckets: values below
/// 8 µs are exact, larger ones fall in buckets 1/8 of a power of two wide.
/// Fixed size (about 2 KiB), so it lives inline in the scheduler.
///
/// ```
/// use pagoda_core::scheduler::Histogram;
/// let mut h = Histogram::new();
/// for v in 1..=100 { h.record(v * 1000); }
/// let p50 = h.percentile(50.0).unwrap();
/// assert!(p50 >= 50_000 && p50 <= 50_000 * 9 / 8);
/// ```
#[derive(Debug, Clone)]
pub struct Histogram {
    counts: [u32; BUCKETS],
    total: u64,
    sum: u64,
    max: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self::new()
    }
}

impl Histogram {
    /// An empty histogram.
    pub const fn new() -> Self {
        Self {
            counts: [0; BUCKETS],
            total: 0,
            sum: 0,
            max: 0,
        }
    }

    fn bucket(value: u64) -> usize {
        if value < SUB as u64 {
            return value as usize;
        }
        let log = 63 - value.leading_zeros();
        let shift = log - SUB_BITS;
        let sub = ((value >> shift) as usize) & (SUB - 1);
        ((shift + 1) as usize) * SUB + sub
    }

    /// The largest value in bucket `index`.
    fn upper_bound(index: usize) -> u64 {
        if index < SUB {
            return index as u64;
        }
        let shift = (index / SUB - 1) as u32;
        let sub = (index % SUB) as u64;
        let low = (SUB as u64 + sub) << shift;
        low + ((1u64 << shift) - 1)
    }

    /// Records one value.
    pub fn record(&mut self, value: u64) {
        let b = Self::bucket(value);
        self.counts[b] = self.counts[b].saturating_add(1);
        self.total += 1;
        self.sum = self.sum.saturating_add(value);
        self.max = self.max.max(value);
    }

    /// Values recorded.
    pub fn count(&self) -> u64 {
        self.total
    }

    /// The mean, if anything was recorded.
    pub fn mean(&self) -> Option<f64> {
        (self.total > 0).then(|| self.sum as f64 / self.total as f64)
    }

    /// The largest value recorded (exact).
    pub fn max(&self) -> Option<u64> {
        (self.total > 0).then_some(self.max)
    }

    /// The value at or below which `percent` of the values fall (the upper
    /// edge of its bucket, capped at the maximum); `None` when empty.
    pub fn percentile(&self, percent: f64) -> Option<u64> {
        if self.total == 0 {
            return None;
        }
        let percent = if percent.is_nan() {
            100.0
        } else {
            percent.clamp(0.0, 100.0)
        };
        // The smallest rank covering `percent` of the values (a ceiling,
        // without `std`'s float functions).
        let exact = (percent / 100.0) * self.total as f64;
        let mut rank = exact as u64;
        if (rank as f64) < exact {
            rank += 1;
        }
        let rank = rank.max(1);
        let mut seen = 0u64;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += u64::from(c);
            if seen >= rank {
                return Some(Self::upper_bound(i).min(self.max));
            }
        }
        Some(self.max)
    }

    /// p50, p95 and p99.
    pub fn summary(&self) -> Option<Percentiles> {
        Some(Percentiles {
            p50: self.percentile(50.0)?,
            p95: self.percentile(95.0)?,
            p99: self.percentile(99.0)?,
            max: self.max,
            mean: self.mean()?,
        })
    }
}

/// Latency percentiles in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Percentiles {
    /// Median.
    pub p50: u64,
    /// 95th percentile.
    pub p95: u64,
    /// 99th percentile.
    pub p99: u64,
    /// Largest.
    pub max: u64,
    /// Mean.
    pub mean: f64,
}

/// The scheduler's measurements since it was built.
#[derive(Debug, Clone, Default)]
pub struct SchedulerMetrics {
    /// Time to first token, arrival to first generated token.
    pub ttft: Histogram,
    /// Time per output token after the first.
    pub tpot: Histogram,
    /// Arrival to finish.
    pub e2e: Histogram,
    /// Arrival to first admission.
    pub wait: Histogram,
    /// Requests that finished.
    pub finished: u64,
    /// Requests cancelled (waiting or running).
    pub cancelled: u64,
    /// Running sequences preempted for recomputation.
    pub preemptions: u64,
    /// Prompt tokens of admitted requests, each counted at its first
    /// admission only.
    pub prompt_tokens: u64,
    /// Of those, tokens found in the prefix cache at that admission.
    pub cached_tokens: u64,
    /// Tokens generated.
    pub generated_tokens: u64,
    /// Requests held back one step so they could reuse a prefix another
    /// request of the batch was computing.
    pub shared_prefix_deferrals: u64,
    /// Requests admitted by the fairness threshold over the policy.
    pub fairness_overrides: u64,
    /// Waiting requests scored again because the cache grew under them.
    pub rescored: u64,
    /// Times the whole waiting set was scored again (cache journal overflow
    /// or a policy switch).
    pub full_rescores: u64,
    /// First arrival seen.
    pub first_arrival: Option<Timestamp>,
    /// Last finish seen.
    pub last_finish: Option<Timestamp>,
}

impl SchedulerMetrics {
    /// Share of admitted prompt tokens served from the prefix cache.
    pub fn cache_hit_rate(&self) -> f64 {
        if self.prompt_tokens == 0 {
            0.0
        } else {
            self.cached_tokens as f64 / self.prompt_tokens as f64
        }
    }

    fn span_seconds(&self) -> Option<f64> {
        let (start, end) = (self.first_arrival?, self.last_finish?);
        let us = end.micros_since(start);
        (us > 0).then(|| us as f64 / 1e6)
    }

    /// Finished requests per second, first arrival to last finish.
    pub fn requests_per_second(&self) -> f64 {
        self.span_seconds()
            .map_or(0.0, |s| self.finished as f64 / s)
    }

    /// Generated tokens per second, first arrival to last finish.
    pub fn tokens_per_second(&self) -> f64 {
        self.span_seconds()
            .map_or(0.0, |s| self.generated_tokens as f64 / s)
    }

    /// Longest wait before admission, in microseconds.
    pub fn max_wait_us(&self) -> u64 {
        self.wait.max().unwrap_or(0)
    }

    /// Mean wait before admission, in microseconds.
    pub fn mean_wait_us(&self) -> f64 {
        self.wait.mean().unwrap_or(0.0)
    }
}
