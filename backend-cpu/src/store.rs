//! The KV store's layout in host memory.
//!
//! Layer-major, then page, then keys before values, then KV head: one page's
//! keys of one layer are `[kv_heads, 16, head_dim]` contiguous elements, the
//! shape the core's geometry describes, so one head's 16 keys are one run.

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
}
