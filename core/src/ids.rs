//! Newtype ids: a page in the pool, a sequence in the page table, a token slot.

use core::fmt;

use crate::geometry::PAGE_SIZE;

/// A physical page of the pool. Its index is the page's position in the
/// backend's KV storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[repr(transparent)]
pub struct PageId(pub(crate) u32);

impl PageId {
    /// Marks an unused entry in a page-table row.
    pub const NONE: u32 = u32::MAX;

    /// The unused entry as a page id: what a row holds past its last page,
    /// and before its window in a windowed group.
    pub const VACANT: Self = Self(Self::NONE);

    /// Whether this is [`VACANT`](Self::VACANT).
    pub const fn is_vacant(self) -> bool {
        self.0 == Self::NONE
    }

    /// The page's index in the pool (and in the backend's storage).
    pub const fn index(self) -> u32 {
        self.0
    }

    /// Builds a page id from an index; the pool checks it on use.
    pub const fn from_index(index: u32) -> Self {
        Self(index)
    }

    /// The slot of `offset` within this page: `page × 16 + offset`, the address
    /// kernels scatter a new token's keys and values to.
    pub const fn slot(self, offset: u32) -> Slot {
        Slot(self.0 as u64 * PAGE_SIZE as u64 + offset as u64)
    }
}

impl fmt::Display for PageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "page#{}", self.0)
    }
}

/// A token slot in the whole KV store: `page × PAGE_SIZE + offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[repr(transparent)]
pub struct Slot(pub u64);

impl Slot {
    /// The page holding this slot.
    pub const fn page(self) -> PageId {
        PageId((self.0 / PAGE_SIZE as u64) as u32)
    }

    /// The slot's offset within its page.
    pub const fn offset(self) -> u32 {
        (self.0 % PAGE_SIZE as u64) as u32
    }
}

/// A sequence (one row of the page table). Carries a generation, so an id kept
/// after its sequence was released is refused rather than aliasing a new one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct SeqId {
    pub(crate) row: u32,
    pub(crate) generation: u32,
}

impl SeqId {
    /// The sequence's row in the dense page table, as kernels index it.
    pub const fn row(self) -> u32 {
        self.row
    }
}

impl fmt::Display for SeqId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The generation is odd for live ids; halved, it counts the row's uses.
        write!(f, "seq#{}.{}", self.row, self.generation / 2)
    }
}
