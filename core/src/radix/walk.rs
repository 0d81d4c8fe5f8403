//! The one prefix walk down the tree, and the lookups built on it: matching a
//! prompt's cached prefix, and peeking or probing it without side effects.

use core::convert::Infallible;
use core::iter::repeat;

use super::index::{key_hash, page_tokens, ROOT_KEY};
use super::node::RadixNode;
use super::RadixCache;
use crate::geometry::PAGE_SIZE;
use crate::ids::PageId;
use crate::list::NIL;
use crate::pool::PagePool;

/// The longest cached prefix of a prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct PrefixMatch {
    /// Matched tokens: always a whole number of pages.
    pub tokens: u32,
    /// Matched pages, written to the front of the caller's output slice.
    pub pages: u32,
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

/// Where a [`RadixCache::walk`] stopped.
#[derive(Debug, Clone, Copy)]
pub(super) struct Walk {
    /// Full pages matched.
    pub(super) pages: u32,
    /// The node of the last matched page, or `NIL` if none matched.
    pub(super) last: u32,
    /// The key of the first full page not found; `None` if the walk ran out
    /// of full pages (or reached its limit) first.
    pub(super) next_key: Option<u64>,
}

impl RadixCache<'_> {
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
        let walk = self.walk(tokens, pages.iter_mut(), |out, _, node| {
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
        match self.walk(tokens, repeat(()), |(), _, _| Ok::<(), Infallible>(())) {
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
    /// calling `visit` with that item and the matched node's id and entry. Stops early with
    /// `visit`'s error. Every key is a function of the
    /// tokens alone (see [`key_hash`]), so the index probes of successive
    /// pages overlap; always inlined, so they stay overlapped and a visitor
    /// that cannot fail costs nothing.
    #[inline(always)]
    pub(super) fn walk<O, E>(
        &self,
        tokens: &[u32],
        outs: impl IntoIterator<Item = O>,
        mut visit: impl FnMut(O, u32, &RadixNode) -> Result<(), E>,
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
            visit(out, node, &self.nodes[node as usize])?;
            walk.last = node;
            walk.pages += 1;
        }
        Ok(walk)
    }
}
