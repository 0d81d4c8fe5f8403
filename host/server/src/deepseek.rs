//! DeepSeek's tool calls: a `<｜tool▁calls▁begin｜>` section of
//! `<｜tool▁call▁begin｜>…<｜tool▁call▁end｜>` blocks, each in one of the two
//! forms DeepSeek's templates write. V3 and R1: `function<｜tool▁sep｜>NAME`,
//! then the arguments in a fenced JSON block. V3.1 and later:
//! `NAME<｜tool▁sep｜>ARGUMENTS`, the JSON bare.

use serde_json::Value;

use crate::tools::{GrammarModel, ToolCall};

/// Opens the section of calls.
pub const CALLS_BEGIN: &str = "<｜tool▁calls▁begin｜>";
const CALLS_END: &str = "<｜tool▁calls▁end｜>";
const CALL_BEGIN: &str = "<｜tool▁call▁begin｜>";
const CALL_END: &str = "<｜tool▁call▁end｜>";
const SEP: &str = "<｜tool▁sep｜>";

/// DeepSeek's calls out of `text`: each call block whose body reads as a
/// name and a JSON object of arguments. The text before the section is the
/// content; a block that does not read so stays in it, as does any text
/// after the section.
pub fn calls(text: &str) -> (Option<String>, Vec<ToolCall>) {
    let (mut outside, mut calls) = (String::new(), Vec::new());
    // The section, or (a model may open a call without the section's
    // tag) the first call on.
    let section = match (text.find(CALLS_BEGIN), text.find(CALL_BEGIN)) {
        (Some(start), _) => Some((start, start + CALLS_BEGIN.len())),
        (None, Some(start)) => Some((start, start)),
        (None, None) => None,
    };
    let mut rest = text;
    if let Some((before, from)) = section {
        outside.push_str(&text[..before]);
        rest = &text[from..];
        while let Some(start) = rest.find(CALL_BEGIN) {
            let after = &rest[start + CALL_BEGIN.len()..];
            let Some(end) = after.find(CALL_END) else {
                break;
            };
            match call(&after[..end]) {
                Some(c) => {
                    outside.push_str(&rest[..start]);
                    calls.push(c);
                }
                None => outside.push_str(&rest[..start + CALL_BEGIN.len() + end + CALL_END.len()]),
            }
            rest = &after[end + CALL_END.len()..];
        }
        rest = rest.trim_start().strip_prefix(CALLS_END).unwrap_or(rest);
    }
    outside.push_str(rest);
    let content = outside.trim();
    ((!content.is_empty()).then(|| content.to_string()), calls)
}

/// One call's body, in either form.
fn call(body: &str) -> Option<ToolCall> {
    let (head, tail) = body.split_once(SEP)?;
    let (name, arguments) = match head.trim() {
        // V3's: `function`, the name on the rest of the line, then a
        // fenced block.
        "function" => {
            let (name, fenced) = tail.split_once('\n').unwrap_or((tail, ""));
            let fenced = fenced.trim();
            let inner = fenced
                .strip_prefix("```json")
                .or_else(|| fenced.strip_prefix("```"))?;
            (name.trim(), inner.strip_suffix("```")?.trim())
        }
        name => (name, tail.trim()),
    };
    if name.is_empty() || name.contains(char::is_whitespace) {
        return None;
    }
    let arguments: Value = serde_json::from_str(arguments).ok()?;
    arguments.is_object().then(|| ToolCall {
        name: name.to_string(),
        arguments: arguments.to_string(),
    })
}

