//! Server-sent events in OpenAI's chunk shape: `data: {chunk}\n\n` per
//! delta, an optional usage chunk, then `data: [DONE]`. Dropping the body
//! (the client went away) drops the [`Generation`], which cancels it.

use std::convert::Infallible;

use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use pagoda_engine::model::TokenLogprobs;
use serde_json::{json, Value};

use crate::generate::{Delta, Generation};
use crate::handlers::{usage, Reply};
use crate::harmony::{Piece, Splitter};
use crate::reasoning::{ThinkSplitter, ThinkTags};
use crate::state::Vocab;
use crate::tools::{CallReader, ToolFormat};

enum Phase {
    Start,
    Running,
    Usage,
    Done,
    End,
}

fn event(value: &Value) -> Bytes {
    Bytes::from(format!("data: {value}\n\n"))
}

/// Where each choice's streamed text has reached (for `text_offset`), and
/// whether the request asked for log probabilities; with tools, each
/// choice's text so far (a tool call is parsed once it is whole, and sent
/// as one delta at the end).
struct Logprobs {
    wanted: bool,
    offsets: Vec<usize>,
    tools: Option<CallReader>,
    texts: Vec<String>,
    /// With tools, each choice's log probabilities until it ends.
    held: Vec<Vec<(u32, TokenLogprobs)>>,
    /// `echo`: the prompt is each choice's first text.
    echo: bool,
    /// A harmony answer's channels, each choice's as it streams.
    splitters: Vec<Splitter>,
    /// Where the answer's reasoning is, for a template with think tags.
    think: Option<ThinkTags>,
    /// Each choice's reasoning and content as they stream (no tools).
    thinkers: Vec<ThinkSplitter>,
}

/// The echoed prompt of choice `index` as a chunk (its scores, when
/// `scores` has them).
fn echo_chunk(
    reply: &Reply,
    index: u32,
    prompt: &[u32],
    scores: Option<&[TokenLogprobs]>,
    vocab: &Vocab,
    lp: &mut Logprobs,
) -> Value {
    let text = crate::logprobs::prompt_text(vocab, prompt);
    let offset = lp.offsets.get_mut(index as usize);
    let logprobs = match scores {
        Some(scores) => {
            let rows = crate::logprobs::prompt_rows(prompt, scores);
            crate::logprobs::completion_rows(vocab, &rows, offset.unwrap_or(&mut 0))
        }
        None => {
            if let Some(o) = offset {
                *o += text.chars().count();
            }
            Value::Null
        }
    };
    let choice = json!({"index": index, "text": text, "logprobs": logprobs, "finish_reason": null});
    reply.envelope(true, vec![choice])
}

/// One chunk for `delta`, with its tokens' log probabilities when asked.
fn chunk(reply: &Reply, delta: &Delta, prompt: &[u32], vocab: &Vocab, lp: &mut Logprobs) -> Value {
    if let Some(scores) = &delta.prompt_logprobs {
        if !lp.echo {
            return Value::Null;
        }
        return echo_chunk(reply, delta.index, prompt, Some(scores), vocab, lp);
    }
    if lp.tools.as_ref().map(|r| r.format) == Some(ToolFormat::Harmony) {
        return harmony_chunk(reply, delta, vocab, lp);
    }
    if let Some(reader) = lp.tools.clone() {
        let i = delta.index as usize;
        let (Some(text), Some(held)) = (lp.texts.get_mut(i), lp.held.get_mut(i)) else {
            return Value::Null;
        };
        text.push_str(&delta.text);
        held.extend(delta.logprobs.iter().cloned());
        let Some(reason) = delta.finish_reason else {
            return Value::Null;
        };
        let logprobs = if lp.wanted {
            crate::logprobs::chat(vocab, held)
        } else {
            Value::Null
        };
        let (reasoning, answer) = match lp.think {
            Some(tags) => tags.split(text),
            None => (None, text.clone()),
        };
        let (content, calls) = reader.parse(&answer);
        let mut body = json!({"content": content});
        if let Some(r) = reasoning.or_else(|| crate::tools::reasoning_of(reader.format, &answer)) {
            body["reasoning_content"] = json!(r);
        }
        let reason = if calls.is_empty() {
            reason
        } else {
            body["tool_calls"] = crate::tools::calls_json(&calls, true);
            "tool_calls"
        };
        let choice = json!({"index": delta.index, "delta": body, "logprobs": logprobs, "finish_reason": reason});
        return reply.envelope(true, vec![choice]);
    }
    if let (true, Some(thinker)) = (reply.chat, lp.thinkers.get_mut(delta.index as usize)) {
        let mut pieces = thinker.push(&delta.text);
        if delta.finish_reason.is_some() {
            pieces.extend(thinker.finish());
        }
        return pieces_chunk(reply, delta, vocab, lp.wanted, pieces, &[]);
    }
    let logprobs = if !lp.wanted {
        Value::Null
    } else if reply.chat {
        crate::logprobs::chat(vocab, &delta.logprobs)
    } else {
        let offset = lp.offsets.get_mut(delta.index as usize);
        crate::logprobs::completion(vocab, &delta.logprobs, offset.unwrap_or(&mut 0))
    };
    let choice = if reply.chat {
        let content = if delta.text.is_empty() && delta.finish_reason.is_some() {
            json!({})
        } else {
            json!({"content": delta.text})
        };
        json!({"index": delta.index, "delta": content, "logprobs": logprobs, "finish_reason": delta.finish_reason})
    } else {
        json!({"index": delta.index, "text": delta.text, "logprobs": logprobs, "finish_reason": delta.finish_reason})
    };
    reply.envelope(true, vec![choice])
}

