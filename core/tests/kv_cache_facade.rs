//! The [`KvCache`] facade under random admit / append / cache / finish /
//! release sequences against a model of each live sequence's tokens: a
//! refusal changes nothing, lengths and page counts match the model, pages
//! are conserved, and releasing everything leaves no page referenced. Plus
//! the facade's construction and empty-prompt edge cases.

use pagoda_core::{
    Admission, KvCache, KvStorage, PageEntry, PageId, PagePool, PageTable, PoolStats, RadixCache,
    RadixNode, RadixStats, SeqEntry, SeqId, StorageError, Timestamp, PAGE_SIZE,
};
use proptest::prelude::*;

const PAGES: usize = 14; // fewer than SEQS × ROW: appends run out
const ROW: usize = 6; // pages per sequence: 96 tokens
const SEQS: usize = 4;

struct Storage {
    pages: Vec<PageEntry>,
    rows: Vec<PageId>,
    seqs: Vec<SeqEntry>,
    nodes: Vec<RadixNode>,
    index: Vec<u64>,
    scratch: Vec<PageId>,
}

impl Storage {
    fn new() -> Self {
        Self {
            pages: vec![PageEntry::EMPTY; PAGES],
            rows: vec![PageId::from_index(0); SEQS * ROW],
            seqs: vec![SeqEntry::EMPTY; SEQS],
            nodes: vec![RadixNode::EMPTY; PAGES],
            index: vec![0; RadixCache::index_len_for(PAGES)],
            scratch: vec![PageId::from_index(0); ROW],
        }
    }

    fn kv(&mut self) -> KvCache<'_> {
        KvCache::new(KvStorage {
            pages: &mut self.pages,
            rows: &mut self.rows,
            seqs: &mut self.seqs,
            nodes: &mut self.nodes,
            index: &mut self.index,
            scratch: &mut self.scratch,
        })
        .unwrap()
    }
}

/// Everything a refusal must leave as it was.
fn snapshot(kv: &KvCache<'_>) -> (PoolStats, RadixStats, u32, Option<PageId>, u64) {
    (
        kv.pool_stats(Timestamp(0)),
        kv.radix_stats(),
        kv.active_sequences(),
        kv.pool().least_recently_used(),
        kv.radix().version(),
    )
}

/// A prompt of `len` tokens from one of three families that share
/// prefixes (token `i` of family `f` is `f * 1000 + i`).
fn prompt(family: u32, len: usize) -> Vec<u32> {
    (0..len as u32).map(|i| family * 1000 + i).collect()
}

#[derive(Debug, Clone)]
enum Op {
    Admit {
        family: u32,
        len: usize,
        chunk: u32,
    },
    AdmitAfterOtherPeek {
        family: u32,
        other: u32,
        len: usize,
    },
    /// Admitted with no cached prefix, possibly after a stale peek.
    AdmitUncached {
        family: u32,
        len: usize,
        stale: bool,
    },
    Append {
        seq: usize,
        tokens: u32,
    },
    Cache {
        seq: usize,
    },
    Finish {
        seq: usize,
    },
    Release {
        seq: usize,
    },
    Flush,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..3u32, 0..120usize, 0..110u32)
            .prop_map(|(family, len, chunk)| Op::Admit { family, len, chunk }),
        1 => (0..3u32, 0..3u32, 1..90usize)
            .prop_map(|(family, other, len)| Op::AdmitAfterOtherPeek { family, other, len }),
        1 => (0..3u32, 1..90usize, any::<bool>())
            .prop_map(|(family, len, stale)| Op::AdmitUncached { family, len, stale }),
        3 => (0..SEQS, 0..40u32).prop_map(|(seq, tokens)| Op::Append { seq, tokens }),
        1 => (0..SEQS).prop_map(|seq| Op::Cache { seq }),
        2 => (0..SEQS).prop_map(|seq| Op::Finish { seq }),
        1 => (0..SEQS).prop_map(|seq| Op::Release { seq }),
        1 => Just(Op::Flush),
    ]
}

/// A live sequence in the model: its id and the tokens it holds.
struct Live {
    seq: SeqId,
    tokens: Vec<u32>,
}

fn admit(
    kv: &mut KvCache<'_>,
    live: &mut Vec<Live>,
    p: &[u32],
    admission: &Admission,
    chunk: u32,
) -> Result<(), TestCaseError> {
    let before = snapshot(kv);
    match kv.admit(p, admission, chunk) {
        Ok(admitted) => {
            let len = admitted.matched_tokens + chunk;
            prop_assert!(admitted.matched_tokens as usize <= p.len().saturating_sub(1));
            prop_assert_eq!(admitted.appended.first_position, admitted.matched_tokens);
            prop_assert_eq!(kv.len(admitted.seq), Ok(len));
            // Tokens past the prompt are the sequence's own.
            let own = 50_000 + 100 * live.len() as u32;
            let tokens = (0..len as usize)
                .map(|i| p.get(i).copied().unwrap_or(own + i as u32))
                .collect();
            live.push(Live {
                seq: admitted.seq,
                tokens,
            });
        }
        Err(_) => prop_assert_eq!(snapshot(kv), before, "a refused admission changed state"),
    }
    Ok(())
}

