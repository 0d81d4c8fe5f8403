//! The conformance suite against the Vulkan backend, under the Khronos
//! validation layer with the bounds-checking kernels, plus what only a
//! device backend has: a KV pool split across storage buffers, timestamps.
//!
//! With `CI=true` a missing device or validation layer fails the run;
//! elsewhere the tests skip with one line saying why.

use pagoda_conformance::*;
use pagoda_core::backend::{AttentionShape, Backend, SeqAttention};
use pagoda_core::{KvDtype, KvGeometry, PageId, Slot, PAGE_SIZE};
use pagoda_vulkan::{Kernel, ValidationLog, VulkanBackend, VulkanError, VulkanOptions};

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

fn open(options: VulkanOptions) -> Option<VulkanBackend> {
    let checked = VulkanOptions {
        validation: Some(true),
        bounds_checks: Some(true),
        ..options.clone()
    };
    match VulkanBackend::new(&checked) {
        Ok(b) => Some(b),
        Err(e) if in_ci() => panic!("CI=true needs a Vulkan device with validation layers: {e}"),
        Err(VulkanError::Unsupported(why)) if why.contains("validation") => {
            eprintln!("Vulkan tests run without the validation layer: {why}");
            let unvalidated = VulkanOptions {
                validation: Some(false),
                ..checked
            };
            VulkanBackend::new(&unvalidated).ok()
        }
        Err(e) => {
            eprintln!("skipping Vulkan tests: {e}");
            None
        }
    }
}

/// The device once per distinct set of kernel variants it can run: with
/// subgroup arithmetic and f16 products where it has them, and with each
/// turned off, so every variant passes the same cases.
///
/// `PAGODA_TEST_SUBGROUP_VARIANTS=1` keeps only the variants that use
/// subgroup arithmetic: CI's rerun at a second subgroup width, where the
/// others would repeat the first run exactly (their kernels never see the
/// width). It fails when the device then has no such variant.
fn backends() -> Vec<(String, VulkanBackend)> {
    let subgroup_variants_only =
        std::env::var("PAGODA_TEST_SUBGROUP_VARIANTS").is_ok_and(|v| v == "1");
    let mut out: Vec<(String, VulkanBackend)> = Vec::new();
    for (subgroups, float16) in [
        (None, None),
        (Some(false), None),
        (None, Some(false)),
        (Some(false), Some(false)),
    ] {
        if subgroup_variants_only && subgroups == Some(false) {
            continue;
        }
        let options = VulkanOptions {
            subgroups,
            float16,
            ..VulkanOptions::from_env()
        };
        let Some(b) = open(options) else {
            break;
        };
        let info = b.info();
        let variant = (info.use_subgroups, info.use_float16);
        if subgroup_variants_only && !variant.0 {
            continue;
        }
        if out
            .iter()
            .all(|(_, o)| (o.info().use_subgroups, o.info().use_float16) != variant)
        {
            let name = format!(
                "vulkan {} (subgroups {}, f16 {})",
                info.name, variant.0, variant.1
            );
            out.push((name, b));
        }
    }
    assert!(
        !(subgroup_variants_only && out.is_empty()),
        "PAGODA_TEST_SUBGROUP_VARIANTS=1, but the device runs no kernel variant with subgroup arithmetic"
    );
    out
}

/// Fails on any message of the validation layer.
fn after(backend: &VulkanBackend) {
    let messages = backend.validation_messages();
    assert!(messages.is_empty(), "validation layer: {messages:#?}");
}

conformance_tests!(backends, after);

#[test]
fn the_device_and_its_features_are_reported() {
    for (_, backend) in backends() {
        let info = backend.info().to_string();
        eprintln!("{info}");
        assert!(info.contains(&backend.info().name));
        assert!(backend.info().max_storage_buffer_range > 0);
    }
}

#[test]
fn a_pool_split_across_storage_buffers_matches_the_reference() {
    // Chunks capped at 16 f32 pages (32 at 16 bits): the batch's pages
    // spread over 7 bindings (4 at 16 bits).
    let page = KvGeometry::new(2, 2, 64, KvDtype::F32)
        .unwrap()
        .bytes_per_page();
    let options = VulkanOptions {
        max_chunk_bytes: Some(16 * page),
        ..VulkanOptions::from_env()
    };
    let Some(mut backend) = open(options) else {
        return;
    };
    for dtype in DTYPES {
        // check_batch's pool for this batch: 63 pages used, half again spare.
        let geometry = KvGeometry::new(2, 2, 64, dtype).unwrap();
        let probe = backend.create_kv_store(geometry, 97).unwrap();
        assert!(probe.chunks() >= 4, "{dtype:?}: {probe:?}");
        drop(probe);
        let err = check_batch(&mut backend, dtype, 64, 4, 2, &[(700, 1), (300, 40)], 3);
        assert!(err < tolerance(dtype), "{dtype:?}: {err}");
    }
    after(&backend);
}

