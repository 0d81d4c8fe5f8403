//! Arbitrary callers against the engine API: whatever requests come in
//! (empty prompts, zero or huge output limits, ids outside the vocabulary,
//! prompts past the context, invalid sampling) and whatever the caller does
//! with its handles (cancel at any moment, drop), every refusal is typed and
//! changes nothing, every kept handle hears exactly one terminal event after
//! its tokens, and the engine ends with a clean audit.

use pagoda_cpu::CpuBackend;
use pagoda_engine::model::{Model, ModelConfig, SamplingParams};
use pagoda_engine::{
    Engine, EngineConfig, EngineStorage, Event, Fcfs, GenRequest, KvDtype, Policy, Priority,
    Rejection, RequestHandle, SchedulerConfig,
};
use proptest::prelude::*;

const CONFIG: ModelConfig = ModelConfig {
    vocab: 97,
    hidden: 64,
    layers: 1,
    q_heads: 2,
    kv_heads: 1,
    head_dim: 64,
    rope_dim: 64,
    ffn: 64,
    rope_theta: 10_000.0,
    rms_eps: 1e-5,
    max_context: 128,
};

const POOL_PAGES: u32 = 24;

#[derive(Debug, Clone)]
enum Op {
    Submit {
        prompt: Vec<u32>,
        max_new_tokens: u32,
        temperature: f32,
        top_p: f32,
        stop_token: Option<u32>,
        priority: u8,
    },
    Step(u8),
    CancelHandle(usize),
    DropHandle(usize),
    CancelByOwner(usize),
}

fn op() -> impl Strategy<Value = Op> {
    let prompt = prop_oneof![
        8 => prop::collection::vec(0u32..97, 1..60),
        1 => Just(Vec::new()),
        1 => prop::collection::vec(0u32..200, 1..8),
        1 => prop::collection::vec(0u32..97, 120..200),
    ];
    let max_new =
        prop_oneof![8 => 1u32..24, 1 => Just(0u32), 1 => Just(u32::MAX), 1 => 100u32..400];
    let temperature =
        prop_oneof![12 => Just(0.0f32), 4 => Just(0.8), 1 => Just(f32::NAN), 1 => Just(-1.0)];
    let top_p = prop_oneof![12 => Just(1.0f32), 4 => Just(0.9), 1 => Just(0.0), 1 => Just(1.5)];
    prop_oneof![
        4 => (prompt, max_new, temperature, top_p, prop::option::of(0u32..97), 0u8..4).prop_map(
            |(prompt, max_new_tokens, temperature, top_p, stop_token, priority)| Op::Submit {
                prompt,
                max_new_tokens,
                temperature,
                top_p,
                stop_token,
                priority,
            }
        ),
        3 => (1u8..4).prop_map(Op::Step),
        1 => any::<usize>().prop_map(Op::CancelHandle),
        1 => any::<usize>().prop_map(Op::DropHandle),
        1 => any::<usize>().prop_map(Op::CancelByOwner),
    ]
}

