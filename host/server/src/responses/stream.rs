//! A streamed response: the API's typed events, numbered as they are sent.

use std::collections::VecDeque;
use std::convert::Infallible;

use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use super::output::{output_items, reasoning_item, status, Shell};
use crate::generate::Generation;
use crate::harmony::Piece;
use crate::reasoning::{ThinkSplitter, ThinkTags};
use crate::tools::CallReader;

/// The events of a streamed response, numbered as they are sent.
struct Events {
    queue: VecDeque<Bytes>,
    next: u64,
}

impl Events {
    fn push(&mut self, kind: &str, mut body: Value) {
        body["type"] = json!(kind);
        body["sequence_number"] = json!(self.next);
        self.next += 1;
        self.queue
            .push_back(Bytes::from(format!("event: {kind}\ndata: {body}\n\n")));
    }

    /// An item's events from `added` to `done`, with its text (a message)
    /// or arguments (a call) sent whole.
    fn whole_item(&mut self, index: usize, item: &Value) {
        // Opened empty: the deltas that follow carry the text or the
        // arguments (clients append them to what `added` held).
        let mut opening = item.clone();
        opening["status"] = json!("in_progress");
        if item["type"] == "message" {
            opening["content"] = json!([]);
        } else {
            opening["arguments"] = json!("");
        }
        self.push(
            "response.output_item.added",
            json!({"output_index": index, "item": opening}),
        );
        let id = item["id"].clone();
        if item["type"] == "message" {
            let text = item["content"][0]["text"].clone();
            let logprobs = item["content"][0]["logprobs"].clone();
            let part =
                json!({"type": "output_text", "text": "", "annotations": [], "logprobs": []});
            self.push(
                "response.content_part.added",
                json!({"item_id": id, "output_index": index, "content_index": 0, "part": part}),
            );
            self.push("response.output_text.delta", json!({"item_id": id, "output_index": index, "content_index": 0, "delta": text, "logprobs": logprobs}));
            self.text_done(index, &id, &text, &logprobs);
        } else {
            let args = item["arguments"].clone();
            self.push(
                "response.function_call_arguments.delta",
                json!({"item_id": id, "output_index": index, "delta": args}),
            );
            self.push("response.function_call_arguments.done", json!({"item_id": id, "output_index": index, "name": item["name"], "arguments": args}));
        }
        self.push(
            "response.output_item.done",
            json!({"output_index": index, "item": item}),
        );
    }

