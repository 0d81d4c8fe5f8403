//! What the formats that write their calls as one JSON array share
//! (Mistral-Nemo's, Cohere's, Nemotron Nano 2's): reading an array of
//! calls, each a name and object arguments under the format's keys, and
//! the schema of such an array of the offered functions' calls.

use serde_json::{json, Deserializer, Value};

use super::ToolCall;

/// The calls of `body`: one JSON array (nothing after it) of objects each
/// with a name under `name_key` (non-empty, without spaces) and object
/// arguments under `args_key` (or the JSON text of one); `None` where it
/// is not that, or empty.
pub(crate) fn read(body: &str, (name_key, args_key): (&str, &str)) -> Option<Vec<ToolCall>> {
    let mut values = Deserializer::from_str(body).into_iter::<Value>();
    let array = values.next()?.ok()?;
    if !body[values.byte_offset()..].trim().is_empty() {
        return None;
    }
    let calls: Vec<ToolCall> = array
        .as_array()?
        .iter()
        .map(|c| {
            let name = c.get(name_key)?.as_str()?;
            let arguments = match c.get(args_key)? {
                Value::String(text) => serde_json::from_str(text).ok()?,
                other => other.clone(),
            };
            let named = !name.is_empty() && !name.contains(char::is_whitespace);
            (named && arguments.is_object()).then(|| ToolCall {
                name: name.to_string(),
                arguments: arguments.to_string(),
            })
        })
        .collect::<Option<_>>()?;
    (!calls.is_empty()).then_some(calls)
}

/// The schema of an array of calls of the `callable` functions (name and
/// parameters schema each) as `{"name", "arguments"}` objects: one call,
/// or more where `parallel`.
pub(crate) fn schema(callable: &[(&str, Value)], parallel: bool) -> Value {
    let items: Vec<Value> = callable
        .iter()
        .map(|(name, params)| {
            json!({
                "type": "object",
                "properties": {"name": {"const": name}, "arguments": params},
                "required": ["name", "arguments"],
                "additionalProperties": false,
            })
        })
        .collect();
    let mut array = json!({"type": "array", "items": {"anyOf": items}, "minItems": 1});
    if !parallel {
        array["maxItems"] = json!(1);
    }
    array
}
