//! The token list with its types and scores, as `tokenizer.ggml.*` stores it.

use std::hash::BuildHasher;

use hashbrown::{DefaultHashBuilder, HashTable};
use pagoda_core::gguf::Gguf;

use super::error::TokenizerError;

/// A token's kind, llama.cpp's `llama_token_type` numbering.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum TokenType {
    /// 0: the converter did not say; treated as normal.
    Undefined,
    /// 1: ordinary text.
    Normal,
    /// 2: the unknown token.
    Unknown,
    /// 3: control (BOS, `<|im_end|>`): never produced from plain text.
    Control,
    /// 4: user-defined: always matched literally in text.
    UserDefined,
    /// 5: unused slot.
    Unused,
    /// 6: a byte-fallback piece `<0xXX>`.
    Byte,
}

impl TokenType {
    fn from_i32(id: u32, ty: i32) -> Result<TokenType, TokenizerError> {
        Ok(match ty {
            0 => TokenType::Undefined,
            1 => TokenType::Normal,
            2 => TokenType::Unknown,
            3 => TokenType::Control,
            4 => TokenType::UserDefined,
            5 => TokenType::Unused,
            6 => TokenType::Byte,
            _ => return Err(TokenizerError::BadTokenType { id, ty }),
        })
    }
}

/// The vocabulary: id → text/type/score and text → id.
///
/// The texts lie back to back in one string and the lookup table holds only
/// ids, hashed by their text: a `Vec<String>` and a `HashMap<String, u32>`
/// took 17 MB for Llama 3's 128,256 tokens (Gemma 3's 262,144 took 26),
/// this takes about 3, which a run's resident memory budget (file, KV pool
/// and 64 MiB) feels.
#[derive(Debug, Clone)]
pub struct Vocab {
    /// Every token's text, in id order.
    text: String,
    /// Where each token's text starts in `text`, and its end last.
    starts: Vec<u32>,
    pub(crate) types: Vec<TokenType>,
    pub(crate) scores: Vec<f32>,
    /// Ids by the hash of their text (the first of equal texts).
    ids: HashTable<u32>,
    hasher: DefaultHashBuilder,
}

impl Vocab {
    /// Reads tokens, and types and scores where present, checking lengths.
    pub(crate) fn from_gguf(gguf: &Gguf<'_>) -> Result<Vocab, TokenizerError> {
        let tokens = gguf.get_str_array("tokenizer.ggml.tokens")?;
        let n = tokens.len();
        if n == 0 || n > u64::from(u32::MAX) {
            return Err(TokenizerError::BadVocabSize(n));
        }
        let mut text = String::new();
        let mut starts = Vec::with_capacity(n as usize + 1);
        for (i, raw) in tokens.iter().enumerate() {
            let piece =
                std::str::from_utf8(raw).map_err(|_| TokenizerError::TokenNotUtf8(i as u32))?;
            starts.push(u32::try_from(text.len()).map_err(|_| TokenizerError::BadVocabSize(n))?);
            text.push_str(piece);
        }
        starts.push(u32::try_from(text.len()).map_err(|_| TokenizerError::BadVocabSize(n))?);
        if starts.len() as u64 != n + 1 {
            return Err(TokenizerError::BadVocabSize(starts.len() as u64 - 1));
        }
        text.shrink_to_fit();
        let types = if gguf.get("tokenizer.ggml.token_type").is_some() {
            let arr = gguf.get_i32_array("tokenizer.ggml.token_type")?;
            check_len("tokenizer.ggml.token_type", arr.len() as u64, n)?;
            arr.iter()
                .enumerate()
                .map(|(i, t)| TokenType::from_i32(i as u32, t))
                .collect::<Result<Vec<_>, _>>()?
        } else {
            vec![TokenType::Normal; n as usize]
        };
        let scores = if gguf.get("tokenizer.ggml.scores").is_some() {
            let arr = gguf.get_f32_array("tokenizer.ggml.scores")?;
            check_len("tokenizer.ggml.scores", arr.len() as u64, n)?;
            arr.iter().collect()
        } else {
            vec![0.0; n as usize]
        };
        let hasher = DefaultHashBuilder::default();
        let text_of = |id: u32| piece(&text, &starts, id).unwrap_or_default();
        let mut ids = HashTable::with_capacity(n as usize);
        for id in 0..n as u32 {
            let piece = text_of(id);
            // llama.cpp keeps the first of two equal texts for lookups; some
            // real vocabularies repeat unused pieces, so do the same.
            ids.entry(
                hasher.hash_one(piece),
                |&other| text_of(other) == piece,
                |&other| hasher.hash_one(text_of(other)),
            )
            .or_insert(id);
        }
        Ok(Vocab {
            text,
            starts,
            types,
            scores,
            ids,
            hasher,
        })
    }

