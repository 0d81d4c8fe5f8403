//! Eviction: the cache is the pool's [`EvictionListener`], and a node leaves
//! the tree when the pool reclaims its page.

use super::node::{NodeState, RadixNode};
use super::RadixCache;
use crate::ids::PageId;
use crate::list::NIL;
use crate::pool::{CacheTag, EvictionListener, PagePool};

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
        self.unindex(node);
        self.live -= 1;
        self.version += 1;
        let parent = self.nodes[node as usize].parent;
        if parent != NIL {
            self.child_gone(parent);
        }
        if self.nodes[node as usize].children == 0 {
            self.free_node(node);
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
            self.free_node(parent);
        }
    }

    #[inline]
    fn free_node(&mut self, node: u32) {
        self.nodes[node as usize] = RadixNode::EMPTY;
        let freed = self.free.push(self.nodes, node);
        debug_assert!(freed);
    }
}

impl EvictionListener for RadixCache<'_> {
    #[inline]
    fn page_evicted(&mut self, page: PageId, tag: CacheTag) {
        match self.nodes.get(tag.0 as usize) {
            Some(n) if n.state == NodeState::Live && n.page == page => {
                self.remove_node(tag.0);
                // The pool counts eviction events and reclaimed pages.
                self.stats.evicted_pages += 1;
            }
            // A page some other owner tagged: not ours to forget.
            _ => {
                crate::log::event!("pagoda: evicted page was not in this radix cache");
            }
        }
    }
}
