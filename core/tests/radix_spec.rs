//! The radix prefix cache, scenario by scenario: the scheduling spec's
//! cache-aware scoring (`000_…`, "Cache-Aware Scoring") and the KV spec's page
//! sharing and LRU eviction (`001_…`, "Page Sharing", "Eviction Policy") as the
//! prefix cache provides them.

use pagoda_core::{
    AppendError, KvError, PageEntry, PageId, PagePool, PageTable, RadixCache, RadixNode, SeqEntry,
    SeqId, StorageError, Timestamp,
};

/// Storage for a pool, a table and a cache.
struct Fixture {
    pages: Vec<PageEntry>,
    rows: Vec<PageId>,
    seqs: Vec<SeqEntry>,
    nodes: Vec<RadixNode>,
    index: Vec<u64>,
}

impl Fixture {
    fn new(pages: usize, nodes: usize) -> Self {
        Self {
            pages: vec![PageEntry::EMPTY; pages],
            rows: vec![PageId::from_index(0); 4 * 16],
            seqs: vec![SeqEntry::EMPTY; 4],
            nodes: vec![RadixNode::EMPTY; nodes],
            index: vec![0u64; RadixCache::index_len_for(nodes)],
        }
    }

    fn parts(&mut self) -> Parts<'_> {
        Parts {
            pool: PagePool::new(&mut self.pages).unwrap(),
            table: PageTable::new(&mut self.rows, &mut self.seqs).unwrap(),
            cache: RadixCache::new(&mut self.nodes, &mut self.index).unwrap(),
        }
    }
}

struct Parts<'a> {
    pool: PagePool<'a>,
    table: PageTable<'a>,
    cache: RadixCache<'a>,
}

impl Parts<'_> {
    /// What the engine does for a prompt: reuse its cached prefix, compute the
    /// rest. Returns the running sequence.
    fn start(&mut self, prompt: &[u32]) -> SeqId {
        let mut pages = [PageId::from_index(0); 16];
        let hit = self.cache.match_prefix(prompt, &mut pages, &mut self.pool);
        let seq = self
            .table
            .create_with_prefix(&pages[..hit.pages as usize], &mut self.pool)
            .unwrap();
        self.table
            .append(
                seq,
                prompt.len() as u32 - hit.tokens,
                &mut self.pool,
                &mut self.cache,
            )
            .unwrap();
        seq
    }

    /// A sequence finishes: its full pages go to the cache, its references go.
    fn finish(&mut self, seq: SeqId, tokens: &[u32]) {
        self.cache
            .insert(&mut self.table, seq, tokens, &mut self.pool)
            .unwrap();
        self.table.release(seq, &mut self.pool).unwrap();
    }
}

fn tokens(seed: u32, len: usize) -> Vec<u32> {
    (0..len as u32)
        .map(|i| seed.wrapping_mul(7919).wrapping_add(i * 31))
        .collect()
}

fn with_suffix(prefix: &[u32], seed: u32, len: usize) -> Vec<u32> {
    let mut t = prefix.to_vec();
    t.extend(tokens(seed, len).iter().map(|x| x ^ 0x8000_0000));
    t
}

#[test]
fn query_cache_for_prefix_match() {
    let mut f = Fixture::new(32, 32);
    let mut p = f.parts();
    let system = tokens(1, 48);
    let first = with_suffix(&system, 2, 20);
    let seq = p.start(&first);
    p.finish(seq, &first);
    // A second request with the same 48-token system prompt.
    let second = with_suffix(&system, 3, 30);
    assert_eq!(p.cache.peek_prefix(&second), 48);
    let mut pages = [PageId::from_index(0); 8];
    let hit = p.cache.match_prefix(&second, &mut pages, &mut p.pool);
    assert_eq!(hit.tokens, 48);
    assert_eq!(hit.pages, 3);
}

