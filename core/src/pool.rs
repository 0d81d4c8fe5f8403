//! The page pool: free list, reference counts and the LRU list of cached pages.
//!
//! Every page is in exactly one of three states:
//!
//! | state        | refcount | list      | holds data |
//! |--------------|----------|-----------|------------|
//! | free         | 0        | free list | no         |
//! | referenced   | ≥ 1      | none      | yes        |
//! | evictable    | 0        | LRU list  | yes, kept because a cache holds it |
//!
//! A referenced page may also carry a cache tag (a prefix cache holds it while
//! sequences run on it). When its last reference goes, a tagged page moves to
//! the most-recently-used end of the LRU list instead of the free list. When
//! the free list is empty, [`PagePool::allocate`] reclaims the least recently
//! used evictable page and tells its owner through an [`EvictionListener`].
//! Referenced pages are never on the LRU list, so a running sequence's pages
//! can never be evicted.
//!
//! Both lists are intrusive (links live in the caller's [`PageEntry`] storage,
//! see [`crate::list`]): the free list a [`Stack`] (an allocation touches only
//! the page it takes), the LRU list a [`List`]. Every operation is O(1) and
//! nothing allocates.

use crate::error::{PageError, PoolExhausted, StorageError};
use crate::geometry::{MAX_PAGES, PAGE_SIZE};
use crate::ids::PageId;
use crate::list::{Link, List, ListNode, Stack, StackNode};
use crate::stats::PoolStats;
use crate::time::Timestamp;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PageState {
    Free,
    Referenced,
    Evictable,
}

/// The pool's bookkeeping for one page. Callers only provide storage for these
/// (`[PageEntry::EMPTY; N]` in a static, or a `Vec`); the pool initialises them.
#[derive(Debug, Clone, Copy)]
pub struct PageEntry {
    refs: u32,
    /// On the free list (`next` only) or the LRU list, never both.
    link: Link,
    tag: u32,
    filled: u8,
    cached: bool,
    state: PageState,
}

impl PageEntry {
    /// An entry ready to be handed to [`PagePool::new`].
    pub const EMPTY: Self = Self {
        refs: 0,
        link: Link::UNLINKED,
        tag: 0,
        filled: 0,
        cached: false,
        state: PageState::Free,
    };
}

impl Default for PageEntry {
    fn default() -> Self {
        Self::EMPTY
    }
}

impl ListNode for PageEntry {
    #[inline]
    fn link(&self) -> &Link {
        &self.link
    }

    #[inline]
    fn link_mut(&mut self) -> &mut Link {
        &mut self.link
    }
}

impl StackNode for PageEntry {
    #[inline]
    fn next(&self) -> u32 {
        self.link.next
    }

    #[inline]
    fn set_next(&mut self, next: u32) {
        self.link.next = next;
    }
}

/// Who caches a page, in the owner's own terms (a radix-tree node index, say).
/// The pool hands it back when it evicts the page.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct CacheTag(pub u32);

/// Told when the pool reclaims an evictable page, so the cache that held it can
/// forget it.
pub trait EvictionListener {
    /// `page` no longer holds the data `tag` cached; it has been reused.
    fn page_evicted(&mut self, page: PageId, tag: CacheTag);
}

/// For pools without a prefix cache: nothing to tell.
impl EvictionListener for () {
    fn page_evicted(&mut self, _page: PageId, _tag: CacheTag) {}
}

#[derive(Debug, Clone, Copy, Default)]
struct Counters {
    allocated: u64,
    freed: u64,
    evictions: u64,
    reclaimed: u64,
}

/// A fixed pool of KV pages over caller-provided storage.
///
/// ```
/// use pagoda_core::{PageEntry, PagePool};
/// let mut storage = [PageEntry::EMPTY; 4];
/// let mut pool = PagePool::new(&mut storage).unwrap();
/// let page = pool.allocate(&mut ()).unwrap();
/// assert_eq!(pool.refcount(page), Ok(1));
/// pool.release(page).unwrap();
/// assert_eq!(pool.free_pages(), 4);
/// ```
#[derive(Debug)]
pub struct PagePool<'a> {
    pages: &'a mut [PageEntry],
    free: Stack,
    lru: List,
    referenced: u32,
    filled_slots: u64,
    counters: Counters,
}

