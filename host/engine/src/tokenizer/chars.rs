//! Unicode classes the pre-tokenizer patterns name: `\p{L}`, `\p{N}`, `\s`.
//!
//! `\p{L}` is the general category Letter, which `char::is_alphabetic`
//! (the Alphabetic property, which adds combining vowel signs) is not; the
//! exact ranges come from `regex-syntax`'s Unicode tables, parsed once.
//! `\p{N}` is `char::is_numeric` (Nd, Nl, No) and `\s` is
//! `char::is_whitespace` (White_Space), as in the reference's regex engine.
//! The GPT-4o pattern also splits letters by case: [`is_upperish`] and
//! [`is_lowerish`] are its two classes, from the same tables. DeepSeek's
//! patterns name marks and punctuation or symbols ([`is_mark`],
//! [`is_punctuation_or_symbol`]), and DeepSeek LLM's spells out its own
//! list of letters ([`is_deepseek_llm_letter`]).

use std::sync::OnceLock;

/// The class a pattern sees a character in; the four are disjoint.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Class {
    /// `\p{L}`.
    Letter,
    /// `\p{N}`.
    Number,
    /// `\s`.
    Space,
    /// Anything else (`[^\s\p{L}\p{N}]`).
    Other,
}

/// Sorted, disjoint `(start, end)` ranges of the character class
/// `pattern` (a fixed, valid pattern: parsing it cannot fail at run time).
fn class_ranges(pattern: &str) -> Vec<(char, char)> {
    use regex_syntax::hir::{Class as HirClass, HirKind};
    match regex_syntax::parse(pattern).map(|h| h.kind().clone()) {
        Ok(HirKind::Class(HirClass::Unicode(c))) => {
            c.ranges().iter().map(|r| (r.start(), r.end())).collect()
        }
        _ => Vec::new(),
    }
}

/// Whether `c` lies in one of `ranges`.
fn within(ranges: &[(char, char)], c: char) -> bool {
    let i = ranges.partition_point(|&(_, end)| end < c);
    ranges.get(i).is_some_and(|&(start, _)| start <= c)
}

fn is_letter(c: char) -> bool {
    static LETTERS: OnceLock<Vec<(char, char)>> = OnceLock::new();
    if c.is_ascii() {
        return c.is_ascii_alphabetic();
    }
    within(LETTERS.get_or_init(|| class_ranges(r"\p{L}")), c)
}

/// `[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]`: the GPT-4o pattern's capitals (with
/// the caseless letters and the marks).
pub(crate) fn is_upperish(c: char) -> bool {
    static RANGES: OnceLock<Vec<(char, char)>> = OnceLock::new();
    if c.is_ascii() {
        return c.is_ascii_uppercase();
    }
    within(
        RANGES.get_or_init(|| class_ranges(r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]")),
        c,
    )
}

/// `[\p{Ll}\p{Lm}\p{Lo}\p{M}]`: the GPT-4o pattern's small letters (with
/// the caseless letters and the marks).
pub(crate) fn is_lowerish(c: char) -> bool {
    static RANGES: OnceLock<Vec<(char, char)>> = OnceLock::new();
    if c.is_ascii() {
        return c.is_ascii_lowercase();
    }
    within(
        RANGES.get_or_init(|| class_ranges(r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]")),
        c,
    )
}

/// `\p{Han}`: the Han script, which Kimi K2's pattern splits off as runs
/// of their own.
pub(crate) fn is_han(c: char) -> bool {
    static RANGES: OnceLock<Vec<(char, char)>> = OnceLock::new();
    !c.is_ascii() && within(RANGES.get_or_init(|| class_ranges(r"\p{Han}")), c)
}

/// [`is_upperish`] but not [`is_han`] (Kimi K2's capitals).
pub(crate) fn is_upperish_not_han(c: char) -> bool {
    is_upperish(c) && !is_han(c)
}

/// [`is_lowerish`] but not [`is_han`] (Kimi K2's small letters).
pub(crate) fn is_lowerish_not_han(c: char) -> bool {
    is_lowerish(c) && !is_han(c)
}

/// `\p{M}`: the marks DeepSeek-V3's words may carry (`[\p{L}\p{M}]+`).
pub(crate) fn is_mark(c: char) -> bool {
    static RANGES: OnceLock<Vec<(char, char)>> = OnceLock::new();
    !c.is_ascii() && within(RANGES.get_or_init(|| class_ranges(r"\p{M}")), c)
}

/// `[\p{P}\p{S}]`: what DeepSeek-V3 splits off as punctuation (an emoji
/// is a symbol; a control character or an unassigned one is neither).
pub(crate) fn is_punctuation_or_symbol(c: char) -> bool {
    static RANGES: OnceLock<Vec<(char, char)>> = OnceLock::new();
    if c.is_ascii() {
        return c.is_ascii_punctuation();
    }
    within(RANGES.get_or_init(|| class_ranges(r"[\p{P}\p{S}]")), c)
}

/// DeepSeek LLM's letters: the ranges its pattern lists (the cased letters
/// of the Unicode version it was written against, so no CJK, Arabic or
/// Indic letters), parsed from the pattern's own text. The six characters
/// that Unicode normalization would change (NFC maps the Ohm and Kelvin
/// signs and four Greek letters to lookalikes, which would turn three
/// ranges backwards) are written as escapes so no editor can alter them.
pub(crate) fn is_deepseek_llm_letter(c: char) -> bool {
    static RANGES: OnceLock<Vec<(char, char)>> = OnceLock::new();
    if c.is_ascii() {
        return c.is_ascii_alphabetic();
    }
    within(
        RANGES.get_or_init(|| {
            class_ranges(
                "[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-\u{1F7D}ᾀ-ᾴᾶ-ᾼ\u{1FBE}ῂ-ῄῆ-ῌῐ-\u{1FD3}ῖ-\u{1FDB}ῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤ\u{2126}ℨ\u{212A}-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]",
            )
        }),
        c,
    )
}

/// The class of `c`.
pub(crate) fn class(c: char) -> Class {
    if is_letter(c) {
        Class::Letter
    } else if c.is_numeric() {
        Class::Number
    } else if c.is_whitespace() {
        Class::Space
    } else {
        Class::Other
    }
}
