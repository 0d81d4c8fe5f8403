//! The response object and its output items.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Map, Value};

use crate::generate::Generation;
use crate::reasoning::ThinkTags;
use crate::tools::{self, CallReader};

/// What every response object of one request repeats: its id, creation
/// time, model and the settings it was asked with.
pub(super) struct Shell {
    id: String,
    created_at: u64,
    fields: Map<String, Value>,
}

impl Shell {
    pub(super) fn new(request: &Map<String, Value>, model_name: &str, n: u64) -> Self {
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
        fields.insert("top_logprobs".into(), get("top_logprobs"));
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
    pub(super) fn object(
        &self,
        status: &str,
        output: Vec<Value>,
        usage: Option<&Generation>,
    ) -> Value {
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

    pub(super) fn message_id(&self) -> String {
        format!("msg_{}", &self.id["resp_".len()..])
    }

    /// The reasoning item's id.
    pub(super) fn reasoning_id(&self) -> String {
        format!("rs_{}", &self.id["resp_".len()..])
    }
}

/// The reasoning item holding `text`, in `status`.
pub(super) fn reasoning_item(shell: &Shell, text: &str, status: &str) -> Value {
    json!({
        "type": "reasoning",
        "id": shell.reasoning_id(),
        "summary": [],
        "content": [{"type": "reasoning_text", "text": text}],
        "status": status,
    })
}

/// `completed`, or `incomplete` when the answer ran into its token limit.
pub(super) fn status(reason: Option<&str>) -> &'static str {
    if reason == Some("length") {
        "incomplete"
    } else {
        "completed"
    }
}

/// The message item holding `text` (its tokens' `logprobs`) in `status`.
fn message(shell: &Shell, text: &str, logprobs: &[Value], status: &str) -> Value {
    json!({
        "type": "message",
        "id": shell.message_id(),
        "status": status,
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs}],
    })
}

