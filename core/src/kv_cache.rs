//! The KV cache as one owner: the page pool, the page tables, the prefix
//! cache and a scratch row, behind the operations a scheduler and an engine
//! need.
//!
//! The three parts depend on each other (an append may evict from the
//! prefix cache; caching a sequence rewrites its row and retains pages), so
//! every caller used to thread all of them through each call. [`KvCache`]
//! keeps that wiring in one place and reads in one direction: admit a
//! sequence on its cached prefix, append to it, cache what it computed,
//! finish or release it. Every refusal returns a [`KvError`] and changes
//! nothing.

use crate::error::{AppendError, KvError, SeqError, StorageError};
use crate::geometry::{KvGeometry, PAGE_SIZE};
use crate::groups::KvGroups;
use crate::ids::{PageId, SeqId, Slot};
use crate::page_table::{Appended, PageTable, SeqEntry};
use crate::pool::{PageEntry, PagePool};
use crate::radix::{CacheEvent, EventDrain, Inserted, RadixCache, RadixNode, RadixStats};
use crate::stats::PoolStats;
use crate::time::Timestamp;

/// The caller's storage for a [`KvCache`], in one place.
#[derive(Debug)]
pub struct KvStorage<'a> {
    /// Page pool entries: the KV pool's size.
    pub pages: &'a mut [PageEntry],
    /// Page-table rows (`sequences × pages per sequence`).
    pub rows: &'a mut [PageId],
    /// Page-table sequence entries.
    pub seqs: &'a mut [SeqEntry],
    /// Radix nodes.
    pub nodes: &'a mut [RadixNode],
    /// Radix index (see [`RadixCache::index_len_for`]).
    pub index: &'a mut [u64],
    /// One row of page ids (at least the table's pages per sequence).
    pub scratch: &'a mut [PageId],
}

impl KvStorage<'_> {
    /// The same storage, borrowed again: to build one cache after another
    /// over it (each starts afresh).
    pub fn reborrow(&mut self) -> KvStorage<'_> {
        KvStorage {
            pages: &mut *self.pages,
            rows: &mut *self.rows,
            seqs: &mut *self.seqs,
            nodes: &mut *self.nodes,
            index: &mut *self.index,
            scratch: &mut *self.scratch,
        }
    }
}

/// What admitting a prompt would take, found without changing anything:
/// see [`KvCache::peek_admission`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admission {
    matched_pages: u32,
    /// Matched pages nobody references: admitting takes them off the
    /// evictable list, so they count against the pages available.
    evictable: u32,
    prompt_tokens: u32,
    /// Which peek filled the scratch row, and the prefix cache's version then.
    ticket: u64,
    version: u64,
    /// Whether the prefix cache may serve the prompt (see
    /// [`KvCache::peek_admission_uncached`]).
    reuse: bool,
    /// The cache's groups: each new page of tokens takes a page in every
    /// group, and a windowed group holds at most a window's pages.
    groups: KvGroups,
}

impl Admission {
    /// Prompt tokens found in the prefix cache (whole pages).
    pub fn matched_tokens(&self) -> u32 {
        self.matched_pages * PAGE_SIZE as u32
    }

    /// Pages of the prompt found in the prefix cache.
    pub fn matched_pages(&self) -> u32 {
        self.matched_pages
    }

    /// Pages the sequence holds, in all groups, once its whole prompt and
    /// first output token are in.
    pub fn whole_pages(&self) -> u64 {
        self.groups.pages_at(u64::from(self.prompt_tokens) + 1)
    }

    /// Pages the whole prompt and the first output token take from the
    /// pool's available pages: to compare with
    /// [`PagePool::available_pages`]. Windowed groups count their window
    /// once decoding, not the pages a long prompt chunk holds for a step.
    pub fn pages_needed(&self) -> u64 {
        let new = KvGeometry::pages_for_tokens(u64::from(self.prompt_tokens) + 1)
            .saturating_sub(u64::from(self.matched_pages));
        let windowed = new.min(u64::from(self.groups.window_pages()));
        new * u64::from(self.groups.full())
            + windowed * u64::from(self.groups.windowed())
            + u64::from(self.evictable)
    }

    /// Pages a sequence of `tokens` tokens starting on the matched prefix
    /// takes from the available pages when appended at once: a page of
    /// every group for each new page of tokens.
    fn pages_for(&self, tokens: u64) -> u64 {
        KvGeometry::pages_for_tokens(tokens).saturating_sub(u64::from(self.matched_pages))
            * u64::from(self.groups.count())
            + u64::from(self.evictable)
    }
}

