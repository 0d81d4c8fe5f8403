//! What the engine reports: one step ([`StepReport`]), a snapshot of its
//! state ([`EngineStats`]) and the leak check ([`Audit`]).

use pagoda_core::scheduler::{SchedulerMetrics, StepPlan};
use pagoda_core::{PoolStats, RadixStats};
use serde::Serialize;

/// What one step did and where its time went.
#[derive(Debug, Clone, Copy, Default)]
pub struct StepReport {
    /// The scheduler's plan summary.
    pub plan: StepPlan,
    /// Sequences running after the step.
    pub running: u32,
    /// Microseconds in the queue, the scheduler, batch packing and finishing
    /// (radix insertion, page release): the engine's bookkeeping.
    pub bookkeeping_us: u64,
    /// Microseconds in copy-on-write copies, the forward pass and sampling.
    pub compute_us: u64,
}

/// A snapshot of the engine's metrics, readable from its owner (or through
/// [`EngineClient::stats`](crate::EngineClient::stats)).
#[derive(Debug, Clone)]
pub struct EngineStats {
    /// The page pool.
    pub pool: PoolStats,
    /// The prefix cache.
    pub radix: RadixStats,
    /// The scheduler's measurements since the engine was built.
    pub scheduler: SchedulerMetrics,
    /// Requests running.
    pub running: u32,
    /// Requests waiting (queue plus scheduler).
    pub waiting: u32,
    /// Where every page and request is.
    pub audit: Audit,
}

/// Where every page and request is; see [`Engine::audit`](crate::Engine::audit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Audit {
    /// Pages in the pool.
    pub total_pages: u32,
    /// Pages on the free list.
    pub free_pages: u32,
    /// Pages the prefix cache keeps (reclaimable).
    pub cached_pages: u32,
    /// Pages some sequence still references.
    pub referenced_pages: u32,
    /// Sequences in the page table.
    pub active_sequences: u32,
    /// Requests still waiting.
    pub waiting: u32,
    /// Requests still running.
    pub running: u32,
}

impl Audit {
    /// Whether the engine is idle and every page is free or cached.
    pub fn is_clean(&self) -> bool {
        self.referenced_pages == 0
            && self.active_sequences == 0
            && self.waiting == 0
            && self.running == 0
            && self.free_pages + self.cached_pages == self.total_pages
    }
}