#[test]
fn miss_at_the_first_page() {
    let mut f = Fixture::new(16, 16);
    let mut p = f.parts();
    let a = tokens(1, 40);
    let seq = p.start(&a);
    p.finish(seq, &a);
    let mut b = a.clone();
    b[3] ^= 1;
    let mut pages = [PageId::from_index(0); 4];
    assert_eq!(p.cache.match_prefix(&b, &mut pages, &mut p.pool).tokens, 0);
    // A prompt shorter than a page never matches.
    assert_eq!(p.cache.peek_prefix(&a[..15]), 0);
    // The output slice bounds the match.
    assert_eq!(
        p.cache
            .match_prefix(&a, &mut pages[..1], &mut p.pool)
            .tokens,
        16
    );
}

#[test]
fn share_prefix_pages_through_the_cache() {
    let mut f = Fixture::new(32, 32);
    let mut p = f.parts();
    let system = tokens(9, 64);
    let a = with_suffix(&system, 1, 10);
    let seq = p.start(&a);
    p.finish(seq, &a);
    let b = with_suffix(&system, 2, 10);
    let c = with_suffix(&system, 3, 10);
    let sb = p.start(&b);
    let sc = p.start(&c);
    assert_eq!(
        p.table.pages(sb).unwrap()[..4],
        p.table.pages(sc).unwrap()[..4],
        "both run on the same physical prefix pages"
    );
    for &page in &p.table.pages(sb).unwrap()[..4] {
        assert_eq!(p.pool.refcount(page), Ok(2));
    }
}

#[test]
fn identical_prefixes_are_deduplicated_on_insert() {
    let mut f = Fixture::new(32, 32);
    let mut p = f.parts();
    let prompt = tokens(5, 40);
    // Two identical prompts computed side by side: nothing cached yet.
    let a = p.start(&prompt);
    let b = p.start(&prompt);
    assert_ne!(p.table.pages(a).unwrap()[0], p.table.pages(b).unwrap()[0]);
    let in_use = p.pool.stats(Timestamp(0)).pages_in_use();
    let first = p
        .cache
        .insert(&mut p.table, a, &prompt, &mut p.pool)
        .unwrap();
    assert_eq!((first.new_pages, first.deduplicated_pages), (2, 0));
    let second = p
        .cache
        .insert(&mut p.table, b, &prompt, &mut p.pool)
        .unwrap();
    assert_eq!((second.new_pages, second.deduplicated_pages), (0, 2));
    assert_eq!(
        p.table.pages(a).unwrap()[..2],
        p.table.pages(b).unwrap()[..2],
        "b now uses a's cached pages"
    );
    assert_eq!(
        p.pool.stats(Timestamp(0)).pages_in_use(),
        in_use - 2,
        "b's duplicates went back to the pool"
    );
    assert_eq!(p.cache.len(), 2);
    assert_eq!(p.cache.stats().deduplicated_pages, 2);
}

#[test]
fn locked_paths_survive_eviction_pressure() {
    let mut f = Fixture::new(8, 16);
    let mut p = f.parts();
    let a = tokens(1, 64);
    let seq = p.start(&a);
    p.finish(seq, &a);
    assert_eq!(p.pool.evictable_pages(), 4);
    // Lock the first two pages of the path, as a waiting request would.
    let mut pages = [PageId::from_index(0); 4];
    let hit = p.cache.match_prefix(&a[..32], &mut pages, &mut p.pool);
    let locked = &pages[..hit.pages as usize];
    p.cache.lock(locked, &mut p.pool).unwrap();
    // Demand the whole pool: only the two unlocked pages can go.
    assert_eq!(p.cache.evict(u32::MAX, &mut p.pool), 2);
    assert_eq!(p.cache.peek_prefix(&a), 32, "the locked path stays cached");
    let s = p.table.create().unwrap();
    assert!(matches!(
        p.table.append(s, 16 * 7, &mut p.pool, &mut p.cache),
        Err(AppendError::PoolExhausted { .. })
    ));
    p.cache.unlock(locked, &mut p.pool).unwrap();
    p.table
        .append(s, 16 * 7, &mut p.pool, &mut p.cache)
        .unwrap();
    // 6 free pages and one evicted: the unlocked leaf went, its parent stays.
    assert_eq!(
        p.cache.len(),
        1,
        "unlocked, the leaf was evicted for new work"
    );
    assert_eq!(p.cache.peek_prefix(&a), 16);
}

