//! Benchmark traffic: synthetic workloads with the prefix structure of real
//! traffic, and recorded traces in JSON Lines.
//!
//! A trace is a list of [`TraceEntry`]s (arrival time, prompt tokens, output
//! limit, priority). Synthetic workloads draw one from a seed, so the same
//! seed gives the same trace on every machine; `--trace FILE.jsonl` reads
//! one, and `--save-trace` writes the synthetic one out for replay.

use std::fmt;
use std::str::FromStr;

use pagoda_engine::Priority;
use serde::{Deserialize, Serialize};

/// One request of a trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceEntry {
    /// Microseconds after the start of the run.
    pub arrival_us: u64,
    /// Prompt token ids.
    pub prompt: Vec<u32>,
    /// Most tokens to generate.
    pub max_tokens: u32,
    /// Priority class.
    pub priority: Priority,
}

/// The prefix structure of a synthetic workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum WorkloadKind {
    /// Groups of requests share a long instruction prefix (few-shot
    /// examples), each with its own question.
    FewShot,
    /// Conversations: each turn's prompt is the whole conversation so far
    /// plus a new user message.
    MultiTurn,
    /// Branches off a shared trunk, two levels deep (each branch then
    /// branches again).
    TreeOfThought,
    /// Every prompt is unique.
    NoSharing,
}

impl fmt::Display for WorkloadKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::FewShot => "few-shot",
            Self::MultiTurn => "multi-turn",
            Self::TreeOfThought => "tree-of-thought",
            Self::NoSharing => "no-sharing",
        })
    }
}

/// A distribution of lengths in tokens, parsed from `N` (fixed),
/// `uniform:MIN:MAX` or `lognormal:MEDIAN:SIGMA` (clamped to `1..=8 ×
/// MEDIAN`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub enum LengthDist {
    /// Always `n`.
    Fixed(u32),
    /// Uniform in `min..=max`.
    Uniform(u32, u32),
    /// Log-normal around a median with a spread `sigma`.
    LogNormal(u32, f64),
}

impl LengthDist {
    /// Draws one length (at least 1).
    pub fn sample(&self, rng: &mut fastrand::Rng) -> u32 {
        match *self {
            Self::Fixed(n) => n.max(1),
            Self::Uniform(lo, hi) => rng.u32(lo..=hi).max(1),
            Self::LogNormal(median, sigma) => {
                // Box-Muller: one standard normal from two uniforms.
                let u1 = 1.0 - rng.f64();
                let u2 = rng.f64();
                let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
                let v = f64::from(median) * (sigma * z).exp();
                v.round().clamp(1.0, f64::from(median) * 8.0) as u32
            }
        }
    }
}

impl fmt::Display for LengthDist {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Fixed(n) => write!(f, "{n}"),
            Self::Uniform(lo, hi) => write!(f, "uniform:{lo}:{hi}"),
            Self::LogNormal(m, s) => write!(f, "lognormal:{m}:{s}"),
        }
    }
}

impl FromStr for LengthDist {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        const VALID: &str = "valid: N, uniform:MIN:MAX, lognormal:MEDIAN:SIGMA";
        let count = |v: &str| -> Result<u32, String> {
            match v.trim().parse::<u32>() {
                Ok(n) if n > 0 => Ok(n),
                _ => Err(format!("'{v}' is not a positive token count ({VALID})")),
            }
        };
        let parts: Vec<&str> = s.split(':').collect();
        match parts.as_slice() {
            [n] => Ok(Self::Fixed(count(n)?)),
            ["uniform", lo, hi] => {
                let (lo, hi) = (count(lo)?, count(hi)?);
                if lo > hi {
                    return Err(format!("uniform:{lo}:{hi} has MIN above MAX"));
                }
                Ok(Self::Uniform(lo, hi))
            }
            ["lognormal", median, sigma] => {
                let median = count(median)?;
                match sigma.trim().parse::<f64>() {
                    Ok(s) if (0.0..=4.0).contains(&s) => Ok(Self::LogNormal(median, s)),
                    _ => Err(format!("lognormal SIGMA '{sigma}' must be in 0..=4")),
                }
            }
            _ => Err(format!("'{s}' is not a length distribution ({VALID})")),
        }
    }
}

