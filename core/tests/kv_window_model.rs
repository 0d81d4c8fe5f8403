//! A [`KvCache`] with sliding-window groups under random admit (with prefix
//! hits) / append / fork (copy-on-write) / finish / release (preemption) /
//! evict sequences, against a model of what every page holds.
//!
//! The model writes each appended token into the pages its sequence's rows
//! name, group by group, and remembers which tokens each page holds. After
//! every operation:
//! - every page's reference count is the number of row entries naming it
//!   (no leak, no double release) and no row names a free page;
//! - a windowed row holds exactly the pages from its window's start, and at
//!   most a window and a page once the sequence decodes;
//! - every page a sequence holds has the sequence's own tokens (so a prefix
//!   hit never serves a page that was freed and reused, and a write never
//!   lands in a page someone else reads);
//! - a refusal changes nothing.

use std::collections::HashMap;

use pagoda_core::{
    KvCache, KvGroups, KvStorage, PageEntry, PageId, PoolStats, RadixCache, RadixNode, SeqEntry,
    SeqId, Timestamp, PAGE_SIZE,
};
use proptest::prelude::*;

const PAGES: usize = 48;
const ROW: usize = 8; // 128 tokens a sequence
const SEQS: usize = 4;
/// The directed test's window: it straddles pages (2 or 3 pages a
/// windowed row). The property test draws windows, some under a page.
const WINDOW: u32 = 24;
const GROUPS: (u32, u32) = (1, 2);

struct Storage {
    pages: Vec<PageEntry>,
    rows: Vec<PageId>,
    seqs: Vec<SeqEntry>,
    nodes: Vec<RadixNode>,
    index: Vec<u64>,
    scratch: Vec<PageId>,
    group_pages: Vec<PageId>,
    groups: KvGroups,
}

fn groups(window: u32) -> KvGroups {
    KvGroups::new(GROUPS.0, GROUPS.1, window).unwrap()
}

impl Storage {
    fn new(window: u32) -> Self {
        let groups = groups(window);
        let g = groups.count() as usize;
        Self {
            pages: vec![PageEntry::EMPTY; PAGES],
            rows: vec![PageId::VACANT; SEQS * ROW * g],
            seqs: vec![SeqEntry::EMPTY; SEQS],
            nodes: vec![RadixNode::EMPTY; PAGES],
            index: vec![0; RadixCache::index_len_for(PAGES)],
            scratch: vec![PageId::VACANT; ROW * g],
            group_pages: vec![PageId::VACANT; PAGES * (g - 1)],
            groups,
        }
    }

    fn kv(&mut self) -> KvCache<'_> {
        let storage = KvStorage {
            pages: &mut self.pages,
            rows: &mut self.rows,
            seqs: &mut self.seqs,
            nodes: &mut self.nodes,
            index: &mut self.index,
            scratch: &mut self.scratch,
        };
        KvCache::with_groups(storage, self.groups, &mut self.group_pages).unwrap()
    }
}

#[derive(Debug, Clone)]
enum Op {
    Admit { family: u32, len: usize, chunk: u32 },
    Append { seq: usize, tokens: u32 },
    Fork { seq: usize },
    Finish { seq: usize },
    Release { seq: usize },
    Evict { pages: u32 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u32..3, 1usize..100, 1u32..100).prop_map(|(family, len, chunk)| Op::Admit { family, len, chunk }),
        4 => (0usize..8, 1u32..20).prop_map(|(seq, tokens)| Op::Append { seq, tokens }),
        1 => (0usize..8).prop_map(|seq| Op::Fork { seq }),
        2 => (0usize..8).prop_map(|seq| Op::Finish { seq }),
        1 => (0usize..8).prop_map(|seq| Op::Release { seq }),
        1 => (1u32..10).prop_map(|pages| Op::Evict { pages }),
    ]
}

/// Token `i` of a family's stream: sequences of one family share prefixes,
/// whatever mix of prompt and output they are.
fn token(family: u32, i: usize) -> u32 {
    family * 1000 + i as u32
}

struct Live {
    seq: SeqId,
    family: u32,
    len: usize,
}

/// What each page holds: its group and the tokens written to its slots.
type Contents = HashMap<(u32, PageId), Vec<Option<u32>>>;

