//! Unicode classes the pre-tokenizer patterns name: `\p{L}`, `\p{N}`, `\s`.
//!
//! `\p{L}` is the general category Letter, which `char::is_alphabetic`
//! (the Alphabetic property, which adds combining vowel signs) is not; the
//! exact ranges come from `regex-syntax`'s Unicode tables, parsed once.
//! `\p{N}` is `char::is_numeric` (Nd, Nl, No) and `\s` is
//! `char::is_whitespace` (White_Space), as in the reference's regex engine.

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

/// Sorted, disjoint `(start, end)` ranges of `\p{L}`.
fn letters() -> &'static [(char, char)] {
    static RANGES: OnceLock<Vec<(char, char)>> = OnceLock::new();
    RANGES.get_or_init(|| {
        use regex_syntax::hir::{Class as HirClass, HirKind};
        // A fixed, valid pattern: parsing it cannot fail at run time.
        match regex_syntax::parse(r"\p{L}").map(|h| h.kind().clone()) {
            Ok(HirKind::Class(HirClass::Unicode(c))) => {
                c.ranges().iter().map(|r| (r.start(), r.end())).collect()
            }
            _ => Vec::new(),
        }
    })
}

fn is_letter(c: char) -> bool {
    if c.is_ascii() {
        return c.is_ascii_alphabetic();
    }
    let ranges = letters();
    let i = ranges.partition_point(|&(_, end)| end < c);
    ranges.get(i).is_some_and(|&(start, _)| start <= c)
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
