//! [`ChatTemplate`]: a Jinja chat template compiled with minijinja in the
//! environment Hugging Face transformers gives chat templates, so a prompt
//! renders byte for byte as `apply_chat_template` renders it.

use std::cell::Cell;
use std::io;

use minijinja::syntax::SyntaxConfig;
use minijinja::value::Serde;
use minijinja::{context, AutoEscape, Environment, Error, ErrorKind, Value};
use pagoda_core::gguf::{Gguf, GgufError};
use serde::Serialize;

use super::error::{Raised, TooLarge};
use super::{pyrepr, strftime, tojson, ChatMessage, ChatTemplateError, MAX_OUTPUT};

/// The GGUF metadata key that holds a model's template.
const GGUF_KEY: &str = "tokenizer.chat_template";
/// The name the template is stored under in its environment.
const NAME: &str = "chat_template";
/// Work one render may do, in minijinja's fuel (an instruction each, and a
/// unit per 64 bytes made or written): every fixture renders a 1,000-turn,
/// 1 MB conversation within it, while a runaway loop stops within a
/// fraction of a second. It also bounds how deep a
/// template can nest a value (at least 9 a level, so under 560,000 levels).
const FUEL: u64 = 5_000_000;
/// Stack of the render thread: dropping a value nested as deep as [`FUEL`]
/// allows recurses once per level (measured: 128 MiB held 600,000 levels).
/// Only the pages used are committed.
const RENDER_STACK: usize = 256 << 20;
/// Macro and include nesting a render may reach.
const RECURSION_LIMIT: usize = 64;

/// A compiled chat template with the model's BOS and EOS texts.
pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: String,
    eos_token: String,
    source: String,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("bos_token", &self.bos_token)
            .field("eos_token", &self.eos_token)
            .finish_non_exhaustive()
    }
}

impl ChatTemplate {
    /// Compiles `source`. `bos_token`/`eos_token` are the special tokens'
    /// texts, which templates print as `{{ bos_token }}`.
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<Self, ChatTemplateError> {
        let mut env = Environment::new();
        // transformers: `ImmutableSandboxedEnvironment(trim_blocks=True,
        // lstrip_blocks=True, extensions=[..., loopcontrols])`, no autoescape,
        // Jinja's default of dropping one trailing newline.
        let syntax = SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .keep_trailing_newline(false)
            .build()
            .map_err(|e| ChatTemplateError::Syntax {
                line: None,
                message: e.to_string(),
            })?;
        env.set_syntax(syntax);
        env.set_auto_escape_callback(|_| AutoEscape::None);
        env.set_fuel(Some(FUEL));
        env.set_recursion_limit(RECURSION_LIMIT);
        env.set_unknown_method_callback(python_methods);
        env.set_formatter(python_formatter);
        env.add_filter("tojson", tojson::tojson);
        env.add_filter("string", |v: &Value| -> Result<String, Error> {
            Ok(pyrepr::python_str(v)?.unwrap_or_else(|| v.to_string()))
        });
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", |fmt: &str| strftime::strftime_now(fmt));
        env.add_template_owned(NAME, source.to_string())
            .map_err(|e| ChatTemplateError::Syntax {
                line: e.line(),
                message: e.detail().unwrap_or("syntax error").to_string(),
            })?;
        Ok(Self {
            env,
            bos_token: bos_token.to_string(),
            eos_token: eos_token.to_string(),
            source: source.to_string(),
        })
    }

    /// The template's source text (a server reads which tool-call format
    /// it writes from it).
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The template stored in a GGUF's `tokenizer.chat_template`, or `None`
    /// when the file has none.
    pub fn from_gguf(
        gguf: &Gguf<'_>,
        bos_token: &str,
        eos_token: &str,
    ) -> Result<Option<Self>, ChatTemplateError> {
        match gguf.get_str(GGUF_KEY) {
            Ok(source) => Self::new(source, bos_token, eos_token).map(Some),
            Err(GgufError::MissingKey { .. }) => Ok(None),
            Err(e) => Err(ChatTemplateError::Gguf(e)),
        }
    }

