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
        last_page: PageId(PageId::NONE),
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
    /// Fresh pages the sequence gained (not counting a copy-on-write page).
    pub pages_added: u32,
    /// The copy-on-write the backend must run first, if the last page was shared.
    pub copy: Option<PageCopy>,
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
/// let copy = grown.copy.unwrap(); // the shared, half-full page was copied
/// assert_eq!(copy.slots, 4);
/// assert_eq!(table.locate(seq, 17).unwrap().page, copy.src);
/// assert_eq!(table.locate(child, 17).unwrap().page, copy.dst);
/// ```
#[derive(Debug)]
pub struct PageTable<'a> {
    rows: &'a mut [PageId],
    seqs: &'a mut [SeqEntry],
    row_len: u32,
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
        let n = seqs.len();
        if n == 0 || rows.is_empty() {
            return Err(StorageError::Empty);
        }
        if !rows.len().is_multiple_of(n) {
            return Err(StorageError::Mismatched);
        }
        let row_len = rows.len() / n;
        if n >= NIL as usize || row_len as u64 * u64::from(PAGE) > u64::from(u32::MAX) {
            return Err(StorageError::TooLarge);
        }
        rows.fill(PageId(PageId::NONE));
        seqs.fill(SeqEntry::EMPTY);
        let free = Stack::with_all(seqs);
        Ok(Self {
            rows,
            seqs,
            row_len: row_len as u32,
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

    /// Sequences that currently exist.
    pub fn active_sequences(&self) -> u32 {
        self.active
    }

    /// The whole dense table, row after row, as kernels read it. Entries past
    /// a sequence's last page are [`PageId::NONE`].
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
        e.last_page = PageId(PageId::NONE);
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
    /// Fails, changing nothing, if a page is free or unknown, or the prefix is
    /// longer than a row.
    pub fn create_with_prefix(
        &mut self,
        prefix: &[PageId],
        pool: &mut PagePool<'_>,
    ) -> Result<SeqId, KvError> {
        if prefix.len() > self.row_len as usize {
            return Err(KvError::SequenceTooLong {
                max_tokens: self.max_tokens_per_sequence(),
            });
        }
        if self.free.is_empty() {
            return Err(KvError::NoFreeSequenceSlot);
        }
        pool.retain_all(prefix)?;
        let seq = self.create()?;
        let start = self.row_start(seq);
        self.rows[start..start + prefix.len()].copy_from_slice(prefix);
        let e = &mut self.seqs[seq.row as usize];
        e.pages = prefix.len() as u32;
        e.tokens = e.pages * PAGE;
        e.last_page = prefix.last().copied().unwrap_or(PageId(PageId::NONE));
        Ok(seq)
    }

    /// Puts `page` in place of the full page at `index` of the sequence's row:
    /// the prefix cache's deduplication, when it already holds the same
    /// tokens in another page. Takes a reference on `page`, drops one on the
    /// page it replaces.
    pub(crate) fn replace_full_page(
        &mut self,
        seq: SeqId,
        index: u32,
        page: PageId,
        pool: &mut PagePool<'_>,
    ) -> Result<(), KvError> {
        let e = *self.entry(seq)?;
        if index >= e.pages || (index + 1) * PAGE > e.tokens {
            return Err(KvError::PositionOutOfRange { len: e.tokens });
        }
        let at = self.row_start(seq) + index as usize;
        let old = self.rows[at];
        if old == page {
            return Ok(());
        }
        pool.retain(page)?;
        pool.release(old)?;
        self.rows[at] = page;
        if index + 1 == e.pages {
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

    /// The sequence's pages in logical order: its used part of the row.
    #[inline]
    pub fn pages(&self, seq: SeqId) -> Result<&[PageId], SeqError> {
        let e = self.entry(seq)?;
        let start = self.row_start(seq);
        Ok(&self.rows[start..start + e.pages as usize])
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
        let e = self.entry(seq)?;
        let end = u64::from(first) + out.len() as u64;
        if end > u64::from(e.tokens) {
            return Err(SeqError::PositionOutOfRange { len: e.tokens });
        }
        let row = &self.rows[self.row_start(seq)..];
        for (position, slot) in (first..).zip(out.iter_mut()) {
            *slot = row[(position / PAGE) as usize].slot(position % PAGE);
        }
        Ok(())
    }

    /// Appends `tokens` tokens to the sequence, taking a fresh page every 16.
    ///
    /// If the last page is partly filled and shared with another holder, it is
    /// first replaced by a private copy and the returned [`Appended::copy`]
    /// tells the backend what to copy. All pages needed are checked for up
    /// front: on any [`AppendError`] nothing changes.
    #[inline]
    pub fn append<L: EvictionListener + ?Sized>(
        &mut self,
        seq: SeqId,
        tokens: u32,
        pool: &mut PagePool<'_>,
        listener: &mut L,
    ) -> Result<Appended, AppendError> {
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
        if offset != 0
            && tokens <= PAGE - offset
            && pool.fill_if_exclusive(e.last_page, offset, tokens)
        {
            e.tokens = first_position + tokens;
            return Ok(Appended {
                first_position,
                tokens,
                pages_added: 0,
                copy: None,
            });
        }
        self.append_pages(seq, tokens, pool, listener)
    }

    /// The part of [`append`](Self::append) that takes pages: a fresh page at
    /// each page boundary, or a private copy of a shared last page.
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
        let (len, pages) = (entry.tokens, entry.pages);
        let new_len = len
            .checked_add(tokens)
            .filter(|&t| t <= max_tokens)
            .ok_or(AppendError::SequenceTooLong { max_tokens })?;
        let mut done = Appended {
            first_position: len,
            tokens,
            pages_added: 0,
            copy: None,
        };
        if tokens == 0 {
            return Ok(done);
        }
        let offset = len % PAGE;
        let start = self.row_start(seq);
        let shared_last = if offset != 0 {
            let last = self.rows[start + pages as usize - 1];
            // A page of the row is always in the pool.
            (pool.refcount(last).unwrap_or(0) > 1).then_some(last)
        } else {
            None
        };
        let fresh = new_len.div_ceil(PAGE) - pages;
        let needed = fresh + u32::from(shared_last.is_some());
        let available = pool.available_pages();
        if needed > available {
            return Err(AppendError::PoolExhausted { needed, available });
        }

        // Nothing below can fail: every allocation was accounted for above, and
        // allocating never evicts a referenced page.
        let exhausted = AppendError::PoolExhausted { needed, available };
        if let Some(src) = shared_last {
            let dst = pool.take(listener).ok_or(exhausted)?;
            let released = pool.release(src);
            debug_assert!(released.is_ok(), "a row held a page it had no reference on");
            self.rows[start + pages as usize - 1] = dst;
            done.copy = Some(PageCopy {
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
        done.pages_added = fresh;
        let last_page = self.rows[start + (pages + fresh) as usize - 1];
        let entry = &mut self.seqs[seq.row as usize];
        entry.tokens = new_len;
        entry.pages += fresh;
        entry.last_page = last_page;
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
        let src = self.row_start(parent);
        for &page in &self.rows[src..src + e.pages as usize] {
            if pool.refcount(page)? == u32::MAX {
                return Err(KvError::TooManyReferences);
            }
        }
        let child = self.create()?;
        let dst = self.row_start(child);
        for i in 0..e.pages as usize {
            let page = self.rows[src + i];
            pool.retain(page)?;
            self.rows[dst + i] = page;
        }
        let c = &mut self.seqs[child.row as usize];
        c.tokens = e.tokens;
        c.pages = e.pages;
        c.last_page = e.last_page;
        Ok(child)
    }

    /// Ends the sequence: drops its reference on every page (last page first,
    /// so deeper pages of a cached prefix become least recently used before
    /// the pages they extend) and frees its row. The id is stale afterwards.
    pub fn release(&mut self, seq: SeqId, pool: &mut PagePool<'_>) -> Result<(), SeqError> {
        let e = *self.entry(seq)?;
        let start = self.row_start(seq);
        for slot in self.rows[start..start + e.pages as usize].iter_mut().rev() {
            let released = pool.release(*slot);
            debug_assert!(released.is_ok(), "a row held a page it had no reference on");
            *slot = PageId(PageId::NONE);
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

    fn row_start(&self, seq: SeqId) -> usize {
        seq.row as usize * self.row_len as usize
    }
}
