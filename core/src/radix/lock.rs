//! Locking a matched path for a holder without a page-table row, and
//! unlocking it: the pool references that keep its pages from eviction.

use super::node::NodeState;
use super::RadixCache;
use crate::error::KvError;
use crate::ids::PageId;
use crate::list::NIL;
use crate::pool::PagePool;

impl RadixCache<'_> {
    /// Locks a matched path for a holder without a page-table row: takes a
    /// reference on every page, checking first that `pages` is a path of the
    /// tree from the root. Fails, changing nothing, if it is not.
    pub fn lock(&self, pages: &[PageId], pool: &mut PagePool<'_>) -> Result<(), KvError> {
        self.check_path(pages, pool)?;
        Ok(pool.retain_all(pages)?)
    }

    /// Unlocks a path taken with [`lock`](Self::lock): drops the references,
    /// leaf first, so the pages become evictable deepest first. Refused,
    /// changing nothing, unless `pages` is a cached path whose every page is
    /// referenced. (Only the caller knows it locked them: unlocking pages it
    /// did not lock takes references that others hold.)
    pub fn unlock(&self, pages: &[PageId], pool: &mut PagePool<'_>) -> Result<(), KvError> {
        self.check_path(pages, pool)?;
        for &page in pages {
            if pool.refcount(page)? == 0 {
                return Err(KvError::PageNotReferenced);
            }
        }
        for &page in pages.iter().rev() {
            pool.release(page)?;
        }
        Ok(())
    }

    /// Whether `pages` is a path of the tree from the root.
    fn check_path(&self, pages: &[PageId], pool: &PagePool<'_>) -> Result<(), KvError> {
        let mut parent = NIL;
        for &page in pages {
            let node = self.node_of(page, pool)?;
            if self.nodes[node as usize].parent != parent {
                return Err(KvError::NotCached);
            }
            parent = node;
        }
        Ok(())
    }

    /// The node that caches `page`, if the tree holds it.
    fn node_of(&self, page: PageId, pool: &PagePool<'_>) -> Result<u32, KvError> {
        let tag = pool.cache_tag(page)?.ok_or(KvError::NotCached)?;
        match self.nodes.get(tag.0 as usize) {
            Some(n) if n.state == NodeState::Live && n.page == page => Ok(tag.0),
            _ => Err(KvError::NotCached),
        }
    }
}