    fn text_done(&mut self, index: usize, id: &Value, text: &Value, logprobs: &Value) {
        let part =
            json!({"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs});
        self.push("response.output_text.done", json!({"item_id": id, "output_index": index, "content_index": 0, "text": text, "logprobs": logprobs}));
        self.push(
            "response.content_part.done",
            json!({"item_id": id, "output_index": index, "content_index": 0, "part": part}),
        );
    }
}

/// Where a stream is: text streams as it comes, reasoning between think
/// tags as a reasoning item before the message's; with tools the answer
/// is held until it ends (a call is parsed once it is whole), then its
/// items are sent whole.
struct Streaming {
    generation: Generation,
    shell: Shell,
    tools: Option<CallReader>,
    /// Where the answer's reasoning is, for a template with think tags.
    think: Option<ThinkTags>,
    /// Without tools: the answer's reasoning and content as they stream.
    thinker: Option<Thinking>,
    events: Events,
    text: String,
    /// The answer's tokens' log probabilities so far (when asked for).
    logprobs: Vec<Value>,
    ended: bool,
}

impl Streaming {
    /// Waits for the next delta and queues its events; `false` once
    /// everything is queued.
    async fn advance(&mut self) -> bool {
        if self.ended {
            return false;
        }
        match self.generation.next().await {
            Some(Ok(delta)) => {
                self.text.push_str(&delta.text);
                let logprobs =
                    crate::logprobs::entries_of(self.generation.vocab(), &delta.logprobs);
                self.logprobs.extend(logprobs.iter().cloned());
                let something = !(delta.text.is_empty() && logprobs.is_empty());
                if let Some(thinking) = &mut self.thinker {
                    let pieces = thinking.splitter.push(&delta.text);
                    thinking.send(pieces, &self.shell, &mut self.events);
                } else if something && !self.holds() {
                    let item_id = self.shell.message_id();
                    self.events.push("response.output_text.delta", json!({"item_id": item_id, "output_index": 0, "content_index": 0, "delta": delta.text, "logprobs": logprobs}));
                }
                if let Some(reason) = delta.finish_reason {
                    self.finish(Some(reason));
                }
            }
            Some(Err(error)) => {
                self.ended = true;
                let body = error.body();
                self.events.push("error", json!({"code": body["error"]["code"], "message": body["error"]["message"], "param": body["error"]["param"]}));
                let mut failed = self
                    .shell
                    .object("failed", Vec::new(), Some(&self.generation));
                let code = match error.status.as_u16() {
                    429 => "rate_limit_exceeded",
                    400 => "invalid_prompt",
                    _ => "server_error",
                };
                failed["error"] = json!({"code": code, "message": body["error"]["message"]});
                self.events
                    .push("response.failed", json!({"response": failed}));
            }
            None => self.finish(None),
        }
        true
    }

    /// Whether the answer is held until it ends, then sent as whole items:
    /// with tools (a call is parsed once it is whole).
    fn holds(&self) -> bool {
        self.tools.is_some()
    }

    fn finish(&mut self, reason: Option<&str>) {
        if self.ended {
            return;
        }
        self.ended = true;
        let items = output_items(
            &self.shell,
            self.tools.as_ref(),
            self.think,
            &self.text,
            &self.logprobs,
            reason,
        );
        if let Some(mut thinking) = self.thinker.take() {
            let pieces = thinking.splitter.finish();
            thinking.send(pieces, &self.shell, &mut self.events);
            thinking.close(&items, &mut self.events);
        } else if self.holds() {
            for (index, item) in items.iter().enumerate() {
                self.events.whole_item(index, item);
            }
        } else {
            let id = json!(self.shell.message_id());
            let text = json!(self.text);
            let logprobs = json!(self.logprobs);
            self.events.text_done(0, &id, &text, &logprobs);
            self.events.push(
                "response.output_item.done",
                json!({"output_index": 0, "item": items[0]}),
            );
        }
        let done = self
            .shell
            .object(status(reason), items, Some(&self.generation));
        let kind = if status(reason) == "incomplete" {
            "response.incomplete"
        } else {
            "response.completed"
        };
        self.events.push(kind, json!({"response": done}));
    }
}

/// Whether a stream's reasoning item is opened yet, and closed.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Opened {
    No,
    Open,
    Closed,
}

/// An answer with think tags and no tools, streamed as it comes: its
/// reasoning as a reasoning item (output 0, `reasoning_text` deltas),
/// closed when the content starts, then the message (output 1).
struct Thinking {
    splitter: ThinkSplitter,
    reasoning: Opened,
    /// The reasoning streamed so far.
    thought: String,
    message: bool,
}

impl Thinking {
    /// The events of `pieces`: each opens its item where it is the first
    /// of its kind (the content closing the reasoning first), then its
    /// delta.
    fn send(&mut self, pieces: Vec<Piece>, shell: &Shell, events: &mut Events) {
        for piece in pieces {
            match piece {
                Piece::Reasoning(text) if !self.message => {
                    self.thought.push_str(&text);
                    let id = json!(shell.reasoning_id());
                    // Blank reasoning (an empty think block) opens no item:
                    // the response's items have none for it.
                    let mut text = text;
                    if self.reasoning == Opened::No {
                        if self.thought.trim().is_empty() {
                            continue;
                        }
                        text = self.thought.clone();
                        self.reasoning = Opened::Open;
                        let item = json!({"type": "reasoning", "id": id, "summary": [], "content": [], "status": "in_progress"});
                        let added = json!({"output_index": 0, "item": item});
                        events.push("response.output_item.added", added);
                        let part = json!({"type": "reasoning_text", "text": ""});
                        events.push("response.content_part.added", json!({"item_id": id, "output_index": 0, "content_index": 0, "part": part}));
                    }
                    events.push("response.reasoning_text.delta", json!({"item_id": id, "output_index": 0, "content_index": 0, "delta": text}));
                }
                // Reasoning after the content started (never, from the
                // splitter) stays out of the stream; the items have it.
                Piece::Reasoning(_) => {}
                Piece::Content(text) => {
                    if !self.message {
                        // The reasoning is whole once the content starts.
                        if self.reasoning == Opened::Open {
                            let item = reasoning_item(shell, self.thought.trim(), "completed");
                            self.close_reasoning(&item, events);
                        }
                        self.message = true;
                        let index = self.message_index();
                        let id = json!(shell.message_id());
                        let item = json!({"type": "message", "id": id, "status": "in_progress", "role": "assistant", "content": []});
                        let added = json!({"output_index": index, "item": item});
                        events.push("response.output_item.added", added);
                        let part = json!({"type": "output_text", "text": "", "annotations": [], "logprobs": []});
                        events.push("response.content_part.added", json!({"item_id": id, "output_index": index, "content_index": 0, "part": part}));
                    }
                    if !text.is_empty() {
                        let id = json!(shell.message_id());
                        events.push("response.output_text.delta", json!({"item_id": id, "output_index": self.message_index(), "content_index": 0, "delta": text, "logprobs": []}));
                    }
                }
            }
        }
    }

