//! Decoding one token at a time for streaming output: a token may end in
//! the middle of a UTF-8 character (byte-level BPE and byte fallback split
//! them), so incomplete bytes wait for the next token.

use super::Tokenizer;

/// Turns a stream of ids into text chunks whose concatenation is what
/// [`Tokenizer::decode`] gives for the whole sequence.
#[derive(Debug, Clone, Default)]
pub struct StreamDecoder {
    pending: Vec<u8>,
    started: bool,
    skip_special: bool,
}

impl StreamDecoder {
    /// A decoder for a sequence from its start (SentencePiece's leading
    /// space of the first token is dropped, as `decode` does).
    pub fn new(skip_special: bool) -> StreamDecoder {
        StreamDecoder {
            pending: Vec::new(),
            started: false,
            skip_special,
        }
    }

    /// A decoder for tokens that continue earlier text (a reply after its
    /// prompt): no leading space is dropped.
    pub fn continuing(skip_special: bool) -> StreamDecoder {
        StreamDecoder {
            started: true,
            ..StreamDecoder::new(skip_special)
        }
    }

    /// Adds `id` and returns the text it completes (possibly empty).
    pub fn push(&mut self, tokenizer: &Tokenizer, id: u32) -> String {
        if tokenizer.piece(id, self.skip_special, !self.started, &mut self.pending) {
            self.started = true;
        }
        let mut out = String::new();
        let mut rest: &[u8] = &self.pending;
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    out.push_str(s);
                    rest = &[];
                    break;
                }
                Err(e) => {
                    let (valid, tail) = rest.split_at(e.valid_up_to());
                    out.push_str(&String::from_utf8_lossy(valid));
                    match e.error_len() {
                        // Invalid whatever follows: replaced, as `decode` does.
                        Some(n) => {
                            out.push('\u{FFFD}');
                            rest = &tail[n..];
                        }
                        // A character still being completed: keep it.
                        None => {
                            rest = tail;
                            break;
                        }
                    }
                }
            }
        }
        self.pending = rest.to_vec();
        out
    }

    /// Ends the stream: any incomplete bytes left, as U+FFFD.
    pub fn finish(&mut self) -> String {
        let out = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        out
    }
}
