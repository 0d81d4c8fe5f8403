//! Pre-tokenizers: split text into the words BPE merges within, by the
//! name llama.cpp gives them in `tokenizer.ggml.pre`.
//!
//! The patterns are scanned by hand rather than with a regex engine: the
//! `regex` crate has no lookahead (`\s+(?!\S)`), `fancy-regex` would be a
//! backtracking dependency for one assertion, and each pattern is a short
//! ordered list of alternatives whose first match at a position is easy to
//! state directly. Each function below mirrors its pattern's alternatives in
//! order, including the backtracking the lookahead implies.

use super::chars::{class, is_lowerish, is_upperish, Class};
use super::error::TokenizerError;

/// A pre-tokenizer llama.cpp knows by name (the names llama.cpp's
/// `llm_tokenizer_bpe` gives one pattern map to one variant).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum PreTokenizer {
    /// `gpt-2`, `default`, `mpt`, `olmo`: the GPT-2 pattern
    /// `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`.
    Gpt2,
    /// `smollm`, `starcoder`, `refact`, `command-r`, `codeshell`,
    /// `exaone`, `minerva`: every digit on its own, then the GPT-2
    /// pattern.
    SmolLm,
    /// `llama-bpe`, `llama3`, `llama-v3`, `falcon3`, `glm4`: the Llama 3 pattern
    /// (case-insensitive contractions, digits in groups of up to three);
    /// whole words in the vocabulary skip merging.
    Llama3,
    /// `dbrx`, `smaug-bpe`: the Llama 3 pattern, every word merged (no
    /// whole-word shortcut).
    Dbrx,
    /// `qwen2`, `stablelm2`: the Llama 3 pattern with single digits.
    Qwen2,
    /// `gpt-4o`, `llama4`: tiktoken's o200k pattern (gpt-oss, Llama 4),
    /// which splits words at a change from small letters to capitals and
    /// keeps a `/` or line break after punctuation. As its tokenizer.json
    /// states it (marks and non-ASCII case included), not llama.cpp's
    /// ASCII-case approximation of it.
    Gpt4o,
}

impl PreTokenizer {
    /// The pre-tokenizer `tokenizer.ggml.pre` names; an unknown name is an
    /// error rather than a guess.
    pub fn from_name(name: &str) -> Result<PreTokenizer, TokenizerError> {
        Ok(match name {
            "default" | "gpt-2" | "gpt2" | "mpt" | "olmo" => PreTokenizer::Gpt2,
            "smollm" | "starcoder" | "refact" | "command-r" | "codeshell" | "exaone"
            | "minerva" => PreTokenizer::SmolLm,
            "llama-bpe" | "llama3" | "llama-v3" | "falcon3" | "glm4" => PreTokenizer::Llama3,
            "dbrx" | "smaug-bpe" => PreTokenizer::Dbrx,
            "qwen2" | "stablelm2" => PreTokenizer::Qwen2,
            "gpt-4o" | "llama4" => PreTokenizer::Gpt4o,
            other => return Err(TokenizerError::UnsupportedPre(other.to_owned())),
        })
    }

    /// Whether a word that is itself a token is taken whole (Llama 3's
    /// `ignore_merges`).
    pub(crate) fn ignore_merges(self) -> bool {
        self == PreTokenizer::Llama3
    }

    /// Calls `word` with each piece of `text`, in order; the pieces
    /// concatenate to `text`.
    pub fn split<'t>(self, text: &'t str, word: &mut dyn FnMut(&'t str)) {
        let chars: Vec<(usize, char, Class)> =
            text.char_indices().map(|(i, c)| (i, c, class(c))).collect();
        match self {
            PreTokenizer::Gpt2 => scan(text, &chars, gpt2_match, word),
            PreTokenizer::Llama3 | PreTokenizer::Dbrx => {
                scan(text, &chars, |c, i| llama3_match(c, i, 3), word)
            }
            PreTokenizer::Qwen2 => scan(text, &chars, |c, i| llama3_match(c, i, 1), word),
            PreTokenizer::Gpt4o => scan(text, &chars, gpt4o_match, word),
            PreTokenizer::SmolLm => {
                // Digits(individual_digits) first: each digit is a piece of
                // its own and the GPT-2 pattern runs on what lies between.
                let mut start = 0;
                for (k, &(_, _, cl)) in chars.iter().enumerate() {
                    if cl == Class::Number {
                        scan_range(text, &chars[start..k], word);
                        let (at, c, _) = chars[k];
                        word(&text[at..at + c.len_utf8()]);
                        start = k + 1;
                    }
                }
                scan_range(text, &chars[start..], word);
            }
        }
    }
}