#[test]
fn eviction_takes_least_recently_used_leaves_first() {
    let mut f = Fixture::new(16, 16);
    let mut p = f.parts();
    let trunk = tokens(1, 32);
    let left = with_suffix(&trunk, 2, 32);
    let right = with_suffix(&trunk, 3, 32);
    for prompt in [&left, &right] {
        let seq = p.start(prompt);
        p.finish(seq, prompt);
    }
    assert_eq!(p.cache.len(), 6);
    // Use the left branch again: the right one is now least recently used.
    let mut pages = [PageId::from_index(0); 4];
    p.cache.match_prefix(&left, &mut pages, &mut p.pool);
    assert_eq!(p.cache.evict(2, &mut p.pool), 2);
    assert_eq!(p.cache.peek_prefix(&right), 32, "right's leaves went first");
    assert_eq!(p.cache.peek_prefix(&left), 64);
    // Then the left leaves, and only then the trunk they extend.
    assert_eq!(p.cache.evict(2, &mut p.pool), 2);
    assert_eq!(p.cache.peek_prefix(&left), 32);
    assert_eq!(p.cache.evict(2, &mut p.pool), 2);
    assert!(p.cache.is_empty());
    let stats = p.pool.stats(Timestamp(0));
    assert_eq!(stats.evictions, 3);
    assert_eq!(stats.pages_reclaimed, 6);
    assert_eq!(p.cache.stats().evicted_pages, 6);
}

#[test]
fn full_node_storage_evicts_or_declines() {
    // Room for 3 nodes.
    let mut f = Fixture::new(32, 3);
    let mut p = f.parts();
    let a = tokens(1, 48);
    let seq = p.start(&a);
    p.finish(seq, &a);
    assert_eq!(p.cache.len(), 3);
    // A new prompt's pages: the cache evicts a's unlocked pages to make room.
    let b = tokens(2, 32);
    let seq = p.start(&b);
    let done = p.cache.insert(&mut p.table, seq, &b, &mut p.pool).unwrap();
    assert_eq!((done.new_pages, done.declined_pages), (2, 0));
    // b runs on its 2 cached pages; a's last cached page can still go.
    assert_eq!(p.cache.len(), 3);
    let c = tokens(3, 48);
    let s2 = p.start(&c);
    let done = p.cache.insert(&mut p.table, s2, &c, &mut p.pool).unwrap();
    // Room for one by evicting a's page; then every node is locked by b or c.
    assert_eq!((done.new_pages, done.declined_pages), (1, 2));
    assert_eq!(p.cache.len(), 3);
    assert_eq!(p.cache.stats().declined_pages, 2);
    p.table.release(seq, &mut p.pool).unwrap();
    p.table.release(s2, &mut p.pool).unwrap();
}

#[test]
fn stale_paths_cannot_be_locked() {
    let mut f = Fixture::new(16, 16);
    let mut p = f.parts();
    let a = tokens(1, 32);
    let seq = p.start(&a);
    p.finish(seq, &a);
    let mut pages = [PageId::from_index(0); 2];
    p.cache.match_prefix(&a, &mut pages, &mut p.pool);
    // Out of order is not a path.
    assert_eq!(
        p.cache.lock(&[pages[1], pages[0]], &mut p.pool),
        Err(KvError::NotCached)
    );
    p.cache.evict(u32::MAX, &mut p.pool);
    assert_eq!(p.cache.lock(&pages, &mut p.pool), Err(KvError::NotCached));
    assert_eq!(p.pool.referenced_pages(), 0, "a refused lock takes nothing");
    assert_eq!(p.cache.unlock(&pages, &mut p.pool), Err(KvError::NotCached));
}

