//! Inserting a sequence's full pages into the tree, deduplicating pages the
//! tree already holds under the same tokens.

use super::evict::DRAIN_BATCH;
use super::index::{key_hash, page_tokens, ROOT_KEY};
use super::node::{NodeState, PageTokens, RadixNode};
use super::walk::Walk;
use super::RadixCache;
use crate::error::KvError;
use crate::geometry::PAGE_SIZE;
use crate::ids::{PageId, SeqId};
use crate::list::NIL;
use crate::page_table::PageTable;
use crate::pool::{CacheTag, PagePool};

/// What an [`insert`](RadixCache::insert) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Inserted {
    /// Full pages of the sequence now in the cache (new or deduplicated).
    pub cached_pages: u32,
    /// Pages added to the tree.
    pub new_pages: u32,
    /// Pages the cache already held under the same tokens: the sequence now
    /// uses the cached page and its own copy was released.
    pub deduplicated_pages: u32,
    /// Full pages not cached because the node storage was full and nothing
    /// could be evicted to make room.
    pub declined_pages: u32,
}

impl RadixCache<'_> {
    /// Caches the full pages of a running or finished sequence whose token
    /// ids are `tokens` (its first `len / 16` pages). A page whose tokens the
    /// tree already holds in another page is deduplicated: the sequence's row
    /// switches to the cached page and its own copy is released, so identical
    /// prefixes share one physical page.
    ///
    /// When the node storage is full, the least recently used unlocked page is
    /// evicted to make room; if nothing can be evicted, the remaining pages
    /// are declined ([`Inserted::declined_pages`]), never a panic.
    pub fn insert(
        &mut self,
        table: &mut PageTable<'_>,
        seq: SeqId,
        tokens: &[u32],
        pool: &mut PagePool<'_>,
    ) -> Result<Inserted, KvError> {
        let len = table.len(seq)?.min(tokens.len() as u32);
        let full_pages = len / PAGE_SIZE as u32;
        let tokens = &tokens[..(full_pages as usize) * PAGE_SIZE];
        let (found, to_dedup, insertable) = self.check_row(table.pages(seq)?, tokens, pool)?;
        let mut done = Inserted::default();
        if to_dedup > 0 {
            // The path the check walked, again, now that nothing can refuse.
            let walked = self.walk(tokens, 0u32.., |depth, _, node| {
                let own = table.pages(seq)?[depth as usize];
                if node.page != own {
                    table.replace_full_page(seq, 0, depth, node.page, pool)?;
                    done.deduplicated_pages += 1;
                }
                Ok::<(), KvError>(())
            })?;
            debug_assert_eq!(walked.pages, found.pages);
        }
        done.cached_pages = found.pages;
        // The walk stopped at the first uncached page, if any, and has its key.
        debug_assert!(found.next_key.is_some() || found.pages == full_pages);
        let (mut parent, mut key) = (found.last, found.next_key.unwrap_or(ROOT_KEY));
        let uncached = tokens
            .chunks_exact(PAGE_SIZE)
            .take(insertable as usize)
            .skip(found.pages as usize);
        for (i, chunk) in (found.pages..).zip(uncached) {
            let chunk = page_tokens(chunk);
            if i > found.pages {
                key = key_hash(key, chunk);
            }
            let own = table.pages(seq)?[i as usize];
            debug_assert_eq!(
                pool.cache_tag(own),
                Ok(None),
                "check_row lets no cached page get here"
            );
            let Some(node) = self.new_node(parent, key, chunk, own, pool) else {
                done.declined_pages = insertable - i;
                break;
            };
            pool.set_cache_tag(own, CacheTag(node))?;
            if done.new_pages == 0 {
                // Only the first new page of an insert can extend a waiting
                // prompt's match: its parent existed before.
                self.record_growth(key);
            }
            done.new_pages += 1;
            done.cached_pages += 1;
            parent = node;
        }
        if self.groups.count() > 1 {
            self.cache_group_pages(table, seq, tokens, done.cached_pages, pool)?;
        }
        self.stats.inserted_pages += u64::from(done.new_pages);
        self.stats.deduplicated_pages += u64::from(done.deduplicated_pages);
        self.stats.declined_pages += u64::from(done.declined_pages);
        Ok(done)
    }

    /// Before an insert changes anything: walks the tree along `tokens` (whole
    /// pages) and checks the row against it. The row's pages on the walked
    /// path must be the path's own, uncached, or cached under a node out of
    /// the tree (a fork's page whose node was evicted: deduplicated like an
    /// uncached one); one cached on the tree elsewhere means the tokens are
    /// not the row's, and inserting them would alias a cached page. Returns the
    /// walk, how many of the row's pages the path holds in other pages (to
    /// deduplicate), and how many of the row's pages may be cached: up to
    /// the first one past the path that a node out of the tree holds (a
    /// fork's page whose ancestor was evicted), which is left where it is.
    /// One past the path that a node in the tree holds is a mismatch too.
    fn check_row(
        &self,
        row: &[PageId],
        tokens: &[u32],
        pool: &PagePool<'_>,
    ) -> Result<(Walk, u32, u32), KvError> {
        let mut to_dedup = 0;
        let found = self.walk(tokens, row.iter().copied(), |own, _, node| {
            // The row's page is the node's (it came from the cache, or a
            // fork shares it with a sequence cached before), or uncached.
            // (A fork can hold a cached page after one to deduplicate.)
            // A page cached under a node out of the tree (a fork's page
            // whose node was evicted since) is deduplicated like an
            // uncached one: the path holds the same tokens in its own page.
            if own == node.page {
            } else if pool.cache_tag(own)?.is_some_and(|tag| self.in_tree(tag.0)) {
                return Err(KvError::TokensMismatch);
            } else {
                to_dedup += 1;
            }
            Ok(())
        })?;
        let full = tokens.len() / PAGE_SIZE;
        let mut insertable = full as u32;
        for (i, &page) in (0..).zip(row.iter().take(full)).skip(found.pages as usize) {
            if let Some(tag) = pool.cache_tag(page)? {
                if self.in_tree(tag.0) {
                    // Cached on another path: the tokens are not the row's.
                    return Err(KvError::TokensMismatch);
                }
                insertable = i;
                break;
            }
        }
        Ok((found, to_dedup, insertable))
    }

    /// Whether `node` is live and every ancestor too: a walk can reach it.
    fn in_tree(&self, mut node: u32) -> bool {
        while let Some(n) = self.nodes.get(node as usize) {
            if n.state != NodeState::Live {
                return false;
            }
            if n.parent == NIL {
                return true;
            }
            node = n.parent;
        }
        false
    }

    /// Takes a free node (evicting an unlocked page if there is none) and
    /// links it under `parent`. `None` if nothing could be freed.
    fn new_node(
        &mut self,
        parent: u32,
        hash: u64,
        tokens: &PageTokens,
        page: PageId,
        pool: &mut PagePool<'_>,
    ) -> Option<u32> {
        // Deletions deferred by evictions since the last new node.
        self.drain_retired(DRAIN_BATCH, pool);
        let node = loop {
            if let Some(node) = self.free.pop(self.nodes) {
                break node;
            }
            if self.drain_retired(DRAIN_BATCH, pool) > 0 {
                continue;
            }
            // Evicting a page retires its node (or, after a broken rule, a
            // detached node's last child); stop when nothing is evictable.
            if pool.evict(1, self) == 0 {
                return None;
            }
        };
        self.nodes[node as usize] = RadixNode {
            tokens: *tokens,
            hash,
            parent,
            page,
            children: 0,
            next_free: NIL,
            state: NodeState::Live,
        };
        if parent != NIL {
            self.nodes[parent as usize].children += 1;
        }
        self.index_node(node, hash);
        self.live += 1;
        self.version += 1;
        if self.events_on() {
            self.record_stored(node);
        }
        Some(node)
    }
}
