//! OpenAI's Responses API (`POST /v1/responses`), as the OpenAI Agents SDK
//! speaks it, without storage: the request's `input` items and
//! `instructions` become chat messages, its function tools and `text.format`
//! the chat fields they stand for, and the chat path renders, constrains and
//! runs it; the answer comes back as output items (a message of
//! `output_text`, and `function_call`s), or streamed as the API's typed
//! events (`response.created` … `response.completed`).
//!
//! Nothing is kept after the answer (`store` is always false), so
//! `previous_response_id` and item references are refused: the client sends
//! the whole conversation, as it does for chat completions.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};

use crate::error::ApiError;
use crate::generate::Generation;
use crate::handlers::{chat_request, read_object};
use crate::state::AppState;
use crate::tools::{self, ToolFormat};

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// `POST /v1/responses`.
pub(crate) async fn responses(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let result: Result<Response, ApiError> = async {
        let request = read_object(&state, &headers, body).await?;
        let map = chat_fields(&request)?;
        let chat = chat_request(&state, &map).map_err(request_param)?;
        let n = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let shell = Shell::new(&request, &state.model_name, n);
        let mut generation = Generation::start(state.clone(), vec![chat.prompt], &chat.params)
            .await
            .map_err(request_param)?;
        if chat.params.stream {
            return Ok(stream(generation, shell, chat.tools));
        }
        let mut text = String::new();
        let mut reason = None;
        while let Some(delta) = generation.next().await {
            let delta = delta?;
            text.push_str(&delta.text);
            reason = delta.finish_reason.or(reason);
        }
        let output = output_items(&shell, chat.tools, &text, reason);
        Ok(Json(shell.object(status(reason), output, Some(&generation))).into_response())
    }
    .await;
    result.unwrap_or_else(IntoResponse::into_response)
}

/// An error naming a chat field renamed to the Responses field it came from.
fn request_param(mut error: ApiError) -> ApiError {
    let renamed = match error.param.as_deref() {
        Some("messages") => "input",
        Some("max_tokens") => "max_output_tokens",
        Some("response_format") => "text.format",
        _ => return error,
    };
    error.param = Some(renamed.to_string());
    error
}

/// The text of a content given as a string or as parts of text (`input_text`,
/// `output_text`), joined by newlines; a part of another kind is refused.
fn text_of(content: &Value, at: &str) -> Result<String, ApiError> {
    let bad = |m: String| ApiError::invalid("input", m);
    match content {
        Value::String(s) => Ok(s.clone()),
        Value::Array(parts) => {
            let mut texts = Vec::with_capacity(parts.len());
            for part in parts {
                let kind = part.get("type").and_then(Value::as_str).unwrap_or("");
                // An assistant's refusal, as the API replays it: its text.
                if let Some(refusal) = part.get("refusal").and_then(Value::as_str) {
                    if kind == "refusal" {
                        texts.push(refusal);
                        continue;
                    }
                }
                if !matches!(kind, "input_text" | "output_text" | "text") {
                    return Err(bad(format!(
                        "{at} has a content part of type {kind:?}: this model takes text only"
                    )));
                }
                let text = part
                    .get("text")
                    .and_then(Value::as_str)
                    .ok_or_else(|| bad(format!("{at}'s text parts need a string `text`")))?;
                texts.push(text);
            }
            Ok(texts.join("\n"))
        }
        _ => Err(bad(format!(
            "{at}'s content must be text or a list of text parts"
        ))),
    }
}

