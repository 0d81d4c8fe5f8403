//! The conformance suite against the CPU backend, with the detected SIMD and
//! with the portable path.

use pagoda_conformance::*;
use pagoda_core::KvDtype;
use pagoda_cpu::{CpuBackend, Isa};

fn backends() -> Vec<CpuBackend> {
    vec![CpuBackend::new(), CpuBackend::new().with_isa(Isa::Scalar)]
}

#[test]
fn every_dtype_head_dim_and_gqa_ratio_matches_the_reference() {
    for mut backend in backends() {
        for (i, &dtype) in DTYPES.iter().enumerate() {
            for (j, &dim) in HEAD_DIMS.iter().enumerate() {
                for (k, &gqa) in GQA_RATIOS.iter().enumerate() {
                    let seed = (i * 100 + j * 10 + k) as u64;
                    // A mixed batch: decode, prefill, chunked prefill, page edges.
                    let seqs = [(1, 1), (15, 15), (16, 1), (17, 5), (40, 40), (100, 30)];
                    let err = check_batch(&mut backend, dtype, dim, gqa, 2, &seqs, seed);
                    assert!(
                        err < tolerance(dtype),
                        "{} {dtype:?} dim {dim} gqa {gqa}: error {err}",
                        backend.isa().name()
                    );
                }
            }
        }
    }
}

#[test]
fn long_contexts_on_and_off_page_boundaries() {
    for mut backend in backends() {
        for &ctx in &CONTEXT_LENGTHS {
            for (dtype, dim, gqa) in [
                (KvDtype::F32, 128, 4),
                (KvDtype::F16, 64, 8),
                (KvDtype::Bf16, 256, 1),
            ] {
                // Decode, and a chunk of new tokens at the end of the context.
                let seqs = [(ctx, 1), (ctx, ctx.min(17))];
                let err = check_batch(&mut backend, dtype, dim, gqa, 1, &seqs, u64::from(ctx));
                assert!(
                    err < tolerance(dtype),
                    "{} ctx {ctx} {dtype:?} dim {dim} gqa {gqa}: error {err}",
                    backend.isa().name()
                );
            }
        }
    }
}

#[test]
fn split_kv_on_one_thread_and_many_agree() {
    // One long sequence on 1 thread (no split) and on 8 (split across the KV
    // length, then merged): both match the reference.
    for threads in [1, 8] {
        let mut backend = CpuBackend::with_threads(threads).unwrap();
        let err = check_batch(&mut backend, KvDtype::F32, 128, 4, 2, &[(4097, 1)], 9);
        assert!(err < tolerance(KvDtype::F32), "{threads} threads: {err}");
    }
}

#[test]
fn scatter_then_gather_round_trips_every_slot() {
    for dtype in DTYPES {
        check_round_trip(&mut CpuBackend::new(), dtype);
    }
}

#[test]
fn copy_on_write_leaves_the_source_intact() {
    for dtype in DTYPES {
        check_copy_on_write(&mut CpuBackend::new(), dtype);
    }
}

#[test]
fn out_of_range_input_is_refused_before_touching_memory() {
    check_invalid_inputs(&mut CpuBackend::new());
}
