//! The storage the engine's core structures live in, allocated once the way
//! an embedded host would hand in statics, and its split into the KV cache
//! ([`KvCache`]: pool, page tables, radix cache, scratch row) and the rest
//! (queue, scheduler slots, watch table).

use pagoda_core::queue::QueueSlot;
use pagoda_core::scheduler::{SchedSlot, Scheduler};
use pagoda_core::{
    CacheEvent, KvCache, KvStorage, PageEntry, PageId, RadixCache, RadixNode, SeqEntry,
    StorageError, PAGE_SIZE,
};

use crate::config::EngineConfig;
use crate::request::Queued;

/// Every buffer the engine's core structures live in, allocated once, the
/// way an embedded host would hand in statics.
pub struct EngineStorage {
    pages: Vec<PageEntry>,
    rows: Vec<PageId>,
    seqs: Vec<SeqEntry>,
    nodes: Vec<RadixNode>,
    index: Vec<u64>,
    queue: Vec<QueueSlot<Queued>>,
    slots: Vec<SchedSlot<Queued>>,
    watch: Vec<u32>,
    scratch: Vec<PageId>,
    events: Vec<CacheEvent>,
}

impl EngineStorage {
    /// Storage for `config` and a model whose context is `max_context`
    /// tokens.
    pub fn new(config: &EngineConfig, max_context: u32) -> Self {
        let pages_per_seq = max_context.div_ceil(PAGE_SIZE as u32) as usize;
        let max_seqs = config.scheduler.max_batch as usize;
        let nodes = config.kv_pages.max(1) as usize;
        let slots = config.scheduler_slots.max(1) as usize;
        Self {
            pages: vec![PageEntry::EMPTY; config.kv_pages as usize],
            rows: vec![PageId::from_index(0); max_seqs * pages_per_seq],
            seqs: vec![SeqEntry::EMPTY; max_seqs],
            nodes: vec![RadixNode::EMPTY; nodes],
            index: vec![0; RadixCache::index_len_for(nodes)],
            queue: (0..config.queue_capacity.max(1))
                .map(|_| QueueSlot::EMPTY)
                .collect(),
            slots: (0..slots).map(|_| SchedSlot::EMPTY).collect(),
            watch: vec![0; Scheduler::<Queued>::watch_len_for(slots)],
            scratch: vec![PageId::from_index(0); pages_per_seq],
            events: vec![CacheEvent::EMPTY; config.cache_events as usize],
        }
    }
}

/// The storage the queue and the scheduler take, besides the KV cache.
pub(crate) struct OtherStorage<'s> {
    pub(crate) queue: &'s mut [QueueSlot<Queued>],
    pub(crate) slots: &'s mut [SchedSlot<Queued>],
    pub(crate) watch: &'s mut [u32],
}

impl EngineStorage {
    /// Builds the KV cache over this storage; returns the rest of it.
    pub(crate) fn split(&mut self) -> Result<(KvCache<'_>, OtherStorage<'_>), StorageError> {
        let Self {
            pages,
            rows,
            seqs,
            nodes,
            index,
            queue,
            slots,
            watch,
            scratch,
            events,
        } = self;
        let mut kv = KvCache::new(KvStorage {
            pages,
            rows,
            seqs,
            nodes,
            index,
            scratch,
        })?;
        kv.set_event_ring(events);
        Ok((
            kv,
            OtherStorage {
                queue,
                slots,
                watch,
            },
        ))
    }
}
