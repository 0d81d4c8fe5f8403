//! Chat prompts: a model's Jinja chat template rendered the way Hugging Face
//! transformers renders it, and a streaming stop-string matcher for the text
//! that comes back.
//!
//! ```
//! use pagoda_engine::chat::{ChatMessage, ChatTemplate, StopStrings};
//!
//! let source = "{% for m in messages %}<|{{ m.role }}|>{{ m.content | trim }}\n{% endfor %}\
//!               {% if add_generation_prompt %}<|assistant|>{% endif %}";
//! let template = ChatTemplate::new(source, "<s>", "</s>")?;
//! let prompt = template.render(&[ChatMessage::new("user", " Hi ")], true)?;
//! assert_eq!(prompt, "<|user|>Hi\n<|assistant|>");
//!
//! let mut stop = StopStrings::new(&["<|end|>".to_string()]);
//! let first = stop.push("Hello<|e");
//! assert_eq!((first.emit.as_str(), first.stopped), ("Hello", false));
//! let second = stop.push("nd|> ignored");
//! assert_eq!((second.emit.as_str(), second.stopped), ("", true));
//! # Ok::<(), pagoda_engine::chat::ChatTemplateError>(())
//! ```

mod error;
mod pyrepr;
mod stop;
mod strftime;
mod template;
mod tojson;

pub use error::ChatTemplateError;
pub use stop::{StopOutput, StopStrings};
pub use template::ChatTemplate;

use serde::{Deserialize, Serialize};

/// Bytes one render may produce, and the most `tojson` or printing a
/// container may write (a template can build a value that shares itself, so
/// its text can grow exponentially with the instructions spent).
const MAX_OUTPUT: usize = 64 << 20;

/// One turn of a conversation, as the template sees it (`message.role`,
/// `message.content`). Servers with richer OpenAI-style messages (tool calls,
/// names) pass their own serializable objects to
/// [`ChatTemplate::render_with`] instead.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant`, or whatever roles the template knows.
    pub role: String,
    /// The turn's text.
    pub content: String,
}

impl ChatMessage {
    /// A message with `role` and `content`.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
        }
    }
}
