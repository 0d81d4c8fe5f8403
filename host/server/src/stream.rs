//! Server-sent events in OpenAI's chunk shape: `data: {chunk}\n\n` per
//! delta, an optional usage chunk, then `data: [DONE]`. Dropping the body
//! (the client went away) drops the [`Generation`], which cancels it.

use std::convert::Infallible;

use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use crate::generate::{Delta, Generation};
use crate::handlers::{usage, Reply};

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

/// One chunk for `delta`.
fn chunk(reply: &Reply, delta: &Delta) -> Value {
    let choice = if reply.chat {
        let content = if delta.text.is_empty() && delta.finish_reason.is_some() {
            json!({})
        } else {
            json!({"content": delta.text})
        };
        json!({"index": delta.index, "delta": content, "logprobs": null, "finish_reason": delta.finish_reason})
    } else {
        json!({"index": delta.index, "text": delta.text, "logprobs": null, "finish_reason": delta.finish_reason})
    };
    reply.envelope(true, vec![choice])
}

/// The streaming response for a started generation.
pub fn response(generation: Generation, reply: Reply, include_usage: bool, n: u32) -> Response {
    let stream = futures_util::stream::unfold(
        (generation, reply, Phase::Start),
        move |(mut generation, reply, phase)| async move {
            let (bytes, next) = match phase {
                Phase::Start if reply.chat => {
                    let choices = (0..n)
                        .map(|i| json!({"index": i, "delta": {"role": "assistant", "content": ""}, "logprobs": null, "finish_reason": null}))
                        .collect();
                    (event(&reply.envelope(true, choices)), Phase::Running)
                }
                Phase::Start | Phase::Running => match generation.next().await {
                    Some(Ok(delta)) => (event(&chunk(&reply, &delta)), Phase::Running),
                    Some(Err(error)) => (event(&error.body()), Phase::Done),
                    None if include_usage => (Bytes::new(), Phase::Usage),
                    None => (Bytes::new(), Phase::Done),
                },
                Phase::Usage => {
                    let mut value = reply.envelope(true, Vec::new());
                    value["usage"] = usage(
                        generation.prompt_tokens,
                        generation.completion_tokens(),
                        generation.cached_tokens,
                    );
                    (event(&value), Phase::Done)
                }
                Phase::Done => (Bytes::from_static(b"data: [DONE]\n\n"), Phase::End),
                Phase::End => return None,
            };
            Some((Ok::<_, Infallible>(bytes), (generation, reply, next)))
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
