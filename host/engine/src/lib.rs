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

#![warn(missing_docs)]

mod backend;
mod batch;
mod config;
mod engine;
mod error;
mod kv;
mod metrics;
pub mod model;
mod request;
mod step;
mod thread;

pub use backend::{BackendChoice, BackendOpenError, WithBackend};
pub use config::EngineConfig;
pub use engine::Engine;
pub use error::{EngineError, Rejection, RejectionKind};
pub use kv::EngineStorage;
pub use metrics::{Audit, EngineStats, StepReport};
pub use request::{Canceller, Completion, Event, GenRequest, RequestHandle, StopReason};
pub use thread::{spawn, BoxError, EngineClient, Shutdown, ShutdownError, SpawnError};

pub use pagoda_core::backend::Backend;
pub use pagoda_core::queue::QueueError;
pub use pagoda_core::scheduler::{
    ConfigError, Fcfs, Lpm, Policy, SchedError, SchedulerConfig, SchedulerMetrics, SchedulerPolicy,
    StepPlan,
};
pub use pagoda_core::{
    KvDtype, KvError, ParseKvDtypeError, PoolStats, Priority, RadixStats, RequestId, Timestamp,
};
