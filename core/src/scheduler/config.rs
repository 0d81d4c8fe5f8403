//! The scheduler's configuration: its limits, fairness and batching
//! settings, checked once so the step never meets an invalid one.

use super::policy::ConfigError;

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
    /// computing the same uncached prefix, so it hits the cache instead. An
    /// overdue request is held back too, and admission waits behind it.
    pub share_prefixes: bool,
    /// For backends that pad a batch to its longest prefill: admit a new
    /// prefill only if its chunk is within this factor of the step's first
    /// (1.0 < factor). `None` ignores lengths.
    pub length_grouping: Option<f32>,
    /// Most waiting requests passed over per step before admission stops.
    pub max_skips: u32,
    /// Decode first: while a step decodes, its prefill chunks and
    /// admissions together take at most this share of `token_budget` (in
    /// `0 < share <= 1`), because every prefill token in a step lengthens
    /// the time per output token of the decodes batched with it. A step
    /// with nothing to decode gives prefill the whole budget. `None`, or
    /// `Some(1.0)`, lets prefill use whatever the decodes left (the old
    /// behaviour, best for offline batch throughput). A policy may set its
    /// own ([`SchedulerPolicy::prefill_share`](super::SchedulerPolicy::prefill_share)).
    pub prefill_share: Option<f32>,
}

/// The default decode-first share: prefill gets an eighth of the token
/// budget (256 of the default 2,048 tokens) while decodes run. Chosen by
/// measurement on the bench's workloads (see `docs/ARCHITECTURE.md`, "Decode
/// first").
pub const DEFAULT_PREFILL_SHARE: f32 = 0.125;

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
            prefill_share: Some(DEFAULT_PREFILL_SHARE),
        }
    }
}

impl SchedulerConfig {
    /// Checks the limits: positive batch and budget, finite non-negative
    /// weights, a grouping factor above 1, a prefill share in `(0, 1]`.
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
        if let Some(share) = self.prefill_share {
            if !(share > 0.0 && share <= 1.0) {
                return Err(ConfigError::OutOfRange("prefill_share"));
            }
        }
        Ok(())
    }

    /// The most prefill tokens a step that decodes may take under `share`
    /// (at least one, so prompts always progress); `None` when the share
    /// caps nothing. An invalid share caps nothing either.
    pub fn prefill_cap(&self, share: Option<f32>) -> Option<u32> {
        let share = share.filter(|s| s.is_finite() && *s > 0.0 && *s < 1.0)?;
        Some(((self.token_budget as f32 * share) as u32).max(1))
    }
}
