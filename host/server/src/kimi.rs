//! Kimi K2's tool calls: a `<|tool_calls_section_begin|>` section of
//! `<|tool_call_begin|>ID<|tool_call_argument_begin|>ARGUMENTS<|tool_call_end|>`
//! blocks, each ID `functions.NAME:INDEX` (the call's function and its
//! place in the conversation), the arguments bare JSON.
//!
//! Kimi's template writes a history's call ids as they are, so
//! [`history`] gives every call an id of that shape (the same one in the
//! tool message that answers it) and its arguments as objects.

use std::collections::HashMap;

use serde_json::Value;

use crate::tools::{object_arguments, GrammarModel, ToolCall};

/// Opens the section of calls; a template that writes it writes Kimi's.
pub const SECTION_BEGIN: &str = "<|tool_calls_section_begin|>";
const SECTION_END: &str = "<|tool_calls_section_end|>";
const CALL_BEGIN: &str = "<|tool_call_begin|>";
const ARGUMENT_BEGIN: &str = "<|tool_call_argument_begin|>";
const CALL_END: &str = "<|tool_call_end|>";

/// Kimi's calls out of `text`: each call block whose id names a function
/// and whose arguments are a JSON object. The text before the section is
/// the content; a block that does not read so stays in it, as does any
/// text after the section.
pub fn calls(text: &str) -> (Option<String>, Vec<ToolCall>) {
    let (mut outside, mut calls) = (String::new(), Vec::new());
    let mut rest = text;
    let section = text.find(SECTION_BEGIN).or_else(|| text.find(CALL_BEGIN));
    if let Some(start) = section {
        outside.push_str(&text[..start]);
        rest = &text[start..];
        rest = rest.strip_prefix(SECTION_BEGIN).unwrap_or(rest);
        while let Some(at) = rest.find(CALL_BEGIN) {
            let after = &rest[at + CALL_BEGIN.len()..];
            let Some(end) = after.find(CALL_END) else {
                break;
            };
            match call(&after[..end]) {
                Some(c) => {
                    outside.push_str(&rest[..at]);
                    calls.push(c);
                }
                None => outside.push_str(&rest[..at + CALL_BEGIN.len() + end + CALL_END.len()]),
            }
            rest = &after[end + CALL_END.len()..];
        }
        rest = rest.trim_start().strip_prefix(SECTION_END).unwrap_or(rest);
    }
    outside.push_str(rest);
    let content = outside.trim();
    ((!content.is_empty()).then(|| content.to_string()), calls)
}

/// One call's body: its id, then the arguments.
fn call(body: &str) -> Option<ToolCall> {
    let (id, arguments) = body.split_once(ARGUMENT_BEGIN)?;
    let name = name_of(id.trim())?;
    let arguments: Value = serde_json::from_str(arguments.trim()).ok()?;
    arguments.is_object().then(|| ToolCall {
        name: name.to_string(),
        arguments: arguments.to_string(),
    })
}

/// The function an id `functions.NAME:INDEX` names (`NAME:INDEX` and a
/// bare `NAME` read too).
fn name_of(id: &str) -> Option<&str> {
    let id = id.strip_prefix("functions.").unwrap_or(id);
    let name = id.rsplit_once(':').map_or(id, |(name, _)| name);
    let bad = name.is_empty() || name.contains(char::is_whitespace);
    (!bad).then_some(name)
}

/// A conversation as Kimi's template reads it: the calls' arguments as
/// objects, and every call id `functions.NAME:INDEX`, numbered through the
/// conversation, the same id in the tool message that answers the call.
/// Ids already of that shape for their function stay.
pub fn history(messages: impl IntoIterator<Item = Value>) -> Vec<Value> {
    let mut out = object_arguments(messages);
    let mut renamed: HashMap<String, String> = HashMap::new();
    let mut index = 0usize;
    for m in &mut out {
        if let Some(calls) = m.get_mut("tool_calls").and_then(Value::as_array_mut) {
            for call in calls {
                let name = call
                    .pointer("/function/name")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
                let old = call.get("id").and_then(Value::as_str).map(str::to_string);
                let kept = old
                    .as_deref()
                    .filter(|id| id.starts_with("functions.") && name_of(id) == Some(&name));
                let id = match kept {
                    Some(id) => id.to_string(),
                    None => format!("functions.{name}:{index}"),
                };
                index += 1;
                if let Some(old) = old {
                    renamed.insert(old, id.clone());
                }
                call["id"] = Value::String(id);
            }
        }
        let answered = m.get("tool_call_id").and_then(Value::as_str);
        if let Some(id) = answered.and_then(|id| renamed.get(id)).cloned() {
            m["tool_call_id"] = Value::String(id);
        }
    }
    out
}

