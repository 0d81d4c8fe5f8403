//! The engine against plain references: the paged, chunked, batched
//! forward pass against a dense f64 Llama forward; greedy generation through
//! the engine against greedy generation by the reference, streamed token by
//! token; cancellation, preemption and rejection without a leaked page or a
//! lost request.

mod support;

use pagoda_core::backend::{Backend, SeqAttention};
use pagoda_core::{KvDtype, PageId, Priority, Slot, PAGE_SIZE};
use pagoda_cpu::CpuBackend;
use pagoda_engine::model::{
    Activations, Model, ModelConfig, ModelError, SamplingError, SamplingParams, StepInput,
};
use pagoda_engine::{
    Engine, EngineConfig, EngineStorage, Event, GenRequest, Rejection, RequestHandle, StopReason,
};
use support::dense_ref;

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

fn model() -> Model {
    Model::seeded(CONFIG, 42).unwrap()
}

fn prompt(seed: u64, len: usize) -> Vec<u32> {
    let mut rng = fastrand::Rng::with_seed(seed);
    (0..len).map(|_| rng.u32(0..CONFIG.vocab)).collect()
}

#[test]
fn paged_chunked_forward_matches_the_dense_reference() {
    let model = model();
    for (dtype, tolerance) in [
        (KvDtype::F32, 2e-3),
        (KvDtype::F16, 3e-2),
        (KvDtype::Bf16, 1.5e-1),
    ] {
        let mut backend = CpuBackend::new();
        let geometry = CONFIG.kv_geometry(dtype).unwrap();
        let mut store = backend.create_kv_store(geometry, 64).unwrap();
        let tokens = prompt(1, 45);
        let expected = dense_ref::logits(&model, &tokens);
        // Scattered physical pages: the sequence's pages are 40, 7, 33.
        let pages = [
            PageId::from_index(40),
            PageId::from_index(7),
            PageId::from_index(33),
        ];
        let mut act = Activations::default();
        let mut logits = Vec::new();
        let mut start = 0;
        for chunk in [13usize, 1, 2, 29] {
            let end = start + chunk;
            let positions: Vec<u32> = (start as u32..end as u32).collect();
            let slots: Vec<Slot> = positions
                .iter()
                .map(|&p| pages[p as usize / PAGE_SIZE].slot(p % PAGE_SIZE as u32))
                .collect();
            let seqs = [SeqAttention {
                pages: &pages,
                context_len: end as u32,
                query_start: 0,
                query_len: chunk as u32,
            }];
            let rows: Vec<u32> = (0..chunk as u32).collect();
            let input = StepInput {
                places: &[],
                groups: &[],
                tokens: &tokens[start..end],
                positions: &positions,
                slots: &slots,
                seqs: &seqs,
                states: &[],
                sample_rows: &rows,
                prompt_rows: chunk,
            };
            model
                .forward(&mut backend, &mut store, &input, &mut act, &mut logits)
                .unwrap();
            let vocab = CONFIG.vocab as usize;
            for (r, pos) in (start..end).enumerate() {
                let got = &logits[r * vocab..(r + 1) * vocab];
                let want = &expected[pos];
                let scale = want.iter().fold(1.0f64, |m, v| m.max(v.abs()));
                for (g, w) in got.iter().zip(want) {
                    assert!(
                        (f64::from(*g) - w).abs() <= tolerance * scale,
                        "{dtype:?} position {pos}: {g} vs {w}"
                    );
                }
            }
            start = end;
        }
    }
}

fn request(tag: u64, prompt: Vec<u32>, max_new: u32) -> GenRequest {
    GenRequest {
        tag,
        prompt,
        max_new_tokens: max_new,
        sampling: SamplingParams::GREEDY,
        seed: tag,
        stop_tokens: Vec::new(),
    }
}

/// Reads a handle's events to the end: the tokens it streamed, checked to
/// come once each in order, and its one terminal event, checked to be last.
fn drain(handle: &RequestHandle) -> (Vec<u32>, Event) {
    let mut tokens = Vec::new();
    let mut terminal = None;
    while let Some(event) = handle.try_recv() {
        assert!(terminal.is_none(), "an event after the terminal one");
        match event {
            Event::Token { token, index, .. } => {
                assert_eq!(index as usize, tokens.len(), "tokens streamed in order");
                tokens.push(token);
            }
            Event::PromptLogprobs(_) => assert!(tokens.is_empty(), "prompt scores come first"),
            e => terminal = Some(e),
        }
    }
    (tokens, terminal.expect("a terminal event"))
}

