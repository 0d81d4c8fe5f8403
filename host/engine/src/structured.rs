//! Structured outputs: a JSON schema, any JSON object, a regular
//! expression, a choice among strings or a Lark grammar, compiled by
//! `llguidance` (the library behind llama.cpp's and vLLM's structured
//! outputs) over the model's vocabulary into a [`Constraint`] the engine
//! applies as a token mask before each sample.
//!
//! [`Structured`] holds the vocabulary's token trie and the parser factory,
//! built once per model (a few hundred milliseconds for a 262k vocabulary:
//! build it on the first structured request, not at start). Compiling a
//! grammar checks it: an invalid schema or pattern is a
//! [`StructuredError`] the server answers with a 400.
//!
//! ```
//! use pagoda_engine::structured::{OutputSpec, Structured};
//! // One token per byte (the embedded model's vocabulary), 300 logits.
//! let s = Structured::for_bytes(300).unwrap();
//! let c = s.compile(&OutputSpec::Choice(vec!["yes".into(), "no".into()])).unwrap();
//! let mut state = c.0.start();
//! let mut logits = vec![0.0f32; 300];
//! state.mask(&mut logits).unwrap();
//! assert!(logits[b'y' as usize] == 0.0 && logits[b'x' as usize] == f32::NEG_INFINITY);
//! ```

use std::sync::{Arc, Mutex, PoisonError};

use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{TokEnv, TokRxInfo, TokTrie, TokenId, TokenizerEnv};
use llguidance::{Matcher, ParserFactory};
use serde_json::{json, Value};

use crate::model::{Constraint, ConstraintSpec, ConstraintState};
use crate::tokenizer::{TokenType, Tokenizer};

/// What an output must be.
#[derive(Debug, Clone, PartialEq)]
pub enum OutputSpec {
    /// Any JSON object (`response_format: {"type": "json_object"}`).
    JsonObject,
    /// JSON valid against this schema.
    JsonSchema(Value),
    /// Text matching this regular expression (whole).
    Regex(String),
    /// Exactly one of these strings.
    Choice(Vec<String>),
    /// Text of this Lark grammar (llguidance's dialect).
    Lark(String),
}

/// Why a constraint could not be built.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StructuredError {
    /// The vocabulary could not be turned into a token trie.
    #[error("structured outputs over this vocabulary: {0}")]
    Vocabulary(String),
    /// The schema, pattern or grammar is invalid.
    #[error("{0}")]
    Invalid(String),
}

/// The model's vocabulary, as llguidance reads it.
struct Vocabulary {
    trie: TokTrie,
}

impl TokenizerEnv for Vocabulary {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    /// Greedy by the trie: only to split text llguidance forces, and
    /// [`tokenize_is_canonical`](Self::tokenize_is_canonical) says it is
    /// not the model's own tokenization, so masks allow every token that
    /// fits the grammar.
    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        self.trie.greedy_tokenize(s)
    }

    fn tokenize_is_canonical(&self) -> bool {
        false
    }
}

/// A vocabulary's parser factory: compiles constraints for it.
pub struct Structured {
    factory: Arc<ParserFactory>,
    logits: usize,
}

impl std::fmt::Debug for Structured {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Structured({} logits)", self.logits)
    }
}

impl Structured {
    /// The factory for `tokenizer` under a model of `logits` outputs (ids
    /// past the tokenizer's vocabulary are never allowed). Control tokens
    /// are special (never text); the end-of-generation tokens end a
    /// complete output.
    pub fn new(tokenizer: &Tokenizer, logits: u32) -> Result<Self, StructuredError> {
        let words: Vec<Vec<u8>> = (0..logits)
            .map(|id| match tokenizer.token_type(id) {
                None => Vec::new(),
                Some(TokenType::Control) => {
                    let mut w = vec![TokTrie::SPECIAL_TOKEN_MARKER];
                    w.extend_from_slice(tokenizer.token_text(id).unwrap_or("").as_bytes());
                    w
                }
                Some(_) => tokenizer.token_bytes(id),
            })
            .collect();
        let eog = tokenizer.end_of_generation();
        let eos = tokenizer.eos().or_else(|| eog.first().copied());
        Self::build(words, eos, eog, logits)
    }

