//! Cohere's tool calls (Command R7B, Command A): an answer is blocks
//! between control tokens, a plan in `<|START_THINKING|>…<|END_THINKING|>`,
//! calls in `<|START_ACTION|>…<|END_ACTION|>` as one JSON array of
//! `{"tool_call_id", "tool_name", "parameters"}`, and the reply to the
//! user in `<|START_RESPONSE|>…<|END_RESPONSE|>`. The plan becomes the
//! message's `reasoning_content`, the calls its `tool_calls`, the reply
//! its content.
//!
//! Cohere's templates write a history's calls back with `tojson` of their
//! arguments and number the calls themselves, so [`history`] gives them
//! objects, and the plan under both names the templates read it by
//! (`tool_plan` in Cohere's, `reasoning_content` in llama.cpp's copy).

use serde_json::Value;

use crate::tools::{arrays, object_arguments, ToolCall};

/// Opens a block of calls; a template that writes it writes Cohere's.
pub const ACTION_START: &str = "<|START_ACTION|>";
/// Closes it.
pub const ACTION_END: &str = "<|END_ACTION|>";
const THINKING_START: &str = "<|START_THINKING|>";
const THINKING_END: &str = "<|END_THINKING|>";
const RESPONSE_START: &str = "<|START_RESPONSE|>";
const RESPONSE_END: &str = "<|END_RESPONSE|>";

/// The blocks of an answer.
#[derive(Debug, Default, PartialEq)]
struct Blocks {
    reasoning: String,
    calls: Vec<ToolCall>,
    content: String,
}

/// Reads `text` block by block. Text outside every block is content, and
/// so is an action block that does not read as calls (its markers kept);
/// a block cut off by the end of the answer runs to it.
fn blocks(text: &str) -> Blocks {
    let mut out = Blocks::default();
    let mut rest = text;
    loop {
        let next = [THINKING_START, ACTION_START, RESPONSE_START]
            .into_iter()
            .filter_map(|m| rest.find(m).map(|at| (at, m)))
            .min();
        let Some((at, marker)) = next else {
            out.content.push_str(rest);
            return out;
        };
        out.content.push_str(&rest[..at]);
        let after = &rest[at + marker.len()..];
        let end = match marker {
            THINKING_START => THINKING_END,
            ACTION_START => ACTION_END,
            _ => RESPONSE_END,
        };
        let (body, tail, closed) = match after.find(end) {
            Some(i) => (&after[..i], &after[i + end.len()..], true),
            None => (after, "", false),
        };
        match marker {
            THINKING_START => out.reasoning.push_str(body),
            ACTION_START => match read_calls(body) {
                Some(calls) => out.calls.extend(calls),
                None => {
                    out.content.push_str(marker);
                    out.content.push_str(body);
                    if closed {
                        out.content.push_str(end);
                    }
                }
            },
            _ => out.content.push_str(body),
        }
        rest = tail;
    }
}

/// The calls of one action block: a JSON array of objects each with a
/// `tool_name` and object `parameters` (or JSON text of one).
fn read_calls(body: &str) -> Option<Vec<ToolCall>> {
    arrays::read(body, ("tool_name", "parameters"))
}

/// The content and calls of a Cohere answer.
pub fn calls(text: &str) -> (Option<String>, Vec<ToolCall>) {
    let b = blocks(text);
    let content = b.content.trim();
    ((!content.is_empty()).then(|| content.to_string()), b.calls)
}

/// The plan of a Cohere answer, where it wrote one.
pub fn reasoning(text: &str) -> Option<String> {
    let reasoning = blocks(text).reasoning;
    let reasoning = reasoning.trim();
    (!reasoning.is_empty()).then(|| reasoning.to_string())
}