/// Appends the chat messages one `input` item stands for.
fn push_item(i: usize, item: &Value, messages: &mut Vec<Value>) -> Result<(), ApiError> {
    let at = format!("input item {i}");
    let bad = |m: String| ApiError::invalid("input", m);
    let kind = item.get("type").and_then(Value::as_str);
    let field = |key: &str| {
        item.get(key)
            .and_then(Value::as_str)
            .ok_or_else(|| bad(format!("{at} needs a string `{key}`")))
    };
    match kind {
        None | Some("message") => {
            let role = match field("role")? {
                // The chat templates know `system`; the API treats both
                // alike for models without a `developer` role.
                "developer" => "system",
                role => role,
            };
            let content = item
                .get("content")
                .ok_or_else(|| bad(format!("{at} needs a `content`")))?;
            messages.push(json!({"role": role, "content": text_of(content, &at)?}));
        }
        Some("function_call") => {
            let call = json!({
                "id": field("call_id")?,
                "type": "function",
                "function": {"name": field("name")?, "arguments": field("arguments")?},
            });
            // Calls right after an assistant's text or calls are that
            // turn's (templates want roles to alternate).
            match messages.last_mut().filter(|m| m["role"] == "assistant") {
                Some(turn) => match turn["tool_calls"].as_array_mut() {
                    Some(calls) => calls.push(call),
                    None => turn["tool_calls"] = json!([call]),
                },
                None => messages
                    .push(json!({"role": "assistant", "content": null, "tool_calls": [call]})),
            }
        }
        Some("function_call_output") => {
            let output = item
                .get("output")
                .ok_or_else(|| bad(format!("{at} needs an `output`")))?;
            messages.push(json!({
                "role": "tool",
                "tool_call_id": field("call_id")?,
                "content": text_of(output, &at)?,
            }));
        }
        // A reasoning model's notes: nothing for these templates to show.
        Some("reasoning") => {}
        Some("item_reference") => {
            return Err(bad(format!(
                "{at} refers to a stored item: this server keeps none; send the item itself"
            )))
        }
        Some(other) => {
            return Err(bad(format!(
                "{at} is of type {other:?}, which this server does not take"
            )))
        }
    }
    Ok(())
}

/// The chat completion fields a Responses request stands for.
fn chat_fields(request: &Map<String, Value>) -> Result<Map<String, Value>, ApiError> {
    let present = |key: &str| request.get(key).filter(|v| !v.is_null());
    for key in ["previous_response_id", "conversation"] {
        if present(key).is_some() {
            return Err(ApiError::invalid(
                key,
                format!("this server keeps no responses (`store` is off): send the whole conversation in `input`, not `{key}`"),
            ));
        }
    }
    let mut messages = Vec::new();
    match present("instructions") {
        None => {}
        Some(Value::String(s)) => messages.push(json!({"role": "system", "content": s})),
        Some(_) => {
            return Err(ApiError::invalid(
                "instructions",
                "`instructions` must be a string",
            ))
        }
    }
    match present("input") {
        Some(Value::String(s)) => messages.push(json!({"role": "user", "content": s})),
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                push_item(i, item, &mut messages)?;
            }
        }
        _ => {
            return Err(ApiError::invalid(
                "input",
                "`input` must be a string or a list of input items",
            ))
        }
    }
    let mut map = Map::new();
    map.insert("messages".into(), Value::Array(messages));
    for key in [
        "model",
        "temperature",
        "top_p",
        "stream",
        "parallel_tool_calls",
        // vLLM's extensions, read as chat completions read them.
        "seed",
        "top_k",
        "min_p",
        "repetition_penalty",
        "stop",
        "priority",
    ] {
        if let Some(v) = present(key) {
            map.insert(key.into(), v.clone());
        }
    }
    if let Some(v) = present("max_output_tokens") {
        map.insert("max_tokens".into(), v.clone());
    }
    if let Some(v) = present("tools") {
        let Value::Array(list) = v else {
            return Err(ApiError::invalid("tools", "`tools` must be a list"));
        };
        let mut tools = Vec::with_capacity(list.len());
        for tool in list {
            let kind = tool.get("type").and_then(Value::as_str).unwrap_or("");
            if kind != "function" {
                return Err(ApiError::invalid(
                    "tools",
                    format!("only function tools run here, not {kind:?}"),
                ));
            }
            let mut function = Map::new();
            for key in ["name", "description", "parameters"] {
                if let Some(v) = tool.get(key).filter(|v| !v.is_null()) {
                    function.insert(key.into(), v.clone());
                }
            }
            tools.push(json!({"type": "function", "function": function}));
        }
        map.insert("tools".into(), Value::Array(tools));
    }
    if let Some(v) = present("tool_choice") {
        let choice = match v {
            Value::String(_) => v.clone(),
            Value::Object(o) if o.get("type").and_then(Value::as_str) == Some("function") => {
                json!({"type": "function", "function": {"name": o.get("name").cloned().unwrap_or(Value::Null)}})
            }
            _ => return Err(ApiError::invalid(
                "tool_choice",
                "`tool_choice` must be none, auto, required or {\"type\": \"function\", \"name\"}",
            )),
        };
        map.insert("tool_choice".into(), choice);
    }
    if present("text").is_some_and(|t| !t.is_object()) {
        return Err(ApiError::invalid("text", "`text` must be an object"));
    }
    if let Some(format) = present("text")
        .and_then(|t| t.get("format"))
        .filter(|f| !f.is_null())
    {
        let bad = || {
            ApiError::invalid(
                "text.format",
                "`text.format` must be {\"type\": \"text\"}, {\"type\": \"json_object\"} or {\"type\": \"json_schema\", \"schema\"}",
            )
        };
        let response_format = match format.get("type").and_then(Value::as_str) {
            Some("text") => None,
            Some("json_object") => Some(json!({"type": "json_object"})),
            Some("json_schema") => {
                let schema = format.get("schema").ok_or_else(bad)?;
                Some(
                    json!({"type": "json_schema", "json_schema": {"name": format.get("name"), "schema": schema}}),
                )
            }
            _ => return Err(bad()),
        };
        if let Some(f) = response_format {
            map.insert("response_format".into(), f);
        }
    }
    Ok(map)
}