    /// The prompt for `messages`; with `add_generation_prompt` it ends with
    /// the header that opens the assistant's reply.
    pub fn render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<String, ChatTemplateError> {
        self.render_with(messages, None, add_generation_prompt)
    }

    /// Like [`render`](Self::render) for any serializable messages (e.g.
    /// OpenAI-style `serde_json::Value` objects with tool calls), with the
    /// optional `tools` list the template sees as `tools`. Map keys reach the
    /// template in the order the messages serialize them.
    pub fn render_with<M: Serialize>(
        &self,
        messages: &[M],
        tools: Option<&serde_json::Value>,
        add_generation_prompt: bool,
    ) -> Result<String, ChatTemplateError> {
        self.render_with_kwargs(messages, tools, add_generation_prompt, None)
    }

    /// Like [`render_with`](Self::render_with), with more variables for
    /// the template (a request's `chat_template_kwargs`, such as Qwen3's
    /// and GLM-4.5's `enable_thinking`); they cannot replace the ones
    /// this sets (`messages`, `tools`, the special tokens...).
    pub fn render_with_kwargs<M: Serialize>(
        &self,
        messages: &[M],
        tools: Option<&serde_json::Value>,
        add_generation_prompt: bool,
        kwargs: Option<&serde_json::Map<String, serde_json::Value>>,
    ) -> Result<String, ChatTemplateError> {
        let kwargs = Value::from(Serde(kwargs.cloned().unwrap_or_default()));
        let ctx = context! {
            messages => alias_reasoning(Value::from(Serde(messages))),
            tools => tools.map(|t| Value::from(Serde(t))),
            documents => Value::from(()),
            add_generation_prompt => add_generation_prompt,
            bos_token => &self.bos_token,
            eos_token => &self.eos_token,
            ..kwargs
        };
        // Values a template builds can nest as deep as its fuel allows, and
        // dropping them recurses once per level: a thread with room for that
        // keeps a hostile template from overflowing the caller's stack.
        std::thread::scope(|scope| {
            std::thread::Builder::new()
                .name("chat-template".to_string())
                .stack_size(RENDER_STACK)
                .spawn_scoped(scope, move || self.render_context(ctx))
                .map_err(|e| ChatTemplateError::Render {
                    line: None,
                    message: format!("cannot start the render thread: {e}"),
                })?
                .join()
                .unwrap_or_else(|_| {
                    Err(ChatTemplateError::Render {
                        line: None,
                        message: "the renderer panicked".to_string(),
                    })
                })
        })
    }

    fn render_context(&self, ctx: Value) -> Result<String, ChatTemplateError> {
        let template = self.env.get_template(NAME).map_err(render_error)?;
        let overflowed = Cell::new(false);
        let mut out = CappedWriter {
            buf: Vec::new(),
            overflowed: &overflowed,
        };
        match template.render_captured_to(ctx, &mut out) {
            Ok(_) => String::from_utf8(out.buf).map_err(|_| ChatTemplateError::Render {
                line: None,
                message: "output is not UTF-8".to_string(),
            }),
            Err(_) if overflowed.get() => {
                Err(ChatTemplateError::OutputTooLarge { limit: MAX_OUTPUT })
            }
            Err(e) => Err(render_error(e)),
        }
    }
}

/// Names a message's reasoning goes by, in the order transformers looks.
const REASONING_FIELDS: [&str; 3] = ["reasoning_content", "thinking", "reasoning"];

