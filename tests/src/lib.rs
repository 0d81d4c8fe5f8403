//! The conformance suite every attention backend runs unchanged: a plain
//! reference implementation (contiguous K/V, f64 accumulation) and cases
//! built from random inputs (never zero), random page tables over shuffled
//! physical pages, context lengths on and off page boundaries, mixed
//! decode/prefill batches, every dtype, head dim and GQA ratio.
//!
//! Outputs are poisoned with NaN before each run, so an element a backend
//! forgets to write fails; NaN never passes a comparison.
//!
//! Tolerance: the largest absolute error in an output head, divided by the
//! largest absolute reference value of that head, must stay below 1e-5 for
//! f32 storage and 1e-2 for f16/bf16. The reference uses the stored values
//! (rounded to the dtype), so the tolerance measures the kernel's arithmetic.

use half::{bf16, f16};
use pagoda_core::backend::{AttentionShape, Backend, BackendError, BackendErrorKind, SeqAttention};
use pagoda_core::{KvDtype, KvGeometry, PageCopy, PageId, Slot, PAGE_SIZE};

/// Context lengths every backend is tested at: on and off page boundaries.
pub const CONTEXT_LENGTHS: [u32; 6] = [1, 15, 16, 17, 1000, 4097];
/// Head dimensions every backend is tested at.
pub const HEAD_DIMS: [u32; 5] = [64, 80, 96, 128, 256];
/// Query heads per KV head.
pub const GQA_RATIOS: [u32; 3] = [1, 4, 8];
/// Stored dtypes.
pub const DTYPES: [KvDtype; 3] = [KvDtype::F32, KvDtype::F16, KvDtype::Bf16];

/// The tolerance for a dtype (see the crate docs).
pub fn tolerance(dtype: KvDtype) -> f64 {
    match dtype {
        KvDtype::F32 => 1e-5,
        KvDtype::F16 | KvDtype::Bf16 => 1e-2,
    }
}

/// A small deterministic generator (xorshift), so failures reproduce.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// A value in ±[0.05, 1): random, never zero.
    pub fn value(&mut self) -> f32 {
        let m = 0.05 + 0.95 * ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32);
        if self.next_u64() & 1 == 0 {
            m
        } else {
            -m
        }
    }

    /// A permutation of `0..n`.
    pub fn permutation(&mut self, n: u32) -> Vec<u32> {
        let mut v: Vec<u32> = (0..n).collect();
        for i in (1..v.len()).rev() {
            v.swap(i, self.below(i as u64 + 1) as usize);
        }
        v
    }
}

/// `Σ w·x` and `Σ |w·x|` in f64: a product's reference and the scale its
/// errors are measured against.
pub fn dot_and_magnitude(w: &[f32], xs: &[f32]) -> (f64, f64) {
    w.iter().zip(xs).fold((0.0, 0.0), |(sum, size), (&a, &c)| {
        let p = f64::from(a) * f64::from(c);
        (sum + p, size + p.abs())
    })
}

/// The most that rounding the activations `xs` to 8 bits, as the Vulkan
/// GPU decode product's integer-dot variant does, can move `Σ w·x`: each
/// aligned run of 16 activations is rounded to multiples of its largest
/// magnitude / 127, so each activation moves by at most half of that.
pub fn rounding_bound(w: &[f32], xs: &[f32]) -> f64 {
    w.chunks(16)
        .zip(xs.chunks(16))
        .map(|(w, x)| {
            let amax = x.iter().fold(0.0f64, |m, &v| m.max(f64::from(v).abs()));
            let w_abs: f64 = w.iter().map(|&v| f64::from(v).abs()).sum();
            w_abs * amax / 254.0
        })
        .sum()
}

/// Rounds a value the way the store keeps it.
pub fn stored(dtype: KvDtype, x: f32) -> f32 {
    match dtype {
        KvDtype::F32 => x,
        KvDtype::F16 => f16::from_f32(x).to_f32(),
        KvDtype::Bf16 => bf16::from_f32(x).to_f32(),
    }
}

/// The reference: attention of `query_len` new tokens (the last positions of
/// `context_len`) over contiguous keys and values `[context_len, kv_heads,
/// head_dim]`, in f64, each query seeing the positions of its window (all
/// before it without one), scores soft-capped where the shape says.
/// Returns `[query_len, q_heads, head_dim]`.
pub fn reference_attention(
    shape: &AttentionShape,
    keys: &[f32],
    values: &[f32],
    context_len: usize,
    queries: &[f32],
    query_len: usize,
) -> Vec<f32> {
    reference_attention_with_sinks(shape, None, keys, values, context_len, queries, query_len)
}

