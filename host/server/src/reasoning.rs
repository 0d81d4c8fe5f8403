//! Reasoning between think tags: Qwen3, QwQ, DeepSeek-R1 and its
//! distills, GLM-4.5 and SmolLM3 think inside `<think>…</think>` before
//! they answer. Where the chat template writes those tags, the answer's
//! reasoning is taken out of its content into `reasoning_content` (as
//! llama.cpp's server does by default, and vLLM's and SGLang's reasoning
//! parsers do), streamed as it comes.
//!
//! Magistral thinks inside `[THINK]…[/THINK]`, control tokens of Mistral's
//! tokenizer: a template that writes `[/THINK]` has its answers decoded
//! with the special tokens written out, so the tags reach the splitter.
//!
//! A template may open the tag itself at the end of its prompt
//! (DeepSeek-R1's, QwQ's: the answer then starts inside its reasoning and
//! only closes it), or close an empty one (Qwen3's and GLM-4.5's with
//! thinking switched off: the answer has no reasoning).

use crate::harmony::Piece;

/// A pair of think tags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tags {
    /// The opening tag.
    pub open: &'static str,
    /// The closing tag.
    pub close: &'static str,
    /// Whether they are control tokens, which the decoder writes out only
    /// when asked to.
    pub special: bool,
}

/// `<think>…</think>` (Qwen3, DeepSeek-R1, GLM-4.5, SmolLM3).
pub const THINK: Tags = Tags {
    open: "<think>",
    close: "</think>",
    special: false,
};

/// `[THINK]…[/THINK]` (Magistral).
pub const MISTRAL_THINK: Tags = Tags {
    open: "[THINK]",
    close: "[/THINK]",
    special: true,
};

/// Where an answer's reasoning is, from its template and prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThinkTags {
    /// The prompt left the tag open: the answer starts inside its
    /// reasoning.
    pub open: bool,
    /// Which tags.
    pub tags: Tags,
}

impl ThinkTags {
    /// The tags of a template whose source writes a closing tag, for the
    /// `prompt` it rendered; `None` for a template without them, or a
    /// prompt that closed its think tags already (thinking off).
    pub fn of(template: &str, prompt: &str) -> Option<Self> {
        let tags = [THINK, MISTRAL_THINK]
            .into_iter()
            .find(|t| template.contains(t.close))?;
        let end = prompt.trim_end();
        if end.ends_with(tags.close) {
            return None;
        }
        Some(Self {
            open: end.ends_with(tags.open),
            tags,
        })
    }

    /// An answer's `<think>` tags, none open.
    pub fn closed() -> Self {
        Self {
            open: false,
            tags: THINK,
        }
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
    /// Inside the reasoning, until the closing tag.
    Reasoning,
    /// Just past the closing tag: the blank lines before the content go.
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
    tags: Tags,
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
            tags: tags.tags,
        }
    }

    /// The pieces `text` completes.
    pub fn push(&mut self, text: &str) -> Vec<Piece> {
        self.held.push_str(text);
        let (open, close) = (self.tags.open, self.tags.close);
        let mut out = Vec::new();
        loop {
            match self.place {
                Place::Start => {
                    let rest = self.held.trim_start();
                    if let Some(after) = rest.strip_prefix(open) {
                        self.held = after.to_string();
                        self.place = Place::Reasoning;
                    } else if open.starts_with(rest) {
                        // Blank, or a tag still arriving.
                        return out;
                    } else {
                        self.place = Place::Content;
                    }
                }
                Place::Reasoning => match self.held.find(close) {
                    Some(at) => {
                        let reasoning: String = self.held.drain(..at + close.len()).collect();
                        let reasoning = &reasoning[..at];
                        if !reasoning.is_empty() {
                            out.push(Piece::Reasoning(reasoning.to_string()));
                        }
                        self.place = Place::Closed;
                    }
                    None => {
                        // All but what may begin the closing tag goes out.
                        let keep = partial_suffix(&self.held, close);
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
            Some(ThinkTags::closed())
        );
        // Thinking switched off: the prompt closed an empty think.
        let off = "<|im_start|>assistant\n<think>\n\n</think>\n\n";
        assert_eq!(ThinkTags::of(qwen3, off), None);
        // DeepSeek-R1 opens the tag in its prompt.
        let r1 = "<｜Assistant｜><think>\n";
        assert_eq!(
            ThinkTags::of(qwen3, r1),
            Some(ThinkTags {
                open: true,
                tags: THINK
            })
        );
        assert_eq!(ThinkTags::of("{{ messages }}", "anything"), None);
        // Magistral's control-token tags.
        let magistral = "{% if c.type == 'thinking' %}[THINK]{{ c.thinking }}[/THINK]{% endif %}";
        let tags = ThinkTags::of(magistral, "[INST]Why?[/INST]").unwrap();
        assert_eq!(tags.tags, MISTRAL_THINK);
        assert!(tags.tags.special && !tags.open);
        assert_eq!(
            tags.split("[THINK]Because.[/THINK]It is."),
            (Some("Because.".into()), "It is.".into())
        );
    }

    #[test]
    fn whole_answers_split_into_reasoning_and_content() {
        let closed = ThinkTags::closed();
        let open = ThinkTags {
            open: true,
            tags: THINK,
        };
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
                ThinkTags::closed(),
                "<think>\nA < B, and </thin is not the end.\n</think>\n\nSo: <b>yes</b>.",
            ),
            (
                ThinkTags {
                    open: true,
                    tags: THINK,
                },
                "Only reasoning, never closed </thi",
            ),
            (ThinkTags::closed(), "  \n<thinking> is not the tag"),
            (
                ThinkTags {
                    open: true,
                    tags: THINK,
                },
                "r</think>",
            ),
            (
                ThinkTags {
                    open: false,
                    tags: MISTRAL_THINK,
                },
                "[THINK]a [/THIN b[/THINK]\n[THINK] stays.",
            ),
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
                assert!(
                    !r.contains(tags.tags.close) && !r.starts_with(tags.tags.open),
                    "{r:?}"
                );
            }
        }
    }
}
