//! The radix prefix cache (RadixAttention): finished sequences' full pages,
//! keyed by their tokens, so a new prompt that starts the same way reuses them.
//!
//! ## Shape
//!
//! A tree over token ids at page granularity: each node is one cached page,
//! keyed by its 16 tokens under its parent. A prompt's longest cached prefix is
//! found by walking full pages from the root. Nodes are one page each rather
//! than compressed runs of pages: the pool tags, counts and evicts pages one at
//! a time, so a node per page maps one-to-one onto the pool's LRU list and
//! cache tags, needs no splitting, and a match costs one hash probe per page
//! either way, O(prefix pages).
//!
//! Children are found through one open-addressed hash index over the caller's
//! slots, keyed by a hash of the whole prefix (the parent's key folded with
//! the page's tokens, so every key of a prompt is known before any node is
//! found and successive probes overlap), linear probing with
//! backward-shift deletion (no tombstones, so it never degrades). Each slot
//! holds the node id and the high half of its key hash, so probing and
//! deleting touch only the index until a likely hit. A hit is confirmed by
//! comparing the parent and the tokens: a hash collision can never produce a
//! wrong match.
//!
//! ## Locks and references: the one rule
//!
//! **A node is locked exactly while its page holds a pool reference.** A
//! sequence running on a cached prefix holds references on every page of it
//! (its page-table row, see
//! [`PageTable::create_with_prefix`](crate::PageTable::create_with_prefix));
//! [`RadixCache::lock`] takes the same references for a holder without a row.
//! Since every holder holds a whole path from the root, a locked node's
//! ancestors are locked too. The pool only ever evicts pages nobody
//! references, so locked nodes can never be evicted.
//!
//! ## Eviction
//!
//! Unlocked cached pages sit on the pool's LRU list. Matches touch their path
//! leaf first, and sequences release their pages last page first, so a node is
//! always less recently used than its ancestors and LRU order evicts leaves
//! before their parents: the tree stays prefix-closed. The cache is the pool's
//! [`EvictionListener`](crate::EvictionListener): when the pool reclaims a
//! page, its node leaves the tree. (Should a caller break the rule through the
//! raw pool API and an inner node be evicted, its subtree becomes unreachable
//! and is reclaimed as its pages are; no match ever returns stale pages.)
//!
//! An evicted node is *retired*, not taken out of the hash index at once:
//! lookups skip it, and the next insert that adds a node deletes its entry,
//! in a batch with the others (see `evict`). So an eviction touches the
//! pool's entry and the node, never the large index, and costs the same
//! however many sequences are cached; the index never holds more entries
//! than there are nodes.
//!
//! ## Modules
//!
//! `node` holds the nodes and [`RadixStats`], `index` the hash index and its
//! keys, `walk` the one prefix walk and the lookups built on it, `insert`
//! insertion and deduplication, `events` the event ring for mirrors of the
//! cache, `lock` locking and unlocking paths, `evict` eviction (the pool's
//! listener) and the retired nodes' drain, `journal` the growth journal;
//! this file the [`RadixCache`], its constructor and its counters.

mod events;
mod evict;
mod index;
mod insert;
mod journal;
mod lock;
mod node;
mod walk;
mod window;

pub use events::{CacheEvent, CachedBlock, EventDrain};
pub use insert::Inserted;
pub use journal::{Growth, GrowthKeys, GROWTH_JOURNAL};
pub use node::{RadixNode, RadixStats};
pub use walk::{PrefixMatch, PrefixProbe};

use self::index::{EMPTY_SLOT, MAX_NODES};
use crate::error::StorageError;
use crate::groups::KvGroups;
use crate::ids::PageId;
use crate::list::{Stack, NIL};

