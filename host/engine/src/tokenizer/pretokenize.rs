//! Pre-tokenizers: split text into the words BPE merges within, by the
//! name llama.cpp gives them in `tokenizer.ggml.pre`.
//!
//! The patterns are scanned by hand rather than with a regex engine: the
//! `regex` crate has no lookahead (`\s+(?!\S)`), `fancy-regex` would be a
//! backtracking dependency for one assertion, and each pattern is a short
//! ordered list of alternatives whose first match at a position is easy to
//! state directly. Each function below mirrors its pattern's alternatives in
//! order, including the backtracking the lookahead implies.
//!
//! DeepSeek's pre-tokenizers are not one pattern but a sequence of them
//! (a `tokenizers` Sequence of Split steps, llama.cpp's list of regexes):
//! each splits every piece the one before it left, its matches becoming
//! pieces and so does the text between them. [`split_in_steps`] runs such
//! a sequence; each step is again a function for its pattern.

use super::chars::{
    class, is_deepseek_llm_letter, is_han, is_lowerish, is_lowerish_not_han, is_mark,
    is_punctuation_or_symbol, is_upperish, is_upperish_not_han, Class,
};
use super::error::TokenizerError;

/// A pre-tokenizer llama.cpp knows by name (the names llama.cpp's
/// `llm_tokenizer_bpe` gives one pattern map to one variant).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum PreTokenizer {
    /// `gpt-2`, `default`, `mpt`, `olmo`, `exaone4`: the GPT-2 pattern
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
    /// `qwen2`, `stablelm2`, `deepseek-r1-qwen`: the Llama 3 pattern with
    /// single digits.
    Qwen2,
    /// `qwen35` (Qwen3.5): Qwen2's pattern with marks in its words
    /// (`[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+`) and none in its punctuation
    /// runs (` ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*`), as its tokenizer.json
    /// states it.
    Qwen35,
    /// `seed-coder` (Seed-Coder, Seed-OSS): Qwen2's pattern without the
    /// line breaks a run of punctuation takes after it
    /// (` ?[^\s\p{L}\p{N}\r\n]+`).
    SeedCoder,
    /// `gpt-4o`, `llama4`, `minimax-m2`: tiktoken's o200k pattern (gpt-oss,
    /// Llama 4, MiniMax-M2),
    /// which splits words at a change from small letters to capitals and
    /// keeps a `/` or line break after punctuation. As its tokenizer.json
    /// states it (marks and non-ASCII case included), not llama.cpp's
    /// ASCII-case approximation of it.
    Gpt4o,
    /// `tekken` (Mistral-Nemo, Mistral Small 3.x, Ministral, Pixtral):
    /// the o200k pattern without its contractions and with single digits,
    /// as its tokenizer.json states it; whole words in the vocabulary
    /// skip merging.
    Tekken,
    /// `kimi-k2` (Kimi K2): the o200k pattern with Han runs split off
    /// first and kept out of its words, and no `/` after punctuation, as
    /// its tiktoken pattern states it.
    KimiK2,
    /// `deepseek-v3` (DeepSeek-V3, DeepSeek-R1), and `joyai-llm`,
    /// `hunyuan-dense`, `hy_v4`, which llama.cpp gives the same steps:
    /// `\p{N}{1,3}`, then `[一-龥぀-ゟ゠-ヿ]+` (Han and kana runs), then
    /// ``[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|
    /// [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|
    /// \s*[\r\n]+|\s+(?!\S)|\s+``. Every word merged.
    DeepSeekV3,
    /// `deepseek-llm` (DeepSeek LLM, DeepSeek-V2): `[\r\n]`, then
    /// `\s?L+` with L the cased letters its pattern lists, then
    /// `\s?[!-/:-~！-／：-～‘-‟　-。]+`, `\s+$`, `[一-龥ࠀ-一가-퟿]+`, and
    /// every digit on its own (its tokenizer.json's `Digits`, where
    /// llama.cpp writes `\p{N}+`: its vocabulary has no two digits in one
    /// piece, so the ids agree). Every word merged.
    DeepSeekLlm,
}