/// The grammar of a required or named call of `callable` (name and
/// parameters schema each), one call or (`parallel`) more, in the syntax
/// the model's template writes: V3's fenced JSON after `function` and the
/// name where it writes a fence, else V3.1's bare JSON after the name.
pub fn forced(callable: &[(&str, Value)], parallel: bool, model: &GrammarModel<'_>) -> String {
    let [begin, end, call, sep, call_end] =
        [CALLS_BEGIN, CALLS_END, CALL_BEGIN, SEP, CALL_END].map(|m| model.marker(m));
    let fenced = model.template.contains("```json");
    let each: Vec<String> = callable
        .iter()
        .map(|(name, params)| {
            let quoted = serde_json::to_string(name).unwrap_or_default();
            if fenced {
                let open = serde_json::to_string(&format!("{name}\n```json\n")).unwrap_or_default();
                format!("{call} \"function\" {sep} {open} %json {params} \"\\n```\" {call_end}")
            } else {
                format!("{call} {quoted} {sep} %json {params} {call_end}")
            }
        })
        .collect();
    let repeat = if parallel { "+" } else { "" };
    format!(
        "start: {begin} call{repeat} {end}\ncall: {}\n",
        each.join(" | ")
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::tools::walk;
    use crate::tools::{parse_output, ToolFormat};

    /// Templates of DeepSeek's two call syntaxes, written for this test
    /// (their tags as DeepSeek-V3's and V3.1's templates write them; the
    /// arguments as the JSON text the client sends back).
    const V3_TEMPLATE: &str = "{% for m in messages %}{% if m.role == 'user' %}<｜User｜>\
        {{ m.content }}{% else %}<｜Assistant｜>{{ m.content or '' }}\
        {% if m.tool_calls %}<｜tool▁calls▁begin｜>{% for tc in m.tool_calls %}\
        <｜tool▁call▁begin｜>function<｜tool▁sep｜>{{ tc.function.name }}\n```json\n\
        {{ tc.function.arguments }}\n```<｜tool▁call▁end｜>{% endfor %}\
        <｜tool▁calls▁end｜>{% endif %}{% endif %}{% endfor %}<｜Assistant｜>";
    const V31_TEMPLATE: &str = "{% for m in messages %}{% if m.role == 'user' %}<｜User｜>\
        {{ m.content }}{% else %}<｜Assistant｜>{{ m.content or '' }}\
        {% if m.tool_calls %}<｜tool▁calls▁begin｜>{% for tc in m.tool_calls %}\
        <｜tool▁call▁begin｜>{{ tc.function.name }}<｜tool▁sep｜>\
        {{ tc.function.arguments }}<｜tool▁call▁end｜>{% endfor %}\
        <｜tool▁calls▁end｜>{% endif %}{% endif %}{% endfor %}<｜Assistant｜>";

    #[test]
    fn deepseek_calls_of_both_forms_parse_and_render_back() {
        for (template, answer) in [
            (
                V3_TEMPLATE,
                "Let me check.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>\
                 get_weather\n```json\n{\"city\": \"Tokyo\", \"days\": 3}\n```<｜tool▁call▁end｜>\
                 <｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n{}\n```\
                 <｜tool▁call▁end｜><｜tool▁calls▁end｜>",
            ),
            (
                V31_TEMPLATE,
                "Let me check.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather\
                 <｜tool▁sep｜>{\"city\": \"Tokyo\", \"days\": 3}<｜tool▁call▁end｜>\
                 <｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{}<｜tool▁call▁end｜>\
                 <｜tool▁calls▁end｜>",
            ),
        ] {
            assert_eq!(ToolFormat::of(template), ToolFormat::DeepSeek);
            let (content, calls) = parse_output(ToolFormat::DeepSeek, answer);
            assert_eq!(content.as_deref(), Some("Let me check."));
            let names: Vec<&str> = calls.iter().map(|c| c.name.as_str()).collect();
            assert_eq!(names, ["get_weather", "get_time"]);
            let args: Value = serde_json::from_str(&calls[0].arguments).unwrap();
            assert_eq!(args, json!({"city": "Tokyo", "days": 3}));
            assert_eq!(calls[1].arguments, "{}");
            // The calls as a client sends them back render through the
            // template, and the rendering parses back to the same calls.
            let tool_calls: Vec<Value> = calls
                .iter()
                .map(|c| {
                    json!({"type": "function", "function": {
                    "name": c.name, "arguments": c.arguments}})
                })
                .collect();
            let history = vec![
                json!({"role": "user", "content": "Weather?"}),
                json!({"role": "assistant", "content": "", "tool_calls": tool_calls}),
            ];
            let template = pagoda_engine::chat::ChatTemplate::new(template, "", "").unwrap();
            let rendered = template.render_with(&history, None, false).unwrap();
            let (_, again) = parse_output(ToolFormat::DeepSeek, &rendered);
            assert_eq!(again, calls, "{rendered}");
        }
    }

    /// Over bytes (markers as text), the highest allowed byte's path
    /// through each syntax's forced grammar (one call) reads back as it.
    #[test]
    fn forced_calls_follow_the_template_s_syntax() {
        use pagoda_engine::structured::OutputSpec;
        let callable = [("go", walk::one_digit())];
        for template in [V3_TEMPLATE, V31_TEMPLATE] {
            let model = GrammarModel {
                control: &|_| None,
                template,
            };
            let grammar = forced(&callable, false, &model);
            let (text, ended) = walk::path(&OutputSpec::Lark(grammar), 300, walk::highest);
            assert!(ended, "{text}");
            let (_, calls) = calls(&text);
            assert_eq!(calls.len(), 1, "{text}");
            assert_eq!(calls[0].name, "go");
        }
    }

    #[test]
    fn blocks_that_are_not_calls_stay_content() {
        // A name with a space, arguments that are not an object, an
        // unclosed fence, and an unclosed block: none is a call.
        let answer = "Hm.<｜tool▁calls▁begin｜>\
            <｜tool▁call▁begin｜>get weather<｜tool▁sep｜>{}<｜tool▁call▁end｜>\
            <｜tool▁call▁begin｜>f<｜tool▁sep｜>[1, 2]<｜tool▁call▁end｜>\
            <｜tool▁call▁begin｜>function<｜tool▁sep｜>g\n```json\n{}<｜tool▁call▁end｜>\
            <｜tool▁call▁begin｜>h<｜tool▁sep｜>{}";
        let (content, calls) = calls(answer);
        assert!(calls.is_empty(), "{calls:?}");
        let content = content.unwrap();
        assert!(content.starts_with("Hm."));
        assert!(content.contains("get weather") && content.contains("[1, 2]"));
        assert!(content.ends_with("<｜tool▁call▁begin｜>h<｜tool▁sep｜>{}"));
        // Plain text, and a call without the section's tag.
        assert_eq!(calls_of("Just text."), (Some("Just text.".into()), 0));
        let bare = "<｜tool▁call▁begin｜>f<｜tool▁sep｜>{\"x\": 1}<｜tool▁call▁end｜>";
        assert_eq!(calls_of(bare), (None, 1));
    }

    fn calls_of(text: &str) -> (Option<String>, usize) {
        let (content, calls) = calls(text);
        (content, calls.len())
    }
}
