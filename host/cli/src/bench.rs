//! Running one trace through the engine under one policy, with one handle
//! per request (measured in `measure.rs`).
//!
//! Arrivals follow the trace on the engine's clock: a request is submitted
//! once its arrival time has passed, and the engine sleeps while nothing is
//! running and the next arrival is ahead. Latencies are measured from each
//! request's arrival time in the trace.

use std::time::Duration;

use pagoda_engine::model::{Model, SamplingParams};
use pagoda_engine::{
    BoxError, Engine, EngineConfig, EngineStorage, Event, GenRequest, Policy, RequestHandle,
    SchedulerPolicy, StepBackend, Timestamp, WithBackend,
};

use crate::measure::{Accumulator, OutcomeKind, PolicyReport};
use crate::workload::TraceEntry;

/// How the trace is driven, besides the engine's configuration.
#[derive(Debug, Clone)]
pub struct DriveOptions {
    /// Sampling for every request.
    pub sampling: SamplingParams,
    /// Seed of the samplers and of cancellations.
    pub seed: u64,
    /// Share of requests the client cancels at a random moment (0 to 1).
    pub cancel_fraction: f64,
    /// Concurrency at which the bookkeeping share is reported separately.
    pub concurrency_mark: u32,
}

/// Why a run could not complete.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The engine could not be built.
    #[error("cannot build the engine: {0}")]
    Build(#[source] BoxError),
    /// A step failed.
    #[error("step failed: {0}")]
    Step(#[source] BoxError),
}

/// One policy's run, generic over the backend [`BackendChoice`] opens.
///
/// [`BackendChoice`]: pagoda_engine::BackendChoice
pub struct PolicyRun<'a, F: FnMut()> {
    /// The model.
    pub model: &'a Model,
    /// The engine's configuration (its policy is replaced).
    pub config: &'a EngineConfig,
    /// The policy to run.
    pub policy: Policy,
    /// The requests.
    pub trace: &'a [TraceEntry],
    /// How they are driven.
    pub options: &'a DriveOptions,
    /// Called once per request accounted for (for a progress bar).
    pub on_outcome: F,
}

impl<F: FnMut()> WithBackend for PolicyRun<'_, F> {
    type Output = Result<PolicyReport, BenchError>;

    fn run<B>(self, backend: B) -> Self::Output
    where
        B: StepBackend,
        B::Error: std::error::Error + Send + Sync + 'static,
    {
        run_policy(
            self.model,
            backend,
            self.config,
            self.policy,
            self.trace,
            self.options,
            self.on_outcome,
        )
    }
}

/// Runs `trace` on a fresh engine with `policy`, holding one handle per
/// request; `on_outcome` is called once per request accounted for.
pub fn run_policy<B>(
    model: &Model,
    backend: B,
    config: &EngineConfig,
    policy: Policy,
    trace: &[TraceEntry],
    options: &DriveOptions,
    mut on_outcome: impl FnMut(),
) -> Result<PolicyReport, BenchError>
where
    B: StepBackend,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    let config = EngineConfig { policy, ..*config };
    let mut storage = EngineStorage::for_model(&config, model, B::KV_GROUPS);
    let mut engine = Engine::new(model, backend, &config, &mut storage)
        .map_err(|e| BenchError::Build(Box::new(e)))?;

    // Client-side cancellations: (time, trace index), sorted by time.
    let mut rng = fastrand::Rng::with_seed(options.seed ^ 0xC0FF_EE00);
    let mut cancels: Vec<(u64, usize)> = Vec::new();
    for (i, e) in trace.iter().enumerate() {
        let delay = rng.u64(0..1_000_000);
        if rng.f64() < options.cancel_fraction {
            cancels.push((e.arrival_us + delay, i));
        }
    }
    cancels.sort_unstable();
    // One handle per submitted request until its terminal event; `open`
    // lists the trace indices still waiting for one.
    let mut handles: Vec<Option<RequestHandle>> = (0..trace.len()).map(|_| None).collect();
    let mut open: Vec<usize> = Vec::new();

    let mut acc = Accumulator::new(trace.len(), options.concurrency_mark);
    let start = engine.now();
    let start_pool = engine.pool_stats();
    let mut next = 0;
    let mut next_cancel = 0;
    loop {
        let now = engine.now();
        while next < trace.len() && trace[next].arrival_us <= now.0 {
            let e = &trace[next];
            let request = GenRequest {
                tag: next as u64,
                prompt: e.prompt.clone(),
                max_new_tokens: e.max_tokens,
                sampling: options.sampling.clone(),
                seed: options.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ next as u64,
                stop_tokens: Vec::new(),
            };
            match engine.submit(request, e.priority, Timestamp(start.0 + e.arrival_us)) {
                Ok(handle) => {
                    handles[next] = Some(handle);
                    open.push(next);
                }
                Err(reason) => {
                    acc.rejected(next, &reason);
                    on_outcome();
                }
            }
            next += 1;
        }
        while next_cancel < cancels.len() && cancels[next_cancel].0 <= now.0 {
            if let Some(Some(handle)) = handles.get(cancels[next_cancel].1) {
                handle.cancel();
            }
            next_cancel += 1;
        }
        poll(&mut handles, &mut open, &mut acc, &mut on_outcome);
        // An idle engine has sent every terminal event: `open` is empty.
        if engine.is_idle() {
            if next == trace.len() {
                break;
            }
            let wait = trace[next].arrival_us.saturating_sub(engine.now().0);
            std::thread::sleep(Duration::from_micros(wait.min(50_000)));
            continue;
        }
        let step = engine.step().map_err(|e| BenchError::Step(Box::new(e)))?;
        acc.step(&step, &engine.pool_stats());
    }
    poll(&mut handles, &mut open, &mut acc, &mut on_outcome);
    let end_pool = engine.pool_stats();
    let duration_s = engine.now().micros_since(start) as f64 / 1e6;
    let audit = engine.audit();
    Ok(acc.finish(
        config.policy.name(),
        duration_s,
        &start_pool,
        &end_pool,
        audit,
    ))
}

/// Reads every event that arrived; a terminal one closes its handle.
fn poll(
    handles: &mut [Option<RequestHandle>],
    open: &mut Vec<usize>,
    acc: &mut Accumulator,
    on_outcome: &mut impl FnMut(),
) {
    let mut i = 0;
    while i < open.len() {
        let index = open[i];
        let mut done = false;
        if let Some(handle) = &handles[index] {
            while let Some(event) = handle.try_recv() {
                match event {
                    Event::Token { .. } | Event::PromptLogprobs(_) => continue,
                    Event::Finished(c) => acc.finished(index, &c),
                    Event::Cancelled => acc.blank(index, OutcomeKind::Cancelled, None),
                    Event::Rejected(reason) => acc.rejected(index, &reason),
                    Event::Failed => acc.blank(index, OutcomeKind::Failed, None),
                }
                done = true;
                break;
            }
        }
        if done {
            handles[index] = None;
            open.swap_remove(i);
            on_outcome();
        } else {
            i += 1;
        }
    }
}