/// transformers (5.x) copies a message's reasoning, under whichever of
/// [`REASONING_FIELDS`] it comes, to `thinking` (first, unless the message has
/// its own) and `reasoning_content`, so templates find it by either name.
fn alias_reasoning(messages: Value) -> Value {
    let Ok(items) = messages.try_iter() else {
        return messages;
    };
    items
        .map(|message| {
            if message.kind() != minijinja::value::ValueKind::Map {
                return message;
            }
            let reasoning = REASONING_FIELDS.iter().find_map(|key| {
                message
                    .get_attr(key)
                    .ok()
                    .filter(|v| !v.is_undefined() && !v.is_none())
            });
            let Some(reasoning) = reasoning else {
                return message;
            };
            let mut pairs = vec![(Value::from("thinking"), reasoning.clone())];
            let keys = message.try_iter().into_iter().flatten();
            for key in keys.chain([Value::from("reasoning_content")]) {
                let value = if key.as_str() == Some("reasoning_content") {
                    reasoning.clone()
                } else {
                    message.get_item(&key).unwrap_or_default()
                };
                match pairs.iter_mut().find(|(k, _)| *k == key) {
                    Some(slot) => slot.1 = value,
                    None => pairs.push((key, value)),
                }
            }
            Value::from_pairs(pairs)
        })
        .collect()
}

/// `raise_exception(message)`: the template refuses the conversation.
fn raise_exception(message: Value) -> Result<Value, Error> {
    let text = match message.as_str() {
        Some(s) => s.to_string(),
        None => message.to_string(),
    };
    Err(Error::new(ErrorKind::InvalidOperation, text.clone()).with_source(Raised(text)))
}

/// Sorts a minijinja error into the typed ones.
fn render_error(e: Error) -> ChatTemplateError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
    while let Some(err) = source {
        if let Some(Raised(msg)) = err.downcast_ref::<Raised>() {
            return ChatTemplateError::Raised(msg.clone());
        }
        if err.downcast_ref::<TooLarge>().is_some() {
            return ChatTemplateError::OutputTooLarge { limit: MAX_OUTPUT };
        }
        source = err.source();
    }
    if e.kind() == ErrorKind::OutOfFuel {
        return ChatTemplateError::OutOfFuel;
    }
    ChatTemplateError::Render {
        line: e.line(),
        message: e
            .detail()
            .map_or_else(|| e.kind().to_string(), str::to_string),
    }
}

/// Python's string, dict and list methods (`.strip()`, `.split()`,
/// `.items()`, ...) from minijinja-contrib, except `str.title`, which there
/// only capitalises after whitespace.
fn python_methods(
    state: &mut minijinja::State<'_, '_>,
    value: &Value,
    method: &str,
    args: &[Value],
) -> Result<Value, Error> {
    match (value.as_str(), method) {
        (Some(s), "title") if args.is_empty() => Ok(Value::from(python_title(s))),
        _ => minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args),
    }
}

/// Python's `str.title`: a cased character starts a word unless the one
/// before it is cased too, so `'bye'` becomes `'Bye'` and `<b>` `<B>`.
fn python_title(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut previous_cased = false;
    for c in s.chars() {
        if c.is_lowercase() {
            if previous_cased {
                out.push(c);
            } else {
                out.extend(c.to_uppercase());
            }
            previous_cased = true;
        } else if c.is_uppercase() {
            if previous_cased {
                out.extend(c.to_lowercase());
            } else {
                out.push(c);
            }
            previous_cased = true;
        } else {
            out.push(c);
            previous_cased = false;
        }
    }
    out
}

/// Prints values the way Jinja on Python does where it differs from
/// minijinja (see [`pyrepr`]); strings and integers as minijinja does.
fn python_formatter(
    out: &mut minijinja::Output<'_>,
    state: &mut minijinja::State<'_, '_>,
    value: &Value,
) -> Result<(), Error> {
    match pyrepr::python_str(value)? {
        Some(text) => std::fmt::Write::write_str(out, &text)
            .map_err(|_| Error::new(ErrorKind::WriteFailure, "write failed")),
        None => minijinja::escape_formatter(out, state, value),
    }
}

/// Collects the output, refusing to grow past [`MAX_OUTPUT`].
struct CappedWriter<'a> {
    buf: Vec<u8>,
    overflowed: &'a Cell<bool>,
}

impl io::Write for CappedWriter<'_> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        if self.buf.len() + bytes.len() > MAX_OUTPUT {
            self.overflowed.set(true);
            return Err(io::Error::other(TooLarge));
        }
        self.buf.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
