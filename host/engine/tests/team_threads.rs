//! An engine on the CPU backend with `threads = 2` runs every step (dense
//! and quantized, prefill and decode) on its own thread plus the one team
//! worker the backend started: no rayon pool, no matrixmultiply threads, no
//! second team for the products. Counted from the kernel's list of the
//! process's threads (`/proc/self/task`), so Linux only. The one test of
//! its binary, so no other test's threads come and go meanwhile.
//!
//! Needs the SmolLM2 model (skips with one line without it; fails under
//! `CI=true`).

mod support;

use pagoda_core::{KvDtype, Priority};
use pagoda_cpu::CpuBackend;
use pagoda_engine::model::{Model, ModelFile, SamplingParams};
use pagoda_engine::{Engine, EngineConfig, EngineStorage, GenRequest};

/// The name the backend's first team worker carries.
const WORKER: &str = "pagoda-team-1";

/// Every thread of this process, by id.
fn threads() -> Vec<u32> {
    let mut all: Vec<u32> = std::fs::read_dir("/proc/self/task")
        .expect("list /proc/self/task")
        .map(|entry| {
            entry
                .unwrap()
                .file_name()
                .to_string_lossy()
                .parse()
                .unwrap()
        })
        .collect();
    all.sort();
    all
}

/// Thread `tid`'s name (a new thread carries its creator's until it has
/// named itself).
fn name(tid: u32) -> String {
    let comm = std::fs::read_to_string(format!("/proc/self/task/{tid}/comm"));
    comm.unwrap_or_default().trim().to_string()
}

/// Nanoseconds thread `tid` has run, where the kernel reports it.
fn run_ns(tid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?;
    stat.split_whitespace().next()?.parse().ok()
}

/// Runs a 40-token prompt and 8 generated tokens on an engine over a
/// two-thread backend, checking the process's threads after every step:
/// `before` plus exactly one team worker. Returns the worker's run time
/// (nanoseconds, where known) over the generation.
fn generate_on_two_threads(model: &Model, before: &[u32]) -> Option<u64> {
    let backend = CpuBackend::with_threads(2).unwrap();
    let started = threads();
    let added: Vec<u32> = started
        .iter()
        .copied()
        .filter(|t| !before.contains(t))
        .collect();
    assert_eq!(
        added.len(),
        1,
        "the backend starts one worker: {added:?} (before {before:?})"
    );
    let worker = added[0];
    let ran_before = run_ns(worker);

    let config = EngineConfig {
        kv_pages: 16,
        kv_dtype: KvDtype::F16,
        ..EngineConfig::default()
    };
    let mut storage = EngineStorage::new(&config, model.config().max_context);
    let mut engine = Engine::new(model, backend, &config, &mut storage).unwrap();
    assert_eq!(threads(), started, "building the engine starts no thread");
    let request = GenRequest {
        tag: 0,
        // A prefill well past the decode-sized products: the general
        // product, split across the team.
        prompt: (0..40).map(|i| 100 + 37 * i).collect(),
        max_new_tokens: 8,
        sampling: SamplingParams::GREEDY,
        seed: 0,
        stop_tokens: Vec::new(),
    };
    let now = engine.now();
    let _handle = engine.submit(request, Priority::Normal, now).unwrap();
    let mut steps = 0;
    while !engine.is_idle() {
        engine.step().unwrap();
        steps += 1;
        assert!(steps < 100, "no progress");
        assert_eq!(threads(), started, "threads after step {steps}");
    }
    assert!(steps >= 8, "{steps} steps");
    assert_eq!(name(worker), WORKER);
    let ran = run_ns(worker).zip(ran_before).map(|(a, b)| a - b);
    drop(engine);
    assert_eq!(
        threads_once_reaped(before),
        before,
        "the worker is joined with the engine"
    );
    ran
}

/// The process's threads once any thread that has already been joined is
/// gone from `/proc/self/task`. `pthread_join` returns when the kernel
/// clears the exiting thread's id, early in its exit; the task leaves the
/// thread group's list a little later. A joined worker leaves the list
/// within the wait; one still running never does, so the check still
/// fails for a worker the engine left behind.
fn threads_once_reaped(expected: &[u32]) -> Vec<u32> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    loop {
        let now = threads();
        if now == expected || std::time::Instant::now() > deadline {
            return now;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

#[test]
fn a_two_thread_engine_runs_on_two_threads() {
    if !cfg!(target_os = "linux") {
        eprintln!("skipping team_threads: counting threads needs Linux /proc");
        return;
    }
    let Some(path) = support::require_model("team_threads") else {
        return;
    };
    let file = ModelFile::open(&path).expect("open the model");
    let dense = Model::from_gguf(&file.gguf().unwrap()).expect("load the model");
    let quantized = Model::load(&path).expect("load the model in place");
    let before = threads();
    for (name, model) in [("dense", &dense), ("quantized", &quantized)] {
        let ran = generate_on_two_threads(model, &before);
        println!("{name}: team worker ran {ran:?} ns");
        if let Some(ns) = ran {
            // The worker took a share of the products and attention: a
            // 40-token prefill of a 135M-parameter model is tens of
            // milliseconds of work on either thread.
            assert!(ns > 1_000_000, "{name}: the worker ran only {ns} ns");
        }
    }
}
