//! GLM-4.5's tool calls: `<tool_call>NAME`, then
//! `<arg_key>K</arg_key><arg_value>V</arg_value>` per argument, then
//! `</tool_call>`. The template writes a string argument bare and any
//! other as JSON, so only the function's schema tells the string `"42"`
//! from the number 42: [`calls`] asks it through `is_string`.

use serde_json::{Map, Value};

use crate::tools::{tagged, GrammarModel, ToolCall};

/// GLM's calls out of `text`: each `<tool_call>` block whose body is a
/// name and tagged arguments; an argument `is_string` says is a string is
/// taken as written, any other as JSON where it parses (else as a
/// string). A block that does not read so stays content.
pub fn calls(
    text: &str,
    is_string: impl Fn(&str, &str) -> bool,
) -> (Option<String>, Vec<ToolCall>) {
    tagged::block_calls(text, ("<tool_call>", "</tool_call>"), |body| {
        call(body, &is_string)
    })
}

/// One GLM call's body: `NAME`, then `<arg_key>K</arg_key>` and
/// `<arg_value>V</arg_value>` pairs with only blank space around them.
fn call(body: &str, is_string: &impl Fn(&str, &str) -> bool) -> Option<ToolCall> {
    let tagged = |s: &str, open: &str, close: &str| -> Option<(String, usize)> {
        let inner = s.strip_prefix(open)?;
        let end = inner.find(close)?;
        Some((inner[..end].to_string(), open.len() + end + close.len()))
    };
    let name_end = body.find("<arg_key>").unwrap_or(body.len());
    let name = body[..name_end].trim();
    if name.is_empty() || name.contains(char::is_whitespace) {
        return None;
    }
    let mut args = Map::new();
    let mut rest = &body[name_end..];
    loop {
        rest = rest.trim_start();
        if rest.is_empty() {
            break;
        }
        let (key, used) = tagged(rest, "<arg_key>", "</arg_key>")?;
        rest = rest[used..].trim_start();
        let (raw, used) = tagged(rest, "<arg_value>", "</arg_value>")?;
        rest = &rest[used..];
        let key = key.trim().to_string();
        let value = tagged::argument(&raw, is_string(name, &key));
        args.insert(key, value);
    }
    Some(ToolCall {
        name: name.to_string(),
        arguments: Value::Object(args).to_string(),
    })
}