/// What every response object of one request repeats: its id, creation
/// time, model and the settings it was asked with.
struct Shell {
    id: String,
    created_at: u64,
    fields: Map<String, Value>,
}

impl Shell {
    fn new(request: &Map<String, Value>, model_name: &str, n: u64) -> Self {
        // A field given as null reads as not given.
        let given = |key: &str| request.get(key).filter(|v| !v.is_null()).cloned();
        let get = |key: &str| given(key).unwrap_or(Value::Null);
        let or = |key: &str, default: Value| given(key).unwrap_or(default);
        let model = request
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or(model_name);
        let mut fields = Map::new();
        fields.insert("model".into(), json!(model));
        fields.insert("instructions".into(), get("instructions"));
        fields.insert("max_output_tokens".into(), get("max_output_tokens"));
        fields.insert("temperature".into(), or("temperature", json!(1.0)));
        fields.insert("top_p".into(), or("top_p", json!(1.0)));
        fields.insert(
            "parallel_tool_calls".into(),
            or("parallel_tool_calls", json!(true)),
        );
        fields.insert("tool_choice".into(), or("tool_choice", json!("auto")));
        fields.insert("tools".into(), or("tools", json!([])));
        fields.insert(
            "text".into(),
            or("text", json!({"format": {"type": "text"}})),
        );
        fields.insert("previous_response_id".into(), Value::Null);
        fields.insert("store".into(), json!(false));
        fields.insert("metadata".into(), or("metadata", json!({})));
        Self {
            id: format!("resp_{n}"),
            created_at: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            fields,
        }
    }

    /// The response object in `status` with `output` (usage once the
    /// generation has some).
    fn object(&self, status: &str, output: Vec<Value>, usage: Option<&Generation>) -> Value {
        let mut v = Map::new();
        v.insert("id".into(), json!(self.id));
        v.insert("object".into(), json!("response"));
        v.insert("created_at".into(), json!(self.created_at));
        v.insert("status".into(), json!(status));
        v.insert("error".into(), Value::Null);
        v.insert(
            "incomplete_details".into(),
            if status == "incomplete" {
                json!({"reason": "max_output_tokens"})
            } else {
                Value::Null
            },
        );
        v.extend(self.fields.clone());
        v.insert("output".into(), Value::Array(output));
        v.insert(
            "usage".into(),
            usage.map_or(Value::Null, |g| {
                let (input, output) = (g.prompt_tokens, g.completion_tokens());
                json!({
                    "input_tokens": input,
                    "input_tokens_details": {"cached_tokens": g.cached_tokens(), "cache_write_tokens": 0},
                    "output_tokens": output,
                    "output_tokens_details": {"reasoning_tokens": 0},
                    "total_tokens": u64::from(input) + u64::from(output),
                })
            }),
        );
        Value::Object(v)
    }

    fn message_id(&self) -> String {
        format!("msg_{}", &self.id["resp_".len()..])
    }
}

/// `completed`, or `incomplete` when the answer ran into its token limit.
fn status(reason: Option<&str>) -> &'static str {
    if reason == Some("length") {
        "incomplete"
    } else {
        "completed"
    }
}

/// The message item holding `text` in `status`.
fn message(shell: &Shell, text: &str, status: &str) -> Value {
    json!({
        "type": "message",
        "id": shell.message_id(),
        "status": status,
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    })
}

