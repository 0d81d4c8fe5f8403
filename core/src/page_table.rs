//! Page tables: which physical page holds each logical token of a sequence.
//!
//! The table is one dense `[max_seqs × max_pages_per_seq]` array of page ids
//! (vLLM's `block_tables`), stored in the caller's slice. Row `r` holds the
//! pages of the sequence in row `r`, in logical order: token `t` lives in
//! page `row[t / 16]` at offset `t % 16`. Attention kernels read this array
//! as it is; nothing is translated per step.
//!
//! The table takes references on pages through the [`PagePool`]: appending
//! allocates, forking shares (refcounts rise), releasing drops references, and
//! appending into a shared, partly filled last page first copies it
//! (copy-on-write) and returns the [`PageCopy`] for the backend to run.

use crate::error::{AppendError, KvError, SeqError, StorageError, TableFull};
use crate::geometry::PAGE_SIZE;
use crate::groups::{KvGroups, MAX_KV_GROUPS};
use crate::ids::{PageId, SeqId, Slot};
use crate::list::{Stack, StackNode, NIL};
use crate::pool::{EvictionListener, PagePool};
const PAGE: u32 = PAGE_SIZE as u32;

/// The table's bookkeeping for one sequence row. Callers only provide storage
/// (`[SeqEntry::EMPTY; N]` or a `Vec`); the table initialises it.
#[derive(Debug, Clone, Copy)]
pub struct SeqEntry {
    tokens: u32,
    pages: u32,
    /// The row's last page, kept here so the common append reads one entry
    /// instead of the entry, then the row, then the pool.
    last_page: PageId,
    /// The first page windowed groups still hold: their entries before it
    /// are [`PageId::NONE`] (0 without windowed groups).
    window_start: u32,
    /// Odd while the row holds a sequence, even while it is free: one compare
    /// checks both that the row is live and that an id is not stale (ids are
    /// only minted with the odd generation of a live row).
    generation: u32,
    next_free: u32,
}

impl SeqEntry {
    /// An entry ready to be handed to [`PageTable::new`].
    pub const EMPTY: Self = Self {
        tokens: 0,
        pages: 0,
        last_page: PageId::VACANT,
        window_start: 0,
        generation: 0,
        next_free: NIL,
    };
}

impl Default for SeqEntry {
    fn default() -> Self {
        Self::EMPTY
    }
}

/// Free rows are a stack through `next_free`.
impl StackNode for SeqEntry {
    #[inline]
    fn next(&self) -> u32 {
        self.next_free
    }

    #[inline]
    fn set_next(&mut self, next: u32) {
        self.next_free = next;
    }
}

/// Where a token's keys and values live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct TokenLocation {
    /// The physical page.
    pub page: PageId,
    /// The slot within the page, `0..16`.
    pub offset: u32,
    /// The slot in the whole KV store: `page × 16 + offset`.
    pub slot: Slot,
}

/// A copy the backend must run before writing new tokens: the first `slots`
/// token slots of `src` (every layer, keys and values) into `dst`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct PageCopy {
    /// The shared page, left untouched for its other holders.
    pub src: PageId,
    /// The sequence's fresh private page.
    pub dst: PageId,
    /// Leading slots that hold data.
    pub slots: u32,
}

/// What an [`append`](PageTable::append) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Appended {
    /// Position of the first new token.
    pub first_position: u32,
    /// Tokens appended.
    pub tokens: u32,
    /// Fresh pages the sequence gained in all groups (not counting
    /// copy-on-write pages).
    pub pages_added: u32,
    /// Pages of windowed groups that left the window and were let go.
    pub pages_dropped: u32,
    /// The copies-on-write the backend must run first, one per group whose
    /// last page was shared (all of them or none).
    pub copies: PageCopies,
}

/// Up to one [`PageCopy`] per group, in a fixed array (the core allocates
/// nothing). Every group's last page is shared or none is, and all hold the
/// same slots, so the slot count is kept once.
#[derive(Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct PageCopies {
    pairs: [(PageId, PageId); MAX_KV_GROUPS],
    slots: u32,
    len: u8,
}

