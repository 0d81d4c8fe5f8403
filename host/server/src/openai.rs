//! The OpenAI request bodies this server accepts, read field by field from
//! JSON so that every error names the field at fault (`param`).

use pagoda_engine::model::MAX_TOP_LOGPROBS;
use pagoda_engine::structured::OutputSpec;
use pagoda_engine::Priority;
use serde_json::{Map, Value};

use crate::error::ApiError;

/// What a completion or chat completion asks for, once validated.
#[derive(Debug, Clone, PartialEq)]
pub struct Params {
    /// The `model` field (echoed back).
    pub model: Option<String>,
    /// Choices to generate, each with seed `seed + i`.
    pub n: u32,
    /// Most tokens per choice; `None`: up to the context.
    pub max_tokens: Option<u32>,
    /// Stop strings.
    pub stop: Vec<String>,
    /// Softmax temperature (default 1).
    pub temperature: f32,
    /// Nucleus sampling (default 1).
    pub top_p: f32,
    /// Top-k (0 or -1: off).
    pub top_k: u32,
    /// Sampler seed.
    pub seed: u64,
    /// Stream server-sent events.
    pub stream: bool,
    /// `stream_options.include_usage`.
    pub include_usage: bool,
    /// Scheduling class (extension).
    pub priority: Priority,
    /// Keep generating past the model's end-of-generation tokens, up to
    /// `max_tokens` (vLLM's extension, for benchmarks of fixed lengths).
    pub ignore_eos: bool,
    /// `presence_penalty`, in [-2, 2].
    pub presence_penalty: f32,
    /// `frequency_penalty`, in [-2, 2].
    pub frequency_penalty: f32,
    /// `repetition_penalty` (vLLM's), in (0, 10]; 1: off.
    pub repetition_penalty: f32,
    /// `min_p` (vLLM's), in [0, 1].
    pub min_p: f32,
    /// `logit_bias`: token id to a bias in [-100, 100].
    pub logit_bias: Vec<(u32, f32)>,
    /// `stop_token_ids` (vLLM's): more tokens that end a choice.
    pub stop_token_ids: Vec<u32>,
    /// `min_tokens` (vLLM's): no stop token before this many.
    pub min_tokens: u32,
    /// Log probabilities of the sampled tokens with this many alternatives
    /// each: completions' `logprobs: N`; chat's `logprobs: true` with
    /// `top_logprobs: N` (default 0).
    pub logprobs: Option<u32>,
    /// `logprobs_mode: "processed_logprobs"` (vLLM's names): log
    /// probabilities after the bias and penalties instead of the raw ones.
    pub logprobs_processed: bool,
    /// `echo` (completions): the prompt comes back before the completion,
    /// with its tokens' log probabilities when `logprobs` is asked (the
    /// first token's is null). With `max_tokens: 0` only the prompt is
    /// scored, as evaluation harnesses ask.
    pub echo: bool,
    /// What the output must be, and the field that asked for it:
    /// `response_format` (`json_object`, `json_schema`), vLLM's
    /// `guided_json`, `guided_regex`, `guided_choice`, `guided_grammar`
    /// and `structured_outputs`.
    pub output: Option<(OutputSpec, &'static str)>,
    /// Special tokens written out in the text (set by the chat handler for
    /// a harmony answer, whose structure is in them; no request field).
    pub special_tokens: bool,
}

/// The prompt of `/v1/completions` or the messages of `/v1/chat/completions`.
#[derive(Debug, Clone, PartialEq)]
pub enum Prompt {
    /// Text to continue.
    Text(String),
    /// Token ids to continue.
    Tokens(Vec<u32>),
    /// Messages for the chat template (as given: role, content and more).
    Chat(Vec<Value>),
    /// Several prompts (each [`Text`](Self::Text) or
    /// [`Tokens`](Self::Tokens)), `n` choices each.
    Batch(Vec<Prompt>),
}

/// Parses a body as a JSON object.
pub fn parse_object(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(ApiError {
            param: None,
            ..ApiError::invalid("", "the body must be a JSON object")
        }),
        Err(e) => Err(ApiError {
            param: None,
            code: Some("invalid_json"),
            ..ApiError::invalid("", format!("malformed JSON: {e}"))
        }),
    }
}

fn present<'a>(map: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    map.get(key).filter(|v| !v.is_null())
}

