//! The radix prefix cache against a plain model — the set of cached
//! full-page token prefixes — under random workloads with heavy prefix
//! sharing: few-shot prompts (a shared instruction prefix), multi-turn chats
//! (each turn extends a finished conversation), tree-of-thought branches off a
//! shared trunk, and unrelated prompts.
//!
//! After every step: the matched length equals the longest full-page prefix
//! in the model; every prefix that left the cache was evicted (counted by the
//! cache) and never one a running sequence holds; identical prefixes of
//! running sequences share physical pages; pool and cache agree on how many
//! pages are cached. At the end, after unlocking and evicting everything, the
//! pool is whole again. The CI run covers 50 × 2,000 operations.

use std::collections::HashSet;

use pagoda_core::{
    AppendError, KvError, PageEntry, PageId, PagePool, PageTable, RadixCache, RadixNode, SeqEntry,
    SeqId,
};
use proptest::prelude::*;

const PAGES: usize = 96;
const NODES: usize = 64;
const SEQS: usize = 6;
const ROW: usize = 16;
const PAGE: usize = 16;

#[derive(Debug, Clone)]
enum Op {
    FewShot {
        system: u8,
        question: u32,
        len: u8,
    },
    MultiTurn {
        conversation: usize,
        seed: u32,
        len: u8,
    },
    Branch {
        trunk: u8,
        branch: u8,
        len: u8,
    },
    Unique {
        seed: u32,
        len: u8,
    },
    Finish {
        seq: usize,
    },
    Evict {
        pages: u8,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..3, any::<u32>(), 1u8..60)
            .prop_map(|(system, question, len)| Op::FewShot { system, question, len }),
        3 => (any::<usize>(), any::<u32>(), 1u8..50)
            .prop_map(|(conversation, seed, len)| Op::MultiTurn { conversation, seed, len }),
        3 => (0u8..2, 0u8..6, 1u8..40).prop_map(|(trunk, branch, len)| Op::Branch { trunk, branch, len }),
        1 => (any::<u32>(), 1u8..120).prop_map(|(seed, len)| Op::Unique { seed, len }),
        6 => any::<usize>().prop_map(|seq| Op::Finish { seq }),
        1 => (0u8..8).prop_map(|pages| Op::Evict { pages }),
    ]
}

fn stream(seed: u32, len: usize) -> impl Iterator<Item = u32> {
    (0..len as u32).map(move |i| {
        let x = seed.wrapping_mul(0x9E37_79B9) ^ i.wrapping_mul(0x85EB_CA6B);
        x ^ (x >> 15)
    })
}

/// The engine's use of the cache, checked against the model at every step.
struct Harness<'a> {
    pool: PagePool<'a>,
    table: PageTable<'a>,
    cache: RadixCache<'a>,
    /// Full-page token prefixes the cache should hold.
    cached: HashSet<Vec<u32>>,
    running: Vec<(SeqId, Vec<u32>)>,
    finished: Vec<Vec<u32>>,
    evicted_seen: u64,
}