impl PreTokenizer {
    /// The pre-tokenizer `tokenizer.ggml.pre` names; an unknown name is an
    /// error rather than a guess.
    pub fn from_name(name: &str) -> Result<PreTokenizer, TokenizerError> {
        Ok(match name {
            // llama.cpp splits EXAONE 4's text by GPT-2's pattern.
            "default" | "gpt-2" | "gpt2" | "mpt" | "olmo" | "exaone4" => PreTokenizer::Gpt2,
            "smollm" | "starcoder" | "refact" | "command-r" | "codeshell" | "exaone"
            | "minerva" => PreTokenizer::SmolLm,
            // Pixtral's, Mi:dm 2.0's and LFM2's files split as Llama 3's,
            // as llama.cpp reads them.
            "llama-bpe" | "llama3" | "llama-v3" | "falcon3" | "glm4" | "pixtral" | "midm-2.0"
            | "lfm2" => PreTokenizer::Llama3,
            "dbrx" | "smaug-bpe" => PreTokenizer::Dbrx,
            // DeepSeek-R1's distillations into Qwen keep Qwen's pattern.
            "qwen2" | "stablelm2" | "deepseek-r1-qwen" => PreTokenizer::Qwen2,
            "qwen35" => PreTokenizer::Qwen35,
            "seed-coder" => PreTokenizer::SeedCoder,
            // MiniMax-M2's tokenizer.json states o200k's pattern.
            "gpt-4o" | "llama4" | "minimax-m2" => PreTokenizer::Gpt4o,
            "tekken" => PreTokenizer::Tekken,
            "kimi-k2" => PreTokenizer::KimiK2,
            "deepseek-v3" | "joyai-llm" | "hunyuan-dense" | "hy_v4" => PreTokenizer::DeepSeekV3,
            "deepseek-llm" => PreTokenizer::DeepSeekLlm,
            other => return Err(TokenizerError::UnsupportedPre(other.to_owned())),
        })
    }

    /// Whether a word that is itself a token is taken whole (Llama 3's
    /// `ignore_merges`).
    pub(crate) fn ignore_merges(self) -> bool {
        matches!(self, PreTokenizer::Llama3 | PreTokenizer::Tekken)
    }

