//! Tool calling for the chat API: `tools`, `tool_choice` and
//! `parallel_tool_calls` read and checked; the tools handed to the chat
//! template as transformers hands them; the model's tool calls parsed out
//! of its text into `message.tool_calls`; `required` and a named function
//! enforced with a structured-output grammar, so the arguments always
//! parse against the function's schema.
//!
//! The formats, by what the chat template writes:
//! - **Hermes** (Qwen2.5, Hermes, and templates that print `<tool_call>`):
//!   `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, one block
//!   per call, text around them the message's content.
//! - **Llama 3.x** (templates that print `<|python_tag|>` or ask for
//!   `"parameters"`): the whole answer one JSON object `{"name": ...,
//!   "parameters": {...}}`.
//! - **GLM** (GLM-4.5, 4.6; templates that write `<arg_key>`):
//!   `<tool_call>NAME` then `<arg_key>K</arg_key><arg_value>V</arg_value>`
//!   per argument and `</tool_call>`, a string argument written bare and
//!   any other as JSON, so the offered tools' schemas tell which is which.
//! - **Harmony** (gpt-oss; templates that write `<|channel|>`): each call a
//!   message to `functions.NAME` whose body is the arguments, read with
//!   the answer's reasoning and content by [`crate::harmony`].
//! - **Mistral** (`[TOOL_CALLS]`) and **DeepSeek** (`<｜tool▁calls▁begin｜>`):
//!   see [`crate::mistral`] and [`crate::deepseek`].
//! - **Cohere** (Command R7B, Command A; templates that write
//!   `<|START_ACTION|>`): a plan, then a JSON array of calls, each block
//!   between control tokens ([`crate::cohere`]).
//! - **Kimi K2** (`<|tool_calls_section_begin|>`): see [`crate::kimi`].
//! - **Generic**, for templates that know no tools (llama.cpp's fallback):
//!   the tools are described in a system message, and the answer is
//!   constrained to JSON, `{"tool_calls": [{"name", "arguments"}]}` or
//!   `{"response": "..."}`, so even a small model's calls parse.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use pagoda_engine::structured::OutputSpec;
use serde_json::{json, Map, Value};

use crate::error::ApiError;

pub(crate) mod arrays;
mod grammar;
mod history;
pub(crate) mod tagged;

#[cfg(test)]
pub(crate) use grammar::walk;
use grammar::ForcedGrammar;
pub use grammar::GrammarModel;
pub use history::{generic_history, harmony_history, object_arguments};

/// Which tools the model may call.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolChoice {
    /// No call: the tools are not offered.
    None,
    /// The model decides.
    Auto,
    /// At least one call.
    Required,
    /// A call of this function.
    Named(String),
}

/// A request's tools.
#[derive(Debug, Clone, PartialEq)]
pub struct Tools {
    /// The `tools` as given (`{"type": "function", "function": {...}}`).
    pub list: Vec<Value>,
    /// `tool_choice` (default `auto`).
    pub choice: ToolChoice,
    /// `parallel_tool_calls` (default true): more than one call at once.
    pub parallel: bool,
}

/// How a template's model writes tool calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolFormat {
    /// `<tool_call>{...}</tool_call>` blocks.
    Hermes,
    /// One JSON object with `name` and `parameters`.
    Llama3,
    /// JSON with `tool_calls` or `response`, described in a system message.
    Generic,
    /// OpenAI's harmony messages (gpt-oss): every answer is parsed, for
    /// its channels, tools or not.
    Harmony,
    /// GLM-4.5's `<tool_call>NAME<arg_key>..</arg_key><arg_value>..</arg_value></tool_call>`.
    Glm,
    /// DeepSeek's `<｜tool▁calls▁begin｜>` section of
    /// `<｜tool▁call▁begin｜>…<｜tool▁sep｜>…<｜tool▁call▁end｜>` blocks (V3's
    /// and R1's fenced JSON, V3.1's bare).
    DeepSeek,
    /// Mistral's `[TOOL_CALLS]` control token before a JSON array of calls
    /// or each `NAME[ARGS]{...}`; call ids of nine letters and digits.
    Mistral,
    /// Cohere's (Command R7B, Command A) `<|START_ACTION|>` block of a JSON
    /// array of calls, after a plan in `<|START_THINKING|>`.
    Cohere,
    /// Kimi K2's `<|tool_calls_section_begin|>` section of calls, each id
    /// `functions.NAME:INDEX`.
    Kimi,
    /// Qwen3-Coder's and Qwen3.5's `<tool_call>` blocks of
    /// `<function=NAME>` and `<parameter=KEY>` tags.
    QwenXml,
    /// MiniMax-M2's `<minimax:tool_call>` section of `<invoke name=...>`
    /// blocks of `<parameter name=...>` tags.
    MiniMax,
    /// Nemotron Nano 2's `<TOOLCALL>` block of a JSON array of calls.
    Nemotron,
}

