//! Recorded traces in JSON Lines: one [`TraceLine`] per request, read with
//! serde (unknown fields refused) and written with the same type, so a saved
//! trace replays unchanged. Every bad line is reported with its number.

use std::fmt;

use pagoda_engine::Priority;
use serde::{Deserialize, Serialize};

use crate::workload::TraceEntry;

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

/// How a trace's text prompts become token ids: one token per UTF-8 byte
/// for the embedded model, the model's tokenizer for a GGUF model.
pub struct Vocabulary<'a> {
    /// Token ids are `0..size`.
    pub size: u32,
    /// Text to ids.
    pub tokenize: &'a dyn Fn(&str) -> Vec<u32>,
}

impl Vocabulary<'static> {
    /// One token per UTF-8 byte (the embedded model has no tokenizer).
    pub fn bytes(size: u32) -> Self {
        Self {
            size,
            tokenize: &|text| text.bytes().map(u32::from).collect(),
        }
    }
}

/// One line of a JSON Lines trace, as read and as written: `arrival`
/// (seconds from the start, default 0), either `prompt` (text, tokenized by
/// the model's [`Vocabulary`]) or `prompt_tokens` (token ids), `max_tokens` (at least 1) and
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
    pub fn to_entry(&self, vocabulary: &Vocabulary<'_>) -> Result<TraceEntry, String> {
        let vocab = vocabulary.size;
        let arrival = match self.arrival {
            None => 0.0,
            Some(s) if s.is_finite() && (0.0..1e9).contains(&s) => s,
            Some(s) => return Err(format!("arrival must be seconds ≥ 0, found {s}")),
        };
        let prompt: Vec<u32> = match (&self.prompt, &self.prompt_tokens) {
            (Some(_), Some(_)) => return Err("give prompt or prompt_tokens, not both".into()),
            (None, None) => return Err("missing prompt (text) or prompt_tokens (ids)".into()),
            (Some(text), None) => (vocabulary.tokenize)(text),
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
pub fn parse_trace(text: &str, vocab: &Vocabulary<'_>) -> Result<Vec<TraceEntry>, Vec<TraceError>> {
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
    use crate::workload::tests::spec;
    use crate::workload::WorkloadKind;

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
            assert_eq!(back.to_entry(&Vocabulary::bytes(500)), Ok(entry));
        }
    }

    #[test]
    fn trace_round_trips_and_reports_bad_lines() {
        let t = spec(WorkloadKind::FewShot).generate();
        assert_eq!(
            parse_trace(&write_trace(&t), &Vocabulary::bytes(500)),
            Ok(t)
        );
        let text =
            "{\"arrival\": 0.5, \"prompt\": \"hi\", \"max_tokens\": 3, \"priority\": \"high\"}\n\
                    \n# comment\n\
                    {\"prompt\": \"x\"}\n\
                    not json\n\
                    {\"prompt_tokens\": [1, 999], \"max_tokens\": 2}\n\
                    {\"prompt\": \"a\", \"max_tokens\": 2, \"priority\": \"urgent\"}\n\
                    {\"prompt\": \"a\", \"max_tokens\": 2, \"colour\": 1}\n";
        let errors = parse_trace(text, &Vocabulary::bytes(500)).unwrap_err();
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
            &Vocabulary::bytes(500),
        )
        .unwrap();
        assert_eq!(ok[0].prompt, vec![104, 105]);
        assert_eq!(ok[0].arrival_us, 500_000);
    }
}
