//! CPU attention benchmarks, each against a baseline measured in the same
//! run:
//!
//! - `bandwidth/copy`: a large multi-threaded copy; criterion reports bytes
//!   read + written per second, the machine's memory bandwidth (the
//!   targets' baseline); `bandwidth/read` sums a large buffer, the rate at
//!   which the cores can stream memory in with nothing written back.
//! - `decode/*`: one decode step (GQA 4: 32 query heads, 8 KV heads, f16
//!   KV) at batch 1 and 32, contexts 512 to 32k, head dims 64 and 128
//!   (and 64 tokens, a call small enough for the calling thread alone);
//!   throughput is the K/V bytes read. `paged` uses shuffled pages,
//!   `contiguous` the same kernel on pages in order.
//! - `peak/fma`: single-precision FMA throughput of every core (AVX2+FMA),
//!   in flops; `prefill/512/d64` and `prefill/2048/d128`: causal prefills of
//!   512 and 2,048 tokens (Llama-3.2-1B's and Llama-3-8B's head sizes), in
//!   flops.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use pagoda_core::backend::{AttentionShape, Backend, SeqAttention};
use pagoda_core::{KvDtype, KvGeometry, PageId, Slot, PAGE_SIZE};
use pagoda_cpu::{split, CpuBackend, CpuKvStore, Team};

const Q_HEADS: u32 = 32;
const KV_HEADS: u32 = 8;

fn permutation(n: u32, seed: u64) -> Vec<u32> {
    let mut s = seed | 1;
    let mut v: Vec<u32> = (0..n).collect();
    for i in (1..v.len()).rev() {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        v.swap(i, (s % (i as u64 + 1)) as usize);
    }
    v
}

struct Setup {
    backend: CpuBackend,
    store: CpuKvStore,
    rows: Vec<Vec<PageId>>,
    shape: AttentionShape,
}

fn setup(dim: u32, batch: u32, context: u32, shuffled: bool) -> Setup {
    let mut backend = CpuBackend::new();
    let geometry = KvGeometry::new(1, KV_HEADS, dim, KvDtype::F16).unwrap();
    let per_seq = context.div_ceil(PAGE_SIZE as u32);
    let pages = per_seq * batch;
    let mut store = backend.create_kv_store(geometry, pages).unwrap();
    let order = if shuffled {
        permutation(pages, 42)
    } else {
        (0..pages).collect()
    };
    // Fill every slot with non-zero data, a page at a time.
    let row = (KV_HEADS * dim) as usize;
    let kv: Vec<f32> = (0..PAGE_SIZE * row)
        .map(|i| ((i % 97) as f32 - 48.0) / 64.0)
        .collect();
    for p in 0..pages {
        let slots: Vec<Slot> = (0..PAGE_SIZE as u32)
            .map(|o| PageId::from_index(p).slot(o))
            .collect();
        backend.scatter(&mut store, 0, &slots, &kv, &kv).unwrap();
    }
    let rows = (0..batch as usize)
        .map(|b| {
            order[b * per_seq as usize..(b + 1) * per_seq as usize]
                .iter()
                .map(|&p| PageId::from_index(p))
                .collect()
        })
        .collect();
    let shape = AttentionShape {
        q_heads: Q_HEADS,
        kv_heads: KV_HEADS,
        head_dim: dim,
        scale: 1.0 / (dim as f32).sqrt(),
        window: 0,
        softcap: 0.0,
    };
    Setup {
        backend,
        store,
        rows,
        shape,
    }
}