impl ToolFormat {
    /// A conversation's earlier calls as this format's templates read them
    /// (the generic format's as the JSON it asks for; harmony's, GLM's,
    /// Mistral's, Cohere's and Kimi's with their arguments as objects, and
    /// ids or plans as each wants them).
    pub fn history(self, messages: Vec<Value>) -> Vec<Value> {
        match self {
            ToolFormat::Generic => generic_history(messages),
            ToolFormat::Harmony => harmony_history(messages),
            ToolFormat::Glm | ToolFormat::QwenXml | ToolFormat::MiniMax => {
                object_arguments(messages)
            }
            ToolFormat::Mistral => crate::mistral::history(messages),
            ToolFormat::Cohere => crate::cohere::history(messages),
            ToolFormat::Kimi => crate::kimi::history(messages),
            ToolFormat::Hermes
            | ToolFormat::Llama3
            | ToolFormat::DeepSeek
            | ToolFormat::Nemotron => messages,
        }
    }

    /// The format a chat template's source writes.
    pub fn of(template: &str) -> Self {
        if crate::harmony::is_harmony(template) {
            Self::Harmony
        } else if template.contains(crate::deepseek::CALLS_BEGIN) {
            Self::DeepSeek
        } else if template.contains(crate::mistral::TOOL_CALLS) {
            Self::Mistral
        } else if template.contains(crate::cohere::ACTION_START) {
            Self::Cohere
        } else if template.contains(crate::kimi::SECTION_BEGIN) {
            Self::Kimi
        } else if template.contains(crate::nemotron::CALLS_OPEN) {
            Self::Nemotron
        } else if template.contains(crate::minimax::SECTION_BEGIN) {
            Self::MiniMax
        } else if template.contains("<arg_key>") {
            Self::Glm
        } else if template.contains(crate::qwen_xml::FUNCTION_OPEN) {
            Self::QwenXml
        } else if template.contains("<tool_call>") {
            Self::Hermes
        } else if template.contains("<|python_tag|>")
            || (template.contains("tools") && template.contains("\"parameters\""))
        {
            Self::Llama3
        } else {
            Self::Generic
        }
    }
}

/// One parsed tool call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The function's name.
    pub name: String,
    /// Its arguments as JSON text.
    pub arguments: String,
}

/// How an answer is read for its calls: the format, and the offered
/// functions' parameter schemas (GLM writes a string argument bare, so
/// only its schema tells the string `"42"` from the number 42).
#[derive(Debug, Clone)]
pub struct CallReader {
    /// The format the template writes.
    pub format: ToolFormat,
    /// Each offered function's name and parameters schema.
    schemas: Arc<Vec<(String, Value)>>,
}

impl CallReader {
    /// A reader of `format` for the calls of `tools` (none: every GLM
    /// argument that parses as JSON is taken as JSON).
    pub fn new(format: ToolFormat, tools: Option<&Tools>) -> Self {
        let schemas = tools.map_or_else(Vec::new, |t| {
            let callable = t.callable().into_iter();
            callable.map(|(n, p)| (n.to_string(), p)).collect()
        });
        Self {
            format,
            schemas: Arc::new(schemas),
        }
    }

    /// The content and tool calls of a model's answer (as
    /// [`parse_output`], with the schemas for GLM's arguments).
    pub fn parse(&self, text: &str) -> (Option<String>, Vec<ToolCall>) {
        match self.format {
            ToolFormat::Glm => crate::glm::calls(text, |name, key| self.is_string(name, key)),
            ToolFormat::QwenXml => {
                crate::qwen_xml::calls(text, |name, key| self.is_string(name, key))
            }
            ToolFormat::MiniMax => {
                crate::minimax::calls(text, |name, key| self.is_string(name, key))
            }
            format => parse_output(format, text),
        }
    }

    /// Whether function `name`'s schema types its argument `key` a string
    /// (and nothing else).
    fn is_string(&self, name: &str, key: &str) -> bool {
        let schema = self.schemas.iter().find(|(n, _)| n == name);
        // A JSON pointer escapes `~` and `/` in the key.
        let key = key.replace('~', "~0").replace('/', "~1");
        let ty = schema.and_then(|(_, p)| p.pointer(&format!("/properties/{key}/type")));
        match ty {
            Some(Value::String(t)) => t == "string",
            Some(Value::Array(ts)) => ts.iter().all(|t| t == "string"),
            _ => false,
        }
    }
}