/// The answer as output items: with tools, the calls parsed out of it (and
/// the text around them as a message); otherwise one message.
fn output_items(
    shell: &Shell,
    format: Option<ToolFormat>,
    text: &str,
    reason: Option<&str>,
) -> Vec<Value> {
    let done = status(reason);
    let Some(format) = format else {
        return vec![message(shell, text, done)];
    };
    let (content, calls) = tools::parse_output(format, text);
    let mut items: Vec<Value> = content
        .map(|c| message(shell, &c, done))
        .into_iter()
        .collect();
    let ids = tools::calls_json(&calls, false);
    for (k, (call, listed)) in calls
        .iter()
        .zip(ids.as_array().into_iter().flatten())
        .enumerate()
    {
        items.push(json!({
            "type": "function_call",
            "id": format!("fc_{}_{k}", &shell.id["resp_".len()..]),
            "call_id": listed["id"],
            "name": call.name,
            "arguments": call.arguments,
            "status": "completed",
        }));
    }
    if items.is_empty() {
        items.push(message(shell, "", done));
    }
    items
}

/// The events of a streamed response, numbered as they are sent.
struct Events {
    queue: VecDeque<Bytes>,
    next: u64,
}

impl Events {
    fn push(&mut self, kind: &str, mut body: Value) {
        body["type"] = json!(kind);
        body["sequence_number"] = json!(self.next);
        self.next += 1;
        self.queue
            .push_back(Bytes::from(format!("event: {kind}\ndata: {body}\n\n")));
    }

    /// An item's events from `added` to `done`, with its text (a message)
    /// or arguments (a call) sent whole.
    fn whole_item(&mut self, index: usize, item: &Value) {
        // Opened empty: the deltas that follow carry the text or the
        // arguments (clients append them to what `added` held).
        let mut opening = item.clone();
        opening["status"] = json!("in_progress");
        if item["type"] == "message" {
            opening["content"] = json!([]);
        } else {
            opening["arguments"] = json!("");
        }
        self.push(
            "response.output_item.added",
            json!({"output_index": index, "item": opening}),
        );
        let id = item["id"].clone();
        if item["type"] == "message" {
            let text = item["content"][0]["text"].clone();
            let part = json!({"type": "output_text", "text": "", "annotations": []});
            self.push(
                "response.content_part.added",
                json!({"item_id": id, "output_index": index, "content_index": 0, "part": part}),
            );
            self.push("response.output_text.delta", json!({"item_id": id, "output_index": index, "content_index": 0, "delta": text, "logprobs": []}));
            self.text_done(index, &id, &text);
        } else {
            let args = item["arguments"].clone();
            self.push(
                "response.function_call_arguments.delta",
                json!({"item_id": id, "output_index": index, "delta": args}),
            );
            self.push("response.function_call_arguments.done", json!({"item_id": id, "output_index": index, "name": item["name"], "arguments": args}));
        }
        self.push(
            "response.output_item.done",
            json!({"output_index": index, "item": item}),
        );
    }

    fn text_done(&mut self, index: usize, id: &Value, text: &Value) {
        let part = json!({"type": "output_text", "text": text, "annotations": []});
        self.push("response.output_text.done", json!({"item_id": id, "output_index": index, "content_index": 0, "text": text, "logprobs": []}));
        self.push(
            "response.content_part.done",
            json!({"item_id": id, "output_index": index, "content_index": 0, "part": part}),
        );
    }
}

/// Where a stream is: text streams as it comes; with tools the answer is
/// held until it ends (a call is parsed once it is whole), then its items
/// are sent whole.
struct Streaming {
    generation: Generation,
    shell: Shell,
    tools: Option<ToolFormat>,
    events: Events,
    text: String,
    ended: bool,
}