/// The terminal event of every request, in submission order (a refusal at
/// submission as `Event::Rejected`); for a finished one, the streamed
/// tokens are checked to be its output.
fn outcomes(handles: Vec<Result<RequestHandle, Rejection>>) -> Vec<Event> {
    handles
        .into_iter()
        .map(|h| match h {
            Ok(handle) => {
                let (streamed, terminal) = drain(&handle);
                if let Event::Finished(c) = &terminal {
                    assert_eq!(streamed, c.output, "streamed tokens are the output");
                }
                terminal
            }
            Err(reason) => Event::Rejected(reason),
        })
        .collect()
}

/// Runs requests to the end; returns the outcomes in submission order, the
/// number of preemptions and whether the engine ended clean.
fn run(config: &EngineConfig, requests: Vec<GenRequest>) -> (Vec<Event>, u64, bool) {
    run_on(&model(), config, requests)
}

/// [`run`] on `model`.
fn run_on(
    model: &Model,
    config: &EngineConfig,
    requests: Vec<GenRequest>,
) -> (Vec<Event>, u64, bool) {
    let mut storage = EngineStorage::new(config, CONFIG.max_context);
    let mut engine = Engine::new(model, CpuBackend::new(), config, &mut storage).unwrap();
    let mut handles = Vec::new();
    for r in requests {
        let now = engine.now();
        handles.push(engine.submit(r, Priority::Normal, now));
    }
    let mut preempted = 0;
    let mut steps = 0;
    while !engine.is_idle() {
        preempted += u64::from(engine.step().unwrap().plan.preempted);
        steps += 1;
        assert!(steps < 10_000, "no progress");
    }
    (outcomes(handles), preempted, engine.audit().is_clean())
}

fn output(o: &Event) -> &[u32] {
    match o {
        Event::Finished(c) => &c.output,
        _ => panic!("not finished: {o:?}"),
    }
}

#[test]
fn batched_greedy_generation_matches_the_reference() {
    let model = model();
    // Three prompts sharing a 32-token prefix, generated together with a
    // small token budget (chunked prefill beside decode).
    let shared = prompt(7, 32);
    let prompts: Vec<Vec<u32>> = (0..3)
        .map(|i| {
            let mut p = shared.clone();
            p.extend(prompt(100 + i, 5 + 7 * i as usize));
            p
        })
        .collect();
    let requests = prompts
        .iter()
        .enumerate()
        .map(|(i, p)| request(i as u64, p.clone(), 6))
        .collect();
    let (outcomes, _, clean) = run(&support::fcfs_config(64, 24), requests);
    assert!(clean);
    for (p, o) in prompts.iter().zip(&outcomes) {
        let mut tokens = p.clone();
        for _ in 0..6 {
            let logits = dense_ref::logits(&model, &tokens);
            tokens.push(dense_ref::argmax(logits.last().unwrap()));
        }
        assert_eq!(output(o), &tokens[p.len()..]);
        if let Event::Finished(c) = o {
            assert_eq!(c.stop, StopReason::Length);
            assert!(c.arrived <= c.admitted && c.admitted <= c.first_token);
            assert!(c.first_token <= c.finished);
        }
    }
}

#[test]
fn preemption_under_page_pressure_recomputes_the_same_tokens() {
    let requests: Vec<GenRequest> = (0..8)
        .map(|i| request(i, prompt(200 + i, 40 + 3 * i as usize), 40))
        .collect();
    let (roomy, roomy_preempted, clean) = run(&support::fcfs_config(256, 64), requests.clone());
    assert!(clean);
    assert_eq!(roomy_preempted, 0);
    // 8 sequences of up to 100 tokens need about 56 pages: 24 forces
    // preemption.
    let (tight, tight_preempted, clean) = run(&support::fcfs_config(24, 64), requests);
    assert!(clean, "pages leaked under preemption");
    assert!(tight_preempted > 0, "the small pool should preempt");
    assert_eq!(roomy.len(), tight.len());
    // Streamed tokens were checked against the output: a recomputed token is
    // not sent twice.
    for (a, b) in roomy.iter().zip(&tight) {
        assert_eq!(output(a), output(b));
    }
    let preemptions: u32 = tight
        .iter()
        .map(|o| match o {
            Event::Finished(c) => c.preemptions,
            _ => 0,
        })
        .sum();
    assert!(preemptions > 0);
}

