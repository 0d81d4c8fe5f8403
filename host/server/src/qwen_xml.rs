//! Qwen3-Coder's and Qwen3.5's tool calls: a `<tool_call>` block holding
//! `<function=NAME>`, then `<parameter=KEY>` … `</parameter>` per argument,
//! then `</function>`. The templates write each value on lines of its own,
//! a string bare and any other as JSON, so (as GLM's) only the function's
//! schema tells the string `"42"` from the number 42: [`calls`] asks it
//! through `is_string`.

use serde_json::{Map, Value};

use crate::tools::{tagged, GrammarModel, ToolCall};

/// What a template holding this syntax writes: [`ToolFormat::of`]
/// (crate::tools::ToolFormat::of) looks for it.
pub const FUNCTION_OPEN: &str = "<function=";

/// The calls out of `text`: each `<tool_call>` block whose body is one
/// function and its tagged parameters; a parameter `is_string` says is a
/// string is taken as written (less the line breaks around it), any other
/// as JSON where it parses (else as a string). A block that does not read
/// so stays content.
pub fn calls(
    text: &str,
    is_string: impl Fn(&str, &str) -> bool,
) -> (Option<String>, Vec<ToolCall>) {
    tagged::block_calls(text, ("<tool_call>", "</tool_call>"), |body| {
        call(body, &is_string)
    })
}

/// One block's body: `<function=NAME>`, its parameters, `</function>`,
/// with only blank space between the tags.
fn call(body: &str, is_string: &impl Fn(&str, &str) -> bool) -> Option<ToolCall> {
    let body = body.trim().strip_prefix(FUNCTION_OPEN)?;
    let name_end = body.find('>')?;
    let name = body[..name_end].trim();
    if name.is_empty() || name.contains(char::is_whitespace) {
        return None;
    }
    let mut rest = body[name_end + 1..]
        .trim_end()
        .strip_suffix("</function>")?;
    let mut args = Map::new();
    loop {
        rest = rest.trim_start();
        if rest.is_empty() {
            break;
        }
        let inner = rest.strip_prefix("<parameter=")?;
        let key_end = inner.find('>')?;
        let key = inner[..key_end].trim().to_string();
        let value_and_rest = &inner[key_end + 1..];
        let value_end = value_and_rest.find("</parameter>")?;
        let raw = value_and_rest[..value_end]
            .strip_prefix('\n')
            .unwrap_or(&value_and_rest[..value_end]);
        let raw = raw.strip_suffix('\n').unwrap_or(raw);
        rest = &value_and_rest[value_end + "</parameter>".len()..];
        let value = tagged::argument(raw, is_string(name, &key));
        args.insert(key, value);
    }
    Some(ToolCall {
        name: name.to_string(),
        arguments: Value::Object(args).to_string(),
    })
}

