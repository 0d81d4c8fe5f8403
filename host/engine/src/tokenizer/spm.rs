//! SentencePiece-style BPE (`tokenizer.ggml.model = llama`): spaces become
//! `▁`, characters merge greedily by the score of the piece they form
//! (highest first, leftmost among equals), and a character no piece covers
//! falls back to its `<0xXX>` byte tokens, else the unknown token.

use std::collections::BinaryHeap;

use super::vocab::{TokenType, Vocab};

/// The visible space SentencePiece writes for ' '.
pub(crate) const SPACE: char = '\u{2581}';

/// Byte-fallback tokens and the unknown token of one vocabulary.
#[derive(Debug, Clone)]
pub(crate) struct Spm {
    byte_ids: [Option<u32>; 256],
    unk: Option<u32>,
    /// Whether text is given a leading space (`add_space_prefix`).
    pub(crate) space_prefix: bool,
}

/// A candidate merge: the pair at `left`/`right` (symbol indices) would
/// make a piece of `len` bytes with `score`.
#[derive(PartialEq)]
struct Bigram {
    score: f32,
    left: usize,
    right: usize,
    len: usize,
}

impl Eq for Bigram {}

impl Ord for Bigram {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        // Max-heap: higher score first, then the leftmost.
        self.score
            .total_cmp(&other.score)
            .then_with(|| other.left.cmp(&self.left))
    }
}

impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Spm {
    pub(crate) fn new(vocab: &Vocab, unk: Option<u32>, space_prefix: bool) -> Spm {
        let mut byte_ids = [None; 256];
        for (b, slot) in byte_ids.iter_mut().enumerate() {
            *slot = vocab.id(&format!("<0x{b:02X}>"));
        }
        Spm {
            byte_ids,
            unk,
            space_prefix,
        }
    }

    /// Appends the ids of a text fragment; `lead` adds the leading space
    /// (start of text, or after a special token).
    pub(crate) fn encode(&self, vocab: &Vocab, text: &str, lead: bool, out: &mut Vec<u32>) {
        let mut s = String::with_capacity(text.len() + 3);
        if lead && self.space_prefix {
            s.push(SPACE);
        }
        s.extend(text.chars().map(|c| if c == ' ' { SPACE } else { c }));
        // Symbols: byte start and length (0 once merged away), and links.
        let start: Vec<usize> = s.char_indices().map(|(i, _)| i).collect();
        let n = start.len();
        let mut len: Vec<usize> = (0..n)
            .map(|i| start.get(i + 1).copied().unwrap_or(s.len()) - start[i])
            .collect();
        let mut next: Vec<usize> = (1..=n).collect();
        let mut prev: Vec<usize> = (0..n).map(|i| i.wrapping_sub(1)).collect();
        let mut heap = BinaryHeap::new();
        let try_add =
            |heap: &mut BinaryHeap<Bigram>, start: &[usize], len: &[usize], l: usize, r: usize| {
                let piece = &s[start[l]..start[r] + len[r]];
                if let Some(id) = vocab.id(piece) {
                    let score = vocab.scores.get(id as usize).copied().unwrap_or(0.0);
                    heap.push(Bigram {
                        score,
                        left: l,
                        right: r,
                        len: piece.len(),
                    });
                }
            };
        for i in 1..n {
            try_add(&mut heap, &start, &len, i - 1, i);
        }
        while let Some(b) = heap.pop() {
            let (l, r) = (b.left, b.right);
            if len[l] == 0 || len[r] == 0 || len[l] + len[r] != b.len || next[l] != r {
                continue;
            }
            len[l] += len[r];
            len[r] = 0;
            next[l] = next[r];
            if next[r] < n {
                prev[next[r]] = l;
            }
            if prev[l] < n {
                try_add(&mut heap, &start, &len, prev[l], l);
            }
            if next[l] < n {
                try_add(&mut heap, &start, &len, l, next[l]);
            }
        }
        for i in (0..n).filter(|&i| len[i] > 0) {
            let piece = &s[start[i]..start[i] + len[i]];
            match vocab.id(piece) {
                Some(id) => out.push(id),
                None => {
                    let bytes = piece.as_bytes().iter();
                    out.extend(bytes.filter_map(|&b| self.byte_ids[b as usize].or(self.unk)));
                }
            }
        }
    }

    /// Appends the bytes of a token's text: `▁` back to ' ', `<0xXX>` to its
    /// byte.
    pub(crate) fn token_bytes(&self, vocab: &Vocab, id: u32, text: &str, out: &mut Vec<u8>) {
        if vocab.ty(id) == TokenType::Byte {
            if let Some(b) = text
                .strip_prefix("<0x")
                .and_then(|t| t.strip_suffix('>'))
                .and_then(|h| u8::from_str_radix(h, 16).ok())
            {
                out.push(b);
                return;
            }
        }
        let mut buf = [0u8; 4];
        for c in text.chars() {
            let c = if c == SPACE { ' ' } else { c };
            out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
        }
    }
}