impl PageCopies {
    /// No copy.
    pub const NONE: Self = Self {
        pairs: [(PageId::VACANT, PageId::VACANT); MAX_KV_GROUPS],
        slots: 0,
        len: 0,
    };

    /// The copies, group 0's first.
    #[inline]
    pub fn iter(&self) -> impl ExactSizeIterator<Item = PageCopy> + '_ {
        self.pairs[..self.len as usize]
            .iter()
            .map(|&(src, dst)| PageCopy {
                src,
                dst,
                slots: self.slots,
            })
    }

    /// Group 0's copy: the only one of a cache without windowed groups.
    #[inline]
    pub fn first(&self) -> Option<PageCopy> {
        self.iter().next()
    }

    /// How many there are.
    #[inline]
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether there is none.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn push(&mut self, copy: PageCopy) {
        if let Some(slot) = self.pairs.get_mut(self.len as usize) {
            *slot = (copy.src, copy.dst);
            self.slots = copy.slots;
            self.len += 1;
        }
    }
}

impl Default for PageCopies {
    fn default() -> Self {
        Self::NONE
    }
}

impl core::fmt::Debug for PageCopies {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// The page tables of all sequences, over caller-provided storage.
///
/// ```
/// use pagoda_core::{PageEntry, PageId, PagePool, PageTable, SeqEntry};
/// let mut pages = [PageEntry::EMPTY; 8];
/// let mut pool = PagePool::new(&mut pages).unwrap();
/// // Two sequences of up to 4 pages (64 tokens) each.
/// let mut rows = [PageId::from_index(0); 8];
/// let mut seqs = [SeqEntry::EMPTY; 2];
/// let mut table = PageTable::new(&mut rows, &mut seqs).unwrap();
///
/// let seq = table.create().unwrap();
/// table.append(seq, 20, &mut pool, &mut ()).unwrap(); // two pages
/// let child = table.fork(seq, &mut pool).unwrap(); // shares both
/// let grown = table.append(child, 1, &mut pool, &mut ()).unwrap();
/// let copy = grown.copies.first().unwrap(); // the shared, half-full page was copied
/// assert_eq!(copy.slots, 4);
/// assert_eq!(table.locate(seq, 17).unwrap().page, copy.src);
/// assert_eq!(table.locate(child, 17).unwrap().page, copy.dst);
/// ```
///
/// With [`KvGroups`], each sequence has one row per group, side by side;
/// windowed groups let go of the pages their window left on each append:
///
/// ```
/// use pagoda_core::{KvGroups, PageEntry, PageId, PagePool, PageTable, SeqEntry};
/// let mut pages = [PageEntry::EMPTY; 16];
/// let mut pool = PagePool::new(&mut pages).unwrap();
/// let groups = KvGroups::new(1, 1, 32).unwrap(); // one full group, one 32-token window
/// let mut rows = [PageId::from_index(0); 2 * 8];
/// let mut seqs = [SeqEntry::EMPTY; 1];
/// let mut table = PageTable::with_groups(&mut rows, &mut seqs, groups).unwrap();
/// let seq = table.create().unwrap();
/// table.append(seq, 100, &mut pool, &mut ()).unwrap(); // 7 pages in each group
/// let dropped = table.append(seq, 1, &mut pool, &mut ()).unwrap().pages_dropped;
/// assert_eq!(dropped, 4); // position 100 sees 69..=100: pages 4 to 6
/// assert_eq!(table.group_pages(seq, 1).unwrap()[..4], [PageId::VACANT; 4]);
/// assert_eq!(pool.referenced_pages(), 7 + 3);
/// ```
#[derive(Debug)]
pub struct PageTable<'a> {
    rows: &'a mut [PageId],
    seqs: &'a mut [SeqEntry],
    row_len: u32,
    groups: KvGroups,
    free: Stack,
    active: u32,
}