/// The answer as output items: its reasoning (between think tags, or
/// harmony's) as a reasoning item; with tools, the calls parsed out of it
/// (and the text around them as a message); otherwise one message. `logprobs`
/// are the answer's tokens' (empty unless asked for); a message holds them
/// where its text is the tokens' text (not where calls were taken out of
/// it, or a format's wrapping).
pub(super) fn output_items(
    shell: &Shell,
    reader: Option<&CallReader>,
    think: Option<ThinkTags>,
    text: &str,
    logprobs: &[Value],
    reason: Option<&str>,
) -> Vec<Value> {
    let done = status(reason);
    let (thought, answer) = match think {
        Some(tags) => tags.split(text),
        None => (None, text.to_string()),
    };
    let (content, calls) = match reader {
        Some(reader) => reader.parse(&answer),
        None if think.is_none() => return vec![message(shell, text, logprobs, done)],
        None => (
            (!answer.trim().is_empty()).then(|| answer.trim().to_string()),
            Vec::new(),
        ),
    };
    let whole = calls.is_empty() && content.as_deref() == Some(text.trim());
    let kept = if whole { logprobs } else { &[] };
    // The reasoning first, as a reasoning item (vLLM's shape: its text as
    // `reasoning_text` content).
    let harmony = reader.and_then(|r| tools::reasoning_of(r.format, text));
    let reasoning = thought.or(harmony).map(|r| reasoning_item(shell, &r, done));
    let mut items: Vec<Value> = reasoning.into_iter().collect();
    items.extend(content.map(|c| message(shell, &c, kept, done)));
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
        items.push(message(shell, "", &[], done));
    }
    items
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::ToolFormat;

    /// The answer's log probabilities go with a message whose text is the
    /// tokens' text, and with no message that calls were taken out of.
    #[test]
    fn a_message_holds_logprobs_only_where_its_text_is_the_tokens() {
        let shell = Shell::new(&Map::new(), "m", 1);
        let lp = [json!({"token": "Hi", "logprob": -0.5, "bytes": [72, 105], "top_logprobs": []})];
        let logprobs_of = |items: &[Value]| items[0]["content"][0]["logprobs"].clone();
        let plain = output_items(&shell, None, None, "Hi", &lp, Some("stop"));
        assert_eq!(logprobs_of(&plain), json!(lp));
        let no_call = output_items(
            &shell,
            Some(&CallReader::new(ToolFormat::Hermes, None)),
            None,
            "Hi",
            &lp,
            Some("stop"),
        );
        assert_eq!(logprobs_of(&no_call), json!(lp));
        let text = "Sure. <tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>";
        let called = output_items(
            &shell,
            Some(&CallReader::new(ToolFormat::Hermes, None)),
            None,
            text,
            &lp,
            Some("stop"),
        );
        assert_eq!(
            (called.len(), called[1]["type"].as_str()),
            (2, Some("function_call"))
        );
        assert_eq!(called[0]["content"][0]["text"], "Sure.");
        assert_eq!(logprobs_of(&called), json!([]));
        // The generic format's `response` unwrapped is not the tokens' text.
        let wrapped = r#"{"response": "Hi"}"#;
        let generic = output_items(
            &shell,
            Some(&CallReader::new(ToolFormat::Generic, None)),
            None,
            wrapped,
            &lp,
            None,
        );
        assert_eq!(logprobs_of(&generic), json!([]));
    }

    /// A harmony answer: its reasoning as a reasoning item, then its
    /// answer as a message, or its call.
    #[test]
    fn a_harmony_answer_gives_a_reasoning_item_then_its_message_or_call() {
        let shell = Shell::new(&Map::new(), "m", 1);
        let answer = "<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant\
                      <|channel|>final<|message|>4<|return|>";
        let items = output_items(
            &shell,
            Some(&CallReader::new(ToolFormat::Harmony, None)),
            None,
            answer,
            &[],
            Some("stop"),
        );
        assert_eq!(items.len(), 2);
        assert_eq!(items[0]["type"], "reasoning");
        assert_eq!(items[0]["content"][0]["text"], "Easy.");
        assert_eq!(items[1]["content"][0]["text"], "4");
        let call = "<|channel|>analysis<|message|>Look it up.<|end|><|start|>assistant\
                    <|channel|>commentary to=functions.f <|constrain|>json<|message|>{}<|call|>";
        let items = output_items(
            &shell,
            Some(&CallReader::new(ToolFormat::Harmony, None)),
            None,
            call,
            &[],
            Some("stop"),
        );
        let kinds: Vec<&str> = items.iter().filter_map(|i| i["type"].as_str()).collect();
        assert_eq!(kinds, ["reasoning", "function_call"]);
        assert_eq!(items[1]["name"], "f");
    }

    /// An answer with think tags: its reasoning as a reasoning item, then
    /// the rest as the message (without tools), or the call (with them).
    #[test]
    fn think_tags_give_a_reasoning_item_before_the_message_or_call() {
        let shell = Shell::new(&Map::new(), "m", 1);
        let tags = Some(ThinkTags::closed());
        let items = output_items(
            &shell,
            None,
            tags,
            "<think>Easy.</think>\n\n4",
            &[],
            Some("stop"),
        );
        assert_eq!(items.len(), 2);
        assert_eq!(items[0]["type"], "reasoning");
        assert_eq!(items[0]["content"][0]["text"], "Easy.");
        assert_eq!(items[1]["content"][0]["text"], "4");
        let call =
            "<think>Call f.</think><tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>";
        let reader = CallReader::new(ToolFormat::Hermes, None);
        let items = output_items(&shell, Some(&reader), tags, call, &[], Some("stop"));
        let kinds: Vec<&str> = items.iter().filter_map(|i| i["type"].as_str()).collect();
        assert_eq!(kinds, ["reasoning", "function_call"]);
    }
}