/// When requests arrive.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub enum Arrivals {
    /// All at once, at time zero.
    Offline,
    /// A Poisson process at this many requests per second.
    Poisson(f64),
}

/// A synthetic workload's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct WorkloadSpec {
    /// Prefix structure.
    pub kind: WorkloadKind,
    /// Requests in the trace.
    pub requests: u32,
    /// Length of the shared part: the few-shot prefix, the tree's trunk, the
    /// chat's system prompt.
    pub shared_len: u32,
    /// Sharing groups: few-shot prefixes, conversations or trees (ignored
    /// for no sharing).
    pub groups: u32,
    /// Length of each request's own part: the question, the user turn, the
    /// branch, or the whole prompt without sharing.
    pub prompt_len: LengthDist,
    /// Output tokens per request.
    pub output_len: LengthDist,
    /// Arrival process.
    pub arrivals: Arrivals,
    /// Token ids are drawn from `0..vocab`.
    pub vocab: u32,
    /// Seed of everything random.
    pub seed: u64,
}

impl WorkloadSpec {
    /// Draws the trace.
    pub fn generate(&self) -> Vec<TraceEntry> {
        let mut rng = fastrand::Rng::with_seed(self.seed);
        let vocab = self.vocab.max(1);
        let tokens = |rng: &mut fastrand::Rng, n: u32| -> Vec<u32> {
            (0..n).map(|_| rng.u32(0..vocab)).collect()
        };
        let n = self.requests as usize;
        let groups = self.groups.max(1) as usize;
        let mut prompts: Vec<(Vec<u32>, u32)> = Vec::with_capacity(n);
        match self.kind {
            WorkloadKind::NoSharing => {
                for _ in 0..n {
                    let len = self.prompt_len.sample(&mut rng);
                    let out = self.output_len.sample(&mut rng);
                    prompts.push((tokens(&mut rng, len), out));
                }
            }
            WorkloadKind::FewShot => {
                let prefixes: Vec<Vec<u32>> = (0..groups)
                    .map(|_| tokens(&mut rng, self.shared_len))
                    .collect();
                for _ in 0..n {
                    let mut p = prefixes[rng.usize(0..groups)].clone();
                    let len = self.prompt_len.sample(&mut rng);
                    p.extend(tokens(&mut rng, len));
                    prompts.push((p, self.output_len.sample(&mut rng)));
                }
            }
            WorkloadKind::MultiTurn => {
                // Conversations advance in turns; a request is one turn, and
                // turns of one conversation keep their order in the trace.
                let mut convs: Vec<Vec<u32>> = (0..groups)
                    .map(|_| tokens(&mut rng, self.shared_len))
                    .collect();
                for _ in 0..n {
                    let c = rng.usize(0..groups);
                    let user = self.prompt_len.sample(&mut rng);
                    let user_tokens = tokens(&mut rng, user);
                    convs[c].extend(user_tokens);
                    let out = self.output_len.sample(&mut rng);
                    prompts.push((convs[c].clone(), out));
                    // The assistant's reply joins the conversation before
                    // the next turn.
                    let reply = tokens(&mut rng, out);
                    convs[c].extend(reply);
                }
            }
            WorkloadKind::TreeOfThought => {
                let trunks: Vec<Vec<u32>> = (0..groups)
                    .map(|_| tokens(&mut rng, self.shared_len))
                    .collect();
                // Each tree: branches off the trunk, then branches off those.
                let mut nodes: Vec<Vec<Vec<u32>>> = vec![Vec::new(); groups];
                for _ in 0..n {
                    let t = rng.usize(0..groups);
                    let fan = 4;
                    let base = if nodes[t].len() >= fan && rng.bool() {
                        nodes[t][rng.usize(0..fan)].clone()
                    } else {
                        trunks[t].clone()
                    };
                    let mut p = base;
                    let len = self.prompt_len.sample(&mut rng).div_ceil(2);
                    p.extend(tokens(&mut rng, len));
                    if nodes[t].len() < fan {
                        nodes[t].push(p.clone());
                    }
                    prompts.push((p, self.output_len.sample(&mut rng)));
                }
            }
        }
        let mut at = 0.0f64;
        prompts
            .into_iter()
            .map(|(prompt, max_tokens)| {
                if let Arrivals::Poisson(rate) = self.arrivals {
                    at += -(1.0 - rng.f64()).ln() / rate;
                }
                TraceEntry {
                    arrival_us: (at * 1e6) as u64,
                    prompt,
                    max_tokens,
                    priority: Priority::Normal,
                }
            })
            .collect()
    }
}

