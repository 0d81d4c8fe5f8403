//! [`StopStrings`]: ends a streamed reply at the first stop string, even one
//! split across chunks, without ever showing the user part of it.

/// What one [`StopStrings::push`] lets through.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StopOutput {
    /// Text that can be shown now: it cannot be part of a stop string.
    pub emit: String,
    /// A stop string was found; generation should end. Neither the stop
    /// string nor anything after it is ever emitted.
    pub stopped: bool,
}

/// A streaming matcher over decoded text. It holds back the longest tail of
/// the text seen so far that could still grow into a stop string, and emits
/// the rest. The reply stops as soon as a stop string is complete (the
/// generator need not run on to see whether a longer one would have matched
/// from earlier); the text is cut where that stop string starts, the longest
/// one when several end at the same byte. The result does not depend on how
/// the text is split into chunks.
#[derive(Clone, Debug)]
pub struct StopStrings {
    stops: Vec<String>,
    held: String,
    stopped: bool,
}

impl StopStrings {
    /// A matcher for `stops`. Empty strings are ignored (they would stop
    /// every reply before its first character).
    pub fn new(stops: &[String]) -> Self {
        Self {
            stops: stops.iter().filter(|s| !s.is_empty()).cloned().collect(),
            held: String::new(),
            stopped: false,
        }
    }

    /// Whether a stop string has been seen.
    pub fn is_stopped(&self) -> bool {
        self.stopped
    }

    /// Feeds the next chunk of text. After a stop every push emits nothing.
    pub fn push(&mut self, chunk: &str) -> StopOutput {
        if self.stopped {
            return StopOutput {
                emit: String::new(),
                stopped: true,
            };
        }
        self.held.push_str(chunk);
        // Nothing held before this chunk contained a whole stop string, so
        // the match that completes first here is the first in the stream; of
        // several that complete at the same byte, the longest wins.
        let first = self
            .stops
            .iter()
            .filter_map(|s| self.held.find(s.as_str()).map(|at| (at + s.len(), at)))
            .min_by_key(|&(end, at)| (end, at));
        if let Some((_, at)) = first {
            self.held.truncate(at);
            self.stopped = true;
            return StopOutput {
                emit: std::mem::take(&mut self.held),
                stopped: true,
            };
        }
        let keep = self.partial_tail();
        let tail = self.held.split_off(self.held.len() - keep);
        StopOutput {
            emit: std::mem::replace(&mut self.held, tail),
            stopped: false,
        }
    }

    /// The text held back at the end of the stream (no stop string came, so
    /// it is part of the reply). Empty after a stop.
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }

    /// Length in bytes of the longest suffix of the held text that is a
    /// proper prefix of some stop string.
    fn partial_tail(&self) -> usize {
        let held = self.held.as_bytes();
        let longest = self.stops.iter().map(String::len).max().unwrap_or(0);
        let start = held.len().saturating_sub(longest.saturating_sub(1));
        (start..held.len())
            .find(|&k| {
                self.held.is_char_boundary(k)
                    && self
                        .stops
                        .iter()
                        .any(|s| s.as_bytes().starts_with(&held[k..]))
            })
            .map_or(0, |k| held.len() - k)
    }
}
