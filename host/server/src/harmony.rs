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

use crate::tools::{GrammarModel, ToolCall};

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

/// The header's channel name and recipient (`to=...`), where it has them.
/// The last channel counts: gpt-oss-20b at times writes a stray
/// `<|channel|>commentary` before the one it means.
fn channel_and_recipient(header: &str) -> (Option<&str>, Option<&str>) {
    let channel = header.rfind(CHANNEL).map(|at| {
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

/// Where a message's body goes.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Channel {
    Reasoning,
    Content,
    Call,
    /// A message to a recipient that is no function offered (a built-in
    /// tool: `browser.search`, `python`): dropped, as llama.cpp does.
    Dropped,
}

/// A piece of an answer's text as it streams.
#[derive(Debug, Clone, PartialEq)]
pub enum Piece {
    /// Text of the `analysis` channel.
    Reasoning(String),
    /// Text of the answer itself.
    Content(String),
}

/// Splits a harmony answer as its text arrives: headers are held until
/// their `<|message|>`, bodies go out as they come (but a trailing `<|`
/// that may start a marker), calls are kept whole for the end.
#[derive(Debug, Default)]
pub struct Splitter {
    buffer: String,
    /// The body being read, if past its header.
    body: Option<Channel>,
    /// Whether any header was read (else text without one is content).
    headed: bool,
    /// How far a header has been searched for its `<|message|>`.
    scanned: usize,
    /// Finished calls, and the one being read.
    calls: Vec<ToolCall>,
    call: Option<ToolCall>,
}

impl Splitter {
    /// The pieces `text` completes.
    pub fn push(&mut self, text: &str) -> Vec<Piece> {
        self.buffer.push_str(text);
        let mut out = Vec::new();
        loop {
            let Some(channel) = self.body else {
                // An answer that opens with no header (a constrained one,
                // or a model that skips them) is content as it comes.
                let b = self.buffer.as_bytes();
                let may_be_header =
                    b.first().is_none_or(|&c| c == b'<') && b.get(1).is_none_or(|&c| c == b'|');
                if !self.headed && !may_be_header {
                    self.body = Some(Channel::Content);
                    self.headed = true;
                    continue;
                }
                // Search on from where the last push stopped (less a
                // marker's length, which may straddle the two).
                let mut from = self.scanned.saturating_sub(MESSAGE.len());
                while !self.buffer.is_char_boundary(from) {
                    from -= 1;
                }
                let Some(at) = self.buffer[from..].find(MESSAGE).map(|at| from + at) else {
                    self.scanned = self.buffer.len();
                    break;
                };
                let channel = match channel_and_recipient(&self.buffer[..at]) {
                    (_, Some(to)) if to.starts_with("functions.") => {
                        self.call = Some(ToolCall {
                            name: to["functions.".len()..].to_string(),
                            arguments: String::new(),
                        });
                        Channel::Call
                    }
                    (_, Some(to)) if to != "assistant" => Channel::Dropped,
                    (Some("analysis"), _) => Channel::Reasoning,
                    _ => Channel::Content,
                };
                self.body = Some(channel);
                self.headed = true;
                self.scanned = 0;
                self.buffer.drain(..at + MESSAGE.len());
                continue;
            };
            // A body ends at its end marker, at the next message's start,
            // or at a channel marker of a model that skipped both (which
            // then opens the next header).
            let end = ENDS
                .iter()
                .chain([&START])
                .map(|m| (*m, m.len()))
                .chain([(CHANNEL, 0)])
                .filter_map(|(m, len)| self.buffer.find(m).map(|at| (at, len)))
                .min();
            let Some((at, len)) = end else {
                let keep = partial_marker(&self.buffer);
                let text: String = self.buffer.drain(..self.buffer.len() - keep).collect();
                self.emit(channel, text, &mut out);
                break;
            };
            let text: String = self.buffer.drain(..at).collect();
            self.buffer.drain(..len);
            self.emit(channel, text, &mut out);
            self.body = None;
            self.calls.extend(self.call.take());
        }
        out
    }

    /// The pieces left at the end of the answer: a body cut short keeps
    /// its text, a header cut short is dropped, and text that never had
    /// a header is content.
    pub fn finish(&mut self) -> Vec<Piece> {
        let mut out = Vec::new();
        let rest = std::mem::take(&mut self.buffer);
        match self.body.take() {
            Some(channel) => self.emit(channel, rest, &mut out),
            None if !self.headed && !rest.contains(CHANNEL) => {
                let end = ENDS.iter().filter_map(|e| rest.find(e)).min();
                let text = rest[..end.unwrap_or(rest.len())].to_string();
                self.emit(Channel::Content, text, &mut out);
            }
            None => {}
        }
        self.calls.extend(self.call.take());
        out
    }

    /// The calls read so far (all of them after [`finish`](Self::finish)).
    pub fn calls(&self) -> &[ToolCall] {
        &self.calls
    }

    fn emit(&mut self, channel: Channel, text: String, out: &mut Vec<Piece>) {
        if text.is_empty() {
            return;
        }
        match channel {
            Channel::Reasoning => out.push(Piece::Reasoning(text)),
            Channel::Content => out.push(Piece::Content(text)),
            Channel::Call => {
                if let Some(call) = &mut self.call {
                    call.arguments.push_str(&text);
                }
            }
            Channel::Dropped => {}
        }
    }
}

/// The length of the longest end of `text` that a marker starts with
/// (held back: the marker's next piece may follow).
fn partial_marker(text: &str) -> usize {
    let markers = [START, MESSAGE, CHANNEL].into_iter().chain(ENDS);
    let longest = markers.map(str::len).max().unwrap_or(0);
    let from = text.len().saturating_sub(longest);
    text.char_indices()
        .filter(|&(at, c)| at >= from && c == '<')
        .map(|(at, _)| &text[at..])
        .find(|tail| {
            [START, MESSAGE, CHANNEL]
                .into_iter()
                .chain(ENDS)
                .any(|m| m.starts_with(tail))
        })
        .map_or(0, str::len)
}

/// Reads a whole harmony answer (as [`Splitter`] streams it). Text outside
/// any message (a model that wrote no header) is content; a message cut
/// short by the token limit keeps what it has.
pub fn parse(text: &str) -> Answer {
    let mut splitter = Splitter::default();
    let mut pieces = splitter.push(text);
    pieces.extend(splitter.finish());
    let (mut content, mut reasoning) = (String::new(), String::new());
    for piece in pieces {
        match piece {
            Piece::Reasoning(r) => reasoning.push_str(&r),
            Piece::Content(c) => content.push_str(&c),
        }
    }
    let trimmed = |s: &str| (!s.trim().is_empty()).then(|| s.trim().to_string());
    let calls = splitter
        .calls
        .into_iter()
        .map(|c| ToolCall {
            arguments: c.arguments.trim().to_string(),
            ..c
        })
        .collect();
    Answer {
        content: trimmed(&content),
        reasoning: trimmed(&reasoning),
        calls,
    }
}

/// The grammar of a required or named call of `callable` (name and
/// parameters schema each): the answer's first message a call, its header
/// `<|channel|>commentary to=functions.NAME <|constrain|>json`, its body
/// the arguments (the analysis skipped; the end-of-generation token the
/// model writes after the body ends the call).
pub fn forced(callable: &[(&str, serde_json::Value)], model: &GrammarModel<'_>) -> String {
    let [channel, constrain, message] =
        [CHANNEL, "<|constrain|>", MESSAGE].map(|m| model.marker(m));
    let each: Vec<String> = callable
        .iter()
        .map(|(name, params)| {
            let to = serde_json::to_string(&format!("commentary to=functions.{name} "))
                .unwrap_or_default();
            format!("{channel} {to} {constrain} \"json\" {message} %json {params}")
        })
        .collect();
    format!("start: {}\n", each.join(" | "))
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

    /// The stray channel gpt-oss-20b writes, a built-in tool's message
    /// (dropped), a body that runs into the next channel, and text with no
    /// header, streamed at once.
    #[test]
    fn strays_built_in_tools_and_headerless_text() {
        let answer = parse(
            "<|channel|>commentary to=assistant<|channel|>analysis<|message|>Hmm.<|end|>\
             <|start|>assistant<|channel|>commentary to=browser.search json<|message|>{\"q\": 1}<|call|>\
             <|start|>assistant<|channel|>analysis<|message|>More.<|channel|>final<|message|>Yes.",
        );
        assert_eq!(answer.reasoning.as_deref(), Some("Hmm.More."));
        assert_eq!(answer.content.as_deref(), Some("Yes."));
        assert!(answer.calls.is_empty());
        let mut splitter = Splitter::default();
        assert_eq!(
            splitter.push("Ünïcode first"),
            [Piece::Content("Ünïcode first".into())]
        );
        assert_eq!(splitter.push("<b>"), [Piece::Content("<b>".into())]);
        let mut splitter = Splitter::default();
        assert!(splitter.push("<").is_empty());
        assert!(splitter.push("|channel|>final").is_empty());
        assert_eq!(
            splitter.push("<|message|>ok"),
            [Piece::Content("ok".into())]
        );
    }

    /// Streamed in pieces of every size (special tokens arrive whole, but
    /// text may split anywhere), an answer gives the same reasoning,
    /// content and calls as read whole, and no marker leaks into the text.
    #[test]
    fn streaming_in_any_pieces_matches_the_whole() {
        let answers = [
            "<|channel|>analysis<|message|>Think <b>|hard|</b>.<|end|><|start|>assistant\
             <|channel|>final<|message|>Done: a<|b and <|x|>.<|return|>",
            "<|channel|>analysis<|message|>x<|end|><|start|>assistant<|channel|>commentary \
             to=functions.f <|constrain|>json<|message|>{\"a\": \"<|\"}<|call|>",
            "<|channel|>commentary<|message|>Checking.<|end|><|start|>assistant<|channel|>final<|message|>Cut sh",
            "plain text < | without headers",
        ];
        let mut rng = fastrand::Rng::with_seed(5);
        for answer in answers {
            let whole = parse(answer);
            for _ in 0..50 {
                let mut splitter = Splitter::default();
                let (mut reasoning, mut content) = (String::new(), String::new());
                let mut rest = answer;
                while !rest.is_empty() {
                    let mut cut = rng.usize(1..=rest.len().min(12));
                    while !rest.is_char_boundary(cut) {
                        cut += 1;
                    }
                    let (piece, tail) = rest.split_at(cut);
                    rest = tail;
                    for p in splitter.push(piece) {
                        match p {
                            Piece::Reasoning(r) => reasoning.push_str(&r),
                            Piece::Content(c) => content.push_str(&c),
                        }
                    }
                }
                for p in splitter.finish() {
                    match p {
                        Piece::Reasoning(r) => reasoning.push_str(&r),
                        Piece::Content(c) => content.push_str(&c),
                    }
                }
                let trimmed = |s: &str| (!s.trim().is_empty()).then(|| s.trim().to_string());
                assert_eq!(trimmed(&reasoning), whole.reasoning, "{answer}");
                assert_eq!(trimmed(&content), whole.content, "{answer}");
                assert_eq!(splitter.calls().len(), whole.calls.len());
                for marker in ["<|message|>", "<|channel|>", "<|end|>", "<|start|>"] {
                    assert!(!content.contains(marker) && !reasoning.contains(marker));
                }
            }
        }
        let calls = parse(answers[1]).calls;
        assert_eq!(calls[0].arguments, "{\"a\": \"<|\"}");
        let cut = parse(answers[2]);
        assert_eq!(cut.content.as_deref(), Some("Checking.Cut sh"));
    }
}
