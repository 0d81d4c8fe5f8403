//! Splitting text on special tokens' literal texts before tokenizing the
//! rest, as llama.cpp does: user-defined tokens always, control (and the
//! unknown) token only when the caller asks to parse specials.

use std::collections::HashMap;

use super::vocab::{TokenType, Vocab};

/// A piece of input: plain text, or a special token matched in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fragment<'t> {
    /// Text to tokenize normally.
    Text(&'t str),
    /// A special token's id.
    Token(u32),
}

/// The special tokens of a vocabulary, grouped by first byte, longest first.
#[derive(Debug, Clone, Default)]
pub(crate) struct Specials {
    by_first: HashMap<u8, Vec<(String, u32, bool)>>,
}

impl Specials {
    pub(crate) fn new(vocab: &Vocab) -> Specials {
        let mut by_first: HashMap<u8, Vec<(String, u32, bool)>> = HashMap::new();
        for (id, (text, &ty)) in vocab.texts().zip(&vocab.types).enumerate() {
            let always = match ty {
                TokenType::UserDefined => true,
                TokenType::Control | TokenType::Unknown => false,
                _ => continue,
            };
            if let Some(&b) = text.as_bytes().first() {
                by_first
                    .entry(b)
                    .or_default()
                    .push((text.to_owned(), id as u32, always));
            }
        }
        for list in by_first.values_mut() {
            list.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.1.cmp(&b.1)));
        }
        Specials { by_first }
    }

    /// The longest special token starting at byte `at`.
    fn match_at(&self, text: &str, at: usize, parse_special: bool) -> Option<(usize, u32)> {
        let list = self.by_first.get(&text.as_bytes()[at])?;
        list.iter()
            .find(|(t, _, always)| (*always || parse_special) && text[at..].starts_with(t.as_str()))
            .map(|(t, id, _)| (t.len(), *id))
    }

    /// Calls `f` with each fragment of `text` in order (leftmost, longest
    /// match first; no empty text fragments).
    pub(crate) fn split<'t>(
        &self,
        text: &'t str,
        parse_special: bool,
        f: &mut dyn FnMut(Fragment<'t>),
    ) {
        let mut plain = 0;
        let mut at = 0;
        while at < text.len() {
            if !text.is_char_boundary(at) {
                at += 1;
                continue;
            }
            if let Some((len, id)) = self.match_at(text, at, parse_special) {
                if plain < at {
                    f(Fragment::Text(&text[plain..at]));
                }
                f(Fragment::Token(id));
                at += len;
                plain = at;
            } else {
                at += 1;
            }
        }
        if plain < text.len() {
            f(Fragment::Text(&text[plain..]));
        }
    }
}