/// The grammar of a required or named call of `callable` (name and
/// parameters schema each), one call or (`parallel`) more: the section,
/// each call's id and its arguments.
pub fn forced(callable: &[(&str, Value)], parallel: bool, model: &GrammarModel<'_>) -> String {
    let [begin, end, call, args, call_end] = [
        SECTION_BEGIN,
        SECTION_END,
        CALL_BEGIN,
        ARGUMENT_BEGIN,
        CALL_END,
    ]
    .map(|m| model.marker(m));
    let each: Vec<String> = callable
        .iter()
        .map(|(name, params)| {
            let id = serde_json::to_string(&format!("functions.{name}:")).unwrap_or_default();
            format!("{call} {id} INDEX {args} %json {params} {call_end}")
        })
        .collect();
    let repeat = if parallel { "+" } else { "" };
    format!(
        "start: {begin} call{repeat} {end}\ncall: {}\nINDEX: /[0-9]{{1,4}}/\n",
        each.join(" | ")
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::tools::walk;
    use crate::tools::{parse_output, ToolFormat};

    /// A template of Kimi K2's calls and tool results, written for this
    /// test (its tokens, ids and `## Return of` as Kimi's writes them).
    const TEMPLATE: &str = "{% for m in messages %}{% if m.role == 'user' %}<|im_user|>user\
        <|im_middle|>{{ m.content }}<|im_end|>{% elif m.role == 'assistant' %}<|im_assistant|>\
        assistant<|im_middle|>{{ m.content or '' }}{% if m.tool_calls %}\
        <|tool_calls_section_begin|>{% for tc in m.tool_calls %}<|tool_call_begin|>{{ tc.id }}\
        <|tool_call_argument_begin|>{% if tc.function.arguments is string %}\
        {{ tc.function.arguments }}{% else %}{{ tc.function.arguments|tojson }}{% endif %}\
        <|tool_call_end|>{% endfor %}<|tool_calls_section_end|>{% endif %}<|im_end|>\
        {% elif m.role == 'tool' %}<|im_system|>tool<|im_middle|>## Return of \
        {{ m.tool_call_id }}\n{{ m.content }}<|im_end|>{% endif %}{% endfor %}";

    #[test]
    fn kimi_calls_parse_and_render_back() {
        assert_eq!(ToolFormat::of(TEMPLATE), ToolFormat::Kimi);
        let answer = "Let me check.<|tool_calls_section_begin|><|tool_call_begin|>\
            functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"Paris\", \"days\": 3}\
            <|tool_call_end|><|tool_call_begin|>functions.get_time:1\
            <|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>";
        let (content, calls) = parse_output(ToolFormat::Kimi, answer);
        assert_eq!(content.as_deref(), Some("Let me check."));
        let names: Vec<&str> = calls.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["get_weather", "get_time"]);
        let args: Value = serde_json::from_str(&calls[0].arguments).unwrap();
        assert_eq!(args, json!({"city": "Paris", "days": 3}));
        // Sent back with OpenAI-style ids, the calls render with Kimi's
        // ids and parse back the same; the tool's result names its call.
        let tool_calls: Vec<Value> = calls
            .iter()
            .enumerate()
            .map(|(i, c)| {
                json!({"id": format!("call_{i}"), "type": "function",
                "function": {"name": c.name, "arguments": c.arguments}})
            })
            .collect();
        let history = history(vec![
            json!({"role": "user", "content": "Weather?"}),
            json!({"role": "assistant", "content": "", "tool_calls": tool_calls}),
            json!({"role": "tool", "tool_call_id": "call_1", "content": "noon"}),
        ]);
        assert_eq!(history[1]["tool_calls"][0]["id"], "functions.get_weather:0");
        assert_eq!(history[2]["tool_call_id"], "functions.get_time:1");
        let template = pagoda_engine::chat::ChatTemplate::new(TEMPLATE, "", "").unwrap();
        let rendered = template.render_with(&history, None, false).unwrap();
        let (_, again) = parse_output(ToolFormat::Kimi, &rendered);
        assert_eq!(again, calls, "{rendered}");
        assert!(
            rendered.contains("## Return of functions.get_time:1"),
            "{rendered}"
        );
    }

    #[test]
    fn text_that_is_not_a_call_stays_content() {
        for answer in [
            "Hm.<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0{}<|tool_call_end|>",
            "Hm.<|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>[1]<|tool_call_end|>",
            "Hm.<|tool_call_begin|>functions.get weather:0<|tool_call_argument_begin|>{}\
             <|tool_call_end|>",
        ] {
            let (_, calls) = calls(answer);
            assert!(calls.is_empty(), "{answer}: {calls:?}");
        }
        assert_eq!(calls("Plain."), (Some("Plain.".into()), Vec::new()));
        // Ids without the `functions.` prefix or an index still name it.
        let (_, found) =
            calls("<|tool_call_begin|>f<|tool_call_argument_begin|>{}<|tool_call_end|>");
        assert_eq!(found[0].name, "f");
    }

    /// Over bytes (markers as text), the highest allowed byte's path
    /// through the forced grammar reads back as one call of the function.
    #[test]
    fn forced_calls_read_back() {
        use pagoda_engine::structured::OutputSpec;
        let callable = [("go", walk::one_digit())];
        let model = GrammarModel {
            control: &|_| None,
            template: TEMPLATE,
        };
        let grammar = forced(&callable, false, &model);
        let (text, ended) = walk::path(&OutputSpec::Lark(grammar), 300, walk::highest);
        assert!(ended, "{text}");
        let (_, calls) = calls(&text);
        assert_eq!(calls.len(), 1, "{text}");
        assert_eq!(calls[0].name, "go");
    }
}