/// A sequence [`KvCache::admit`] started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admitted {
    /// The new sequence.
    pub seq: SeqId,
    /// Prompt tokens it starts with from the prefix cache.
    pub matched_tokens: u32,
    /// What appending the first chunk did.
    pub appended: Appended,
}

/// The page pool, page tables and prefix cache over caller storage, and the
/// operations that use them together. Every refusal returns a [`KvError`]
/// and changes nothing.
///
/// ```
/// use pagoda_core::{KvCache, KvStorage, PageEntry, PageId, RadixCache, RadixNode, SeqEntry};
///
/// let mut pages = [PageEntry::EMPTY; 16];
/// let mut rows = [PageId::from_index(0); 2 * 8]; // 2 sequences of 8 pages
/// let mut seqs = [SeqEntry::EMPTY; 2];
/// let mut nodes = [RadixNode::EMPTY; 16];
/// let mut index = [0u64; RadixCache::index_len_for(16)];
/// let mut scratch = [PageId::from_index(0); 8];
/// let mut kv = KvCache::new(KvStorage {
///     pages: &mut pages,
///     rows: &mut rows,
///     seqs: &mut seqs,
///     nodes: &mut nodes,
///     index: &mut index,
///     scratch: &mut scratch,
/// })
/// .unwrap();
///
/// let prompt: Vec<u32> = (0..40).collect();
/// let admission = kv.peek_admission(&prompt);
/// assert_eq!(admission.matched_tokens(), 0);
/// assert_eq!(admission.pages_needed(), 3); // 40 tokens and the first output
/// let first = kv.admit(&prompt, &admission, 40).unwrap();
/// kv.finish(first.seq, &prompt).unwrap(); // two full pages cached
///
/// // The same prompt again starts on the two cached pages.
/// let admission = kv.peek_admission(&prompt);
/// assert_eq!(admission.matched_tokens(), 32);
/// let again = kv.admit(&prompt, &admission, 8).unwrap();
/// assert_eq!(again.appended.first_position, 32);
/// kv.release(again.seq).unwrap();
/// assert_eq!(kv.pool().referenced_pages(), 0);
/// ```
#[derive(Debug)]
pub struct KvCache<'a> {
    pool: PagePool<'a>,
    table: PageTable<'a>,
    radix: RadixCache<'a>,
    scratch: &'a mut [PageId],
    /// Counts [`peek_admission`](Self::peek_admission) calls: an
    /// [`Admission`] from an earlier one no longer describes the scratch row.
    peeks: u64,
}

impl<'a> KvCache<'a> {
    /// Builds the pool, table and cache over `storage`.
    pub fn new(storage: KvStorage<'a>) -> Result<Self, StorageError> {
        Self::with_groups(storage, KvGroups::SINGLE, &mut [])
    }

    /// Builds a cache whose pages are grouped as `groups` (see
    /// [`KvGroups`]): `storage.rows` holds a row per group for each
    /// sequence, `storage.scratch` a row per group, and `group_pages` the
    /// prefix cache's pages of groups after the first
    /// ([`RadixCache::with_groups`]).
    ///
    /// ```
    /// use pagoda_core::{KvCache, KvGroups, KvStorage, PageEntry, PageId, RadixCache, RadixNode, SeqEntry};
    /// let groups = KvGroups::new(1, 1, 64).unwrap(); // a 64-token window
    /// let mut pages = [PageEntry::EMPTY; 64];
    /// let mut rows = [PageId::VACANT; 2 * 2 * 16]; // 2 sequences × 2 groups × 16 pages
    /// let mut seqs = [SeqEntry::EMPTY; 2];
    /// let mut nodes = [RadixNode::EMPTY; 32];
    /// let mut index = [0u64; RadixCache::index_len_for(32)];
    /// let mut scratch = [PageId::VACANT; 2 * 16];
    /// let mut group_pages = [PageId::VACANT; 32];
    /// let storage = KvStorage {
    ///     pages: &mut pages, rows: &mut rows, seqs: &mut seqs,
    ///     nodes: &mut nodes, index: &mut index, scratch: &mut scratch,
    /// };
    /// let mut kv = KvCache::with_groups(storage, groups, &mut group_pages).unwrap();
    /// let prompt: Vec<u32> = (0..200).collect();
    /// let admission = kv.peek_admission(&prompt);
    /// let seq = kv.admit(&prompt, &admission, 200).unwrap().seq;
    /// kv.append(seq, 1).unwrap(); // the window moves on: early windowed pages go
    /// assert_eq!(kv.pool().referenced_pages(), 13 + 5);
    /// kv.finish(seq, &prompt).unwrap();
    /// // The cached prefix serves a prompt whose window it holds.
    /// let again = kv.peek_admission(&prompt);
    /// assert_eq!(again.matched_tokens(), 192);
    /// ```
    pub fn with_groups(
        storage: KvStorage<'a>,
        groups: KvGroups,
        group_pages: &'a mut [PageId],
    ) -> Result<Self, StorageError> {
        let pool = PagePool::new(storage.pages)?;
        let table = PageTable::with_groups(storage.rows, storage.seqs, groups)?;
        let radix = RadixCache::with_groups(storage.nodes, storage.index, group_pages, groups)?;
        Self::from_parts(pool, table, radix, storage.scratch)
    }