impl<'a> PageTable<'a> {
    /// Builds a table of `seqs.len()` rows of `rows.len() / seqs.len()` pages.
    ///
    /// Fails with [`StorageError::Empty`] if either slice is empty,
    /// [`StorageError::Mismatched`] if `rows` is not a whole number of rows,
    /// or [`StorageError::TooLarge`] if there are `u32::MAX` rows or more or
    /// a row holds more than `u32::MAX` tokens.
    pub fn new(rows: &'a mut [PageId], seqs: &'a mut [SeqEntry]) -> Result<Self, StorageError> {
        Self::with_groups(rows, seqs, KvGroups::SINGLE)
    }

    /// Builds a table whose sequences each have one row per group of
    /// `groups`: `rows` holds `seqs.len() × groups.count()` rows, a
    /// sequence's rows side by side, group 0 first. Refused as
    /// [`new`](Self::new) is.
    pub fn with_groups(
        rows: &'a mut [PageId],
        seqs: &'a mut [SeqEntry],
        groups: KvGroups,
    ) -> Result<Self, StorageError> {
        let n = seqs.len();
        if n == 0 || rows.is_empty() {
            return Err(StorageError::Empty);
        }
        let per_seq = n * groups.count() as usize;
        if !rows.len().is_multiple_of(per_seq) {
            return Err(StorageError::Mismatched);
        }
        let row_len = rows.len() / per_seq;
        if n >= NIL as usize || row_len as u64 * u64::from(PAGE) > u64::from(u32::MAX) {
            return Err(StorageError::TooLarge);
        }
        rows.fill(PageId::VACANT);
        seqs.fill(SeqEntry::EMPTY);
        let free = Stack::with_all(seqs);
        Ok(Self {
            rows,
            seqs,
            row_len: row_len as u32,
            groups,
            free,
            active: 0,
        })
    }

    /// Rows in the table: the most sequences that can exist at once.
    pub fn max_sequences(&self) -> u32 {
        self.seqs.len() as u32
    }

    /// Pages in one row.
    pub fn max_pages_per_sequence(&self) -> u32 {
        self.row_len
    }

    /// The most tokens one sequence can hold.
    #[inline]
    pub fn max_tokens_per_sequence(&self) -> u32 {
        self.row_len * PAGE
    }

    /// How the table's pages are grouped.
    #[inline]
    pub fn groups(&self) -> KvGroups {
        self.groups
    }

    /// Sequences that currently exist.
    pub fn active_sequences(&self) -> u32 {
        self.active
    }

    /// The whole dense table, row after row (a sequence's group rows side by
    /// side), as kernels read it. Entries past a sequence's last page, and
    /// windowed entries before its window, are [`PageId::NONE`].
    pub fn block_table(&self) -> &[PageId] {
        self.rows
    }

    /// Starts an empty sequence in a free row.
    pub fn create(&mut self) -> Result<SeqId, TableFull> {
        let row = self.free.pop(self.seqs).ok_or(TableFull)?;
        let e = &mut self.seqs[row as usize];
        // Even (free) to odd (live).
        e.generation = e.generation.wrapping_add(1);
        e.tokens = 0;
        e.pages = 0;
        e.last_page = PageId::VACANT;
        e.window_start = 0;
        e.next_free = NIL;
        self.active += 1;
        Ok(SeqId {
            row,
            generation: e.generation,
        })
    }