fn decode(c: &mut Criterion) {
    let copy_bytes = 1usize << 30;
    let src = vec![1u8; copy_bytes / 2];
    let mut dst = vec![0u8; copy_bytes / 2];
    let mut group = c.benchmark_group("bandwidth");
    group.sample_size(10);
    group.throughput(Throughput::Bytes(copy_bytes as u64));
    // On a team like the backend's: the same threads, the same hand-off.
    let mut team = Team::new(CpuBackend::resolve_threads(0)).unwrap();
    group.bench_function("copy", |b| {
        b.iter(|| {
            let chunks = Mutex::new(dst.chunks_mut(1 << 20).zip(src.chunks(1 << 20)));
            team.run(&|_, _| {
                while let Some((d, s)) = chunks.lock().unwrap().next() {
                    d.copy_from_slice(s);
                }
            })
            .unwrap();
            black_box(&dst);
        })
    });
    // Reading alone, the access pattern of decode: every byte once, nothing
    // written back.
    let words = vec![1u64; copy_bytes / 8];
    group.bench_function("read", |b| {
        b.iter(|| {
            let total = AtomicU64::new(0);
            team.run(&|w, n| {
                let mine = &words[split(0..words.len(), w, n, 1 << 17)];
                let sum = mine.iter().fold(0u64, |a, &w| a.wrapping_add(w));
                total.fetch_add(sum, Ordering::Relaxed);
            })
            .unwrap();
            total.into_inner()
        })
    });
    group.finish();
    drop((src, dst, words, team));

    let mut group = c.benchmark_group("decode");
    group.sample_size(10);
    let cases: &[(u32, u32, u32, bool)] = &[
        // Four pages: small enough to run on the calling thread.
        (128, 1, 64, true),
        (64, 1, 512, true),
        (64, 1, 4096, true),
        (64, 1, 32768, true),
        (128, 1, 512, true),
        (128, 1, 4096, true),
        (128, 1, 32768, true),
        (128, 1, 32768, false),
        (64, 32, 512, true),
        (64, 32, 4096, true),
        (128, 32, 512, true),
        (128, 32, 4096, true),
        (128, 32, 4096, false),
    ];
    for &(dim, batch, context, shuffled) in cases {
        let mut s = setup(dim, batch, context, shuffled);
        let kv_bytes = 2 * u64::from(batch) * u64::from(context) * u64::from(KV_HEADS * dim) * 2;
        group.throughput(Throughput::Bytes(kv_bytes));
        let queries = vec![0.25f32; batch as usize * s.shape.q_row()];
        let mut out = vec![0.0f32; queries.len()];
        let name = format!(
            "{}/d{dim}/b{batch}/ctx{context}",
            if shuffled { "paged" } else { "contiguous" }
        );
        group.bench_function(name, |b| {
            b.iter(|| {
                let batch: Vec<SeqAttention<'_>> = s
                    .rows
                    .iter()
                    .enumerate()
                    .map(|(i, r)| SeqAttention {
                        pages: r,
                        context_len: context,
                        query_start: i as u32,
                        query_len: 1,
                    })
                    .collect();
                s.backend
                    .attention(&s.store, 0, s.shape, &batch, &queries, &mut out)
                    .unwrap();
                black_box(&out);
            })
        });
    }
    group.finish();
}

/// Flops of `iters` rounds of 10 chains × 8 lanes of FMAs.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn fma_chains(iters: u64) -> f32 {
    use std::arch::x86_64::*;
    let mut acc = [_mm256_set1_ps(1.0); 10];
    let m = _mm256_set1_ps(0.999_999);
    let a = _mm256_set1_ps(1e-7);
    for _ in 0..iters {
        for x in acc.iter_mut() {
            *x = _mm256_fmadd_ps(*x, m, a);
        }
    }
    let mut total = _mm256_setzero_ps();
    for x in acc {
        total = _mm256_add_ps(total, x);
    }
    _mm256_cvtss_f32(total)
}

fn prefill(c: &mut Criterion) {
    let mut group = c.benchmark_group("peak");
    group.sample_size(10);
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        let threads = CpuBackend::resolve_threads(0) as u64;
        let iters = 10_000_000u64;
        group.throughput(Throughput::Elements(threads * iters * 10 * 8 * 2));
        group.bench_function("fma", |b| {
            b.iter(|| {
                std::thread::scope(|s| {
                    let chains: Vec<_> = (0..threads)
                        // SAFETY: AVX2 and FMA were detected just above.
                        .map(|_| s.spawn(|| unsafe { fma_chains(black_box(iters)) }))
                        .collect();
                    chains
                        .into_iter()
                        .map(|c| c.join().unwrap_or(0.0))
                        .sum::<f32>()
                })
            })
        });
    }
    group.finish();

    let mut group = c.benchmark_group("prefill");
    group.sample_size(10);
    // Llama-3.2-1B's heads at the comparison's 512-token prompt, and a
    // long prompt at Llama-3-8B's.
    for (n, dim) in [(512u32, 64u32), (2048, 128)] {
        let mut s = setup(dim, 1, n, true);
        // QKᵀ and PV over the causal triangle: 2 × 2 flops per head, dim, pair.
        let pairs = u64::from(n) * u64::from(n + 1) / 2;
        group.throughput(Throughput::Elements(
            4 * u64::from(Q_HEADS) * u64::from(dim) * pairs,
        ));
        let queries = vec![0.25f32; n as usize * s.shape.q_row()];
        let mut out = vec![0.0f32; queries.len()];
        group.bench_function(format!("{n}/d{dim}"), |b| {
            b.iter(|| {
                let batch = [SeqAttention {
                    pages: &s.rows[0],
                    context_len: n,
                    query_start: 0,
                    query_len: n,
                }];
                s.backend
                    .attention(&s.store, 0, s.shape, &batch, &queries, &mut out)
                    .unwrap();
                black_box(&out);
            })
        });
    }
    group.finish();
}

criterion_group!(benches, decode, prefill);
criterion_main!(benches);
