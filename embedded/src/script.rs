//! The built-in workload: 24 scripted requests whose prompts share prefixes,
//! with the tokens they "generate" scripted too (no model runs).
//!
//! Sixteen first turns open on one of four system prompts (the shared
//! prefixes) followed by their own question; eight follow-ups continue a
//! first turn: its prompt, its scripted answer and a new question, so a
//! finished sequence's cached output is reused as well. Everything is built
//! at compile time into one token table in flash.

use pagoda_core::{Priority, Request};

/// Requests in the script.
pub const REQUESTS: usize = 24;
/// First turns; the requests after them are follow-ups.
const FIRST_TURNS: usize = 16;
/// System prompts (the shared prefixes), by length in tokens.
const FAMILY_LEN: [u32; 4] = [80, 64, 96, 48];
/// New tokens a follow-up adds after the answer it continues.
const FOLLOW_UP_QUESTION: u32 = 12;

/// Which first turn a request continues (itself for a first turn).
const fn base(i: usize) -> usize {
    if i < FIRST_TURNS {
        i
    } else {
        i - FIRST_TURNS
    }
}

/// The system prompt a request opens on.
const fn family(i: usize) -> usize {
    base(i) % FAMILY_LEN.len()
}

/// A first turn's own question, in tokens (8 to 36).
const fn question_len(i: usize) -> u32 {
    8 + (base(i) as u32 * 7) % 29
}

/// Tokens the request generates (4 to 24).
pub const fn output_len(i: usize) -> u32 {
    4 + (i as u32 * 5) % 21
}

/// Prompt tokens of request `i`.
const fn prompt_len(i: usize) -> u32 {
    let first = FAMILY_LEN[family(i)] + question_len(i);
    if i < FIRST_TURNS {
        first
    } else {
        first + output_len(base(i)) + FOLLOW_UP_QUESTION
    }
}

/// The `k`th token request `i` generates.
pub const fn output_token(i: usize, k: u32) -> u32 {
    200_000 + i as u32 * 1_000 + k
}

/// When request `i` arrives, in microseconds: a burst of first turns, then
/// a trickle, then the follow-ups.
pub const fn arrival_us(i: usize) -> u64 {
    if i < 12 {
        i as u64 * 500
    } else if i < FIRST_TURNS {
        40_000 + (i as u64 - 12) * 15_000
    } else {
        150_000 + (i - FIRST_TURNS) as u64 * 10_000
    }
}

/// Request `i`'s class: mostly normal, a few interactive, one background.
pub const fn priority(i: usize) -> Priority {
    match i {
        5 | 13 => Priority::High,
        9 => Priority::Low,
        _ => Priority::Normal,
    }
}

const fn offsets() -> [usize; REQUESTS + 1] {
    let mut out = [0; REQUESTS + 1];
    let mut i = 0;
    while i < REQUESTS {
        out[i + 1] = out[i] + prompt_len(i) as usize;
        i += 1;
    }
    out
}

/// Where each prompt starts in [`TOKENS`].
const OFFSETS: [usize; REQUESTS + 1] = offsets();
const TOTAL: usize = OFFSETS[REQUESTS];

const fn tokens() -> [u32; TOTAL] {
    let mut out = [0; TOTAL];
    let mut i = 0;
    while i < REQUESTS {
        let mut at = OFFSETS[i];
        let f = family(i);
        let mut k = 0;
        while k < FAMILY_LEN[f] {
            out[at] = f as u32 * 10_000 + k + 1;
            at += 1;
            k += 1;
        }
        let b = base(i);
        k = 0;
        while k < question_len(i) {
            out[at] = 100_000 + b as u32 * 1_000 + k;
            at += 1;
            k += 1;
        }
        if i >= FIRST_TURNS {
            k = 0;
            while k < output_len(b) {
                out[at] = output_token(b, k);
                at += 1;
                k += 1;
            }
            k = 0;
            while k < FOLLOW_UP_QUESTION {
                out[at] = 300_000 + i as u32 * 1_000 + k;
                at += 1;
                k += 1;
            }
        }
        debug_assert!(at == OFFSETS[i + 1]);
        i += 1;
    }
    out
}

/// Every prompt, back to back.
static TOKENS: [u32; TOTAL] = tokens();

/// One scripted request: its prompt in flash and how much it generates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scripted {
    /// Its index in the script: the scripted output tokens depend on it.
    pub index: u32,
    prompt: &'static [u32],
    output: u32,
}

impl Scripted {
    /// Request `i` of the script, if there is one.
    pub fn get(i: usize) -> Option<Self> {
        let (start, end) = (*OFFSETS.get(i)?, *OFFSETS.get(i + 1)?);
        Some(Self {
            index: i as u32,
            prompt: TOKENS.get(start..end)?,
            output: output_len(i),
        })
    }
}

impl Request for Scripted {
    fn prompt(&self) -> &[u32] {
        self.prompt
    }

    fn max_output_tokens(&self) -> u32 {
        self.output
    }
}
