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