fn number(map: &Map<String, Value>, key: &str) -> Result<Option<f64>, ApiError> {
    match present(map, key) {
        None => Ok(None),
        Some(v) => v
            .as_f64()
            .filter(|x| x.is_finite())
            .map(Some)
            .ok_or_else(|| ApiError::invalid(key, format!("`{key}` must be a number"))),
    }
}

fn integer(map: &Map<String, Value>, key: &str) -> Result<Option<i64>, ApiError> {
    match present(map, key) {
        None => Ok(None),
        Some(v) => v
            .as_i64()
            .map(Some)
            .ok_or_else(|| ApiError::invalid(key, format!("`{key}` must be an integer"))),
    }
}

pub(crate) fn boolean(map: &Map<String, Value>, key: &str) -> Result<Option<bool>, ApiError> {
    match present(map, key) {
        None => Ok(None),
        Some(v) => v
            .as_bool()
            .map(Some)
            .ok_or_else(|| ApiError::invalid(key, format!("`{key}` must be a boolean"))),
    }
}

fn priority(value: Option<&Value>) -> Result<Priority, ApiError> {
    let bad = || {
        ApiError::invalid(
            "priority",
            "`priority` must be low, normal, high, critical or an integer",
        )
    };
    Ok(match value {
        None => Priority::Normal,
        Some(Value::String(s)) => match s.as_str() {
            "low" => Priority::Low,
            "normal" => Priority::Normal,
            "high" => Priority::High,
            "critical" => Priority::Critical,
            _ => return Err(bad()),
        },
        // vLLM: a lower number runs earlier; 0 is the default.
        Some(Value::Number(n)) => match n.as_i64().ok_or_else(bad)? {
            i64::MIN..=-10 => Priority::Critical,
            -9..=-1 => Priority::High,
            0 => Priority::Normal,
            _ => Priority::Low,
        },
        Some(_) => return Err(bad()),
    })
}

