//! Log probabilities in OpenAI's two shapes: the completions API's
//! (`tokens`, `token_logprobs`, `top_logprobs` as maps from token text,
//! `text_offset`) and the chat API's (`content`: per token its text,
//! `logprob`, UTF-8 `bytes` and `top_logprobs`). A token's text is its
//! bytes decoded lossily (a byte-fallback token alone is not UTF-8;
//! `bytes` keeps it exact; in the completions API's maps, tokens of the
//! same text share one key, kept by the most likely). An impossible token's log probability is
//! written as -9999, as vLLM writes it (JSON has no infinity).

use pagoda_engine::model::TokenLogprobs;
use serde_json::{json, Map, Value};

use crate::state::Vocab;

/// What a log probability is written as.
fn finite(logprob: f32) -> f32 {
    if logprob.is_finite() {
        logprob
    } else {
        -9999.0
    }
}

fn text(vocab: &Vocab, id: u32) -> (String, Vec<u8>) {
    let bytes = vocab.token_bytes(id);
    (String::from_utf8_lossy(&bytes).into_owned(), bytes)
}

/// The completions API's `logprobs` for `entries`, whose text starts
/// `offset` characters into the choice's text (advanced past them).
pub fn completion(vocab: &Vocab, entries: &[(u32, TokenLogprobs)], offset: &mut usize) -> Value {
    let rows: Vec<(u32, Option<&TokenLogprobs>)> =
        entries.iter().map(|(id, lp)| (*id, Some(lp))).collect();
    completion_rows(vocab, &rows, offset)
}

/// The echoed prompt's rows for [`completion_rows`]: its first token has
/// no score (null, as OpenAI writes it), token `i + 1` has `scores[i]`.
pub fn prompt_rows<'a>(
    prompt: &[u32],
    scores: &'a [TokenLogprobs],
) -> Vec<(u32, Option<&'a TokenLogprobs>)> {
    prompt
        .iter()
        .enumerate()
        .map(|(i, &id)| (id, i.checked_sub(1).and_then(|j| scores.get(j))))
        .collect()
}

/// The completions API's `logprobs` for tokens with a score or none.
pub fn completion_rows(
    vocab: &Vocab,
    rows: &[(u32, Option<&TokenLogprobs>)],
    offset: &mut usize,
) -> Value {
    let mut tokens = Vec::with_capacity(rows.len());
    let mut token_logprobs = Vec::with_capacity(rows.len());
    let mut top_logprobs = Vec::with_capacity(rows.len());
    let mut text_offset = Vec::with_capacity(rows.len());
    for &(id, lp) in rows {
        let (t, _) = text(vocab, id);
        text_offset.push(*offset);
        *offset += t.chars().count();
        tokens.push(t);
        let Some(lp) = lp else {
            token_logprobs.push(Value::Null);
            top_logprobs.push(Value::Null);
            continue;
        };
        token_logprobs.push(json!(finite(lp.logprob)));
        // Tokens of the same text share a key: the most likely keeps it.
        let mut top = Map::new();
        for &(alt, p) in &lp.top {
            top.entry(text(vocab, alt).0).or_insert(json!(finite(p)));
        }
        top_logprobs.push(Value::Object(top));
    }
    json!({
        "tokens": tokens,
        "token_logprobs": token_logprobs,
        "top_logprobs": top_logprobs,
        "text_offset": text_offset,
    })
}

/// The prompt's text as echoed: its tokens' texts one after another (so
/// that `text_offset` indexes it).
pub fn prompt_text(vocab: &Vocab, prompt: &[u32]) -> String {
    prompt.iter().map(|&id| text(vocab, id).0).collect()
}

/// The chat API's `logprobs` for `entries`.
pub fn chat(vocab: &Vocab, entries: &[(u32, TokenLogprobs)]) -> Value {
    json!({"content": entries_of(vocab, entries), "refusal": null})
}

/// Per token its text, `logprob`, UTF-8 `bytes` and `top_logprobs`: the
/// chat API's `logprobs.content`, and the Responses API's `output_text`
/// `logprobs`.
pub fn entries_of(vocab: &Vocab, entries: &[(u32, TokenLogprobs)]) -> Vec<Value> {
    entries
        .iter()
        .map(|(id, lp)| {
            let (token, bytes) = text(vocab, *id);
            let top: Vec<Value> = lp
                .top
                .iter()
                .map(|&(alt, p)| {
                    let (token, bytes) = text(vocab, alt);
                    json!({"token": token, "logprob": finite(p), "bytes": bytes})
                })
                .collect();
            json!({"token": token, "logprob": finite(lp.logprob), "bytes": bytes, "top_logprobs": top})
        })
        .collect()
}
