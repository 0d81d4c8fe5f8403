//! One test per scenario of the paged-KV-cache spec
//! (`shared/spec/001_b89b0fcc47323d4e.txt`), named `requirement::scenario`,
//! plus the typed errors the issue asks for. Kernel integration is tested with
//! the backends.

use pagoda_core::{
    AppendError, CacheTag, EvictionListener, GeometryError, KvDtype, KvError, KvGeometry,
    PageEntry, PageError, PageId, PagePool, PageTable, PoolExhausted, SeqEntry, SeqError, SeqId,
    StorageError, TableFull, Timestamp, PAGE_SIZE,
};

/// Owns the storage a pool and a table run over.
struct Storage {
    pages: Vec<PageEntry>,
    rows: Vec<PageId>,
    seqs: Vec<SeqEntry>,
}

impl Storage {
    fn new(pages: usize, max_seqs: usize, pages_per_seq: usize) -> Self {
        Self {
            pages: vec![PageEntry::EMPTY; pages],
            rows: vec![PageId::from_index(0); max_seqs * pages_per_seq],
            seqs: vec![SeqEntry::EMPTY; max_seqs],
        }
    }

    fn split(&mut self) -> (PagePool<'_>, PageTable<'_>) {
        (
            PagePool::new(&mut self.pages).unwrap(),
            PageTable::new(&mut self.rows, &mut self.seqs).unwrap(),
        )
    }
}

/// Records what the pool evicted.
#[derive(Default)]
struct Evictions(Vec<(PageId, CacheTag)>);

impl EvictionListener for Evictions {
    fn page_evicted(&mut self, page: PageId, tag: CacheTag) {
        self.0.push((page, tag));
    }
}

/// Makes `page` cached under `tag` and unreferenced, as a prefix cache would.
fn cache_and_release(pool: &mut PagePool<'_>, page: PageId, tag: u32) {
    pool.set_cache_tag(page, CacheTag(tag)).unwrap();
    pool.release(page).unwrap();
}

mod page_based_allocation {
    use super::*;

    #[test]
    fn allocate_new_page() {
        let mut s = Storage::new(4, 1, 4);
        let (mut pool, mut table) = s.split();
        let seq = table.create().unwrap();
        let done = table.append(seq, 1, &mut pool, &mut ()).unwrap();
        assert_eq!(done.pages_added, 1);
        assert_eq!(pool.free_pages(), 3);
        assert_eq!(table.pages(seq).unwrap().len(), 1);
    }

    #[test]
    fn page_size_consistency() {
        assert_eq!(PAGE_SIZE, 16);
        let g = KvGeometry::new(2, 4, 64, KvDtype::F16).unwrap();
        assert_eq!(g.page_shape(), [4, 16, 64]);
        // K and V, every layer, [kv_heads, 16, head_dim] elements of 2 bytes.
        assert_eq!(g.bytes_per_page(), 2 * 2 * 4 * 16 * 64 * 2);
        // A page takes exactly 16 tokens: the 17th opens a second page.
        let mut s = Storage::new(4, 1, 4);
        let (mut pool, mut table) = s.split();
        let seq = table.create().unwrap();
        table.append(seq, 16, &mut pool, &mut ()).unwrap();
        assert_eq!(table.pages(seq).unwrap().len(), 1);
        table.append(seq, 1, &mut pool, &mut ()).unwrap();
        assert_eq!(table.pages(seq).unwrap().len(), 2);
    }

    #[test]
    fn multiple_pages_per_sequence() {
        let mut s = Storage::new(8, 1, 8);
        let (mut pool, mut table) = s.split();
        let seq = table.create().unwrap();
        let done = table.append(seq, 50, &mut pool, &mut ()).unwrap();
        assert_eq!(done.pages_added, 4);
        let pages = table.pages(seq).unwrap();
        assert_eq!(pages.len(), 4);
        let mut distinct = pages.to_vec();
        distinct.sort();
        distinct.dedup();
        assert_eq!(
            distinct.len(),
            4,
            "each logical page has its own physical page"
        );
    }
}

mod memory_pool_management {
    use super::*;