/// Reads the sampling and output fields shared by both endpoints.
pub fn params(map: &Map<String, Value>, chat: bool) -> Result<Params, ApiError> {
    let model = match present(map, "model") {
        None => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return Err(ApiError::invalid("model", "`model` must be a string")),
    };
    let n = integer(map, "n")?.unwrap_or(1);
    if !(1..=128).contains(&n) {
        return Err(ApiError::invalid("n", "`n` must be between 1 and 128"));
    }
    let mut max_tokens = None;
    let keys: &[&str] = if chat {
        &["max_completion_tokens", "max_tokens"]
    } else {
        &["max_tokens"]
    };
    // `max_tokens: 0` scores the prompt (with `echo`) and generates nothing.
    let echo = boolean(map, "echo")?.unwrap_or(false);
    if echo && chat {
        return Err(ApiError::invalid(
            "echo",
            "`echo` is a completions field; chat completions do not take it",
        ));
    }
    let least = i64::from(!echo);
    for key in keys {
        if let Some(m) = integer(map, key)? {
            if m < least || m > i64::from(u32::MAX) {
                return Err(ApiError::invalid(
                    key,
                    format!("`{key}` must be at least {least}"),
                ));
            }
            max_tokens = Some(m as u32);
            break;
        }
    }
    let stop = match present(map, "stop") {
        None => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| v.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| ApiError::invalid("stop", "`stop` must be a string or strings"))?,
        Some(_) => {
            return Err(ApiError::invalid(
                "stop",
                "`stop` must be a string or strings",
            ))
        }
    };
    if stop.iter().any(String::is_empty) {
        return Err(ApiError::invalid("stop", "a stop string must not be empty"));
    }
    let temperature = number(map, "temperature")?.unwrap_or(1.0);
    if !(0.0..=2.0).contains(&temperature) {
        return Err(ApiError::invalid(
            "temperature",
            "`temperature` must be between 0 and 2",
        ));
    }
    let top_p = number(map, "top_p")?.unwrap_or(1.0);
    if !(top_p > 0.0 && top_p <= 1.0) {
        return Err(ApiError::invalid("top_p", "`top_p` must be in (0, 1]"));
    }
    let top_k = match integer(map, "top_k")?.unwrap_or(0) {
        -1 | 0 => 0,
        k if k > 0 && k <= i64::from(u32::MAX) => k as u32,
        _ => {
            return Err(ApiError::invalid(
                "top_k",
                "`top_k` must be -1, 0 or positive",
            ))
        }
    };
    let seed = integer(map, "seed")?.unwrap_or(0) as u64;
    let stream = boolean(map, "stream")?.unwrap_or(false);
    let ignore_eos = boolean(map, "ignore_eos")?.unwrap_or(false);
    let include_usage = match present(map, "stream_options") {
        None => false,
        Some(Value::Object(o)) => boolean(o, "include_usage")
            .map_err(|_| {
                ApiError::invalid(
                    "stream_options.include_usage",
                    "`include_usage` must be a boolean",
                )
            })?
            .unwrap_or(false),
        Some(_) => {
            return Err(ApiError::invalid(
                "stream_options",
                "`stream_options` must be an object",
            ))
        }
    };
    let penalty = |key: &str, lo: f64, hi: f64, off: f64| -> Result<f32, ApiError> {
        let v = number(map, key)?.unwrap_or(off);
        if !(lo..=hi).contains(&v) {
            return Err(ApiError::invalid(
                key,
                format!("`{key}` must be between {lo} and {hi}"),
            ));
        }
        Ok(v as f32)
    };
    let presence_penalty = penalty("presence_penalty", -2.0, 2.0, 0.0)?;
    let frequency_penalty = penalty("frequency_penalty", -2.0, 2.0, 0.0)?;
    let min_p = penalty("min_p", 0.0, 1.0, 0.0)?;
    let repetition_penalty = number(map, "repetition_penalty")?.unwrap_or(1.0);
    if !(repetition_penalty > 0.0 && repetition_penalty <= 10.0) {
        return Err(ApiError::invalid(
            "repetition_penalty",
            "`repetition_penalty` must be in (0, 10]",
        ));
    }
    let logit_bias = match present(map, "logit_bias") {
        None => Vec::new(),
        Some(Value::Object(biases)) => {
            let bad = |m: String| ApiError::invalid("logit_bias", m);
            let mut out = Vec::with_capacity(biases.len());
            for (token, bias) in biases {
                let id = token
                    .parse::<u32>()
                    .map_err(|_| bad(format!("`logit_bias` key {token:?} is not a token id")))?;
                let b = bias
                    .as_f64()
                    .filter(|b| (-100.0..=100.0).contains(b))
                    .ok_or_else(|| {
                        bad(format!(
                            "the bias of token {id} must be between -100 and 100"
                        ))
                    })?;
                out.push((id, b as f32));
            }
            out
        }
        Some(_) => {
            return Err(ApiError::invalid(
                "logit_bias",
                "`logit_bias` must map token ids to biases",
            ))
        }
    };
    let stop_token_ids = match present(map, "stop_token_ids") {
        None => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| v.as_u64().and_then(|t| u32::try_from(t).ok()))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| {
                ApiError::invalid("stop_token_ids", "`stop_token_ids` must be token ids")
            })?,
        Some(_) => {
            return Err(ApiError::invalid(
                "stop_token_ids",
                "`stop_token_ids` must be a list of token ids",
            ))
        }
    };
    let min_tokens = match integer(map, "min_tokens")?.unwrap_or(0) {
        m if m < 0 || m > i64::from(u32::MAX) => {
            return Err(ApiError::invalid(
                "min_tokens",
                "`min_tokens` must be at least 0",
            ))
        }
        m => m as u32,
    };
    if max_tokens.is_some_and(|max| min_tokens > max) {
        return Err(ApiError::invalid(
            "min_tokens",
            "`min_tokens` must not exceed `max_tokens`",
        ));
    }
    let logprobs = if chat {
        let top = integer(map, "top_logprobs")?;
        match (boolean(map, "logprobs")?.unwrap_or(false), top) {
            (false, Some(_)) => {
                return Err(ApiError::invalid(
                    "top_logprobs",
                    "`top_logprobs` needs `logprobs: true`",
                ))
            }
            (false, None) => None,
            (true, top) => Some(top_count("top_logprobs", top.unwrap_or(0))?),
        }
    } else {
        match integer(map, "logprobs")? {
            None => None,
            Some(n) => Some(top_count("logprobs", n)?),
        }
    };
    let logprobs_processed = match present(map, "logprobs_mode") {
        None => false,
        Some(Value::String(m)) if m == "raw_logprobs" => false,
        Some(Value::String(m)) if m == "processed_logprobs" => true,
        Some(_) => {
            return Err(ApiError::invalid(
                "logprobs_mode",
                "`logprobs_mode` must be \"raw_logprobs\" or \"processed_logprobs\"",
            ))
        }
    };
    Ok(Params {
        model,
        n: n as u32,
        max_tokens,
        stop,
        temperature: temperature as f32,
        top_p: top_p as f32,
        top_k,
        seed,
        stream,
        include_usage,
        priority: priority(present(map, "priority"))?,
        ignore_eos,
        presence_penalty,
        frequency_penalty,
        repetition_penalty: repetition_penalty as f32,
        min_p,
        logit_bias,
        stop_token_ids,
        min_tokens,
        logprobs,
        logprobs_processed,
        echo,
        output: output_spec(map)?,
        special_tokens: false,
    })
}