impl<'a> PagePool<'a> {
    /// Builds a pool with one page per entry of `storage`, all free.
    ///
    /// Fails with [`StorageError::Empty`] if `storage` is empty, or
    /// [`StorageError::TooLarge`] if it has more than
    /// [`MAX_PAGES`] entries.
    pub fn new(storage: &'a mut [PageEntry]) -> Result<Self, StorageError> {
        match storage.len() {
            0 => return Err(StorageError::Empty),
            len if len > MAX_PAGES as usize => return Err(StorageError::TooLarge),
            _ => {}
        }
        storage.fill(PageEntry::EMPTY);
        // len ≤ MAX_PAGES < NIL, so every page goes on the free list.
        let free = Stack::with_all(storage);
        Ok(Self {
            pages: storage,
            free,
            lru: List::new(),
            referenced: 0,
            filled_slots: 0,
            counters: Counters::default(),
        })
    }

    /// Pages in the pool.
    #[inline]
    pub fn total_pages(&self) -> u32 {
        self.pages.len() as u32
    }

    /// Pages on the free list.
    #[inline]
    pub fn free_pages(&self) -> u32 {
        self.free.len()
    }

    /// Pages cached but referenced by nobody: reclaimable on demand.
    #[inline]
    pub fn evictable_pages(&self) -> u32 {
        self.lru.len()
    }

    /// Pages referenced by at least one holder.
    #[inline]
    pub fn referenced_pages(&self) -> u32 {
        self.referenced
    }

    /// Pages an allocation can obtain right now: free plus evictable.
    #[inline]
    pub fn available_pages(&self) -> u32 {
        self.free.len() + self.lru.len()
    }

    /// The page's reference count.
    #[inline]
    pub fn refcount(&self, page: PageId) -> Result<u32, PageError> {
        Ok(self.entry(page)?.refs)
    }

    /// The page's cache tag, if a cache holds it.
    pub fn cache_tag(&self, page: PageId) -> Result<Option<CacheTag>, PageError> {
        let e = self.entry(page)?;
        Ok(e.cached.then_some(CacheTag(e.tag)))
    }

    /// Whether the page is on the free list.
    pub fn is_free(&self, page: PageId) -> Result<bool, PageError> {
        Ok(self.entry(page)?.state == PageState::Free)
    }

    /// Takes a page with a reference count of one. Uses the free list first;
    /// when it is empty, evicts the least recently used evictable page and
    /// tells `listener`. Fails with [`PoolExhausted`] when neither has
    /// a page; nothing changes then.
    #[inline]
    pub fn allocate<L: EvictionListener + ?Sized>(
        &mut self,
        listener: &mut L,
    ) -> Result<PageId, PoolExhausted> {
        self.take(listener).ok_or(PoolExhausted {
            needed: 1,
            available: 0,
        })
    }

    /// [`allocate`](Self::allocate) without the error: `None` when no page is
    /// free or evictable. Returns in registers, so callers that checked
    /// [`available_pages`](Self::available_pages) first pay for no error
    /// value on their hot path.
    #[inline]
    pub(crate) fn take<L: EvictionListener + ?Sized>(
        &mut self,
        listener: &mut L,
    ) -> Option<PageId> {
        let index = match self.free.pop(self.pages) {
            Some(index) => index,
            None => self.evict_for_allocation(listener)?,
        };
        self.pages[index as usize] = PageEntry {
            refs: 1,
            state: PageState::Referenced,
            ..PageEntry::EMPTY
        };
        self.referenced += 1;
        self.counters.allocated += 1;
        Some(PageId(index))
    }

    /// Reclaims the least recently used evictable page for an allocation,
    /// telling `listener`. Out of line, so the free-list path stays small.
    #[inline(never)]
    fn evict_for_allocation<L: EvictionListener + ?Sized>(
        &mut self,
        listener: &mut L,
    ) -> Option<u32> {
        let index = self.lru.head()?;
        self.reclaim(index, listener);
        self.counters.evictions += 1;
        crate::log::event!("pagoda: evicted 1 page for allocation");
        Some(index)
    }

