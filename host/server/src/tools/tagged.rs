//! What the formats that tag each argument share (GLM's `<arg_key>` pairs,
//! Qwen's `<parameter=KEY>`): calls found as blocks between two markers,
//! each value a string by the function's schema or else JSON, and a forced
//! grammar that writes each property of the schema in its order.

use serde_json::Value;

use super::ToolCall;

/// The calls of `text` in its `open` … `close` blocks, each body read by
/// `call`; a block it does not read stays content, as does the text
/// around the blocks.
pub(crate) fn block_calls(
    text: &str,
    markers: (&str, &str),
    call: impl FnMut(&str) -> Option<ToolCall>,
) -> (Option<String>, Vec<ToolCall>) {
    let (outside, calls) = blocks(text, markers, call);
    let content = outside.trim();
    ((!content.is_empty()).then(|| content.to_string()), calls)
}

/// What `read` makes of each `open` … `close` block of `text`, and the
/// text outside the blocks it reads (a block it does not read included).
pub(crate) fn blocks<T>(
    text: &str,
    (open, close): (&str, &str),
    mut read: impl FnMut(&str) -> Option<T>,
) -> (String, Vec<T>) {
    let (mut rest, mut found, mut outside) = (text, Vec::new(), String::new());
    while let Some(start) = rest.find(open) {
        let after = &rest[start + open.len()..];
        let Some(end) = after.find(close) else {
            break;
        };
        match read(&after[..end]) {
            Some(item) => {
                outside.push_str(&rest[..start]);
                found.push(item);
            }
            None => outside.push_str(&rest[..start + open.len() + end + close.len()]),
        }
        rest = &after[end + close.len()..];
    }
    outside.push_str(rest);
    (outside, found)
}

/// An argument as written: the text itself where the schema makes it a
/// string, else its JSON where it parses (else the text).
pub(crate) fn argument(raw: &str, string: bool) -> Value {
    if string {
        return Value::String(raw.to_string());
    }
    serde_json::from_str(raw.trim()).unwrap_or_else(|_| Value::String(raw.to_string()))
}

/// The grammar of one call's arguments as tagged pairs: `pair(key, value,
/// bare)` writes one (`value` the rule of its value; `bare` where that is
/// the `BARE` terminal of a string without `<`), each property of the
/// schema `params` in its order, the required ones always and the others
/// where the model writes them. A string property's value is one of its
/// `enum` where it has one, any other property's JSON of its schema.
pub(crate) fn tagged_arguments(
    params: &Value,
    pair: impl Fn(&str, &str, bool) -> String,
) -> String {
    let quote = |s: &str| serde_json::to_string(s).unwrap_or_default();
    let required: Vec<&str> = params["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut args = String::new();
    let properties = params["properties"].as_object().into_iter().flatten();
    for (key, schema) in properties {
        let value = if schema["type"] == "string" {
            match schema["enum"].as_array() {
                Some(options) => {
                    let options: Vec<String> = options
                        .iter()
                        .filter_map(Value::as_str)
                        .map(quote)
                        .collect();
                    format!("({})", options.join(" | "))
                }
                None => "BARE".to_string(),
            }
        } else {
            format!("%json {schema}")
        };
        let pair = pair(key, &value, value == "BARE");
        if required.contains(&key.as_str()) {
            args.push_str(&format!(" {pair}"));
        } else {
            args.push_str(&format!(" ({pair})?"));
        }
    }
    args
}

/// The grammar of one call (`parallel`: one or more) among `rules`, each
/// `call_{i}`, with the `BARE` string terminal (no `<`, which would read
/// as a tag).
pub(crate) fn any_call(rules: &[String], parallel: bool) -> String {
    let names: Vec<String> = (0..rules.len()).map(|i| format!("call_{i}")).collect();
    let repeat = if parallel { "+" } else { "" };
    format!(
        "start: call{repeat}\ncall: {}\n{}\nBARE: /[^<]*/\n",
        names.join(" | "),
        rules.join("\n")
    )
}

/// For the tagged formats' tests: a required call of one function (a free
/// string, a string `enum`, an integer in 1..=9 and an optional string),
/// forced in `format` for `template`, walked over bytes by `pick` (which
/// leaves the optional pair out and the free string short), reads back by
/// the schemas as one call with its required arguments.
#[cfg(test)]
pub(crate) fn check_forced_call(
    format: super::ToolFormat,
    template: &str,
    pick: impl Fn(&[u32]) -> u32,
) {
    use pagoda_engine::structured::OutputSpec;
    use serde_json::json;
    let params = json!({"type": "object", "properties": {
        "city": {"type": "string"}, "unit": {"type": "string", "enum": ["C", "F"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 9},
        "note": {"type": "string"}},
        "required": ["city", "unit", "days"]});
    let offered = json!({"tools": [{"type": "function", "function": {
        "name": "get_weather", "parameters": params}}], "tool_choice": "required",
        "parallel_tool_calls": false});
    let tools = super::parse(offered.as_object().unwrap()).unwrap().unwrap();
    let model = super::GrammarModel {
        control: &|_| None,
        template,
    };
    let Some(OutputSpec::Lark(grammar)) = tools.constraint(format, &model) else {
        panic!("{format:?}: a required call is forced");
    };
    let (text, ended) = super::walk::path(&OutputSpec::Lark(grammar), 400, pick);
    assert!(ended, "{text}");
    let (_, calls) = super::CallReader::new(format, Some(&tools)).parse(&text);
    assert_eq!(calls.len(), 1, "{text}");
    let args: Value = serde_json::from_str(&calls[0].arguments).unwrap();
    assert_eq!(args["unit"], "C", "{text}");
    assert!(
        args["days"].as_i64().is_some_and(|d| (1..=9).contains(&d)),
        "{text}"
    );
    assert!(args.get("note").is_none(), "{text}");
}

/// A tag where one may come (closing a value as soon as it may end), else
/// a digit (a JSON value, not its white space), else the lowest byte.
#[cfg(test)]
pub(crate) fn tag_first(allowed: &[u32]) -> u32 {
    let tag = allowed.iter().copied().find(|&t| t == u32::from(b'<'));
    let digit = allowed
        .iter()
        .copied()
        .find(|t| (b'1'..=b'9').contains(&(*t as u8)));
    tag.or(digit).unwrap_or(allowed[0])
}
