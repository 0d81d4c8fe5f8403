//! Scheduling policies: how waiting requests are ranked.
//!
//! A policy turns what the scheduler knows about a waiting request (its
//! prompt length and how much of it the prefix cache holds) into a score;
//! the scheduler keeps the waiting set in a heap ordered by priority class,
//! that score and the request's age, and pops from it each step. Policies are
//! values, so switching is one call ([`Scheduler::set_policy`](super::Scheduler::set_policy)).

use core::fmt;

/// Why a policy configuration was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum ConfigError {
    /// No policy has this name (`fcfs` and `lpm` exist).
    UnknownPolicy,
    /// The policy takes no parameter of this name (FCFS takes none at all).
    UnexpectedParameter(&'static str),
    /// A parameter was named without a value.
    MissingValue(&'static str),
    /// A parameter's value is not a number, or not one of its choices.
    InvalidValue(&'static str),
    /// A parameter's value is outside its range.
    OutOfRange(&'static str),
    /// A scheduler limit (batch size, token budget) is zero.
    ZeroLimit(&'static str),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownPolicy => f.write_str("unknown scheduling policy (expected fcfs or lpm)"),
            Self::UnexpectedParameter(name) => {
                write!(f, "the policy takes no parameter named {name}")
            }
            Self::MissingValue(name) => write!(f, "parameter {name} has no value"),
            Self::InvalidValue(name) => write!(f, "parameter {name} has an invalid value"),
            Self::OutOfRange(name) => write!(f, "parameter {name} is out of range"),
            Self::ZeroLimit(name) => write!(f, "scheduler limit {name} must be positive"),
        }
    }
}

impl core::error::Error for ConfigError {}

/// A scheduling policy. The scheduler owns ordering, fairness and budgets;
/// a policy only says how good a waiting request is to run now.
///
/// ```
/// use pagoda_core::scheduler::SchedulerPolicy;
/// /// Shortest prompt first.
/// struct ShortestFirst;
/// impl SchedulerPolicy for ShortestFirst {
///     fn name(&self) -> &'static str { "shortest-first" }
///     fn cache_aware(&self) -> bool { false }
///     fn score(&self, _matched: u32, prompt: u32) -> f64 { 1.0 / (1.0 + f64::from(prompt)) }
/// }
/// ```
pub trait SchedulerPolicy {
    /// A short name for logs and reports.
    fn name(&self) -> &'static str;

    /// Whether scores depend on the prefix cache. If so the scheduler keeps
    /// each waiting request's match current as the cache changes.
    fn cache_aware(&self) -> bool;

    /// The request's score, higher runs sooner; `0.0` is the lowest. The
    /// scheduler adds the class and age terms and breaks ties by arrival.
    fn score(&self, matched_tokens: u32, prompt_tokens: u32) -> f64;

    /// A fairness threshold (microseconds) the policy sets in place of the
    /// scheduler's own, if any.
    fn fairness_threshold_us(&self) -> Option<u64> {
        None
    }

    /// The most of a step's token budget prefill chunks and admissions may
    /// take while the step decodes, if the policy sets its own in place of
    /// [`SchedulerConfig::prefill_share`](super::SchedulerConfig::prefill_share).
    fn prefill_share(&self) -> Option<f32> {
        None
    }
}

/// First come, first served: arrival order, no scoring.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Fcfs;

impl SchedulerPolicy for Fcfs {
    fn name(&self) -> &'static str {
        "fcfs"
    }

    fn cache_aware(&self) -> bool {
        false
    }

    fn score(&self, _matched_tokens: u32, _prompt_tokens: u32) -> f64 {
        0.0
    }
}

/// How LPM turns a match into a score.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MatchScore {
    /// `matched_tokens / prompt_tokens`, in `0..=1` (the spec's score).
    #[default]
    Relative,
    /// Matched tokens, in thousands (SGLang's choice: longer matches first
    /// whatever the prompt length).
    Absolute,
}

/// Longest prefix match: requests whose prompts the prefix cache holds most
/// of run first, so their pages are reused before they are evicted.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Lpm {
    /// Weight of the cache score against the age boost (per second of
    /// waiting) and priority classes. Finite and positive.
    pub cache_weight: f64,
    /// Relative or absolute match score.
    pub score: MatchScore,
    /// If set, the fairness threshold in microseconds while LPM is active
    /// (replacing the scheduler's own): a request waiting longer runs next.
    pub fairness_threshold_us: Option<u64>,
    /// If set, the most of a step's token budget prefill chunks and
    /// admissions may take while the step decodes (in `0.0 < share <=
    /// 1.0`), in place of the scheduler's
    /// [`prefill_share`](super::SchedulerConfig::prefill_share); `1.0`
    /// turns the cap off for this policy. `None` (the default) keeps the
    /// scheduler's.
    pub prefill_share: Option<f32>,
}

impl Default for Lpm {
    fn default() -> Self {
        Self {
            cache_weight: 1.0,
            score: MatchScore::Relative,
            fairness_threshold_us: None,
            prefill_share: None,
        }
    }
}

impl SchedulerPolicy for Lpm {
    fn name(&self) -> &'static str {
        "lpm"
    }

    fn cache_aware(&self) -> bool {
        true
    }

    fn score(&self, matched_tokens: u32, prompt_tokens: u32) -> f64 {
        let raw = match self.score {
            MatchScore::Relative if prompt_tokens == 0 => 0.0,
            MatchScore::Relative => f64::from(matched_tokens) / f64::from(prompt_tokens),
            MatchScore::Absolute => f64::from(matched_tokens) / 1000.0,
        };
        self.cache_weight * raw
    }

    fn fairness_threshold_us(&self) -> Option<u64> {
        self.fairness_threshold_us
    }

    fn prefill_share(&self) -> Option<f32> {
        self.prefill_share
    }
}