    /// Calls `word` with each piece of `text`, in order; the pieces
    /// concatenate to `text`.
    pub fn split<'t>(self, text: &'t str, word: &mut dyn FnMut(&'t str)) {
        let chars: Vec<(usize, char, Class)> =
            text.char_indices().map(|(i, c)| (i, c, class(c))).collect();
        match self {
            PreTokenizer::Gpt2 => scan(text, &chars, gpt2_match, word),
            PreTokenizer::Llama3 | PreTokenizer::Dbrx => scan(
                text,
                &chars,
                |c, i| llama3_match(c, i, 3, is_line_break),
                word,
            ),
            PreTokenizer::Qwen2 => scan(
                text,
                &chars,
                |c, i| llama3_match(c, i, 1, is_line_break),
                word,
            ),
            PreTokenizer::Qwen35 => scan(text, &chars, qwen35_match, word),
            PreTokenizer::SeedCoder => {
                scan(text, &chars, |c, i| llama3_match(c, i, 1, |_| false), word)
            }
            PreTokenizer::Gpt4o => scan(text, &chars, |c, i| o200k_match(c, i, O200k::GPT4O), word),
            PreTokenizer::Tekken => {
                scan(text, &chars, |c, i| o200k_match(c, i, O200k::TEKKEN), word)
            }
            PreTokenizer::KimiK2 => {
                scan(text, &chars, |c, i| o200k_match(c, i, O200k::KIMI_K2), word)
            }
            PreTokenizer::DeepSeekV3 => split_in_steps(
                text,
                &chars,
                &[digit_triple, han_or_kana_run, deepseek_v3_match],
                word,
            ),
            PreTokenizer::DeepSeekLlm => split_in_steps(
                text,
                &chars,
                &[
                    line_break,
                    deepseek_llm_word,
                    deepseek_llm_punctuation,
                    trailing_space,
                    deepseek_llm_cjk_run,
                    digit,
                ],
                word,
            ),
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
    c.is_some_and(is_line_break)
}

fn is_line_break(c: char) -> bool {
    c == '\r' || c == '\n'
}

/// `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,digits}|
/// ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`, the
/// punctuation run followed by what `punctuation_tail` takes (`[\r\n]*`;
/// Seed-Coder's nothing).
///
/// The case folding is ASCII only: Unicode folding would also let `ſ`
/// (U+017F) stand for `s`, which no contraction in real text uses.
fn llama3_match(
    chars: &[(usize, char, Class)],
    i: usize,
    digits: usize,
    punctuation_tail: fn(char) -> bool,
) -> usize {
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
    punctuation_or_space(chars, i, punctuation_tail)
}

/// Qwen3.5's pattern at `i`: `(?i:'s|'t|'re|'ve|'m|'ll|'d)|
/// [^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|
/// \s*[\r\n]+|\s+(?!\S)|\s+`.
fn qwen35_match(chars: &[(usize, char, Class)], i: usize) -> usize {
    let n = contraction(chars, i, true);
    if n > 0 {
        return n;
    }
    let in_word = |&(_, c, class): &(usize, char, Class)| class == Class::Letter || is_mark(c);
    let word_from = |k: usize| {
        chars
            .get(k..)
            .map_or(0, |r| r.iter().take_while(|x| in_word(x)).count())
    };
    let c = cls(chars, i);
    if chars.get(i).is_some_and(in_word) {
        return word_from(i);
    }
    if c != Some(Class::Number) && !is_crlf(ch(chars, i)) && chars.get(i + 1).is_some_and(in_word) {
        return 1 + word_from(i + 1);
    }
    if c == Some(Class::Number) {
        return 1;
    }
    let lead = usize::from(ch(chars, i) == Some(' '));
    let punctuation = chars.get(i + lead..).map_or(0, |r| {
        r.iter()
            .take_while(|&&(_, c, class)| class == Class::Other && !is_mark(c))
            .count()
    });
    if punctuation > 0 {
        let n = lead + punctuation;
        return n + run_of(chars, i + n, is_line_break);
    }
    if c == Some(Class::Space) {
        return line_break_or_space(chars, i);
    }
    1
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
        return line_break_or_space(chars, i);
    }
    1
}

/// `\s*[\r\n]+|\s+(?!\S)|\s+` at `i`, which is whitespace: through the
/// last CR or LF of the whitespace run, else as [`whitespace`].
fn line_break_or_space(chars: &[(usize, char, Class)], i: usize) -> usize {
    let n = run(chars, i, Class::Space);
    if let Some(last) = (i..i + n).rev().find(|&k| is_crlf(ch(chars, k))) {
        return last + 1 - i;
    }
    whitespace(chars, i)
}

/// Length of the run from `i` of characters that pass `test`.
fn run_of(chars: &[(usize, char, Class)], i: usize, test: fn(char) -> bool) -> usize {
    chars[i.min(chars.len())..]
        .iter()
        .take_while(|&&(_, c, _)| test(c))
        .count()
}

/// The tests of a capital and of a small letter.
type Cases = (fn(char) -> bool, fn(char) -> bool);

/// Tiktoken's o200k pattern as a vocabulary words it.
#[derive(Clone, Copy)]
struct O200k {
    /// Case-insensitive contractions after a word (none: Tekken's).
    contractions: bool,
    /// Digits a number piece holds at most.
    digits: usize,
    /// A `/` may end a punctuation run (not in Kimi K2's).
    slash: bool,
    /// Han runs are pieces of their own, and no word holds Han (Kimi
    /// K2's `[\p{Han}]+` first, its letter classes `&&[^\p{Han}]`).
    han_apart: bool,
}

impl O200k {
    const GPT4O: Self = Self {
        contractions: true,
        digits: 3,
        slash: true,
        han_apart: false,
    };
    const TEKKEN: Self = Self {
        contractions: false,
        digits: 1,
        ..Self::GPT4O
    };
    const KIMI_K2: Self = Self {
        slash: false,
        han_apart: true,
        ..Self::GPT4O
    };