    /// The factory for a vocabulary of one token per byte (`id % 256`, the
    /// embedded model's), `logits` outputs and no end-of-generation token:
    /// a complete output ends when nothing more may follow.
    pub fn for_bytes(logits: u32) -> Result<Self, StructuredError> {
        let words = (0..logits).map(|id| vec![(id % 256) as u8]).collect();
        Self::build(words, None, &[], logits)
    }

    fn build(
        mut words: Vec<Vec<u8>>,
        eos: Option<u32>,
        eog: &[u32],
        logits: u32,
    ) -> Result<Self, StructuredError> {
        // llguidance needs an end token: without one, a special token past
        // the logits stands in (never sampled).
        let eos = match eos.filter(|&e| e < logits) {
            Some(e) => e,
            None => {
                words.push(b"\xFF<|pagoda-end|>".to_vec());
                logits
            }
        };
        let info = TokRxInfo::new(words.len() as u32, eos);
        let mut trie = TokTrie::from(&info, &words);
        let ends: Vec<u32> = eog.iter().copied().filter(|&e| e < logits).collect();
        if !ends.is_empty() {
            trie = trie.with_eos_tokens(&ends);
        }
        let env: TokEnv = Arc::new(Vocabulary { trie });
        let mut factory = ParserFactory::new_simple(&env)
            .map_err(|e| StructuredError::Vocabulary(e.to_string()))?;
        factory.quiet();
        Ok(Self {
            factory: Arc::new(factory),
            logits: logits as usize,
        })
    }

    /// Compiles `spec` into a constraint, checking it.
    pub fn compile(&self, spec: &OutputSpec) -> Result<Constraint, StructuredError> {
        // Compact JSON: with llguidance's default (any whitespace between
        // tokens) a sampled model may emit whitespace without end.
        let compact = |mut schema: Value| {
            if let Some(object) = schema.as_object_mut() {
                object
                    .entry("x-guidance")
                    .or_insert_with(|| json!({"whitespace_flexible": false}));
            }
            schema
        };
        let grammar = match spec {
            OutputSpec::JsonObject => {
                TopLevelGrammar::from_json_schema(compact(json!({"type": "object"})))
            }
            OutputSpec::JsonSchema(schema) => {
                if !schema.is_object() && !schema.is_boolean() {
                    return Err(StructuredError::Invalid(
                        "a JSON schema must be an object".into(),
                    ));
                }
                TopLevelGrammar::from_json_schema(compact(schema.clone()))
            }
            OutputSpec::Regex(pattern) => TopLevelGrammar::from_regex(pattern),
            OutputSpec::Choice(choices) => {
                if choices.is_empty() {
                    return Err(StructuredError::Invalid("a choice needs options".into()));
                }
                // Each option as a Lark string literal (JSON escapes are
                // Lark's).
                let options: Vec<String> = choices
                    .iter()
                    .map(|c| serde_json::to_string(c).unwrap_or_default())
                    .collect();
                TopLevelGrammar::from_lark(format!("start: {}", options.join(" | ")))
            }
            OutputSpec::Lark(grammar) => TopLevelGrammar::from_lark(grammar.clone()),
        };
        let parser = self
            .factory
            .create_parser(grammar)
            .map_err(|e| StructuredError::Invalid(e.to_string()))?;
        let matcher = Matcher::new(Ok(parser));
        if let Some(e) = matcher.get_error() {
            return Err(StructuredError::Invalid(e));
        }
        Ok(Constraint(Arc::new(Compiled {
            matcher: Mutex::new(matcher),
            logits: self.logits,
            what: format!("{spec:?}").chars().take(120).collect(),
        })))
    }
}

/// A compiled constraint: a matcher at the start, cloned for each run.
struct Compiled {
    matcher: Mutex<Matcher>,
    logits: usize,
    what: String,
}

impl std::fmt::Debug for Compiled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Constraint({})", self.what)
    }
}

impl ConstraintSpec for Compiled {
    fn start(&self) -> Box<dyn ConstraintState> {
        let matcher = self
            .matcher
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .deep_clone();
        Box::new(Run {
            matcher,
            logits: self.logits,
            allowed: Vec::new(),
        })
    }
}