    /// Puts parts built elsewhere together. Refused
    /// ([`StorageError::Mismatched`]) when `scratch` is shorter than a row
    /// per group, or the table and the prefix cache group pages differently.
    pub fn from_parts(
        pool: PagePool<'a>,
        table: PageTable<'a>,
        radix: RadixCache<'a>,
        scratch: &'a mut [PageId],
    ) -> Result<Self, StorageError> {
        let groups = table.groups();
        let row = table.max_pages_per_sequence() as usize;
        if scratch.len() < row * groups.count() as usize || radix.groups() != groups {
            return Err(StorageError::Mismatched);
        }
        Ok(Self {
            pool,
            table,
            radix,
            scratch,
            peeks: 0,
        })
    }

    /// The page pool, to read.
    #[inline]
    pub fn pool(&self) -> &PagePool<'a> {
        &self.pool
    }

    /// The page tables, to read.
    #[inline]
    pub fn table(&self) -> &PageTable<'a> {
        &self.table
    }

    /// The prefix cache, to read.
    #[inline]
    pub fn radix(&self) -> &RadixCache<'a> {
        &self.radix
    }

    /// Hands the prefix cache a ring for its events; see
    /// [`RadixCache::set_event_ring`].
    pub fn set_event_ring(&mut self, ring: &'a mut [CacheEvent]) {
        self.radix.set_event_ring(ring);
    }

    /// Evicts up to `max` cached pages that no sequence holds, least
    /// recently used first (`u32::MAX`: all of them), and returns how many
    /// went back to the free list. Pages a running sequence holds stay, and
    /// so do their cached prefixes; the cache's events report each removal.
    pub fn evict_cached(&mut self, max: u32) -> u32 {
        self.radix.evict(max, &mut self.pool)
    }

    /// Drains the prefix cache's events; see [`RadixCache::drain_events`].
    pub fn drain_cache_events(&mut self, each: impl FnMut(&CacheEvent)) -> EventDrain {
        self.radix.drain_events(each)
    }

    /// The most tokens one sequence can hold: its row, or the whole pool if
    /// that is smaller.
    pub fn max_context_tokens(&self) -> u32 {
        let groups = self.table.groups();
        let fits =
            |tokens: u32| groups.pages_at(u64::from(tokens)) <= u64::from(self.pool.total_pages());
        let row = self.table.max_tokens_per_sequence();
        if fits(row) {
            return row;
        }
        // The longest whole number of pages the pool holds in every group.
        let (mut lo, mut hi) = (0, row / PAGE_SIZE as u32);
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if fits(mid * PAGE_SIZE as u32) {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        lo * PAGE_SIZE as u32
    }

    /// How the cache's pages are grouped.
    pub fn groups(&self) -> KvGroups {
        self.table.groups()
    }

    /// Finds the longest cached prefix of `prompt` (all but its last token,
    /// which is computed to sample the first output) and what admitting it
    /// would take, touching neither recency nor metrics.
    #[inline]
    pub fn peek_admission(&mut self, prompt: &[u32]) -> Admission {
        self.peek(prompt, true)
    }

    /// What admitting `prompt` takes when the prefix cache must not serve
    /// it: every prompt token is computed (a request that needs every
    /// prompt row's logits, to score the prompt). Its computed pages still
    /// join the cache for others.
    #[inline]
    pub fn peek_admission_uncached(&mut self, prompt: &[u32]) -> Admission {
        self.peek(prompt, false)
    }

    #[inline]
    fn peek(&mut self, prompt: &[u32], reuse: bool) -> Admission {
        let lookup = if reuse { lookup(prompt) } else { &[] };
        let groups = self.table.groups();
        let stride = self.table.max_pages_per_sequence() as usize;
        let matched_pages = self.radix.peek_group_pages(lookup, self.scratch, stride);
        let window_start = groups.first_needed_page(matched_pages * PAGE_SIZE as u32) as usize;
        let mut evictable = 0;
        for g in 0..groups.count() {
            let part = &self.scratch[g as usize * stride..][..matched_pages as usize];
            let held = if groups.is_windowed(g) {
                &part[window_start.min(part.len())..]
            } else {
                part
            };
            evictable += held
                .iter()
                .filter(|&&p| self.pool.refcount(p) == Ok(0))
                .count() as u32;
        }
        self.peeks += 1;
        Admission {
            matched_pages,
            evictable,
            prompt_tokens: u32::try_from(prompt.len()).unwrap_or(u32::MAX),
            ticket: self.peeks,
            version: self.radix.version(),
            reuse,
            groups,
        }
    }

    /// Starts a sequence for `prompt` on its cached prefix and appends the
    /// first `chunk` prompt tokens after it. `admission` is this prompt's
    /// latest [`peek_admission`](Self::peek_admission); when the cache
    /// changed since, the prefix is looked up again.
    ///
    /// Refused, changing nothing, when no row is free, the sequence would
    /// outgrow its row, or the pool lacks the pages
    /// ([`Admission::pages_needed`]'s rule for `matched + chunk` tokens).
    pub fn admit(
        &mut self,
        prompt: &[u32],
        admission: &Admission,
        chunk: u32,
    ) -> Result<Admitted, KvError> {
        let fresh = admission.ticket == self.peeks
            && admission.version == self.radix.version()
            && admission.prompt_tokens as usize == prompt.len();
        let admission = if fresh {
            *admission
        } else {
            self.peek(prompt, admission.reuse)
        };
        let matched_tokens = admission.matched_tokens();
        let tokens = u64::from(matched_tokens) + u64::from(chunk);
        if self.table.active_sequences() >= self.table.max_sequences() {
            return Err(KvError::NoFreeSequenceSlot);
        }
        let max_tokens = self.table.max_tokens_per_sequence();
        if tokens > u64::from(max_tokens) {
            return Err(KvError::SequenceTooLong { max_tokens });
        }
        let needed = admission.pages_for(tokens);
        let available = self.pool.available_pages();
        if needed > u64::from(available) {
            return Err(KvError::PoolExhausted {
                needed: u32::try_from(needed).unwrap_or(u32::MAX),
                available,
            });
        }
        let cached = if admission.reuse { lookup(prompt) } else { &[] };
        let stride = self.table.max_pages_per_sequence() as usize;
        let hit = self
            .radix
            .match_group_prefix(cached, self.scratch, stride, &mut self.pool);
        debug_assert_eq!(hit.pages, admission.matched_pages);
        // Each group's part side by side, as the table takes a prefix.
        let n = hit.pages as usize;
        for g in 1..self.table.groups().count() as usize {
            self.scratch.copy_within(g * stride..g * stride + n, g * n);
        }
        let parts = n * self.table.groups().count() as usize;
        let prefix = self.scratch.get(..parts).unwrap_or(&[]);
        let seq = self.table.create_with_prefix(prefix, &mut self.pool)?;
        match self
            .table
            .append(seq, chunk, &mut self.pool, &mut self.radix)
        {
            Ok(appended) => Ok(Admitted {
                seq,
                matched_tokens: hit.tokens,
                appended,
            }),
            Err(e) => {
                // Unreachable after the checks above; undo all the same.
                let released = self.table.release(seq, &mut self.pool);
                debug_assert!(released.is_ok());
                Err(e.into())
            }
        }
    }

    /// Pages the sequence lacks to hold `tokens` tokens: what a running
    /// prefill still needs, for admission to keep in reserve.
    #[inline]
    pub fn pages_short(&self, seq: SeqId, tokens: u64) -> u64 {
        let held = self.table.pages(seq).map_or(0, |p| p.len() as u64);
        let short = KvGeometry::pages_for_tokens(tokens).saturating_sub(held);
        let groups = self.table.groups();
        short * u64::from(groups.full())
            + short.min(u64::from(groups.window_pages())) * u64::from(groups.windowed())
    }

    /// Appends `tokens` tokens to the sequence, evicting cached pages if the
    /// free list runs dry; see [`PageTable::append`].
    #[inline]
    pub fn append(&mut self, seq: SeqId, tokens: u32) -> Result<Appended, AppendError> {
        self.table
            .append(seq, tokens, &mut self.pool, &mut self.radix)
    }

    /// Caches the sequence's full pages whose tokens are `tokens` (a
    /// computed prompt prefix), so other requests can share them; see
    /// [`RadixCache::insert`].
    #[inline]
    pub fn cache(&mut self, seq: SeqId, tokens: &[u32]) -> Result<Inserted, KvError> {
        self.radix
            .insert(&mut self.table, seq, tokens, &mut self.pool)
    }

    /// Ends a sequence that completed: caches its full pages under `tokens`
    /// (prompt then output) and releases it. An unknown sequence is refused
    /// and nothing changes; otherwise the sequence is released whatever
    /// caching did, and the result says what that was.
    pub fn finish(&mut self, seq: SeqId, tokens: &[u32]) -> Result<Inserted, KvError> {
        self.table.len(seq)?;
        let cached = self.cache(seq, tokens);
        let released = self.table.release(seq, &mut self.pool);
        debug_assert!(released.is_ok());
        cached
    }

    /// Starts a sequence that shares every page of `seq`, in every group
    /// (parallel sampling, beam search); see [`PageTable::fork`].
    #[inline]
    pub fn fork(&mut self, seq: SeqId) -> Result<SeqId, KvError> {
        self.table.fork(seq, &mut self.pool)
    }

    /// Releases a sequence without caching it (cancelled or preempted).
    #[inline]
    pub fn release(&mut self, seq: SeqId) -> Result<(), SeqError> {
        self.table.release(seq, &mut self.pool)
    }

    /// The sequence's pages, in order (group 0's).
    #[inline]
    pub fn pages(&self, seq: SeqId) -> Result<&[PageId], SeqError> {
        self.table.pages(seq)
    }

    /// The sequence's row in `group`; see [`PageTable::group_pages`].
    #[inline]
    pub fn group_pages(&self, seq: SeqId, group: u32) -> Result<&[PageId], SeqError> {
        self.table.group_pages(seq, group)
    }

    /// [`slot_mapping`](Self::slot_mapping) in the row of `group`.
    #[inline]
    pub fn group_slot_mapping(
        &self,
        seq: SeqId,
        group: u32,
        first: u32,
        out: &mut [Slot],
    ) -> Result<(), SeqError> {
        self.table.group_slot_mapping(seq, group, first, out)
    }

    /// Tokens in the sequence.
    #[inline]
    pub fn len(&self, seq: SeqId) -> Result<u32, SeqError> {
        self.table.len(seq)
    }

    /// The whole block table, as kernels read it.
    #[inline]
    pub fn block_table(&self) -> &[PageId] {
        self.table.block_table()
    }

    /// The KV slots of the sequence's tokens from `first`; see
    /// [`PageTable::slot_mapping`].
    #[inline]
    pub fn slot_mapping(&self, seq: SeqId, first: u32, out: &mut [Slot]) -> Result<(), SeqError> {
        self.table.slot_mapping(seq, first, out)
    }

    /// The pool's metrics at `now`.
    pub fn pool_stats(&self, now: Timestamp) -> PoolStats {
        self.pool.stats(now)
    }

    /// The prefix cache's metrics.
    pub fn radix_stats(&self) -> RadixStats {
        self.radix.stats()
    }

    /// Sequences holding a row.
    #[inline]
    pub fn active_sequences(&self) -> u32 {
        self.table.active_sequences()
    }

    /// Pages some sequence references: zero once every sequence has left.
    #[inline]
    pub fn referenced_pages(&self) -> u32 {
        self.pool.referenced_pages()
    }
}

/// A prompt's tokens that may come from the cache: all but the last, which
/// is computed to sample the first output. Total: empty for an empty prompt.
#[inline]
fn lookup(prompt: &[u32]) -> &[u32] {
    prompt.split_last().map_or(&[], |(_, rest)| rest)
}
