//! Nemotron Nano 2's tool calls: one `<TOOLCALL>` block holding a JSON
//! array of `{"name", "arguments"}` objects, `arguments` an object (or
//! the JSON text of one), closed by `</TOOLCALL>`. Its template writes a
//! history's calls back the same way, their arguments as given (text or
//! object), so the history needs no rewriting.

use serde_json::Value;

use crate::tools::{arrays, tagged, GrammarModel, ToolCall};

/// Opens a block of calls; a template that writes it writes this format.
pub const CALLS_OPEN: &str = "<TOOLCALL>";
/// Closes it.
pub const CALLS_CLOSE: &str = "</TOOLCALL>";

/// The content and calls of an answer: each block whose body is one JSON
/// array of calls; a block that does not read so stays content.
pub fn calls(text: &str) -> (Option<String>, Vec<ToolCall>) {
    let (outside, blocks) = tagged::blocks(text, (CALLS_OPEN, CALLS_CLOSE), read_calls);
    let content = outside.trim();
    let content = (!content.is_empty()).then(|| content.to_string());
    (content, blocks.into_iter().flatten().collect())
}

/// One block's body: a JSON array of calls, each a non-empty name without
/// spaces and object arguments, and nothing after it.
fn read_calls(body: &str) -> Option<Vec<ToolCall>> {
    arrays::read(body, ("name", "arguments"))
}

/// The grammar of a required or named call: one block of a JSON array of
/// calls of the `callable` functions (one call, or more where `parallel`).
pub fn forced(callable: &[(&str, Value)], parallel: bool, model: &GrammarModel<'_>) -> String {
    let array = arrays::schema(callable, parallel);
    format!(
        "start: {} %json {array} {}\n",
        model.marker(CALLS_OPEN),
        model.marker(CALLS_CLOSE)
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use pagoda_engine::structured::OutputSpec;

    use super::*;
    use crate::tools::{parse_output, walk, ToolFormat};

    /// The turns of Nemotron Nano 2's template, written for this test (its
    /// tool list and the way it writes a history's calls and results).
    const TEMPLATE: &str = "{% if tools %}<AVAILABLE_TOOLS>[{% for t in tools %}\
        {{ t.function | tojson }}{% endfor %}]</AVAILABLE_TOOLS>{% endif %}\
        {% for m in messages %}{% if m.role == 'user' %}<SPECIAL_11>User\n{{ m.content }}\n\
        {% elif m.role == 'tool' %}<SPECIAL_11>User\n<TOOL_RESPONSE>[{{ m.content }}]</TOOL_RESPONSE>\
        {% elif m.role == 'assistant' %}<SPECIAL_11>Assistant\n{{ m.content or '' }}\
        {% if m.tool_calls %}<TOOLCALL>[{% for c in m.tool_calls %}\
        {\"name\": \"{{ c.function.name }}\", \"arguments\": {% if c.function.arguments is string %}\
        {{ c.function.arguments }}{% else %}{{ c.function.arguments | tojson }}{% endif %}}\
        {{ ', ' if not loop.last else '' }}{% endfor %}]</TOOLCALL>{% endif %}\n<SPECIAL_12>\n\
        {% endif %}{% endfor %}<SPECIAL_11>Assistant\n";

    #[test]
    fn the_template_is_detected_and_its_calls_read_back() {
        assert_eq!(ToolFormat::of(TEMPLATE), ToolFormat::Nemotron);
        let text = "Checking both.\n<TOOLCALL>[{\"name\": \"get_weather\", \"arguments\": \
                    {\"city\": \"Paris\"}}, {\"name\": \"get_time\", \"arguments\": \
                    \"{\\\"zone\\\": \\\"CET\\\"}\"}]</TOOLCALL>";
        let (content, calls) = parse_output(ToolFormat::Nemotron, text);
        assert_eq!(content.as_deref(), Some("Checking both."));
        let read: Vec<(&str, Value)> = calls
            .iter()
            .map(|c| (c.name.as_str(), serde_json::from_str(&c.arguments).unwrap()))
            .collect();
        assert_eq!(
            read,
            [
                ("get_weather", json!({"city": "Paris"})),
                ("get_time", json!({"zone": "CET"}))
            ]
        );
    }

    #[test]
    fn a_block_that_is_not_an_array_of_calls_stays_content() {
        for body in [
            "{\"name\": \"f\", \"arguments\": {}}",
            "[{\"name\": \"two words\", \"arguments\": {}}]",
            "[{\"name\": \"f\", \"arguments\": [1]}]",
            "[]",
            "[{\"name\": \"f\", \"arguments\": {}}] trailing",
        ] {
            let text = format!("{CALLS_OPEN}{body}{CALLS_CLOSE}");
            let (content, calls) = parse_output(ToolFormat::Nemotron, &text);
            assert!(calls.is_empty(), "{body}");
            assert_eq!(content.as_deref(), Some(text.as_str()));
        }
        // Cut off before its close: content too.
        let open = format!("{CALLS_OPEN}[{{\"name\": \"f\", \"arguments\": {{}}}}]");
        assert_eq!(
            parse_output(ToolFormat::Nemotron, &open).0.as_deref(),
            Some(open.as_str())
        );
    }

    /// Over bytes, the path of the highest allowed byte through the forced
    /// grammar reads back as one call; its markers go by id where they are
    /// control tokens.
    #[test]
    fn a_forced_call_is_one_block_of_the_offered_functions() {
        let callable = [("go", walk::one_digit())];
        let model = GrammarModel {
            control: &|_| None,
            template: TEMPLATE,
        };
        let grammar = forced(&callable, false, &model);
        let (text, ended) = walk::path(&OutputSpec::Lark(grammar), 200, walk::highest);
        assert!(ended && text.starts_with(CALLS_OPEN), "{text}");
        let (content, calls) = calls(&text);
        assert_eq!((content, calls.len()), (None, 1), "{text}");
        assert_eq!(calls[0].name, "go");
        let ids = |t: &str| (t == CALLS_OPEN).then_some(7);
        let by_id = GrammarModel {
            control: &ids,
            template: TEMPLATE,
        };
        assert!(forced(&callable, true, &by_id).starts_with("start: <[7]> %json"));
    }
}