    /// The capitals' and the small letters' tests.
    fn cases(self) -> Cases {
        if self.han_apart {
            (is_upperish_not_han, is_lowerish_not_han)
        } else {
            (is_upperish, is_lowerish)
        }
    }
}

/// `U*L+` at `j` (U: [`is_upperish`], L: [`is_lowerish`], or as `cases`
/// says), as a backtracking engine finds it: the most capitals that still
/// leave a small letter after them, then every small letter.
fn capitals_then_smalls(
    chars: &[(usize, char, Class)],
    j: usize,
    (upper, lower): Cases,
) -> Option<usize> {
    let capitals = run_of(chars, j, upper);
    (0..=capitals).rev().find_map(|k| {
        let smalls = run_of(chars, j + k, lower);
        (smalls > 0).then_some(k + smalls)
    })
}

/// `U+L*` at `j`.
fn capitals_and_smalls(
    chars: &[(usize, char, Class)],
    j: usize,
    (upper, lower): Cases,
) -> Option<usize> {
    let capitals = run_of(chars, j, upper);
    (capitals > 0).then(|| capitals + run_of(chars, j + capitals, lower))
}

/// `[^\r\n\p{L}\p{N}]?U*L+C?|[^\r\n\p{L}\p{N}]?U+L*C?|\p{N}{1,digits}|
/// ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`, with C the
/// case-insensitive contractions and U, L as in [`capitals_then_smalls`]
/// (each as `o` says; Kimi K2's with `[\p{Han}]+` first).
fn o200k_match(chars: &[(usize, char, Class)], i: usize, o: O200k) -> usize {
    if o.han_apart && ch(chars, i).is_some_and(is_han) {
        return run_of(chars, i, is_han);
    }
    let c = cls(chars, i);
    // The optional lead: a character that is no letter, digit, CR or LF.
    let lead = !matches!(c, Some(Class::Letter | Class::Number)) && !is_crlf(ch(chars, i));
    let starts = [(lead && i + 1 < chars.len()).then_some(i + 1), Some(i)];
    type Word = fn(&[(usize, char, Class)], usize, Cases) -> Option<usize>;
    let words: [Word; 2] = [capitals_then_smalls, capitals_and_smalls];
    for word in words {
        for j in starts.into_iter().flatten() {
            if let Some(n) = word(chars, j, o.cases()) {
                let end = j + n;
                let tail = if o.contractions {
                    contraction(chars, end, true)
                } else {
                    0
                };
                return end - i + tail;
            }
        }
    }
    if c == Some(Class::Number) {
        return run(chars, i, Class::Number).min(o.digits);
    }
    if o.slash {
        punctuation_or_space(chars, i, |c| matches!(c, '\r' | '\n' | '/'))
    } else {
        punctuation_or_space(chars, i, is_crlf_char)
    }
}

/// A CR or an LF.
fn is_crlf_char(c: char) -> bool {
    matches!(c, '\r' | '\n')
}

/// A step's pattern: the length of its match at a position, 0 for none.
type Step = fn(&[(usize, char, Class)], usize) -> usize;

/// Runs `steps` as a `tokenizers` Sequence of Split steps (behavior
/// Isolated) does: the first splits `chars`, each later one splits
/// every piece the one before it left, and the last one's pieces are the
/// words. A step sees only its piece, so its lookaheads and anchors stop
/// at the piece's end.
fn split_in_steps<'t>(
    text: &'t str,
    chars: &[(usize, char, Class)],
    steps: &[Step],
    word: &mut dyn FnMut(&'t str),
) {
    match steps.split_first() {
        None => {
            if let (Some(&(from, _, _)), Some(&(at, c, _))) = (chars.first(), chars.last()) {
                word(&text[from..at + c.len_utf8()]);
            }
        }
        Some((step, rest)) => isolate(chars, *step, &mut |piece| {
            split_in_steps(text, piece, rest, word)
        }),
    }
}

/// One Split step, behavior Isolated: each match of `step` (the leftmost
/// first, as a regex search finds them) is a piece, and so is each stretch
/// of characters between matches, however many it holds. No piece is
/// empty.
fn isolate<'c>(
    chars: &'c [(usize, char, Class)],
    step: Step,
    piece: &mut dyn FnMut(&'c [(usize, char, Class)]),
) {
    let mut unmatched = 0;
    let mut i = 0;
    while i < chars.len() {
        let n = step(chars, i).min(chars.len() - i);
        if n == 0 {
            i += 1;
            continue;
        }
        if unmatched < i {
            piece(&chars[unmatched..i]);
        }
        piece(&chars[i..i + n]);
        i += n;
        unmatched = i;
    }
    if unmatched < chars.len() {
        piece(&chars[unmatched..]);
    }
}

/// `\p{N}{1,3}`: a run of digits in threes from its start.
fn digit_triple(chars: &[(usize, char, Class)], i: usize) -> usize {
    if cls(chars, i) == Some(Class::Number) {
        run(chars, i, Class::Number).min(3)
    } else {
        0
    }
}

/// `[一-龥぀-ゟ゠-ヿ]+`: U+4E00 to U+9FA5 (the ideographs of Unicode 1.1's
/// block, not those added up to U+9FFF since), and the whole Hiragana and
/// Katakana blocks, their marks, `゠` and `・` included.
fn han_or_kana_run(chars: &[(usize, char, Class)], i: usize) -> usize {
    run_of(
        chars,
        i,
        |c| matches!(c, '\u{4E00}'..='\u{9FA5}' | '\u{3040}'..='\u{30FF}'),
    )
}

fn is_letter_or_mark(c: char) -> bool {
    class(c) == Class::Letter || is_mark(c)
}

/// DeepSeek-V3's last step, ``[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|
/// [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|
/// \s*[\r\n]+|\s+(?!\S)|\s+``, at `i`. A digit or a character no
/// alternative takes (a control character, an unassigned one) matches
/// nothing here and stays in the piece between matches.
fn deepseek_v3_match(chars: &[(usize, char, Class)], i: usize) -> usize {
    let Some(c) = ch(chars, i) else {
        return 0;
    };
    // An ASCII punctuation mark takes the ASCII letters after it: `.Net`,
    // `'s`, `$HOME` (the bracket is exactly ASCII's punctuation).
    if c.is_ascii_punctuation() {
        let n = run_of(chars, i + 1, |c| c.is_ascii_alphabetic());
        if n > 0 {
            return 1 + n;
        }
    }
    // [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+: from a letter or mark its
    // whole run (a mark may lead, which comes to the same); else one
    // character that is no CR, LF, punctuation or symbol, before a run.
    let n = run_of(chars, i, is_letter_or_mark);
    if n > 0 {
        return n;
    }
    if !is_crlf(Some(c)) && !is_punctuation_or_symbol(c) {
        let n = run_of(chars, i + 1, is_letter_or_mark);
        if n > 0 {
            return 1 + n;
        }
    }
    //  ?[\p{P}\p{S}]+[\r\n]*
    let lead = usize::from(c == ' ');
    let n = run_of(chars, i + lead, is_punctuation_or_symbol);
    if n > 0 {
        return lead + n + run_of(chars, i + lead + n, |c| matches!(c, '\r' | '\n'));
    }
    if cls(chars, i) == Some(Class::Space) {
        return line_break_or_space(chars, i);
    }
    0
}

/// `[\r\n]`: each CR and each LF on its own.
fn line_break(chars: &[(usize, char, Class)], i: usize) -> usize {
    usize::from(is_crlf(ch(chars, i)))
}

/// `\s?X+` at `i` for the characters X `test` passes: one whitespace
/// character before a run, else the run from `i` itself.
fn space_then_run(chars: &[(usize, char, Class)], i: usize, test: fn(char) -> bool) -> usize {
    if cls(chars, i) == Some(Class::Space) {
        let n = run_of(chars, i + 1, test);
        if n > 0 {
            return 1 + n;
        }
    }
    run_of(chars, i, test)
}

/// `\s?L+`, L [`is_deepseek_llm_letter`].
fn deepseek_llm_word(chars: &[(usize, char, Class)], i: usize) -> usize {
    space_then_run(chars, i, is_deepseek_llm_letter)
}

/// `\s?[!-/:-~！-／：-～‘-‟　-。]+`: ASCII's printable characters but the
/// space and the digits (its letters too, which the step before has
/// already taken whole), their fullwidth forms, the curly quotes, and
/// `　、。`.
fn deepseek_llm_punctuation(chars: &[(usize, char, Class)], i: usize) -> usize {
    space_then_run(chars, i, |c| {
        matches!(c,
            '!'..='/'
            | ':'..='~'
            | '\u{FF01}'..='\u{FF0F}'
            | '\u{FF1A}'..='\u{FF5E}'
            | '\u{2018}'..='\u{201F}'
            | '\u{3000}'..='\u{3002}')
    })
}

/// `\s+$`: the whitespace that ends a piece. (`$` would also match before
/// an LF, but every LF is a piece of its own by now.)
fn trailing_space(chars: &[(usize, char, Class)], i: usize) -> usize {
    let n = run(chars, i, Class::Space);
    if i + n == chars.len() {
        n
    } else {
        0
    }
}

/// `[一-龥ࠀ-一가-퟿]+`: U+0800 to U+9FA5 and U+AC00 to U+D7FF (Hangul).
/// The middle range runs from U+0800 up to the first ideograph, so a run
/// here is not only CJK: the Indic scripts, Thai, general punctuation,
/// arrows, the Basic Multilingual Plane's symbols and emoji join it too
/// (Hebrew and Arabic, below U+0800, do not).
fn deepseek_llm_cjk_run(chars: &[(usize, char, Class)], i: usize) -> usize {
    run_of(
        chars,
        i,
        |c| matches!(c, '\u{0800}'..='\u{9FA5}' | '\u{AC00}'..='\u{D7FF}'),
    )
}

/// `Digits(individual_digits=True)`: each digit (`\p{N}`) on its own.
fn digit(chars: &[(usize, char, Class)], i: usize) -> usize {
    usize::from(cls(chars, i) == Some(Class::Number))
}

#[cfg(test)]
mod tests {
    use super::*;