impl Streaming {
    /// Waits for the next delta and queues its events; `false` once
    /// everything is queued.
    async fn advance(&mut self) -> bool {
        if self.ended {
            return false;
        }
        let item_id = json!(self.shell.message_id());
        match self.generation.next().await {
            Some(Ok(delta)) => {
                self.text.push_str(&delta.text);
                if self.tools.is_none() && !delta.text.is_empty() {
                    self.events.push("response.output_text.delta", json!({"item_id": item_id, "output_index": 0, "content_index": 0, "delta": delta.text, "logprobs": []}));
                }
                if let Some(reason) = delta.finish_reason {
                    self.finish(Some(reason));
                }
            }
            Some(Err(error)) => {
                self.ended = true;
                let body = error.body();
                self.events.push("error", json!({"code": body["error"]["code"], "message": body["error"]["message"], "param": body["error"]["param"]}));
                let mut failed = self
                    .shell
                    .object("failed", Vec::new(), Some(&self.generation));
                let code = match error.status.as_u16() {
                    429 => "rate_limit_exceeded",
                    400 => "invalid_prompt",
                    _ => "server_error",
                };
                failed["error"] = json!({"code": code, "message": body["error"]["message"]});
                self.events
                    .push("response.failed", json!({"response": failed}));
            }
            None => self.finish(None),
        }
        true
    }

    fn finish(&mut self, reason: Option<&str>) {
        if self.ended {
            return;
        }
        self.ended = true;
        let items = output_items(&self.shell, self.tools, &self.text, reason);
        if self.tools.is_some() {
            for (index, item) in items.iter().enumerate() {
                self.events.whole_item(index, item);
            }
        } else {
            let id = json!(self.shell.message_id());
            let text = json!(self.text);
            self.events.text_done(0, &id, &text);
            self.events.push(
                "response.output_item.done",
                json!({"output_index": 0, "item": items[0]}),
            );
        }
        let done = self
            .shell
            .object(status(reason), items, Some(&self.generation));
        let kind = if status(reason) == "incomplete" {
            "response.incomplete"
        } else {
            "response.completed"
        };
        self.events.push(kind, json!({"response": done}));
    }
}

