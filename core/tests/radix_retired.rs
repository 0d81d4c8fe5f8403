//! Retired nodes (evicted, but still in the hash index until a drain) against
//! a model that never looks at the index: which prefix each page caches,
//! from the page table's rows after every insert, and whether the pool
//! still tags that page (an evicted page loses its tag). A prefix is
//! matchable when each of its pages is, under the same caching of its
//! parent; a match must find exactly that.
//!
//! Tiny node storage and the smallest index the cache accepts keep probe
//! chains long and full of retired entries; few distinct tokens make the
//! same prefixes come back again and again, evicted and reinserted while
//! their retired entries are still indexed, sometimes into the same node.
//! Evictions come from the cache, from the raw pool, and from allocations;
//! touching an inner page out of order breaks the leaf-first rule, so
//! detached nodes occur too.

use std::collections::{HashMap, HashSet};

use pagoda_core::{
    AppendError, KvError, PageEntry, PageId, PagePool, PageTable, RadixCache, RadixNode, SeqEntry,
    SeqId,
};
use proptest::prelude::*;

const PAGE: usize = 16;
const ROW: usize = 6;
const SEQS: usize = 3;

#[derive(Debug, Clone)]
enum Op {
    /// Match a prompt, then run it in a new sequence.
    Start { family: u8, tail: u8, len: u8 },
    /// Cache a running sequence and release it.
    Finish { seq: usize },
    /// Evict through the cache.
    Evict { pages: u8 },
    /// Evict through the raw pool.
    PoolEvict { pages: u8 },
    /// Mark an evictable page used now, whatever its place in the tree.
    Touch { pick: usize },
    /// Look a prompt up without running it.
    Lookup { family: u8, tail: u8, len: u8 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (0u8..3, 0u8..3, 1u8..(ROW * PAGE) as u8)
            .prop_map(|(family, tail, len)| Op::Start { family, tail, len }),
        5 => any::<usize>().prop_map(|seq| Op::Finish { seq }),
        2 => (0u8..6).prop_map(|pages| Op::Evict { pages }),
        1 => (0u8..4).prop_map(|pages| Op::PoolEvict { pages }),
        1 => any::<usize>().prop_map(|pick| Op::Touch { pick }),
        3 => (0u8..3, 0u8..3, 1u8..(ROW * PAGE) as u8)
            .prop_map(|(family, tail, len)| Op::Lookup { family, tail, len }),
    ]
}

/// Few families and tails, so prefixes repeat: the first two pages are the
/// family's, the rest depend on the tail too.
fn prompt(family: u8, tail: u8, len: u8) -> Vec<u32> {
    (0..u32::from(len))
        .map(|i| {
            if i < 2 * PAGE as u32 {
                u32::from(family) * 1_000 + i
            } else {
                u32::from(family) * 1_000 + u32::from(tail) * 100_000 + i
            }
        })
        .collect()
}

/// What the model knows of one cached prefix.
#[derive(Debug, Clone, Copy)]
struct Cached {
    /// The page it was last cached in.
    page: PageId,
    /// Which caching of the prefix this is: a new node each time.
    generation: u64,
    /// The parent prefix's generation when this one was cached. A parent
    /// evicted and cached again is a new node that this one is not under.
    parent: Option<u64>,
}

struct Harness<'a> {
    pool: PagePool<'a>,
    table: PageTable<'a>,
    cache: RadixCache<'a>,
    /// The latest caching of each prefix.
    cached: HashMap<Vec<u32>, Cached>,
    /// Every page ever cached: an older caching of a prefix may still hold
    /// its page, out of reach under a parent that was evicted.
    ever: HashSet<PageId>,
    generations: u64,
    running: Vec<(SeqId, Vec<u32>)>,
}