/// Reads `tools`, `tool_choice` and `parallel_tool_calls`; `None` when the
/// request offers no tools.
pub fn parse(map: &Map<String, Value>) -> Result<Option<Tools>, ApiError> {
    let list = match map.get("tools") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Array(list)) => list.clone(),
        Some(_) => return Err(ApiError::invalid("tools", "`tools` must be a list")),
    };
    for tool in &list {
        let ok = tool.get("type").and_then(Value::as_str) == Some("function")
            && tool
                .pointer("/function/name")
                .and_then(Value::as_str)
                .is_some_and(|n| !n.is_empty())
            && tool
                .pointer("/function/parameters")
                .is_none_or(Value::is_object);
        if !ok {
            return Err(ApiError::invalid(
                "tools",
                "each tool must be {\"type\": \"function\", \"function\": {\"name\", \"parameters\"}}",
            ));
        }
    }
    let names: Vec<&str> = list
        .iter()
        .filter_map(|t| t.pointer("/function/name").and_then(Value::as_str))
        .collect();
    let bad = || {
        ApiError::invalid(
            "tool_choice",
            "`tool_choice` must be none, auto, required or {\"type\": \"function\", \"function\": {\"name\"}}",
        )
    };
    let choice = match map.get("tool_choice") {
        None | Some(Value::Null) => ToolChoice::Auto,
        Some(Value::String(s)) => match s.as_str() {
            "none" => ToolChoice::None,
            "auto" => ToolChoice::Auto,
            "required" => ToolChoice::Required,
            _ => return Err(bad()),
        },
        Some(v) => {
            let name = v
                .pointer("/function/name")
                .and_then(Value::as_str)
                .ok_or_else(bad)?;
            if !names.contains(&name) {
                return Err(ApiError::invalid(
                    "tool_choice",
                    format!("`tool_choice` names {name:?}, which is not among the tools"),
                ));
            }
            ToolChoice::Named(name.to_string())
        }
    };
    if list.is_empty() && matches!(choice, ToolChoice::Required | ToolChoice::Named(_)) {
        return Err(ApiError::invalid("tool_choice", "no tools to call"));
    }
    let parallel = match map.get("parallel_tool_calls") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            return Err(ApiError::invalid(
                "parallel_tool_calls",
                "`parallel_tool_calls` must be a boolean",
            ))
        }
    };
    Ok(Some(Tools {
        list,
        choice,
        parallel,
    }))
}

impl Tools {
    /// Whether calls are offered and parsed (not `tool_choice: none`).
    pub fn active(&self) -> bool {
        self.choice != ToolChoice::None && !self.list.is_empty()
    }

    /// The functions a call may name, as (name, parameters schema).
    pub(crate) fn callable(&self) -> Vec<(&str, Value)> {
        self.list
            .iter()
            .filter_map(|t| {
                let name = t.pointer("/function/name")?.as_str()?;
                let keep = match &self.choice {
                    ToolChoice::Named(n) => n == name,
                    _ => true,
                };
                let params = t
                    .pointer("/function/parameters")
                    .cloned()
                    .unwrap_or_else(|| json!({"type": "object"}));
                keep.then_some((name, params))
            })
            .collect()
    }

    /// The schema of one call: its name and arguments under `args`.
    fn call_schema(&self, args: &str) -> Value {
        let calls: Vec<Value> = self
            .callable()
            .into_iter()
            .map(|(name, params)| {
                json!({
                    "type": "object",
                    "properties": {"name": {"const": name}, args: params},
                    "required": ["name", args],
                    "additionalProperties": false,
                })
            })
            .collect();
        json!({"anyOf": calls})
    }

    /// The grammar `format` writes for this request's callable functions.
    fn forced(&self, format: ForcedGrammar, model: &GrammarModel<'_>) -> OutputSpec {
        OutputSpec::Lark(format(&self.callable(), self.parallel, model))
    }

    /// The schema of one of Cohere's calls: a short numeric id, the
    /// function's name and its parameters.
    fn cohere_call_schema(&self) -> Value {
        let calls: Vec<Value> = self
            .callable()
            .into_iter()
            .map(|(name, params)| {
                json!({
                    "type": "object",
                    "properties": {
                        "tool_call_id": {"type": "string", "pattern": "^[0-9]{1,4}$"},
                        "tool_name": {"const": name},
                        "parameters": params,
                    },
                    "required": ["tool_call_id", "tool_name", "parameters"],
                    "additionalProperties": false,
                })
            })
            .collect();
        json!({"anyOf": calls})
    }