    // The expected pieces are the Hugging Face `tokenizers` library's, from
    // the pre-tokenizer tests/reference/tokenizer_ref.py builds for the name
    // (the model's tokenizer.json: its Split steps, then byte-level):
    //   p = tokenizer_ref.pre_tokenizer(name)
    //   [text[a:b] for _, (a, b) in p.pre_tokenize_str(text)]
    // The pieces test (tests/tokenizer_pre.rs) compares whole corpora so.
    fn assert_splits(name: &str, cases: &[(&str, &[&str])]) {
        let pre = PreTokenizer::from_name(name).unwrap();
        for &(text, want) in cases {
            let mut ours = Vec::new();
            pre.split(text, &mut |p| ours.push(p));
            assert_eq!(ours, want, "{name}: {text:?}");
        }
    }

    /// Digits in threes, Han and kana runs re-split by the last step (`゠`
    /// and `・` are punctuation there, a kana mark joins its word; U+9FA6
    /// is past the Han range), marks in words, ASCII punctuation taking
    /// the letters after it, and characters no alternative takes left
    /// between matches.
    #[test]
    fn deepseek_v3_splits_as_the_reference_does() {
        #[rustfmt::skip]
        let cases: &[(&str, &[&str])] = &[
            ("Hello, y'all! How are you 😁 ?我想在apple工作1314151天～", &["Hello", ",", " y", "'all", "!", " How", " are", " you", " 😁", " ?", "我想在", "apple", "工作", "131", "415", "1", "天", "～"]),
            ("日本語のテキストとカタカナ。.Net $HOME 1234567", &["日本語のテキストとカタカナ", "。.", "Net", " $", "HOME", " ", "123", "456", "7"]),
            ("゠アイ・ウー\u{3099} 한국어 龦龥", &["゠", "アイ", "・", "ウー\u{3099}", " 한국어", " 龦", "龥"]),
            ("e\u{301}te\u{301} \u{301}x \u{1FD3}\tword  \n\n  end  ", &["e\u{301}te\u{301}", " \u{301}x", " \u{1FD3}", "\tword", "  \n\n", " ", " end", "  "]),
            ("\u{0}\u{1}a 12\u{7} ٣٤٥٦", &["\u{0}", "\u{1}a", " ", "12", "\u{7}", " ", "٣٤٥", "٦"]),
        ];
        assert_splits("deepseek-v3", cases);
    }