/// [`reference_attention`] where each head's softmax denominator also
/// counts `exp(sinks[head])` when `sinks` is given (gpt-oss).
pub fn reference_attention_with_sinks(
    shape: &AttentionShape,
    sinks: Option<&[f32]>,
    keys: &[f32],
    values: &[f32],
    context_len: usize,
    queries: &[f32],
    query_len: usize,
) -> Vec<f32> {
    let (dim, group) = (shape.head_dim as usize, shape.group() as usize);
    let kv_row = shape.kv_row();
    let mut out = vec![0.0f32; query_len * shape.q_row()];
    for t in 0..query_len {
        let pos = context_len - query_len + t;
        for h in 0..shape.q_heads as usize {
            let kvh = h / group;
            let q = &queries[t * shape.q_row() + h * dim..][..dim];
            let first = if shape.window == 0 {
                0
            } else {
                (pos + 1).saturating_sub(shape.window as usize)
            };
            let cap = f64::from(shape.softcap);
            let scores: Vec<f64> = (first..=pos)
                .map(|j| {
                    let k = &keys[j * kv_row + kvh * dim..][..dim];
                    let s = q
                        .iter()
                        .zip(k)
                        .map(|(a, b)| f64::from(*a) * f64::from(*b))
                        .sum::<f64>()
                        * f64::from(shape.scale);
                    if cap > 0.0 {
                        cap * (s / cap).tanh()
                    } else {
                        s
                    }
                })
                .collect();
            let sink = sinks.map(|s| f64::from(s[h]));
            let max = scores
                .iter()
                .copied()
                .chain(sink)
                .fold(f64::NEG_INFINITY, f64::max);
            let weights: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
            let total: f64 = weights.iter().sum::<f64>() + sink.map_or(0.0, |s| (s - max).exp());
            for d in 0..dim {
                let v: f64 = (first..=pos)
                    .zip(&weights)
                    .map(|(j, w)| w * f64::from(values[j * kv_row + kvh * dim + d]))
                    .sum();
                out[t * shape.q_row() + h * dim + d] = (v / total) as f32;
            }
        }
    }
    out
}

/// The largest error of `got` against `want`, per head normalised by the
/// head's largest reference value; infinite if anything is NaN.
pub fn normalised_error(got: &[f32], want: &[f32], dim: usize) -> f64 {
    let mut worst = 0.0f64;
    for (g, w) in got.chunks(dim).zip(want.chunks(dim)) {
        let scale = w.iter().map(|x| f64::from(x.abs())).fold(1e-6, f64::max);
        for (a, b) in g.iter().zip(w) {
            if a.is_nan() || b.is_nan() {
                return f64::INFINITY;
            }
            worst = worst.max(f64::from((a - b).abs()) / scale);
        }
    }
    worst
}

/// One sequence of a case, with its contiguous keys and values.
struct CaseSeq {
    pages: Vec<PageId>,
    context_len: u32,
    query_len: u32,
    keys: Vec<f32>,
    values: Vec<f32>,
}

/// Runs one batch against the reference: sequences of the given
/// `(context_len, query_len)`, pages shuffled across a pool with spare pages.
/// Returns the worst normalised error.
pub fn check_batch<B: Backend>(
    backend: &mut B,
    dtype: KvDtype,
    head_dim: u32,
    gqa: u32,
    kv_heads: u32,
    seqs: &[(u32, u32)],
    seed: u64,
) -> f64 {
    check_batch_with(backend, dtype, head_dim, gqa, kv_heads, seqs, seed, 0, 0.0)
}

/// [`check_batch_with`] through
/// [`attention_with_sinks`](Backend::attention_with_sinks), with random
/// sinks of about the scores' size (some far above them, so a head may
/// attend to almost nothing).
#[allow(clippy::too_many_arguments)]
pub fn check_batch_with_sinks<B: Backend>(
    backend: &mut B,
    dtype: KvDtype,
    head_dim: u32,
    gqa: u32,
    kv_heads: u32,
    seqs: &[(u32, u32)],
    seed: u64,
    window: u32,
) -> f64 {
    let mut rng = Rng::new(seed ^ 0x5111);
    let sinks: Vec<f32> = (0..kv_heads * gqa)
        .map(|h| if h % 5 == 4 { 6.0 } else { 3.0 * rng.value() })
        .collect();
    check_batch_inner(
        backend,
        dtype,
        head_dim,
        gqa,
        kv_heads,
        seqs,
        seed,
        window,
        0.0,
        Some(&sinks),
    )
}

