//! Cache events: the tree reports every node it adds ([`CacheEvent::Stored`])
//! and removes ([`CacheEvent::Removed`]) into a ring the caller hands in, so a
//! host can mirror the cache elsewhere (a cache-aware router, vLLM's KV-event
//! stream). A zero-length ring, the default, turns events off: the hot path
//! then pays one length check per node added or removed.
//!
//! The ring never blocks and never grows. When it is full, later events are
//! dropped and counted; the next [`drain_events`](RadixCache::drain_events)
//! reports [`EventDrain::Overflowed`], discards what it held, and the host
//! resynchronises its subscribers from [`for_each_block`](RadixCache::for_each_block)
//! (e.g. "all blocks cleared", then every block cached now).
//!
//! ## Block hashes
//!
//! A block's hash is the tree's own index key (see `index::key_hash`): a
//! 64-bit hash of the parent block's hash and the page's 16 token ids, the
//! first page folded with a fixed root constant. It is therefore a function
//! of the whole token prefix up to and including the page (position
//! dependent: the same 16 tokens under different prefixes hash differently),
//! and stable across runs, processes and machines (fixed constants, no
//! random seed). Distinct prefixes may collide with probability about 2^-64
//! per pair; the tree itself never confuses them (it compares tokens), but a
//! subscriber keyed by hash would.

use super::node::{NodeState, PageTokens};
use super::RadixCache;
use crate::list::NIL;

/// A block (one cached page) as events and snapshots describe it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CachedBlock {
    /// The block's hash (see the module docs): stable and prefix dependent.
    pub hash: u64,
    /// The parent block's hash; `None` for a prompt's first page.
    pub parent: Option<u64>,
    /// The page's token ids.
    pub tokens: PageTokens,
}

/// One change to the set of cached blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheEvent {
    /// A node was added to the tree.
    Stored(CachedBlock),
    /// The node with this hash left the tree (evicted).
    Removed {
        /// Its hash.
        hash: u64,
    },
}

impl CacheEvent {
    /// A placeholder for ring storage (`[CacheEvent::EMPTY; N]`).
    pub const EMPTY: Self = Self::Removed { hash: 0 };
}

/// What [`RadixCache::drain_events`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventDrain {
    /// Every event since the last drain was handed over; this many.
    Complete(u32),
    /// The ring overflowed and this many events were lost: the ring's
    /// content was discarded, and subscribers must be resynchronised from
    /// [`RadixCache::for_each_block`].
    Overflowed {
        /// Events dropped for lack of room.
        lost: u32,
    },
}

impl<'a> RadixCache<'a> {
    /// Hands the cache a ring for its events (see the module docs); an empty
    /// slice turns events off. Events pending in a previous ring are dropped.
    /// If the tree is not empty, the next drain reports an overflow, so the
    /// host publishes a snapshot before any event. Only the first 2^32 - 1
    /// entries of a larger slice are used.
    pub fn set_event_ring(&mut self, ring: &'a mut [CacheEvent]) {
        let usable = ring.len().min(u32::MAX as usize);
        self.events = &mut ring[..usable];
        self.event_head = 0;
        self.event_len = 0;
        self.events_lost = u32::from(!self.is_empty() && usable > 0);
    }

    /// Calls `each` with every event recorded since the last drain, oldest
    /// first, and empties the ring. After an overflow nothing is handed
    /// over: see [`EventDrain::Overflowed`].
    pub fn drain_events(&mut self, mut each: impl FnMut(&CacheEvent)) -> EventDrain {
        let (head, len, lost) = (self.event_head, self.event_len, self.events_lost);
        self.event_head = 0;
        self.event_len = 0;
        self.events_lost = 0;
        if lost > 0 {
            return EventDrain::Overflowed { lost };
        }
        let cap = self.events.len().max(1);
        for i in 0..len as usize {
            if let Some(event) = self.events.get((head as usize + i) % cap) {
                each(event);
            }
        }
        EventDrain::Complete(len)
    }

    /// Calls `each` with every block the tree holds now, in storage order (a
    /// child may come before its parent). For resynchronising subscribers
    /// after an overflow, or for comparing a mirror with the cache.
    pub fn for_each_block(&self, mut each: impl FnMut(&CachedBlock)) {
        for node in self.nodes.iter() {
            if node.state == NodeState::Live {
                each(&self.block(node.hash, node.parent, &node.tokens));
            }
        }
    }

    fn block(&self, hash: u64, parent: u32, tokens: &PageTokens) -> CachedBlock {
        let parent = if parent == NIL {
            None
        } else {
            self.nodes.get(parent as usize).map(|p| p.hash)
        };
        CachedBlock {
            hash,
            parent,
            tokens: *tokens,
        }
    }

    /// Whether events are on: the one check the hot path pays when off.
    #[inline(always)]
    pub(super) fn events_on(&self) -> bool {
        !self.events.is_empty()
    }

    /// Records that `node` was just added.
    #[inline]
    pub(super) fn record_stored(&mut self, node: u32) {
        if let Some(n) = self.nodes.get(node as usize) {
            let event = CacheEvent::Stored(self.block(n.hash, n.parent, &n.tokens));
            self.record(event);
        }
    }

    /// Records that `node` is about to leave the tree.
    #[inline]
    pub(super) fn record_removed(&mut self, node: u32) {
        if let Some(n) = self.nodes.get(node as usize) {
            let hash = n.hash;
            self.record(CacheEvent::Removed { hash });
        }
    }

    fn record(&mut self, event: CacheEvent) {
        let cap = self.events.len() as u32;
        if cap == 0 {
            return;
        }
        if self.events_lost > 0 || self.event_len == cap {
            // A resync will follow; later events add nothing to it.
            self.events_lost = self.events_lost.saturating_add(1);
            return;
        }
        let at =
            ((u64::from(self.event_head) + u64::from(self.event_len)) % u64::from(cap)) as usize;
        if let Some(slot) = self.events.get_mut(at) {
            *slot = event;
            self.event_len += 1;
        }
    }
}