/// A harmony answer's delta: its reasoning and content as they come
/// (`reasoning_content`, `content`), its calls once it ends; null when a
/// delta adds nothing to send (a header being read).
fn harmony_chunk(reply: &Reply, delta: &Delta, vocab: &Vocab, lp: &mut Logprobs) -> Value {
    let Some(splitter) = lp.splitters.get_mut(delta.index as usize) else {
        return Value::Null;
    };
    let mut pieces = splitter.push(&delta.text);
    if delta.finish_reason.is_some() {
        pieces.extend(splitter.finish());
    }
    pieces_chunk(reply, delta, vocab, lp.wanted, pieces, splitter.calls())
}

/// A delta's reasoning and content (`reasoning_content`, `content`), and
/// `calls` once it ends; null when it adds nothing to send (a tag or a
/// header being read).
fn pieces_chunk(
    reply: &Reply,
    delta: &Delta,
    vocab: &Vocab,
    wanted: bool,
    pieces: Vec<Piece>,
    calls: &[crate::tools::ToolCall],
) -> Value {
    let (mut reasoning, mut content) = (String::new(), String::new());
    for piece in pieces {
        match piece {
            Piece::Reasoning(r) => reasoning.push_str(&r),
            Piece::Content(c) => content.push_str(&c),
        }
    }
    let mut body = json!({});
    if !reasoning.is_empty() {
        body["reasoning_content"] = json!(reasoning);
    }
    if !content.is_empty() {
        body["content"] = json!(content);
    }
    let mut reason = delta.finish_reason;
    if reason.is_some() && !calls.is_empty() {
        body["tool_calls"] = crate::tools::calls_json(calls, true);
        reason = Some("tool_calls");
    }
    let logprobs = if wanted {
        crate::logprobs::chat(vocab, &delta.logprobs)
    } else {
        Value::Null
    };
    if body.as_object().is_some_and(|b| b.is_empty()) && reason.is_none() && logprobs.is_null() {
        return Value::Null;
    }
    let choice =
        json!({"index": delta.index, "delta": body, "logprobs": logprobs, "finish_reason": reason});
    reply.envelope(true, vec![choice])
}

/// The streaming response for a started generation.
pub fn response(
    generation: Generation,
    reply: Reply,
    include_usage: bool,
    logprobs: bool,
    echo: bool,
    tools: Option<CallReader>,
    think: Option<ThinkTags>,
) -> Response {
    let count = generation.choice_count();
    let n = u32::try_from(count).unwrap_or(u32::MAX);
    // With tools the answer is held and split when it ends.
    let thinkers = match (think, &tools) {
        (Some(tags), None) => (0..count).map(|_| ThinkSplitter::new(tags)).collect(),
        _ => Vec::new(),
    };
    let lp = Logprobs {
        wanted: logprobs,
        offsets: vec![0; count],
        tools,
        texts: vec![String::new(); count],
        held: vec![Vec::new(); count],
        echo,
        splitters: (0..count).map(|_| Splitter::default()).collect(),
        think,
        thinkers,
    };
    let stream = futures_util::stream::unfold(
        (generation, reply, Phase::Start, lp),
        move |(mut generation, reply, phase, mut lp)| async move {
            let (bytes, next) = match phase {
                Phase::Start if reply.chat => {
                    let choices = (0..n)
                        .map(|i| json!({"index": i, "delta": {"role": "assistant", "content": ""}, "logprobs": null, "finish_reason": null}))
                        .collect();
                    (event(&reply.envelope(true, choices)), Phase::Running)
                }
                // `echo` without log probabilities: the prompt at once
                // (with them, it comes with the prompt's scores).
                Phase::Start if echo && !lp.wanted => {
                    let bytes: Vec<u8> = (0..n)
                        .flat_map(|i| {
                            event(&echo_chunk(
                                &reply,
                                i,
                                generation.prompt_of(i),
                                None,
                                generation.vocab(),
                                &mut lp,
                            ))
                        })
                        .collect();
                    (Bytes::from(bytes), Phase::Running)
                }
                Phase::Start | Phase::Running => match generation.next().await {
                    Some(Ok(delta)) => {
                        let value = chunk(
                            &reply,
                            &delta,
                            generation.prompt_of(delta.index),
                            generation.vocab(),
                            &mut lp,
                        );
                        // Null: held back (a choice with tools, until it ends).
                        let bytes = if value.is_null() {
                            Bytes::new()
                        } else {
                            event(&value)
                        };
                        (bytes, Phase::Running)
                    }
                    Some(Err(error)) => (event(&error.body()), Phase::Done),
                    None if include_usage => (Bytes::new(), Phase::Usage),
                    None => (Bytes::new(), Phase::Done),
                },
                Phase::Usage => {
                    let mut value = reply.envelope(true, Vec::new());
                    value["usage"] = usage(
                        generation.prompt_tokens,
                        generation.completion_tokens(),
                        generation.cached_tokens(),
                    );
                    (event(&value), Phase::Done)
                }
                Phase::Done => (Bytes::from_static(b"data: [DONE]\n\n"), Phase::End),
                Phase::End => return None,
            };
            Some((Ok::<_, Infallible>(bytes), (generation, reply, next, lp)))
        },
    );
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(stream),
    )
        .into_response()
}