fn scan_range<'t>(text: &'t str, chars: &[(usize, char, Class)], word: &mut dyn FnMut(&'t str)) {
    scan(text, chars, gpt2_match, word);
}

/// Runs a matcher from each position to the end of `chars` (a contiguous
/// run of `text`'s characters), emitting each match.
fn scan<'t>(
    text: &'t str,
    chars: &[(usize, char, Class)],
    matcher: impl Fn(&[(usize, char, Class)], usize) -> usize,
    word: &mut dyn FnMut(&'t str),
) {
    let end_byte = chars.last().map_or(0, |&(at, c, _)| at + c.len_utf8());
    let mut i = 0;
    while i < chars.len() {
        // Every character is in some alternative, so a match is never empty;
        // the `max(1)` only guards the loop.
        let n = matcher(chars, i).max(1).min(chars.len() - i);
        let from = chars[i].0;
        let to = chars.get(i + n).map_or(end_byte, |&(at, _, _)| at);
        word(&text[from..to]);
        i += n;
    }
}

fn cls(chars: &[(usize, char, Class)], i: usize) -> Option<Class> {
    chars.get(i).map(|&(_, _, c)| c)
}

fn ch(chars: &[(usize, char, Class)], i: usize) -> Option<char> {
    chars.get(i).map(|&(_, c, _)| c)
}

/// Length of the run of class `want` from `i`.
fn run(chars: &[(usize, char, Class)], i: usize, want: Class) -> usize {
    chars[i..]
        .iter()
        .take_while(|&&(_, _, c)| c == want)
        .count()
}

/// `'s|'t|'re|'ve|'m|'ll|'d` at `i` (ASCII case-insensitive if `fold`).
fn contraction(chars: &[(usize, char, Class)], i: usize, fold: bool) -> usize {
    if ch(chars, i) != Some('\'') {
        return 0;
    }
    let at = |k: usize| ch(chars, i + k).map(|c| if fold { c.to_ascii_lowercase() } else { c });
    match (at(1), at(2)) {
        (Some('s' | 't' | 'm' | 'd'), _) => 2,
        (Some('r'), Some('e')) | (Some('v'), Some('e')) | (Some('l'), Some('l')) => 3,
        _ => 0,
    }
}

/// `\s+(?!\S)` then `\s+` at `i`, which is whitespace: the whole run at the
/// end of the text, else the run but its last character (which then leads
/// the next word), else the single whitespace character.
fn whitespace(chars: &[(usize, char, Class)], i: usize) -> usize {
    let n = run(chars, i, Class::Space);
    if i + n == chars.len() || n == 1 {
        n
    } else {
        n - 1
    }
}

/// ` ?X+` for class X at `i`.
fn space_then(chars: &[(usize, char, Class)], i: usize, want: Class) -> usize {
    let lead = usize::from(ch(chars, i) == Some(' '));
    let n = if i + lead < chars.len() {
        run(chars, i + lead, want)
    } else {
        0
    };
    if n == 0 {
        0
    } else {
        lead + n
    }
}

fn gpt2_match(chars: &[(usize, char, Class)], i: usize) -> usize {
    let n = contraction(chars, i, false);
    if n > 0 {
        return n;
    }
    for want in [Class::Letter, Class::Number, Class::Other] {
        let n = space_then(chars, i, want);
        if n > 0 {
            return n;
        }
    }
    whitespace(chars, i)
}

fn is_crlf(c: Option<char>) -> bool {
    matches!(c, Some('\r' | '\n'))
}