/// The prefix cache over caller-provided storage: `nodes` bounds how many pages
/// it can hold, `index` (a power of two, larger than `nodes`; twice as large
/// is a good choice, see [`RadixCache::index_len_for`]) holds the hash index.
///
/// ```
/// use pagoda_core::{PageEntry, PageId, PagePool, PageTable, RadixCache, RadixNode, SeqEntry};
/// let mut page_store = [PageEntry::EMPTY; 8];
/// let mut pool = PagePool::new(&mut page_store).unwrap();
/// let mut rows = [PageId::from_index(0); 2 * 4];
/// let mut seqs = [SeqEntry::EMPTY; 2];
/// let mut table = PageTable::new(&mut rows, &mut seqs).unwrap();
/// let mut nodes = [RadixNode::EMPTY; 8];
/// let mut index = [0u64; 16];
/// let mut cache = RadixCache::new(&mut nodes, &mut index).unwrap();
///
/// // A 40-token prompt runs, then its two full pages are cached.
/// let prompt: Vec<u32> = (0..40).collect();
/// let seq = table.create().unwrap();
/// table.append(seq, 40, &mut pool, &mut cache).unwrap();
/// cache.insert(&mut table, seq, &prompt, &mut pool).unwrap();
/// table.release(seq, &mut pool).unwrap();
///
/// // The same prompt again: 32 tokens come from the cache.
/// let mut pages = [PageId::from_index(0); 4];
/// let hit = cache.match_prefix(&prompt, &mut pages, &mut pool);
/// assert_eq!(hit.tokens, 32);
/// let again = table.create_with_prefix(&pages[..hit.pages as usize], &mut pool).unwrap();
/// table.append(again, 8, &mut pool, &mut cache).unwrap();
/// assert_eq!(table.len(again).unwrap(), 40);
/// ```
#[derive(Debug)]
pub struct RadixCache<'a> {
    nodes: &'a mut [RadixNode],
    index: &'a mut [u64],
    index_shift: u32,
    free: Stack,
    /// The top of the stack (through `next_free`) of nodes out of the tree
    /// whose index entries are still to be taken out (see `evict`); `NIL`
    /// when empty. A bare head, without a length, so the cache is no larger.
    retired: u32,
    live: u32,
    stats: RadixStats,
    /// Bumped whenever a node is added or removed.
    version: u64,
    /// The keys where recent inserts grew the tree (a ring).
    growth: [u64; GROWTH_JOURNAL],
    /// Growth records ever written.
    growth_count: u64,
    /// The event ring (see `events`); empty when events are off.
    events: &'a mut [CacheEvent],
    /// The oldest pending event's slot in the ring.
    event_head: u32,
    /// Pending events.
    event_len: u32,
    /// Events dropped since the last drain (the ring was full).
    events_lost: u32,
    /// How the cached pages are grouped (see `window`).
    groups: KvGroups,
    /// Each node's pages in groups after the first, `groups.count() - 1`
    /// per node; [`PageId::VACANT`] where a windowed page was not cached or
    /// was evicted. Empty with one group.
    group_pages: &'a mut [PageId],
}

impl<'a> RadixCache<'a> {
    /// The index length to pair with `nodes` nodes: the next power of two at
    /// least twice as large, so probes stay short.
    pub const fn index_len_for(nodes: usize) -> usize {
        (nodes.saturating_mul(2)).next_power_of_two()
    }

    /// Builds an empty cache.
    ///
    /// Fails with [`StorageError::Empty`] if `nodes` is empty,
    /// [`StorageError::TooLarge`] if it has 2^31 entries or more, or
    /// [`StorageError::Mismatched`] if `index` is not a power of two larger
    /// than `nodes` and at most 2^32.
    pub fn new(nodes: &'a mut [RadixNode], index: &'a mut [u64]) -> Result<Self, StorageError> {
        Self::with_groups(nodes, index, &mut [], KvGroups::SINGLE)
    }

    /// Builds an empty cache of pages grouped as `groups`, each node keeping
    /// its pages of groups after the first in `group_pages`
    /// (`nodes.len() × (groups.count() - 1)` entries, empty for one group).
    /// Refused as [`new`](Self::new) is, and with
    /// [`StorageError::Mismatched`] when `group_pages` has another length.
    pub fn with_groups(
        nodes: &'a mut [RadixNode],
        index: &'a mut [u64],
        group_pages: &'a mut [PageId],
        groups: KvGroups,
    ) -> Result<Self, StorageError> {
        let n = nodes.len();
        if group_pages.len() as u64 != n as u64 * u64::from(groups.count() - 1) {
            return Err(StorageError::Mismatched);
        }
        group_pages.fill(PageId::VACANT);
        let slots = index.len() as u64;
        if n == 0 {
            return Err(StorageError::Empty);
        }
        if n >= MAX_NODES {
            return Err(StorageError::TooLarge);
        }
        if !slots.is_power_of_two() || slots <= n as u64 || slots > 1 << 32 {
            return Err(StorageError::Mismatched);
        }
        nodes.fill(RadixNode::EMPTY);
        let free = Stack::with_all(nodes);
        index.fill(EMPTY_SLOT);
        let index_shift = 64 - index.len().trailing_zeros();
        Ok(Self {
            nodes,
            index,
            index_shift,
            free,
            retired: NIL,
            live: 0,
            stats: RadixStats {
                capacity: n as u32,
                ..RadixStats::default()
            },
            version: 0,
            growth: [0; GROWTH_JOURNAL],
            growth_count: 0,
            events: &mut [],
            event_head: 0,
            event_len: 0,
            events_lost: 0,
            groups,
            group_pages,
        })
    }

    /// A counter that moves whenever a node is added or removed: a score
    /// computed at one version may be stale at a later one.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// The cache's metrics.
    pub fn stats(&self) -> RadixStats {
        RadixStats {
            nodes: self.live,
            ..self.stats
        }
    }

    /// Nodes in the tree.
    pub fn len(&self) -> u32 {
        self.live
    }

    /// Whether the tree is empty.
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }
}