    /// Starts a sequence on a cached prefix: its row begins with `prefix`, full
    /// pages from the prefix cache, and it holds a reference on each (which is
    /// what locks them in the cache while it runs). Call it right after
    /// [`RadixCache::match_prefix`](crate::RadixCache::match_prefix), before
    /// any allocation could evict the matched pages.
    ///
    /// With several groups, `prefix` is one equally long part per group,
    /// side by side; a windowed group's part may hold [`PageId::NONE`] before
    /// the window of the position after the prefix, and must hold pages from
    /// there on.
    ///
    /// Fails, changing nothing, if a page is free or unknown, a windowed
    /// part lacks a page its window needs, or the prefix is longer than a row.
    pub fn create_with_prefix(
        &mut self,
        prefix: &[PageId],
        pool: &mut PagePool<'_>,
    ) -> Result<SeqId, KvError> {
        let groups = self.groups.count() as usize;
        if !prefix.len().is_multiple_of(groups) {
            return Err(KvError::NotCached);
        }
        let n = prefix.len() / groups;
        if n > self.row_len as usize {
            return Err(KvError::SequenceTooLong {
                max_tokens: self.max_tokens_per_sequence(),
            });
        }
        if self.free.is_empty() {
            return Err(KvError::NoFreeSequenceSlot);
        }
        let kv_groups = self.groups;
        let window_start = kv_groups.first_needed_page(n as u32 * PAGE) as usize;
        let part = move |g: usize| {
            let all = &prefix[g * n..(g + 1) * n];
            if kv_groups.is_windowed(g as u32) {
                &all[window_start.min(n)..]
            } else {
                all
            }
        };
        if (0..groups).any(|g| part(g).contains(&PageId::VACANT)) {
            return Err(KvError::NotCached);
        }
        for g in 0..groups {
            if let Err(e) = pool.retain_all(part(g)) {
                for held in 0..g {
                    for &page in part(held) {
                        let released = pool.release(page);
                        debug_assert!(released.is_ok(), "a page retained just now");
                    }
                }
                return Err(e.into());
            }
        }
        let seq = self.create()?;
        for g in 0..groups {
            let start = self.group_start(seq, g as u32);
            let kept = part(g);
            self.rows[start + n - kept.len()..start + n].copy_from_slice(kept);
        }
        let e = &mut self.seqs[seq.row as usize];
        e.pages = n as u32;
        e.tokens = e.pages * PAGE;
        e.last_page = prefix[..n].last().copied().unwrap_or(PageId::VACANT);
        e.window_start = if self.groups.windowed() > 0 {
            window_start as u32
        } else {
            0
        };
        Ok(seq)
    }

    /// Puts `page` in place of the full page at `index` of the sequence's
    /// row in `group`: the prefix cache's deduplication, when it already
    /// holds the same tokens in another page. Takes a reference on `page`,
    /// drops one on the page it replaces.
    pub(crate) fn replace_full_page(
        &mut self,
        seq: SeqId,
        group: u32,
        index: u32,
        page: PageId,
        pool: &mut PagePool<'_>,
    ) -> Result<(), KvError> {
        let e = *self.entry(seq)?;
        if index >= e.pages || (index + 1) * PAGE > e.tokens || group >= self.groups.count() {
            return Err(KvError::PositionOutOfRange { len: e.tokens });
        }
        let at = self.group_start(seq, group) + index as usize;
        let old = self.rows[at];
        if old == page || old == PageId::VACANT {
            return Ok(());
        }
        pool.retain(page)?;
        pool.release(old)?;
        self.rows[at] = page;
        if index + 1 == e.pages && group == 0 {
            self.seqs[seq.row as usize].last_page = page;
        }
        Ok(())
    }

    /// Tokens in the sequence.
    #[inline]
    pub fn len(&self, seq: SeqId) -> Result<u32, SeqError> {
        Ok(self.entry(seq)?.tokens)
    }

    /// Whether the sequence holds no tokens.
    pub fn is_empty(&self, seq: SeqId) -> Result<bool, SeqError> {
        Ok(self.entry(seq)?.tokens == 0)
    }

    /// The sequence's pages in logical order: its used part of the row
    /// (group 0's row when there are several).
    #[inline]
    pub fn pages(&self, seq: SeqId) -> Result<&[PageId], SeqError> {
        let e = self.entry(seq)?;
        let start = self.row_start(seq);
        Ok(&self.rows[start..start + e.pages as usize])
    }

    /// The used part of the sequence's row in `group`: in a windowed group,
    /// [`PageId::NONE`] before [`window_start`](Self::window_start).
    #[inline]
    pub fn group_pages(&self, seq: SeqId, group: u32) -> Result<&[PageId], SeqError> {
        let e = self.entry(seq)?;
        if group >= self.groups.count() {
            return Err(SeqError::UnknownSequence);
        }
        let start = self.group_start(seq, group);
        Ok(&self.rows[start..start + e.pages as usize])
    }