    /// Where the message goes: after the reasoning item, if there is one.
    fn message_index(&self) -> usize {
        usize::from(self.reasoning != Opened::No)
    }

    /// The reasoning item's `done` events, `item` its final form.
    fn close_reasoning(&mut self, item: &Value, events: &mut Events) {
        self.reasoning = Opened::Closed;
        let text = item["content"][0]["text"].clone();
        events.push(
            "response.reasoning_text.done",
            json!({"item_id": item["id"], "output_index": 0, "content_index": 0, "text": text}),
        );
        let part = json!({"type": "reasoning_text", "text": text});
        events.push(
            "response.content_part.done",
            json!({"item_id": item["id"], "output_index": 0, "content_index": 0, "part": part}),
        );
        let done = json!({"output_index": 0, "item": item});
        events.push("response.output_item.done", done);
    }

    /// The `done` events of the items still open, each in its final form
    /// from `items`.
    fn close(&mut self, items: &[Value], events: &mut Events) {
        let of = |kind: &str| items.iter().find(|i| i["type"] == kind);
        if self.reasoning == Opened::Open {
            if let Some(item) = of("reasoning") {
                self.close_reasoning(item, events);
            }
        }
        if !self.message {
            // A message never streamed (an answer with no content): whole.
            if let Some(item) = of("message") {
                let index = self.message_index();
                events.whole_item(index, item);
            }
        } else if let Some(item) = of("message") {
            {
                let index = self.message_index();
                let (text, logprobs) =
                    (&item["content"][0]["text"], &item["content"][0]["logprobs"]);
                events.text_done(index, &item["id"], text, logprobs);
                let done = json!({"output_index": index, "item": item});
                events.push("response.output_item.done", done);
            }
        }
    }
}

/// The streamed response: `response.created` and `response.in_progress`,
/// the message's opening (without tools), then events as the answer comes.
/// Dropping the body drops the generation, which cancels it.
pub(super) fn response(
    generation: Generation,
    shell: Shell,
    tools: Option<CallReader>,
    think: Option<ThinkTags>,
) -> Response {
    let mut events = Events {
        queue: VecDeque::new(),
        next: 0,
    };
    let opening = shell.object("in_progress", Vec::new(), None);
    events.push("response.created", json!({"response": opening}));
    events.push("response.in_progress", json!({"response": opening}));
    if tools.is_none() && think.is_none() {
        let id = json!(shell.message_id());
        let item = json!({"type": "message", "id": id, "status": "in_progress", "role": "assistant", "content": []});
        events.push(
            "response.output_item.added",
            json!({"output_index": 0, "item": item}),
        );
        let part = json!({"type": "output_text", "text": "", "annotations": [], "logprobs": []});
        events.push(
            "response.content_part.added",
            json!({"item_id": id, "output_index": 0, "content_index": 0, "part": part}),
        );
    }
    let thinker = match (&tools, think) {
        (None, Some(tags)) => Some(Thinking {
            splitter: ThinkSplitter::new(tags),
            reasoning: Opened::No,
            thought: String::new(),
            message: false,
        }),
        _ => None,
    };
    let state = Streaming {
        generation,
        shell,
        tools,
        think,
        thinker,
        events,
        text: String::new(),
        logprobs: Vec::new(),
        ended: false,
    };
    let body = futures_util::stream::unfold(state, |mut s| async move {
        loop {
            if let Some(bytes) = s.events.queue.pop_front() {
                return Some((Ok::<_, Infallible>(bytes), s));
            }
            if !s.advance().await {
                return None;
            }
        }
    });
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(body),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The events queued so far, as values.
    fn sent(events: &Events) -> Vec<Value> {
        events
            .queue
            .iter()
            .map(|b| {
                let text = std::str::from_utf8(b).unwrap();
                let data = text.split("\ndata: ").nth(1).unwrap();
                serde_json::from_str(data.trim_end()).unwrap()
            })
            .collect()
    }

    /// An empty think block (Qwen3's `/no_think`) opens no reasoning item:
    /// the stream's items are the response's, the message at output 0.
    #[test]
    fn an_empty_think_block_streams_only_the_message() {
        let shell = Shell::new(&serde_json::Map::new(), "m", 1);
        let tags = ThinkTags::closed();
        for answer in ["<think>\n\n</think>\n\nYes.", "<think>\n"] {
            let mut events = Events {
                queue: VecDeque::new(),
                next: 0,
            };
            let mut thinking = Thinking {
                splitter: ThinkSplitter::new(tags),
                reasoning: Opened::No,
                thought: String::new(),
                message: false,
            };
            let pieces = thinking.splitter.push(answer);
            thinking.send(pieces, &shell, &mut events);
            let pieces = thinking.splitter.finish();
            thinking.send(pieces, &shell, &mut events);
            let items = output_items(&shell, None, Some(tags), answer, &[], Some("stop"));
            thinking.close(&items, &mut events);
            let sent = sent(&events);
            let done: Vec<&Value> = sent
                .iter()
                .filter(|e| e["type"] == "response.output_item.done")
                .map(|e| &e["item"])
                .collect();
            assert_eq!(done, items.iter().collect::<Vec<_>>(), "{answer:?}");
            assert_eq!(items.len(), 1);
            assert_eq!(items[0]["type"], "message");
            assert!(!sent
                .iter()
                .any(|e| e["type"] == "response.reasoning_text.delta"));
        }
    }

    /// An answer with think tags streams its reasoning item, closed when
    /// the content starts, then its message; the deltas add up to the
    /// items the response ends with, streamed in pieces of any size.
    #[test]
    fn reasoning_streams_as_its_own_item_before_the_message() {
        let shell = Shell::new(&serde_json::Map::new(), "m", 1);
        let tags = ThinkTags::closed();
        let answer = "<think>\nWeigh A, then B.\n</think>\n\nB it is.";
        let mut rng = fastrand::Rng::with_seed(3);
        for _ in 0..50 {
            let mut events = Events {
                queue: VecDeque::new(),
                next: 0,
            };
            let mut thinking = Thinking {
                splitter: ThinkSplitter::new(tags),
                reasoning: Opened::No,
                thought: String::new(),
                message: false,
            };
            let chars: Vec<char> = answer.chars().collect();
            let mut i = 0;
            while i < chars.len() {
                let n = rng.usize(1..=5).min(chars.len() - i);
                let piece: String = chars[i..i + n].iter().collect();
                let pieces = thinking.splitter.push(&piece);
                thinking.send(pieces, &shell, &mut events);
                i += n;
            }
            let pieces = thinking.splitter.finish();
            thinking.send(pieces, &shell, &mut events);
            let items = output_items(&shell, None, Some(tags), answer, &[], Some("stop"));
            thinking.close(&items, &mut events);
            let sent = sent(&events);
            let kinds: Vec<&str> = sent.iter().map(|e| e["type"].as_str().unwrap()).collect();
            let first = |kind: &str| kinds.iter().position(|k| *k == kind).unwrap();
            // The reasoning item is done before the message is added.
            let dones: Vec<usize> = (0..kinds.len())
                .filter(|&i| kinds[i] == "response.output_item.done")
                .collect();
            let added: Vec<usize> = (0..kinds.len())
                .filter(|&i| kinds[i] == "response.output_item.added")
                .collect();
            assert_eq!((added.len(), dones.len()), (2, 2), "{kinds:?}");
            assert!(dones[0] < added[1], "{kinds:?}");
            assert!(first("response.reasoning_text.done") < first("response.output_text.delta"));
            let joined = |kind: &str| -> String {
                sent.iter()
                    .filter(|e| e["type"] == kind)
                    .map(|e| e["delta"].as_str().unwrap().to_string())
                    .collect()
            };
            assert_eq!(
                joined("response.reasoning_text.delta").trim(),
                "Weigh A, then B."
            );
            assert_eq!(joined("response.output_text.delta"), "B it is.");
            assert_eq!(sent[dones[0]]["item"], items[0]);
            assert_eq!(sent[dones[1]]["item"], items[1]);
            assert_eq!(sent[dones[1]]["output_index"], 1);
        }
    }

    #[test]
    fn a_whole_item_streams_from_empty_to_done() {
        let mut events = Events {
            queue: VecDeque::new(),
            next: 7,
        };
        let call = json!({"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "f", "arguments": "{\"a\":1}", "status": "completed"});
        events.whole_item(1, &call);
        let sent: Vec<Value> = events
            .queue
            .iter()
            .map(|b| {
                let text = std::str::from_utf8(b).unwrap();
                let data = text.split("\ndata: ").nth(1).unwrap();
                serde_json::from_str(data.trim_end()).unwrap()
            })
            .collect();
        let kinds: Vec<&str> = sent.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            [
                "response.output_item.added",
                "response.function_call_arguments.delta",
                "response.function_call_arguments.done",
                "response.output_item.done",
            ]
        );
        let numbers: Vec<u64> = sent
            .iter()
            .map(|e| e["sequence_number"].as_u64().unwrap())
            .collect();
        assert_eq!(numbers, [7, 8, 9, 10]);
        // `added` holds no arguments: the delta carries them, once.
        assert_eq!(sent[0]["item"]["arguments"], "");
        assert_eq!(sent[0]["item"]["status"], "in_progress");
        assert_eq!(sent[1]["delta"], call["arguments"]);
        assert_eq!(sent[3]["item"], call);
        assert!(sent.iter().all(|e| e["output_index"] == 1));
    }
}