/// A trace line that could not be read, with its line number (from 1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceError {
    /// Line number.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

/// A priority class as a trace names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PriorityName {
    /// [`Priority::Low`].
    Low,
    /// [`Priority::Normal`].
    Normal,
    /// [`Priority::High`].
    High,
    /// [`Priority::Critical`].
    Critical,
}

impl From<PriorityName> for Priority {
    fn from(p: PriorityName) -> Self {
        match p {
            PriorityName::Low => Self::Low,
            PriorityName::Normal => Self::Normal,
            PriorityName::High => Self::High,
            PriorityName::Critical => Self::Critical,
        }
    }
}

impl From<Priority> for PriorityName {
    fn from(p: Priority) -> Self {
        match p {
            Priority::Low => Self::Low,
            Priority::Normal => Self::Normal,
            Priority::High => Self::High,
            Priority::Critical => Self::Critical,
        }
    }
}

/// One line of a JSON Lines trace, as read and as written: `arrival`
/// (seconds from the start, default 0), either `prompt` (text, one token per
/// UTF-8 byte) or `prompt_tokens` (token ids), `max_tokens` (at least 1) and
/// an optional `priority`. Any other field is an error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceLine {
    /// Seconds after the start of the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arrival: Option<f64>,
    /// The prompt as text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// The prompt as token ids.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<Vec<u32>>,
    /// Most tokens to generate (required; optional here so its absence
    /// reads as "missing max_tokens", not as a parser message).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// Priority class (default normal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<PriorityName>,
}

impl From<&TraceEntry> for TraceLine {
    fn from(e: &TraceEntry) -> Self {
        Self {
            arrival: Some(e.arrival_us as f64 / 1e6),
            prompt: None,
            prompt_tokens: Some(e.prompt.clone()),
            max_tokens: Some(u64::from(e.max_tokens)),
            priority: Some(e.priority.into()),
        }
    }
}

impl TraceLine {
    /// The entry this line describes, checked against the vocabulary.
    pub fn to_entry(&self, vocab: u32) -> Result<TraceEntry, String> {
        let arrival = match self.arrival {
            None => 0.0,
            Some(s) if s.is_finite() && (0.0..1e9).contains(&s) => s,
            Some(s) => return Err(format!("arrival must be seconds ≥ 0, found {s}")),
        };
        let prompt: Vec<u32> = match (&self.prompt, &self.prompt_tokens) {
            (Some(_), Some(_)) => return Err("give prompt or prompt_tokens, not both".into()),
            (None, None) => return Err("missing prompt (text) or prompt_tokens (ids)".into()),
            (Some(text), None) => text.bytes().map(u32::from).collect(),
            (None, Some(ids)) => ids.clone(),
        };
        if prompt.is_empty() {
            return Err("the prompt is empty".into());
        }
        if let Some(&t) = prompt.iter().find(|&&t| t >= vocab) {
            return Err(format!(
                "prompt token {t} is outside the vocabulary (0..{vocab})"
            ));
        }
        let max_tokens = match self.max_tokens {
            None => return Err("missing max_tokens".into()),
            Some(n) => match u32::try_from(n) {
                Ok(n) if n > 0 => n,
                _ => return Err(format!("max_tokens must be a positive integer, found {n}")),
            },
        };
        Ok(TraceEntry {
            arrival_us: (arrival * 1e6).round() as u64,
            prompt,
            max_tokens,
            priority: self.priority.map_or(Priority::Normal, Priority::from),
        })
    }
}