/// `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,digits}|
/// ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`.
///
/// The case folding is ASCII only: Unicode folding would also let `ſ`
/// (U+017F) stand for `s`, which no contraction in real text uses.
fn llama3_match(chars: &[(usize, char, Class)], i: usize, digits: usize) -> usize {
    let n = contraction(chars, i, true);
    if n > 0 {
        return n;
    }
    let c = cls(chars, i);
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if c == Some(Class::Letter) {
        return run(chars, i, Class::Letter);
    }
    if c != Some(Class::Number)
        && !is_crlf(ch(chars, i))
        && cls(chars, i + 1) == Some(Class::Letter)
    {
        return 1 + run(chars, i + 1, Class::Letter);
    }
    // \p{N}{1,digits}
    if c == Some(Class::Number) {
        return run(chars, i, Class::Number).min(digits);
    }
    punctuation_or_space(chars, i, |c| c == '\r' || c == '\n')
}

/// The alternatives the Llama 3 and GPT-4o patterns end with, at `i`:
/// ` ?[^\s\p{L}\p{N}]+` then the characters `tail` takes (`[\r\n]*`,
/// GPT-4o's `[\r\n/]*`), `\s*[\r\n]+`, `\s+(?!\S)`, `\s+`, else the
/// one character.
fn punctuation_or_space(chars: &[(usize, char, Class)], i: usize, tail: fn(char) -> bool) -> usize {
    let n = space_then(chars, i, Class::Other);
    if n > 0 {
        let more = chars[i + n..]
            .iter()
            .take_while(|&&(_, c, _)| tail(c))
            .count();
        return n + more;
    }
    if cls(chars, i) == Some(Class::Space) {
        // \s*[\r\n]+: through the last CR or LF of the whitespace run.
        let n = run(chars, i, Class::Space);
        if let Some(last) = (i..i + n).rev().find(|&k| is_crlf(ch(chars, k))) {
            return last + 1 - i;
        }
        return whitespace(chars, i);
    }
    1
}

/// Length of the run from `i` of characters that pass `test`.
fn run_of(chars: &[(usize, char, Class)], i: usize, test: fn(char) -> bool) -> usize {
    chars[i.min(chars.len())..]
        .iter()
        .take_while(|&&(_, c, _)| test(c))
        .count()
}

/// `U*L+` at `j` (U: [`is_upperish`], L: [`is_lowerish`]), as a
/// backtracking engine finds it: the most capitals that still leave a
/// small letter after them, then every small letter.
fn capitals_then_smalls(chars: &[(usize, char, Class)], j: usize) -> Option<usize> {
    let capitals = run_of(chars, j, is_upperish);
    (0..=capitals).rev().find_map(|k| {
        let smalls = run_of(chars, j + k, is_lowerish);
        (smalls > 0).then_some(k + smalls)
    })
}

/// `U+L*` at `j`.
fn capitals_and_smalls(chars: &[(usize, char, Class)], j: usize) -> Option<usize> {
    let capitals = run_of(chars, j, is_upperish);
    (capitals > 0).then(|| capitals + run_of(chars, j + capitals, is_lowerish))
}

/// `[^\r\n\p{L}\p{N}]?U*L+C?|[^\r\n\p{L}\p{N}]?U+L*C?|\p{N}{1,3}|
/// ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`, with C the
/// case-insensitive contractions and U, L as in [`capitals_then_smalls`].
fn gpt4o_match(chars: &[(usize, char, Class)], i: usize) -> usize {
    let c = cls(chars, i);
    // The optional lead: a character that is no letter, digit, CR or LF.
    let lead = !matches!(c, Some(Class::Letter | Class::Number)) && !is_crlf(ch(chars, i));
    let starts = [(lead && i + 1 < chars.len()).then_some(i + 1), Some(i)];
    for word in [capitals_then_smalls, capitals_and_smalls] {
        for j in starts.into_iter().flatten() {
            if let Some(n) = word(chars, j) {
                let end = j + n;
                return end - i + contraction(chars, end, true);
            }
        }
    }
    if c == Some(Class::Number) {
        return run(chars, i, Class::Number).min(3);
    }
    punctuation_or_space(chars, i, |c| matches!(c, '\r' | '\n' | '/'))
}