fn snapshot(kv: &KvCache<'_>) -> (PoolStats, u32, u64) {
    (
        kv.pool_stats(Timestamp(0)),
        kv.active_sequences(),
        kv.radix().version(),
    )
}

/// The model's write of positions `from..to` of `live` into its pages.
fn write(kv: &KvCache<'_>, contents: &mut Contents, live: &Live, from: usize) {
    for g in 0..kv.groups().count() {
        let row = kv.group_pages(live.seq, g).unwrap();
        for pos in from..live.len {
            let page = row[pos / PAGE_SIZE];
            assert!(
                !page.is_vacant(),
                "group {g} lacks the page of new position {pos}"
            );
            assert_eq!(
                kv.pool().refcount(page),
                Ok(1),
                "a write into a shared page"
            );
            let slots = contents
                .entry((g, page))
                .or_insert_with(|| vec![None; PAGE_SIZE]);
            if pos % PAGE_SIZE == 0 {
                slots.fill(None);
            }
            slots[pos % PAGE_SIZE] = Some(token(live.family, pos));
        }
    }
}

fn check(kv: &KvCache<'_>, lives: &[Live], contents: &Contents) {
    let g = kv.groups();
    let mut refs: HashMap<PageId, u32> = HashMap::new();
    for live in lives {
        let len = kv.len(live.seq).unwrap() as usize;
        assert_eq!(len, live.len);
        let start = kv.table().window_start(live.seq).unwrap() as usize;
        for group in 0..g.count() {
            let row = kv.group_pages(live.seq, group).unwrap();
            assert_eq!(row.len(), len.div_ceil(PAGE_SIZE));
            for (i, &page) in row.iter().enumerate() {
                let expect_held = !g.is_windowed(group) || i >= start;
                assert_eq!(
                    !page.is_vacant(),
                    expect_held,
                    "group {group} page {i} of {len}"
                );
                if page.is_vacant() {
                    continue;
                }
                *refs.entry(page).or_default() += 1;
                assert_eq!(kv.pool().is_free(page), Ok(false));
                let held = &contents[&(group, page)];
                for (slot, &t) in held.iter().enumerate() {
                    let pos = i * PAGE_SIZE + slot;
                    if pos < len {
                        assert_eq!(t, Some(token(live.family, pos)), "group {group} pos {pos}");
                    }
                }
            }
            if g.is_windowed(group) {
                // Every position the next token sees is held.
                assert!(start as u32 <= g.first_needed_page(len as u32));
            }
        }
    }
    for p in 0..PAGES as u32 {
        let page = PageId::from_index(p);
        let want = refs.get(&page).copied().unwrap_or(0);
        assert_eq!(kv.pool().refcount(page), Ok(want), "{page}");
    }
    let s = kv.pool_stats(Timestamp(0));
    assert_eq!(
        s.free_pages + s.referenced_pages + s.evictable_pages,
        PAGES as u32
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn windowed_groups_never_leak_or_serve_a_freed_page(
        window in prop_oneof![1u32..16, 16u32..64],
        ops in proptest::collection::vec(op(), 0..80)
    ) {
        let mut storage = Storage::new(window);
        let mut kv = storage.kv();
        let mut lives: Vec<Live> = Vec::new();
        let mut contents = Contents::new();
        for op in ops {
            let before = snapshot(&kv);
            match op {
                Op::Admit { family, len, chunk } => {
                    let prompt: Vec<u32> = (0..len).map(|i| token(family, i)).collect();
                    let admission = kv.peek_admission(&prompt);
                    let matched = admission.matched_tokens() as usize;
                    let chunk = chunk.min((len - matched) as u32);
                    match kv.admit(&prompt, &admission, chunk) {
                        Ok(admitted) => {
                            prop_assert_eq!(admitted.matched_tokens as usize, matched);
                            // `check` below finds the hit's pages holding
                            // this prompt's tokens.
                            let live = Live { seq: admitted.seq, family, len: matched + chunk as usize };
                            write(&kv, &mut contents, &live, matched);
                            lives.push(live);
                        }
                        Err(_) => prop_assert_eq!(snapshot(&kv), before),
                    }
                }
                Op::Append { seq, tokens } => {
                    let Some(live) = lives.get_mut(seq) else { continue };
                    let was = live.len;
                    match kv.append(live.seq, tokens) {
                        Ok(appended) => {
                            // Every group's shared last page is copied, or none.
                            let copies = appended.copies.len() as u32;
                            prop_assert!(copies == 0 || copies == kv.groups().count());
                            for (group, copy) in (0..).zip(appended.copies.iter()) {
                                prop_assert_eq!(kv.group_pages(live.seq, group).unwrap()[was / PAGE_SIZE], copy.dst);
                                let mut held = contents[&(group, copy.src)].clone();
                                held[copy.slots as usize..].fill(None);
                                contents.insert((group, copy.dst), held);
                            }
                            live.len += tokens as usize;
                            write(&kv, &mut contents, live, was);
                            if tokens == 1 {
                                for g in 0..kv.groups().count() {
                                    let row = kv.group_pages(live.seq, g).unwrap();
                                    let held = row.iter().filter(|p| !p.is_vacant()).count() as u32;
                                    if kv.groups().is_windowed(g) {
                                        prop_assert!(held <= kv.groups().window_pages());
                                    }
                                }
                            }
                        }
                        Err(_) => prop_assert_eq!(snapshot(&kv), before),
                    }
                }
                Op::Fork { seq } => {
                    let Some(live) = lives.get(seq) else { continue };
                    if let Ok(child) = kv.fork(live.seq) {
                        let (family, len) = (live.family, live.len);
                        lives.push(Live { seq: child, family, len });
                    } else {
                        prop_assert_eq!(snapshot(&kv), before);
                    }
                }
                Op::Finish { seq } => {
                    if seq >= lives.len() { continue }
                    let live = lives.swap_remove(seq);
                    let tokens: Vec<u32> = (0..live.len).map(|i| token(live.family, i)).collect();
                    kv.finish(live.seq, &tokens).unwrap();
                }
                Op::Release { seq } => {
                    if seq >= lives.len() { continue }
                    let live = lives.swap_remove(seq);
                    kv.release(live.seq).unwrap();
                }
                Op::Evict { pages } => {
                    kv.evict_cached(pages);
                }
            }
            check(&kv, &lives, &contents);
        }
        for live in lives.drain(..) {
            kv.release(live.seq).unwrap();
        }
        prop_assert_eq!(kv.referenced_pages(), 0);
        kv.evict_cached(u32::MAX);
        prop_assert_eq!(kv.pool_stats(Timestamp(0)).free_pages, PAGES as u32);
    }
}

#[test]
fn a_cached_prefix_serves_only_where_its_window_is_whole() {
    let mut storage = Storage::new(WINDOW);
    let mut kv = storage.kv();
    let prompt: Vec<u32> = (0..101).map(|i| token(0, i)).collect();
    let admission = kv.peek_admission(&prompt[..100]);
    let seq = kv.admit(&prompt[..100], &admission, 100).unwrap().seq;
    // Decoding position 100 sees 77..=100: windowed pages 0 to 3 go.
    let appended = kv.append(seq, 1).unwrap();
    assert_eq!(appended.pages_dropped, 4 * GROUPS.1);
    assert_eq!(kv.table().window_start(seq), Ok(4));
    kv.finish(seq, &prompt).unwrap();
    assert_eq!(kv.referenced_pages(), 0);

    // The whole prompt again: its last window (pages 4 and 5) is cached.
    assert_eq!(kv.peek_admission(&prompt).matched_tokens(), 96);
    // A shorter prompt would need windowed pages that were let go: no hit,
    // though its full-attention pages are cached.
    assert_eq!(kv.peek_admission(&prompt[..50]).matched_tokens(), 0);
    assert_eq!(kv.radix().peek_prefix(&prompt[..49]), 48);

    // Evicting pages empties windowed entries first (they were released
    // first) and shortens the match; nothing it returns is ever free.
    let mut last = 96;
    while kv.evict_cached(1) == 1 {
        let admission = kv.peek_admission(&prompt);
        assert!(admission.matched_tokens() <= last);
        last = admission.matched_tokens();
        let seq = kv.admit(&prompt, &admission, 1).unwrap().seq;
        for g in 0..kv.groups().count() {
            for &page in kv.group_pages(seq, g).unwrap() {
                assert!(page.is_vacant() || kv.pool().is_free(page) == Ok(false));
            }
        }
        kv.release(seq).unwrap();
    }
    assert_eq!(last, 0);
}
