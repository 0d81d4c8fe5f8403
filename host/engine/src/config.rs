//! The engine's limits.

use pagoda_core::scheduler::{Lpm, Policy, SchedulerConfig};
use pagoda_core::KvDtype;

/// The engine's limits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EngineConfig {
    /// Batch and token budgets, fairness.
    pub scheduler: SchedulerConfig,
    /// Which waiting request goes first.
    pub policy: Policy,
    /// Pages in the KV pool.
    pub kv_pages: u32,
    /// How the KV cache stores keys and values.
    pub kv_dtype: KvDtype,
    /// Requests the queue holds before refusing.
    pub queue_capacity: u32,
    /// Requests the scheduler considers at once (waiting plus running); the
    /// rest wait in the queue.
    pub scheduler_slots: u32,
    /// Capacity of the prefix cache's event ring (0: events off). Events
    /// are drained after every step, so a few times the pages one step can
    /// add or evict is enough; an overflow costs a full snapshot.
    pub cache_events: u32,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            scheduler: SchedulerConfig::default(),
            policy: Policy::Lpm(Lpm::default()),
            kv_pages: 2048,
            kv_dtype: KvDtype::F16,
            queue_capacity: 65_536,
            scheduler_slots: 1024,
            cache_events: 0,
        }
    }
}