/// [`check_batch`] with a sliding `window` and a `softcap` (0: none). The
/// pages wholly before every query's window are poisoned with NaN after
/// the scatter, so a backend that reads them fails.
#[allow(clippy::too_many_arguments)]
pub fn check_batch_with<B: Backend>(
    backend: &mut B,
    dtype: KvDtype,
    head_dim: u32,
    gqa: u32,
    kv_heads: u32,
    seqs: &[(u32, u32)],
    seed: u64,
    window: u32,
    softcap: f32,
) -> f64 {
    check_batch_inner(
        backend, dtype, head_dim, gqa, kv_heads, seqs, seed, window, softcap, None,
    )
}

#[allow(clippy::too_many_arguments)]
fn check_batch_inner<B: Backend>(
    backend: &mut B,
    dtype: KvDtype,
    head_dim: u32,
    gqa: u32,
    kv_heads: u32,
    seqs: &[(u32, u32)],
    seed: u64,
    window: u32,
    softcap: f32,
    sinks: Option<&[f32]>,
) -> f64 {
    let mut rng = Rng::new(seed);
    let layers = 2;
    let layer = 1;
    let geometry = KvGeometry::new(layers, kv_heads, head_dim, dtype).unwrap();
    let needed: u32 = seqs.iter().map(|(c, _)| c.div_ceil(PAGE_SIZE as u32)).sum();
    let total_pages = needed + needed / 2 + 3;
    let mut store = backend.create_kv_store(geometry, total_pages).unwrap();
    let physical = rng.permutation(total_pages);
    let shape = AttentionShape {
        q_heads: kv_heads * gqa,
        kv_heads,
        head_dim,
        scale: 1.0 / (head_dim as f32).sqrt(),
        window,
        softcap,
    };
    let kv_row = shape.kv_row();
    let mut next_page = 0;
    let mut case = Vec::new();
    for &(context_len, query_len) in seqs {
        let n = context_len.div_ceil(PAGE_SIZE as u32) as usize;
        let pages: Vec<PageId> = physical[next_page..next_page + n]
            .iter()
            .map(|&p| PageId::from_index(p))
            .collect();
        next_page += n;
        let len = context_len as usize * kv_row;
        let keys: Vec<f32> = (0..len).map(|_| rng.value()).collect();
        let values: Vec<f32> = (0..len).map(|_| rng.value()).collect();
        // Cached tokens first, then the new ones: two scatters, as an engine does.
        let slots: Vec<Slot> = (0..context_len)
            .map(|p| pages[p as usize / PAGE_SIZE].slot(p % PAGE_SIZE as u32))
            .collect();
        let cached = (context_len - query_len) as usize;
        backend
            .scatter(
                &mut store,
                layer,
                &slots[..cached],
                &keys[..cached * kv_row],
                &values[..cached * kv_row],
            )
            .unwrap();
        backend
            .scatter(
                &mut store,
                layer,
                &slots[cached..],
                &keys[cached * kv_row..],
                &values[cached * kv_row..],
            )
            .unwrap();
        // Pages before the first query's window: overwritten with NaN, as
        // a page given back and reused would hold anything.
        let first_seen = shape.first_visible(context_len - query_len) as usize;
        let dead = &slots[..first_seen - first_seen % PAGE_SIZE];
        if !dead.is_empty() {
            let nan = vec![f32::NAN; dead.len() * kv_row];
            backend
                .scatter(&mut store, layer, dead, &nan, &nan)
                .unwrap();
        }
        let keys = keys.iter().map(|&x| stored(dtype, x)).collect();
        let values = values.iter().map(|&x| stored(dtype, x)).collect();
        case.push(CaseSeq {
            pages,
            context_len,
            query_len,
            keys,
            values,
        });
    }
    let rows: u32 = case.iter().map(|s| s.query_len).sum();
    let queries: Vec<f32> = (0..rows as usize * shape.q_row())
        .map(|_| rng.value())
        .collect();
    let mut start = 0;
    let batch: Vec<SeqAttention<'_>> = case
        .iter()
        .map(|s| {
            let b = SeqAttention {
                pages: &s.pages,
                context_len: s.context_len,
                query_start: start,
                query_len: s.query_len,
            };
            start += s.query_len;
            b
        })
        .collect();
    let mut out = vec![f32::NAN; queries.len()];
    match sinks {
        Some(sinks) => backend
            .attention_with_sinks(&store, layer, shape, sinks, &batch, &queries, &mut out)
            .unwrap(),
        None => backend
            .attention(&store, layer, shape, &batch, &queries, &mut out)
            .unwrap(),
    }
    let mut worst = 0.0f64;
    for (s, b) in case.iter().zip(&batch) {
        let row = shape.q_row();
        let q = &queries[b.query_start as usize * row..][..b.query_len as usize * row];
        let want = reference_attention_with_sinks(
            &shape,
            sinks,
            &s.keys,
            &s.values,
            s.context_len as usize,
            q,
            s.query_len as usize,
        );
        let got = &out[b.query_start as usize * row..][..b.query_len as usize * row];
        worst = worst.max(normalised_error(got, &want, head_dim as usize));
    }
    worst
}

