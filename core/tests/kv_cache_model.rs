//! The page pool and page table against a plain reference model, under random
//! sequences of create / append / fork (copy-on-write) / release / cache /
//! uncache / touch / evict.
//!
//! After every step: each page's refcount equals the rows that hold it; free +
//! referenced + evictable = total; no free page is referenced; the LRU order is
//! the model's; an allocation takes a free page if there is one, else the least
//! recently used evictable page; a running sequence's page is never evicted;
//! fill counts and the allocated − freed balance agree; after releasing
//! everything, every page is free or cached.
//!
//! The CI run covers 100 × 1,000 operations; `soak_ten_million_operations` runs
//! 10 million (`cargo test --release -- --ignored`).

use std::collections::{HashMap, VecDeque};

use pagoda_core::{
    AppendError, CacheTag, EvictionListener, KvError, PageEntry, PageId, PagePool, PageTable,
    SeqEntry, SeqError, SeqId, TableFull, Timestamp,
};
use proptest::prelude::*;

const PAGES: usize = 24;
const SEQS: usize = 6;
const ROW: usize = 8;

#[derive(Debug, Clone)]
enum Op {
    Create,
    Append { seq: usize, tokens: u32 },
    Fork { seq: usize },
    Release { seq: usize },
    ReleaseStale,
    Cache { seq: usize, page: usize },
    Uncache { page: usize },
    Touch { page: usize },
    Evict { max: u32 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => Just(Op::Create),
        8 => (any::<usize>(), 0u32..40).prop_map(|(seq, tokens)| Op::Append { seq, tokens }),
        2 => any::<usize>().prop_map(|seq| Op::Fork { seq }),
        3 => any::<usize>().prop_map(|seq| Op::Release { seq }),
        1 => Just(Op::ReleaseStale),
        3 => (any::<usize>(), any::<usize>()).prop_map(|(seq, page)| Op::Cache { seq, page }),
        1 => any::<usize>().prop_map(|page| Op::Uncache { page }),
        2 => any::<usize>().prop_map(|page| Op::Touch { page }),
        1 => (0u32..6).prop_map(|max| Op::Evict { max }),
    ]
}

/// What the pool reported evicting.
#[derive(Default)]
struct Evicted(Vec<(PageId, CacheTag)>);

impl EvictionListener for Evicted {
    fn page_evicted(&mut self, page: PageId, tag: CacheTag) {
        self.0.push((page, tag));
    }
}

/// The plain model: sequences as vectors of pages, the cache as a map, the LRU
/// list as a queue.
#[derive(Default)]
struct Model {
    seqs: Vec<(SeqId, Vec<PageId>, u32)>,
    tags: HashMap<PageId, CacheTag>,
    lru: VecDeque<PageId>,
    stale: Vec<SeqId>,
    next_tag: u32,
}

impl Model {
    fn refs(&self, page: PageId) -> u32 {
        self.seqs
            .iter()
            .map(|(_, pages, _)| pages.iter().filter(|&&p| p == page).count() as u32)
            .sum()
    }

    fn is_free(&self, page: PageId) -> bool {
        self.refs(page) == 0 && !self.tags.contains_key(&page)
    }

    fn free_count(&self) -> u32 {
        (0..PAGES as u32)
            .filter(|&i| self.is_free(PageId::from_index(i)))
            .count() as u32
    }

    /// The model's expectation for one allocation, given what the pool took.
    fn allocated(
        &mut self,
        page: PageId,
        free_before: bool,
        evicted: &mut Vec<(PageId, CacheTag)>,
    ) {
        if free_before {
            assert!(self.is_free(page), "{page} was not free");
        } else {
            let lru = self
                .lru
                .pop_front()
                .expect("allocation with nothing evictable");
            assert_eq!(
                page, lru,
                "allocation must reclaim the least recently used page"
            );
            let tag = self.tags.remove(&page).unwrap();
            assert_eq!(evicted.remove(0), (page, tag), "the owner is told");
        }
    }

    /// After a reference to `page` went: a cached page nobody references any
    /// more joins the LRU tail.
    fn released(&mut self, page: PageId) {
        if self.refs(page) == 0 && self.tags.contains_key(&page) {
            self.lru.push_back(page);
        }
    }
}

struct Harness {
    model: Model,
    stats_before: pagoda_core::PoolStats,
}