    #[test]
    fn initialize_memory_pool() {
        let g = KvGeometry::new(30, 3, 64, KvDtype::F16).unwrap();
        let budget = 64 << 20;
        let pages = g.pages_for_budget(budget).unwrap();
        assert_eq!(u64::from(pages), budget / g.bytes_per_page());
        assert!(u64::from(pages) * g.bytes_per_page() <= budget);
        assert!(u64::from(pages + 1) * g.bytes_per_page() > budget);
        let mut storage = vec![PageEntry::EMPTY; pages as usize];
        let pool = PagePool::new(&mut storage).unwrap();
        assert_eq!(pool.total_pages(), pages);
        assert_eq!(pool.free_pages(), pages);
    }

    #[test]
    fn allocate_from_pool() {
        let mut s = Storage::new(4, 2, 2);
        let (mut pool, mut table) = s.split();
        let seq = table.create().unwrap();
        table.append(seq, 20, &mut pool, &mut ()).unwrap();
        for &page in table.pages(seq).unwrap() {
            assert_eq!(pool.refcount(page), Ok(1));
            assert_eq!(pool.is_free(page), Ok(false));
        }
        assert_eq!(pool.free_pages(), 2);
    }

    #[test]
    fn return_pages_to_pool() {
        let mut s = Storage::new(4, 2, 2);
        let (mut pool, mut table) = s.split();
        let seq = table.create().unwrap();
        table.append(seq, 32, &mut pool, &mut ()).unwrap();
        let pages = table.pages(seq).unwrap().to_vec();
        table.release(seq, &mut pool).unwrap();
        assert_eq!(pool.free_pages(), 4);
        for page in pages {
            assert_eq!(pool.is_free(page), Ok(true));
        }
        // An evicted page returns to the pool as well.
        let page = pool.allocate(&mut ()).unwrap();
        cache_and_release(&mut pool, page, 7);
        assert_eq!(pool.free_pages(), 3);
        let mut ev = Evictions::default();
        assert_eq!(pool.evict(1, &mut ev), 1);
        assert_eq!(ev.0, vec![(page, CacheTag(7))]);
        assert_eq!(pool.free_pages(), 4);
        // Reused afterwards.
        for _ in 0..2 {
            let seq = table.create().unwrap();
            table.append(seq, 32, &mut pool, &mut ()).unwrap();
        }
        assert_eq!(pool.free_pages(), 0);
    }

    #[test]
    fn pool_exhaustion() {
        let mut s = Storage::new(2, 2, 2);
        let (mut pool, mut table) = s.split();
        // A finished sequence's pages stay cached.
        let old = table.create().unwrap();
        table.append(old, 32, &mut pool, &mut ()).unwrap();
        let cached = table.pages(old).unwrap().to_vec();
        for (i, &p) in cached.iter().enumerate() {
            pool.set_cache_tag(p, CacheTag(i as u32)).unwrap();
        }
        table.release(old, &mut pool).unwrap();
        assert_eq!(pool.free_pages(), 0);
        assert_eq!(pool.evictable_pages(), 2);
        // The free pool is empty: allocating triggers eviction.
        let mut ev = Evictions::default();
        let seq = table.create().unwrap();
        table.append(seq, 1, &mut pool, &mut ev).unwrap();
        assert_eq!(ev.0.len(), 1);
        assert_eq!(pool.stats(Timestamp(0)).evictions, 1);
    }
}

mod page_table_management {
    use super::*;

    #[test]
    fn create_page_table_entry() {
        let mut s = Storage::new(4, 2, 2);
        let (mut pool, mut table) = s.split();
        let seq = table.create().unwrap();
        table.append(seq, 5, &mut pool, &mut ()).unwrap();
        let page = table.pages(seq).unwrap()[0];
        let row = seq.row() as usize * 2;
        assert_eq!(table.block_table()[row], page);
        assert_eq!(
            table.block_table()[row + 1],
            PageId::from_index(PageId::NONE)
        );
        for pos in 0..5 {
            assert_eq!(table.locate(seq, pos).unwrap().page, page);
        }
    }

