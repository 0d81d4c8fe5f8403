//! What the grammars of forced tool calls share: the model's side of them
//! ([`GrammarModel`]: its control tokens, which a Lark grammar names as
//! `<[id]>`, and its template), and (for the formats' tests) a walk of a
//! grammar over a vocabulary of one token per byte.

use serde_json::Value;

/// What a forced call's grammar needs to know of the model beyond its
/// format: which markers are control tokens, and its template's source
/// (which of Mistral's syntaxes it writes).
pub struct GrammarModel<'a> {
    /// The id of `text` where it is one control token of the vocabulary.
    pub control: &'a dyn Fn(&str) -> Option<u32>,
    /// The chat template's source.
    pub template: &'a str,
}

impl GrammarModel<'_> {
    /// `text` in a Lark grammar: its control token by id (`<[id]>`), or
    /// the text itself as a string literal where it is no such token.
    pub fn marker(&self, text: &str) -> String {
        match (self.control)(text) {
            Some(id) => format!("<[{id}]>"),
            None => serde_json::to_string(text).unwrap_or_default(),
        }
    }
}

/// A format's grammar of a required or named call of the callable
/// functions (name and parameters schema each), one call or (parallel)
/// more.
pub(super) type ForcedGrammar = fn(&[(&str, Value)], bool, &GrammarModel<'_>) -> String;

/// Grammars walked over a byte vocabulary, for the formats' tests.
#[cfg(test)]
pub(crate) mod walk {
    use pagoda_engine::structured::{OutputSpec, Structured};
    use serde_json::{json, Value};

    /// The text of a path through `spec` over one token per byte, `pick`
    /// choosing among the allowed bytes at each step, for at most `cap`
    /// bytes; and whether the grammar ended there.
    pub(crate) fn path(
        spec: &OutputSpec,
        cap: usize,
        pick: impl Fn(&[u32]) -> u32,
    ) -> (String, bool) {
        let compiler = Structured::for_bytes(256).unwrap();
        let constraint = compiler.compile(spec).unwrap_or_else(|e| panic!("{e}"));
        let mut state = constraint.0.start();
        let mut text = Vec::new();
        while !state.is_finished() && text.len() < cap {
            let mut logits = vec![0.0f32; 256];
            state.mask(&mut logits).unwrap();
            let allowed: Vec<u32> = (0..256u32).filter(|&t| logits[t as usize] == 0.0).collect();
            let t = pick(&allowed);
            state.accept(t).unwrap();
            text.push(t as u8);
        }
        (String::from_utf8(text).unwrap(), state.is_finished())
    }

    /// The highest allowed byte: letters over punctuation, quotes over
    /// JSON's white space, so a path runs through names and keys.
    pub(crate) fn highest(allowed: &[u32]) -> u32 {
        allowed[allowed.len() - 1]
    }

    /// A function's parameters: one integer `n` from 0 to 9.
    pub(crate) fn one_digit() -> Value {
        json!({"type": "object", "properties": {"n": {"type": "integer", "minimum": 0,
            "maximum": 9}}, "required": ["n"], "additionalProperties": false})
    }
}
