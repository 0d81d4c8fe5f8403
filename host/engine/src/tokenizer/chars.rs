//! Unicode classes the pre-tokenizer patterns name: `\p{L}`, `\p{N}`, `\s`.
//!
//! `\p{L}` is the general category Letter, which `char::is_alphabetic`
//! (the Alphabetic property, which adds combining vowel signs) is not; the
//! exact ranges come from `regex-syntax`'s Unicode tables, parsed once.
//! `\p{N}` is `char::is_numeric` (Nd, Nl, No) and `\s` is
//! `char::is_whitespace` (White_Space), as in the reference's regex engine.
//! The GPT-4o pattern also splits letters by case: [`is_upperish`] and
//! [`is_lowerish`] are its two classes, from the same tables.

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
