//! Pagoda's host runner: the continuous-batching [`engine`] that puts the
//! core (request queue, scheduler, page pool, radix cache) and a backend to
//! work on a Llama-architecture [`model`], and the `pagoda bench` benchmark
//! ([`workload`], [`bench`], [`report`]).

pub mod bench;
pub mod engine;
pub mod model;
pub mod report;
pub mod workload;