/// A conversation as Cohere's templates read it: the calls' arguments as
/// objects, and an assistant's `reasoning_content` also as its
/// `tool_plan` (where it has none).
pub fn history(messages: impl IntoIterator<Item = Value>) -> Vec<Value> {
    let mut out = object_arguments(messages);
    for m in &mut out {
        let plan = m
            .get("reasoning_content")
            .filter(|p| p.is_string())
            .cloned();
        if let (Some(plan), true) = (plan, m.get("tool_plan").is_none()) {
            m["tool_plan"] = plan;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::tools::{parse_output, reasoning_of, ToolFormat};

    /// A template of Command R7B's turns, written for this test (its
    /// tokens, its numbering of calls and its `tojson` of arguments as
    /// Cohere's tool-use template writes them).
    const TEMPLATE: &str = "{% set idx = namespace(value=0) %}{% for m in messages %}\
        {% if m.role == 'user' %}<|START_OF_TURN_TOKEN|><|USER_TOKEN|>{{ m.content }}\
        <|END_OF_TURN_TOKEN|>{% elif m.role == 'assistant' %}\
        <|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>{% if m.tool_calls %}<|START_THINKING|>\
        {{ m.tool_plan }}<|END_THINKING|><|START_ACTION|>[{% for tc in m.tool_calls %}\
        {\"tool_call_id\": \"{{ idx.value }}\", \"tool_name\": \"{{ tc.function.name }}\", \
        \"parameters\": {{ tc.function.arguments|tojson }}}{% if not loop.last %}, {% endif %}\
        {% set idx.value = idx.value + 1 %}{% endfor %}]<|END_ACTION|>{% else %}\
        <|START_RESPONSE|>{{ m.content }}<|END_RESPONSE|>{% endif %}<|END_OF_TURN_TOKEN|>\
        {% elif m.role == 'tool' %}<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>\
        <|START_TOOL_RESULT|>{{ m.content|tojson }}<|END_TOOL_RESULT|><|END_OF_TURN_TOKEN|>\
        {% endif %}{% endfor %}";

    #[test]
    fn a_plan_and_calls_parse_and_render_back() {
        assert_eq!(ToolFormat::of(TEMPLATE), ToolFormat::Cohere);
        let answer = "<|START_THINKING|>I will look up the weather, then the time.\
            <|END_THINKING|><|START_ACTION|>[\n    {\"tool_call_id\": \"0\", \"tool_name\": \
            \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"days\": 3}},\n    \
            {\"tool_call_id\": \"1\", \"tool_name\": \"get_time\", \"parameters\": {}}\n]\
            <|END_ACTION|>";
        let (content, calls) = parse_output(ToolFormat::Cohere, answer);
        assert_eq!(content, None);
        let names: Vec<&str> = calls.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["get_weather", "get_time"]);
        let args: Value = serde_json::from_str(&calls[0].arguments).unwrap();
        assert_eq!(args, json!({"city": "Paris", "days": 3}));
        let plan = reasoning_of(ToolFormat::Cohere, answer);
        assert_eq!(
            plan.as_deref(),
            Some("I will look up the weather, then the time.")
        );
        // Sent back as a client sends them (arguments as text, the plan as
        // reasoning_content), the calls render through the template and
        // parse back the same.
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
            json!({"role": "assistant", "content": null, "reasoning_content": plan,
                   "tool_calls": tool_calls}),
            json!({"role": "tool", "tool_call_id": "call_0", "content": "12 C"}),
        ]);
        let template = pagoda_engine::chat::ChatTemplate::new(TEMPLATE, "", "").unwrap();
        let rendered = template.render_with(&history, None, false).unwrap();
        let (_, again) = parse_output(ToolFormat::Cohere, &rendered);
        assert_eq!(again, calls, "{rendered}");
        assert_eq!(reasoning_of(ToolFormat::Cohere, &rendered), plan);
    }

    #[test]
    fn a_reply_is_the_content() {
        let answer = "<|START_RESPONSE|>It is 12 C in Paris.<|END_RESPONSE|>";
        assert_eq!(
            calls(answer),
            (Some("It is 12 C in Paris.".into()), Vec::new())
        );
        assert_eq!(reasoning(answer), None);
        // Cut off inside the reply: what came is the content.
        assert_eq!(
            calls("<|START_RESPONSE|>It is"),
            (Some("It is".into()), Vec::new())
        );
        assert_eq!(
            calls("Plain text."),
            (Some("Plain text.".into()), Vec::new())
        );
    }

    #[test]
    fn an_action_that_is_not_calls_stays_content() {
        // Not JSON, not an array, a call without a name or with
        // parameters that are not an object, text after the array.
        for body in [
            "get_weather(Paris)",
            "{\"tool_name\": \"f\", \"parameters\": {}}",
            "[{\"parameters\": {}}]",
            "[{\"tool_name\": \"f\", \"parameters\": [1]}]",
            "[{\"tool_name\": \"f\", \"parameters\": {}}] and more",
        ] {
            let answer = format!("{ACTION_START}{body}{ACTION_END}");
            let (content, calls) = calls(&answer);
            assert!(calls.is_empty(), "{body}: {calls:?}");
            assert_eq!(content.as_deref(), Some(answer.as_str()));
        }
        // Parameters given as JSON text are read as the object they hold.
        let (_, calls) =
            calls("<|START_ACTION|>[{\"tool_name\": \"f\", \"parameters\": \"{\\\"x\\\": 1}\"}]");
        assert_eq!(calls[0].arguments, r#"{"x":1}"#);
    }
}