/// The grammar of a required or named call of `callable` (name and
/// parameters schema each), one call or (`parallel`) more, as GLM's
/// template writes them: each property of the schema in its order (the
/// required ones always, the others where the model writes them) as a
/// tagged pair, a string property's value bare (one of its `enum` where
/// it has one; no `<` in it, which would read as a tag), any other's as
/// JSON of its schema.
pub fn forced(callable: &[(&str, Value)], parallel: bool, model: &GrammarModel<'_>) -> String {
    let [open, close, key_open, key_close, value_open, value_close] = [
        "<tool_call>",
        "</tool_call>",
        "<arg_key>",
        "</arg_key>",
        "<arg_value>",
        "</arg_value>",
    ]
    .map(|m| model.marker(m));
    let quote = |s: &str| serde_json::to_string(s).unwrap_or_default();
    let rules: Vec<String> = callable
        .iter()
        .enumerate()
        .map(|(i, (name, params))| {
            let args = tagged::tagged_arguments(params, |key, value, _| {
                format!(
                    "{key_open} {} {key_close} \"\\n\" {value_open} {value} {value_close} \"\\n\"",
                    quote(key)
                )
            });
            format!("call_{i}: {open} {} \"\\n\"{args} {close}", quote(name))
        })
        .collect();
    tagged::any_call(&rules, parallel)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::tools::{parse_output, CallReader, ToolFormat};

    /// A template of GLM-4.5's call syntax, written for this test: calls
    /// as `<tool_call>NAME` and tagged arguments, strings bare and other
    /// values as JSON.
    const GLM_TEMPLATE: &str = "{% for m in messages %}<|{{ m.role }}|>\n{{ m.content }}\
        {% for tc in m.tool_calls or [] %}<tool_call>{{ tc.function.name }}\n\
        {% for k, v in tc.function.arguments.items() %}<arg_key>{{ k }}</arg_key>\n\
        <arg_value>{{ v if v is string else v | tojson }}</arg_value>\n{% endfor %}\
        </tool_call>{% endfor %}{% endfor %}<|assistant|>\n";

    /// Over bytes, the lowest allowed byte's path through the forced
    /// grammar (the optional pairs left out, a bare string empty) reads
    /// back, by the schemas, as one call with its required arguments.
    #[test]
    fn forced_calls_read_back_by_their_schemas() {
        tagged::check_forced_call(ToolFormat::Glm, GLM_TEMPLATE, tagged::tag_first);
    }

    #[test]
    fn glm_calls_parse_by_their_schemas_and_render_back() {
        assert_eq!(ToolFormat::of(GLM_TEMPLATE), ToolFormat::Glm);
        let offered = json!({"tools": [{"type": "function", "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {
                "city": {"type": "string"}, "days": {"type": "integer"},
                "code": {"type": "string"}, "when": {"type": ["string", "null"]}}}}}]});
        let tools = crate::tools::parse(offered.as_object().unwrap()).unwrap();
        let reader = CallReader::new(ToolFormat::Glm, tools.as_ref());
        let answer = "<think>Look it up.</think>\nChecking.<tool_call>get_weather\n\
            <arg_key>city</arg_key>\n<arg_value>São Paulo</arg_value>\n\
            <arg_key>days</arg_key>\n<arg_value>3</arg_value>\n\
            <arg_key>code</arg_key>\n<arg_value>42</arg_value>\n\
            <arg_key>when</arg_key>\n<arg_value>null</arg_value>\n</tool_call>\
            <tool_call>get weather</tool_call><tool_call>f\n<arg_key>x</arg_key></tool_call>";
        let (content, calls) = reader.parse(answer);
        // A string by its schema stays text ("42"); an integer parses; a
        // type that may be null or a string is not only a string.
        assert_eq!(calls.len(), 1, "{calls:?}");
        let args: Value = serde_json::from_str(&calls[0].arguments).unwrap();
        assert_eq!(calls[0].name, "get_weather");
        assert_eq!(
            args,
            json!({"city": "São Paulo", "days": 3, "code": "42", "when": null})
        );
        // Blocks that are not calls (a name with a space, a key without
        // a value) stay in the content, with the text around the call.
        let content = content.unwrap();
        assert!(content.starts_with("<think>Look it up.</think>\nChecking."));
        assert!(content.ends_with(
            "<tool_call>get weather</tool_call><tool_call>f\n<arg_key>x</arg_key></tool_call>"
        ));
        // Without schemas, whatever parses as JSON is JSON.
        let (_, bare) = parse_output(ToolFormat::Glm, answer);
        assert!(
            bare[0].arguments.contains("\"code\":42"),
            "{}",
            bare[0].arguments
        );
        // The call as an OpenAI client sends it back (arguments as JSON
        // text) renders through the template as the objects it iterates,
        // and the rendering parses back to the same call.
        let history = vec![json!({"role": "assistant", "content": "",
            "tool_calls": [{"type": "function", "function": {
                "name": "get_weather", "arguments": calls[0].arguments}}]})];
        let (messages, list) = tools.as_ref().unwrap().prepare(ToolFormat::Glm, history);
        assert!(list.is_some());
        let template = pagoda_engine::chat::ChatTemplate::new(GLM_TEMPLATE, "", "").unwrap();
        let rendered = template.render_with(&messages, None, false).unwrap();
        let (_, again) = reader.parse(&rendered);
        assert_eq!(again, calls, "{rendered}");
    }
}