    /// Adds a reference to a page that holds data (referenced or evictable).
    /// An evictable page leaves the LRU list: it is in use again.
    #[inline]
    pub fn retain(&mut self, page: PageId) -> Result<(), PageError> {
        let e = self.entry(page)?;
        match e.state {
            PageState::Free => Err(PageError::NotReferenced),
            _ if e.refs == u32::MAX => Err(PageError::TooManyReferences),
            PageState::Referenced => {
                self.pages[page.0 as usize].refs += 1;
                Ok(())
            }
            PageState::Evictable => {
                self.lru.remove(self.pages, page.0);
                let e = &mut self.pages[page.0 as usize];
                e.refs = 1;
                e.state = PageState::Referenced;
                self.referenced += 1;
                Ok(())
            }
        }
    }

    /// Adds a reference to every page in `pages`, or to none: if one cannot
    /// be retained, the ones already taken are dropped again (last first) and
    /// the error returned.
    pub fn retain_all(&mut self, pages: &[PageId]) -> Result<(), PageError> {
        for (i, &page) in pages.iter().enumerate() {
            if let Err(e) = self.retain(page) {
                for &held in pages[..i].iter().rev() {
                    let released = self.release(held);
                    debug_assert!(released.is_ok(), "a page retained just now");
                }
                return Err(e);
            }
        }
        Ok(())
    }

    /// Drops a reference and returns how many remain. A page that reaches zero
    /// goes to the most-recently-used end of the LRU list if a cache holds it,
    /// else back to the free list.
    #[inline]
    pub fn release(&mut self, page: PageId) -> Result<u32, PageError> {
        let e = *self.entry(page)?;
        if e.state != PageState::Referenced {
            return Err(PageError::NotReferenced);
        }
        let refs = e.refs - 1;
        if refs > 0 {
            self.pages[page.0 as usize].refs = refs;
            return Ok(refs);
        }
        self.referenced -= 1;
        if e.cached {
            let e = &mut self.pages[page.0 as usize];
            e.refs = 0;
            e.state = PageState::Evictable;
            self.lru.push_back(self.pages, page.0);
        } else {
            self.push_free(page.0);
            self.counters.freed += 1;
        }
        Ok(0)
    }

    /// Marks a referenced page as held by a cache under `tag`. When its last
    /// reference goes it stays, evictable, instead of being freed.
    pub fn set_cache_tag(&mut self, page: PageId, tag: CacheTag) -> Result<(), PageError> {
        if self.entry(page)?.state != PageState::Referenced {
            return Err(PageError::NotReferenced);
        }
        let e = &mut self.pages[page.0 as usize];
        e.cached = true;
        e.tag = tag.0;
        Ok(())
    }

    /// The cache lets go of a page. An evictable page is freed at once; a
    /// referenced one is freed when its last reference goes. A free page is
    /// left as it is.
    pub fn clear_cache_tag(&mut self, page: PageId) -> Result<(), PageError> {
        match self.entry(page)?.state {
            PageState::Free => {}
            PageState::Referenced => self.pages[page.0 as usize].cached = false,
            PageState::Evictable => {
                self.lru.remove(self.pages, page.0);
                self.push_free(page.0);
                self.counters.freed += 1;
            }
        }
        Ok(())
    }

    /// Marks an evictable page as used now: it moves to the most-recently-used
    /// end of the LRU list. Referenced pages cannot be evicted and are left as
    /// they are.
    #[inline]
    pub fn touch(&mut self, page: PageId) -> Result<(), PageError> {
        if self.entry(page)?.state == PageState::Evictable && self.lru.tail() != Some(page.0) {
            self.lru.remove(self.pages, page.0);
            self.lru.push_back(self.pages, page.0);
        }
        Ok(())
    }

    /// Whether the evictable pages among `pages` are already the most
    /// recently used ones, in that order (most recent first), so touching
    /// them from last to first would change nothing. Reading the order is
    /// cheaper than rewriting it, and a hot prefix matched again and again
    /// is usually already there.
    pub fn is_most_recent(&self, pages: &[PageId]) -> bool {
        let mut cursor = self.lru.tail();
        for page in pages {
            match self.pages.get(page.0 as usize) {
                Some(e) if e.state == PageState::Evictable => {
                    if cursor != Some(page.0) {
                        return false;
                    }
                    cursor = List::prev(self.pages, page.0);
                }
                Some(_) => {}
                None => return false,
            }
        }
        true
    }

    /// The least recently used evictable page: the next one an allocation
    /// would reclaim.
    pub fn least_recently_used(&self) -> Option<PageId> {
        self.lru.head().map(PageId)
    }