/// The grammar of a required or named call of `callable` (name and
/// parameters schema each), one call or (`parallel`) more, as the
/// templates write them: each property of the schema in its order (the
/// required ones always, the others where the model writes them) as a
/// tagged parameter on lines of its own, a string's value bare (one of
/// its `enum` where it has one; no `<` in it, which would read as a tag,
/// and the line break before the closing tag its own), any other's as
/// JSON of its schema.
pub fn forced(callable: &[(&str, Value)], parallel: bool, model: &GrammarModel<'_>) -> String {
    let (open, close) = (model.marker("<tool_call>"), model.marker("</tool_call>"));
    let quote = |s: &str| serde_json::to_string(s).unwrap_or_default();
    let rules: Vec<String> = callable
        .iter()
        .enumerate()
        .map(|(i, (name, params))| {
            let args = tagged::tagged_arguments(params, |key, value, bare| {
                // A bare string takes its line break into its terminal,
                // which would read the closing tag's as its own.
                let close = if bare { "" } else { "\\n" };
                let tag = quote(&format!("<parameter={key}>\n"));
                format!("{tag} {value} \"{close}</parameter>\\n\"")
            });
            let function = quote(&format!("\n<function={name}>\n"));
            format!("call_{i}: {open} {function}{args} \"</function>\\n\" {close}")
        })
        .collect();
    tagged::any_call(&rules, parallel)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::tools::{parse_output, CallReader, ToolFormat};

    /// A template of Qwen3.5's call syntax, written for this test (its
    /// system prompt names the syntax, as the real templates' do).
    const QWEN_TEMPLATE: &str = "{% if tools %}<|im_start|>system\nCall as \
        <tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n</function>\n\
        </tool_call><|im_end|>\n{% endif %}{% for m in messages %}<|im_start|>{{ m.role }}\n\
        {{ m.content }}{% for tc in m.tool_calls or [] %}<tool_call>\n<function=\
        {{ tc.function.name }}>\n{% for k, v in tc.function.arguments | items %}\
        <parameter={{ k }}>\n{{ v if v is string else v | tojson }}\n</parameter>\n\
        {% endfor %}</function>\n</tool_call>{% endfor %}<|im_end|>\n{% endfor %}\
        <|im_start|>assistant\n";

    #[test]
    fn qwen_calls_parse_by_their_schemas_and_render_back() {
        assert_eq!(ToolFormat::of(QWEN_TEMPLATE), ToolFormat::QwenXml);
        let offered = json!({"tools": [{"type": "function", "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {
                "city": {"type": "string"}, "days": {"type": "integer"},
                "code": {"type": "string"}, "opts": {"type": "object"}}}}}]});
        let tools = crate::tools::parse(offered.as_object().unwrap()).unwrap();
        let reader = CallReader::new(ToolFormat::QwenXml, tools.as_ref());
        let answer = "Checking.\n<tool_call>\n<function=get_weather>\n\
            <parameter=city>\nSão Paulo\n</parameter>\n<parameter=days>\n3\n</parameter>\n\
            <parameter=code>\n42\n</parameter>\n<parameter=opts>\n{\"metric\": true}\n</parameter>\n\
            </function>\n</tool_call>\n<tool_call>\n<function=get weather>\n</function>\n\
            </tool_call><tool_call><function=f><parameter=x>1</function></tool_call>";
        let (content, calls) = reader.parse(answer);
        // A string by its schema stays text ("42"); an integer and an
        // object parse.
        assert_eq!(calls.len(), 1, "{calls:?}");
        assert_eq!(calls[0].name, "get_weather");
        let args: Value = serde_json::from_str(&calls[0].arguments).unwrap();
        assert_eq!(
            args,
            json!({"city": "São Paulo", "days": 3, "code": "42", "opts": {"metric": true}})
        );
        // Blocks that are not calls (a name with a space, a parameter
        // never closed) stay in the content, with the text before them.
        let content = content.unwrap();
        assert!(content.starts_with("Checking."), "{content}");
        assert!(content.contains("<function=get weather>"), "{content}");
        assert!(content.ends_with("</function></tool_call>"), "{content}");
        // Without schemas, whatever parses as JSON is JSON.
        let (_, bare) = parse_output(ToolFormat::QwenXml, answer);
        assert!(
            bare[0].arguments.contains("\"code\":42"),
            "{}",
            bare[0].arguments
        );
        // The call as a client sends it back renders through the template
        // as the mapping it iterates, and the rendering parses back.
        let history = vec![json!({"role": "assistant", "content": "",
            "tool_calls": [{"type": "function", "function": {
                "name": "get_weather", "arguments": calls[0].arguments}}]})];
        let tools = tools.unwrap();
        let (messages, list) = tools.prepare(ToolFormat::QwenXml, history);
        assert!(list.is_some());
        let template = pagoda_engine::chat::ChatTemplate::new(QWEN_TEMPLATE, "", "").unwrap();
        let rendered = template.render_with(&messages, None, false).unwrap();
        let (_, again) = reader.parse(&rendered);
        assert_eq!(again, calls, "{rendered}");
    }

    /// Over bytes, the lowest allowed byte's path through the forced
    /// grammar (optional parameters left out, a bare string empty) reads
    /// back, by the schemas, as one call with its required arguments.
    #[test]
    fn forced_calls_read_back_by_their_schemas() {
        // A tag where one may come, else a line break where one may end a
        // value (not two in a row), else a digit (a JSON value, not its
        // white space), else the lowest byte.
        let last = std::cell::Cell::new(0u8);
        let pick = |allowed: &[u32]| {
            let has = |b: u8| allowed.contains(&u32::from(b));
            let digit = allowed
                .iter()
                .copied()
                .find(|t| (b'1'..=b'9').contains(&(*t as u8)));
            let t = if has(b'<') {
                u32::from(b'<')
            } else if has(b'\n') && last.get() != b'\n' {
                u32::from(b'\n')
            } else {
                digit.unwrap_or(allowed[0])
            };
            last.set(t as u8);
            t
        };
        tagged::check_forced_call(ToolFormat::QwenXml, QWEN_TEMPLATE, pick);
    }
}