/// The structured output a request asks for, at most one way.
fn output_spec(map: &Map<String, Value>) -> Result<Option<(OutputSpec, &'static str)>, ApiError> {
    let mut found: Vec<(OutputSpec, &'static str)> = Vec::new();
    if let Some(format) = present(map, "response_format") {
        let bad = |m: &str| ApiError::invalid("response_format", m.to_string());
        let kind = format.get("type").and_then(Value::as_str).ok_or_else(|| {
            bad("`response_format.type` must be text, json_object or json_schema")
        })?;
        match kind {
            "text" => {}
            "json_object" => found.push((OutputSpec::JsonObject, "response_format")),
            "json_schema" => {
                let schema = format
                    .get("json_schema")
                    .and_then(|j| j.get("schema"))
                    .ok_or_else(|| bad("`response_format.json_schema.schema` is required"))?;
                found.push((OutputSpec::JsonSchema(schema.clone()), "response_format"));
            }
            _ => {
                return Err(bad(
                    "`response_format.type` must be text, json_object or json_schema",
                ))
            }
        }
    }
    let string = |v: &Value, key: &'static str| {
        v.as_str()
            .map(str::to_string)
            .ok_or_else(|| ApiError::invalid(key, format!("`{key}` must be a string")))
    };
    let choice = |v: &Value, key: &'static str| {
        v.as_array()
            .and_then(|items| {
                items
                    .iter()
                    .map(|i| i.as_str().map(str::to_string))
                    .collect()
            })
            .ok_or_else(|| ApiError::invalid(key, format!("`{key}` must be a list of strings")))
    };
    // vLLM's fields: the older `guided_*`, the newer `structured_outputs`.
    if let Some(v) = present(map, "guided_json") {
        // A schema, or a schema as a JSON string.
        let schema = match v {
            Value::String(s) => serde_json::from_str(s).map_err(|e| {
                ApiError::invalid("guided_json", format!("`guided_json` is not JSON: {e}"))
            })?,
            other => other.clone(),
        };
        found.push((OutputSpec::JsonSchema(schema), "guided_json"));
    }
    if let Some(v) = present(map, "guided_regex") {
        found.push((
            OutputSpec::Regex(string(v, "guided_regex")?),
            "guided_regex",
        ));
    }
    if let Some(v) = present(map, "guided_choice") {
        found.push((
            OutputSpec::Choice(choice(v, "guided_choice")?),
            "guided_choice",
        ));
    }
    if let Some(v) = present(map, "guided_grammar") {
        found.push((
            OutputSpec::Lark(string(v, "guided_grammar")?),
            "guided_grammar",
        ));
    }
    if let Some(v) = present(map, "structured_outputs") {
        let key = "structured_outputs";
        let Some(o) = v.as_object() else {
            return Err(ApiError::invalid(
                key,
                "`structured_outputs` must be an object",
            ));
        };
        for (field, value) in o {
            let spec = match field.as_str() {
                "json" => OutputSpec::JsonSchema(match value {
                    Value::String(s) => serde_json::from_str(s)
                        .map_err(|e| ApiError::invalid(key, format!("`json` is not JSON: {e}")))?,
                    other => other.clone(),
                }),
                "json_object" if value.as_bool() == Some(true) => OutputSpec::JsonObject,
                "regex" => OutputSpec::Regex(string(value, key)?),
                "choice" => OutputSpec::Choice(choice(value, key)?),
                "grammar" => OutputSpec::Lark(string(value, key)?),
                _ => continue,
            };
            found.push((spec, key));
        }
    }
    match found.len() {
        0 | 1 => Ok(found.pop()),
        _ => Err(ApiError::invalid(
            found[1].1,
            "ask for one structured output only",
        )),
    }
}