    /// Each line break alone, letters only from the pattern's own list
    /// (`ʰ` and Thai are not in it; the punctuation step, which takes ASCII
    /// letters too, splits them off Greek ones), trailing spaces, fullwidth
    /// and CJK punctuation, the wide CJK range (Thai is in it, Hebrew is
    /// not), and single digits.
    #[test]
    fn deepseek_llm_splits_as_the_reference_does() {
        #[rustfmt::skip]
        let cases: &[(&str, &[&str])] = &[
            ("Hello, y'all! How are you 😁 ?我想在apple工作1314151天～", &["Hello", ",", " y", "'", "all", "!", " How", " are", " you", " 😁", " ?", "我想在", "apple", "工作", "1", "3", "1", "4", "1", "5", "1", "天", "～"]),
            ("日本語のテキスト  ", &["日本語のテキスト", "  "]),
            ("Ωmega \u{2126}hm \u{1F7D} ß ǅ ʰx ﬁ Русский ไทย עברית", &["Ω", "mega", " ", "\u{2126}", "hm", " ", "\u{1F7D}", " ß", " ǅ", " ʰ", "x", " ﬁ", " Русский", " ", "ไทย", " עברית"]),
            ("  a\r\n\n b \r\n 3.14 ١٢٣", &[" ", " a", "\r", "\n", "\n", " b", " ", "\r", "\n", " ", "3", ".", "1", "4", " ", "١", "٢", "٣"]),
            ("（全角）：“引用”、。\u{3000}x", &["（", "全角", "）：", "“", "引用", "”、。", "\u{3000}", "x"]),
        ];
        assert_splits("deepseek-llm", cases);
    }