/// Parses a JSON Lines trace of [`TraceLine`]s, sorted by arrival. Blank
/// lines and lines starting with `#` are skipped. Every bad line is reported
/// with its number.
pub fn parse_trace(text: &str, vocab: u32) -> Result<Vec<TraceEntry>, Vec<TraceError>> {
    let mut entries = Vec::new();
    let mut errors = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        match parse_line(trimmed).and_then(|l| l.to_entry(vocab)) {
            Ok(e) => entries.push(e),
            Err(message) => errors.push(TraceError {
                line: i + 1,
                message,
            }),
        }
    }
    if errors.is_empty() {
        entries.sort_by_key(|e| e.arrival_us);
        Ok(entries)
    } else {
        Err(errors)
    }
}

/// One line, with serde's message made to fit after `FILE:LINE:`.
fn parse_line(line: &str) -> Result<TraceLine, String> {
    serde_json::from_str(line).map_err(|e| {
        let position = format!(" at line {} column {}", e.line(), e.column());
        let full = e.to_string();
        let message = full.strip_suffix(&position).unwrap_or(&full);
        match e.classify() {
            serde_json::error::Category::Data => {
                format!("{message} (column {})", e.column())
            }
            _ => format!("not valid JSON: {message} (column {})", e.column()),
        }
    })
}