#[test]
fn bad_requests_are_refused_with_a_reason_and_leak_nothing() {
    let mut too_long = request(3, prompt(5, 300), 4);
    too_long.max_new_tokens = 4;
    let bad_sampling = GenRequest {
        sampling: SamplingParams {
            temperature: f32::NAN,
            ..SamplingParams::GREEDY
        },
        ..request(4, prompt(6, 5), 4)
    };
    let requests = vec![
        request(0, vec![1, 2, 500], 4),
        request(1, vec![], 4),
        request(2, prompt(4, 5), 0),
        too_long,
        bad_sampling,
        request(5, prompt(8, 20), 4),
        // Needs more pages than the whole pool.
        request(6, prompt(9, 200), 4),
    ];
    let (outcomes, _, clean) = run(&support::fcfs_config(8, 64), requests);
    assert!(clean);
    assert_eq!(outcomes.len(), 7, "every request accounted for once");
    let reason = |i: usize| match &outcomes[i] {
        Event::Rejected(reason) => reason.clone(),
        o => panic!("request {i} was not rejected: {o:?}"),
    };
    assert_eq!(
        reason(0),
        Rejection::TokenOutOfVocabulary {
            token: 500,
            vocab: 97
        }
    );
    assert_eq!(reason(1), Rejection::EmptyPrompt);
    assert_eq!(reason(2), Rejection::ZeroMaxTokens);
    assert_eq!(
        reason(3),
        Rejection::PromptFillsContext {
            prompt_len: 300,
            max_context: 256
        }
    );
    assert!(matches!(
        reason(4),
        Rejection::Sampling(SamplingError::Temperature(t)) if t.is_nan()
    ));
    assert_eq!(output(&outcomes[5]).len(), 4);
    assert!(matches!(
        reason(6),
        Rejection::LargerThanPool { pool_pages: 8, .. }
    ));
}

#[test]
fn cancellation_at_any_moment_frees_everything() {
    let model = model();
    let config = support::fcfs_config(48, 32);
    for seed in 0..12u64 {
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut storage = EngineStorage::new(&config, CONFIG.max_context);
        let mut engine = Engine::new(&model, CpuBackend::new(), &config, &mut storage).unwrap();
        let shared = prompt(seed, 24);
        let mut handles = Vec::new();
        let n = 20;
        for i in 0..n {
            let mut p = shared.clone();
            p.extend(prompt(1000 + i, rng.usize(1..30)));
            let now = engine.now();
            let handle = engine.submit(request(i, p, rng.u32(1..12)), Priority::Normal, now);
            handles.push(Some(handle.unwrap()));
        }
        let ids: Vec<_> = handles.iter().flatten().map(RequestHandle::id).collect();
        let mut cancelled_by_owner = 0;
        let mut cancelled_by_handle = Vec::new();
        let mut steps = 0;
        while !engine.is_idle() {
            // Cancel a random request (queued, waiting, running or gone):
            // by the owner at once, through its handle (seen at the next
            // step), or by dropping its handle.
            let i = rng.usize(0..ids.len());
            match rng.u32(0..6) {
                0 if engine.cancel(ids[i]) => cancelled_by_owner += 1,
                1 => {
                    if let Some(h) = &handles[i] {
                        h.cancel();
                        cancelled_by_handle.push(i);
                    }
                }
                2 => handles[i] = None,
                _ => {}
            }
            engine.step().unwrap();
            steps += 1;
            assert!(steps < 10_000);
        }
        let mut cancelled = 0;
        for (i, h) in handles.iter().enumerate() {
            let Some(h) = h else { continue };
            let (_, terminal) = drain(h);
            match terminal {
                Event::Cancelled => cancelled += 1,
                Event::Finished(c) => assert!(!c.output.is_empty()),
                e => panic!("request {i} ended with {e:?}"),
            }
        }
        assert!(cancelled <= cancelled_by_owner + cancelled_by_handle.len());
        let audit = engine.audit();
        assert!(audit.is_clean(), "seed {seed}: {audit:?}");
        // A cancelled or finished id is gone for good.
        for id in &ids {
            assert!(!engine.cancel(*id));
        }
    }
}

