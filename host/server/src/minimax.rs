//! MiniMax-M2's tool calls: a `<minimax:tool_call>` section of
//! `<invoke name="NAME">` blocks, each of `<parameter name="KEY">VALUE
//! </parameter>` tags. The template writes a string value bare and any
//! other as JSON, so (as GLM's) only the function's schema tells the
//! string `"42"` from the number 42: [`calls`] asks it through `is_string`.

use serde_json::{Map, Value};

use crate::tools::{tagged, GrammarModel, ToolCall};

/// The section's opening tag, which a MiniMax-M2 template writes:
/// [`ToolFormat::of`](crate::tools::ToolFormat::of) looks for it.
pub const SECTION_BEGIN: &str = "<minimax:tool_call>";
const SECTION_END: &str = "</minimax:tool_call>";

/// The calls out of `text`: each `<invoke>` block of each section whose
/// body is its parameters; a parameter `is_string` says is a string is
/// taken as written, any other as JSON where it parses (else as a string).
/// A block that does not read so stays content, as does the text around
/// the sections.
pub fn calls(
    text: &str,
    is_string: impl Fn(&str, &str) -> bool,
) -> (Option<String>, Vec<ToolCall>) {
    let (outside, sections) = tagged::blocks(text, (SECTION_BEGIN, SECTION_END), |section| {
        let invokes = ("<invoke name=", "</invoke>");
        let (rest, calls) = tagged::block_calls(section, invokes, |body| invoke(body, &is_string));
        // A section that holds anything but calls stays content whole.
        (rest.is_none() && !calls.is_empty()).then_some(calls)
    });
    let content = outside.trim();
    let content = (!content.is_empty()).then(|| content.to_string());
    (content, sections.into_iter().flatten().collect())
}

/// One `<invoke name=` block's body: `"NAME">`, then its parameters with
/// only blank space between them.
fn invoke(body: &str, is_string: &impl Fn(&str, &str) -> bool) -> Option<ToolCall> {
    let (name, mut rest) = quoted_name(body)?;
    if name.is_empty() || name.contains(char::is_whitespace) {
        return None;
    }
    let mut args = Map::new();
    loop {
        rest = rest.trim_start();
        if rest.is_empty() {
            break;
        }
        let (key, after) = quoted_name(rest.strip_prefix("<parameter name=")?)?;
        let end = after.find("</parameter>")?;
        let value = tagged::argument(&after[..end], is_string(name, key));
        args.insert(key.to_string(), value);
        rest = &after[end + "</parameter>".len()..];
    }
    Some(ToolCall {
        name: name.to_string(),
        arguments: Value::Object(args).to_string(),
    })
}

/// `"NAME">` at the start of `s`: the name, and what follows the `>`.
fn quoted_name(s: &str) -> Option<(&str, &str)> {
    let inner = s.strip_prefix('"')?;
    let end = inner.find("\">")?;
    Some((&inner[..end], &inner[end + 2..]))
}