    /// Evicts up to `max` least-recently-used evictable pages onto the free
    /// list, telling `listener` of each, and returns how many were evicted. It
    /// counts as one eviction in the metrics.
    pub fn evict<L: EvictionListener + ?Sized>(&mut self, max: u32, listener: &mut L) -> u32 {
        let mut evicted = 0;
        while evicted < max {
            let Some(index) = self.lru.head() else {
                break;
            };
            self.reclaim(index, listener);
            self.push_free(index);
            evicted += 1;
        }
        if evicted > 0 {
            self.counters.evictions += 1;
            crate::log::event!("pagoda: evicted {=u32} pages", evicted);
        }
        evicted
    }

    /// A snapshot of the pool's metrics at `now`.
    pub fn stats(&self, now: Timestamp) -> PoolStats {
        PoolStats {
            at: now,
            total_pages: self.total_pages(),
            free_pages: self.free.len(),
            referenced_pages: self.referenced,
            evictable_pages: self.lru.len(),
            filled_slots: self.filled_slots,
            allocated_total: self.counters.allocated,
            freed_total: self.counters.freed,
            evictions: self.counters.evictions,
            pages_reclaimed: self.counters.reclaimed,
        }
    }

    /// How many of the page's slots hold tokens.
    pub fn filled_slots(&self, page: PageId) -> Result<u32, PageError> {
        Ok(u32::from(self.entry(page)?.filled))
    }

    /// If exactly one holder references the page, records that `more` slots
    /// after its first `filled` now hold tokens and returns true; else changes
    /// nothing. The append fast path: one lookup, no read of the old count.
    #[inline]
    pub(crate) fn fill_if_exclusive(&mut self, page: PageId, filled: u32, more: u32) -> bool {
        match self.pages.get_mut(page.0 as usize) {
            Some(e) if e.refs == 1 => {
                debug_assert_eq!(u32::from(e.filled), filled);
                debug_assert!((filled + more) as usize <= PAGE_SIZE);
                e.filled = (filled + more) as u8;
                self.filled_slots += u64::from(more);
                true
            }
            _ => false,
        }
    }

    /// Records how many of a referenced page's slots hold tokens (for the
    /// fragmentation metric). Callers are the page table and the prefix cache.
    #[inline]
    pub(crate) fn set_filled(&mut self, page: PageId, filled: u32) {
        debug_assert!(filled as usize <= PAGE_SIZE);
        let e = &mut self.pages[page.0 as usize];
        debug_assert_eq!(e.state, PageState::Referenced);
        self.filled_slots = self.filled_slots - u64::from(e.filled) + u64::from(filled);
        e.filled = filled as u8;
    }

    #[inline]
    fn entry(&self, page: PageId) -> Result<&PageEntry, PageError> {
        self.pages
            .get(page.0 as usize)
            .ok_or(PageError::UnknownPage)
    }

    /// Takes an evictable page off the LRU list and tells its owner. The caller
    /// decides where the page goes next.
    fn reclaim<L: EvictionListener + ?Sized>(&mut self, index: u32, listener: &mut L) {
        self.lru.remove(self.pages, index);
        let e = &mut self.pages[index as usize];
        let tag = CacheTag(e.tag);
        e.cached = false;
        self.filled_slots -= u64::from(e.filled);
        e.filled = 0;
        self.counters.freed += 1;
        self.counters.reclaimed += 1;
        listener.page_evicted(PageId(index), tag);
    }

    /// Puts a page on the free list, dropping whatever it held.
    #[inline]
    fn push_free(&mut self, index: u32) {
        self.filled_slots -= u64::from(self.pages[index as usize].filled);
        self.pages[index as usize] = PageEntry::EMPTY;
        let pushed = self.free.push(self.pages, index);
        debug_assert!(pushed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocation_is_lifo_so_recently_freed_pages_stay_hot() {
        let mut storage = [PageEntry::EMPTY; 3];
        let mut pool = PagePool::new(&mut storage).unwrap();
        let a = pool.allocate(&mut ()).unwrap();
        let b = pool.allocate(&mut ()).unwrap();
        pool.release(a).unwrap();
        assert_eq!(pool.allocate(&mut ()).unwrap(), a);
        assert_ne!(a, b);
    }

    #[test]
    fn empty_storage_is_refused() {
        let mut storage: [PageEntry; 0] = [];
        assert_eq!(
            PagePool::new(&mut storage).unwrap_err(),
            StorageError::Empty
        );
    }
}
