//! The tree's nodes (one cached page each, in caller-provided storage) and
//! the cache's metrics.

use crate::geometry::PAGE_SIZE;
use crate::ids::PageId;
use crate::list::{StackNode, NIL};

/// The tokens of one page.
pub(super) type PageTokens = [u32; PAGE_SIZE];

/// The parent of a node out of the tree (retired or detached): no walk ever
/// passes it (walks start at `NIL` and pass node ids, below 2^31), so such a
/// node, still in the index, never matches, at no cost to lookups.
pub(super) const OUT_OF_TREE: u32 = NIL - 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum NodeState {
    Free,
    Live,
    /// Evicted while it still had children (only if the one rule was broken):
    /// never matched, retired when its last child goes.
    Detached,
    /// Out of the tree but still in the hash index, waiting on the retired
    /// stack until a drain takes its entry out (see `evict`). Never matched.
    Retired,
}

/// One cached page in the tree. Callers only provide storage
/// (`[RadixNode::EMPTY; N]` or a `Vec`); the cache initialises it.
#[derive(Debug, Clone, Copy)]
pub struct RadixNode {
    pub(super) tokens: PageTokens,
    pub(super) hash: u64,
    pub(super) parent: u32,
    pub(super) page: PageId,
    pub(super) children: u32,
    pub(super) next_free: u32,
    pub(super) state: NodeState,
}

impl RadixNode {
    /// A node ready to be handed to [`RadixCache::new`](crate::RadixCache::new).
    pub const EMPTY: Self = Self {
        tokens: [0; PAGE_SIZE],
        hash: 0,
        parent: NIL,
        page: PageId(PageId::NONE),
        children: 0,
        next_free: NIL,
        state: NodeState::Free,
    };
}

impl Default for RadixNode {
    fn default() -> Self {
        Self::EMPTY
    }
}

/// Free nodes are a stack through `next_free`.
impl StackNode for RadixNode {
    #[inline]
    fn next(&self) -> u32 {
        self.next_free
    }

    #[inline]
    fn set_next(&mut self, next: u32) {
        self.next_free = next;
    }
}

/// The cache's metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct RadixStats {
    /// Tokens looked up by [`match_prefix`](crate::RadixCache::match_prefix).
    pub tokens_requested: u64,
    /// Of those, tokens found in the cache.
    pub tokens_hit: u64,
    /// Nodes in the tree (each one cached page).
    pub nodes: u32,
    /// Node capacity.
    pub capacity: u32,
    /// Pages ever added to the tree.
    pub inserted_pages: u64,
    /// Pages deduplicated against the tree on insert.
    pub deduplicated_pages: u64,
    /// Pages declined on insert for lack of node storage.
    pub declined_pages: u64,
    /// Nodes removed by eviction.
    pub evicted_pages: u64,
}

impl RadixStats {
    /// Share of requested tokens served from the cache, in `0.0..=1.0`.
    pub fn hit_rate(&self) -> f64 {
        if self.tokens_requested == 0 {
            0.0
        } else {
            self.tokens_hit as f64 / self.tokens_requested as f64
        }
    }
}