impl Harness {
    fn run(ops: impl IntoIterator<Item = Op>) {
        let mut pages = vec![PageEntry::EMPTY; PAGES];
        let mut rows = vec![PageId::from_index(0); SEQS * ROW];
        let mut seqs = vec![SeqEntry::EMPTY; SEQS];
        let mut pool = PagePool::new(&mut pages).unwrap();
        let mut table = PageTable::new(&mut rows, &mut seqs).unwrap();
        let mut h = Harness {
            model: Model::default(),
            stats_before: pool.stats(Timestamp(0)),
        };
        for op in ops {
            h.step(op, &mut pool, &mut table);
            h.check(&pool, &table);
        }
        // Release everything: every page is free or cached, nothing referenced.
        while let Some((seq, _, _)) = h.model.seqs.first().cloned() {
            h.step(Op::Release { seq: 0 }, &mut pool, &mut table);
            assert_eq!(table.len(seq), Err(SeqError::UnknownSequence));
        }
        h.check(&pool, &table);
        assert_eq!(pool.referenced_pages(), 0);
        assert_eq!(
            pool.free_pages() + pool.evictable_pages(),
            pool.total_pages()
        );
        assert_eq!(pool.evictable_pages() as usize, h.model.tags.len());
        assert_eq!(pool.evict(u32::MAX, &mut ()), h.model.tags.len() as u32);
        assert_eq!(pool.free_pages(), pool.total_pages());
    }

    fn step(&mut self, op: Op, pool: &mut PagePool<'_>, table: &mut PageTable<'_>) {
        let m = &mut self.model;
        let n = m.seqs.len();
        let mut evicted = Evicted::default();
        match op {
            Op::Create => match table.create() {
                Ok(seq) => m.seqs.push((seq, Vec::new(), 0)),
                Err(TableFull) => assert_eq!(n, SEQS),
            },
            Op::Append { seq, tokens } if n > 0 => {
                let i = seq % n;
                let (id, ref pages, len) = m.seqs[i];
                let new_len = len + tokens;
                let fresh = new_len.div_ceil(16) as usize - pages.len();
                let cow_src = (tokens > 0 && len % 16 != 0)
                    .then(|| *pages.last().unwrap())
                    .filter(|&p| m.refs(p) > 1);
                let needed = (fresh + usize::from(cow_src.is_some())) as u32;
                let available = m.free_count() + m.lru.len() as u32;
                let result = table.append(id, tokens, pool, &mut evicted);
                if new_len > (ROW * 16) as u32 {
                    assert_eq!(
                        result,
                        Err(AppendError::SequenceTooLong { max_tokens: 128 })
                    );
                } else if needed > available {
                    assert_eq!(
                        result,
                        Err(AppendError::PoolExhausted { needed, available })
                    );
                } else {
                    let done = result.unwrap();
                    assert_eq!(done.pages_added as usize, fresh);
                    assert_eq!(done.copies.first().map(|c| c.src), cow_src);
                    let mut pages = m.seqs[i].1.clone();
                    if let Some(copy) = done.copies.first() {
                        assert_eq!(copy.slots, len % 16);
                        let free_before = m.free_count() > 0;
                        m.allocated(copy.dst, free_before, &mut evicted.0);
                        *pages.last_mut().unwrap() = copy.dst;
                        m.seqs[i].1 = pages.clone();
                    }
                    let new_pages = &table.pages(id).unwrap()[pages.len()..];
                    for &page in new_pages {
                        let free_before = m.free_count() > 0;
                        m.allocated(page, free_before, &mut evicted.0);
                        m.seqs[i].1.push(page);
                    }
                    m.seqs[i].2 = new_len;
                }
                assert!(evicted.0.is_empty(), "unexpected evictions");
            }
            Op::Fork { seq } if n > 0 => {
                let (parent, pages, len) = m.seqs[seq % n].clone();
                match table.fork(parent, pool) {
                    Ok(child) => m.seqs.push((child, pages, len)),
                    Err(e) => {
                        assert_eq!(e, KvError::NoFreeSequenceSlot);
                        assert_eq!(n, SEQS);
                    }
                }
            }
            Op::Release { seq } if n > 0 => {
                let (id, pages, _) = m.seqs.remove(seq % n);
                table.release(id, pool).unwrap();
                // A row holds each page once, so dropping the whole row and
                // then walking it last page first is what the table does.
                for &page in pages.iter().rev() {
                    m.released(page);
                }
                m.stale.push(id);
            }
            Op::ReleaseStale => {
                if let Some(&id) = m.stale.last() {
                    assert_eq!(table.release(id, pool), Err(SeqError::UnknownSequence));
                }
            }
            Op::Cache { seq, page } if n > 0 => {
                let pages = &m.seqs[seq % n].1;
                if !pages.is_empty() {
                    let p = pages[page % pages.len()];
                    let tag = CacheTag(m.next_tag);
                    m.next_tag += 1;
                    pool.set_cache_tag(p, tag).unwrap();
                    m.tags.insert(p, tag);
                }
            }
            Op::Uncache { page } => {
                let p = PageId::from_index((page % PAGES) as u32);
                pool.clear_cache_tag(p).unwrap();
                if m.tags.remove(&p).is_some() {
                    m.lru.retain(|&q| q != p);
                }
            }
            Op::Touch { page } => {
                let p = PageId::from_index((page % PAGES) as u32);
                pool.touch(p).unwrap();
                if let Some(at) = m.lru.iter().position(|&q| q == p) {
                    m.lru.remove(at);
                    m.lru.push_back(p);
                }
            }
            Op::Evict { max } => {
                let count = pool.evict(max, &mut evicted);
                assert_eq!(count as usize, (max as usize).min(m.lru.len()));
                for (page, tag) in evicted.0.drain(..) {
                    assert_eq!(Some(page), m.lru.pop_front());
                    assert_eq!(m.tags.remove(&page), Some(tag));
                    assert_eq!(m.refs(page), 0, "a referenced page was evicted");
                }
            }
            _ => {}
        }
    }

