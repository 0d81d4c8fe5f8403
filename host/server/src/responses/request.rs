//! A Responses request read as the chat completion fields it stands for:
//! `input` items and `instructions` as messages, function tools, the tool
//! choice and `text.format` in their chat shapes.

use serde_json::{json, Map, Value};

use crate::error::ApiError;

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

/// What `include` may name: the API's list. Only the output text's log
/// probabilities are something this server makes; the others name
/// outputs of tools it does not run (or encrypted reasoning it has not),
/// so there is nothing to add for them.
const INCLUDABLE: [&str; 8] = [
    "message.output_text.logprobs",
    "reasoning.encrypted_content",
    "message.input_image.image_url",
    "computer_call_output.output.image_url",
    "file_search_call.results",
    "web_search_call.results",
    "web_search_call.action.sources",
    "code_interpreter_call.outputs",
];

/// Whether `include` asks for the output text's log probabilities (as
/// vLLM reads it, `top_logprobs` counts only then); a value off the API's
/// list is refused.
fn wants_logprobs(include: Option<&Value>) -> Result<bool, ApiError> {
    let Some(include) = include else {
        return Ok(false);
    };
    let bad = |m: String| ApiError::invalid("include", m);
    let list = include
        .as_array()
        .ok_or_else(|| bad("`include` must be a list of strings".into()))?;
    let mut logprobs = false;
    for v in list {
        let name = v
            .as_str()
            .ok_or_else(|| bad("`include` must be a list of strings".into()))?;
        if !INCLUDABLE.contains(&name) {
            return Err(bad(format!(
                "`include` names {name:?}, which is none of {}",
                INCLUDABLE.join(", ")
            )));
        }
        logprobs |= name == INCLUDABLE[0];
    }
    Ok(logprobs)
}

/// The chat completion fields a Responses request stands for.
pub(super) fn chat_fields(request: &Map<String, Value>) -> Result<Map<String, Value>, ApiError> {
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
    if wants_logprobs(present("include"))? {
        map.insert("logprobs".into(), json!(true));
        if let Some(v) = present("top_logprobs") {
            map.insert("top_logprobs".into(), v.clone());
        }
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
        // Log probabilities when `include` names them; `top_logprobs`
        // only then.
        let asked = fields(json!({"input": "hi", "top_logprobs": 3,
            "include": ["reasoning.encrypted_content", "message.output_text.logprobs"]}))
        .unwrap();
        assert_eq!(
            (&asked["logprobs"], &asked["top_logprobs"]),
            (&json!(true), &json!(3))
        );
        let not = fields(json!({"input": "hi", "top_logprobs": 3, "include": []})).unwrap();
        assert!(!not.contains_key("logprobs") && !not.contains_key("top_logprobs"));
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
            (json!({"input": "a", "include": "x"}), "include"),
            (json!({"input": "a", "include": [1]}), "include"),
            (json!({"input": "a", "include": ["usage"]}), "include"),
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
}