    #[test]
    fn lookup_token_position() {
        let mut s = Storage::new(8, 1, 8);
        let (mut pool, mut table) = s.split();
        let seq = table.create().unwrap();
        table.append(seq, 40, &mut pool, &mut ()).unwrap();
        let pages = table.pages(seq).unwrap().to_vec();
        for pos in 0..40u32 {
            let at = table.locate(seq, pos).unwrap();
            assert_eq!(at.page, pages[pos as usize / 16]);
            assert_eq!(at.offset, pos % 16);
            assert_eq!(
                at.slot.0,
                u64::from(at.page.index()) * 16 + u64::from(pos % 16)
            );
            assert_eq!(at.slot.page(), at.page);
            assert_eq!(at.slot.offset(), at.offset);
        }
        let mut slots = [pagoda_core::Slot(0); 10];
        table.slot_mapping(seq, 12, &mut slots).unwrap();
        for (i, slot) in slots.iter().enumerate() {
            assert_eq!(*slot, table.locate(seq, 12 + i as u32).unwrap().slot);
        }
        assert_eq!(
            table.locate(seq, 40),
            Err(SeqError::PositionOutOfRange { len: 40 })
        );
        assert_eq!(
            table.slot_mapping(seq, 35, &mut slots),
            Err(SeqError::PositionOutOfRange { len: 40 })
        );
    }

    #[test]
    fn update_page_table() {
        let mut s = Storage::new(8, 1, 8);
        let (mut pool, mut table) = s.split();
        let seq = table.create().unwrap();
        table.append(seq, 16, &mut pool, &mut ()).unwrap();
        let first = table.pages(seq).unwrap().to_vec();
        let done = table.append(seq, 17, &mut pool, &mut ()).unwrap();
        assert_eq!(done.first_position, 16);
        assert_eq!(done.pages_added, 2);
        let now = table.pages(seq).unwrap();
        assert_eq!(now.len(), 3);
        assert_eq!(now[0], first[0], "existing mappings are kept");
        assert_eq!(table.len(seq), Ok(33));
    }
}

mod page_sharing {
    use super::*;

    #[test]
    fn share_prefix_pages() {
        let mut s = Storage::new(8, 2, 4);
        let (mut pool, mut table) = s.split();
        let a = table.create().unwrap();
        table.append(a, 32, &mut pool, &mut ()).unwrap();
        let b = table.fork(a, &mut pool).unwrap();
        assert_eq!(table.pages(a).unwrap(), table.pages(b).unwrap());
        assert_eq!(pool.free_pages(), 6, "sharing takes no new pages");
        // Both grow past the shared, full pages onto private ones.
        table.append(a, 1, &mut pool, &mut ()).unwrap();
        table.append(b, 1, &mut pool, &mut ()).unwrap();
        assert_eq!(table.pages(a).unwrap()[..2], table.pages(b).unwrap()[..2]);
        assert_ne!(table.pages(a).unwrap()[2], table.pages(b).unwrap()[2]);
    }

    #[test]
    fn reference_counting() {
        let mut s = Storage::new(8, 3, 4);
        let (mut pool, mut table) = s.split();
        let a = table.create().unwrap();
        table.append(a, 20, &mut pool, &mut ()).unwrap();
        let b = table.fork(a, &mut pool).unwrap();
        let c = table.fork(b, &mut pool).unwrap();
        let pages = table.pages(a).unwrap().to_vec();
        for &p in &pages {
            assert_eq!(pool.refcount(p), Ok(3));
        }
        table.release(a, &mut pool).unwrap();
        table.release(c, &mut pool).unwrap();
        for &p in &pages {
            assert_eq!(pool.refcount(p), Ok(1), "still held by b");
            assert_eq!(pool.is_free(p), Ok(false));
        }
        table.release(b, &mut pool).unwrap();
        for &p in &pages {
            assert_eq!(pool.is_free(p), Ok(true));
        }
    }

