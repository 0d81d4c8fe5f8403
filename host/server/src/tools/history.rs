//! A conversation's earlier calls as each kind of template reads them:
//! gpt-oss's (harmony), GLM's (arguments as objects) and one that knows no
//! tools (the generic format's JSON). OpenAI clients send a call's
//! arguments as JSON text, and templates want other shapes of it.

use serde_json::{json, Value};

/// A conversation as gpt-oss's template reads it: a missing content is
/// empty (the template searches it); the reasoning an answer came with
/// (`reasoning_content`, as this server returns it, or `reasoning`) is its
/// `thinking`, which the template writes back before a call (and then a
/// call's content goes: the template takes one or the other); a null or
/// empty `tool_calls` is none (the template tests for the key); and a
/// call's arguments, which OpenAI clients send as JSON text, are the object
/// the template writes out.
pub fn harmony_history(messages: impl IntoIterator<Item = Value>) -> Vec<Value> {
    let mut out = Vec::new();
    for mut m in messages {
        if m.get("content").is_none_or(Value::is_null) {
            m["content"] = json!("");
        }
        let no_calls = m
            .get("tool_calls")
            .is_some_and(|c| c.is_null() || c.as_array().is_some_and(Vec::is_empty));
        if let (true, Some(map)) = (no_calls, m.as_object_mut()) {
            map.remove("tool_calls");
        }
        let reasoning = ["reasoning_content", "reasoning"]
            .iter()
            .find_map(|k| m.get(*k).and_then(Value::as_str).filter(|r| !r.is_empty()))
            .map(str::to_string);
        if let (Some(r), None) = (reasoning, m.get("thinking")) {
            m["thinking"] = json!(r);
        }
        if m.get("tool_calls").is_some() && m.get("thinking").is_some() {
            m["content"] = json!("");
        }
        out.push(m);
    }
    object_arguments(out)
}

/// A conversation whose calls' arguments, which OpenAI clients send as
/// JSON text, are the objects a template iterates (harmony's, GLM's
/// `tc.arguments.items()`); text that does not parse stays text.
pub fn object_arguments(messages: impl IntoIterator<Item = Value>) -> Vec<Value> {
    let mut out = Vec::new();
    for mut m in messages {
        if let Some(calls) = m.get_mut("tool_calls").and_then(Value::as_array_mut) {
            for call in calls {
                let parsed = call
                    .pointer("/function/arguments")
                    .and_then(Value::as_str)
                    .and_then(|a| serde_json::from_str::<Value>(a).ok());
                if let Some(args) = parsed {
                    call["function"]["arguments"] = args;
                }
            }
        }
        out.push(m);
    }
    out
}

/// A conversation's earlier calls and results as a template that knows no
/// tools reads them (the generic format's JSON): an assistant's
/// `tool_calls` become its content, a `tool` message a user message
/// holding the result; a missing content becomes empty. Whether or not
/// this request offers tools: a history with calls must render either way.
pub fn generic_history(messages: impl IntoIterator<Item = Value>) -> Vec<Value> {
    let mut out = Vec::new();
    for mut m in messages {
        if let Some(calls) = m.get("tool_calls").and_then(Value::as_array) {
            let calls: Vec<Value> = calls
                .iter()
                .map(|c| {
                    let args = c
                        .pointer("/function/arguments")
                        .and_then(Value::as_str)
                        .unwrap_or("{}");
                    json!({
                        "name": c.pointer("/function/name").cloned().unwrap_or_default(),
                        "arguments": serde_json::from_str::<Value>(args).unwrap_or(json!({})),
                    })
                })
                .collect();
            // Text the assistant wrote beside its calls stays, under
            // `content` (as minja's tool-call polyfill writes it).
            let mut written = json!({"tool_calls": calls});
            if let Some(text) = m
                .get("content")
                .and_then(Value::as_str)
                .filter(|t| !t.trim().is_empty())
            {
                written["content"] = json!(text);
            }
            m["content"] = json!(written.to_string());
            if let Some(o) = m.as_object_mut() {
                o.remove("tool_calls");
            }
        }
        // A tool's result, for a template that knows no `tool` role: a
        // user message holding it as JSON (as llama.cpp's generic
        // format sends it).
        if m.get("role").and_then(Value::as_str) == Some("tool") {
            let content = m.get("content").cloned().unwrap_or(Value::Null);
            let id = m.get("tool_call_id").cloned().unwrap_or(Value::Null);
            let response = json!({"tool_response": {"tool_call_id": id, "content": content}});
            m = json!({"role": "user", "content": response.to_string()});
        }
        if m.get("content").is_none_or(Value::is_null) {
            m["content"] = json!("");
        }
        out.push(m);
    }
    out
}