/// Scatter then gather returns every slot (rounded to the dtype), in every
/// layer, with pages in shuffled order.
pub fn check_round_trip<B: Backend>(backend: &mut B, dtype: KvDtype) {
    let mut rng = Rng::new(11);
    let geometry = KvGeometry::new(3, 2, 64, dtype).unwrap();
    let pages = 9;
    let mut store = backend.create_kv_store(geometry, pages).unwrap();
    let row = 2 * 64;
    let slots: Vec<Slot> = rng
        .permutation(pages * PAGE_SIZE as u32)
        .into_iter()
        .map(|s| Slot(u64::from(s)))
        .collect();
    for layer in 0..3 {
        let keys: Vec<f32> = (0..slots.len() * row).map(|_| rng.value()).collect();
        let values: Vec<f32> = (0..slots.len() * row).map(|_| rng.value()).collect();
        backend
            .scatter(&mut store, layer, &slots, &keys, &values)
            .unwrap();
        let (mut k, mut v) = (vec![f32::NAN; keys.len()], vec![f32::NAN; values.len()]);
        backend
            .gather(&store, layer, &slots, &mut k, &mut v)
            .unwrap();
        for (got, want) in k.iter().chain(&v).zip(keys.iter().chain(&values)) {
            assert_eq!(*got, stored(dtype, *want), "layer {layer}");
        }
    }
}

/// A copy-on-write copy writes the destination's leading slots in every
/// layer and leaves the source and the destination's other slots intact.
pub fn check_copy_on_write<B: Backend>(backend: &mut B, dtype: KvDtype) {
    let mut rng = Rng::new(5);
    let geometry = KvGeometry::new(2, 2, 64, dtype).unwrap();
    let mut store = backend.create_kv_store(geometry, 4).unwrap();
    let row = 2 * 64;
    let all: Vec<Slot> = (0..4 * PAGE_SIZE as u64).map(Slot).collect();
    let mut before = Vec::new();
    for layer in 0..2 {
        let k: Vec<f32> = (0..all.len() * row).map(|_| rng.value()).collect();
        let v: Vec<f32> = (0..all.len() * row).map(|_| rng.value()).collect();
        backend.scatter(&mut store, layer, &all, &k, &v).unwrap();
        before.push((k, v));
    }
    let copy = PageCopy {
        src: PageId::from_index(1),
        dst: PageId::from_index(3),
        slots: 11,
    };
    backend.copy_pages(&mut store, &[copy]).unwrap();
    for (layer, (k0, v0)) in before.iter().enumerate() {
        let (mut k, mut v) = (vec![0.0; k0.len()], vec![0.0; v0.len()]);
        backend
            .gather(&store, layer as u32, &all, &mut k, &mut v)
            .unwrap();
        for slot in 0..all.len() {
            let (page, offset) = (slot / PAGE_SIZE, slot % PAGE_SIZE);
            let source = if page == 3 && offset < 11 {
                PAGE_SIZE + offset
            } else {
                slot
            };
            for (now, was) in [(&k, k0), (&v, v0)] {
                assert_eq!(
                    now[slot * row..][..row],
                    was[source * row..][..row]
                        .iter()
                        .map(|&x| stored(dtype, x))
                        .collect::<Vec<_>>()[..],
                    "layer {layer} slot {slot}"
                );
            }
        }
    }
}