proptest! {
    #[test]
    fn kv_cache_refusals_change_nothing_and_nothing_leaks(
        ops in proptest::collection::vec(op(), 0..80)
    ) {
        let mut storage = Storage::new();
        let mut kv = storage.kv();
        let mut live: Vec<Live> = Vec::new();
        for op in ops {
            match op {
                Op::Admit { family, len, chunk } => {
                    let p = prompt(family, len);
                    let admission = kv.peek_admission(&p);
                    prop_assert!(admission.matched_tokens() as usize <= len.saturating_sub(1));
                    admit(&mut kv, &mut live, &p, &admission, chunk)?;
                }
                Op::AdmitAfterOtherPeek { family, other, len } => {
                    // A stale admission is looked up again, never trusted.
                    let p = prompt(family, len);
                    let admission = kv.peek_admission(&p);
                    let _ = kv.peek_admission(&prompt(other, len));
                    let chunk = len as u32 - admission.matched_tokens().min(len as u32);
                    admit(&mut kv, &mut live, &p, &admission, chunk)?;
                }
                Op::AdmitUncached { family, len, stale } => {
                    // Every prompt token computed, cached or not, and a
                    // stale admission looked up again the same way.
                    let p = prompt(family, len);
                    let admission = kv.peek_admission_uncached(&p);
                    prop_assert_eq!(admission.matched_tokens(), 0);
                    if stale {
                        let _ = kv.peek_admission(&p);
                    }
                    let before = live.len();
                    admit(&mut kv, &mut live, &p, &admission, len as u32)?;
                    if let Some(l) = live.get(before) {
                        prop_assert_eq!(kv.len(l.seq), Ok(len as u32), "a cached prefix served it");
                    }
                }
                Op::Append { seq, tokens } => {
                    let Some(l) = live.get_mut(seq) else { continue };
                    let before = snapshot(&kv);
                    match kv.append(l.seq, tokens) {
                        Ok(a) => {
                            prop_assert_eq!(a.first_position as usize, l.tokens.len());
                            let start = l.tokens.len() as u32;
                            let own = 70_000 + 100 * seq as u32;
                            l.tokens.extend((start..start + tokens).map(|i| own + i));
                        }
                        Err(_) => prop_assert_eq!(snapshot(&kv), before),
                    }
                }
                Op::Cache { seq } => {
                    let Some(l) = live.get(seq) else { continue };
                    prop_assert!(kv.cache(l.seq, &l.tokens).is_ok());
                }
                Op::Finish { seq } => {
                    if seq >= live.len() { continue; }
                    let l = live.swap_remove(seq);
                    prop_assert!(kv.finish(l.seq, &l.tokens).is_ok());
                    prop_assert!(kv.len(l.seq).is_err(), "finished means released");
                    let before = snapshot(&kv);
                    prop_assert!(kv.finish(l.seq, &l.tokens).is_err());
                    prop_assert_eq!(snapshot(&kv), before);
                }
                Op::Release { seq } => {
                    if seq >= live.len() { continue; }
                    let l = live.swap_remove(seq);
                    prop_assert!(kv.release(l.seq).is_ok());
                    prop_assert!(kv.release(l.seq).is_err());
                }
                Op::Flush => {
                    // Every evictable page goes; nothing a sequence holds.
                    let before = kv.pool_stats(Timestamp(0));
                    let freed = kv.evict_cached(u32::MAX);
                    let after = kv.pool_stats(Timestamp(0));
                    prop_assert_eq!(freed, before.evictable_pages);
                    prop_assert_eq!(after.evictable_pages, 0);
                    prop_assert_eq!(after.referenced_pages, before.referenced_pages);
                    prop_assert_eq!(after.free_pages, before.free_pages + freed);
                    // What stays cached is held by a running sequence.
                    prop_assert!(kv.radix_stats().nodes <= after.referenced_pages);
                }
            }
            prop_assert_eq!(kv.active_sequences() as usize, live.len());
            for l in &live {
                prop_assert_eq!(kv.len(l.seq), Ok(l.tokens.len() as u32));
                let pages = kv.pages(l.seq).unwrap().len();
                prop_assert_eq!(pages, l.tokens.len().div_ceil(PAGE_SIZE));
            }
            let s = kv.pool_stats(Timestamp(0));
            prop_assert_eq!(
                s.free_pages + s.evictable_pages + s.referenced_pages,
                s.total_pages
            );
        }
        for l in live.drain(..) {
            prop_assert!(kv.release(l.seq).is_ok());
        }
        prop_assert_eq!(kv.referenced_pages(), 0);
    }
}

#[test]
fn scratch_shorter_than_a_row_is_refused() {
    let mut s = Storage::new();
    let pool = PagePool::new(&mut s.pages).unwrap();
    let table = PageTable::new(&mut s.rows, &mut s.seqs).unwrap();
    let radix = RadixCache::new(&mut s.nodes, &mut s.index).unwrap();
    let short = &mut s.scratch[..ROW - 1];
    let refused = KvCache::from_parts(pool, table, radix, short);
    assert_eq!(refused.unwrap_err(), StorageError::Mismatched);
}

#[test]
fn an_empty_prompt_matches_nothing_and_admits_without_panic() {
    let mut s = Storage::new();
    let mut kv = s.kv();
    let admission = kv.peek_admission(&[]);
    assert_eq!(admission.matched_tokens(), 0);
    assert_eq!(admission.pages_needed(), 1, "room for the first output");
    let admitted = kv.admit(&[], &admission, 0).unwrap();
    assert_eq!(kv.len(admitted.seq), Ok(0));
    kv.release(admitted.seq).unwrap();
    assert_eq!(kv.referenced_pages(), 0);
}