    /// The grammar the output must follow, if any: always for the generic
    /// format; for the others when a call is required or named.
    pub fn constraint(&self, format: ToolFormat, model: &GrammarModel<'_>) -> Option<OutputSpec> {
        if !self.active() {
            return None;
        }
        let forced = matches!(self.choice, ToolChoice::Required | ToolChoice::Named(_));
        let max = if self.parallel { json!(null) } else { json!(1) };
        match format {
            ToolFormat::Generic => {
                let mut calls =
                    json!({"type": "array", "items": self.call_schema("arguments"), "minItems": 1});
                if !max.is_null() {
                    calls["maxItems"] = max;
                }
                let call = json!({
                    "type": "object",
                    "properties": {"tool_calls": calls},
                    "required": ["tool_calls"],
                    "additionalProperties": false,
                });
                let answer = json!({
                    "type": "object",
                    "properties": {"response": {"type": "string"}},
                    "required": ["response"],
                    "additionalProperties": false,
                });
                let schema = if forced {
                    call
                } else {
                    json!({"anyOf": [call, answer]})
                };
                Some(OutputSpec::JsonSchema(schema))
            }
            _ if !forced => None,
            ToolFormat::Harmony => Some(OutputSpec::Lark(crate::harmony::forced(
                &self.callable(),
                model,
            ))),
            // The action block at once (a required call skips the plan):
            // a JSON array of calls between the markers.
            ToolFormat::Cohere => {
                let mut calls =
                    json!({"type": "array", "items": self.cohere_call_schema(), "minItems": 1});
                if !max.is_null() {
                    calls["maxItems"] = max;
                }
                let (start, end) = (crate::cohere::ACTION_START, crate::cohere::ACTION_END);
                Some(OutputSpec::Lark(format!(
                    "start: {} %json {calls} {}\n",
                    model.marker(start),
                    model.marker(end)
                )))
            }
            ToolFormat::Mistral => Some(self.forced(crate::mistral::forced, model)),
            ToolFormat::Glm => Some(self.forced(crate::glm::forced, model)),
            ToolFormat::QwenXml => Some(self.forced(crate::qwen_xml::forced, model)),
            ToolFormat::MiniMax => Some(self.forced(crate::minimax::forced, model)),
            ToolFormat::DeepSeek => Some(self.forced(crate::deepseek::forced, model)),
            ToolFormat::Kimi => Some(self.forced(crate::kimi::forced, model)),
            ToolFormat::Nemotron => Some(self.forced(crate::nemotron::forced, model)),
            ToolFormat::Llama3 => Some(OutputSpec::JsonSchema(self.call_schema("parameters"))),
            ToolFormat::Hermes => {
                let schema = self.call_schema("arguments");
                let repeat = if self.parallel { "+" } else { "" };
                Some(OutputSpec::Lark(format!(
                    "start: call{repeat}\ncall: \"<tool_call>\\n\" %json {schema} \"\\n</tool_call>\"\n"
                )))
            }
        }
    }

    /// The messages for the template, and the tools to hand it: the
    /// generic format describes the tools in a system message and writes
    /// earlier calls as the JSON it asks for.
    pub fn prepare(&self, format: ToolFormat, messages: Vec<Value>) -> (Vec<Value>, Option<Value>) {
        if !self.active() {
            return (format.history(messages), None);
        }
        if format != ToolFormat::Generic {
            let tools = Some(Value::Array(self.list.clone()));
            return (format.history(messages), tools);
        }
        let functions: Vec<Value> = self
            .list
            .iter()
            .filter_map(|t| t.get("function").cloned())
            .collect();
        let guide = format!(
            "You can call these functions:\n{}\nTo call functions, answer with JSON: \
             {{\"tool_calls\": [{{\"name\": \"<function name>\", \"arguments\": {{...}}}}]}}. \
             To answer without calling, answer with JSON: {{\"response\": \"<your answer>\"}}.",
            serde_json::to_string_pretty(&functions).unwrap_or_default()
        );
        let mut out: Vec<Value> = Vec::with_capacity(messages.len() + 1);
        let mut messages = messages.into_iter().peekable();
        match messages.peek() {
            Some(first) if first.get("role").and_then(Value::as_str) == Some("system") => {
                let mut first = messages.next().unwrap_or_default();
                let text = first.get("content").and_then(Value::as_str).unwrap_or("");
                first["content"] = json!(format!("{text}\n\n{guide}"));
                out.push(first);
            }
            _ => out.push(json!({"role": "system", "content": guide})),
        }
        out.extend(generic_history(messages));
        (out, None)
    }
}