/// Every out-of-range input is refused as invalid input and leaves the
/// output untouched.
pub fn check_invalid_inputs<B: Backend>(backend: &mut B) {
    let geometry = KvGeometry::new(1, 1, 64, KvDtype::F32).unwrap();
    let mut store = backend.create_kv_store(geometry, 4).unwrap();
    let shape = AttentionShape {
        q_heads: 2,
        kv_heads: 1,
        head_dim: 64,
        scale: 0.125,
        window: 0,
        softcap: 0.0,
    };
    let good = [PageId::from_index(0), PageId::from_index(1)];
    let outside = [PageId::from_index(0), PageId::from_index(4)];
    let q = vec![0.5f32; 2 * 128];
    let seq = |pages, context_len, query_len| SeqAttention {
        pages,
        context_len,
        query_start: 0,
        query_len,
    };
    let cases: Vec<(Vec<SeqAttention<'_>>, AttentionShape, u32, usize)> = vec![
        (vec![seq(&outside, 20, 1)], shape, 0, q.len()),
        (vec![seq(&good, 33, 1)], shape, 0, q.len()),
        (vec![seq(&good, 20, 0)], shape, 0, q.len()),
        (vec![seq(&good, 2, 3)], shape, 0, q.len()),
        (
            vec![seq(&good, 20, 1)],
            AttentionShape {
                head_dim: 72,
                ..shape
            },
            0,
            q.len(),
        ),
        (
            vec![seq(&good, 20, 1)],
            AttentionShape {
                kv_heads: 2,
                ..shape
            },
            0,
            q.len(),
        ),
        (
            vec![seq(&good, 20, 1)],
            AttentionShape {
                scale: f32::NAN,
                ..shape
            },
            0,
            q.len(),
        ),
        (
            vec![seq(&good, 20, 1)],
            AttentionShape {
                softcap: -1.0,
                ..shape
            },
            0,
            q.len(),
        ),
        (
            vec![seq(&good, 20, 1)],
            AttentionShape {
                softcap: f32::INFINITY,
                ..shape
            },
            0,
            q.len(),
        ),
        (vec![seq(&good, 20, 1)], shape, 1, q.len()),
        (vec![seq(&good, 20, 2)], shape, 0, 128),
    ];
    for (batch, shape, layer, qlen) in cases {
        let mut out = vec![f32::NAN; 2 * 128];
        let err = backend
            .attention(&store, layer, shape, &batch, &q[..qlen], &mut out)
            .expect_err("refused");
        assert_eq!(err.kind(), BackendErrorKind::InvalidInput, "{err}");
        assert!(out.iter().all(|x| x.is_nan()), "output touched: {err}");
    }
    let kv = vec![1.0f32; 64];
    let err = backend
        .scatter(&mut store, 0, &[Slot(64)], &kv, &kv)
        .expect_err("slot outside");
    assert_eq!(err.kind(), BackendErrorKind::InvalidInput);
    let err = backend
        .scatter(&mut store, 0, &[Slot(3)], &kv[..63], &kv)
        .expect_err("short keys");
    assert_eq!(err.kind(), BackendErrorKind::InvalidInput);
    let bad_copy = PageCopy {
        src: PageId::from_index(0),
        dst: PageId::from_index(9),
        slots: 3,
    };
    let err = backend
        .copy_pages(&mut store, &[bad_copy])
        .expect_err("page outside");
    assert_eq!(err.kind(), BackendErrorKind::InvalidInput);
}

/// Runs [`check_batch`] and fails, naming the backend (`label`) and the
/// case, when the error is past the dtype's tolerance.
#[allow(clippy::too_many_arguments)]
pub fn assert_batch_matches<B: Backend>(
    backend: &mut B,
    label: &str,
    dtype: KvDtype,
    head_dim: u32,
    gqa: u32,
    kv_heads: u32,
    seqs: &[(u32, u32)],
    seed: u64,
) {
    let err = check_batch(backend, dtype, head_dim, gqa, kv_heads, seqs, seed);
    assert!(
        err < tolerance(dtype),
        "{label} {dtype:?} dim {head_dim} gqa {gqa} kv heads {kv_heads} (context, new) {seqs:?}: \
         error {err}"
    );
}