    /// The names llama.cpp gives these steps, none with the whole-word
    /// shortcut.
    #[test]
    fn deepseek_names_map_to_their_steps_and_merge_every_word() {
        for name in ["deepseek-v3", "joyai-llm", "hunyuan-dense", "hy_v4"] {
            assert_eq!(
                PreTokenizer::from_name(name).unwrap(),
                PreTokenizer::DeepSeekV3
            );
        }
        let llm = PreTokenizer::from_name("deepseek-llm").unwrap();
        assert_eq!(llm, PreTokenizer::DeepSeekLlm);
        assert!(!PreTokenizer::DeepSeekV3.ignore_merges() && !llm.ignore_merges());
    }

    /// DeepSeek LLM's letter list parsed (a pattern that failed to parse
    /// would leave it empty), with the characters NFC would have changed.
    #[test]
    fn deepseek_llm_letters_are_the_patterns_list() {
        for c in [
            '\u{1F7D}', '\u{1FBE}', '\u{1FD3}', '\u{1FDB}', '\u{2126}', '\u{212A}', 'ß', 'Ж',
        ] {
            assert!(is_deepseek_llm_letter(c), "{c:?}");
        }
        for c in ['ʰ', '日', 'ก', 'א', '1', ' '] {
            assert!(!is_deepseek_llm_letter(c), "{c:?}");
        }
    }
}
