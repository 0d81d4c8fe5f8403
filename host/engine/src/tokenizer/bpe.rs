//! Byte-level BPE (`tokenizer.ggml.model = gpt2`): bytes are spelled with
//! GPT-2's printable byte↔unicode map, then adjacent pieces merge in rank
//! order as `tokenizer.ggml.merges` lists them.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use pagoda_core::gguf::Gguf;

use super::error::TokenizerError;
use super::pretokenize::PreTokenizer;
use super::vocab::Vocab;

/// GPT-2's map from a byte to the printable character that spells it:
/// printable Latin-1 bytes stand for themselves, the rest take U+0100.. in
/// byte order.
pub(crate) fn byte_to_char() -> [char; 256] {
    let mut map = ['\0'; 256];
    let mut next = 256u32;
    for (b, slot) in map.iter_mut().enumerate() {
        let printable =
            (0x21..=0x7e).contains(&b) || (0xa1..=0xac).contains(&b) || (0xae..=0xff).contains(&b);
        let code = if printable {
            b as u32
        } else {
            next += 1;
            next - 1
        };
        // Every code here is below 0x144, so always a valid char.
        *slot = char::from_u32(code).unwrap_or('\0');
    }
    map
}

/// The merge table and byte pieces of one vocabulary.
#[derive(Debug, Clone)]
pub(crate) struct Bpe {
    pre: PreTokenizer,
    /// (left, right) → (rank, merged id).
    ranks: HashMap<(u32, u32), (u32, u32)>,
    /// The token of each byte's character; real vocabularies lack some
    /// (SmolLM2 has none for bytes UTF-8 never uses, nor for 0x04).
    byte_ids: [Option<u32>; 256],
    byte_chars: [char; 256],
    /// The byte each map character stands for (indexed by code point).
    char_bytes: Vec<Option<u8>>,
}

impl Bpe {
    pub(crate) fn from_gguf(
        gguf: &Gguf<'_>,
        vocab: &Vocab,
        pre: PreTokenizer,
    ) -> Result<Bpe, TokenizerError> {
        let byte_chars = byte_to_char();
        let mut byte_ids = [None; 256];
        let mut char_bytes = vec![None; 0x144];
        let mut buf = [0u8; 4];
        for (b, &c) in byte_chars.iter().enumerate() {
            byte_ids[b] = vocab.id(c.encode_utf8(&mut buf));
            char_bytes[c as usize] = Some(b as u8);
        }
        let merges = gguf.get_str_array("tokenizer.ggml.merges")?;
        let mut ranks = HashMap::with_capacity(merges.len() as usize);
        let mut joined = String::new();
        for (index, raw) in merges.iter().enumerate() {
            let text = std::str::from_utf8(raw).map_err(|_| TokenizerError::BadMerge {
                index,
                text: String::from_utf8_lossy(raw).into_owned(),
            })?;
            let (left, right) = text
                .split_once(' ')
                .ok_or_else(|| TokenizerError::BadMerge {
                    index,
                    text: text.to_owned(),
                })?;
            joined.clear();
            joined.push_str(left);
            joined.push_str(right);
            let unknown = || TokenizerError::MergeUnknownToken {
                index,
                text: text.to_owned(),
            };
            let l = vocab.id(left).ok_or_else(unknown)?;
            let r = vocab.id(right).ok_or_else(unknown)?;
            let m = vocab.id(&joined).ok_or_else(unknown)?;
            // An earlier listing of the same pair keeps its better rank.
            ranks.entry((l, r)).or_insert((index as u32, m));
        }
        Ok(Bpe {
            pre,
            ranks,
            byte_ids,
            byte_chars,
            char_bytes,
        })
    }

    /// Appends the ids of a text fragment (no special tokens in it).
    pub(crate) fn encode(&self, vocab: &Vocab, text: &str, out: &mut Vec<u32>) {
        let mut spelled = String::new();
        self.pre.split(text, &mut |word| {
            if self.pre.ignore_merges() {
                spelled.clear();
                spelled.extend(word.bytes().map(|b| self.byte_chars[b as usize]));
                if let Some(id) = vocab.id(&spelled) {
                    out.push(id);
                    return;
                }
            }
            self.merge_word(word.as_bytes(), out);
        });
    }

    /// Merges one word's byte pieces, lowest rank first and leftmost among
    /// equals, over a linked list with a heap of candidate pairs (stale
    /// entries are skipped when popped). A byte without a piece is dropped,
    /// as both the `tokenizers` library (without an unknown token) and
    /// llama.cpp do.
    fn merge_word(&self, bytes: &[u8], out: &mut Vec<u32>) {
        let mut ids: Vec<u32> = bytes
            .iter()
            .filter_map(|&b| self.byte_ids[b as usize])
            .collect();
        let n = ids.len();
        if n < 2 {
            out.extend_from_slice(&ids);
            return;
        }
        // next[i] / prev[i]: neighbours among live symbols (n / usize::MAX for none).
        let mut next: Vec<usize> = (1..=n).collect();
        let mut prev: Vec<usize> = (0..n).map(|i| i.wrapping_sub(1)).collect();
        let mut alive = vec![true; n];
        let mut heap = BinaryHeap::new();
        let push = |heap: &mut BinaryHeap<_>, ids: &[u32], l: usize, r: usize| {
            if let Some(&(rank, merged)) = self.ranks.get(&(ids[l], ids[r])) {
                heap.push(Reverse((rank, l, r, merged)));
            }
        };
        for i in 0..n - 1 {
            push(&mut heap, &ids, i, i + 1);
        }
        while let Some(Reverse((rank, l, r, merged))) = heap.pop() {
            if !alive[l]
                || !alive[r]
                || next[l] != r
                || self.ranks.get(&(ids[l], ids[r])) != Some(&(rank, merged))
            {
                continue;
            }
            ids[l] = merged;
            alive[r] = false;
            next[l] = next[r];
            if next[r] < n {
                prev[next[r]] = l;
            }
            if prev[l] < n {
                push(&mut heap, &ids, prev[l], l);
            }
            if next[l] < n {
                push(&mut heap, &ids, l, next[l]);
            }
        }
        out.extend((0..n).filter(|&i| alive[i]).map(|i| ids[i]));
    }

    /// Appends the bytes a normal token's text spells.
    pub(crate) fn token_bytes(&self, text: &str, out: &mut Vec<u8>) {
        let mut buf = [0u8; 4];
        for c in text.chars() {
            match self.char_bytes.get(c as usize).copied().flatten() {
                Some(b) => out.push(b),
                // Not a byte-map character: the text stands for itself.
                None => out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes()),
            }
        }
    }
}