/// Defines the suite's tests for a backend, so every backend runs the same
/// cases. `$backends` returns the `(label, backend)` pairs to test (none
/// skips); `$after` checks a backend once its cases ran (e.g. that the
/// validation layer reported nothing).
#[macro_export]
macro_rules! conformance_tests {
    ($backends:path, $after:path) => {
        #[test]
        fn every_dtype_head_dim_and_gqa_ratio_matches_the_reference() {
            for (label, mut backend) in $backends() {
                for (i, &dtype) in $crate::DTYPES.iter().enumerate() {
                    for (j, &dim) in $crate::HEAD_DIMS.iter().enumerate() {
                        for (k, &gqa) in $crate::GQA_RATIOS.iter().enumerate() {
                            let seed = (i * 100 + j * 10 + k) as u64;
                            // A mixed batch: decode, prefill, chunked prefill, page edges.
                            let seqs = [(1, 1), (15, 15), (16, 1), (17, 5), (40, 40), (100, 30)];
                            $crate::assert_batch_matches(
                                &mut backend,
                                &label,
                                dtype,
                                dim,
                                gqa,
                                2,
                                &seqs,
                                seed,
                            );
                        }
                    }
                }
                $after(&backend);
            }
        }

        #[test]
        fn wide_query_groups_and_head_dim_192_match_the_reference() {
            // Groups wider than a decode item takes (8 heads) are split
            // across items; 192 is the supported head dim the sweep above
            // leaves out.
            use pagoda_core::KvDtype::{Bf16, F16, F32};
            for (label, mut backend) in $backends() {
                for (i, (dtype, dim, gqa)) in [
                    (F16, 192, 16),
                    (F32, 192, 2),
                    (Bf16, 128, 12),
                    (F16, 64, 16),
                ]
                .into_iter()
                .enumerate()
                {
                    let seqs = [(1, 1), (600, 1), (33, 33), (1000, 3)];
                    let seed = 900 + i as u64;
                    $crate::assert_batch_matches(
                        &mut backend,
                        &label,
                        dtype,
                        dim,
                        gqa,
                        2,
                        &seqs,
                        seed,
                    );
                }
                $after(&backend);
            }
        }

        #[test]
        fn long_contexts_on_and_off_page_boundaries() {
            for (label, mut backend) in $backends() {
                for &ctx in &$crate::CONTEXT_LENGTHS {
                    for (dtype, dim, gqa) in [
                        (pagoda_core::KvDtype::F32, 128, 4),
                        (pagoda_core::KvDtype::F16, 64, 8),
                        (pagoda_core::KvDtype::Bf16, 256, 1),
                    ] {
                        // Decode, and a chunk of new tokens at the end of the context.
                        let seqs = [(ctx, 1), (ctx, ctx.min(17))];
                        let seed = u64::from(ctx);
                        $crate::assert_batch_matches(
                            &mut backend,
                            &label,
                            dtype,
                            dim,
                            gqa,
                            1,
                            &seqs,
                            seed,
                        );
                    }
                }
                $after(&backend);
            }
        }

        #[test]
        fn sliding_windows_and_soft_caps_match_the_reference() {
            for (label, mut backend) in $backends() {
                // Windows shorter than a page, a page, and unaligned; soft
                // caps near the scores' size. Decodes, prefills that cross
                // window edges, and long contexts split across the team.
                let seqs = [(1, 1), (17, 17), (40, 3), (100, 30), (700, 1), (1000, 64)];
                for (i, (window, softcap)) in [
                    (1, 0.0),
                    (5, 0.0),
                    (16, 0.0),
                    (37, 0.0),
                    (512, 0.0),
                    (0, 0.5),
                    (37, 1.5),
                ]
                .into_iter()
                .enumerate()
                {
                    for (dtype, dim, gqa) in [
                        (pagoda_core::KvDtype::F32, 64, 4),
                        (pagoda_core::KvDtype::F16, 256, 1),
                    ] {
                        let err = $crate::check_batch_with(
                            &mut backend,
                            dtype,
                            dim,
                            gqa,
                            2,
                            &seqs,
                            i as u64,
                            window,
                            softcap,
                        );
                        assert!(
                            err < $crate::tolerance(dtype),
                            "{label} {dtype:?} dim {dim} gqa {gqa} window {window} \
                             soft cap {softcap}: error {err}"
                        );
                    }
                }
                $after(&backend);
            }
        }

        #[test]
        fn scatter_then_gather_round_trips_every_slot() {
            for (_, mut backend) in $backends() {
                for dtype in $crate::DTYPES {
                    $crate::check_round_trip(&mut backend, dtype);
                }
                $after(&backend);
            }
        }

        #[test]
        fn copy_on_write_leaves_the_source_intact() {
            for (_, mut backend) in $backends() {
                for dtype in $crate::DTYPES {
                    $crate::check_copy_on_write(&mut backend, dtype);
                }
                $after(&backend);
            }
        }

        #[test]
        fn out_of_range_input_is_refused_before_touching_memory() {
            for (_, mut backend) in $backends() {
                $crate::check_invalid_inputs(&mut backend);
                $after(&backend);
            }
        }
    };
}
