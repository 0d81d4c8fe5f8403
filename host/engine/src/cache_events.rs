//! The prefix cache's changes as the engine reports them to a mirror (a KV
//! event publisher): the core's event ring drained after each step, with a
//! snapshot ("all cleared", then every block) whenever the ring overflowed
//! or a new watcher arrives, so a mirror is never silently wrong.

use std::collections::HashMap;

use crate::backend::StepBackend;
use pagoda_core::{CacheEvent, EventDrain};

pub use pagoda_core::CachedBlock;

use crate::engine::Engine;

/// One change to the set of cached blocks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KvEvent {
    /// A block entered the cache.
    Stored(CachedBlock),
    /// The block with this hash left the cache.
    Removed(u64),
    /// Forget every block: what follows is a full snapshot.
    AllCleared,
}

impl<B: StepBackend> Engine<'_, B> {
    /// Whether the engine was configured to record cache events
    /// ([`EngineConfig::cache_events`](crate::EngineConfig::cache_events)).
    pub fn cache_events_on(&self) -> bool {
        self.cache_events_on
    }

    /// The cache's changes since the last call, oldest first; after an
    /// overflow of the ring, [`KvEvent::AllCleared`] and a snapshot instead.
    /// Empty when events are off.
    pub fn drain_cache_events(&mut self) -> Vec<KvEvent> {
        let mut out = Vec::new();
        let drained = self.kv.drain_cache_events(|e| {
            out.push(match *e {
                CacheEvent::Stored(block) => KvEvent::Stored(block),
                CacheEvent::Removed { hash } => KvEvent::Removed(hash),
            })
        });
        if let EventDrain::Overflowed { .. } = drained {
            out = self.cache_snapshot();
        }
        out
    }

    /// [`KvEvent::AllCleared`] then every cached block, parents first.
    pub fn cache_snapshot(&self) -> Vec<KvEvent> {
        let mut out = vec![KvEvent::AllCleared];
        out.extend(self.cached_blocks().into_iter().map(KvEvent::Stored));
        out
    }

    /// Empties the prefix cache of every page no running request holds
    /// (SGLang's `/flush_cache`): later prompts compute their prefixes
    /// again. Returns the pages freed; with events on, each removal is
    /// reported.
    pub fn flush_cache(&mut self) -> u32 {
        self.kv.evict_cached(u32::MAX)
    }

    /// Every block the cache holds now, each after its parent.
    pub fn cached_blocks(&self) -> Vec<CachedBlock> {
        let mut blocks = Vec::new();
        self.kv.radix().for_each_block(|b| blocks.push(*b));
        parents_first(&mut blocks);
        blocks
    }
}

/// Orders blocks so that each comes after its parent (by depth in the
/// tree), as a consumer that links blocks to their parents needs.
fn parents_first(blocks: &mut [CachedBlock]) {
    let parent: HashMap<u64, Option<u64>> = blocks.iter().map(|b| (b.hash, b.parent)).collect();
    let depth = |b: &CachedBlock| {
        let mut d = 0usize;
        let mut at = b.parent;
        // Bounded by the number of blocks, so a hash collision cannot loop.
        while let Some(h) = at {
            d += 1;
            if d > parent.len() {
                break;
            }
            at = parent.get(&h).copied().flatten();
        }
        d
    };
    blocks.sort_by_cached_key(depth);
}