impl Harness<'_> {
    /// The pages of the longest prefix of `tokens` that a walk from the root
    /// reaches: each page still tagged, under the same caching of its parent.
    fn expected(&self, tokens: &[u32]) -> Vec<PageId> {
        let mut pages = Vec::new();
        let mut parent = None;
        for end in (PAGE..=tokens.len()).step_by(PAGE) {
            match self.cached.get(&tokens[..end]) {
                Some(c) if self.tagged(c.page) && c.parent == parent => {
                    pages.push(c.page);
                    parent = Some(c.generation);
                }
                _ => break,
            }
        }
        pages
    }

    fn tagged(&self, page: PageId) -> bool {
        self.pool.cache_tag(page).unwrap().is_some()
    }

    fn lookup(&mut self, tokens: &[u32]) -> Vec<PageId> {
        let expect = self.expected(tokens);
        assert_eq!(
            self.cache.peek_prefix(tokens) as usize,
            expect.len() * PAGE,
            "peek_prefix"
        );
        let mut out = [PageId::from_index(0); ROW];
        let hit = self.cache.match_prefix(tokens, &mut out, &mut self.pool);
        assert_eq!(&out[..hit.pages as usize], &expect[..], "match_prefix");
        expect
    }

    fn step(&mut self, op: Op) {
        match op {
            Op::Start { family, tail, len } => {
                let tokens = prompt(family, tail, len);
                let prefix = self.lookup(&tokens);
                let seq = match self.table.create_with_prefix(&prefix, &mut self.pool) {
                    Ok(seq) => seq,
                    Err(e) => {
                        assert_eq!(e, KvError::NoFreeSequenceSlot);
                        return;
                    }
                };
                let rest = tokens.len() - prefix.len() * PAGE;
                match self
                    .table
                    .append(seq, rest as u32, &mut self.pool, &mut self.cache)
                {
                    Ok(_) => self.running.push((seq, tokens)),
                    Err(AppendError::PoolExhausted { .. }) => {
                        self.table.release(seq, &mut self.pool).unwrap();
                    }
                    Err(e) => panic!("append: {e}"),
                }
            }
            Op::Finish { seq } if !self.running.is_empty() => {
                let (id, tokens) = self.running.remove(seq % self.running.len());
                let full = tokens.len() / PAGE;
                let reached = self.expected(&tokens).len();
                let done = self
                    .cache
                    .insert(&mut self.table, id, &tokens, &mut self.pool)
                    .unwrap();
                assert_eq!((done.cached_pages + done.declined_pages) as usize, full);
                assert_eq!(
                    done.new_pages as usize,
                    done.cached_pages as usize - reached
                );
                let row = self.table.pages(id).unwrap()[..done.cached_pages as usize].to_vec();
                // The reached pages are the row's now (deduplicated); past
                // them, each page is a new node under the one before.
                assert_eq!(&row[..reached], &self.expected(&tokens)[..reached]);
                for (k, &page) in row.iter().enumerate().skip(reached) {
                    // A reused page caches only its new prefix.
                    self.cached.retain(|_, c| c.page != page);
                    let parent = k
                        .checked_sub(1)
                        .map(|p| self.cached[&tokens[..(p + 1) * PAGE]].generation);
                    self.generations += 1;
                    let c = Cached {
                        page,
                        generation: self.generations,
                        parent,
                    };
                    self.cached.insert(tokens[..(k + 1) * PAGE].to_vec(), c);
                    self.ever.insert(page);
                }
                self.table.release(id, &mut self.pool).unwrap();
            }
            Op::Evict { pages } => {
                self.cache.evict(u32::from(pages), &mut self.pool);
            }
            Op::PoolEvict { pages } => {
                self.pool.evict(u32::from(pages), &mut self.cache);
            }
            Op::Touch { pick } => {
                let evictable: Vec<PageId> = self
                    .cached
                    .values()
                    .map(|c| c.page)
                    .filter(|&p| self.pool.refcount(p) == Ok(0) && self.tagged(p))
                    .collect();
                if !evictable.is_empty() {
                    self.pool.touch(evictable[pick % evictable.len()]).unwrap();
                }
            }
            Op::Lookup { family, tail, len } => {
                self.lookup(&prompt(family, tail, len));
            }
            Op::Finish { .. } => {}
        }
    }

    /// Every prefix the model knows matches as far as the model reaches; the
    /// pool tags exactly the model's pages that were never evicted, and the
    /// tree has one node per tagged page, reachable or not.
    fn check(&mut self) {
        let prefixes: Vec<Vec<u32>> = self.cached.keys().cloned().collect();
        for prefix in &prefixes {
            let expect = self.expected(prefix).len() * PAGE;
            assert_eq!(
                self.cache.peek_prefix(prefix) as usize,
                expect,
                "peek_prefix"
            );
        }
        let in_pool = (0..self.pool.total_pages())
            .filter(|&i| self.tagged(PageId::from_index(i)))
            .count();
        let known = self.ever.iter().filter(|&&p| self.tagged(p)).count();
        assert_eq!(known, in_pool, "model and pool disagree");
        assert_eq!(
            self.cache.len() as usize,
            in_pool,
            "one node per cached page"
        );
    }
}

fn run(nodes: usize, index: usize, pages: usize, ops: Vec<Op>) {
    let mut page_store = vec![PageEntry::EMPTY; pages];
    let mut rows = vec![PageId::from_index(0); SEQS * ROW];
    let mut seqs = vec![SeqEntry::EMPTY; SEQS];
    let mut node_store = vec![RadixNode::EMPTY; nodes];
    let mut index_store = vec![0u64; index];
    let mut h = Harness {
        pool: PagePool::new(&mut page_store).unwrap(),
        table: PageTable::new(&mut rows, &mut seqs).unwrap(),
        cache: RadixCache::new(&mut node_store, &mut index_store).unwrap(),
        cached: HashMap::new(),
        ever: HashSet::new(),
        generations: 0,
        running: Vec::new(),
    };
    for op in ops {
        h.step(op);
        h.check();
    }
    while !h.running.is_empty() {
        h.step(Op::Finish { seq: 0 });
        h.check();
    }
    h.cache.evict(u32::MAX, &mut h.pool);
    h.check();
    assert_eq!(
        h.pool.free_pages(),
        h.pool.total_pages(),
        "pool whole again"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Node storage from one node to more than the pool has pages; the index
    /// is the smallest power of two larger than the node storage, so it is
    /// nearly full of live and retired entries.
    #[test]
    fn lookups_ignore_retired_entries(
        nodes in 1usize..24,
        pages in 8usize..24,
        ops in prop::collection::vec(op(), 600),
    ) {
        let index = (nodes + 1).next_power_of_two();
        run(nodes, index, pages, ops);
    }
}