    #[test]
    fn appending_nothing_changes_nothing() {
        let mut s = Storage::new(8, 2, 4);
        let (mut pool, mut table) = s.split();
        let a = table.create().unwrap();
        let none = table.append(a, 0, &mut pool, &mut ()).unwrap();
        assert_eq!((none.pages_added, none.copies.first()), (0, None));
        assert_eq!(table.pages(a).unwrap().len(), 0);
        table.append(a, 20, &mut pool, &mut ()).unwrap();
        let b = table.fork(a, &mut pool).unwrap();
        let shared_last = table.pages(a).unwrap()[1];
        // No token to write, so the shared partial page is not copied.
        let none = table.append(b, 0, &mut pool, &mut ()).unwrap();
        assert_eq!(
            (none.first_position, none.pages_added, none.copies.first()),
            (20, 0, None)
        );
        assert_eq!(table.pages(b).unwrap()[1], shared_last);
        assert_eq!(pool.refcount(shared_last), Ok(2));
        assert_eq!(pool.free_pages(), 6);
    }

    #[test]
    fn copy_on_write() {
        let mut s = Storage::new(8, 2, 4);
        let (mut pool, mut table) = s.split();
        let a = table.create().unwrap();
        table.append(a, 20, &mut pool, &mut ()).unwrap();
        let b = table.fork(a, &mut pool).unwrap();
        let shared_last = table.pages(a).unwrap()[1];
        let done = table.append(b, 3, &mut pool, &mut ()).unwrap();
        let copy = done
            .copies
            .first()
            .expect("the shared last page must be copied first");
        assert_eq!(copy.src, shared_last);
        assert_eq!(copy.slots, 4, "the 4 tokens already in the page");
        assert_eq!(table.pages(b).unwrap()[1], copy.dst);
        assert_eq!(
            table.pages(a).unwrap()[1],
            shared_last,
            "a keeps the original"
        );
        assert_eq!(pool.refcount(shared_last), Ok(1));
        assert_eq!(pool.refcount(copy.dst), Ok(1));
        assert_eq!(table.len(a), Ok(20));
        assert_eq!(table.len(b), Ok(23));
        // Now private: the next append copies nothing.
        assert_eq!(
            table
                .append(b, 1, &mut pool, &mut ())
                .unwrap()
                .copies
                .first(),
            None
        );
        // A shared page that is full needs no copy: new tokens go to a new page.
        let c = table.create();
        assert_eq!(c, Err(TableFull));
        table.release(b, &mut pool).unwrap();
        table.append(a, 12, &mut pool, &mut ()).unwrap();
        let b = table.fork(a, &mut pool).unwrap();
        let done = table.append(b, 1, &mut pool, &mut ()).unwrap();
        assert_eq!(done.copies.first(), None);
        assert_eq!(done.pages_added, 1);
    }
}

mod memory_efficiency_metrics {
    use super::*;

    #[test]
    fn report_cache_utilization() {
        let mut s = Storage::new(10, 2, 4);
        let (mut pool, mut table) = s.split();
        let seq = table.create().unwrap();
        table.append(seq, 40, &mut pool, &mut ()).unwrap();
        let stats = pool.stats(Timestamp(0));
        assert_eq!(stats.pages_in_use(), 3);
        assert_eq!(stats.total_pages, 10);
        assert!((stats.utilization_percent() - 30.0).abs() < 1e-9);
    }

    #[test]
    fn track_fragmentation() {
        let mut s = Storage::new(10, 3, 4);
        let (mut pool, mut table) = s.split();
        let a = table.create().unwrap();
        table.append(a, 18, &mut pool, &mut ()).unwrap(); // 2 pages, 14 unused
        let b = table.create().unwrap();
        table.append(b, 16, &mut pool, &mut ()).unwrap(); // 1 full page
        let stats = pool.stats(Timestamp(0));
        assert_eq!(stats.unused_slots(), 14);
        assert!((stats.fragmentation_percent() - 14.0 * 100.0 / 48.0).abs() < 1e-9);
        // A forked, shared partial page counts once; its copy counts too.
        let c = table.fork(a, &mut pool).unwrap();
        assert_eq!(pool.stats(Timestamp(0)).unused_slots(), 14);
        table.append(c, 1, &mut pool, &mut ()).unwrap();
        assert_eq!(pool.stats(Timestamp(0)).unused_slots(), 14 + 13);
        for seq in [a, b, c] {
            table.release(seq, &mut pool).unwrap();
        }
        assert_eq!(pool.stats(Timestamp(0)).unused_slots(), 0);
    }

