//! The engine on its own thread: submissions from several threads, each
//! handle streaming its tokens and ending once; shutdown that finishes or
//! cancels what runs and reports a clean audit; refusals once stopped.

use std::sync::Arc;
use std::time::Duration;

use pagoda_cpu::{CpuBackend, CpuError};
use pagoda_engine::model::{Model, ModelConfig, SamplingParams};
use pagoda_engine::{
    spawn, BackendChoice, EngineConfig, Event, Fcfs, GenRequest, KvDtype, Policy, Priority,
    Rejection, SchedulerConfig, Shutdown, ShutdownError, SpawnError,
};

const CONFIG: ModelConfig = ModelConfig {
    vocab: 97,
    hidden: 64,
    layers: 2,
    q_heads: 4,
    kv_heads: 2,
    head_dim: 64,
    rope_dim: 64,
    ffn: 96,
    rope_theta: 10_000.0,
    rms_eps: 1e-5,
    max_context: 256,
};

fn model() -> Arc<Model> {
    Arc::new(Model::seeded(CONFIG, 42).unwrap())
}

fn config(kv_pages: u32) -> EngineConfig {
    EngineConfig {
        scheduler: SchedulerConfig {
            max_batch: 8,
            token_budget: 64,
            fairness_threshold_us: None,
            ..SchedulerConfig::default()
        },
        policy: Policy::Fcfs(Fcfs),
        kv_pages,
        kv_dtype: KvDtype::F32,
        queue_capacity: 64,
        scheduler_slots: 16,
        cache_events: 0,
    }
}

fn request(tag: u64, len: usize, max_new: u32) -> GenRequest {
    let mut rng = fastrand::Rng::with_seed(tag);
    GenRequest {
        tag,
        prompt: (0..len).map(|_| rng.u32(0..CONFIG.vocab)).collect(),
        max_new_tokens: max_new,
        sampling: SamplingParams::GREEDY,
        seed: tag,
        stop_tokens: Vec::new(),
    }
}

fn cpu() -> Result<CpuBackend, CpuError> {
    Ok(CpuBackend::new())
}

mod spawned_engine {
    use super::*;

    #[test]
    fn serves_submissions_from_several_threads() {
        let client = spawn(model(), config(128), cpu).unwrap();
        let workers: Vec<_> = (0..4u64)
            .map(|t| {
                let client = client.clone();
                std::thread::spawn(move || {
                    let mut finished = 0;
                    for i in 0..5u64 {
                        let tag = t * 10 + i;
                        let max_new = 3 + i as u32;
                        let handle = client
                            .submit(request(tag, 10 + i as usize * 7, max_new), Priority::Normal)
                            .unwrap();
                        // The third request of each thread is cancelled at once.
                        if i == 2 {
                            handle.cancel();
                        }
                        let mut streamed = Vec::new();
                        let terminal = loop {
                            let event = handle
                                .recv_timeout(Duration::from_secs(30))
                                .expect("an event within 30 s");
                            match event {
                                Event::Token { token, index, .. } => {
                                    assert_eq!(index as usize, streamed.len());
                                    streamed.push(token);
                                }
                                e => break e,
                            }
                        };
                        match terminal {
                            Event::Finished(c) => {
                                assert_eq!(c.tag, tag);
                                assert_eq!(c.output.len(), max_new as usize);
                                assert_eq!(streamed, c.output);
                                finished += 1;
                            }
                            Event::Cancelled => assert_eq!(i, 2, "only the third is cancelled"),
                            e => panic!("request {tag}: {e:?}"),
                        }
                        // Nothing after the terminal event.
                        assert_eq!(handle.try_recv(), None);
                    }
                    finished
                })
            })
            .collect();
        let finished: u32 = workers.into_iter().map(|w| w.join().unwrap()).sum();
        assert!(finished >= 16, "{finished} of 20 finished");
        let stats = client.stats().expect("the engine runs");
        assert_eq!(stats.running + stats.waiting, 0);
        let audit = client.shutdown(Shutdown::Finish).unwrap();
        assert!(audit.is_clean(), "{audit:?}");
        // Stopped: every clone is refused, typed.
        assert_eq!(
            client
                .submit(request(99, 5, 2), Priority::Normal)
                .unwrap_err(),
            Rejection::EngineStopped
        );
        assert!(client.stats().is_none());
        assert!(matches!(
            client.shutdown(Shutdown::Cancel),
            Err(ShutdownError::Stopped)
        ));
    }

    #[test]
    fn shutdown_with_cancel_ends_every_request_and_leaks_nothing() {
        let client = spawn(model(), config(64), cpu).unwrap();
        let handles: Vec<_> = (0..6)
            .map(|i| {
                client
                    .submit(request(i, 30, 200), Priority::Normal)
                    .unwrap()
            })
            .collect();
        // Let the engine start on them.
        assert!(matches!(
            handles[0].recv_timeout(Duration::from_secs(30)),
            Some(Event::Token { index: 0, .. })
        ));
        let audit = client.shutdown(Shutdown::Cancel).unwrap();
        assert!(audit.is_clean(), "{audit:?}");
        for h in &handles {
            let mut last = None;
            while let Some(e) = h.try_recv() {
                last = Some(e);
            }
            assert_eq!(last, Some(Event::Cancelled));
        }
    }

    #[test]
    fn shutdown_with_finish_runs_what_is_held_to_the_end() {
        let client = spawn(model(), config(64), cpu).unwrap();
        let handles: Vec<_> = (0..4)
            .map(|i| client.submit(request(i, 20, 6), Priority::Normal).unwrap())
            .collect();
        let audit = client.shutdown(Shutdown::Finish).unwrap();
        assert!(audit.is_clean(), "{audit:?}");
        for h in &handles {
            let mut last = None;
            while let Some(e) = h.try_recv() {
                last = Some(e);
            }
            assert!(matches!(last, Some(Event::Finished(c)) if c.output.len() == 6));
        }
    }

    #[test]
    fn a_backend_chosen_at_run_time_serves_the_same_api() {
        let client = BackendChoice::Cpu { threads: 1 }
            .spawn(model(), config(64))
            .unwrap();
        let handle = client.submit(request(7, 12, 4), Priority::High).unwrap();
        let mut tokens = 0;
        loop {
            match handle.recv_timeout(Duration::from_secs(30)) {
                Some(Event::Token { .. }) => tokens += 1,
                Some(Event::Finished(c)) => {
                    assert_eq!(c.output.len(), tokens);
                    break;
                }
                e => panic!("{e:?}"),
            }
        }
        assert_eq!(tokens, 4);
        assert!(client.shutdown(Shutdown::Cancel).unwrap().is_clean());
    }

    #[test]
    fn an_engine_that_cannot_be_built_is_a_typed_error() {
        // No KV pages: the pool refuses its storage.
        let err = spawn(model(), config(0), cpu).unwrap_err();
        assert!(matches!(err, SpawnError::Build(_)), "{err}");
        let err = spawn(model(), config(8), || {
            Err::<CpuBackend, _>(CpuError::Threads("refused".into()))
        })
        .unwrap_err();
        assert!(err.to_string().contains("refused"), "{err}");
    }
}
