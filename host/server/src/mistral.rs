//! Mistral's tool calls, each after a `[TOOL_CALLS]` control token, in
//! either form Mistral's templates write: a JSON array of
//! `{"name", "arguments"}` objects (Mistral-Nemo, Mistral Small 3.1), or
//! `NAME[ARGS]{...}` per call (from the v11 tokenizer on: Mistral Small
//! 3.2, Magistral, Devstral, Ministral 3), with `[CALL_ID]ID` before
//! `[ARGS]` in some. The older templates also demand call ids of nine
//! letters and digits, which [`history`] gives every call of a
//! conversation.

use std::collections::{HashMap, HashSet};

use serde_json::{Deserializer, Value};

use crate::tools::{arrays, object_arguments, GrammarModel, ToolCall};

/// Opens each call (or the array of them).
pub const TOOL_CALLS: &str = "[TOOL_CALLS]";
const ARGS: &str = "[ARGS]";
const CALL_ID: &str = "[CALL_ID]";

/// Mistral's calls out of `text`: what follows each `[TOOL_CALLS]` that
/// reads as calls. The text before the first marker is the content; a
/// marker's text that does not read as calls stays in it, and so does
/// any text after a call's JSON.
pub fn calls(text: &str) -> (Option<String>, Vec<ToolCall>) {
    let mut pieces = text.split(TOOL_CALLS);
    let mut outside = pieces.next().unwrap_or_default().to_string();
    let mut calls = Vec::new();
    for piece in pieces {
        match read(piece) {
            Some((read, rest)) => {
                calls.extend(read);
                outside.push_str(rest);
            }
            None => {
                outside.push_str(TOOL_CALLS);
                outside.push_str(piece);
            }
        }
    }
    let content = outside.trim();
    ((!content.is_empty()).then(|| content.to_string()), calls)
}

/// The calls one marker's text holds, and the text after them.
fn read(piece: &str) -> Option<(Vec<ToolCall>, &str)> {
    let body = piece.trim_start();
    if body.starts_with('[') {
        let (array, rest) = first_json(body)?;
        let calls: Vec<ToolCall> = array
            .as_array()?
            .iter()
            .map(|c| call(c.get("name")?.as_str()?, c.get("arguments")?))
            .collect::<Option<_>>()?;
        return (!calls.is_empty()).then_some((calls, rest));
    }
    let (head, tail) = body.split_once(ARGS)?;
    let name = head
        .split_once(CALL_ID)
        .map_or(head, |(name, _)| name)
        .trim();
    let (arguments, rest) = first_json(tail)?;
    Some((vec![call(name, &arguments)?], rest))
}

/// A call of `name` with `arguments` (an object, or JSON text of one).
fn call(name: &str, arguments: &Value) -> Option<ToolCall> {
    if name.is_empty() || name.contains(char::is_whitespace) {
        return None;
    }
    let arguments = match arguments {
        Value::String(text) => serde_json::from_str(text).ok()?,
        other => other.clone(),
    };
    arguments.is_object().then(|| ToolCall {
        name: name.to_string(),
        arguments: arguments.to_string(),
    })
}

/// The first JSON value of `text` (after white space) and the text after
/// it.
fn first_json(text: &str) -> Option<(Value, &str)> {
    let mut values = Deserializer::from_str(text).into_iter::<Value>();
    let value = values.next()?.ok()?;
    Some((value, &text[values.byte_offset()..]))
}

/// The grammar of a required or named call of `callable` (name and
/// parameters schema each), one call or (`parallel`) more, in the syntax
/// the model's template writes: `[TOOL_CALLS]NAME[ARGS]{...}` per call
/// where it writes `[ARGS]`, else `[TOOL_CALLS]` and a JSON array of
/// `{"name", "arguments"}` objects.
pub fn forced(callable: &[(&str, Value)], parallel: bool, model: &GrammarModel<'_>) -> String {
    let calls = model.marker(TOOL_CALLS);
    if model.template.contains(ARGS) {
        let args = model.marker(ARGS);
        let each: Vec<String> = callable
            .iter()
            .map(|(name, params)| {
                let name = serde_json::to_string(name).unwrap_or_default();
                format!("{calls} {name} {args} %json {params}")
            })
            .collect();
        let repeat = if parallel { "+" } else { "" };
        return format!("start: call{repeat}\ncall: {}\n", each.join(" | "));
    }
    let array = arrays::schema(callable, parallel);
    format!("start: {calls} %json {array}\n")
}