    #[test]
    fn monitor_page_allocation_rate() {
        let mut s = Storage::new(64, 4, 16);
        let (mut pool, mut table) = s.split();
        let before = pool.stats(Timestamp::from_millis(1_000));
        let seq = table.create().unwrap();
        table.append(seq, 160, &mut pool, &mut ()).unwrap(); // 10 pages
        table.release(seq, &mut pool).unwrap(); // 10 freed
        let seq = table.create().unwrap();
        table.append(seq, 64, &mut pool, &mut ()).unwrap(); // 4 more
        let after = pool.stats(Timestamp::from_millis(3_000));
        let rates = after.rates_since(&before).unwrap();
        assert!((rates.allocated_per_sec - 7.0).abs() < 1e-9);
        assert!((rates.freed_per_sec - 5.0).abs() < 1e-9);
        assert_eq!(after.rates_since(&after), None, "no time, no rate");
    }
}

mod eviction_policy {
    use super::*;

    #[test]
    fn lru_eviction() {
        let mut storage = vec![PageEntry::EMPTY; 4];
        let mut pool = PagePool::new(&mut storage).unwrap();
        let pages: Vec<_> = (0..4).map(|_| pool.allocate(&mut ()).unwrap()).collect();
        for (i, &p) in pages.iter().enumerate() {
            cache_and_release(&mut pool, p, i as u32);
        }
        // Use page 0 again: page 1 becomes the least recently used.
        pool.touch(pages[0]).unwrap();
        let mut ev = Evictions::default();
        for _ in 0..4 {
            pool.allocate(&mut ev).unwrap();
        }
        let order: Vec<_> = ev.0.iter().map(|&(p, _)| p).collect();
        assert_eq!(order, vec![pages[1], pages[2], pages[3], pages[0]]);
        assert_eq!(ev.0[0].1, CacheTag(1), "the owner is told which entry went");
    }

    #[test]
    fn most_recent_order_is_read_without_rewriting() {
        let mut storage = vec![PageEntry::EMPTY; 5];
        let mut pool = PagePool::new(&mut storage).unwrap();
        let pages: Vec<_> = (0..5).map(|_| pool.allocate(&mut ()).unwrap()).collect();
        // Page 4 stays referenced: it is not on the LRU list at all.
        for (i, &p) in pages[..4].iter().enumerate() {
            cache_and_release(&mut pool, p, i as u32);
        }
        // Released 0, 1, 2, 3: most recent first is 3, 2, 1, 0.
        assert!(pool.is_most_recent(&[pages[3], pages[2]]));
        assert!(pool.is_most_recent(&[pages[3], pages[4], pages[2], pages[1]]));
        assert!(!pool.is_most_recent(&[pages[2], pages[3]]));
        assert!(!pool.is_most_recent(&[pages[3], pages[1]]));
        assert!(pool.is_most_recent(&[]));
        assert!(!pool.is_most_recent(&[PageId::from_index(99)]));
        // Touching leaf first makes the path the most recent, root last.
        for &p in [pages[0], pages[1]].iter().rev() {
            pool.touch(p).unwrap();
        }
        assert!(pool.is_most_recent(&[pages[0], pages[1], pages[3]]));
        let mut ev = Evictions::default();
        for _ in 0..4 {
            pool.allocate(&mut ev).unwrap();
        }
        let order: Vec<_> = ev.0.iter().map(|&(p, _)| p).collect();
        assert_eq!(order, vec![pages[2], pages[3], pages[1], pages[0]]);
    }

    #[test]
    fn preserve_active_sequences() {
        let mut s = Storage::new(4, 2, 4);
        let (mut pool, mut table) = s.split();
        let running = table.create().unwrap();
        table.append(running, 32, &mut pool, &mut ()).unwrap();
        // The running sequence's pages are cached (by a prefix cache) too.
        for (i, &p) in table.pages(running).unwrap().to_vec().iter().enumerate() {
            pool.set_cache_tag(p, CacheTag(i as u32)).unwrap();
        }
        let other = table.create().unwrap();
        table.append(other, 32, &mut pool, &mut ()).unwrap();
        let mut ev = Evictions::default();
        assert_eq!(
            pool.evict(u32::MAX, &mut ev),
            0,
            "referenced pages never evicted"
        );
        let err = table.append(other, 1, &mut pool, &mut ev).unwrap_err();
        assert_eq!(
            err,
            AppendError::PoolExhausted {
                needed: 1,
                available: 0
            }
        );
        assert!(ev.0.is_empty());
        assert_eq!(
            table.len(other),
            Ok(32),
            "the failed append changed nothing"
        );
    }

