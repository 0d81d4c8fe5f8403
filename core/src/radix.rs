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
//! [`EvictionListener`]: when the pool reclaims a page, its node leaves the
//! tree. (Should a caller break the rule through the raw pool API and an inner
//! node be evicted, its subtree becomes unreachable and is reclaimed as its
//! pages are; no match ever returns stale pages.)

use core::convert::Infallible;
use core::iter::repeat;

use crate::error::{KvError, StorageError};
use crate::geometry::PAGE_SIZE;
use crate::ids::{PageId, SeqId};
use crate::list::{Stack, StackNode, NIL};
use crate::page_table::PageTable;
use crate::pool::{CacheTag, EvictionListener, PagePool};
const EMPTY_SLOT: u64 = u64::MAX;
/// An index entry keeps the key hash's high half beside the node id, so probes
/// and deletions never read a node just to compare or re-home it.
const HASH_BITS: u64 = 0xFFFF_FFFF_0000_0000;
/// The most nodes a cache can have: node ids stay below 2^31, so an index
/// (at most 2^32 slots) is addressed by the stored high hash bits alone.
const MAX_NODES: usize = 1 << 31;

/// The tokens of one page.
type PageTokens = [u32; PAGE_SIZE];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NodeState {
    Free,
    Live,
    /// Evicted while it still had children (only if the one rule was broken):
    /// out of the index, freed when its last child goes.
    Detached,
}

/// One cached page in the tree. Callers only provide storage
/// (`[RadixNode::EMPTY; N]` or a `Vec`); the cache initialises it.
#[derive(Debug, Clone, Copy)]
pub struct RadixNode {
    tokens: PageTokens,
    hash: u64,
    parent: u32,
    page: PageId,
    children: u32,
    next_free: u32,
    state: NodeState,
}

impl RadixNode {
    /// A node ready to be handed to [`RadixCache::new`].
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

/// The longest cached prefix of a prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct PrefixMatch {
    /// Matched tokens: always a whole number of pages.
    pub tokens: u32,
    /// Matched pages, written to the front of the caller's output slice.
    pub pages: u32,
}

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

/// The cache's metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct RadixStats {
    /// Tokens looked up by [`match_prefix`](RadixCache::match_prefix).
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
    live: u32,
    stats: RadixStats,
    /// Bumped whenever a node is added or removed.
    version: u64,
    /// The keys where recent inserts grew the tree (a ring).
    growth: [u64; GROWTH_JOURNAL],
    /// Growth records ever written.
    growth_count: u64,
}

/// How many growth points [`RadixCache::growth_since`] remembers.
pub const GROWTH_JOURNAL: usize = 64;

/// Where a [`RadixCache::walk`] stopped.
#[derive(Debug, Clone, Copy)]
struct Walk {
    /// Full pages matched.
    pages: u32,
    /// The node of the last matched page, or `NIL` if none matched.
    last: u32,
    /// The key of the first full page not found; `None` if the walk ran out
    /// of full pages (or reached its limit) first.
    next_key: Option<u64>,
}

/// Where a prompt's cached prefix ends, from [`RadixCache::probe_prefix`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct PrefixProbe {
    /// Matched tokens, a whole number of pages.
    pub tokens: u32,
    /// The key the next, uncached full page of the prompt would have in the
    /// tree: an insert that creates it is what extends this match (see
    /// [`RadixCache::growth_since`]). `None` if no full page follows.
    pub next_key: Option<u64>,
}

/// Where the tree grew since a cursor, from [`RadixCache::growth_since`].
#[derive(Debug, Clone, Copy)]
pub enum Growth<'c> {
    /// The keys of the first new node of each insert, oldest first.
    Keys(GrowthKeys<'c>),
    /// More inserts happened than the journal holds: rescore everything.
    Overflowed,
}

/// The growth keys since a cursor.
#[derive(Debug, Clone, Copy)]
pub struct GrowthKeys<'c> {
    ring: &'c [u64; GROWTH_JOURNAL],
    next: u64,
    end: u64,
}