/// A count of top log probabilities, 0 to [`MAX_TOP_LOGPROBS`].
fn top_count(key: &str, n: i64) -> Result<u32, ApiError> {
    if !(0..=i64::from(MAX_TOP_LOGPROBS)).contains(&n) {
        return Err(ApiError::invalid(
            key,
            format!("`{key}` must be between 0 and {MAX_TOP_LOGPROBS}"),
        ));
    }
    Ok(n as u32)
}

/// Reads `prompt` as OpenAI's four shapes: a string, a list of strings,
/// a list of token ids, or a list of such lists (strings and lists of ids
/// may mix). A list of one is that one prompt; of more, a
/// [`Batch`](Prompt::Batch).
pub fn completion_prompt(map: &Map<String, Value>) -> Result<Prompt, ApiError> {
    let bad = || {
        ApiError::invalid(
            "prompt",
            "`prompt` must be a string, a list of token ids, or a list of those",
        )
    };
    let ids = |items: &[Value]| {
        items
            .iter()
            .map(|v| v.as_u64().and_then(|t| u32::try_from(t).ok()))
            .collect::<Option<Vec<_>>>()
            .map(Prompt::Tokens)
    };
    match present(map, "prompt") {
        None => Err(ApiError::invalid("prompt", "`prompt` is required")),
        Some(Value::String(s)) => Ok(Prompt::Text(s.clone())),
        Some(Value::Array(items)) if items.iter().all(Value::is_number) => {
            ids(items).ok_or_else(bad)
        }
        Some(Value::Array(items)) => {
            let mut prompts = items
                .iter()
                .map(|item| match item {
                    Value::String(s) => Some(Prompt::Text(s.clone())),
                    Value::Array(inner) => ids(inner),
                    _ => None,
                })
                .collect::<Option<Vec<_>>>()
                .ok_or_else(bad)?;
            Ok(match prompts.len() {
                1 => prompts.remove(0),
                _ => Prompt::Batch(prompts),
            })
        }
        Some(_) => Err(bad()),
    }
}

/// Reads `messages`: a non-empty list of objects with a string `role`.
///
/// A `content` given as a list of parts (the OpenAI SDK's
/// `[{"type": "text", "text": ...}]`, which agent libraries send) becomes
/// its text parts joined by newlines, as vLLM renders them for templates
/// that take strings: every chat template takes a string, and not every
/// one knows parts. A part of another type (an image, audio, a file) is
/// refused by name: this server runs text models only.
pub fn chat_messages(map: &Map<String, Value>) -> Result<Prompt, ApiError> {
    let bad = |m: String| ApiError::invalid("messages", m);
    let Some(Value::Array(items)) = present(map, "messages") else {
        return Err(bad("`messages` must be a list of messages".into()));
    };
    if items.is_empty() {
        return Err(bad("`messages` must not be empty".into()));
    }
    let mut messages = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let shape = || {
            bad(format!(
                "message {i} needs a string `role` and a `content` of text or text parts"
            ))
        };
        let Some(fields) = item.as_object() else {
            return Err(shape());
        };
        if !fields.get("role").is_some_and(Value::is_string) {
            return Err(shape());
        }
        let mut message = fields.clone();
        match fields.get("content") {
            None | Some(Value::Null | Value::String(_)) => {}
            Some(Value::Array(parts)) => {
                let text = text_of_parts(parts).map_err(|part| match part {
                    Some(kind) => bad(format!(
                        "message {i} has a content part of type {kind:?}: this model takes text only"
                    )),
                    None => bad(format!(
                        "message {i}'s content parts must be objects with a `type` (text parts with a string `text`)"
                    )),
                })?;
                message.insert("content".into(), Value::String(text));
            }
            Some(_) => return Err(shape()),
        }
        messages.push(Value::Object(message));
    }
    Ok(Prompt::Chat(messages))
}

/// The text parts of a message's content, joined by newlines; `Err` names
/// the type of a part that is not text (`None`: a part without one).
fn text_of_parts(parts: &[Value]) -> Result<String, Option<String>> {
    let mut texts = Vec::with_capacity(parts.len());
    for part in parts {
        let kind = part.get("type").and_then(Value::as_str).ok_or(None)?;
        if kind != "text" {
            return Err(Some(kind.to_string()));
        }
        texts.push(part.get("text").and_then(Value::as_str).ok_or(None)?);
    }
    Ok(texts.join("\n"))
}