    fn check(&mut self, pool: &PagePool<'_>, table: &PageTable<'_>) {
        let m = &self.model;
        let (mut free, mut referenced) = (0, 0);
        let mut filled = 0u64;
        for i in 0..PAGES as u32 {
            let page = PageId::from_index(i);
            let refs = m.refs(page);
            assert_eq!(pool.refcount(page), Ok(refs), "{page}");
            assert_eq!(pool.is_free(page), Ok(m.is_free(page)), "{page}");
            assert_eq!(
                pool.cache_tag(page),
                Ok(m.tags.get(&page).copied()),
                "{page}"
            );
            free += u32::from(m.is_free(page));
            referenced += u32::from(refs > 0);
            filled += u64::from(pool.filled_slots(page).unwrap());
        }
        assert_eq!(pool.free_pages(), free);
        assert_eq!(pool.referenced_pages(), referenced);
        assert_eq!(pool.evictable_pages() as usize, m.lru.len());
        assert_eq!(
            pool.free_pages() + pool.referenced_pages() + pool.evictable_pages(),
            pool.total_pages()
        );
        assert_eq!(pool.least_recently_used(), m.lru.front().copied());
        for (id, pages, len) in &m.seqs {
            assert_eq!(table.pages(*id).unwrap(), &pages[..]);
            assert_eq!(table.len(*id), Ok(*len));
            for (k, &page) in pages.iter().enumerate() {
                let expect = (*len as usize - k * 16).min(16) as u32;
                assert_eq!(pool.filled_slots(page), Ok(expect), "fill of {page}");
            }
        }
        let stats = pool.stats(Timestamp(1));
        assert_eq!(stats.filled_slots, filled);
        assert_eq!(
            stats.allocated_total - stats.freed_total,
            u64::from(stats.pages_in_use())
        );
        assert!(stats.allocated_total >= self.stats_before.allocated_total);
        assert!(stats.evictions >= self.stats_before.evictions);
        self.stats_before = stats;
        assert_eq!(table.active_sequences() as usize, m.seqs.len());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 100, ..ProptestConfig::default() })]

    #[test]
    fn pool_and_table_match_the_model(ops in prop::collection::vec(op(), 1000)) {
        Harness::run(ops);
    }
}

/// SplitMix64: a tiny, seeded generator for the soak run.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

#[test]
#[ignore = "soak: 10 million operations; run with --release -- --ignored"]
fn soak_ten_million_operations() {
    let mut rng = SplitMix(0x5eed);
    for _ in 0..1_000 {
        let ops = (0..10_000).map(|_| {
            let r = rng.next();
            let a = (r >> 8) as usize;
            let b = (r >> 36) as usize;
            match r % 24 {
                0..=2 => Op::Create,
                3..=10 => Op::Append {
                    seq: a,
                    tokens: (b % 40) as u32,
                },
                11..=12 => Op::Fork { seq: a },
                13..=15 => Op::Release { seq: a },
                16 => Op::ReleaseStale,
                17..=19 => Op::Cache { seq: a, page: b },
                20 => Op::Uncache { page: a },
                21..=22 => Op::Touch { page: a },
                _ => Op::Evict {
                    max: (b % 6) as u32,
                },
            }
        });
        Harness::run(ops.collect::<Vec<_>>());
    }
}