/// One run's matcher and its last mask (bit `i` of word `i / 32`: token
/// `i` allowed).
struct Run {
    matcher: Matcher,
    logits: usize,
    allowed: Vec<u32>,
}

impl ConstraintState for Run {
    fn prepare(&mut self) -> Result<(), String> {
        // A stopped matcher allows only its end token (asking it for a
        // mask otherwise puts it in an error state).
        let mask = self
            .matcher
            .compute_mask_or_eos()
            .map_err(|e| e.to_string())?;
        self.allowed.clear();
        self.allowed.extend_from_slice(mask.as_slice());
        Ok(())
    }

    fn apply(&self, logits: &mut [f32]) {
        let n = logits.len().min(self.logits);
        for (w, chunk) in self.allowed.iter().zip(logits[..n].chunks_mut(32)) {
            if *w == u32::MAX {
                continue;
            }
            // Most words of a grammar's mask allow nothing: one fill.
            if *w == 0 {
                chunk.fill(f32::NEG_INFINITY);
                continue;
            }
            for (bit, l) in chunk.iter_mut().enumerate() {
                if w & (1 << bit) == 0 {
                    *l = f32::NEG_INFINITY;
                }
            }
        }
        // Logits past the vocabulary the factory knows, or past the mask:
        // never allowed.
        let covered = (self.allowed.len() * 32).min(n);
        logits[covered..].fill(f32::NEG_INFINITY);
    }

    fn accept(&mut self, token: u32) -> Result<(), String> {
        if self.matcher.is_stopped() {
            return Ok(());
        }
        self.matcher.consume_token(token).map_err(|e| e.to_string())
    }

    fn is_finished(&self) -> bool {
        self.matcher.is_stopped()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A vocabulary of every byte and two control tokens (ids 256, 257),
    /// and an end token (258).
    fn with_markers() -> Structured {
        let mut words: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
        for name in [
            "<|START_ACTION|>",
            "<|END_ACTION|>",
            "<|END_OF_TURN_TOKEN|>",
        ] {
            let mut w = vec![TokTrie::SPECIAL_TOKEN_MARKER];
            w.extend_from_slice(name.as_bytes());
            words.push(w);
        }
        Structured::build(words, Some(258), &[258], 259).unwrap()
    }

    /// A grammar that names control tokens allows those tokens only where
    /// it names them, never their text spelled out in bytes.
    #[test]
    fn control_tokens_named_in_a_grammar_are_tokens_not_text() {
        let compiler = with_markers();
        // By name, and by id as the server names them.
        for (open, close) in [
            ("<|START_ACTION|>", "<|END_ACTION|>"),
            ("<[256]>", "<[257]>"),
        ] {
            let grammar = format!(
                "start: {open} %json {{\"type\": \"array\", \"items\": {{\"type\": \
                 \"integer\", \"minimum\": 0, \"maximum\": 9}}, \"minItems\": 1, \
                 \"maxItems\": 1}} {close}\n"
            );
            let constraint = compiler.compile(&OutputSpec::Lark(grammar)).unwrap();
            walk(constraint);
        }
        // A name the vocabulary lacks is refused when compiled.
        let unknown = "start: <|NOT_A_TOKEN|>\n";
        assert!(compiler.compile(&OutputSpec::Lark(unknown.into())).is_err());
    }

    /// Runs the action grammar's constraint through `[7]`: only the
    /// markers' tokens where they stand.
    fn walk(constraint: Constraint) {
        let mut state = constraint.0.start();
        let allowed = |state: &mut Box<dyn ConstraintState>| -> Vec<u32> {
            let mut logits = vec![0.0f32; 259];
            state.mask(&mut logits).unwrap();
            (0..259).filter(|&t| logits[t as usize] == 0.0).collect()
        };
        assert_eq!(allowed(&mut state), [256]);
        state.accept(256).unwrap();
        for b in *b"[7]" {
            assert!(allowed(&mut state).contains(&u32::from(b)));
            state.accept(u32::from(b)).unwrap();
        }
        assert_eq!(allowed(&mut state), [257]);
        state.accept(257).unwrap();
        assert!(state.is_finished());
    }
}
