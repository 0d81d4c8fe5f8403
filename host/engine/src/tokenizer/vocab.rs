//! The token list with its types and scores, as `tokenizer.ggml.*` stores it.

use std::collections::HashMap;

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
#[derive(Debug, Clone)]
pub struct Vocab {
    pub(crate) texts: Vec<String>,
    pub(crate) types: Vec<TokenType>,
    pub(crate) scores: Vec<f32>,
    pub(crate) ids: HashMap<String, u32>,
}

impl Vocab {
    /// Reads tokens, and types and scores where present, checking lengths.
    pub(crate) fn from_gguf(gguf: &Gguf<'_>) -> Result<Vocab, TokenizerError> {
        let tokens = gguf.get_str_array("tokenizer.ggml.tokens")?;
        let n = tokens.len();
        if n == 0 || n > u64::from(u32::MAX) {
            return Err(TokenizerError::BadVocabSize(n));
        }
        let mut texts = Vec::with_capacity(n as usize);
        let mut ids = HashMap::with_capacity(n as usize);
        for (i, raw) in tokens.iter().enumerate() {
            let id = i as u32;
            let text = std::str::from_utf8(raw).map_err(|_| TokenizerError::TokenNotUtf8(id))?;
            // llama.cpp keeps the first of two equal texts for lookups; some
            // real vocabularies repeat unused pieces, so do the same.
            ids.entry(text.to_owned()).or_insert(id);
            texts.push(text.to_owned());
        }
        if texts.len() as u64 != n {
            return Err(TokenizerError::BadVocabSize(texts.len() as u64));
        }
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
        Ok(Vocab {
            texts,
            types,
            scores,
            ids,
        })
    }

    /// Number of tokens.
    pub(crate) fn len(&self) -> u32 {
        self.texts.len() as u32
    }

    /// The id of a piece's exact text.
    pub(crate) fn id(&self, text: &str) -> Option<u32> {
        self.ids.get(text).copied()
    }

    /// The type of `id` (`Normal` past the end, which callers never ask).
    pub(crate) fn ty(&self, id: u32) -> TokenType {
        self.types
            .get(id as usize)
            .copied()
            .unwrap_or(TokenType::Normal)
    }
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
