//! The hash index over the caller's slots: open addressing with linear
//! probing keyed by a hash of the whole prefix, and backward-shift deletion
//! (no tombstones); and the keys themselves.

use super::node::PageTokens;
use super::RadixCache;
use crate::geometry::PAGE_SIZE;

pub(super) const EMPTY_SLOT: u64 = u64::MAX;
/// An index entry keeps the key hash's high half beside the node id, so probes
/// and deletions never read a node just to compare or re-home it.
const HASH_BITS: u64 = 0xFFFF_FFFF_0000_0000;
/// The most nodes a cache can have: node ids stay below 2^31, so an index
/// (at most 2^32 slots) is addressed by the stored high hash bits alone.
pub(super) const MAX_NODES: usize = 1 << 31;

impl RadixCache<'_> {
    /// The child of `parent` holding `tokens`, whose key (see [`key_hash`])
    /// is `hash`. Always inlined: as a call, its result goes through memory
    /// and the walk's probes stop overlapping.
    #[inline(always)]
    pub(super) fn find_child(&self, parent: u32, hash: u64, tokens: &PageTokens) -> Option<u32> {
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
                // Retired and detached nodes, whose entries stay until a
                // drain, have a parent no walk passes (`OUT_OF_TREE`).
                if n.hash == hash && n.parent == parent && same_tokens(&n.tokens, tokens) {
                    return Some(node);
                }
            }
            slot = (slot + 1) & mask;
        }
    }

    /// Adds a node to the hash index, in the first empty slot of its probe
    /// chain.
    #[inline]
    pub(super) fn index_node(&mut self, node: u32, hash: u64) {
        let mask = self.index.len() - 1;
        let mut slot = self.home_slot(hash);
        while self.index[slot] != EMPTY_SLOT {
            slot = (slot + 1) & mask;
        }
        self.index[slot] = (hash & HASH_BITS) | u64::from(node);
    }

    /// Removes a node from the hash index by backward-shift deletion, which
    /// keeps every probe chain unbroken without tombstones.
    #[inline]
    pub(super) fn unindex(&mut self, node: u32) {
        let mask = self.index.len() - 1;
        let mut hole = self.home_slot(self.nodes[node as usize].hash);
        while self.index[hole] as u32 != node {
            debug_assert_ne!(self.index[hole], EMPTY_SLOT, "node missing from index");
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

/// The first 16 tokens of a chunk of exactly 16.
#[inline]
pub(super) fn page_tokens(chunk: &[u32]) -> &PageTokens {
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
pub(super) const ROOT_KEY: u64 = K[0];

/// The index key of a page whose parent's key is `parent_key`: a hash of the
/// whole prefix up to and including this page. Keying by the prefix, not by
/// the parent's node id, lets a match compute every page's key before it has
/// found any node, so the index probes of successive pages do not wait on one
/// another (their loads overlap). Matches are confirmed by comparing the
/// parent and the tokens, so the hash only has to spread keys.
#[inline]
pub(super) fn key_hash(parent_key: u64, tokens: &PageTokens) -> u64 {
    fold(tokens_hash(tokens) ^ K[2], parent_key ^ K[3])
}
