//! The radix cache's event ring against a plain model: a mirror that
//! applies the events (stored blocks linked to their parents, removed
//! blocks) to a map, resynchronising from `for_each_block` after an
//! overflow, must hold exactly the tree's pages. The tree is checked by its
//! own lookups, not by the events: the mirror has as many blocks as the
//! tree has nodes, and every mirrored block's token prefix (rebuilt from
//! the parent chain) is matched by `peek_prefix` in full. Random inserts of
//! prefix-sharing sequences, evictions, and drains at random moments, with
//! rings from off (0) to large, so overflows happen often.

use std::collections::HashMap;

use pagoda_core::{
    CacheEvent, CachedBlock, EventDrain, PageEntry, PageId, PagePool, PageTable, RadixCache,
    RadixNode, SeqEntry,
};
use proptest::prelude::*;

const PAGES: usize = 48;
const NODES: usize = 40;
const ROW: usize = 12;
const PAGE: usize = 16;

#[derive(Debug, Clone)]
enum Op {
    /// A sequence of `len` tokens: `shared` pages from family `family`, then
    /// its own tokens; cached, then released.
    Insert {
        family: u8,
        shared: u8,
        own: u32,
        len: u8,
    },
    Evict {
        pages: u8,
    },
    Drain,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u8..3, 0u8..5, any::<u32>(), 1u8..150)
            .prop_map(|(family, shared, own, len)| Op::Insert { family, shared, own, len }),
        2 => (0u8..10).prop_map(|pages| Op::Evict { pages }),
        3 => Just(Op::Drain),
    ]
}

fn tokens(family: u8, shared: u8, own: u32, len: u8) -> Vec<u32> {
    (0..u32::from(len))
        .map(|i| {
            if (i as usize) < usize::from(shared) * PAGE {
                u32::from(family) * 1000 + i
            } else {
                own.wrapping_mul(2_654_435_761) ^ i.wrapping_mul(40_503)
            }
        })
        .collect()
}

/// The subscriber's side: block hash -> (parent hash, tokens).
#[derive(Default)]
struct Mirror {
    blocks: HashMap<u64, (Option<u64>, [u32; PAGE])>,
    resyncs: u32,
}

impl Mirror {
    fn store(&mut self, b: &CachedBlock) {
        if let Some(p) = b.parent {
            assert!(
                self.blocks.contains_key(&p),
                "stored block's parent unknown"
            );
        }
        assert!(
            self.blocks.insert(b.hash, (b.parent, b.tokens)).is_none(),
            "block stored twice"
        );
    }

    fn drain(&mut self, cache: &mut RadixCache<'_>) {
        let mut events = Vec::new();
        match cache.drain_events(|e| events.push(*e)) {
            EventDrain::Complete(n) => {
                assert_eq!(n as usize, events.len());
                for e in &events {
                    match e {
                        CacheEvent::Stored(b) => self.store(b),
                        CacheEvent::Removed { hash } => {
                            assert!(self.blocks.remove(hash).is_some(), "removed unknown block");
                        }
                    }
                }
            }
            EventDrain::Overflowed { lost } => {
                assert!(lost > 0);
                assert!(events.is_empty());
                self.resyncs += 1;
                self.blocks.clear();
                let mut snapshot = Vec::new();
                cache.for_each_block(|b| snapshot.push(*b));
                let parents: Vec<u64> = snapshot.iter().map(|b| b.hash).collect();
                for b in &snapshot {
                    assert!(b.parent.is_none_or(|p| parents.contains(&p)));
                    self.blocks.insert(b.hash, (b.parent, b.tokens));
                }
            }
        }
    }

    /// The mirror is exactly the tree, judged by the tree's lookups.
    fn check(&self, cache: &RadixCache<'_>) {
        assert_eq!(self.blocks.len(), cache.len() as usize, "block count");
        for (&hash, _) in self.blocks.iter() {
            let mut chain = Vec::new();
            let mut at = Some(hash);
            while let Some(h) = at {
                let (parent, tokens) = self.blocks[&h];
                chain.push(tokens);
                at = parent;
                assert!(chain.len() <= self.blocks.len(), "parent cycle");
            }
            let prefix: Vec<u32> = chain.iter().rev().flatten().copied().collect();
            assert_eq!(
                cache.peek_prefix(&prefix) as usize,
                prefix.len(),
                "a mirrored block is not in the tree"
            );
        }
    }
}

fn run(ring_len: usize, ops: &[Op]) {
    let mut page_store = [PageEntry::EMPTY; PAGES];
    let mut pool = PagePool::new(&mut page_store).unwrap();
    let mut rows = [PageId::from_index(0); 2 * ROW];
    let mut seqs = [SeqEntry::EMPTY; 2];
    let mut table = PageTable::new(&mut rows, &mut seqs).unwrap();
    let mut nodes = [RadixNode::EMPTY; NODES];
    let mut index = [0u64; RadixCache::index_len_for(NODES)];
    let mut ring = vec![CacheEvent::EMPTY; ring_len];
    let mut cache = RadixCache::new(&mut nodes, &mut index).unwrap();
    cache.set_event_ring(&mut ring);
    let mut mirror = Mirror::default();
    for op in ops {
        match *op {
            Op::Insert {
                family,
                shared,
                own,
                len,
            } => {
                let t = tokens(family, shared, own, len);
                let seq = table.create().unwrap();
                table
                    .append(seq, t.len() as u32, &mut pool, &mut cache)
                    .unwrap();
                cache.insert(&mut table, seq, &t, &mut pool).unwrap();
                table.release(seq, &mut pool).unwrap();
            }
            Op::Evict { pages } => {
                cache.evict(u32::from(pages), &mut pool);
            }
            Op::Drain => {}
        }
        if ring_len > 0 && matches!(op, Op::Drain) {
            mirror.drain(&mut cache);
            mirror.check(&cache);
        }
    }
    if ring_len > 0 {
        mirror.drain(&mut cache);
        mirror.check(&cache);
    } else {
        // Off: nothing is ever recorded.
        assert_eq!(
            cache.drain_events(|_| panic!("event with events off")),
            EventDrain::Complete(0)
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn a_mirror_fed_by_events_equals_the_tree(
        ring_len in prop_oneof![Just(0usize), 1usize..8, 8usize..64, Just(1024usize)],
        ops in prop::collection::vec(op(), 300),
    ) {
        run(ring_len, &ops);
    }
}

/// Turning events on over a non-empty tree asks for a snapshot first.
#[test]
fn events_turned_on_late_start_with_a_resync() {
    let mut page_store = [PageEntry::EMPTY; 8];
    let mut pool = PagePool::new(&mut page_store).unwrap();
    let mut rows = [PageId::from_index(0); 4];
    let mut seqs = [SeqEntry::EMPTY; 1];
    let mut table = PageTable::new(&mut rows, &mut seqs).unwrap();
    let mut nodes = [RadixNode::EMPTY; 8];
    let mut index = [0u64; 16];
    let mut ring = [CacheEvent::EMPTY; 4];
    let mut cache = RadixCache::new(&mut nodes, &mut index).unwrap();
    let t: Vec<u32> = (0..40).collect();
    let seq = table.create().unwrap();
    table.append(seq, 40, &mut pool, &mut cache).unwrap();
    cache.insert(&mut table, seq, &t, &mut pool).unwrap();
    table.release(seq, &mut pool).unwrap();
    cache.set_event_ring(&mut ring);
    let mut mirror = Mirror::default();
    mirror.drain(&mut cache);
    assert_eq!(mirror.resyncs, 1);
    mirror.check(&cache);
    assert_eq!(mirror.blocks.len(), 2);
}
