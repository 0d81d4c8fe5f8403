//! Reasoning between think tags: Qwen3, QwQ, DeepSeek-R1 and its
//! distills, GLM-4.5 and SmolLM3 think inside `<think>…</think>` before
//! they answer. Where the chat template writes those tags, the answer's
//! reasoning is taken out of its content into `reasoning_content` (as
//! llama.cpp's server does by default, and vLLM's and SGLang's reasoning
//! parsers do), streamed as it comes.
//!
//! A template may open the tag itself at the end of its prompt
//! (DeepSeek-R1's, QwQ's: the answer then starts inside its reasoning and
//! only closes it), or close an empty one (Qwen3's and GLM-4.5's with
//! thinking switched off: the answer has no reasoning).

use crate::harmony::Piece;

const OPEN: &str = "<think>";
const CLOSE: &str = "</think>";

/// Where an answer's reasoning is, from its template and prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThinkTags {
    /// The prompt left `<think>` open: the answer starts inside its
    /// reasoning.
    pub open: bool,
}

impl ThinkTags {
    /// The tags of a template whose source writes `</think>`, for the
    /// `prompt` it rendered; `None` for a template without them, or a
    /// prompt that closed its think tags already (thinking off).
    pub fn of(template: &str, prompt: &str) -> Option<Self> {
        if !template.contains(CLOSE) {
            return None;
        }
        let end = prompt.trim_end();
        if end.ends_with(CLOSE) {
            return None;
        }
        Some(Self {
            open: end.ends_with(OPEN),
        })
    }

    /// A whole answer's reasoning (`None` where it has none) and content.
    pub fn split(self, text: &str) -> (Option<String>, String) {
        let mut splitter = ThinkSplitter::new(self);
        let mut pieces = splitter.push(text);
        pieces.extend(splitter.finish());
        let (mut reasoning, mut content) = (None::<String>, String::new());
        for piece in pieces {
            match piece {
                Piece::Reasoning(r) => reasoning.get_or_insert_with(String::new).push_str(&r),
                Piece::Content(c) => content.push_str(&c),
            }
        }
        let reasoning = reasoning.map(|r| r.trim().to_string());
        (reasoning.filter(|r| !r.is_empty()), content)
    }
}

/// Where a [`ThinkSplitter`] is in the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// Before the answer's first text: it may open the tag.
    Start,
    /// Inside the reasoning, until `</think>`.
    Reasoning,
    /// Just past `</think>`: the blank lines before the content go.
    Closed,
    /// The content.
    Content,
}

/// Splits an answer into reasoning and content as its text arrives: text
/// that may be the start of a tag is held until it is told apart.
#[derive(Debug, Clone)]
pub struct ThinkSplitter {
    place: Place,
    held: String,
}

impl ThinkSplitter {
    /// A splitter for an answer to a prompt with `tags`.
    pub fn new(tags: ThinkTags) -> Self {
        Self {
            place: if tags.open {
                Place::Reasoning
            } else {
                Place::Start
            },
            held: String::new(),
        }
    }

    /// The pieces `text` completes.
    pub fn push(&mut self, text: &str) -> Vec<Piece> {
        self.held.push_str(text);
        let mut out = Vec::new();
        loop {
            match self.place {
                Place::Start => {
                    let rest = self.held.trim_start();
                    if let Some(after) = rest.strip_prefix(OPEN) {
                        self.held = after.to_string();
                        self.place = Place::Reasoning;
                    } else if OPEN.starts_with(rest) {
                        // Blank, or a tag still arriving.
                        return out;
                    } else {
                        self.place = Place::Content;
                    }
                }
                Place::Reasoning => match self.held.find(CLOSE) {
                    Some(at) => {
                        let reasoning: String = self.held.drain(..at + CLOSE.len()).collect();
                        let reasoning = &reasoning[..at];
                        if !reasoning.is_empty() {
                            out.push(Piece::Reasoning(reasoning.to_string()));
                        }
                        self.place = Place::Closed;
                    }
                    None => {
                        // All but what may begin `</think>` goes out.
                        let keep = partial_suffix(&self.held, CLOSE);
                        let sent: String = self.held.drain(..self.held.len() - keep).collect();
                        if !sent.is_empty() {
                            out.push(Piece::Reasoning(sent));
                        }
                        return out;
                    }
                },
                Place::Closed => {
                    let rest = self.held.trim_start();
                    if rest.is_empty() {
                        self.held.clear();
                        return out;
                    }
                    self.held = rest.to_string();
                    self.place = Place::Content;
                }
                Place::Content => {
                    if !self.held.is_empty() {
                        out.push(Piece::Content(std::mem::take(&mut self.held)));
                    }
                    return out;
                }
            }
        }
    }