#[test]
fn a_handle_cancelled_from_another_thread_frees_its_pages_before_the_next_step() {
    let model = model();
    let config = support::fcfs_config(48, 32);
    let mut storage = EngineStorage::new(&config, CONFIG.max_context);
    let mut engine = Engine::new(&model, CpuBackend::new(), &config, &mut storage).unwrap();
    let now = engine.now();
    let handle = engine
        .submit(request(0, prompt(3, 40), 200), Priority::Normal, now)
        .unwrap();
    // Run until it streams its first token: it holds pages now.
    while handle.try_recv().is_none() {
        engine.step().unwrap();
    }
    assert!(engine.audit().referenced_pages > 0);
    let canceller = handle.canceller();
    std::thread::spawn(move || canceller.cancel())
        .join()
        .unwrap();
    let step = engine.step().unwrap();
    assert_eq!(
        step.plan.work, 0,
        "nothing computed for a cancelled request"
    );
    assert!(engine.is_idle());
    assert!(engine.audit().is_clean());
    let mut events = Vec::new();
    while let Some(e) = handle.try_recv() {
        events.push(e);
    }
    assert_eq!(events.last(), Some(&Event::Cancelled));
    assert!(events[..events.len() - 1]
        .iter()
        .all(|e| matches!(e, Event::Token { .. })));
}

#[test]
fn tokens_stream_as_they_are_sampled() {
    let model = model();
    let config = support::fcfs_config(48, 256);
    let mut storage = EngineStorage::new(&config, CONFIG.max_context);
    let mut engine = Engine::new(&model, CpuBackend::new(), &config, &mut storage).unwrap();
    let now = engine.now();
    let handle = engine
        .submit(request(0, prompt(4, 20), 5), Priority::Normal, now)
        .unwrap();
    // One step prefills and samples the first token; each later step one
    // more, each visible before the request finishes.
    for index in 0..5u32 {
        engine.step().unwrap();
        match handle.try_recv() {
            Some(Event::Token { index: i, .. }) => assert_eq!(i, index),
            e => panic!("step {index}: {e:?}"),
        }
    }
    assert!(matches!(handle.try_recv(), Some(Event::Finished(c)) if c.output.len() == 5));
    assert_eq!(handle.try_recv(), None);
}

#[test]
fn a_step_past_the_batch_is_a_typed_model_error() {
    let model = model();
    let mut backend = CpuBackend::new();
    let geometry = CONFIG.kv_geometry(KvDtype::F32).unwrap();
    let mut store = backend.create_kv_store(geometry, 4).unwrap();
    let pages = [PageId::from_index(0)];
    let seqs = [SeqAttention {
        pages: &pages,
        context_len: 1,
        query_start: 0,
        query_len: 1,
    }];
    let slots = [pages[0].slot(0)];
    // Two rows to sample from a one-token step (both in range).
    let input = StepInput {
        places: &[],
        groups: &[],
        tokens: &[1],
        positions: &[0],
        slots: &slots,
        seqs: &seqs,
        states: &[],
        sample_rows: &[0, 0],
        prompt_rows: 1,
    };
    let mut logits = Vec::new();
    let err = model
        .forward(
            &mut backend,
            &mut store,
            &input,
            &mut Activations::default(),
            &mut logits,
        )
        .unwrap_err();
    assert!(matches!(
        err,
        pagoda_engine::model::ForwardError::Model(ModelError::SampleRows { rows: 2, tokens: 1 })
    ));
}

/// Log-softmax of `row` at `token`, in f64.
fn log_softmax_at(row: &[f64], token: u32) -> f64 {
    let max = row.iter().cloned().fold(f64::MIN, f64::max);
    let norm = max + row.iter().map(|v| (v - max).exp()).sum::<f64>().ln();
    row[token as usize] - norm
}

