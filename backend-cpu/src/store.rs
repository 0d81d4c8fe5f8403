//! The KV store's layout in host memory.
//!
//! Layer-major, then page, then keys before values, then KV head, so one
//! head's 16 keys (or values) in a page are one contiguous block, laid out
//! for the order the kernels read it:
//!
//! - keys are dimension-major, `[head_dim, 16]`: one dimension of all 16
//!   keys is two 8-lane vectors, so a query's 16 scores accumulate in
//!   registers with no horizontal sums;
//! - values are tiled, `[head_dim / 16, 16, 16]`: 16 columns of all 16
//!   slots are one run, the strip the weighted sum works on at a time, so
//!   the block is read front to back (slot-major rows would be read
//!   column-strip by column-strip, 256 bytes apart, which the hardware
//!   prefetchers do not follow).

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

    /// Runs of 16 slots in one head's keys (`kv = 0`) or values (`kv = 1`),
    /// and the elements of one slot in each run: the first `n` slots of a
    /// block are the first `n × width` elements of every run.
    pub fn runs(&self, kv: usize) -> (usize, usize) {
        if kv == 0 {
            (self.head_dim, 1)
        } else {
            (self.head_dim / VALUE_TILE, VALUE_TILE)
        }
    }
}

/// Columns per tile of a value block.
pub const VALUE_TILE: usize = 16;

/// Where element `d` of slot `offset` is inside one head's key block
/// (`kv = 0`) or value block (`kv = 1`).
#[inline]
pub fn in_block(kv: usize, offset: usize, d: usize) -> usize {
    if kv == 0 {
        d * PAGE_SIZE + offset
    } else {
        value_at(offset, d)
    }
}

/// Where element `d` of value row `slot` is inside a value block.
#[inline(always)]
pub fn value_at(slot: usize, d: usize) -> usize {
    (d / VALUE_TILE) * (PAGE_SIZE * VALUE_TILE) + slot * VALUE_TILE + d % VALUE_TILE
}