/// A conversation as Mistral's templates read it: the calls' arguments as
/// objects, and every call id (an assistant's `tool_calls[].id`, a tool
/// message's `tool_call_id`) nine letters and digits, the same id for
/// the same call; a call without one gets one by its place. Ids already
/// of that shape stay, and no new one repeats them.
pub fn history(messages: impl IntoIterator<Item = Value>) -> Vec<Value> {
    let mut out = object_arguments(messages);
    let mut ids = Renamer::default();
    for m in &out {
        let calls = m.get("tool_calls").and_then(Value::as_array);
        let call_ids = calls.into_iter().flatten().filter_map(|c| c.get("id"));
        let result_id = m.get("tool_call_id");
        for id in call_ids.chain(result_id).filter_map(Value::as_str) {
            if is_mistral_id(id) {
                ids.taken.insert(id.to_string());
            }
        }
    }
    for m in &mut out {
        if let Some(calls) = m.get_mut("tool_calls").and_then(Value::as_array_mut) {
            for call in calls {
                let id = ids.rename(call.get("id").and_then(Value::as_str));
                call["id"] = Value::String(id);
            }
        }
        if let Some(id) = m.get("tool_call_id").and_then(Value::as_str) {
            let id = ids.rename(Some(id));
            m["tool_call_id"] = Value::String(id);
        }
    }
    out
}

/// The ids of one conversation: each client id's new one, and every id in
/// use.
#[derive(Default)]
struct Renamer {
    given: HashMap<String, String>,
    taken: HashSet<String>,
}

impl Renamer {
    /// `id` as Mistral's templates want it: kept where it is already nine
    /// letters and digits, else the one given it before or a new one
    /// (`None`, a call without an id: always a new one).
    fn rename(&mut self, id: Option<&str>) -> String {
        match id {
            Some(id) if is_mistral_id(id) => id.to_string(),
            Some(id) => match self.given.get(id) {
                Some(new) => new.clone(),
                None => {
                    let new = self.fresh();
                    self.given.insert(id.to_string(), new.clone());
                    new
                }
            },
            None => self.fresh(),
        }
    }

    /// The first `cNNNNNNNN` not in use (a finite search: a conversation
    /// holds far fewer than 10^8 ids).
    fn fresh(&mut self) -> String {
        let new = (self.taken.len()..100_000_000)
            .map(|n| format!("c{n:08}"))
            .find(|id| !self.taken.contains(id))
            .unwrap_or_default();
        self.taken.insert(new.clone());
        new
    }
}