/// The refusal a request must get before it reaches the queue, if any.
fn expected_refusal(r: &GenRequest) -> Option<fn(&Rejection) -> bool> {
    if r.prompt.is_empty() {
        return Some(|e| *e == Rejection::EmptyPrompt);
    }
    if r.prompt.iter().any(|&t| t >= CONFIG.vocab) {
        return Some(|e| matches!(e, Rejection::TokenOutOfVocabulary { vocab: 97, .. }));
    }
    if r.max_new_tokens == 0 {
        return Some(|e| *e == Rejection::ZeroMaxTokens);
    }
    if r.sampling.validate().is_err() {
        return Some(|e| matches!(e, Rejection::Sampling(_)));
    }
    if r.prompt.len() >= CONFIG.max_context as usize {
        return Some(|e| matches!(e, Rejection::PromptFillsContext { .. }));
    }
    None
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_requests_get_typed_refusals_one_terminal_event_and_a_clean_audit(
        ops in prop::collection::vec(op(), 1..40)
    ) {
        let model = Model::seeded(CONFIG, 5).unwrap();
        let config = EngineConfig {
            scheduler: SchedulerConfig {
                max_batch: 4,
                token_budget: 48,
                fairness_threshold_us: None,
                ..SchedulerConfig::default()
            },
            policy: Policy::Fcfs(Fcfs),
            kv_pages: POOL_PAGES,
            kv_dtype: KvDtype::F16,
            queue_capacity: 8,
            scheduler_slots: 6,
            cache_events: 0,
        };
        let mut storage = EngineStorage::new(&config, CONFIG.max_context);
        let mut engine = Engine::new(&model, CpuBackend::new(), &config, &mut storage).unwrap();
        let mut handles: Vec<Option<RequestHandle>> = Vec::new();
        let mut ids = Vec::new();
        for (tag, op) in ops.into_iter().enumerate() {
            match op {
                Op::Submit { prompt, max_new_tokens, temperature, top_p, stop_token, priority } => {
                    let request = GenRequest {
                        tag: tag as u64,
                        prompt,
                        max_new_tokens,
                        sampling: SamplingParams {
                            temperature,
                            top_p,
                            ..SamplingParams::GREEDY
                        },
                        seed: tag as u64,
                        stop_tokens: stop_token.into_iter().collect(),
                    };
                    let expected = expected_refusal(&request);
                    let before = engine.audit();
                    let waiting = engine.waiting();
                    let priority = [Priority::Low, Priority::Normal, Priority::High, Priority::Critical][priority as usize];
                    let now = engine.now();
                    match engine.submit(request, priority, now) {
                        Ok(handle) => {
                            prop_assert!(expected.is_none(), "an invalid request was taken");
                            ids.push(handle.id());
                            handles.push(Some(handle));
                        }
                        Err(reason) => {
                            match expected {
                                Some(check) => prop_assert!(check(&reason), "{reason:?}"),
                                None => prop_assert!(
                                    matches!(reason, Rejection::LargerThanPool { pool_pages: POOL_PAGES, .. } | Rejection::QueueFull),
                                    "{reason:?}"
                                ),
                            }
                            // A refusal changes nothing.
                            prop_assert_eq!(engine.audit(), before);
                            prop_assert_eq!(engine.waiting(), waiting);
                        }
                    }
                }
                Op::Step(n) => {
                    for _ in 0..n {
                        engine.step().unwrap();
                    }
                }
                Op::CancelHandle(i) if !handles.is_empty() => {
                    if let Some(h) = &handles[i % handles.len()] {
                        h.cancel();
                    }
                }
                Op::DropHandle(i) if !handles.is_empty() => {
                    let n = handles.len();
                    handles[i % n] = None;
                }
                Op::CancelByOwner(i) if !ids.is_empty() => {
                    engine.cancel(ids[i % ids.len()]);
                }
                _ => {}
            }
        }
        let mut steps = 0;
        while !engine.is_idle() {
            engine.step().unwrap();
            steps += 1;
            prop_assert!(steps < 5_000, "no progress");
        }
        for handle in handles.iter().flatten() {
            let mut tokens = 0u32;
            let mut terminal = None;
            while let Some(event) = handle.try_recv() {
                prop_assert!(terminal.is_none(), "an event after the terminal one");
                match event {
                    Event::Token { index, .. } => {
                        prop_assert_eq!(index, tokens);
                        tokens += 1;
                    }
                    e => terminal = Some(e),
                }
            }
            match terminal {
                Some(Event::Finished(c)) => {
                    prop_assert_eq!(c.output.len() as u32, tokens);
                    prop_assert!(c.prompt_len as usize + c.output.len() <= CONFIG.max_context as usize);
                }
                Some(Event::Cancelled) => {}
                other => prop_assert!(false, "terminal event {other:?}"),
            }
        }
        let audit = engine.audit();
        prop_assert!(audit.is_clean(), "{audit:?}");
    }
}