    /// What is still held once the answer ends: reasoning left open stays
    /// reasoning; anything else is content.
    pub fn finish(&mut self) -> Vec<Piece> {
        let held = std::mem::take(&mut self.held);
        match self.place {
            _ if held.is_empty() => Vec::new(),
            Place::Reasoning => vec![Piece::Reasoning(held)],
            Place::Closed => Vec::new(),
            Place::Start | Place::Content => vec![Piece::Content(held)],
        }
    }
}

/// Bytes at the end of `text` that are a proper start of `tag`.
fn partial_suffix(text: &str, tag: &str) -> usize {
    (1..tag.len())
        .rev()
        .find(|&n| text.ends_with(&tag[..n]))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn joined(pieces: &[Piece]) -> (String, String) {
        let (mut r, mut c) = (String::new(), String::new());
        for p in pieces {
            match p {
                Piece::Reasoning(t) => r.push_str(t),
                Piece::Content(t) => c.push_str(t),
            }
        }
        (r, c)
    }

    #[test]
    fn templates_and_prompts_say_where_the_reasoning_is() {
        let qwen3 = "{{ '<think>\\n\\n</think>\\n\\n' if enable_thinking is false }}";
        assert_eq!(
            ThinkTags::of(qwen3, "<|im_start|>assistant\n"),
            Some(ThinkTags { open: false })
        );
        // Thinking switched off: the prompt closed an empty think.
        let off = "<|im_start|>assistant\n<think>\n\n</think>\n\n";
        assert_eq!(ThinkTags::of(qwen3, off), None);
        // DeepSeek-R1 opens the tag in its prompt.
        let r1 = "<｜Assistant｜><think>\n";
        assert_eq!(ThinkTags::of(qwen3, r1), Some(ThinkTags { open: true }));
        assert_eq!(ThinkTags::of("{{ messages }}", "anything"), None);
    }

    #[test]
    fn whole_answers_split_into_reasoning_and_content() {
        let closed = ThinkTags { open: false };
        let open = ThinkTags { open: true };
        let split = |t: ThinkTags, s: &str| t.split(s);
        assert_eq!(
            split(closed, "<think>\nWeigh it.\n</think>\n\nYes."),
            (Some("Weigh it.".into()), "Yes.".into())
        );
        assert_eq!(
            split(open, "Weigh it.</think>Yes."),
            (Some("Weigh it.".into()), "Yes.".into())
        );
        // No tags: all content; an empty think: no reasoning.
        assert_eq!(split(closed, "Yes."), (None, "Yes.".into()));
        assert_eq!(split(closed, "<think></think>Yes."), (None, "Yes.".into()));
        // Cut off while thinking: all of it reasoning.
        assert_eq!(
            split(closed, "<think>Still"),
            (Some("Still".into()), String::new())
        );
        // A tag later in the content is content.
        assert_eq!(
            split(closed, "Say <think>.</think>"),
            (None, "Say <think>.</think>".into())
        );
    }

    /// Streamed in pieces of every size, an answer splits as it does
    /// whole, and nothing of a tag goes out as text.
    #[test]
    fn streaming_in_any_pieces_matches_the_whole_answer() {
        let mut rng = fastrand::Rng::with_seed(5);
        let answers = [
            (
                ThinkTags { open: false },
                "<think>\nA < B, and </thin is not the end.\n</think>\n\nSo: <b>yes</b>.",
            ),
            (
                ThinkTags { open: true },
                "Only reasoning, never closed </thi",
            ),
            (ThinkTags { open: false }, "  \n<thinking> is not the tag"),
            (ThinkTags { open: true }, "r</think>"),
        ];
        for (tags, answer) in answers {
            let (want_r, want_c) = tags.split(answer);
            for _ in 0..200 {
                let mut s = ThinkSplitter::new(tags);
                let mut pieces = Vec::new();
                let chars: Vec<char> = answer.chars().collect();
                let mut i = 0;
                while i < chars.len() {
                    let n = rng.usize(1..=4).min(chars.len() - i);
                    let chunk: String = chars[i..i + n].iter().collect();
                    pieces.extend(s.push(&chunk));
                    i += n;
                }
                pieces.extend(s.finish());
                let (r, c) = joined(&pieces);
                assert_eq!(r.trim(), want_r.clone().unwrap_or_default(), "{answer:?}");
                assert_eq!(c, want_c, "{answer:?}");
                assert!(!r.contains(CLOSE) && !r.starts_with(OPEN), "{r:?}");
            }
        }
    }
}
