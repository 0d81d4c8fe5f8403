//! The conformance suite against the CPU backend, with the detected SIMD and
//! with the portable path.

use pagoda_conformance::*;
use pagoda_core::KvDtype;
use pagoda_cpu::{CpuBackend, Isa};

fn backends() -> Vec<(String, CpuBackend)> {
    [CpuBackend::new(), CpuBackend::new().with_isa(Isa::Scalar)]
        .into_iter()
        .map(|b| (format!("cpu {}", b.isa().name()), b))
        .collect()
}

/// Nothing to check after the cases: the CPU backend has no side channel.
fn after(_: &CpuBackend) {}

conformance_tests!(backends, after);

#[test]
fn split_kv_on_one_thread_and_many_agree() {
    // One long sequence on 1 thread and on 8, split across the KV length
    // into different numbers of ranges, then merged: both match the
    // reference.
    for threads in [1, 8] {
        let mut backend = CpuBackend::with_threads(threads).unwrap();
        let err = check_batch(&mut backend, KvDtype::F32, 128, 4, 2, &[(4097, 1)], 9);
        assert!(err < tolerance(KvDtype::F32), "{threads} threads: {err}");
    }
}