/// A request that scores its prompt: the scores (every prompt token after
/// the first, with its top alternatives) equal the dense reference's
/// log-softmax, the prompt is computed whole even when the prefix cache
/// holds it (chunked across steps), the scores come once, before the first
/// token, also through preemption, and nothing leaks.
#[test]
fn prompt_scores_match_the_dense_reference_and_never_come_from_the_cache() {
    let model = model();
    let p = prompt(91, 45);
    let expected = dense_ref::logits(&model, &p);
    let scoring = |tag: u64| GenRequest {
        sampling: SamplingParams {
            prompt_logprobs: Some(3),
            ..SamplingParams::GREEDY
        },
        ..request(tag, p.clone(), 2)
    };
    // A token budget of 16: the 45-token prompt takes three steps.
    let config = support::fcfs_config(64, 16);
    let mut storage = EngineStorage::new(&config, CONFIG.max_context);
    let mut engine = Engine::new(&model, CpuBackend::new(), &config, &mut storage).unwrap();
    // Cached first by a plain request, then scored, then served again.
    let mut cached = Vec::new();
    for r in [
        request(0, p.clone(), 2),
        scoring(1),
        request(2, p.clone(), 2),
    ] {
        let now = engine.now();
        let handle = engine.submit(r, Priority::Normal, now).unwrap();
        let mut scores = Vec::new();
        while !engine.is_idle() {
            engine.step().unwrap();
            while let Some(event) = handle.try_recv() {
                match event {
                    Event::PromptLogprobs(s) => scores.push(s),
                    Event::Finished(c) => cached.push((c.cached_tokens, c.output)),
                    Event::Token { .. } => assert!(
                        scores.len() == usize::from(cached.len() == 1),
                        "the scores come before the first token"
                    ),
                    other => panic!("{other:?}"),
                }
            }
        }
        if cached.len() != 2 {
            assert!(scores.is_empty(), "scores only when asked");
            continue;
        }
        assert_eq!(scores.len(), 1, "the scores come once");
        let scores = &scores[0];
        assert_eq!(scores.len(), p.len() - 1);
        for (i, s) in scores.iter().enumerate() {
            let row = &expected[i];
            let want = log_softmax_at(row, p[i + 1]);
            assert!(
                (f64::from(s.logprob) - want).abs() < 2e-3,
                "prompt token {}: {} vs {want}",
                i + 1,
                s.logprob
            );
            assert_eq!(s.top.len(), 3);
            assert_eq!(
                s.top[0].0,
                dense_ref::argmax(row),
                "position {i}'s most likely token"
            );
            for &(token, lp) in &s.top {
                assert!((f64::from(lp) - log_softmax_at(row, token)).abs() < 2e-3);
            }
        }
    }
    assert_eq!(cached[0].0, 0);
    assert_eq!(cached[1].0, 0, "the scored prompt was computed whole");
    assert!(
        cached[2].0 >= 32,
        "a plain request is served from the cache"
    );
    assert_eq!(cached[1].1, cached[0].1, "scoring changes no output");
    assert!(engine.audit().is_clean());

    // Under page pressure: every scored request finishes with the output
    // of a roomy run, and `drain` checks the scores came first and once.
    let requests: Vec<GenRequest> = (0..6)
        .map(|i| GenRequest {
            sampling: SamplingParams {
                prompt_logprobs: Some(0),
                ..SamplingParams::GREEDY
            },
            ..request(i, prompt(400 + i, 40 + 3 * i as usize), 40)
        })
        .collect();
    let (roomy, _, clean) = run(&support::fcfs_config(256, 64), requests.clone());
    assert!(clean);
    let (tight, preempted, clean) = run(&support::fcfs_config(20, 64), requests);
    assert!(clean, "pages leaked under preemption");
    assert!(preempted > 0, "the small pool should preempt");
    for (a, b) in roomy.iter().zip(&tight) {
        assert_eq!(output(a), output(b));
    }
}

