//! Every owner frees what it owns: opening the backend or creating a store
//! fails at each step in turn (through the test-only hook of `inject.rs`),
//! and the validation layer, which reports every object still alive when
//! the device is destroyed, must report nothing.

use ash::vk;
use pagoda_core::backend::Backend;
use pagoda_core::{KvDtype, KvGeometry, PageCopy, PageId};

use crate::inject::{calls_seen, fail_call, failed_call, injected};
use crate::{ValidationLog, VulkanBackend, VulkanOptions};

/// Options that run under the validation layer into `log`.
fn validated(log: &ValidationLog) -> VulkanOptions {
    VulkanOptions {
        validation: Some(true),
        bounds_checks: Some(true),
        validation_log: Some(log.clone()),
        ..VulkanOptions::from_env()
    }
}

/// A backend under validation, or `None` (skip) where there is no device
/// or no validation layer, unless in CI.
fn open(log: &ValidationLog) -> Option<VulkanBackend> {
    fail_call(None);
    match VulkanBackend::new(&validated(log)) {
        Ok(backend) => Some(backend),
        Err(e) if std::env::var("CI").is_ok_and(|v| v == "true") => panic!("{e}"),
        Err(e) => {
            eprintln!("skipping: {e}");
            None
        }
    }
}

fn assert_quiet(log: &ValidationLog, what: &str) {
    let messages = log.messages();
    assert!(messages.is_empty(), "{what}: {messages:#?}");
}

/// The check itself can fail: a buffer made behind the owners' backs and
/// never destroyed is reported when the device is destroyed.
#[test]
fn the_validation_log_hears_about_a_leak_at_device_destruction() {
    let log = ValidationLog::new();
    let Some(backend) = open(&log) else {
        return;
    };
    let info = vk::BufferCreateInfo::default()
        .size(64)
        .usage(vk::BufferUsageFlags::STORAGE_BUFFER);
    // SAFETY: a valid create info on the backend's live device; the buffer
    // is never used, and deliberately never destroyed.
    let leaked = unsafe { backend.ctx.device.create_buffer(&info, None) };
    assert!(leaked.is_ok(), "{leaked:?}");
    assert_quiet(&log, "before teardown");
    drop(backend);
    let messages = log.messages();
    assert!(
        messages.iter().any(|m| m.contains("VkBuffer")),
        "no leak reported: {messages:#?}"
    );
}

#[test]
fn opening_that_fails_at_any_step_frees_what_it_made() {
    let log = ValidationLog::new();
    let Some(backend) = open(&log) else {
        return;
    };
    let steps = calls_seen();
    assert!(steps > 10, "only {steps} creation steps seen");
    drop(backend);
    assert_quiet(&log, "opened and dropped");
    for step in 0..steps {
        let log = ValidationLog::new();
        fail_call(Some(step));
        let err = VulkanBackend::new(&validated(&log)).unwrap_err();
        let call = failed_call().unwrap_or_else(|| panic!("step {step} was not reached"));
        assert_eq!(err, injected(call), "step {step}");
        assert_quiet(&log, &format!("failed at step {step} ({call})"));
    }
    fail_call(None);
}

#[test]
fn a_store_that_fails_midway_frees_its_chunks_and_the_backend_goes_on() {
    let log = ValidationLog::new();
    // Chunks of 4 pages: a 14-page store is 4 buffers.
    let geometry = KvGeometry::new(2, 2, 64, KvDtype::F16).unwrap();
    let options = VulkanOptions {
        max_chunk_bytes: Some(4 * geometry.bytes_per_page()),
        ..validated(&log)
    };
    fail_call(None);
    let mut backend = match VulkanBackend::new(&options) {
        Ok(b) => b,
        Err(e) if std::env::var("CI").is_ok_and(|v| v == "true") => panic!("{e}"),
        Err(e) => return eprintln!("skipping: {e}"),
    };
    fail_call(None);
    let store = backend.create_kv_store(geometry, 14).unwrap();
    assert_eq!(store.chunks(), 4);
    let steps = calls_seen();
    assert!(steps >= 4 * 3, "{steps} steps for 4 buffers");
    drop(store);
    for step in 0..steps {
        fail_call(Some(step));
        let err = backend.create_kv_store(geometry, 14).unwrap_err();
        let call = failed_call().unwrap_or_else(|| panic!("step {step} was not reached"));
        assert_eq!(err, injected(call), "step {step}");
    }
    // Growing an I/O buffer that fails keeps the old one: the next call
    // works. A copy of every page needs more metadata than the first
    // buffers hold.
    fail_call(None);
    let mut store = backend.create_kv_store(geometry, 14).unwrap();
    let copies: Vec<PageCopy> = (0..7)
        .map(|i| PageCopy {
            src: PageId::from_index(i),
            dst: PageId::from_index(i + 7),
            slots: 16,
        })
        .cycle()
        .take(400)
        .collect();
    fail_call(Some(0));
    let err = backend.copy_pages(&mut store, &copies).unwrap_err();
    assert_eq!(err, injected(failed_call().unwrap()));
    fail_call(None);
    backend.copy_pages(&mut store, &copies).unwrap();
    assert_quiet(&log, "before teardown");
    drop(store);
    drop(backend);
    assert_quiet(&log, "after teardown");
}

#[test]
fn a_backend_used_and_dropped_leaves_nothing_behind() {
    let log = ValidationLog::new();
    let Some(mut backend) = open(&log) else {
        return;
    };
    let geometry = KvGeometry::new(1, 1, 64, KvDtype::F32).unwrap();
    let store = backend.create_kv_store(geometry, 3).unwrap();
    let bandwidth = backend.copy_bandwidth(1 << 20, 2).unwrap();
    assert!(bandwidth > 0.0, "{bandwidth}");
    // The log taken from the backend is the one passed in.
    assert!(backend.validation_log().messages().is_empty());
    // The backend first, the store after it: the store keeps the device.
    drop(backend);
    assert_eq!(store.pages(), 3);
    drop(store);
    assert_quiet(&log, "after teardown");
}