/// The built-in policies, for configuration and switching at run time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Policy {
    /// See [`Fcfs`].
    Fcfs(Fcfs),
    /// See [`Lpm`].
    Lpm(Lpm),
}

impl Default for Policy {
    fn default() -> Self {
        Self::Fcfs(Fcfs)
    }
}

impl SchedulerPolicy for Policy {
    fn name(&self) -> &'static str {
        match self {
            Self::Fcfs(p) => p.name(),
            Self::Lpm(p) => p.name(),
        }
    }

    fn cache_aware(&self) -> bool {
        match self {
            Self::Fcfs(p) => p.cache_aware(),
            Self::Lpm(p) => p.cache_aware(),
        }
    }

    fn score(&self, matched_tokens: u32, prompt_tokens: u32) -> f64 {
        match self {
            Self::Fcfs(p) => p.score(matched_tokens, prompt_tokens),
            Self::Lpm(p) => p.score(matched_tokens, prompt_tokens),
        }
    }

    fn fairness_threshold_us(&self) -> Option<u64> {
        match self {
            Self::Fcfs(p) => p.fairness_threshold_us(),
            Self::Lpm(p) => SchedulerPolicy::fairness_threshold_us(p),
        }
    }

    fn prefill_share(&self) -> Option<f32> {
        match self {
            Self::Fcfs(p) => p.prefill_share(),
            Self::Lpm(p) => SchedulerPolicy::prefill_share(p),
        }
    }
}

impl Policy {
    /// Builds a policy from its name and `name=value` parameters, as a
    /// command line or config file gives them.
    ///
    /// - `fcfs`: no parameters; any parameter is an error.
    /// - `lpm`: `cache_weight` (a finite number > 0, default 1),
    ///   `fairness_threshold_ms` (> 0), `score` (`relative` or `absolute`),
    ///   `prefill_share` (in `0 < share <= 1`).
    ///
    /// ```
    /// use pagoda_core::scheduler::{ConfigError, Policy};
    /// let lpm = Policy::parse("lpm", &[("cache_weight", "2.5"), ("fairness_threshold_ms", "500")]);
    /// assert!(matches!(lpm, Ok(Policy::Lpm(_))));
    /// assert_eq!(Policy::parse("fcfs", &[("cache_weight", "1")]),
    ///            Err(ConfigError::UnexpectedParameter("cache_weight")));
    /// assert_eq!(Policy::parse("lpm", &[("cache_weight", "-1")]),
    ///            Err(ConfigError::OutOfRange("cache_weight")));
    /// ```
    pub fn parse(name: &str, params: &[(&str, &str)]) -> Result<Self, ConfigError> {
        match name.trim() {
            n if n.eq_ignore_ascii_case("fcfs") => match params.first() {
                None => Ok(Self::Fcfs(Fcfs)),
                Some((param, _)) => Err(ConfigError::UnexpectedParameter(known_name(param))),
            },
            n if n.eq_ignore_ascii_case("lpm") => {
                let mut lpm = Lpm::default();
                for &(param, value) in params {
                    let param = known_name(param);
                    let value = value.trim();
                    if value.is_empty() {
                        return Err(ConfigError::MissingValue(param));
                    }
                    match param {
                        "cache_weight" => {
                            lpm.cache_weight = value
                                .parse()
                                .map_err(|_| ConfigError::InvalidValue(param))?;
                        }
                        "fairness_threshold_ms" => {
                            let ms: f64 = value
                                .parse()
                                .map_err(|_| ConfigError::InvalidValue(param))?;
                            if !(ms > 0.0 && ms < 1e12) {
                                return Err(ConfigError::OutOfRange(param));
                            }
                            lpm.fairness_threshold_us = Some((ms * 1000.0) as u64);
                        }
                        "prefill_share" => {
                            let share: f32 = value
                                .parse()
                                .map_err(|_| ConfigError::InvalidValue(param))?;
                            lpm.prefill_share = Some(share);
                        }
                        "score" => {
                            lpm.score = match value {
                                "relative" => MatchScore::Relative,
                                "absolute" => MatchScore::Absolute,
                                _ => return Err(ConfigError::InvalidValue(param)),
                            };
                        }
                        other => return Err(ConfigError::UnexpectedParameter(other)),
                    }
                }
                Self::lpm(lpm)
            }
            _ => Err(ConfigError::UnknownPolicy),
        }
    }

    /// An LPM policy, validated: the cache weight must be finite and
    /// positive, a fairness threshold non-zero.
    pub fn lpm(lpm: Lpm) -> Result<Self, ConfigError> {
        if !(lpm.cache_weight.is_finite() && lpm.cache_weight > 0.0) {
            return Err(ConfigError::OutOfRange("cache_weight"));
        }
        if lpm.fairness_threshold_us == Some(0) {
            return Err(ConfigError::OutOfRange("fairness_threshold_ms"));
        }
        if let Some(share) = lpm.prefill_share {
            if !(share > 0.0 && share <= 1.0) {
                return Err(ConfigError::OutOfRange("prefill_share"));
            }
        }
        Ok(Self::Lpm(lpm))
    }
}

/// Parameter names as `'static` strings for errors; unknown names map to a
/// generic one.
fn known_name(param: &str) -> &'static str {
    match param.trim() {
        "cache_weight" => "cache_weight",
        "fairness_threshold_ms" => "fairness_threshold_ms",
        "score" => "score",
        "prefill_share" => "prefill_share",
        _ => "unknown parameter",
    }
}