    /// The first page windowed groups still hold for the sequence.
    pub fn window_start(&self, seq: SeqId) -> Result<u32, SeqError> {
        Ok(self.entry(seq)?.window_start)
    }

    /// The page, offset and slot holding token `position` of the sequence.
    #[inline]
    pub fn locate(&self, seq: SeqId, position: u32) -> Result<TokenLocation, SeqError> {
        let e = self.entry(seq)?;
        if position >= e.tokens {
            return Err(SeqError::PositionOutOfRange { len: e.tokens });
        }
        let page = self.rows[self.row_start(seq) + (position / PAGE) as usize];
        let offset = position % PAGE;
        Ok(TokenLocation {
            page,
            offset,
            slot: page.slot(offset),
        })
    }

    /// Writes the slots of positions `first..first + out.len()` into `out`:
    /// where the backend scatters those tokens' keys and values.
    pub fn slot_mapping(&self, seq: SeqId, first: u32, out: &mut [Slot]) -> Result<(), SeqError> {
        self.group_slot_mapping(seq, 0, first, out)
    }

    /// [`slot_mapping`](Self::slot_mapping) in the sequence's row of `group`.
    /// Refused for a windowed position before the window.
    pub fn group_slot_mapping(
        &self,
        seq: SeqId,
        group: u32,
        first: u32,
        out: &mut [Slot],
    ) -> Result<(), SeqError> {
        let e = self.entry(seq)?;
        let end = u64::from(first) + out.len() as u64;
        if end > u64::from(e.tokens) || group >= self.groups.count() {
            return Err(SeqError::PositionOutOfRange { len: e.tokens });
        }
        if self.groups.is_windowed(group) && !out.is_empty() && first / PAGE < e.window_start {
            return Err(SeqError::PositionOutOfRange { len: e.tokens });
        }
        let row = &self.rows[self.group_start(seq, group)..];
        for (position, slot) in (first..).zip(out.iter_mut()) {
            *slot = row[(position / PAGE) as usize].slot(position % PAGE);
        }
        Ok(())
    }

    /// Appends `tokens` tokens to the sequence, taking a fresh page every 16
    /// (in every group).
    ///
    /// If the last page is partly filled and shared with another holder, it is
    /// first replaced by a private copy and the returned [`Appended::copies`]
    /// tell the backend what to copy. Windowed groups first let go of the
    /// pages before the window of the first new token. All pages needed are
    /// checked for up front: on any [`AppendError`] nothing changes.
    #[inline]
    pub fn append<L: EvictionListener + ?Sized>(
        &mut self,
        seq: SeqId,
        tokens: u32,
        pool: &mut PagePool<'_>,
        listener: &mut L,
    ) -> Result<Appended, AppendError> {
        let single = self.groups.count() == 1;
        let e = self
            .entry_mut(seq)
            .map_err(|_| AppendError::UnknownSequence)?;
        let first_position = e.tokens;
        let offset = first_position % PAGE;
        // Fast path, the common decode step: the tokens fit in the sequence's
        // own partly filled last page. No allocation, no copy, and no length
        // check: a row holds whole pages, so tokens that fit the last page fit
        // the row. It is small enough to inline into the caller's loop; the
        // rest is out of line. (The result is built at each return, not up
        // front and copied: the copy's wide loads of narrow stores cost more
        // than the whole path.)
        debug_assert_eq!(e.pages, first_position.div_ceil(PAGE));
        if single
            && offset != 0
            && tokens <= PAGE - offset
            && pool.fill_if_exclusive(e.last_page, offset, tokens)
        {
            e.tokens = first_position + tokens;
            return Ok(Appended {
                first_position,
                tokens,
                pages_added: 0,
                pages_dropped: 0,
                copies: PageCopies::NONE,
            });
        }
        self.append_pages(seq, tokens, pool, listener)
    }

