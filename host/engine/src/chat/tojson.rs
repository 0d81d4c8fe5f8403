//! The `tojson` filter as Hugging Face defines it for chat templates: Python's
//! `json.dumps(x, ensure_ascii=False, indent=None, separators=None,
//! sort_keys=False)`, so no HTML escaping, Python's separators and float
//! spelling, and the same options.

use minijinja::value::{Kwargs, Rest, ValueKind};
use minijinja::{Error, ErrorKind, Value};

use super::error::TooLarge;
use super::MAX_OUTPUT;

/// How one `tojson` call formats, from its arguments.
struct Options {
    ensure_ascii: bool,
    indent: Option<String>,
    item_sep: String,
    key_sep: String,
    sort_keys: bool,
}

/// The filter: `x | tojson`, `x | tojson(indent=2)`, or positional arguments
/// in `json.dumps`'s order after the value.
pub(super) fn tojson(value: &Value, args: Rest<Value>, kwargs: Kwargs) -> Result<String, Error> {
    let arg = |i: usize, name: &str| -> Result<Option<Value>, Error> {
        match (args.get(i).cloned(), kwargs.get::<Option<Value>>(name)?) {
            (Some(_), Some(_)) => Err(invalid(format!("tojson got `{name}` twice"))),
            (Some(v), None) | (None, Some(v)) => Ok(Some(v)),
            (None, None) => Ok(None),
        }
    };
    if args.len() > 4 {
        return Err(Error::new(
            ErrorKind::TooManyArguments,
            "tojson takes at most 4 arguments",
        ));
    }
    let ensure_ascii = arg(0, "ensure_ascii")?.is_some_and(|v| v.is_true());
    let indent = match arg(1, "indent")? {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) => Some(match v.as_str() {
            Some(s) => s.to_string(),
            None => {
                let n = i64::try_from(v)
                    .map_err(|_| invalid("tojson indent must be an int or a string"))?;
                " ".repeat(usize::try_from(n.clamp(0, 1024)).unwrap_or(0))
            }
        }),
    };
    let (mut item_sep, key_sep) = match arg(2, "separators")? {
        Some(v) if !v.is_none() => {
            let parts: Vec<Value> = v.try_iter()?.collect();
            match parts.as_slice() {
                [a, b] => match (a.as_str(), b.as_str()) {
                    (Some(a), Some(b)) => (a.to_string(), b.to_string()),
                    _ => return Err(invalid("tojson separators must be two strings")),
                },
                _ => return Err(invalid("tojson separators must be two strings")),
            }
        }
        _ => (", ".to_string(), ": ".to_string()),
    };
    // Python drops the space after commas when indenting, unless told.
    if indent.is_some() && arg(2, "separators")?.is_none_or(|v| v.is_none()) {
        item_sep = ",".to_string();
    }
    let sort_keys = arg(3, "sort_keys")?.is_some_and(|v| v.is_true());
    kwargs.assert_all_used()?;
    let options = Options {
        ensure_ascii,
        indent,
        item_sep,
        key_sep,
        sort_keys,
    };
    let mut out = String::new();
    write_value(&mut out, value, &options, 0)?;
    Ok(out)
}

fn invalid(msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidOperation, msg.into())
}

/// Containers nested deeper than this are refused (Python stops at its
/// recursion limit; we must not overflow the stack either).
const MAX_DEPTH: usize = 256;

