//! Pagoda's engine as a library: continuous batching that puts the core
//! (request queue, scheduler, page pool, radix cache) and a backend to work
//! on a Llama-architecture [`model`].
//!
//! One owner, [`Engine`], holds the model, the backend, its KV store and the
//! core's structures. [`Engine::submit`] returns a [`RequestHandle`] that
//! streams each sampled token as an [`Event`] and ends with exactly one
//! terminal event; the handle cancels its request from any thread (dropping
//! it cancels too). [`Engine::step`] runs one batch. [`spawn`] runs an engine
//! on its own thread behind a cloneable [`EngineClient`], for servers.
//!
//! The crate re-exports what its users need from the core (policies,
//! priorities, the KV dtype, metrics), so they depend on this crate alone.
//!
//! ```
//! use std::sync::Arc;
//! use pagoda_engine::model::{Model, ModelConfig, SamplingParams};
//! use pagoda_engine::{BackendChoice, EngineConfig, Event, GenRequest, Priority, Shutdown};
//!
//! // The embedded random-weight model, on the CPU backend, on its own thread.
//! let model = Arc::new(Model::seeded(ModelConfig::EMBEDDED, 0)?);
//! let config = EngineConfig { kv_pages: 64, ..EngineConfig::default() };
//! let client = BackendChoice::Cpu { threads: 1 }.spawn(model, config)?;
//!
//! let request = GenRequest {
//!     tag: 1,
//!     prompt: vec![1, 2, 3, 4],
//!     max_new_tokens: 8,
//!     sampling: SamplingParams::GREEDY,
//!     seed: 0,
//!     stop_tokens: Vec::new(),
//! };
//! let handle = client.submit(request, Priority::Normal)?;
//! let mut streamed = Vec::new();
//! while let Some(event) = handle.recv() {
//!     match event {
//!         Event::Token { token, .. } => streamed.push(token), // as it is sampled
//!         Event::Finished(done) => {
//!             assert_eq!(done.output, streamed);
//!             break;
//!         }
//!         other => panic!("unexpected {other:?}"),
//!     }
//! }
//! // Dropping a handle (or `handle.cancel()`) cancels its request.
//! let audit = client.shutdown(Shutdown::Cancel)?;
//! assert!(audit.is_clean());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![warn(missing_docs)]

mod backend;
mod batch;
mod cache_events;
pub mod chat;
mod config;
mod engine;
mod error;
mod kv;
mod metrics;
pub mod model;
mod request;
mod step;
pub mod structured;
mod text;
mod thread;
pub mod tokenizer;

pub use backend::{
    BackendChoice, BackendOpenError, DeviceKernel, DeviceProgram, StepBackend, WithBackend,
};
pub use cache_events::{CachedBlock, KvEvent};
pub use config::EngineConfig;
pub use engine::Engine;
pub use error::{EngineError, Rejection, RejectionKind};
pub use kv::{EngineStorage, KvLayout};
pub use metrics::{Audit, EngineStats, StepReport};
pub use request::{Canceller, Completion, Event, EventSink, GenRequest, RequestHandle, StopReason};
pub use text::{ModelInfo, OpenError, TextModel, TextPiece, TextStream, WeightMode};
pub use thread::{spawn, BoxError, EngineClient, Shutdown, ShutdownError, SpawnError};

pub use pagoda_core::backend::Backend;
pub use pagoda_core::queue::QueueError;
pub use pagoda_core::scheduler::{
    ConfigError, Fcfs, Lpm, Policy, SchedError, SchedulerConfig, SchedulerMetrics, SchedulerPolicy,
    StepPlan, DEFAULT_PREFILL_SHARE,
};
pub use pagoda_core::{
    KvDtype, KvError, ParseKvDtypeError, PoolStats, Priority, RadixStats, RequestId, Timestamp,
    PAGE_SIZE,
};
/// Machine limits (read bandwidth, FMA peak) the speed benchmarks compare with.
pub use pagoda_cpu::probe;