    #[test]
    fn eviction_metrics() {
        let mut storage = vec![PageEntry::EMPTY; 6];
        let mut pool = PagePool::new(&mut storage).unwrap();
        for i in 0..6 {
            let p = pool.allocate(&mut ()).unwrap();
            cache_and_release(&mut pool, p, i);
        }
        assert_eq!(pool.evict(3, &mut ()), 3);
        for _ in 0..3 {
            pool.allocate(&mut ()).unwrap(); // from the free list: no eviction
        }
        pool.allocate(&mut ()).unwrap(); // evicts one
        let stats = pool.stats(Timestamp(0));
        assert_eq!(stats.evictions, 2, "one evict() call and one allocation");
        assert_eq!(stats.pages_reclaimed, 4);
    }
}

mod errors {
    use super::*;

    #[test]
    fn bad_geometry_is_a_typed_error() {
        assert_eq!(
            KvGeometry::new(0, 1, 64, KvDtype::F32),
            Err(GeometryError::ZeroDimension)
        );
        assert_eq!(
            KvGeometry::new(1, 0, 64, KvDtype::F32),
            Err(GeometryError::ZeroDimension)
        );
        assert_eq!(
            KvGeometry::new(1, 1, 0, KvDtype::F32),
            Err(GeometryError::ZeroDimension)
        );
        assert_eq!(
            KvGeometry::new(u32::MAX, u32::MAX, u32::MAX, KvDtype::F32),
            Err(GeometryError::Overflow)
        );
        let g = KvGeometry::new(1, 1, 64, KvDtype::F32).unwrap();
        assert_eq!(
            g.pages_for_budget(g.bytes_per_page() - 1),
            Err(GeometryError::BudgetBelowOnePage)
        );
        assert_eq!(
            g.pages_for_budget(0),
            Err(GeometryError::BudgetBelowOnePage)
        );
        assert_eq!(
            g.pages_for_budget(u64::MAX),
            Err(GeometryError::TooManyPages)
        );
        assert!(GeometryError::Overflow.to_string().contains("overflow"));
    }

    #[test]
    fn bad_storage_is_a_typed_error() {
        let mut no_pages: Vec<PageEntry> = Vec::new();
        assert_eq!(
            PagePool::new(&mut no_pages).unwrap_err(),
            StorageError::Empty
        );
        let mut rows = vec![PageId::from_index(0); 7];
        let mut seqs = vec![SeqEntry::EMPTY; 2];
        assert_eq!(
            PageTable::new(&mut rows, &mut seqs).unwrap_err(),
            StorageError::Mismatched,
            "7 pages are not a whole number of 2 rows"
        );
        let mut rows: Vec<PageId> = Vec::new();
        assert_eq!(
            PageTable::new(&mut rows, &mut seqs).unwrap_err(),
            StorageError::Empty
        );
    }

    #[test]
    fn unknown_and_stale_sequences_are_refused() {
        let mut s = Storage::new(4, 1, 4);
        let (mut pool, mut table) = s.split();
        let seq = table.create().unwrap();
        table.release(seq, &mut pool).unwrap();
        let reused = table.create().unwrap();
        assert_eq!(reused.row(), seq.row());
        assert_eq!(table.len(seq), Err(SeqError::UnknownSequence));
        assert_eq!(
            table.append(seq, 1, &mut pool, &mut ()),
            Err(AppendError::UnknownSequence)
        );
        assert_eq!(
            table.release(seq, &mut pool),
            Err(SeqError::UnknownSequence)
        );
        assert_eq!(table.fork(seq, &mut pool), Err(KvError::UnknownSequence));
        assert_eq!(table.locate(seq, 0), Err(SeqError::UnknownSequence));
        assert_eq!(table.len(reused), Ok(0));
    }