#[test]
fn a_pool_beyond_max_storage_buffer_range_works() {
    // One page more than a binding covers: 128 MiB on lavapipe; on devices
    // with larger ranges, chunks are capped at 512 MiB to bound test memory.
    let options = VulkanOptions {
        max_chunk_bytes: Some(512 << 20),
        ..VulkanOptions::from_env()
    };
    let Some(mut backend) = open(options) else {
        return;
    };
    let geometry = KvGeometry::new(1, 8, 128, KvDtype::F32).unwrap();
    let range = backend.info().max_storage_buffer_range.min(512 << 20);
    let pages = (range / geometry.bytes_per_page()) as u32 + 1;
    let mut store = backend.create_kv_store(geometry, pages).unwrap();
    assert!(store.chunks() >= 2, "{store:?}");
    // A sequence over the last pages of the first binding and the first of
    // the second: attention reads across the split.
    let mut rng = Rng::new(17);
    let first = pages - 40;
    let seq_pages: Vec<PageId> = (first..pages).rev().map(PageId::from_index).collect();
    let context_len = 40 * PAGE_SIZE as u32 - 7;
    let slots: Vec<Slot> = (0..context_len)
        .map(|p| seq_pages[p as usize / PAGE_SIZE].slot(p % PAGE_SIZE as u32))
        .collect();
    let row = 8 * 128;
    let keys: Vec<f32> = (0..slots.len() * row).map(|_| rng.value()).collect();
    let values: Vec<f32> = (0..slots.len() * row).map(|_| rng.value()).collect();
    backend
        .scatter(&mut store, 0, &slots, &keys, &values)
        .unwrap();
    let (mut k, mut v) = (vec![f32::NAN; keys.len()], vec![f32::NAN; values.len()]);
    backend.gather(&store, 0, &slots, &mut k, &mut v).unwrap();
    assert_eq!(k, keys);
    assert_eq!(v, values);
    let shape = AttentionShape {
        q_heads: 32,
        kv_heads: 8,
        head_dim: 128,
        scale: 1.0 / 128f32.sqrt(),
        window: 0,
        softcap: 0.0,
    };
    let queries: Vec<f32> = (0..3 * shape.q_row()).map(|_| rng.value()).collect();
    let batch = [SeqAttention {
        pages: &seq_pages,
        context_len,
        query_start: 0,
        query_len: 3,
    }];
    let mut out = vec![f32::NAN; queries.len()];
    backend
        .attention(&store, 0, shape, &batch, &queries, &mut out)
        .unwrap();
    let want = reference_attention(&shape, &keys, &values, context_len as usize, &queries, 3);
    let err = normalised_error(&out, &want, 128);
    assert!(err < tolerance(KvDtype::F32), "error {err}");
    after(&backend);
}

#[test]
fn every_dispatch_is_timed_on_the_device() {
    let Some(mut backend) = open(VulkanOptions::from_env()) else {
        return;
    };
    if backend.info().timestamp_period_ns.is_none() {
        eprintln!("{} has no compute timestamps", backend.info().name);
        return;
    }
    // A long decode, split across the KV length and merged, beside a
    // prefill: the tile kernel, the decode kernel, the merge.
    let err = check_batch(
        &mut backend,
        KvDtype::F16,
        128,
        4,
        1,
        &[(4097, 1), (40, 24)],
        5,
    );
    assert!(err < tolerance(KvDtype::F16));
    let timings = backend.last_timings();
    let kernels: Vec<Kernel> = timings.iter().map(|t| t.kernel).collect();
    assert_eq!(kernels.len(), 3, "{kernels:?}");
    assert_eq!(kernels[0], Kernel::Attention);
    assert!(kernels[1].name().starts_with("decode"), "{kernels:?}");
    assert_eq!(kernels[2], Kernel::Merge);
    assert!(timings.iter().all(|t| t.nanos > 0.0), "{timings:?}");
    after(&backend);
}

#[test]
fn a_backend_and_its_stores_dropped_leave_nothing_for_the_validation_layer() {
    // The layer reports every object still alive when the device is
    // destroyed; the log outlives the backend to hear it.
    let log = ValidationLog::new();
    let options = VulkanOptions {
        validation_log: Some(log.clone()),
        ..VulkanOptions::from_env()
    };
    let Some(mut backend) = open(options) else {
        return;
    };
    let err = check_batch(
        &mut backend,
        KvDtype::Bf16,
        64,
        2,
        2,
        &[(40, 8), (17, 1)],
        11,
    );
    assert!(err < tolerance(KvDtype::Bf16), "{err}");
    let geometry = KvGeometry::new(2, 2, 64, KvDtype::F16).unwrap();
    let store = backend.create_kv_store(geometry, 5).unwrap();
    after(&backend);
    // The backend goes first; the store still holds the device.
    drop(backend);
    assert_eq!(store.pages(), 5);
    drop(store);
    let messages = log.messages();
    assert!(
        messages.is_empty(),
        "validation layer at teardown: {messages:#?}"
    );
}
