//! Prefix-cache costs with 10, 1,000 and 100,000 cached sequences in the
//! tree, side by side, to show that lookups and evictions do not grow with
//! the cache.
//!
//! Targets: `match_prefix` of a 2,048-token prompt that fully hits in under
//! 2 µs (issue 3); evicting 1,000 pages in at most 10 µs with 100,000 cached
//! sequences (issue 22).

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use pagoda_core::{PageEntry, PageId, PagePool, PageTable, RadixCache, RadixNode, SeqEntry};

const BACKGROUND: [usize; 3] = [10, 1_000, 100_000];
const PROMPT: usize = 2048;
const ROW: usize = PROMPT / 16;

fn tokens(seed: u64, len: usize) -> Vec<u32> {
    // SplitMix64 over (seed, position): distinct seeds give distinct pages.
    (0..len as u64)
        .map(|i| {
            let mut z = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ i.wrapping_add(0x632B_E59B);
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            (z ^ (z >> 31)) as u32
        })
        .collect()
}

struct Storage {
    pages: Vec<PageEntry>,
    rows: Vec<PageId>,
    seqs: Vec<SeqEntry>,
    nodes: Vec<RadixNode>,
    index: Vec<u64>,
}

struct World<'a> {
    pool: PagePool<'a>,
    table: PageTable<'a>,
    cache: RadixCache<'a>,
}

impl Storage {
    /// The same capacity for every background size, so the figures compare
    /// the number of cached sequences, not the size of the storage.
    fn new() -> Self {
        // Two pages per background sequence, a few 2,048-token prompts, room
        // for 1,000 more.
        let max_background = BACKGROUND[BACKGROUND.len() - 1];
        let pages = max_background * 2 + 8 * ROW + 2_000;
        Self {
            pages: vec![PageEntry::EMPTY; pages],
            rows: vec![PageId::from_index(0); 16 * ROW],
            seqs: vec![SeqEntry::EMPTY; 16],
            nodes: vec![RadixNode::EMPTY; pages],
            index: vec![0u64; RadixCache::index_len_for(pages)],
        }
    }

    /// A cache holding `background` distinct 32-token sequences and one
    /// 2,048-token prompt, all locked (as if running) so that evictions in
    /// the benchmarks only ever take the pages a benchmark adds.
    fn world(&mut self, background: usize, prompt: &[u32]) -> World<'_> {
        let mut w = World {
            pool: PagePool::new(&mut self.pages).unwrap(),
            table: PageTable::new(&mut self.rows, &mut self.seqs).unwrap(),
            cache: RadixCache::new(&mut self.nodes, &mut self.index).unwrap(),
        };
        let mut out = vec![PageId::from_index(0); ROW];
        for i in 0..=background {
            let t = if i == background {
                prompt.to_vec()
            } else {
                tokens(i as u64 + 1, 32)
            };
            w.cache_locked(&t, &mut out);
        }
        w
    }
}

impl World<'_> {
    /// Runs a sequence of tokens `t` and caches it, unlocked.
    fn cache_sequence(&mut self, t: &[u32]) {
        let seq = self.table.create().unwrap();
        self.table
            .append(seq, t.len() as u32, &mut self.pool, &mut self.cache)
            .unwrap();
        self.cache
            .insert(&mut self.table, seq, t, &mut self.pool)
            .unwrap();
        self.table.release(seq, &mut self.pool).unwrap();
    }

    /// Caches `t` and locks it, as a running sequence would.
    fn cache_locked(&mut self, t: &[u32], out: &mut [PageId]) {
        self.cache_sequence(t);
        let hit = self.cache.match_prefix(t, out, &mut self.pool);
        self.cache
            .lock(&out[..hit.pages as usize], &mut self.pool)
            .unwrap();
    }
}

fn prefix_cache(c: &mut Criterion) {
    let prompt = tokens(u64::MAX, PROMPT);
    let mut miss = prompt.clone();
    miss[0] ^= 1;
    for background in BACKGROUND {
        let mut storage = Storage::new();
        let mut w = storage.world(background, &prompt);
        let mut out = vec![PageId::from_index(0); ROW];
        assert_eq!(
            w.cache.match_prefix(&prompt, &mut out, &mut w.pool).tokens as usize,
            PROMPT
        );

        let mut group = c.benchmark_group("radix");
        group.bench_with_input(
            BenchmarkId::new("match 2048 tokens, full hit", background),
            &background,
            |b, _| b.iter(|| black_box(w.cache.match_prefix(&prompt, &mut out, &mut w.pool))),
        );
        group.bench_with_input(
            BenchmarkId::new("match 2048 tokens, miss at first page", background),
            &background,
            |b, _| b.iter(|| black_box(w.cache.match_prefix(&miss, &mut out, &mut w.pool))),
        );
        group.bench_with_input(
            BenchmarkId::new("insert 2048 new tokens (128 pages)", background),
            &background,
            |b, _| {
                let mut seed = 1u64 << 40;
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        seed += 1;
                        let t = tokens(seed, PROMPT);
                        let seq = w.table.create().unwrap();
                        w.table
                            .append(seq, PROMPT as u32, &mut w.pool, &mut w.cache)
                            .unwrap();
                        let start = Instant::now();
                        let done = w.cache.insert(&mut w.table, seq, &t, &mut w.pool).unwrap();
                        total += start.elapsed();
                        assert_eq!(done.new_pages as usize, ROW);
                        w.table.release(seq, &mut w.pool).unwrap();
                        w.cache.evict(ROW as u32, &mut w.pool);
                    }
                    total
                })
            },
        );
        group.bench_with_input(
            BenchmarkId::new("evict 1000 pages", background),
            &background,
            |b, _| {
                let mut seed = 1u64 << 50;
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        // 1,000 unlocked cached pages: 8 sequences of 125.
                        for _ in 0..8 {
                            seed += 1;
                            w.cache_sequence(&tokens(seed, 125 * 16));
                        }
                        let start = Instant::now();
                        let evicted = w.cache.evict(1_000, &mut w.pool);
                        total += start.elapsed();
                        assert_eq!(evicted, 1_000);
                    }
                    total
                })
            },
        );
        group.finish();
    }
}

criterion_group!(benches, prefix_cache);
criterion_main!(benches);