impl Iterator for GrowthKeys<'_> {
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        if self.next == self.end {
            return None;
        }
        let key = self.ring[(self.next % GROWTH_JOURNAL as u64) as usize];
        self.next += 1;
        Some(key)
    }
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
        let n = nodes.len();
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
            live: 0,
            stats: RadixStats {
                capacity: n as u32,
                ..RadixStats::default()
            },
            version: 0,
            growth: [0; GROWTH_JOURNAL],
            growth_count: 0,
        })
    }

    /// Finds the longest cached prefix of `tokens` in whole pages, writes its
    /// pages to the front of `pages` (at most `pages.len()` of them), marks
    /// the path as used now, and counts the lookup in the hit rate. Allocates
    /// nothing; takes no references (see
    /// [`PageTable::create_with_prefix`](crate::PageTable::create_with_prefix)
    /// and [`lock`](Self::lock)).
    pub fn match_prefix(
        &mut self,
        tokens: &[u32],
        pages: &mut [PageId],
        pool: &mut PagePool<'_>,
    ) -> PrefixMatch {
        let matched = self.peek_pages(tokens, pages);
        // Leaf first, so every node stays less recently used than its parent
        // (nothing to do when the path already is the most recent).
        let path = &pages[..matched as usize];
        if !pool.is_most_recent(path) {
            for &page in path.iter().rev() {
                let touched = pool.touch(page);
                debug_assert!(touched.is_ok());
            }
        }
        let found = PrefixMatch {
            tokens: matched * PAGE_SIZE as u32,
            pages: matched,
        };
        self.stats.tokens_requested += tokens.len() as u64;
        self.stats.tokens_hit += u64::from(found.tokens);
        found
    }

    /// The length in tokens of the longest cached prefix of `tokens`, without
    /// touching recency or metrics: for scoring waiting requests. The same as
    /// [`probe_prefix`](Self::probe_prefix)`.tokens`.
    pub fn peek_prefix(&self, tokens: &[u32]) -> u32 {
        self.probe_prefix(tokens).tokens
    }

    /// Like [`match_prefix`](Self::match_prefix) without its side effects:
    /// writes the matched pages to the front of `pages` and returns how many,
    /// touching neither recency nor metrics. For checking whether a request
    /// fits before admitting it.
    #[inline(always)]
    pub fn peek_pages(&self, tokens: &[u32], pages: &mut [PageId]) -> u32 {
        let walk = self.walk(tokens, pages.iter_mut(), |out, node| {
            *out = node.page;
            Ok::<(), Infallible>(())
        });
        match walk {
            Ok(walk) => walk.pages,
            Err(never) => match never {},
        }
    }

    /// Like [`peek_prefix`](Self::peek_prefix), and also the key of the first
    /// uncached full page, so a scheduler can tell which insert extends this
    /// prompt's match without scoring it again after every insert.
    pub fn probe_prefix(&self, tokens: &[u32]) -> PrefixProbe {
        match self.walk(tokens, repeat(()), |(), _| Ok::<(), Infallible>(())) {
            Ok(walk) => PrefixProbe {
                tokens: walk.pages * PAGE_SIZE as u32,
                next_key: walk.next_key,
            },
            Err(never) => match never {},
        }
    }

    /// The one prefix walk behind every lookup: follows the full pages of
    /// `tokens` down from the root while the tree holds them, pairing each
    /// with the next item of `outs` (the walk stops when they run out) and
    /// calling `visit` with that item and the matched node. Stops early with
    /// `visit`'s error. Every key is a function of the
    /// tokens alone (see [`key_hash`]), so the index probes of successive
    /// pages overlap; always inlined, so they stay overlapped and a visitor
    /// that cannot fail costs nothing.
    #[inline(always)]
    fn walk<O, E>(
        &self,
        tokens: &[u32],
        outs: impl IntoIterator<Item = O>,
        mut visit: impl FnMut(O, &RadixNode) -> Result<(), E>,
    ) -> Result<Walk, E> {
        let mut walk = Walk {
            pages: 0,
            last: NIL,
            next_key: None,
        };
        let mut key = ROOT_KEY;
        for (chunk, out) in tokens.chunks_exact(PAGE_SIZE).zip(outs) {
            let chunk = page_tokens(chunk);
            key = key_hash(key, chunk);
            let Some(node) = self.find_child(walk.last, key, chunk) else {
                walk.next_key = Some(key);
                break;
            };
            visit(out, &self.nodes[node as usize])?;
            walk.last = node;
            walk.pages += 1;
        }
        Ok(walk)
    }

    /// A counter that moves whenever a node is added or removed: a score
    /// computed at one version may be stale at a later one.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// A cursor for [`growth_since`](Self::growth_since): now.
    pub fn growth_cursor(&self) -> u64 {
        self.growth_count
    }

    /// The keys ([`PrefixProbe::next_key`]) of the places where inserts grew
    /// the tree since `cursor`, or [`Growth::Overflowed`] if the journal lost
    /// some. Evictions are not listed: they only shorten matches, which a
    /// scheduler confirms anyway before it admits a request.
    pub fn growth_since(&self, cursor: u64) -> Growth<'_> {
        if self.growth_count - cursor.min(self.growth_count) > GROWTH_JOURNAL as u64 {
            return Growth::Overflowed;
        }
        Growth::Keys(GrowthKeys {
            ring: &self.growth,
            next: cursor.min(self.growth_count),
            end: self.growth_count,
        })
    }

    fn record_growth(&mut self, key: u64) {
        self.growth[(self.growth_count % GROWTH_JOURNAL as u64) as usize] = key;
        self.growth_count += 1;
    }

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
        let (found, to_dedup) = self.check_row(table.pages(seq)?, tokens, pool)?;
        let mut done = Inserted::default();
        if to_dedup > 0 {
            // The path the check walked, again, now that nothing can refuse.
            let walked = self.walk(tokens, 0u32.., |depth, node| {
                let own = table.pages(seq)?[depth as usize];
                if node.page != own {
                    table.replace_full_page(seq, depth, node.page, pool)?;
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
        let uncached = tokens.chunks_exact(PAGE_SIZE).skip(found.pages as usize);
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
                done.declined_pages = full_pages - i;
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
        self.stats.inserted_pages += u64::from(done.new_pages);
        self.stats.deduplicated_pages += u64::from(done.deduplicated_pages);
        self.stats.declined_pages += u64::from(done.declined_pages);
        Ok(done)
    }

    /// Locks a matched path for a holder without a page-table row: takes a
    /// reference on every page, checking first that `pages` is a path of the
    /// tree from the root. Fails, changing nothing, if it is not.
    pub fn lock(&self, pages: &[PageId], pool: &mut PagePool<'_>) -> Result<(), KvError> {
        self.check_path(pages, pool)?;
        Ok(pool.retain_all(pages)?)
    }

    /// Unlocks a path taken with [`lock`](Self::lock): drops the references,
    /// leaf first, so the pages become evictable deepest first. Refused,
    /// changing nothing, unless `pages` is a cached path whose every page is
    /// referenced. (Only the caller knows it locked them: unlocking pages it
    /// did not lock takes references that others hold.)
    pub fn unlock(&self, pages: &[PageId], pool: &mut PagePool<'_>) -> Result<(), KvError> {
        self.check_path(pages, pool)?;
        for &page in pages {
            if pool.refcount(page)? == 0 {
                return Err(KvError::PageNotReferenced);
            }
        }
        for &page in pages.iter().rev() {
            pool.release(page)?;
        }
        Ok(())
    }

    /// Whether `pages` is a path of the tree from the root.
    fn check_path(&self, pages: &[PageId], pool: &PagePool<'_>) -> Result<(), KvError> {
        let mut parent = NIL;
        for &page in pages {
            let node = self.node_of(page, pool)?;
            if self.nodes[node as usize].parent != parent {
                return Err(KvError::NotCached);
            }
            parent = node;
        }
        Ok(())
    }

    /// Before an insert changes anything: walks the tree along `tokens` (whole
    /// pages) and checks the row against it. The row's pages that the tree
    /// caches must be the walked path itself, from the root; past them, every
    /// page must be uncached. Otherwise the tokens are not the row's, and
    /// inserting them would alias a cached page. Returns the walk and how
    /// many of the row's pages the walked path holds in other pages (to
    /// deduplicate).
    fn check_row(
        &self,
        row: &[PageId],
        tokens: &[u32],
        pool: &PagePool<'_>,
    ) -> Result<(Walk, u32), KvError> {
        let mut to_dedup = 0;
        let found = self.walk(tokens, row.iter().copied(), |own, node| {
            if own == node.page {
                // Cached pages come first in a row: none after a copy.
                if to_dedup > 0 {
                    return Err(KvError::TokensMismatch);
                }
            } else if pool.cache_tag(own)?.is_some() {
                return Err(KvError::TokensMismatch);
            } else {
                to_dedup += 1;
            }
            Ok(())
        })?;
        let past = row.iter().take(tokens.len() / PAGE_SIZE);
        for &page in past.skip(found.pages as usize) {
            if pool.cache_tag(page)?.is_some() {
                return Err(KvError::TokensMismatch);
            }
        }
        Ok((found, to_dedup))
    }

    /// Evicts up to `pages` least recently used unlocked pages from the tree
    /// back to the pool's free list; returns how many went.
    pub fn evict(&mut self, pages: u32, pool: &mut PagePool<'_>) -> u32 {
        pool.evict(pages, self)
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

    /// The node that caches `page`, if the tree holds it.
    fn node_of(&self, page: PageId, pool: &PagePool<'_>) -> Result<u32, KvError> {
        let tag = pool.cache_tag(page)?.ok_or(KvError::NotCached)?;
        match self.nodes.get(tag.0 as usize) {
            Some(n) if n.state == NodeState::Live && n.page == page => Ok(tag.0),
            _ => Err(KvError::NotCached),
        }
    }

    /// The child of `parent` holding `tokens`, whose key (see [`key_hash`])
    /// is `hash`. Always inlined: as a call, its result goes through memory
    /// and the walk's probes stop overlapping.
    #[inline(always)]
    fn find_child(&self, parent: u32, hash: u64, tokens: &PageTokens) -> Option<u32> {
        let mask = self.index.len() - 1;
        let mut slot = self.home_slot(hash);
        loop {
            let entry = self.index[slot];
            if entry == EMPTY_SLOT {
                return None;
            }
            if entry & HASH_BITS == hash & HASH_BITS {
                let node = entry as u32;
                let n = &self.nodes[node as usize];
                if n.hash == hash && n.parent == parent && same_tokens(&n.tokens, tokens) {
                    return Some(node);
                }
            }
            slot = (slot + 1) & mask;
        }
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
        let node = loop {
            if let Some(node) = self.free.pop(self.nodes) {
                break node;
            }
            // Evicting a page frees its node (or, after a broken rule, a
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
        let mask = self.index.len() - 1;
        let mut slot = self.home_slot(hash);
        while self.index[slot] != EMPTY_SLOT {
            slot = (slot + 1) & mask;
        }
        self.index[slot] = (hash & HASH_BITS) | u64::from(node);
        self.live += 1;
        self.version += 1;
        Some(node)
    }

    /// Takes a live node out of the tree after the pool reclaimed its page.
    fn remove_node(&mut self, node: u32) {
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

    fn child_gone(&mut self, parent: u32) {
        let p = &mut self.nodes[parent as usize];
        p.children -= 1;
        if p.children == 0 && p.state == NodeState::Detached {
            self.free_node(parent);
        }
    }

    fn free_node(&mut self, node: u32) {
        self.nodes[node as usize] = RadixNode::EMPTY;
        let freed = self.free.push(self.nodes, node);
        debug_assert!(freed);
    }

    /// Removes a node from the hash index by backward-shift deletion, which
    /// keeps every probe chain unbroken without tombstones.
    fn unindex(&mut self, node: u32) {
        let mask = self.index.len() - 1;
        let mut hole = self.home_slot(self.nodes[node as usize].hash);
        while self.index[hole] as u32 != node {
            debug_assert_ne!(self.index[hole], EMPTY_SLOT, "live node missing from index");
            hole = (hole + 1) & mask;
        }
        let mut slot = hole;
        loop {
            slot = (slot + 1) & mask;
            let moved = self.index[slot];
            if moved == EMPTY_SLOT {
                break;
            }
            // The stored high hash bits are all the home slot needs.
            let home = self.home_slot(moved);
            // Shift back unless its home lies cyclically in (hole, slot].
            let stays = if hole <= slot {
                hole < home && home <= slot
            } else {
                hole < home || home <= slot
            };
            if !stays {
                self.index[hole] = moved;
                hole = slot;
            }
        }
        self.index[hole] = EMPTY_SLOT;
    }

    /// The slot a key hash (or an index entry, which keeps the hash's high
    /// bits) probes first: the top bits, at most 32 of them.
    #[inline]
    fn home_slot(&self, hash: u64) -> usize {
        (hash >> self.index_shift) as usize
    }
}

impl EvictionListener for RadixCache<'_> {
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

/// The first 16 tokens of a chunk of exactly 16.
#[inline]
fn page_tokens(chunk: &[u32]) -> &PageTokens {
    // `chunks_exact(PAGE_SIZE)` only yields full chunks.
    chunk
        .first_chunk::<PAGE_SIZE>()
        .unwrap_or(&[u32::MAX; PAGE_SIZE])
}

const K: [u64; 4] = [
    0xa076_1d64_78bd_642f,
    0xe703_7ed1_a0b4_28db,
    0x8ebc_6af0_9c88_c6e3,
    0x5899_65cc_7537_4cc3,
];

/// The high and low halves of a 128-bit product, folded.
#[inline]
fn fold(a: u64, b: u64) -> u64 {
    let p = u128::from(a) * u128::from(b);
    (p as u64) ^ ((p >> 64) as u64)
}

/// A fast hash of a page's 16 tokens: four independent folded multiplies, so
/// the work runs in parallel. It does not depend on the parent, so while one
/// page's probe waits on memory the CPU already hashes the next page.
#[inline]
fn tokens_hash(tokens: &PageTokens) -> u64 {
    let w = |i: usize| u64::from(tokens[2 * i]) | (u64::from(tokens[2 * i + 1]) << 32);
    let a = fold(w(0) ^ K[0], w(1) ^ K[1]);
    let b = fold(w(2) ^ K[2], w(3) ^ K[3]);
    let c = fold(w(4) ^ K[1], w(5) ^ K[0]);
    let d = fold(w(6) ^ K[3], w(7) ^ K[2]);
    a.wrapping_add(b.rotate_left(21)) ^ c.wrapping_add(d.rotate_left(43))
}

/// Whether two pages hold the same tokens. Folds the differences instead of
/// comparing element by element, which compiles to a few vector instructions
/// in place of a call to `bcmp`.
#[inline]
fn same_tokens(a: &PageTokens, b: &PageTokens) -> bool {
    a.iter().zip(b).fold(0, |diff, (x, y)| diff | (x ^ y)) == 0
}

/// The key of the tree's root: the "parent key" of every first page.
const ROOT_KEY: u64 = K[0];

/// The index key of a page whose parent's key is `parent_key`: a hash of the
/// whole prefix up to and including this page. Keying by the prefix, not by
/// the parent's node id, lets a match compute every page's key before it has
/// found any node, so the index probes of successive pages do not wait on one
/// another (their loads overlap). Matches are confirmed by comparing the
/// parent and the tokens, so the hash only has to spread keys.
#[inline]
fn key_hash(parent_key: u64, tokens: &PageTokens) -> u64 {
    fold(tokens_hash(tokens) ^ K[2], parent_key ^ K[3])
}