/// The grammar of a required or named call of `callable` (name and
/// parameters schema each), one call or (`parallel`) more in one section,
/// as the template writes them: each property of the schema in its order
/// (the required ones always, the others where the model writes them) as
/// a tagged parameter, a string's value bare (one of its `enum` where it
/// has one; no `<` in it, which would read as a tag), any other's as JSON
/// of its schema.
pub fn forced(callable: &[(&str, Value)], parallel: bool, model: &GrammarModel<'_>) -> String {
    let (open, close) = (model.marker(SECTION_BEGIN), model.marker(SECTION_END));
    let quote = |s: &str| serde_json::to_string(s).unwrap_or_default();
    let rules: Vec<String> = callable
        .iter()
        .enumerate()
        .map(|(i, (name, params))| {
            let args = tagged::tagged_arguments(params, |key, value, _| {
                let tag = quote(&format!("<parameter name=\"{key}\">"));
                format!("{tag} {value} \"</parameter>\\n\"")
            });
            let invoke = quote(&format!("<invoke name=\"{name}\">\n"));
            format!("call_{i}: {invoke}{args} \"</invoke>\\n\"")
        })
        .collect();
    let grammar = tagged::any_call(&rules, parallel);
    // The calls inside one section.
    grammar.replacen(
        "start: call",
        &format!("start: {open} \"\\n\" calls {close}\ncalls: call"),
        1,
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::tools::{parse_output, CallReader, ToolFormat};

    /// A template of MiniMax-M2's call syntax, written for this test.
    const MINIMAX_TEMPLATE: &str = "{% for m in messages %}]~b]{{ m.role }}\n{{ m.content }}\
        {% if m.tool_calls %}\n<minimax:tool_call>\n{% for tc in m.tool_calls %}\
        <invoke name=\"{{ tc.function.name }}\">\n{% for k, v in tc.function.arguments | items %}\
        <parameter name=\"{{ k }}\">{{ v if v is string else v | tojson }}</parameter>\n\
        {% endfor %}</invoke>\n{% endfor %}</minimax:tool_call>{% endif %}[e~[\n{% endfor %}\
        ]~b]ai\n";

    #[test]
    fn minimax_calls_parse_by_their_schemas_and_render_back() {
        assert_eq!(ToolFormat::of(MINIMAX_TEMPLATE), ToolFormat::MiniMax);
        let offered = json!({"tools": [{"type": "function", "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {
                "city": {"type": "string"}, "days": {"type": "integer"},
                "code": {"type": "string"}}}}}]});
        let tools = crate::tools::parse(offered.as_object().unwrap()).unwrap();
        let reader = CallReader::new(ToolFormat::MiniMax, tools.as_ref());
        let answer = "<think>Two cities.</think>\nChecking.\n<minimax:tool_call>\n\
            <invoke name=\"get_weather\">\n<parameter name=\"city\">São Paulo</parameter>\n\
            <parameter name=\"days\">3</parameter>\n<parameter name=\"code\">42</parameter>\n\
            </invoke>\n<invoke name=\"get_weather\">\n<parameter name=\"city\">Lima</parameter>\n\
            </invoke>\n</minimax:tool_call>\n<minimax:tool_call><invoke name=\"f\">\
            <parameter name=\"x\">1</invoke></minimax:tool_call>";
        let (content, calls) = reader.parse(answer);
        // Two calls of one section; a string by its schema stays text.
        assert_eq!(calls.len(), 2, "{calls:?}");
        let args: Value = serde_json::from_str(&calls[0].arguments).unwrap();
        assert_eq!(args, json!({"city": "São Paulo", "days": 3, "code": "42"}));
        assert_eq!(calls[1].arguments, r#"{"city":"Lima"}"#);
        // A section whose block does not read (a parameter never closed)
        // stays in the content, with the text before the calls.
        let content = content.unwrap();
        assert!(
            content.starts_with("<think>Two cities.</think>\nChecking."),
            "{content}"
        );
        assert!(content.ends_with("<parameter name=\"x\">1</invoke></minimax:tool_call>"));
        // Without schemas, whatever parses as JSON is JSON.
        let (_, bare) = parse_output(ToolFormat::MiniMax, answer);
        assert!(
            bare[0].arguments.contains("\"code\":42"),
            "{}",
            bare[0].arguments
        );
        // The calls as a client sends them back render through the
        // template as the mappings it iterates, and parse back.
        let history = vec![json!({"role": "assistant", "content": "",
            "tool_calls": calls.iter().map(|c| json!({"type": "function", "function": {
                "name": c.name, "arguments": c.arguments}})).collect::<Vec<_>>()})];
        let tools = tools.unwrap();
        let (messages, _) = tools.prepare(ToolFormat::MiniMax, history);
        let template = pagoda_engine::chat::ChatTemplate::new(MINIMAX_TEMPLATE, "", "").unwrap();
        let rendered = template.render_with(&messages, None, false).unwrap();
        let (_, again) = reader.parse(&rendered);
        assert_eq!(again, calls, "{rendered}");
    }

    /// The lowest allowed byte's path through the forced grammar (optional
    /// parameters left out, a bare string empty) reads back, by the
    /// schemas, as one call with its required arguments.
    #[test]
    fn forced_calls_read_back_by_their_schemas() {
        tagged::check_forced_call(ToolFormat::MiniMax, MINIMAX_TEMPLATE, tagged::tag_first);
    }
}
