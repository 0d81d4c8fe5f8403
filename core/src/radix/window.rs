//! Pages of groups after the first (see [`KvGroups`]), and what windows mean
//! for a cached prefix.
//!
//! The tree is keyed by group 0, the full-attention layers: a node is one
//! page of tokens, and its page of group 0 is the page the pool tags, counts
//! and evicts as the node's. The node keeps its pages of the other groups
//! beside it (`group_pages`), each tagged with the node's id too. A windowed
//! group's page may be missing (a *hole*): its sequence had let it go when
//! the prefix was cached, or the pool evicted it alone, which only empties
//! that entry (the node and its other pages stay; SGLang's SWA radix cache
//! does the same). So a cached prefix of `k` pages serves a prompt only if
//! no windowed group has a hole in the pages the window of position
//! `16 k` needs: a match is the longest such prefix, never one that would
//! hand a sequence a page the pool has freed.
//!
//! When the pool evicts a node's group-0 page, the node leaves the tree and
//! its other pages are orphaned, still tagged with its id: they stay
//! evictable until the node's retirement is drained, which lets them go
//! (the listener cannot reach the pool while the pool calls it).

use super::index::{key_hash, page_tokens, ROOT_KEY};
use super::node::NodeState;
use super::walk::PrefixMatch;
use super::RadixCache;
use crate::error::KvError;
use crate::geometry::PAGE_SIZE;
use crate::groups::KvGroups;
use crate::ids::{PageId, SeqId};
use crate::list::NIL;
use crate::page_table::PageTable;
use crate::pool::{CacheTag, PagePool};

const PAGE: u32 = PAGE_SIZE as u32;

