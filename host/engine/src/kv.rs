//! Every place the engine touches the core's KV structures (page pool, page
//! table, radix cache and the scratch row the scheduler borrows): the
//! storage they live in and the [`KvState`] borrows the scheduler takes.
//! Kept in one module so the engine reads the cache through one type.

use pagoda_core::queue::QueueSlot;
use pagoda_core::scheduler::{
    EntryId, Finished, KvState, SchedError, SchedSlot, Scheduler, StepPlan, Work,
};
use pagoda_core::{
    KvError, PageEntry, PageId, PagePool, PageTable, PoolStats, RadixCache, RadixNode, RadixStats,
    SeqEntry, SeqId, Slot, Timestamp, PAGE_SIZE,
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
        }
    }
}

/// The storage the queue and the scheduler take, besides the KV cache.
pub(crate) struct OtherStorage<'s> {
    pub(crate) queue: &'s mut [QueueSlot<Queued>],
    pub(crate) slots: &'s mut [SchedSlot<Queued>],
    pub(crate) watch: &'s mut [u32],
}

/// The KV cache: pool, page table, radix cache and the scheduler's scratch
/// row, built over [`EngineStorage`].
pub(crate) struct Kv<'s> {
    pool: PagePool<'s>,
    table: PageTable<'s>,
    radix: RadixCache<'s>,
    scratch: &'s mut [PageId],
}

/// Borrows the four parts as the scheduler takes them.
macro_rules! state {
    ($kv:expr) => {
        &mut KvState {
            pool: &mut $kv.pool,
            table: &mut $kv.table,
            radix: &mut $kv.radix,
            scratch: $kv.scratch,
        }
    };
}

impl<'s> Kv<'s> {
    /// Builds the cache over `storage`; returns the rest of the storage.
    pub(crate) fn new(storage: &'s mut EngineStorage) -> Result<(Self, OtherStorage<'s>), KvError> {
        let EngineStorage {
            pages,
            rows,
            seqs,
            nodes,
            index,
            queue,
            slots,
            watch,
            scratch,
        } = storage;
        let kv = Self {
            pool: PagePool::new(pages)?,
            table: PageTable::new(rows, seqs)?,
            radix: RadixCache::new(nodes, index)?,
            scratch,
        };
        Ok((
            kv,
            OtherStorage {
                queue,
                slots,
                watch,
            },
        ))
    }

    /// Plans one step (admission, prefill chunks, decode, preemption).
    pub(crate) fn schedule(
        &mut self,
        sched: &mut Scheduler<'_, Queued>,
        now: Timestamp,
        plan: &mut [Work],
    ) -> StepPlan {
        sched.schedule(now, state!(self), plan)
    }

    /// Takes a waiting or running request out of the scheduler and frees its
    /// pages.
    pub(crate) fn cancel(
        &mut self,
        sched: &mut Scheduler<'_, Queued>,
        entry: EntryId,
    ) -> Result<Queued, SchedError> {
        sched.cancel(entry, state!(self))
    }

    /// Finishes a running request: its full pages enter the radix cache
    /// under `tokens`, the rest return to the pool.
    pub(crate) fn finish(
        &mut self,
        sched: &mut Scheduler<'_, Queued>,
        entry: EntryId,
        tokens: &[u32],
        now: Timestamp,
    ) -> Result<Finished<Queued>, SchedError> {
        sched.finish(entry, tokens, now, state!(self))
    }

    /// The KV slots of `out.len()` tokens of `seq` from position `first`.
    #[inline]
    pub(crate) fn slot_mapping(
        &self,
        seq: SeqId,
        first: u32,
        out: &mut [Slot],
    ) -> Result<(), KvError> {
        self.table.slot_mapping(seq, first, out)
    }

    /// The pages of `seq`, in order.
    #[inline]
    pub(crate) fn pages(&self, seq: SeqId) -> Result<&[PageId], KvError> {
        self.table.pages(seq)
    }

    /// The radix cache, for the scheduler's prefix matching at admission.
    pub(crate) fn radix(&self) -> &RadixCache<'s> {
        &self.radix
    }

    /// Tokens one sequence can hold.
    pub(crate) fn max_tokens_per_sequence(&self) -> u32 {
        self.table.max_tokens_per_sequence()
    }

    /// Sequences in the page table.
    pub(crate) fn active_sequences(&self) -> u32 {
        self.table.active_sequences()
    }

    /// The pool's metrics at `now`.
    pub(crate) fn pool_stats(&self, now: Timestamp) -> PoolStats {
        self.pool.stats(now)
    }

    /// The radix cache's metrics.
    pub(crate) fn radix_stats(&self) -> RadixStats {
        self.radix.stats()
    }
}