/// Writes a trace as JSON Lines of [`TraceLine`]s, which [`parse_trace`]
/// reads back unchanged.
pub fn write_trace(entries: &[TraceEntry]) -> String {
    let mut out = String::new();
    for e in entries {
        // A struct of numbers, strings and lists always serializes.
        if let Ok(line) = serde_json::to_string(&TraceLine::from(e)) {
            out.push_str(&line);
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(kind: WorkloadKind) -> WorkloadSpec {
        WorkloadSpec {
            kind,
            requests: 60,
            shared_len: 64,
            groups: 3,
            prompt_len: LengthDist::Uniform(8, 24),
            output_len: LengthDist::Fixed(4),
            arrivals: Arrivals::Poisson(100.0),
            vocab: 500,
            seed: 9,
        }
    }

    fn common_prefix(a: &[u32], b: &[u32]) -> usize {
        a.iter().zip(b).take_while(|(x, y)| x == y).count()
    }

    #[test]
    fn same_seed_same_trace() {
        for kind in [
            WorkloadKind::FewShot,
            WorkloadKind::MultiTurn,
            WorkloadKind::TreeOfThought,
            WorkloadKind::NoSharing,
        ] {
            let a = spec(kind).generate();
            assert_eq!(a, spec(kind).generate());
            let mut other = spec(kind);
            other.seed = 10;
            assert_ne!(a, other.generate());
            assert_eq!(a.len(), 60);
            assert!(a.windows(2).all(|w| w[0].arrival_us <= w[1].arrival_us));
            assert!(a.iter().all(|e| e.prompt.iter().all(|&t| t < 500)));
        }
    }

    #[test]
    fn sharing_structure() {
        // Few-shot: every prompt starts with one of three prefixes.
        let t = spec(WorkloadKind::FewShot).generate();
        let mut prefixes: Vec<&[u32]> = t.iter().map(|e| &e.prompt[..64]).collect();
        prefixes.sort();
        prefixes.dedup();
        assert_eq!(prefixes.len(), 3);
        // Multi-turn: a later turn of a conversation extends an earlier one.
        let t = spec(WorkloadKind::MultiTurn).generate();
        let extended = t
            .iter()
            .enumerate()
            .filter(|(i, e)| {
                t[..*i]
                    .iter()
                    .any(|p| p.prompt.len() < e.prompt.len() && e.prompt.starts_with(&p.prompt))
            })
            .count();
        assert!(extended >= 50, "{extended} turns extend an earlier turn");
        // Tree of thought: some prompts share more than the trunk.
        let t = spec(WorkloadKind::TreeOfThought).generate();
        let deep = t
            .iter()
            .enumerate()
            .filter(|(i, e)| {
                t[..*i]
                    .iter()
                    .any(|p| common_prefix(&p.prompt, &e.prompt) > 64)
            })
            .count();
        assert!(deep > 10, "{deep} prompts share past the trunk");
        // No sharing: no two prompts share a page.
        let t = spec(WorkloadKind::NoSharing).generate();
        for (i, a) in t.iter().enumerate() {
            for b in &t[..i] {
                assert!(common_prefix(&a.prompt, &b.prompt) < 16);
            }
        }
    }

    #[test]
    fn poisson_rate_is_respected() {
        let mut s = spec(WorkloadKind::NoSharing);
        s.requests = 4000;
        s.arrivals = Arrivals::Poisson(200.0);
        let t = s.generate();
        let span = t.last().map(|e| e.arrival_us).unwrap_or(0) as f64 / 1e6;
        let rate = 4000.0 / span;
        assert!((rate - 200.0).abs() < 20.0, "rate {rate}");
        s.arrivals = Arrivals::Offline;
        assert!(s.generate().iter().all(|e| e.arrival_us == 0));
    }

    #[test]
    fn lengths_parse_and_stay_in_range() {
        assert_eq!("32".parse(), Ok(LengthDist::Fixed(32)));
        assert_eq!("uniform:4:9".parse(), Ok(LengthDist::Uniform(4, 9)));
        assert!("uniform:9:4".parse::<LengthDist>().is_err());
        assert!("0".parse::<LengthDist>().is_err());
        assert!("gauss:3".parse::<LengthDist>().is_err());
        let d: LengthDist = "lognormal:100:0.5".parse().unwrap();
        let mut rng = fastrand::Rng::with_seed(1);
        let mut v: Vec<u32> = (0..2001).map(|_| d.sample(&mut rng)).collect();
        assert!(v.iter().all(|&x| (1..=800).contains(&x)));
        v.sort();
        assert!((85..=115).contains(&v[1000]), "median {}", v[1000]);
    }

    #[test]
    fn trace_lines_round_trip_through_serde() {
        let mut rng = fastrand::Rng::with_seed(3);
        let classes = [
            Priority::Low,
            Priority::Normal,
            Priority::High,
            Priority::Critical,
        ];
        for _ in 0..300 {
            let entry = TraceEntry {
                arrival_us: rng.u64(0..10_000_000_000),
                prompt: (0..rng.usize(1..20)).map(|_| rng.u32(0..500)).collect(),
                max_tokens: rng.u32(1..=u32::MAX),
                priority: classes[rng.usize(0..4)],
            };
            let line = TraceLine::from(&entry);
            let text = serde_json::to_string(&line).unwrap();
            let back: TraceLine = serde_json::from_str(&text).unwrap();
            assert_eq!(back, line);
            assert_eq!(back.to_entry(500), Ok(entry));
        }
    }

    #[test]
    fn trace_round_trips_and_reports_bad_lines() {
        let t = spec(WorkloadKind::FewShot).generate();
        assert_eq!(parse_trace(&write_trace(&t), 500), Ok(t));
        let text =
            "{\"arrival\": 0.5, \"prompt\": \"hi\", \"max_tokens\": 3, \"priority\": \"high\"}\n\
                    \n# comment\n\
                    {\"prompt\": \"x\"}\n\
                    not json\n\
                    {\"prompt_tokens\": [1, 999], \"max_tokens\": 2}\n\
                    {\"prompt\": \"a\", \"max_tokens\": 2, \"priority\": \"urgent\"}\n\
                    {\"prompt\": \"a\", \"max_tokens\": 2, \"colour\": 1}\n";
        let errors = parse_trace(text, 500).unwrap_err();
        let lines: Vec<usize> = errors.iter().map(|e| e.line).collect();
        assert_eq!(lines, vec![4, 5, 6, 7, 8]);
        assert!(errors[0].message.contains("max_tokens"));
        assert!(errors[2].message.contains("999"));
        assert!(errors[1].message.starts_with("not valid JSON"));
        assert!(errors[3]
            .message
            .contains("expected one of `low`, `normal`, `high`, `critical`"));
        assert!(errors[4].message.contains("unknown field `colour`"));
        let ok = parse_trace(
            "{\"arrival\": 0.5, \"prompt\": \"hi\", \"max_tokens\": 3}",
            500,
        )
        .unwrap();
        assert_eq!(ok[0].prompt, vec![104, 105]);
        assert_eq!(ok[0].arrival_us, 500_000);
    }
}