    /// Number of tokens.
    pub(crate) fn len(&self) -> u32 {
        (self.starts.len() - 1) as u32
    }

    /// The text of token `id`.
    pub(crate) fn text(&self, id: u32) -> Option<&str> {
        piece(&self.text, &self.starts, id)
    }

    /// Every token's text, in id order.
    pub(crate) fn texts(&self) -> impl Iterator<Item = &str> {
        (0..self.len()).map(|id| self.text(id).unwrap_or_default())
    }

    /// The id of a piece's exact text.
    pub(crate) fn id(&self, text: &str) -> Option<u32> {
        let hash = self.hasher.hash_one(text);
        self.ids
            .find(hash, |&id| self.text(id) == Some(text))
            .copied()
    }

    /// The type of `id` (`Normal` past the end, which callers never ask).
    pub(crate) fn ty(&self, id: u32) -> TokenType {
        self.types
            .get(id as usize)
            .copied()
            .unwrap_or(TokenType::Normal)
    }
}

/// Token `id`'s text: `text[starts[id]..starts[id + 1]]`.
fn piece<'t>(text: &'t str, starts: &[u32], id: u32) -> Option<&'t str> {
    let (start, end) = (starts.get(id as usize)?, starts.get(id as usize + 1)?);
    text.get(*start as usize..*end as usize)
}

fn check_len(key: &'static str, found: u64, expected: u64) -> Result<(), TokenizerError> {
    if found == expected {
        Ok(())
    } else {
        Err(TokenizerError::LengthMismatch {
            key,
            found,
            expected,
        })
    }
}

/// A token-id key the file may or may not hold: `None` when absent, an error
/// when present but out of range or of another type.
pub(crate) fn optional_id(
    gguf: &Gguf<'_>,
    key: &'static str,
    vocab: u32,
) -> Result<Option<u32>, TokenizerError> {
    if gguf.get(key).is_none() {
        return Ok(None);
    }
    let id = gguf.get_u32(key)?;
    if id >= vocab {
        return Err(TokenizerError::IdOutOfRange { key, id, vocab });
    }
    Ok(Some(id))
}

/// A bool the file may hold, else `default`.
pub(crate) fn optional_bool(
    gguf: &Gguf<'_>,
    key: &'static str,
    default: bool,
) -> Result<bool, TokenizerError> {
    if gguf.get(key).is_none() {
        return Ok(default);
    }
    Ok(gguf.get_bool(key)?)
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::HashMap;

    use super::*;

    /// A GGUF v3 file whose one key is `tokenizer.ggml.tokens`.
    pub(crate) fn tokens_file(tokens: &[String]) -> Vec<u8> {
        let put = |out: &mut Vec<u8>, s: &str| {
            out.extend((s.len() as u64).to_le_bytes());
            out.extend(s.as_bytes());
        };
        let mut out = b"GGUF".to_vec();
        out.extend(3u32.to_le_bytes());
        out.extend(0u64.to_le_bytes());
        out.extend(1u64.to_le_bytes());
        put(&mut out, "tokenizer.ggml.tokens");
        out.extend(9u32.to_le_bytes()); // an array
        out.extend(8u32.to_le_bytes()); // of strings
        out.extend((tokens.len() as u64).to_le_bytes());
        for t in tokens {
            put(&mut out, t);
        }
        out
    }

    #[test]
    fn lookups_agree_with_a_map_that_keeps_the_first_of_equal_texts() {
        let mut rng = fastrand::Rng::with_seed(7);
        for _ in 0..100 {
            let n = rng.usize(1..300);
            let texts: Vec<String> = (0..n)
                .map(|_| {
                    (0..rng.usize(0..4))
                        .map(|_| ['a', 'b', 'é', '▁'][rng.usize(..4)])
                        .collect()
                })
                .collect();
            let file = tokens_file(&texts);
            let vocab = Vocab::from_gguf(&Gguf::parse(&file).unwrap()).unwrap();
            let mut model = HashMap::new();
            for (id, text) in (0u32..).zip(&texts) {
                model.entry(text.as_str()).or_insert(id);
            }
            assert_eq!(vocab.len() as usize, n);
            for (id, text) in (0u32..).zip(&texts) {
                assert_eq!(vocab.text(id), Some(text.as_str()));
                assert_eq!(vocab.id(text), Some(model[text.as_str()]), "{text:?}");
            }
            assert_eq!(vocab.texts().collect::<Vec<_>>(), texts);
            assert_eq!((vocab.id("c"), vocab.text(n as u32)), (None, None));
        }
    }
}