    /// The part of [`append`](Self::append) that takes pages: a fresh page at
    /// each page boundary, or a private copy of a shared last page, in every
    /// group; and that drops pages windows left.
    #[inline(never)]
    fn append_pages<L: EvictionListener + ?Sized>(
        &mut self,
        seq: SeqId,
        tokens: u32,
        pool: &mut PagePool<'_>,
        listener: &mut L,
    ) -> Result<Appended, AppendError> {
        let max_tokens = self.max_tokens_per_sequence();
        // Field by field: a whole-entry copy would wait on the fast path's
        // recent narrow store to `tokens`.
        let entry = self.entry(seq).map_err(|_| AppendError::UnknownSequence)?;
        let (len, pages, window_start) = (entry.tokens, entry.pages, entry.window_start);
        let new_len = len
            .checked_add(tokens)
            .filter(|&t| t <= max_tokens)
            .ok_or(AppendError::SequenceTooLong { max_tokens })?;
        let mut done = Appended {
            first_position: len,
            tokens,
            pages_added: 0,
            pages_dropped: 0,
            copies: PageCopies::NONE,
        };
        if tokens == 0 {
            return Ok(done);
        }
        let groups = self.groups.count();
        let offset = len % PAGE;
        // Windowed rows let go of the pages before the first new token's
        // window (never the last page: a window spans at least one token).
        let keep_from = if self.groups.windowed() > 0 {
            // A window under a page may already have let the last page go
            // (a prefix ending on a page boundary): never back past it.
            self.groups
                .first_needed_page(len)
                .min(pages.saturating_sub(1))
                .max(window_start)
        } else {
            0
        };
        let mut shared = [false; MAX_KV_GROUPS];
        let mut freed_by_drop = 0u32;
        for g in 0..groups {
            let start = self.group_start(seq, g);
            if offset != 0 {
                let last = self.rows[start + pages as usize - 1];
                // A page of the row is always in the pool.
                shared[g as usize] = pool.refcount(last).unwrap_or(0) > 1;
            }
            if self.groups.is_windowed(g) {
                for &page in &self.rows[start + window_start as usize..start + keep_from as usize] {
                    // A page only this row holds becomes free or evictable.
                    if pool.refcount(page) == Ok(1) {
                        freed_by_drop += 1;
                    }
                }
            }
        }
        let fresh = new_len.div_ceil(PAGE) - pages;
        let copies = shared.iter().filter(|&&s| s).count() as u32;
        let needed = fresh * groups + copies;
        let available = pool.available_pages();
        if needed > available + freed_by_drop {
            return Err(AppendError::PoolExhausted { needed, available });
        }

        // Nothing below can fail: every allocation was accounted for above, and
        // allocating never evicts a referenced page.
        let exhausted = AppendError::PoolExhausted { needed, available };
        for g in 0..groups {
            if !self.groups.is_windowed(g) {
                continue;
            }
            let start = self.group_start(seq, g);
            let dropped = &mut self.rows[start + window_start as usize..start + keep_from as usize];
            for slot in dropped.iter_mut() {
                let released = pool.release(*slot);
                debug_assert!(released.is_ok(), "a row held a page it had no reference on");
                *slot = PageId::VACANT;
                done.pages_dropped += 1;
            }
        }
        for g in 0..groups {
            let start = self.group_start(seq, g);
            if shared[g as usize] {
                let src = self.rows[start + pages as usize - 1];
                let dst = pool.take(listener).ok_or(exhausted)?;
                let released = pool.release(src);
                debug_assert!(released.is_ok(), "a row held a page it had no reference on");
                self.rows[start + pages as usize - 1] = dst;
                done.copies.push(PageCopy {
                    src,
                    dst,
                    slots: offset,
                });
            }
            if offset != 0 {
                let last = self.rows[start + pages as usize - 1];
                pool.set_filled(last, (offset + tokens).min(PAGE));
            }
            for i in 0..fresh {
                let page = pool.take(listener).ok_or(exhausted)?;
                let page_start = (pages + i) * PAGE;
                pool.set_filled(page, (new_len - page_start).min(PAGE));
                self.rows[start + (pages + i) as usize] = page;
            }
        }
        done.pages_added = fresh * groups;
        let start = self.row_start(seq);
        let last_page = self.rows[start + (pages + fresh) as usize - 1];
        let entry = &mut self.seqs[seq.row as usize];
        entry.tokens = new_len;
        entry.pages += fresh;
        entry.last_page = last_page;
        if self.groups.windowed() > 0 {
            entry.window_start = keep_from;
        }
        Ok(done)
    }

