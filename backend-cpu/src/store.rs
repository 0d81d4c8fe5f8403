//! The KV store's layout in host memory.
//!
//! Layer-major, then page, then keys before values, then KV head, so one
//! head's 16 keys (or values) in a page are one contiguous block. Inside it
//! values are slot-major, `[16, head_dim]`: attention weighs whole value
//! rows. Keys are dimension-major, `[head_dim, 16]`: one dimension of all 16
//! keys is two 8-lane vectors, so a query's 16 scores accumulate in
//! registers with no horizontal sums.

use pagoda_core::{KvGeometry, PAGE_SIZE};

/// Where things are in a store's element array.
#[derive(Debug, Clone, Copy)]
pub struct Layout {
    pub pages: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub layers: usize,
}

impl Layout {
    pub fn new(geometry: &KvGeometry, pages: u32) -> Self {
        Self {
            pages: pages as usize,
            kv_heads: geometry.kv_heads() as usize,
            head_dim: geometry.head_dim() as usize,
            layers: geometry.layers() as usize,
        }
    }

    /// Elements of one head's 16 keys (or values) in a page.
    pub fn head_block(&self) -> usize {
        PAGE_SIZE * self.head_dim
    }

    /// Elements of one page's keys (or values) of one layer.
    pub fn page_block(&self) -> usize {
        self.kv_heads * self.head_block()
    }

    /// Elements in the whole store, if they fit a `usize`.
    pub fn elements(&self) -> Option<usize> {
        self.layers
            .checked_mul(self.pages)?
            .checked_mul(2)?
            .checked_mul(self.page_block())
    }

    /// Start of `page`'s keys (`kv = 0`) or values (`kv = 1`) of `layer`.
    pub fn offset(&self, layer: u32, page: u32, kv: usize) -> usize {
        ((layer as usize * self.pages + page as usize) * 2 + kv) * self.page_block()
    }

    /// Where slot `offset`'s row of one head starts inside the head's
    /// block, and the distance between its consecutive elements.
    pub fn row_in_block(&self, kv: usize, offset: usize) -> (usize, usize) {
        if kv == 0 {
            (offset, PAGE_SIZE)
        } else {
            (offset * self.head_dim, 1)
        }
    }
}
