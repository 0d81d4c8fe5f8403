//! Values printed the way Jinja on Python prints them: `{{ x }}` writes
//! `str(x)`, so `None`, `True`, Python's float spelling, and lists and dicts
//! as their `repr` (`{'name': 'f', 'args': [1, 2.5]}`). Some templates print
//! a tool call's arguments dict this way instead of through `tojson`.

use minijinja::value::ValueKind;
use minijinja::{Error, ErrorKind, Value};

use super::error::TooLarge;
use super::tojson::python_float;
use super::MAX_OUTPUT;

/// Containers nested deeper than this print as `...`, as Python prints a
/// recursive container.
const MAX_DEPTH: usize = 256;

/// `str(value)` as Python writes it, or `None` where minijinja's own
/// printing already agrees (strings, integers, undefined, other objects).
pub(super) fn python_str(value: &Value) -> Result<Option<String>, Error> {
    Ok(match value.kind() {
        ValueKind::None | ValueKind::Bool | ValueKind::Seq | ValueKind::Map => {
            let mut out = String::new();
            repr(&mut out, value, 0)?;
            Some(out)
        }
        ValueKind::Number if !value.is_integer() => Some(python_float(
            f64::try_from(value.clone()).unwrap_or(f64::NAN),
            false,
        )),
        _ => None,
    })
}

fn repr(out: &mut String, v: &Value, depth: usize) -> Result<(), Error> {
    if out.len() > MAX_OUTPUT {
        let e = Error::new(ErrorKind::InvalidOperation, "printed value too large");
        return Err(e.with_source(TooLarge));
    }
    if depth > MAX_DEPTH {
        out.push_str("...");
        return Ok(());
    }
    match v.kind() {
        ValueKind::None => out.push_str("None"),
        ValueKind::Bool => out.push_str(if v.is_true() { "True" } else { "False" }),
        ValueKind::Number if v.is_integer() => out.push_str(&v.to_string()),
        ValueKind::Number => out.push_str(&python_float(
            f64::try_from(v.clone()).unwrap_or(f64::NAN),
            false,
        )),
        ValueKind::String => str_repr(out, v.as_str().unwrap_or_default()),
        ValueKind::Seq => {
            out.push('[');
            if let Ok(items) = v.try_iter() {
                for (i, item) in items.enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    repr(out, &item, depth + 1)?;
                }
            }
            out.push(']');
        }
        ValueKind::Map => {
            out.push('{');
            if let Ok(keys) = v.try_iter() {
                for (i, key) in keys.enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    repr(out, &key, depth + 1)?;
                    out.push_str(": ");
                    repr(out, &v.get_item(&key).unwrap_or_default(), depth + 1)?;
                }
            }
            out.push('}');
        }
        _ => out.push_str(&v.to_string()),
    }
    Ok(())
}

/// Python's `repr` of a string: single quotes unless the text has a single
/// quote and no double quote, and escapes for the quote, the backslash and
/// characters Python does not count as printable.
fn str_repr(out: &mut String, s: &str) {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if !printable(c) => {
                let n = c as u32;
                if n < 0x100 {
                    out.push_str(&format!("\\x{n:02x}"));
                } else if n < 0x10000 {
                    out.push_str(&format!("\\u{n:04x}"));
                } else {
                    out.push_str(&format!("\\U{n:08x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push(quote);
}

/// Python's `str.isprintable` for one character: not a control, format,
/// separator (other than the ASCII space), surrogate or private-use
/// character. Unassigned code points, which Python also escapes, are not
/// known here and print as themselves.
fn printable(c: char) -> bool {
    let n = c as u32;
    !(c.is_control()
        || matches!(
            n,
            // Space separators other than ' ', line and paragraph separators.
            0xA0 | 0x1680 | 0x2000..=0x200A | 0x2028 | 0x2029 | 0x202F | 0x205F | 0x3000
            // Format characters.
            | 0xAD | 0x600..=0x605 | 0x61C | 0x6DD | 0x70F | 0x890 | 0x891 | 0x8E2 | 0x180E
            | 0x200B..=0x200F | 0x202A..=0x202E | 0x2060..=0x2064 | 0x2066..=0x206F
            | 0xFEFF | 0xFFF9..=0xFFFB | 0x110BD | 0x110CD | 0x13430..=0x1343F
            | 0x1BCA0..=0x1BCA3 | 0x1D173..=0x1D17A | 0xE0001 | 0xE0020..=0xE007F
            // Private use.
            | 0xE000..=0xF8FF | 0xF0000..=0xFFFFD | 0x100000..=0x10FFFD
            // Noncharacters at the end of the BMP.
            | 0xFFFE | 0xFFFF
        ))
}