impl Harness<'_> {
    fn prompt(&self, op: &Op) -> Option<Vec<u32>> {
        let max = ROW * PAGE;
        let mut t: Vec<u32> = match *op {
            Op::FewShot {
                system,
                question,
                len,
            } => stream(1000 + u32::from(system), 40 + 20 * usize::from(system))
                .chain(stream(question, usize::from(len)))
                .collect(),
            Op::MultiTurn {
                conversation,
                seed,
                len,
            } => {
                let base = if self.finished.is_empty() {
                    Vec::new()
                } else {
                    self.finished[conversation % self.finished.len()].clone()
                };
                base.into_iter()
                    .chain(stream(seed, usize::from(len)))
                    .collect()
            }
            Op::Branch { trunk, branch, len } => stream(2000 + u32::from(trunk), 48)
                .chain(stream(3000 + u32::from(branch), usize::from(len)))
                .collect(),
            Op::Unique { seed, len } => stream(seed, usize::from(len)).collect(),
            _ => return None,
        };
        t.truncate(max);
        Some(t)
    }

    fn expected_match(&self, tokens: &[u32]) -> usize {
        let mut k = 0;
        while (k + 1) * PAGE <= tokens.len() && self.cached.contains(&tokens[..(k + 1) * PAGE]) {
            k += 1;
        }
        k * PAGE
    }

    fn step(&mut self, op: Op) {
        if let Some(tokens) = self.prompt(&op) {
            self.start(tokens);
            return;
        }
        match op {
            Op::Finish { seq } if !self.running.is_empty() => {
                let (id, tokens) = self.running.remove(seq % self.running.len());
                let done = self
                    .cache
                    .insert(&mut self.table, id, &tokens, &mut self.pool)
                    .unwrap();
                let full = tokens.len() / PAGE;
                assert_eq!((done.cached_pages + done.declined_pages) as usize, full);
                for k in 1..=done.cached_pages as usize {
                    self.cached.insert(tokens[..k * PAGE].to_vec());
                }
                // Every cached page of the row is the tree's page for it.
                let mut pages = vec![PageId::from_index(0); ROW];
                let n = self.peek_pages(&tokens, &mut pages);
                assert!(n >= done.cached_pages as usize);
                assert_eq!(
                    &self.table.pages(id).unwrap()[..done.cached_pages as usize],
                    &pages[..done.cached_pages as usize],
                    "after insert the row uses the cached pages"
                );
                self.table.release(id, &mut self.pool).unwrap();
                self.finished.push(tokens);
                if self.finished.len() > 32 {
                    self.finished.remove(0);
                }
            }
            Op::Evict { pages } => {
                self.cache.evict(u32::from(pages), &mut self.pool);
            }
            _ => {}
        }
    }

    /// The pages the cache holds for the longest cached prefix of `tokens`
    /// (a match, as a new request would make).
    fn peek_pages(&mut self, tokens: &[u32], out: &mut [PageId]) -> usize {
        let n = self.cache.peek_prefix(tokens) as usize / PAGE;
        let hit = self
            .cache
            .match_prefix(&tokens[..n * PAGE], out, &mut self.pool);
        assert_eq!(hit.pages as usize, n.min(out.len()));
        hit.pages as usize
    }

    fn start(&mut self, tokens: Vec<u32>) {
        let expect = self.expected_match(&tokens);
        assert_eq!(self.cache.peek_prefix(&tokens) as usize, expect, "peek");
        let mut pages = [PageId::from_index(0); ROW];
        let hit = self.cache.match_prefix(&tokens, &mut pages, &mut self.pool);
        assert_eq!(hit.tokens as usize, expect, "match_prefix");
        let prefix = &pages[..hit.pages as usize];
        let seq = match self.table.create_with_prefix(prefix, &mut self.pool) {
            Ok(seq) => seq,
            Err(e) => {
                assert_eq!(e, KvError::NoFreeSequenceSlot);
                return;
            }
        };
        let rest = tokens.len() as u32 - hit.tokens;
        match self
            .table
            .append(seq, rest, &mut self.pool, &mut self.cache)
        {
            Ok(_) => self.running.push((seq, tokens)),
            Err(AppendError::PoolExhausted { .. }) => {
                self.table.release(seq, &mut self.pool).unwrap();
            }
            Err(e) => panic!("append: {e}"),
        }
    }

    fn check(&mut self) {
        // Every prefix that left the cache was evicted, and counted as such.
        let gone: Vec<_> = self
            .cached
            .iter()
            .filter(|t| (self.cache.peek_prefix(t) as usize) < t.len())
            .cloned()
            .collect();
        let evicted = self.cache.stats().evicted_pages;
        assert_eq!(
            gone.len() as u64,
            evicted - self.evicted_seen,
            "a prefix vanished without an eviction"
        );
        self.evicted_seen = evicted;
        for t in &gone {
            self.cached.remove(t);
        }
        assert_eq!(self.cache.len() as usize, self.cached.len());
        // Locked paths survive: a running sequence's cached pages stay cached.
        for (id, tokens) in &self.running {
            for (k, &page) in self.table.pages(*id).unwrap().iter().enumerate() {
                if self.pool.cache_tag(page).unwrap().is_some() {
                    let prefix = &tokens[..(k + 1) * PAGE];
                    assert!(self.cached.contains(prefix), "locked page evicted");
                    assert!(self.pool.refcount(page).unwrap() >= 1);
                }
            }
        }
        // Identical cached prefixes of running sequences share pages.
        for (a, ta) in &self.running {
            for (b, tb) in &self.running {
                let pa = self.table.pages(*a).unwrap();
                let pb = self.table.pages(*b).unwrap();
                for k in 0..pa.len().min(pb.len()) {
                    let cached_a = self.pool.cache_tag(pa[k]).unwrap().is_some();
                    let cached_b = self.pool.cache_tag(pb[k]).unwrap().is_some();
                    let end = (k + 1) * PAGE;
                    if cached_a
                        && cached_b
                        && ta.len() >= end
                        && tb.len() >= end
                        && ta[..end] == tb[..end]
                    {
                        assert_eq!(pa[k], pb[k], "one physical page per cached prefix");
                    }
                }
            }
        }
        assert_eq!(
            self.pool.free_pages() + self.pool.referenced_pages() + self.pool.evictable_pages(),
            self.pool.total_pages()
        );
    }

    fn finish_all(&mut self) {
        while !self.running.is_empty() {
            self.step(Op::Finish { seq: 0 });
            self.check();
        }
        assert_eq!(self.pool.referenced_pages(), 0);
        assert_eq!(self.pool.evictable_pages(), self.cache.len());
        self.cache.evict(u32::MAX, &mut self.pool);
        assert!(self.cache.is_empty());
        assert_eq!(
            self.pool.free_pages(),
            self.pool.total_pages(),
            "pool whole again"
        );
    }
}

fn run(ops: Vec<Op>) {
    let mut pages = vec![PageEntry::EMPTY; PAGES];
    let mut rows = vec![PageId::from_index(0); SEQS * ROW];
    let mut seqs = vec![SeqEntry::EMPTY; SEQS];
    let mut nodes = vec![RadixNode::EMPTY; NODES];
    let mut index = vec![0u64; RadixCache::index_len_for(NODES)];
    let mut h = Harness {
        pool: PagePool::new(&mut pages).unwrap(),
        table: PageTable::new(&mut rows, &mut seqs).unwrap(),
        cache: RadixCache::new(&mut nodes, &mut index).unwrap(),
        cached: HashSet::new(),
        running: Vec::new(),
        finished: Vec::new(),
        evicted_seen: 0,
    };
    for op in ops {
        h.step(op);
        h.check();
    }
    h.finish_all();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 50, ..ProptestConfig::default() })]

    #[test]
    fn radix_cache_matches_the_model(ops in prop::collection::vec(op(), 2000)) {
        run(ops);
    }
}