    #[test]
    fn sequence_longer_than_its_row_is_refused() {
        let mut s = Storage::new(8, 1, 2);
        let (mut pool, mut table) = s.split();
        let seq = table.create().unwrap();
        assert_eq!(
            table.append(seq, 33, &mut pool, &mut ()),
            Err(AppendError::SequenceTooLong { max_tokens: 32 })
        );
        table.append(seq, 32, &mut pool, &mut ()).unwrap();
        assert_eq!(
            table.append(seq, u32::MAX, &mut pool, &mut ()),
            Err(AppendError::SequenceTooLong { max_tokens: 32 })
        );
        assert_eq!(table.len(seq), Ok(32));
        assert_eq!(pool.free_pages(), 6);
    }

    #[test]
    fn exhausted_pool_changes_nothing() {
        let mut s = Storage::new(3, 2, 4);
        let (mut pool, mut table) = s.split();
        let a = table.create().unwrap();
        table.append(a, 20, &mut pool, &mut ()).unwrap();
        let b = table.fork(a, &mut pool).unwrap();
        // b needs a copy of the shared last page plus two fresh pages: 3 > 1.
        assert_eq!(
            table.append(b, 30, &mut pool, &mut ()),
            Err(AppendError::PoolExhausted {
                needed: 3,
                available: 1
            })
        );
        assert_eq!(table.pages(a).unwrap(), table.pages(b).unwrap());
        assert_eq!(pool.free_pages(), 1);
        assert_eq!(table.len(b), Ok(20));
    }

    #[test]
    fn pool_misuse_is_refused() {
        let mut storage = vec![PageEntry::EMPTY; 2];
        let mut pool = PagePool::new(&mut storage).unwrap();
        let free = PageId::from_index(1);
        let outside = PageId::from_index(2);
        assert_eq!(pool.release(free), Err(PageError::NotReferenced));
        assert_eq!(pool.retain(free), Err(PageError::NotReferenced));
        assert_eq!(
            pool.set_cache_tag(free, CacheTag(0)),
            Err(PageError::NotReferenced)
        );
        assert_eq!(pool.refcount(outside), Err(PageError::UnknownPage));
        assert_eq!(pool.release(outside), Err(PageError::UnknownPage));
        assert_eq!(pool.touch(outside), Err(PageError::UnknownPage));
        let a = pool.allocate(&mut ()).unwrap();
        let _b = pool.allocate(&mut ()).unwrap();
        assert_eq!(
            pool.allocate(&mut ()),
            Err(PoolExhausted {
                needed: 1,
                available: 0
            })
        );
        pool.release(a).unwrap();
        assert_eq!(pool.release(a), Err(PageError::NotReferenced));
        assert_eq!(pool.free_pages(), 1);
    }

    #[test]
    fn retain_all_takes_every_reference_or_none() {
        let mut storage = vec![PageEntry::EMPTY; 4];
        let mut pool = PagePool::new(&mut storage).unwrap();
        let a = pool.allocate(&mut ()).unwrap();
        let b = pool.allocate(&mut ()).unwrap();
        let free = PageId::from_index(3);
        assert_eq!(pool.is_free(free), Ok(true));
        assert_eq!(
            pool.retain_all(&[a, b, free]),
            Err(PageError::NotReferenced)
        );
        assert_eq!((pool.refcount(a), pool.refcount(b)), (Ok(1), Ok(1)));
        pool.retain_all(&[a, b]).unwrap();
        assert_eq!((pool.refcount(a), pool.refcount(b)), (Ok(2), Ok(2)));
    }

    #[test]
    fn every_error_explains_itself() {
        let all = [
            KvError::PoolExhausted {
                needed: 2,
                available: 1,
            },
            KvError::UnknownPage,
            KvError::PageNotReferenced,
            KvError::TooManyReferences,
            KvError::UnknownSequence,
            KvError::NoFreeSequenceSlot,
            KvError::NotCached,
            KvError::TokensMismatch,
            KvError::SequenceTooLong { max_tokens: 32 },
            KvError::PositionOutOfRange { len: 3 },
        ];
        for e in all {
            assert!(e.to_string().len() > 10, "{e:?}");
        }
        let storage = [
            StorageError::Empty,
            StorageError::TooLarge,
            StorageError::Mismatched,
        ];
        for e in storage {
            assert!(e.to_string().len() > 10, "{e:?}");
        }
    }