fn write_value(out: &mut String, v: &Value, o: &Options, depth: usize) -> Result<(), Error> {
    if depth > MAX_DEPTH {
        return Err(invalid("tojson: value nested too deeply"));
    }
    if out.len() > MAX_OUTPUT {
        return Err(invalid("tojson: output too large").with_source(TooLarge));
    }
    match v.kind() {
        ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number => write_number(out, v),
        ValueKind::String => write_str(out, v.as_str().unwrap_or_default(), o.ensure_ascii),
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = v.try_iter()?.collect();
            write_container(out, '[', ']', &items, o, depth, |out, item, o, d| {
                write_value(out, item, o, d)
            })?;
        }
        ValueKind::Map => {
            let mut keys: Vec<(String, Value)> = Vec::new();
            for key in v.try_iter()? {
                let value = v.get_item(&key)?;
                keys.push((key_string(&key)?, value));
            }
            if o.sort_keys {
                keys.sort_by(|a, b| a.0.cmp(&b.0));
            }
            write_container(out, '{', '}', &keys, o, depth, |out, (k, val), o, d| {
                write_str(out, k, o.ensure_ascii);
                out.push_str(&o.key_sep);
                write_value(out, val, o, d)
            })?;
        }
        other => {
            return Err(invalid(format!(
                "tojson: a value of kind {other} is not JSON serializable"
            )))
        }
    }
    Ok(())
}

fn write_container<T>(
    out: &mut String,
    open: char,
    close: char,
    items: &[T],
    o: &Options,
    depth: usize,
    mut each: impl FnMut(&mut String, &T, &Options, usize) -> Result<(), Error>,
) -> Result<(), Error> {
    out.push(open);
    if items.is_empty() {
        out.push(close);
        return Ok(());
    }
    let newline = |out: &mut String, level: usize| {
        if let Some(indent) = &o.indent {
            out.push('\n');
            for _ in 0..level {
                out.push_str(indent);
            }
        }
    };
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(&o.item_sep);
        }
        newline(out, depth + 1);
        each(out, item, o, depth + 1)?;
    }
    newline(out, depth);
    out.push(close);
    Ok(())
}

/// Python turns non-string keys into strings the way JSON spells them.
fn key_string(key: &Value) -> Result<String, Error> {
    Ok(match key.kind() {
        ValueKind::String => key.as_str().unwrap_or_default().to_string(),
        ValueKind::None => "null".to_string(),
        ValueKind::Bool => (if key.is_true() { "true" } else { "false" }).to_string(),
        ValueKind::Number => {
            let mut s = String::new();
            write_number(&mut s, key);
            s
        }
        other => {
            return Err(invalid(format!(
                "tojson: keys must be str, int, float, bool or None, not {other}"
            )))
        }
    })
}

fn write_number(out: &mut String, v: &Value) {
    if v.is_integer() {
        out.push_str(&v.to_string());
    } else {
        let f = f64::try_from(v.clone()).unwrap_or(f64::NAN);
        out.push_str(&python_float(f, true));
    }
}

/// A float spelled like Python's `repr` (shortest round-trip digits,
/// scientific below 1e-4 and from 1e16). `json` spells the non-finite values
/// `NaN`/`Infinity`, `repr` spells them `nan`/`inf`.
pub(super) fn python_float(f: f64, json: bool) -> String {
    if f.is_nan() {
        return (if json { "NaN" } else { "nan" }).to_string();
    }
    if f.is_infinite() {
        let s = if json { "Infinity" } else { "inf" };
        return if f < 0.0 {
            format!("-{s}")
        } else {
            s.to_string()
        };
    }
    // `{:e}` gives the shortest round-trip digits as `d.ddde<exp>`.
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    if !(-4..16).contains(&exp) {
        let rest = &digits[1..];
        let dot = if rest.is_empty() { "" } else { "." };
        let esign = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{}{dot}{rest}e{esign}{:02}", &digits[..1], exp.abs());
    }
    let n = digits.len() as i32;
    if exp < 0 {
        let zeros = "0".repeat((-exp - 1) as usize);
        format!("{sign}0.{zeros}{digits}")
    } else if exp + 1 >= n {
        let zeros = "0".repeat((exp + 1 - n) as usize);
        format!("{sign}{digits}{zeros}.0")
    } else {
        let (int, frac) = digits.split_at((exp + 1) as usize);
        format!("{sign}{int}.{frac}")
    }
}

/// A JSON string the way Python's encoder writes it.
fn write_str(out: &mut String, s: &str, ensure_ascii: bool) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (ensure_ascii && !(' '..='~').contains(&c)) => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}