#[test]
fn mismatched_tokens_are_refused() {
    let mut f = Fixture::new(16, 16);
    let mut p = f.parts();
    let a = tokens(1, 32);
    let seq = p.start(&a);
    p.cache.insert(&mut p.table, seq, &a, &mut p.pool).unwrap();
    let mut wrong = a.clone();
    wrong[0] ^= 1;
    assert_eq!(
        p.cache.insert(&mut p.table, seq, &wrong, &mut p.pool),
        Err(KvError::TokensMismatch)
    );
    p.table.release(seq, &mut p.pool).unwrap();
}

#[test]
fn a_refused_insert_changes_nothing() {
    let mut f = Fixture::new(16, 16);
    let mut p = f.parts();
    let a = tokens(1, 32);
    let seq = p.start(&a);
    p.finish(seq, &a);
    let b = tokens(2, 32);
    let running = p.start(&b);
    p.cache
        .insert(&mut p.table, running, &b, &mut p.pool)
        .unwrap();
    let row = p.table.pages(running).unwrap().to_vec();
    // a's first page with b's second: the first alone would deduplicate
    // onto a's cached page, the second contradicts what b's row caches.
    let mixed: Vec<u32> = a[..16].iter().chain(&b[16..]).copied().collect();
    assert_eq!(
        p.cache.insert(&mut p.table, running, &mixed, &mut p.pool),
        Err(KvError::TokensMismatch)
    );
    assert_eq!(
        p.table.pages(running).unwrap(),
        &row[..],
        "the row is untouched"
    );
    for &page in &row {
        assert_eq!(p.pool.refcount(page), Ok(1));
    }
    assert_eq!(p.cache.len(), 4);
    p.table.release(running, &mut p.pool).unwrap();
}

#[test]
fn only_cached_paths_can_be_unlocked() {
    let mut f = Fixture::new(16, 16);
    let mut p = f.parts();
    let a = tokens(1, 40);
    let seq = p.start(&a); // running, nothing cached
    let pages = p.table.pages(seq).unwrap().to_vec();
    assert_eq!(p.cache.unlock(&pages, &mut p.pool), Err(KvError::NotCached));
    for &page in &pages {
        assert_eq!(p.pool.refcount(page), Ok(1), "the sequence keeps its pages");
    }
    p.table.release(seq, &mut p.pool).unwrap();
}

#[test]
fn hit_rate_counts_requested_and_served_tokens() {
    let mut f = Fixture::new(32, 32);
    let mut p = f.parts();
    let system = tokens(4, 64);
    let a = with_suffix(&system, 1, 36);
    let seq = p.start(&a); // 100 tokens requested, 0 hit
    p.finish(seq, &a);
    let b = with_suffix(&system, 2, 36);
    let seq = p.start(&b); // 100 requested, 64 hit
    p.finish(seq, &b);
    let stats = p.cache.stats();
    assert_eq!(stats.tokens_requested, 200);
    assert_eq!(stats.tokens_hit, 64);
    assert!((stats.hit_rate() - 0.32).abs() < 1e-12);
    // a's 6 full pages, then b's 2 suffix pages under the shared 4.
    assert_eq!(stats.nodes, 8);
    assert_eq!(stats.inserted_pages, 8);
}

#[test]
fn bad_storage_is_refused() {
    let mut nodes = vec![RadixNode::EMPTY; 4];
    let mut index = vec![0u64; 6];
    assert_eq!(
        RadixCache::new(&mut nodes, &mut index).unwrap_err(),
        StorageError::Mismatched,
        "index length must be a power of two"
    );
    let mut index = vec![0u64; 4];
    assert_eq!(
        RadixCache::new(&mut nodes, &mut index).unwrap_err(),
        StorageError::Mismatched,
        "index must be larger than the node count"
    );
    let mut none: Vec<RadixNode> = Vec::new();
    let mut index = vec![0u64; 8];
    assert_eq!(
        RadixCache::new(&mut none, &mut index).unwrap_err(),
        StorageError::Empty
    );
}