/// The streamed response: `response.created` and `response.in_progress`,
/// the message's opening (without tools), then events as the answer comes.
/// Dropping the body drops the generation, which cancels it.
fn stream(generation: Generation, shell: Shell, tools: Option<ToolFormat>) -> Response {
    let mut events = Events {
        queue: VecDeque::new(),
        next: 0,
    };
    let opening = shell.object("in_progress", Vec::new(), None);
    events.push("response.created", json!({"response": opening}));
    events.push("response.in_progress", json!({"response": opening}));
    if tools.is_none() {
        let id = json!(shell.message_id());
        let item = json!({"type": "message", "id": id, "status": "in_progress", "role": "assistant", "content": []});
        events.push(
            "response.output_item.added",
            json!({"output_index": 0, "item": item}),
        );
        let part = json!({"type": "output_text", "text": "", "annotations": []});
        events.push(
            "response.content_part.added",
            json!({"item_id": id, "output_index": 0, "content_index": 0, "part": part}),
        );
    }
    let state = Streaming {
        generation,
        shell,
        tools,
        events,
        text: String::new(),
        ended: false,
    };
    let body = futures_util::stream::unfold(state, |mut s| async move {
        loop {
            if let Some(bytes) = s.events.queue.pop_front() {
                return Some((Ok::<_, Infallible>(bytes), s));
            }
            if !s.advance().await {
                return None;
            }
        }
    });
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(body),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(v: Value) -> Result<Map<String, Value>, ApiError> {
        chat_fields(v.as_object().expect("object"))
    }

    #[test]
    fn input_items_become_chat_messages() {
        let map = fields(json!({
            "instructions": "Be brief.",
            "input": [
                {"role": "developer", "content": "Use tools."},
                {"type": "message", "role": "user", "content": [
                    {"type": "input_text", "text": "Weather in"},
                    {"type": "input_text", "text": "Oslo?"},
                ]},
                {"type": "reasoning", "id": "rs_1", "summary": []},
                {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": "{\"city\":\"Oslo\"}"},
                {"type": "function_call", "call_id": "c2", "name": "time", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "12 C"},
                {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "noon"}]},
            ],
            "max_output_tokens": 20,
            "tools": [{"type": "function", "name": "weather", "description": "d", "parameters": {"type": "object"}, "strict": true}],
            "tool_choice": {"type": "function", "name": "weather"},
            "text": {"format": {"type": "json_schema", "name": "s", "schema": {"type": "object"}}},
        }))
        .unwrap();
        assert_eq!(
            map["messages"],
            json!([
                {"role": "system", "content": "Be brief."},
                {"role": "system", "content": "Use tools."},
                {"role": "user", "content": "Weather in\nOslo?"},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": "{\"city\":\"Oslo\"}"}},
                    {"id": "c2", "type": "function", "function": {"name": "time", "arguments": "{}"}},
                ]},
                {"role": "tool", "tool_call_id": "c1", "content": "12 C"},
                {"role": "tool", "tool_call_id": "c2", "content": "noon"},
            ])
        );
        assert_eq!(map["max_tokens"], 20);
        assert_eq!(
            map["tools"],
            json!([{"type": "function", "function": {"name": "weather", "description": "d", "parameters": {"type": "object"}}}])
        );
        assert_eq!(
            map["tool_choice"],
            json!({"type": "function", "function": {"name": "weather"}})
        );
        assert_eq!(
            map["response_format"],
            json!({"type": "json_schema", "json_schema": {"name": "s", "schema": {"type": "object"}}})
        );
        assert_eq!(
            fields(json!({"input": "hi"})).unwrap()["messages"],
            json!([{"role": "user", "content": "hi"}])
        );
    }

    #[test]
    fn what_needs_storage_or_other_media_is_refused_by_field() {
        for (body, param) in [
            (json!({}), "input"),
            (json!({"input": 5}), "input"),
            (
                json!({"input": "a", "previous_response_id": "resp_1"}),
                "previous_response_id",
            ),
            (
                json!({"input": "a", "conversation": "conv_1"}),
                "conversation",
            ),
            (
                json!({"input": [{"type": "item_reference", "id": "msg_1"}]}),
                "input",
            ),
            (
                json!({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}),
                "input",
            ),
            (json!({"input": [{"role": "user"}]}), "input"),
            (
                json!({"input": [{"type": "function_call", "name": "f"}]}),
                "input",
            ),
            (json!({"input": [{"type": "web_search_call"}]}), "input"),
            (json!({"input": "a", "instructions": 3}), "instructions"),
            (
                json!({"input": "a", "tools": [{"type": "web_search"}]}),
                "tools",
            ),
            (json!({"input": "a", "tools": {}}), "tools"),
            (json!({"input": "a", "tool_choice": 1}), "tool_choice"),
            (
                json!({"input": "a", "text": {"format": {"type": "yaml"}}}),
                "text.format",
            ),
            (
                json!({"input": "a", "text": {"format": {"type": "json_schema"}}}),
                "text.format",
            ),
        ] {
            let e = fields(body.clone()).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(param), "{body}: {}", e.message);
        }
    }

    #[test]
    fn a_whole_item_streams_from_empty_to_done() {
        let mut events = Events {
            queue: VecDeque::new(),
            next: 7,
        };
        let call = json!({"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "f", "arguments": "{\"a\":1}", "status": "completed"});
        events.whole_item(1, &call);
        let sent: Vec<Value> = events
            .queue
            .iter()
            .map(|b| {
                let text = std::str::from_utf8(b).unwrap();
                let data = text.split("\ndata: ").nth(1).unwrap();
                serde_json::from_str(data.trim_end()).unwrap()
            })
            .collect();
        let kinds: Vec<&str> = sent.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            [
                "response.output_item.added",
                "response.function_call_arguments.delta",
                "response.function_call_arguments.done",
                "response.output_item.done",
            ]
        );
        let numbers: Vec<u64> = sent
            .iter()
            .map(|e| e["sequence_number"].as_u64().unwrap())
            .collect();
        assert_eq!(numbers, [7, 8, 9, 10]);
        // `added` holds no arguments: the delta carries them, once.
        assert_eq!(sent[0]["item"]["arguments"], "");
        assert_eq!(sent[0]["item"]["status"], "in_progress");
        assert_eq!(sent[1]["delta"], call["arguments"]);
        assert_eq!(sent[3]["item"], call);
        assert!(sent.iter().all(|e| e["output_index"] == 1));
    }

    #[test]
    fn chat_errors_name_the_responses_field() {
        let renamed = |p: &str| request_param(ApiError::invalid(p, "x")).param;
        assert_eq!(renamed("messages").as_deref(), Some("input"));
        assert_eq!(renamed("max_tokens").as_deref(), Some("max_output_tokens"));
        assert_eq!(renamed("response_format").as_deref(), Some("text.format"));
        assert_eq!(renamed("temperature").as_deref(), Some("temperature"));
    }
}
