//! Eviction: the cache is the pool's [`EvictionListener`], and a node leaves
//! the tree when the pool reclaims its page.
//!
//! Leaving the tree does not touch the hash index. Its entry is the one
//! random access in a large table that an eviction would otherwise make,
//! and it missed the cache on nearly every eviction. Instead, the node is
//! *retired*: given a parent no lookup passes, and pushed on a stack of
//! retired nodes that keep their index entries (and their ids, so an entry
//! never names a reused node). The next insert that adds a node first
//! drains a batch of them out of the index, so the deferred deletions cost
//! the insert what they saved the eviction, and the index does not fill
//! up with them. Every index entry belongs to a distinct node, so the index
//! is never fuller than the node storage.

use super::node::{NodeState, RadixNode, OUT_OF_TREE};
use super::RadixCache;
use crate::ids::PageId;
use crate::list::NIL;
use crate::pool::{CacheTag, EvictionListener, PagePool};

/// The most retired nodes one drain takes out of the index, to bound the
/// pause of the insert that pays for them.
pub(super) const DRAIN_BATCH: u32 = 256;

impl RadixCache<'_> {
    /// Evicts up to `pages` least recently used unlocked pages from the tree
    /// back to the pool's free list; returns how many went.
    pub fn evict(&mut self, pages: u32, pool: &mut PagePool<'_>) -> u32 {
        pool.evict(pages, self)
    }

    /// Takes a live node out of the tree after the pool reclaimed its page.
    #[inline]
    fn remove_node(&mut self, node: u32) {
        if self.events_on() {
            self.record_removed(node);
        }
        self.live -= 1;
        self.version += 1;
        let parent = self.nodes[node as usize].parent;
        if parent != NIL {
            self.child_gone(parent);
        }
        self.nodes[node as usize].parent = OUT_OF_TREE;
        if self.nodes[node as usize].children == 0 {
            self.retire(node);
        } else {
            // Only reachable by breaking the one rule: keep the node so its
            // children's parent id is not reused, unreachable, until they go.
            crate::log::event!("pagoda: radix node evicted before its children");
            self.nodes[node as usize].state = NodeState::Detached;
        }
    }

    #[inline]
    fn child_gone(&mut self, parent: u32) {
        let p = &mut self.nodes[parent as usize];
        p.children -= 1;
        if p.children == 0 && p.state == NodeState::Detached {
            self.retire(parent);
        }
    }

    /// Marks a node out of the tree, leaving its index entry for a drain.
    #[inline]
    fn retire(&mut self, node: u32) {
        let n = &mut self.nodes[node as usize];
        n.state = NodeState::Retired;
        n.next_free = self.retired;
        self.retired = node;
    }

    /// Takes up to `max` retired nodes out of the index and onto the free
    /// stack; returns how many.
    pub(super) fn drain_retired(&mut self, max: u32, pool: &mut PagePool<'_>) -> u32 {
        let mut drained = 0;
        while drained < max {
            let node = self.retired;
            let Some(n) = self.nodes.get(node as usize) else {
                break;
            };
            self.retired = n.next_free;
            self.unindex(node);
            self.forget_group_pages(node, pool);
            self.nodes[node as usize] = RadixNode::EMPTY;
            let freed = self.free.push(self.nodes, node);
            debug_assert!(freed);
            drained += 1;
        }
        drained
    }
}

impl EvictionListener for RadixCache<'_> {
    #[inline]
    fn page_evicted(&mut self, page: PageId, tag: CacheTag) {
        let state = self.nodes.get(tag.0 as usize).map(|n| (n.state, n.page));
        match state {
            Some((NodeState::Live, own)) if own == page => {
                self.remove_node(tag.0);
                // The pool counts eviction events and reclaimed pages.
                self.stats.evicted_pages += 1;
            }
            // A windowed page of a node, or one of a node already gone.
            Some(_) if self.group_page_evicted(tag.0, page) => {}
            // A page some other owner tagged: not ours to forget.
            _ => {
                crate::log::event!("pagoda: evicted page was not in this radix cache");
            }
        }
    }
}
