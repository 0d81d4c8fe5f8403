//! Duplicate keys, duplicate tensor names and overlapping tensor data, found
//! without allocating: by comparing every pair (bounded by the counts, which
//! were checked against the file's size), or by sorting a caller's index.

use super::cursor::Cursor;
use super::tensor::{self, TensorInfo};
use super::{Gguf, GgufError, Kv, Metadata, Name};

/// How many key offsets the pairwise check keeps on the stack, so comparing
/// with the first keys re-reads no values.
const PAIR_CACHE: usize = 64;

/// How duplicates and overlaps are found.
// One lives on the stack for a parse; without an allocator there is nothing
// to box the key cache into, and 512 bytes of stack is the point.
#[allow(clippy::large_enum_variant)]
pub(super) enum Dedup<'s> {
    /// Every pair is compared (O(n²) comparisons).
    Pairs { first_keys: [usize; PAIR_CACHE] },
    /// The caller's index is sorted (O(n log n)).
    Index(&'s mut [usize]),
}

impl Dedup<'_> {
    pub(super) fn pairs() -> Self {
        Dedup::Pairs {
            first_keys: [0; PAIR_CACHE],
        }
    }

    /// Refuses an index too small for `count` entries.
    pub(super) fn reserve(&self, count: u64) -> Result<(), GgufError> {
        match self {
            Dedup::Index(index) if (index.len() as u64) < count => {
                Err(GgufError::ScratchTooSmall { needed: count })
            }
            _ => Ok(()),
        }
    }

    /// Compares entry `i` with the earlier keys, or records it in the index.
    pub(super) fn key(&mut self, bytes: &[u8], i: u64, kv: &Kv<'_>) -> Result<(), GgufError> {
        let i = i as usize;
        let first_keys = match self {
            Dedup::Index(index) => {
                index[i] = kv.offset;
                return Ok(());
            }
            Dedup::Pairs { first_keys } => first_keys,
        };
        let same = |at: &usize| key_at(bytes, *at) == kv.key.as_bytes();
        if first_keys[..i.min(PAIR_CACHE)].iter().any(same) {
            return Err(duplicate_key(kv.key.as_bytes(), kv.offset));
        }
        if i < PAIR_CACHE {
            first_keys[i] = kv.offset;
            return Ok(());
        }
        // Keys PAIR_CACHE..i: walk them, starting after the last one kept.
        let mut rest = Metadata {
            cur: Cursor::new(bytes, first_keys[PAIR_CACHE - 1]),
            left: (i - PAIR_CACHE + 1) as u64,
        };
        rest.next();
        if rest.any(|e| e.key == kv.key) {
            return Err(duplicate_key(kv.key.as_bytes(), kv.offset));
        }
        Ok(())
    }

    /// With an index, sorts the `count` recorded keys and refuses equal
    /// neighbours.
    pub(super) fn finish_keys(&mut self, bytes: &[u8], count: u64) -> Result<(), GgufError> {
        let Dedup::Index(index) = self else {
            return Ok(());
        };
        let index = &mut index[..count as usize];
        index.sort_unstable_by(|&a, &b| key_at(bytes, a).cmp(key_at(bytes, b)).then(a.cmp(&b)));
        match index
            .windows(2)
            .find(|w| key_at(bytes, w[0]) == key_at(bytes, w[1]))
        {
            Some(w) => Err(duplicate_key(key_at(bytes, w[1]), w[1])),
            None => Ok(()),
        }
    }

    /// Resolves every tensor's data range (type, shape, alignment, bounds),
    /// then refuses duplicate names and overlapping data.
    pub(super) fn tensors(&mut self, file: &Gguf<'_>) -> Result<(), GgufError> {
        let mut cur = Cursor::new(file.bytes, file.tensors_start);
        for i in 0..file.tensor_count as usize {
            let t = tensor::read_info(&mut cur)?.resolve(
                file.bytes,
                file.data_start,
                file.alignment,
            )?;
            match self {
                Dedup::Index(index) => index[i] = t.info_offset(),
                Dedup::Pairs { .. } => {
                    for other in file.tensors().take(i) {
                        if other.name() == t.name() {
                            return Err(duplicate_tensor(&t));
                        }
                        if overlap(&t, &other) {
                            return Err(overlap_error(&t, &other));
                        }
                    }
                }
            }
        }
        let Dedup::Index(index) = self else {
            return Ok(());
        };
        let index = &mut index[..file.tensor_count as usize];
        let at = |offset: usize| {
            tensor::read_info(&mut Cursor::new(file.bytes, offset))
                .and_then(|r| r.resolve(file.bytes, file.data_start, file.alignment))
                .ok()
        };
        let name = |offset: usize| at(offset).map(|t| t.name()).unwrap_or("");
        index.sort_unstable_by(|&a, &b| name(a).cmp(name(b)).then(a.cmp(&b)));
        if let Some(w) = index.windows(2).find(|w| name(w[0]) == name(w[1])) {
            if let Some(t) = at(w[1]) {
                return Err(duplicate_tensor(&t));
            }
        }
        // Sorted by start, any overlap shows between neighbours.
        let start = |offset: usize| at(offset).map(|t| t.offset()).unwrap_or(0);
        index.sort_unstable_by_key(|&a| (start(a), a));
        for w in index.windows(2) {
            if let (Some(a), Some(b)) = (at(w[0]), at(w[1])) {
                if overlap(&a, &b) {
                    return Err(overlap_error(&b, &a));
                }
            }
        }
        Ok(())
    }
}

/// The key stored at `at` (an entry's offset, already validated).
fn key_at(bytes: &[u8], at: usize) -> &[u8] {
    Cursor::new(bytes, at).string("metadata key").unwrap_or(&[])
}

fn duplicate_key(key: &[u8], offset: usize) -> GgufError {
    GgufError::DuplicateKey {
        key: Name::new(key),
        offset: offset as u64,
    }
}

fn duplicate_tensor(t: &TensorInfo<'_>) -> GgufError {
    GgufError::DuplicateTensor {
        tensor: Name::new(t.name().as_bytes()),
        offset: t.info_offset() as u64,
    }
}

fn overlap(a: &TensorInfo<'_>, b: &TensorInfo<'_>) -> bool {
    let (a0, a1) = (a.offset(), a.offset() + a.data().len() as u64);
    let (b0, b1) = (b.offset(), b.offset() + b.data().len() as u64);
    a0 < b1 && b0 < a1
}

fn overlap_error(t: &TensorInfo<'_>, other: &TensorInfo<'_>) -> GgufError {
    GgufError::Overlap {
        tensor: Name::new(t.name().as_bytes()),
        other: Name::new(other.name().as_bytes()),
    }
}
