//! The conformance suite against the CPU backend, with the detected SIMD and
//! with the portable path, on teams of 1, 2 and 3 threads (3 also where
//! threads outnumber cores).

use pagoda_conformance::*;
use pagoda_core::KvDtype;
use pagoda_cpu::{CpuBackend, Isa};

fn backends() -> Vec<(String, CpuBackend)> {
    let team = |threads| CpuBackend::with_threads(threads).unwrap();
    [team(1), team(2), team(3), team(2).with_isa(Isa::Scalar)]
        .into_iter()
        .map(|b| (format!("cpu {} x{}", b.isa().name(), b.threads()), b))
        .collect()
}

/// Nothing to check after the cases: the CPU backend has no side channel.
fn after(_: &CpuBackend) {}

conformance_tests!(backends, after);

#[test]
fn split_kv_on_one_thread_and_many_agree() {
    // One long sequence on 1 to 8 threads, split across the KV length into
    // different numbers of ranges, then merged: each matches the reference.
    for threads in [1, 2, 3, 8] {
        let mut backend = CpuBackend::with_threads(threads).unwrap();
        let err = check_batch(&mut backend, KvDtype::F32, 128, 4, 2, &[(4097, 1)], 9);
        assert!(err < tolerance(KvDtype::F32), "{threads} threads: {err}");
    }
}

#[test]
fn latent_attention_rows_match_the_reference() {
    // Multi-head latent attention (DeepSeek) reads one cached row of 576
    // values (512 latent, 64 rotary) with every query head: multi-query at
    // head dim 576, 16 and 128 heads (V2-Lite's and V3's).
    for (label, mut backend) in backends() {
        for (i, (dtype, gqa, seqs)) in [
            (KvDtype::F16, 16, &[(1, 1), (17, 5), (40, 40)][..]),
            (KvDtype::Bf16, 16, &[(33, 1), (16, 16)][..]),
            (KvDtype::F32, 128, &[(20, 1), (9, 9)][..]),
        ]
        .into_iter()
        .enumerate()
        {
            assert_batch_matches(
                &mut backend,
                &label,
                dtype,
                576,
                gqa,
                1,
                seqs,
                40 + i as u64,
            );
        }
    }
}

#[test]
fn a_store_with_an_unsupported_head_dim_is_refused() {
    use pagoda_core::backend::{Backend, BackendError, BackendErrorKind, InputError};
    use pagoda_core::KvGeometry;
    use pagoda_cpu::CpuError;
    let mut backend = CpuBackend::new();
    // Any head dim makes a valid geometry, but the CPU's value tiles (16
    // columns) and its kernels only handle the supported ones.
    for dim in [8, 72, 100] {
        let geometry = KvGeometry::new(1, 2, dim, KvDtype::F16).unwrap();
        let err = backend.create_kv_store(geometry, 4).unwrap_err();
        assert!(matches!(err, CpuError::Input(InputError::HeadDim(d)) if d == dim));
        assert_eq!(err.kind(), BackendErrorKind::InvalidInput);
    }
    let geometry = KvGeometry::new(1, 2, 80, KvDtype::F16).unwrap();
    assert!(backend.create_kv_store(geometry, 4).is_ok());
}

#[test]
fn attention_sinks_match_the_reference() {
    // gpt-oss's sinks: decodes, prefills, a window (its local layers'),
    // and long contexts whose KV splits are merged with the sink.
    let seqs = [(1, 1), (17, 17), (40, 3), (100, 30), (700, 1), (1000, 64)];
    for (label, mut backend) in backends() {
        for (dtype, dim, gqa, window) in [
            (KvDtype::F32, 64, 8, 0),
            (KvDtype::F16, 64, 8, 37),
            (KvDtype::Bf16, 128, 1, 0),
        ] {
            let err = check_batch_with_sinks(&mut backend, dtype, dim, gqa, 2, &seqs, 7, window);
            assert!(
                err < tolerance(dtype),
                "{label} {dtype:?} dim {dim} gqa {gqa} window {window}: {err}"
            );
        }
    }
}

#[test]
fn sinks_that_are_not_one_finite_logit_per_head_are_refused() {
    use pagoda_core::backend::{AttentionShape, Backend, InputError, SeqAttention};
    use pagoda_core::{KvGeometry, PageId};
    use pagoda_cpu::CpuError;
    let mut backend = CpuBackend::new();
    let geometry = KvGeometry::new(1, 2, 64, KvDtype::F32).unwrap();
    let store = backend.create_kv_store(geometry, 2).unwrap();
    let shape = AttentionShape {
        q_heads: 4,
        kv_heads: 2,
        head_dim: 64,
        scale: 0.125,
        window: 0,
        softcap: 0.0,
    };
    let pages = [PageId::from_index(0)];
    let batch = [SeqAttention {
        pages: &pages,
        context_len: 1,
        query_start: 0,
        query_len: 1,
    }];
    let q = vec![0.5; 256];
    for sinks in [
        &[0.0; 3][..],
        &[0.0; 5],
        &[0.0, f32::NAN, 0.0, 0.0],
        &[f32::INFINITY; 4],
    ] {
        let mut out = vec![7.0; 256];
        let err = backend
            .attention_with_sinks(&store, 0, shape, sinks, &batch, &q, &mut out)
            .unwrap_err();
        assert!(
            matches!(err, CpuError::Input(InputError::Sinks { q_heads: 4, .. })),
            "{sinks:?}: {err}"
        );
        assert!(out.iter().all(|&v| v == 7.0), "a refusal wrote nothing");
    }
}