    /// Starts a new sequence that shares every page of `parent` (each page's
    /// reference count rises by one). The first append into a shared, partly
    /// filled page copies it.
    pub fn fork(&mut self, parent: SeqId, pool: &mut PagePool<'_>) -> Result<SeqId, KvError> {
        let e = *self.entry(parent)?;
        if self.free.is_empty() {
            return Err(KvError::NoFreeSequenceSlot);
        }
        let groups = self.groups.count();
        for g in 0..groups {
            let src = self.group_start(parent, g);
            for &page in self.held(&self.rows[src..src + e.pages as usize]) {
                if pool.refcount(page)? == u32::MAX {
                    return Err(KvError::TooManyReferences);
                }
            }
        }
        let child = self.create()?;
        for g in 0..groups {
            let (src, dst) = (self.group_start(parent, g), self.group_start(child, g));
            for i in 0..e.pages as usize {
                let page = self.rows[src + i];
                if page != PageId::VACANT {
                    pool.retain(page)?;
                }
                self.rows[dst + i] = page;
            }
        }
        let c = &mut self.seqs[child.row as usize];
        c.tokens = e.tokens;
        c.pages = e.pages;
        c.last_page = e.last_page;
        c.window_start = e.window_start;
        Ok(child)
    }

    /// Ends the sequence: drops its reference on every page (windowed groups
    /// first, then group 0's last page first, so deeper pages of a cached
    /// prefix become least recently used before the pages they extend) and
    /// frees its row. The id is stale afterwards.
    pub fn release(&mut self, seq: SeqId, pool: &mut PagePool<'_>) -> Result<(), SeqError> {
        let e = *self.entry(seq)?;
        for g in (0..self.groups.count()).rev() {
            let start = self.group_start(seq, g);
            for slot in self.rows[start..start + e.pages as usize].iter_mut().rev() {
                if *slot != PageId::VACANT {
                    let released = pool.release(*slot);
                    debug_assert!(released.is_ok(), "a row held a page it had no reference on");
                }
                *slot = PageId::VACANT;
            }
        }
        let entry = &mut self.seqs[seq.row as usize];
        *entry = SeqEntry {
            // Odd (live) to even (free): every id of this sequence is stale.
            generation: entry.generation.wrapping_add(1),
            ..SeqEntry::EMPTY
        };
        let freed = self.free.push(self.seqs, seq.row);
        debug_assert!(freed);
        self.active -= 1;
        Ok(())
    }

    /// The entries of a row that hold a page.
    fn held<'r>(&self, row: &'r [PageId]) -> impl Iterator<Item = &'r PageId> {
        row.iter().filter(|&&p| p != PageId::VACANT)
    }

    #[inline]
    fn entry(&self, seq: SeqId) -> Result<&SeqEntry, SeqError> {
        match self.seqs.get(seq.row as usize) {
            Some(e) if e.generation == seq.generation => Ok(e),
            _ => Err(SeqError::UnknownSequence),
        }
    }

    #[inline]
    fn entry_mut(&mut self, seq: SeqId) -> Result<&mut SeqEntry, SeqError> {
        match self.seqs.get_mut(seq.row as usize) {
            Some(e) if e.generation == seq.generation => Ok(e),
            _ => Err(SeqError::UnknownSequence),
        }
    }

    /// Where the sequence's rows start (group 0's).
    #[inline]
    fn row_start(&self, seq: SeqId) -> usize {
        seq.row as usize * self.groups.count() as usize * self.row_len as usize
    }

    /// Where the sequence's row of `group` starts.
    #[inline]
    fn group_start(&self, seq: SeqId, group: u32) -> usize {
        self.row_start(seq) + group as usize * self.row_len as usize
    }
}
