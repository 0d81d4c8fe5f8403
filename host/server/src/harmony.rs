//! OpenAI's harmony format (gpt-oss): an answer is a run of messages, each
//! `<|start|>{header}<|message|>{body}` ended by `<|end|>`, `<|call|>` or
//! `<|return|>`, the header naming its channel (`<|channel|>analysis`,
//! `commentary`, `final`) and, for a tool call, its recipient
//! (`to=functions.NAME`). The prompt ends with `<|start|>assistant`, so
//! the first message's header starts at the answer's first token. The
//! answer is decoded with its special tokens written out (they are the
//! structure), and read here: `analysis` is the reasoning, `final` (and
//! `commentary` without a recipient, the model's preambles) the content,
//! each message to `functions.NAME` a call whose body is its arguments.

use crate::tools::ToolCall;

/// What a harmony answer holds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Answer {
    /// The `final` (and recipient-less `commentary`) text.
    pub content: Option<String>,
    /// The `analysis` text: the chain of thought.
    pub reasoning: Option<String>,
    /// Messages to `functions.NAME`.
    pub calls: Vec<ToolCall>,
}

const START: &str = "<|start|>";
const MESSAGE: &str = "<|message|>";
const CHANNEL: &str = "<|channel|>";
const ENDS: [&str; 3] = ["<|end|>", "<|call|>", "<|return|>"];

/// Whether a chat template writes harmony.
pub fn is_harmony(template: &str) -> bool {
    template.contains(CHANNEL) && template.contains(MESSAGE)
}

/// `body` cut at its first end marker.
fn until_end(body: &str) -> &str {
    let end = ENDS.iter().filter_map(|e| body.find(e)).min();
    &body[..end.unwrap_or(body.len())]
}

/// The header's channel name and recipient (`to=...`), where it has them.
fn channel_and_recipient(header: &str) -> (Option<&str>, Option<&str>) {
    let channel = header.find(CHANNEL).map(|at| {
        let rest = &header[at + CHANNEL.len()..];
        let end = rest
            .find(|c: char| c.is_whitespace() || c == '<')
            .unwrap_or(rest.len());
        &rest[..end]
    });
    let recipient = header
        .split(|c: char| c.is_whitespace() || c == '<' || c == '>' || c == '|')
        .find_map(|word| word.strip_prefix("to="));
    (channel, recipient)
}

fn joined(parts: Vec<&str>) -> Option<String> {
    let text = parts.concat();
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_string())
}

/// Reads a harmony answer. Text outside any message (a model that wrote
/// no header) is content; a message cut short by the token limit keeps
/// what it has.
pub fn parse(text: &str) -> Answer {
    let (mut content, mut reasoning, mut calls) = (Vec::new(), Vec::new(), Vec::new());
    for (i, segment) in text.split(START).enumerate() {
        let Some(at) = segment.find(MESSAGE) else {
            // A header cut short, or (before any header) plain text.
            if i == 0 && !segment.contains(CHANNEL) {
                content.push(until_end(segment));
            }
            continue;
        };
        let (header, body) = (&segment[..at], until_end(&segment[at + MESSAGE.len()..]));
        match channel_and_recipient(header) {
            (_, Some(to)) if to.starts_with("functions.") => calls.push(ToolCall {
                name: to["functions.".len()..].to_string(),
                arguments: body.trim().to_string(),
            }),
            (Some("analysis"), _) => reasoning.push(body),
            _ => content.push(body),
        }
    }
    Answer {
        content: joined(content),
        reasoning: joined(reasoning),
        calls,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasoning_final_and_calls_come_apart() {
        let answer = parse(
            "<|channel|>analysis<|message|>User wants weather.<|end|>\
             <|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json\
             <|message|>{\"city\": \"Zürich\"}<|call|>",
        );
        assert_eq!(answer.reasoning.as_deref(), Some("User wants weather."));
        assert_eq!(answer.content, None);
        assert_eq!(
            answer.calls,
            [ToolCall {
                name: "get_weather".into(),
                arguments: "{\"city\": \"Zürich\"}".into()
            }]
        );
        // The recipient before the channel, as the template writes it.
        let answer = parse(
            "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant to=functions.f\
             <|channel|>commentary json<|message|>{}<|call|>",
        );
        assert_eq!(answer.calls.len(), 1);
        assert_eq!(answer.calls[0].name, "f");
        let answer = parse(
            "<|channel|>analysis<|message|>2+2 is 4.<|end|>\
             <|start|>assistant<|channel|>final<|message|>It is 4.<|return|>",
        );
        assert_eq!(answer.reasoning.as_deref(), Some("2+2 is 4."));
        assert_eq!(answer.content.as_deref(), Some("It is 4."));
        assert!(answer.calls.is_empty());
    }

    #[test]
    fn answers_cut_short_or_without_headers_keep_their_text() {
        // Cut by the token limit inside the reasoning, or inside a header.
        let answer = parse("<|channel|>analysis<|message|>Let me thi");
        assert_eq!(answer.reasoning.as_deref(), Some("Let me thi"));
        assert_eq!(answer.content, None);
        let answer = parse("<|channel|>analysis<|message|>ok<|end|><|start|>assistant<|chan");
        assert_eq!(answer.reasoning.as_deref(), Some("ok"));
        assert_eq!(answer.content, None);
        let answer =
            parse("<|channel|>analysis<|message|>ok<|end|><|start|>assistant<|channel|>fin");
        assert_eq!(answer.content, None);
        // No harmony at all.
        assert_eq!(parse("Just text.").content.as_deref(), Some("Just text."));
        assert_eq!(parse(""), Answer::default());
    }
}