    /// Every narrow error becomes the [`KvError`] variant of the same name and
    /// fields, with the same message, so `?` composes operations losslessly.
    #[test]
    fn narrow_errors_convert_to_kv_error_losslessly() {
        let exhausted = PoolExhausted {
            needed: 3,
            available: 1,
        };
        let kv = KvError::PoolExhausted {
            needed: 3,
            available: 1,
        };
        let pairs: [(String, KvError, KvError); 11] = [
            (exhausted.to_string(), exhausted.into(), kv),
            (
                AppendError::from(exhausted).to_string(),
                AppendError::from(exhausted).into(),
                kv,
            ),
            (
                PageError::UnknownPage.to_string(),
                PageError::UnknownPage.into(),
                KvError::UnknownPage,
            ),
            (
                PageError::NotReferenced.to_string(),
                PageError::NotReferenced.into(),
                KvError::PageNotReferenced,
            ),
            (
                PageError::TooManyReferences.to_string(),
                PageError::TooManyReferences.into(),
                KvError::TooManyReferences,
            ),
            (
                TableFull.to_string(),
                TableFull.into(),
                KvError::NoFreeSequenceSlot,
            ),
            (
                SeqError::UnknownSequence.to_string(),
                SeqError::UnknownSequence.into(),
                KvError::UnknownSequence,
            ),
            (
                SeqError::PositionOutOfRange { len: 7 }.to_string(),
                SeqError::PositionOutOfRange { len: 7 }.into(),
                KvError::PositionOutOfRange { len: 7 },
            ),
            (
                AppendError::UnknownSequence.to_string(),
                AppendError::UnknownSequence.into(),
                KvError::UnknownSequence,
            ),
            (
                AppendError::SequenceTooLong { max_tokens: 32 }.to_string(),
                AppendError::SequenceTooLong { max_tokens: 32 }.into(),
                KvError::SequenceTooLong { max_tokens: 32 },
            ),
            (
                AppendError::PoolExhausted {
                    needed: 3,
                    available: 1,
                }
                .to_string(),
                AppendError::PoolExhausted {
                    needed: 3,
                    available: 1,
                }
                .into(),
                kv,
            ),
        ];
        for (message, converted, expected) in pairs {
            assert_eq!(converted, expected);
            assert_eq!(message, expected.to_string());
        }
    }

    /// An operation that composes the pool and the table reports the narrow
    /// refusal it met, as a [`KvError`].
    #[test]
    fn composed_operations_report_the_part_that_refused() {
        let mut s = Storage::new(4, 1, 2);
        let (mut pool, mut table) = s.split();
        let seq = table.create().unwrap();
        assert_eq!(table.fork(seq, &mut pool), Err(KvError::NoFreeSequenceSlot));
        let free = PageId::from_index(3);
        table.release(seq, &mut pool).unwrap();
        assert_eq!(
            table.create_with_prefix(&[free], &mut pool),
            Err(KvError::PageNotReferenced)
        );
        let outside = PageId::from_index(9);
        assert_eq!(
            table.create_with_prefix(&[outside], &mut pool),
            Err(KvError::UnknownPage)
        );
        assert_eq!(
            table.create_with_prefix(&[free; 3], &mut pool),
            Err(KvError::SequenceTooLong { max_tokens: 32 })
        );
        assert_eq!(table.active_sequences(), 0);
        assert_eq!(pool.free_pages(), 4);
    }

    #[test]
    fn sequence_ids_display_with_generation() {
        let mut s = Storage::new(1, 1, 1);
        let (mut pool, mut table) = s.split();
        let seq: SeqId = table.create().unwrap();
        assert_eq!(seq.to_string(), "seq#0.0");
        table.release(seq, &mut pool).unwrap();
        let again = table.create().unwrap();
        assert_eq!(again.to_string(), "seq#0.1");
        assert_ne!(seq, again);
    }
}