impl RadixCache<'_> {
    /// How the cached pages are grouped.
    pub fn groups(&self) -> KvGroups {
        self.groups
    }

    /// The node's entries for groups `1..`.
    #[inline]
    fn side(&self, node: u32) -> &[PageId] {
        let per = self.groups.count() as usize - 1;
        &self.group_pages[node as usize * per..(node as usize + 1) * per]
    }

    #[inline]
    fn side_mut(&mut self, node: u32) -> &mut [PageId] {
        let per = self.groups.count() as usize - 1;
        &mut self.group_pages[node as usize * per..(node as usize + 1) * per]
    }

    /// [`peek_pages`](Self::peek_pages) for every group: the longest cached
    /// prefix of `tokens` whose windowed pages hold the window after it.
    /// Group `g`'s pages go to `pages[g × stride..]`, at most `stride` of
    /// them; a windowed group's entries before the window may be
    /// [`PageId::VACANT`]. Touches neither recency nor metrics.
    pub fn peek_group_pages(&self, tokens: &[u32], pages: &mut [PageId], stride: usize) -> u32 {
        let groups = self.groups;
        let count = groups.count() as usize;
        if count == 1 {
            let limit = stride.min(pages.len());
            return self.peek_pages(tokens, &mut pages[..limit]);
        }
        if pages.len() < stride.saturating_mul(count) {
            return 0;
        }
        let (mut best, mut last_hole) = (0u32, None::<u32>);
        let walk = self.walk(tokens, 0..stride, |i, node, n| {
            pages[i] = n.page;
            for (g, &page) in (1..).zip(self.side(node)) {
                pages[g * stride + i] = page;
                if page.is_vacant() {
                    if !groups.is_windowed(g as u32) {
                        // A full group cannot serve past a hole.
                        return Err(());
                    }
                    last_hole = Some(i as u32);
                }
            }
            let k = i as u32 + 1;
            if last_hole.is_none_or(|h| h < groups.first_needed_page(k * PAGE)) {
                best = k;
            }
            Ok(())
        });
        // A full group's hole ends the walk, which is no error to the caller.
        let _ = walk;
        best
    }

    /// [`match_prefix`](Self::match_prefix) for every group: writes the
    /// pages as [`peek_group_pages`](Self::peek_group_pages) does, marks the
    /// pages the match serves as used now, and counts the lookup.
    pub fn match_group_prefix(
        &mut self,
        tokens: &[u32],
        pages: &mut [PageId],
        stride: usize,
        pool: &mut PagePool<'_>,
    ) -> PrefixMatch {
        if self.groups.count() == 1 {
            let limit = stride.min(pages.len());
            return self.match_prefix(tokens, &mut pages[..limit], pool);
        }
        let matched = self.peek_group_pages(tokens, pages, stride);
        let window_start = self.groups.first_needed_page(matched * PAGE) as usize;
        // Leaf first, and windowed pages before the full page of the same
        // node, so each node stays less recently used than its parent.
        for i in (0..matched as usize).rev() {
            for g in (0..self.groups.count() as usize).rev() {
                if self.groups.is_windowed(g as u32) && i < window_start {
                    continue;
                }
                let touched = pool.touch(pages[g * stride + i]);
                debug_assert!(touched.is_ok());
            }
        }
        let found = PrefixMatch {
            tokens: matched * PAGE,
            pages: matched,
        };
        self.stats.tokens_requested += tokens.len() as u64;
        self.stats.tokens_hit += u64::from(found.tokens);
        found
    }

    /// After an insert cached the sequence's first `cached` pages of group
    /// 0: gives their nodes the sequence's pages of the other groups. A
    /// node's page the sequence holds another copy of replaces that copy in
    /// the sequence's row; a hole the sequence holds an uncached page for is
    /// filled with it.
    pub(super) fn cache_group_pages(
        &mut self,
        table: &mut PageTable<'_>,
        seq: SeqId,
        tokens: &[u32],
        cached: u32,
        pool: &mut PagePool<'_>,
    ) -> Result<(), KvError> {
        let (mut parent, mut key) = (NIL, ROOT_KEY);
        for (i, chunk) in (0..cached).zip(tokens.chunks_exact(PAGE_SIZE)) {
            let chunk = page_tokens(chunk);
            key = key_hash(key, chunk);
            let Some(node) = self.find_child(parent, key, chunk) else {
                break;
            };
            for g in 1..self.groups.count() {
                let own = table.group_pages(seq, g)?[i as usize];
                let cached = self.side(node)[g as usize - 1];
                if own.is_vacant() || own == cached {
                    continue;
                }
                if !cached.is_vacant() {
                    table.replace_full_page(seq, g, i, cached, pool)?;
                } else if pool.cache_tag(own)?.is_none() {
                    pool.set_cache_tag(own, CacheTag(node))?;
                    self.side_mut(node)[g as usize - 1] = own;
                }
            }
            parent = node;
        }
        Ok(())
    }

    /// The pool evicted `page`, tagged with `node` but not its group-0 page:
    /// empties the node's entry if the page is one of its others. Returns
    /// whether it was.
    pub(super) fn group_page_evicted(&mut self, node: u32, page: PageId) -> bool {
        if self.groups.count() == 1 {
            return false;
        }
        let live = self.nodes[node as usize].state == NodeState::Live;
        let Some(entry) = self.side_mut(node).iter_mut().find(|p| **p == page) else {
            return false;
        };
        *entry = PageId::VACANT;
        if live {
            // A match that used this page is now shorter.
            self.version += 1;
        }
        true
    }

    /// A retired node's other pages, orphaned when its group-0 page was
    /// evicted, go back to the pool.
    pub(super) fn forget_group_pages(&mut self, node: u32, pool: &mut PagePool<'_>) {
        if self.groups.count() == 1 {
            return;
        }
        for i in 0..self.groups.count() as usize - 1 {
            let page = self.side(node)[i];
            if !page.is_vacant() && pool.cache_tag(page) == Ok(Some(CacheTag(node))) {
                let cleared = pool.clear_cache_tag(page);
                debug_assert!(cleared.is_ok());
            }
            self.side_mut(node)[i] = PageId::VACANT;
        }
    }
}