#[test]
fn a_shared_prefix_is_computed_once() {
    let model = model();
    let config = support::fcfs_config(64, 256);
    let mut storage = EngineStorage::new(&config, CONFIG.max_context);
    let mut engine = Engine::new(&model, CpuBackend::new(), &config, &mut storage).unwrap();
    let shared = prompt(77, 64);
    let mut computed = 0;
    let mut cached = 0;
    for i in 0..4u64 {
        let mut p = shared.clone();
        p.extend(prompt(300 + i, 10));
        let now = engine.now();
        // Kept until it finishes: dropping a handle cancels its request.
        let handle = engine.submit(request(i, p, 3), Priority::Normal, now);
        while !engine.is_idle() {
            let step = engine.step().unwrap();
            computed += step.plan.prefill_tokens;
            cached += step.plan.cached_tokens;
        }
        assert!(matches!(drain(&handle.unwrap()).1, Event::Finished(_)));
    }
    // The first request computes 74 tokens; each later one only its own 10
    // (the 64 shared tokens are four full pages).
    assert_eq!(cached, 3 * 64);
    assert_eq!(computed, 74 + 3 * 10);
    assert!(engine.audit().is_clean());
    assert!(engine.audit().cached_pages >= 4);
}

/// Structured outputs through the engine under page pressure: requests
/// sampling at temperature 1 under a regular expression and a JSON schema
/// (llguidance over a one-token-per-byte reading of the vocabulary) give
/// outputs that match them, and the same outputs whether or not they were
/// preempted and recomputed (the constraint restarts with the run).
#[test]
fn constrained_outputs_match_their_grammar_and_survive_preemption() {
    use pagoda_engine::structured::{OutputSpec, Structured};
    // The test model with a vocabulary of every byte.
    let config = ModelConfig {
        vocab: 256,
        ..CONFIG
    };
    let model = Model::seeded(config, 42).unwrap();
    let compiler = Structured::for_bytes(config.vocab).unwrap();
    let specs = [
        OutputSpec::Regex("[a-z]{24}-[0-9]{30}".into()),
        OutputSpec::JsonSchema(serde_json::json!({
            "type": "object",
            "properties": {"on": {"type": "boolean"}, "tag": {"enum": ["x", "yz"]}},
            "required": ["on", "tag"],
            "additionalProperties": false,
        })),
        OutputSpec::Choice(vec!["alpha".into(), "beta".into()]),
    ];
    // Mostly the long pattern (55 tokens), which makes the pages run out.
    let kind = |i: u64| [0, 0, 1, 2][i as usize % 4];
    let requests: Vec<GenRequest> = (0..8u64)
        .map(|i| GenRequest {
            sampling: SamplingParams {
                temperature: 1.0,
                constraint: Some(compiler.compile(&specs[kind(i)]).unwrap()),
                ..SamplingParams::GREEDY
            },
            ..request(i, prompt(300 + i, 40 + 3 * i as usize), 64)
        })
        .collect();
    let (roomy, _, clean) = run_on(&model, &support::fcfs_config(256, 64), requests.clone());
    assert!(clean);
    let (tight, tight_preempted, clean) = run_on(&model, &support::fcfs_config(16, 64), requests);
    assert!(clean, "pages leaked under preemption");
    assert!(tight_preempted > 0, "the small pool should preempt");
    for (i, (a, b)) in roomy.iter().zip(&tight).enumerate() {
        assert_eq!(output(a), output(b), "request {i}");
        let text: String = output(a)
            .iter()
            .map(|&t| char::from((t % 256) as u8))
            .collect();
        let ok = match kind(i as u64) {
            0 => {
                let b = text.as_bytes();
                b.len() == 55
                    && b[..24].iter().all(u8::is_ascii_lowercase)
                    && b[24] == b'-'
                    && b[25..].iter().all(u8::is_ascii_digit)
            }
            1 => serde_json::from_str::<serde_json::Value>(&text).is_ok_and(|v| {
                v["on"].is_boolean()
                    && (v["tag"] == "x" || v["tag"] == "yz")
                    && v.as_object().is_some_and(|o| o.len() == 2)
            }),
            _ => text == "alpha" || text == "beta",
        };
        assert!(ok, "request {i}: {text:?}");
        assert!(matches!(a, Event::Finished(c) if c.stop == pagoda_engine::StopReason::StopToken));
    }
}