/// A request's `chat_template_kwargs`: more variables for the chat
/// template (Qwen3's and GLM-4.5's `enable_thinking`), as vLLM and
/// llama.cpp's server take them.
pub fn template_kwargs(map: &Map<String, Value>) -> Result<Option<&Map<String, Value>>, ApiError> {
    match map.get("chat_template_kwargs") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(kwargs)) => Ok(Some(kwargs)),
        Some(_) => Err(ApiError::invalid(
            "chat_template_kwargs",
            "`chat_template_kwargs` must be an object",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn prompt(value: Value) -> Result<Prompt, ApiError> {
        completion_prompt(json!({ "prompt": value }).as_object().expect("object"))
    }

    #[test]
    fn prompts_come_in_openais_four_shapes() {
        assert_eq!(prompt(json!("hi")).unwrap(), Prompt::Text("hi".into()));
        assert_eq!(prompt(json!(["hi"])).unwrap(), Prompt::Text("hi".into()));
        assert_eq!(prompt(json!([1, 2])).unwrap(), Prompt::Tokens(vec![1, 2]));
        assert_eq!(prompt(json!([[3]])).unwrap(), Prompt::Tokens(vec![3]));
        assert_eq!(prompt(json!([])).unwrap(), Prompt::Tokens(vec![]));
        assert_eq!(
            prompt(json!(["a", [4, 5], "b"])).unwrap(),
            Prompt::Batch(vec![
                Prompt::Text("a".into()),
                Prompt::Tokens(vec![4, 5]),
                Prompt::Text("b".into()),
            ])
        );
        for bad in [
            json!(5),
            json!({"a": 1}),
            json!([1, "a"]),
            json!([1.5]),
            json!([-1]),
            json!([["a"]]),
            json!(["a", 1]),
            json!(["a", null]),
            json!([[1, 2], [4294967296u64]]),
        ] {
            let e = prompt(bad.clone()).unwrap_err();
            assert_eq!(e.param.as_deref(), Some("prompt"), "{bad}");
        }
        assert!(completion_prompt(&Map::new()).is_err());
    }

    fn messages(body: Value) -> Result<Vec<Value>, ApiError> {
        match chat_messages(body.as_object().expect("object"))? {
            Prompt::Chat(m) => Ok(m),
            other => panic!("not messages: {other:?}"),
        }
    }

    #[test]
    fn text_parts_become_one_string_and_other_fields_stay() {
        let got = messages(json!({"messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "name": "ana", "content": [
                {"type": "text", "text": "What is"},
                {"type": "text", "text": "the capital of France?"},
            ]},
            {"role": "assistant", "content": null, "tool_calls": []},
            {"role": "user", "content": []},
        ]}))
        .unwrap();
        assert_eq!(got[0], json!({"role": "system", "content": "Be brief."}));
        assert_eq!(
            got[1],
            json!({"role": "user", "name": "ana", "content": "What is\nthe capital of France?"})
        );
        assert_eq!(
            got[2],
            json!({"role": "assistant", "content": null, "tool_calls": []})
        );
        assert_eq!(got[3], json!({"role": "user", "content": ""}));
    }

    #[test]
    fn parts_that_are_not_text_are_refused_by_name() {
        let image = json!({"messages": [{"role": "user", "content": [
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
        ]}]});
        let e = messages(image).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("messages"));
        assert!(
            e.message.contains("\"image_url\"") && e.message.contains("message 0"),
            "{}",
            e.message
        );
        for content in [
            json!([{"text": "no type"}]),
            json!([{"type": "text"}]),
            json!([{"type": "text", "text": 5}]),
            json!(["bare string"]),
            json!(7),
            json!({"type": "text", "text": "not a list"}),
        ] {
            let body = json!({"messages": [{"role": "user", "content": "ok"}, {"role": "user", "content": content}]});
            let e = messages(body).unwrap_err();
            assert!(e.message.contains("message 1"), "{}", e.message);
        }
        for body in [
            json!({"messages": []}),
            json!({"messages": "hi"}),
            json!({"messages": [5]}),
            json!({"messages": [{"content": "no role"}]}),
        ] {
            assert_eq!(
                messages(body).unwrap_err().param.as_deref(),
                Some("messages")
            );
        }
    }
}
