//! Memory metrics of the page pool: utilisation, fragmentation, churn rates and
//! evictions, as one snapshot struct.
//!
//! Counters are cumulative; rates come from two snapshots and the timestamps
//! the caller gave them, since the core has no clock.

use crate::geometry::PAGE_SIZE;
use crate::time::Timestamp;

/// The pool's metrics at one moment.
///
/// Pages holding data are `referenced_pages + evictable_pages`; with the free
/// pages they add up to `total_pages`. `allocated_total - freed_total` always
/// equals the pages holding data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct PoolStats {
    /// When the snapshot was taken, as the caller reported it.
    pub at: Timestamp,
    /// Pages in the pool.
    pub total_pages: u32,
    /// Pages on the free list.
    pub free_pages: u32,
    /// Pages referenced by running sequences or other holders.
    pub referenced_pages: u32,
    /// Cached pages nobody references: kept, but reclaimable.
    pub evictable_pages: u32,
    /// Token slots holding data, over all pages that hold data.
    pub filled_slots: u64,
    /// Pages handed out since the pool was built.
    pub allocated_total: u64,
    /// Pages that stopped holding data (freed or evicted) since then.
    pub freed_total: u64,
    /// Eviction events (one allocation that reclaimed a page, or one
    /// [`evict`](crate::PagePool::evict) call).
    pub evictions: u64,
    /// Pages reclaimed by evictions.
    pub pages_reclaimed: u64,
}

/// Pages allocated and freed per second between two snapshots.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct PageRates {
    /// Pages allocated per second.
    pub allocated_per_sec: f64,
    /// Pages freed or evicted per second.
    pub freed_per_sec: f64,
}

impl PoolStats {
    /// Pages holding data: referenced plus evictable.
    pub const fn pages_in_use(&self) -> u32 {
        self.total_pages - self.free_pages
    }

    /// Pages in use as a percentage of the pool.
    pub fn utilization_percent(&self) -> f64 {
        if self.total_pages == 0 {
            return 0.0;
        }
        f64::from(self.pages_in_use()) * 100.0 / f64::from(self.total_pages)
    }

    /// Internal fragmentation: token slots of in-use pages that hold nothing.
    pub const fn unused_slots(&self) -> u64 {
        (self.pages_in_use() as u64 * PAGE_SIZE as u64).saturating_sub(self.filled_slots)
    }

    /// Internal fragmentation as a percentage of the slots of in-use pages.
    pub fn fragmentation_percent(&self) -> f64 {
        let slots = u64::from(self.pages_in_use()) * PAGE_SIZE as u64;
        if slots == 0 {
            return 0.0;
        }
        self.unused_slots() as f64 * 100.0 / slots as f64
    }

    /// Allocation and free rates between `earlier` and this snapshot, or
    /// `None` if no time passed between them.
    pub fn rates_since(&self, earlier: &PoolStats) -> Option<PageRates> {
        let micros = self.at.micros_since(earlier.at);
        if micros == 0 {
            return None;
        }
        let secs = micros as f64 / 1e6;
        Some(PageRates {
            allocated_per_sec: self.allocated_total.saturating_sub(earlier.allocated_total) as f64
                / secs,
            freed_per_sec: self.freed_total.saturating_sub(earlier.freed_total) as f64 / secs,
        })
    }
}