/// The content and tool calls of a model's answer in `format`. Text that
/// does not parse as a call stays content.
pub fn parse_output(format: ToolFormat, text: &str) -> (Option<String>, Vec<ToolCall>) {
    let call = |v: &Value, args: &str| -> Option<ToolCall> {
        let name = v.get("name")?.as_str()?.to_string();
        let arguments = v.get(args).or_else(|| v.get("arguments"))?;
        Some(ToolCall {
            name,
            arguments: arguments.to_string(),
        })
    };
    let content = |s: &str| {
        let s = s.trim();
        (!s.is_empty()).then(|| s.to_string())
    };
    match format {
        ToolFormat::Harmony => {
            let answer = crate::harmony::parse(text);
            (answer.content, answer.calls)
        }
        ToolFormat::Glm => crate::glm::calls(text, |_, _| false),
        ToolFormat::QwenXml => crate::qwen_xml::calls(text, |_, _| false),
        ToolFormat::MiniMax => crate::minimax::calls(text, |_, _| false),
        ToolFormat::DeepSeek => crate::deepseek::calls(text),
        ToolFormat::Mistral => crate::mistral::calls(text),
        ToolFormat::Cohere => crate::cohere::calls(text),
        ToolFormat::Kimi => crate::kimi::calls(text),
        ToolFormat::Nemotron => crate::nemotron::calls(text),
        ToolFormat::Hermes => {
            let (mut rest, mut calls, mut outside) = (text, Vec::new(), String::new());
            while let Some(start) = rest.find("<tool_call>") {
                let after = &rest[start + "<tool_call>".len()..];
                let Some(end) = after.find("</tool_call>") else {
                    break;
                };
                match serde_json::from_str::<Value>(after[..end].trim())
                    .ok()
                    .and_then(|v| call(&v, "arguments"))
                {
                    Some(c) => {
                        outside.push_str(&rest[..start]);
                        calls.push(c);
                    }
                    None => outside.push_str(
                        &rest[..start + "<tool_call>".len() + end + "</tool_call>".len()],
                    ),
                }
                rest = &after[end + "</tool_call>".len()..];
            }
            outside.push_str(rest);
            (content(&outside), calls)
        }
        ToolFormat::Llama3 => {
            let body = text.trim().trim_start_matches("<|python_tag|>").trim();
            match serde_json::from_str::<Value>(body)
                .ok()
                .and_then(|v| call(&v, "parameters"))
            {
                Some(c) => (None, vec![c]),
                None => (content(text), Vec::new()),
            }
        }
        ToolFormat::Generic => match serde_json::from_str::<Value>(text.trim()) {
            Ok(v) if v.get("tool_calls").is_some_and(Value::is_array) => {
                let calls: Vec<ToolCall> = v["tool_calls"]
                    .as_array()
                    .map(|a| a.iter().filter_map(|c| call(c, "arguments")).collect())
                    .unwrap_or_default();
                // No call that parses: the answer stays, as content.
                if calls.is_empty() {
                    (content(text), calls)
                } else {
                    (
                        v.get("content").and_then(Value::as_str).and_then(content),
                        calls,
                    )
                }
            }
            Ok(v) if v.get("response").is_some_and(Value::is_string) => {
                (v["response"].as_str().map(str::to_string), Vec::new())
            }
            _ => (content(text), Vec::new()),
        },
    }
}

/// The reasoning of a model's answer in `format`, where the format
/// separates it (harmony's `analysis` channel, Cohere's plan).
pub fn reasoning_of(format: ToolFormat, text: &str) -> Option<String> {
    match format {
        ToolFormat::Harmony => crate::harmony::parse(text).reasoning,
        ToolFormat::Cohere => crate::cohere::reasoning(text),
        _ => None,
    }
}

static NEXT_CALL: AtomicU64 = AtomicU64::new(1);

/// `message.tool_calls` for `calls` (each with a fresh id); `index` set
/// for a stream's delta.
pub fn calls_json(calls: &[ToolCall], indexed: bool) -> Value {
    let salt = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let calls: Vec<Value> = calls
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let n = NEXT_CALL.fetch_add(1, Ordering::Relaxed);
            let mut v = json!({
                "id": format!("call_{salt:08x}{n:08x}"),
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments},
            });
            if indexed {
                v["index"] = json!(i);
            }
            v
        })
        .collect();
    Value::Array(calls)
}

#[cfg(test)]
mod tests;