/// Whether `id` is already as Mistral's templates want it.
fn is_mistral_id(id: &str) -> bool {
    id.len() == 9 && id.bytes().all(|b| b.is_ascii_alphanumeric())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::tools::walk;
    use crate::tools::{parse_output, ToolFormat};
    use pagoda_engine::structured::OutputSpec;

    /// Templates of Mistral's two call syntaxes, written for this test
    /// (their tokens and checks as Mistral Small 3.1's and 3.2's templates
    /// write them).
    const V7_TEMPLATE: &str = "{% for m in messages %}{% if m.role == 'user' %}[INST]\
        {{ m.content }}[/INST]{% elif m.role == 'assistant' %}{{ m.content or '' }}\
        {% if m.tool_calls %}[TOOL_CALLS][{% for tc in m.tool_calls %}\
        {% if tc.id is not defined or tc.id|length != 9 %}\
        {{ raise_exception('Tool call IDs should be alphanumeric strings with length 9!') }}\
        {% endif %}{% set out = tc.function|tojson %}{{ out[:-1] }}, \"id\": \"{{ tc.id }}\"}\
        {% if not loop.last %}, {% endif %}{% endfor %}]{% endif %}</s>\
        {% elif m.role == 'tool' %}[TOOL_RESULTS]{\"content\": {{ m.content|tojson }}, \
        \"call_id\": \"{{ m.tool_call_id }}\"}[/TOOL_RESULTS]{% endif %}{% endfor %}";
    const V11_TEMPLATE: &str = "{% for m in messages %}{% if m.role == 'user' %}[INST]\
        {{ m.content }}[/INST]{% elif m.role == 'assistant' %}{{ m.content or '' }}\
        {% for tc in m.tool_calls or [] %}{% set a = tc.function.arguments %}\
        {% if a is not string %}{% set a = a|tojson %}{% endif %}\
        [TOOL_CALLS]{{ tc.function.name }}[ARGS]{{ a }}{% endfor %}</s>\
        {% elif m.role == 'tool' %}[TOOL_RESULTS]{{ m.content }}[/TOOL_RESULTS]\
        {% endif %}{% endfor %}";

    #[test]
    fn mistral_calls_of_both_forms_parse_and_render_back() {
        for (template, answer) in [
            (
                V7_TEMPLATE,
                "Let me check.[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": \
                 {\"city\": \"Paris\", \"days\": 3}}, {\"name\": \"get_time\", \
                 \"arguments\": {}}]",
            ),
            (
                V11_TEMPLATE,
                "Let me check.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\", \"days\": 3}\
                 [TOOL_CALLS]get_time[CALL_ID]a1b2c3d4e[ARGS]{}",
            ),
        ] {
            assert_eq!(ToolFormat::of(template), ToolFormat::Mistral);
            let (content, calls) = parse_output(ToolFormat::Mistral, answer);
            assert_eq!(content.as_deref(), Some("Let me check."));
            let names: Vec<&str> = calls.iter().map(|c| c.name.as_str()).collect();
            assert_eq!(names, ["get_weather", "get_time"]);
            let args: Value = serde_json::from_str(&calls[0].arguments).unwrap();
            assert_eq!(args, json!({"city": "Paris", "days": 3}));
            assert_eq!(calls[1].arguments, "{}");
            // The calls as a client sends them back (OpenAI-style ids,
            // arguments as text) render through the template once the
            // history is prepared, and parse back to the same calls.
            let tool_calls: Vec<Value> = calls
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    json!({"id": format!("call_{i}_from_the_client"), "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments}})
                })
                .collect();
            let history = vec![
                json!({"role": "user", "content": "Weather?"}),
                json!({"role": "assistant", "content": "", "tool_calls": tool_calls}),
                json!({"role": "tool", "tool_call_id": "call_0_from_the_client", "content": "12 C"}),
            ];
            let source = template;
            let template = pagoda_engine::chat::ChatTemplate::new(source, "", "").unwrap();
            if source == V7_TEMPLATE {
                let raw = template.render_with(&history, None, false);
                assert!(raw.is_err(), "the template refuses long ids");
            }
            let history = super::history(history);
            let rendered = template.render_with(&history, None, false).unwrap();
            let (_, again) = parse_output(ToolFormat::Mistral, &rendered);
            assert_eq!(again, calls, "{rendered}");
            // The tool's result names its call by the call's new id.
            let id = history[1]["tool_calls"][0]["id"].as_str().unwrap();
            assert!(is_mistral_id(id));
            assert_eq!(history[2]["tool_call_id"], id);
        }
    }

    /// The forced grammar of each syntax: markers by id where they are
    /// control tokens, as text where not; over bytes, the path of the
    /// highest allowed byte reads back as one call.
    #[test]
    fn forced_calls_follow_the_template_s_syntax() {
        let callable = [("go", walk::one_digit())];
        let ids = |text: &str| match text {
            TOOL_CALLS => Some(5),
            ARGS => Some(32),
            _ => None,
        };
        let by_id = GrammarModel {
            control: &ids,
            template: V11_TEMPLATE,
        };
        let grammar = forced(&callable, true, &by_id);
        assert!(grammar.contains("<[5]> \"go\" <[32]>"), "{grammar}");
        for template in [V7_TEMPLATE, V11_TEMPLATE] {
            let model = GrammarModel {
                control: &|_| None,
                template,
            };
            let grammar = forced(&callable, false, &model);
            let (text, ended) = walk::path(&OutputSpec::Lark(grammar), 200, walk::highest);
            assert!(ended, "{text}");
            let (_, calls) = calls(&text);
            assert_eq!(calls.len(), 1, "{text}");
            assert_eq!(calls[0].name, "go");
        }
    }

    #[test]
    fn text_that_is_not_a_call_stays_content() {
        // A name with a space, arguments that are not an object, no
        // [ARGS], and an array holding a non-call: none is a call.
        for answer in [
            "Hm.[TOOL_CALLS]get weather[ARGS]{}",
            "Hm.[TOOL_CALLS]f[ARGS][1, 2]",
            "Hm.[TOOL_CALLS]f{\"x\": 1}",
            "Hm.[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}, 3]",
        ] {
            let (content, calls) = calls(answer);
            assert!(calls.is_empty(), "{answer}: {calls:?}");
            assert_eq!(content.as_deref(), Some(answer));
        }
        assert_eq!(calls("Just text."), (Some("Just text.".into()), Vec::new()));
        // Arguments given as JSON text are read as the object they hold;
        // text after a call's JSON is content.
        let (content, calls) = calls("[TOOL_CALLS]f[ARGS]\"{\\\"x\\\": 1}\" done");
        assert_eq!(content.as_deref(), Some("done"));
        assert_eq!(calls[0].arguments, r#"{"x":1}"#);
    }

    #[test]
    fn ids_already_of_nine_characters_are_kept() {
        let history = history(vec![
            json!({"role": "assistant", "tool_calls": [
                {"id": "abcDEF123", "function": {"name": "f", "arguments": "{}"}},
                {"function": {"name": "g", "arguments": "{}"}},
            ]}),
            json!({"role": "tool", "tool_call_id": "abcDEF123", "content": "1"}),
        ]);
        assert_eq!(history[0]["tool_calls"][0]["id"], "abcDEF123");
        let fresh = history[0]["tool_calls"][1]["id"].as_str().unwrap();
        assert!(is_mistral_id(fresh) && fresh != "abcDEF123");
        assert_eq!(history[1]["tool_call_id"], "abcDEF123");
        assert_eq!(
            history[0]["tool_calls"][0]["function"]["arguments"],
            json!({})
        );
        // A kept id of the new ids' own shape is not given again.
        let history = super::history(vec![json!({"role": "assistant", "tool_calls": [
            {"id": "x", "function": {"name": "f", "arguments": "{}"}},
            {"id": "c00000000", "function": {"name": "g", "arguments": "{}"}},
            {"id": "c00000001", "function": {"name": "h", "arguments": "{}"}},
        ]})]);
        let ids: Vec<&str> = (0..3)
            .map(|i| history[0]["tool_calls"][i]["id"].as_str().unwrap())
            .collect();
        assert!(
            is_mistral_id(ids[0]) && !ids[1..].contains(&ids[0]),
            "{ids:?}"
        );
    }
}
