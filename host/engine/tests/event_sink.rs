//! Events delivered by callback ([`EventSink`], [`EngineClient::submit_to`]),
//! the path an async server takes: the same events as a [`RequestHandle`]'s
//! channel for the same request, cancellation when the sink reports its
//! listener gone, and a typed refusal once the engine has stopped.
//!
//! [`EngineClient::submit_to`]: pagoda_engine::EngineClient::submit_to
//! [`RequestHandle`]: pagoda_engine::RequestHandle

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pagoda_cpu::{CpuBackend, CpuError};
use pagoda_engine::model::{Model, ModelConfig, SamplingParams};
use pagoda_engine::{
    spawn, Canceller, EngineClient, EngineConfig, Event, EventSink, Fcfs, GenRequest, KvDtype,
    Policy, Priority, Rejection, SchedulerConfig, Shutdown,
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

fn engine() -> EngineClient {
    let model = Arc::new(Model::seeded(CONFIG, 42).unwrap());
    let config = EngineConfig {
        scheduler: SchedulerConfig {
            max_batch: 8,
            token_budget: 64,
            fairness_threshold_us: None,
            ..SchedulerConfig::default()
        },
        policy: Policy::Fcfs(Fcfs),
        kv_pages: 64,
        kv_dtype: KvDtype::F32,
        queue_capacity: 16,
        scheduler_slots: 16,
        cache_events: 0,
    };
    spawn(model, config, || Ok::<_, CpuError>(CpuBackend::new())).unwrap()
}

fn request(tag: u64, max_new: u32) -> GenRequest {
    let mut rng = fastrand::Rng::with_seed(tag);
    GenRequest {
        tag,
        prompt: (0..20).map(|_| rng.u32(0..CONFIG.vocab)).collect(),
        max_new_tokens: max_new,
        sampling: SamplingParams::GREEDY,
        seed: tag,
        stop_tokens: Vec::new(),
    }
}

/// Submits through a sink that forwards each event into a channel, then
/// calls `after` with the number of events so far (false: nobody listens).
fn submit_to(
    client: &EngineClient,
    request: GenRequest,
    after: impl Fn(usize) -> bool + Send + 'static,
) -> (Result<Canceller, Rejection>, mpsc::Receiver<Event>) {
    let (tx, events) = mpsc::channel();
    let (reply_tx, reply) = mpsc::channel();
    let seen = AtomicUsize::new(0);
    let sink = EventSink::new(move |event| {
        let _ = tx.send(event);
        after(seen.fetch_add(1, Ordering::SeqCst) + 1)
    });
    client.submit_to(request, Priority::Normal, sink, move |answer| {
        let _ = reply_tx.send(answer);
    });
    let answer = reply
        .recv_timeout(Duration::from_secs(30))
        .expect("submit_to answers");
    (answer, events)
}

fn next(events: &mpsc::Receiver<Event>) -> Event {
    events
        .recv_timeout(Duration::from_secs(30))
        .expect("an event within 30 s")
}

#[test]
fn a_sink_gets_the_same_events_as_a_handle() {
    let client = engine();
    // The reference: the same greedy request through a blocking handle.
    let handle = client.submit(request(1, 12), Priority::Normal).unwrap();
    let mut expected = Vec::new();
    while let Some(event) = handle.recv() {
        let terminal = event.is_terminal();
        expected.push(event);
        if terminal {
            break;
        }
    }
    let (answer, events) = submit_to(&client, request(1, 12), |_| true);
    let canceller = answer.expect("accepted");
    assert_ne!(canceller.id(), handle.id());
    let mut got = Vec::new();
    loop {
        let event = next(&events);
        let terminal = event.is_terminal();
        got.push(event);
        if terminal {
            break;
        }
    }
    assert_eq!(got.len(), 13, "12 tokens and one terminal event");
    for (i, (a, b)) in got.iter().zip(&expected).enumerate() {
        match (a, b) {
            (
                Event::Token { token, index, .. },
                Event::Token {
                    token: t, index: j, ..
                },
            ) => {
                assert_eq!((token, index), (t, j));
                assert_eq!(*index as usize, i);
            }
            (Event::Finished(a), Event::Finished(b)) => assert_eq!(a.output, b.output),
            _ => panic!("event {i}: {a:?} against {b:?}"),
        }
    }
    // The sink is dropped after its terminal event: nothing more comes.
    assert!(events.recv_timeout(Duration::from_millis(200)).is_err());
    assert!(client.shutdown(Shutdown::Finish).unwrap().is_clean());
}

#[test]
fn a_sink_whose_listener_left_cancels_its_request() {
    let client = engine();
    // The listener leaves with the first token: the engine learns it from
    // that send and cancels at its next step, long before 200 tokens.
    let (answer, events) = submit_to(&client, request(2, 200), |seen| seen < 1);
    answer.expect("accepted");
    assert!(matches!(next(&events), Event::Token { index: 0, .. }));
    let mut tokens = 1;
    let terminal = loop {
        match next(&events) {
            Event::Token { .. } => tokens += 1,
            e => break e,
        }
    };
    assert_eq!(terminal, Event::Cancelled);
    assert!(tokens <= 2, "{tokens} tokens after the listener left");
    let stats = client.stats().unwrap();
    assert_eq!(stats.running + stats.waiting, 0);
    assert!(client.shutdown(Shutdown::Finish).unwrap().is_clean());
}

#[test]
fn a_canceller_stops_a_sink_request_and_a_stopped_engine_refuses() {
    let client = engine();
    // The sink holds the engine at the first token until the test has
    // cancelled, so the cancel lands mid-generation whatever the speed.
    let (go_tx, go) = mpsc::channel::<()>();
    let go = Mutex::new(go);
    let (answer, events) = submit_to(&client, request(3, 200), move |seen| {
        if seen == 1 {
            let _ = go.lock().map(|g| g.recv_timeout(Duration::from_secs(30)));
        }
        true
    });
    let canceller = answer.expect("accepted");
    assert!(matches!(next(&events), Event::Token { index: 0, .. }));
    canceller.cancel();
    go_tx.send(()).unwrap();
    let mut tokens = 1;
    let terminal = loop {
        match next(&events) {
            Event::Token { .. } => tokens += 1,
            e => break e,
        }
    };
    assert_eq!(terminal, Event::Cancelled);
    assert!(tokens <= 2, "{tokens} tokens after the cancel");
    // A request refused at submission: its sink is never called.
    let mut bad = request(4, 5);
    bad.max_new_tokens = 0;
    let (answer, events) = submit_to(&client, bad, |_| true);
    assert_eq!(answer.unwrap_err(), Rejection::ZeroMaxTokens);
    assert!(events.recv_timeout(Duration::from_millis(100)).is_err());
    assert!(client.shutdown(Shutdown::Cancel).unwrap().is_clean());
    let (answer, _) = submit_to(&client, request(5, 5), |_| true);
    assert_eq!(answer.unwrap_err(), Rejection::EngineStopped);
}
