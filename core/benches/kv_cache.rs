//! Paged-KV-cache operation costs, each at 1k and 1M pages side by side to show
//! that no operation grows with the pool.
//!
//! Targets (issue 2): allocate+free under 20 ns, amortised append under 5 ns.

use std::hint::black_box;
use std::time::Instant;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use pagoda_core::{CacheTag, PageEntry, PageId, PagePool, PageTable, SeqEntry};

const POOL_SIZES: [usize; 2] = [1 << 10, 1 << 20];

fn allocate_free(c: &mut Criterion) {
    let mut group = c.benchmark_group("allocate+free");
    for pages in POOL_SIZES {
        let mut storage = vec![PageEntry::EMPTY; pages];
        let mut pool = PagePool::new(&mut storage).unwrap();
        // Hold half the pool so the free list is not trivially short.
        let held: Vec<_> = (0..pages / 2)
            .map(|_| pool.allocate(&mut ()).unwrap())
            .collect();
        group.bench_with_input(BenchmarkId::from_parameter(pages), &pages, |b, _| {
            b.iter(|| {
                let page = pool.allocate(&mut ()).unwrap();
                pool.release(black_box(page)).unwrap();
            })
        });
        black_box(held);
    }
    group.finish();
}

fn append_one_token(c: &mut Criterion) {
    let mut group = c.benchmark_group("append one token (amortised)");
    group.throughput(Throughput::Elements(1));
    for pages in POOL_SIZES {
        let mut storage = vec![PageEntry::EMPTY; pages];
        let mut pool = PagePool::new(&mut storage).unwrap();
        let row_pages = 256.min(pages);
        let mut rows = vec![PageId::from_index(0); row_pages];
        let mut seqs = [SeqEntry::EMPTY; 1];
        let mut table = PageTable::new(&mut rows, &mut seqs).unwrap();
        let max = table.max_tokens_per_sequence();
        group.bench_with_input(BenchmarkId::from_parameter(pages), &pages, |b, _| {
            // The loop an engine runs: append token after token, a fresh page
            // every 16, the row released and reused when full (releasing is
            // timed too: it is the other half of every page's life).
            b.iter_custom(|iters| {
                let mut copies = Vec::with_capacity(16);
                let mut left = iters;
                let start = Instant::now();
                while left > 0 {
                    let tokens = left.min(u64::from(max));
                    left -= tokens;
                    let seq = table.create().unwrap();
                    for _ in 0..tokens {
                        // What an engine does with the result: queue the copy,
                        // if any, for the backend.
                        match table.append(seq, 1, &mut pool, &mut ()) {
                            Ok(done) => {
                                if let Some(copy) = done.copies.first() {
                                    copies.push(copy);
                                }
                            }
                            Err(e) => panic!("{e}"),
                        }
                    }
                    table.release(seq, &mut pool).unwrap();
                }
                let elapsed = start.elapsed();
                assert!(black_box(copies).is_empty(), "private pages need no copy");
                elapsed
            })
        });
    }
    group.finish();
}

fn fork_copy_on_write(c: &mut Criterion) {
    let mut group = c.benchmark_group("fork+copy-on-write+release");
    for pages in POOL_SIZES {
        let mut storage = vec![PageEntry::EMPTY; pages];
        let mut pool = PagePool::new(&mut storage).unwrap();
        let mut rows = vec![PageId::from_index(0); 2 * 4];
        let mut seqs = [SeqEntry::EMPTY; 2];
        let mut table = PageTable::new(&mut rows, &mut seqs).unwrap();
        let parent = table.create().unwrap();
        table.append(parent, 40, &mut pool, &mut ()).unwrap();
        group.bench_with_input(BenchmarkId::from_parameter(pages), &pages, |b, _| {
            b.iter(|| {
                let child = table.fork(parent, &mut pool).unwrap();
                let appended = table.append(child, 1, &mut pool, &mut ()).unwrap();
                black_box(appended.copies.first().unwrap());
                table.release(child, &mut pool).unwrap();
            })
        });
    }
    group.finish();
}

fn allocate_under_eviction(c: &mut Criterion) {
    let mut group = c.benchmark_group("allocate under eviction pressure");
    for pages in POOL_SIZES {
        let mut storage = vec![PageEntry::EMPTY; pages];
        let mut pool = PagePool::new(&mut storage).unwrap();
        // Fill the pool with cached pages nobody references.
        for i in 0..pages {
            let page = pool.allocate(&mut ()).unwrap();
            pool.set_cache_tag(page, CacheTag(i as u32)).unwrap();
            pool.release(page).unwrap();
        }
        assert_eq!(pool.free_pages(), 0);
        let mut evicted = 0u64;
        let mut count = |_: PageId, _: CacheTag| evicted += 1;
        let mut listener = Counting(&mut count);
        group.bench_with_input(BenchmarkId::from_parameter(pages), &pages, |b, _| {
            b.iter(|| {
                // Every allocation reclaims the least recently used page.
                let page = pool.allocate(&mut listener).unwrap();
                pool.set_cache_tag(page, CacheTag(0)).unwrap();
                pool.release(page).unwrap();
            })
        });
    }
    group.finish();
}

struct Counting<'a, F: FnMut(PageId, CacheTag)>(&'a mut F);

impl<F: FnMut(PageId, CacheTag)> pagoda_core::EvictionListener for Counting<'_, F> {
    fn page_evicted(&mut self, page: PageId, tag: CacheTag) {
        (self.0)(page, tag)
    }
}

criterion_group!(
    benches,
    allocate_free,
    append_one_token,
    fork_copy_on_write,
    allocate_under_eviction
);
criterion_main!(benches);
