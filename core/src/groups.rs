//! KV groups: which layers' keys and values share a page, and which of them
//! only keep a sliding window.
//!
//! A model whose layers all attend to the whole context pages every layer
//! together: one group, one page-table row per sequence (the common case,
//! [`KvGroups::SINGLE`]). A model with sliding-window layers (Gemma 2: every
//! other layer; Gemma 3: five local layers to each global one) would waste most of its cache holding
//! local layers' keys that no query can see any more. So, as in vLLM's
//! hybrid KV-cache manager, its layers are split into groups of equal size,
//! the full-attention layers in the first groups and the windowed ones in
//! the rest. Every group's page holds the same number of layers, so every
//! page is the same size and one pool serves all groups; each sequence has
//! one page-table row per group. A windowed group's row keeps only the pages
//! its window still needs: earlier entries are [`PageId::NONE`] and their
//! pages went back to the pool (or stay evictable in the prefix cache).
//!
//! ```
//! use pagoda_core::{KvGroups, LayerPlace};
//! // Gemma 3 270M: 18 layers, every sixth global, the rest a 512-token window.
//! let windows: Vec<u32> = (0..18).map(|l| if l % 6 == 5 { 0 } else { 512 }).collect();
//! let mut places = [LayerPlace::default(); 18];
//! let (groups, per_group) = KvGroups::plan(&windows, &mut places).unwrap();
//! assert_eq!((groups.full(), groups.windowed(), per_group), (1, 5, 3));
//! assert_eq!(places[5], LayerPlace { group: 0, index: 0 }); // the first global layer
//! assert_eq!(places[0], LayerPlace { group: 1, index: 0 });
//! // A query at position 4,095 sees keys from 3,584 on: page 224 onwards.
//! assert_eq!(groups.first_needed_page(4095), 224);
//! ```
//!
//! [`PageId::NONE`]: crate::PageId::NONE

use core::fmt;

use crate::geometry::PAGE_SIZE;

/// The most groups a cache is split into: enough for every Gemma 3 size
/// (seven at most), small enough that per-group state lives in fixed arrays.
pub const MAX_KV_GROUPS: usize = 8;

const PAGE: u32 = PAGE_SIZE as u32;

/// Why a group split was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum GroupsError {
    /// No full-attention group, more than [`MAX_KV_GROUPS`] groups, windowed
    /// groups without a window, or a window without windowed groups.
    Shape,
    /// Windowed layers with different windows.
    MixedWindows,
    /// The layer list and the places to fill differ in length, or are empty.
    Layers,
}

impl fmt::Display for GroupsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Shape => {
                "KV groups need a full-attention group, at most 8 groups, and a window exactly when some are windowed"
            }
            Self::MixedWindows => "windowed layers must share one window",
            Self::Layers => "one place per layer, and at least one layer",
        })
    }
}

impl core::error::Error for GroupsError {}

/// How a cache's pages are grouped: `full` groups of full-attention layers
/// first, then `windowed` groups whose layers see only the last `window`
/// positions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct KvGroups {
    full: u8,
    windowed: u8,
    window: u32,
}

impl Default for KvGroups {
    fn default() -> Self {
        Self::SINGLE
    }
}

impl KvGroups {
    /// Every layer in one full-attention group: the layout of a model
    /// without windows.
    pub const SINGLE: Self = Self {
        full: 1,
        windowed: 0,
        window: 0,
    };

    /// Checks and builds a grouping.
    pub const fn new(full: u32, windowed: u32, window: u32) -> Result<Self, GroupsError> {
        let total = full as u64 + windowed as u64;
        if full == 0 || total > MAX_KV_GROUPS as u64 || (windowed > 0) != (window > 0) {
            return Err(GroupsError::Shape);
        }
        Ok(Self {
            full: full as u8,
            windowed: windowed as u8,
            window,
        })
    }

    /// Groups in all: page-table rows per sequence.
    #[inline]
    pub const fn count(&self) -> u32 {
        self.full as u32 + self.windowed as u32
    }

    /// Full-attention groups (the first ones).
    #[inline]
    pub const fn full(&self) -> u32 {
        self.full as u32
    }

    /// Windowed groups (after the full ones).
    #[inline]
    pub const fn windowed(&self) -> u32 {
        self.windowed as u32
    }

    /// The windowed layers' window in tokens; 0 when there are none.
    #[inline]
    pub const fn window(&self) -> u32 {
        self.window
    }

    /// Whether `group` keeps only a window.
    #[inline]
    pub const fn is_windowed(&self, group: u32) -> bool {
        group >= self.full as u32 && group < self.count()
    }

    /// The first page of a windowed group that a query at `pos` reads:
    /// every earlier page is out of its window (0 without windows).
    #[inline]
    pub const fn first_needed_page(&self, pos: u32) -> u32 {
        if self.windowed == 0 {
            0
        } else {
            (pos.saturating_add(1)).saturating_sub(self.window) / PAGE
        }
    }

    /// The most pages one windowed group holds for a decoding sequence: a
    /// window, plus one page where the window straddles a page boundary.
    #[inline]
    pub const fn window_pages(&self) -> u32 {
        self.window.div_ceil(PAGE) + 1
    }

    /// Pages one sequence holds in all groups once it decodes at a context
    /// of `tokens` tokens: every full group's pages, and at most
    /// [`window_pages`](Self::window_pages) in each windowed group.
    pub const fn pages_at(&self, tokens: u64) -> u64 {
        let pages = tokens.div_ceil(PAGE as u64);
        let windowed = if pages < self.window_pages() as u64 {
            pages
        } else {
            self.window_pages() as u64
        };
        pages * self.full as u64 + windowed * self.windowed as u64
    }

    /// Splits layers into groups by their windows (0: full attention) and
    /// writes each layer's [`LayerPlace`]. Returns the grouping and the
    /// layers each group's page holds. Full-attention layers fill the first
    /// groups in order, windowed layers the rest; groups are as small as the
    /// scarcer kind allows (at most [`MAX_KV_GROUPS`] in all), the last of
    /// each kind padded. Without both kinds, every layer shares one group.
    pub fn plan(
        layer_windows: &[u32],
        places: &mut [LayerPlace],
    ) -> Result<(Self, u32), GroupsError> {
        if layer_windows.is_empty() || layer_windows.len() != places.len() {
            return Err(GroupsError::Layers);
        }
        let layers = u32::try_from(layer_windows.len()).map_err(|_| GroupsError::Layers)?;
        let windowed_layers = layer_windows.iter().filter(|&&w| w > 0).count() as u32;
        let full_layers = layers - windowed_layers;
        let window = layer_windows.iter().copied().max().unwrap_or(0);
        if layer_windows.iter().any(|&w| w != 0 && w != window) {
            return Err(GroupsError::MixedWindows);
        }
        if full_layers == 0 || windowed_layers == 0 {
            for (index, place) in (0..).zip(places.iter_mut()) {
                *place = LayerPlace { group: 0, index };
            }
            return Ok((Self::SINGLE, layers));
        }
        let mut per = full_layers.min(windowed_layers);
        while full_layers.div_ceil(per) + windowed_layers.div_ceil(per) > MAX_KV_GROUPS as u32 {
            per += 1;
        }
        let full = full_layers.div_ceil(per);
        let groups = Self::new(full, windowed_layers.div_ceil(per), window)?;
        let (mut full_seen, mut windowed_seen) = (0, 0);
        for (&w, place) in layer_windows.iter().zip(places.iter_mut()) {
            let (first_group, seen) = if w == 0 {
                (0, &mut full_seen)
            } else {
                (full, &mut windowed_seen)
            };
            *place = LayerPlace {
                group: first_group + *seen / per,
                index: *seen % per,
            };
            *seen += 1;
        }
        Ok((groups, per))
    }
}

/// Where one layer's keys and values live: the group whose rows address it,
/// and its index among the layers each of that group's pages holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct LayerPlace {
    /// The group.
    pub group: u32,
    /// The layer's index within the group's pages.
    pub index: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_model_without_windows_keeps_one_group() {
        let mut places = [LayerPlace::default(); 4];
        let (g, per) = KvGroups::plan(&[0; 4], &mut places).unwrap();
        assert_eq!((g, per), (KvGroups::SINGLE, 4));
        assert_eq!(places[3], LayerPlace { group: 0, index: 3 });
        assert_eq!(g.first_needed_page(10_000), 0);
    }

    #[test]
    fn many_windowed_layers_widen_the_groups_to_fit_eight() {
        let windows: [u32; 63] = core::array::from_fn(|l| if l < 3 { 0 } else { 64 });
        let mut places = [LayerPlace::default(); 63];
        let (g, per) = KvGroups::plan(&windows, &mut places).unwrap();
        assert!(g.count() <= MAX_KV_GROUPS as u32);
        assert_eq!(per, 9);
        let mut seen = [[false; 9]; MAX_KV_GROUPS];
        for p in places {
            assert!(p.index < per && !seen[p.group as usize][p.index as usize]);
            seen[p.group as usize][p.index as usize] = true;
        }
    }

    #[test]
    fn mixed_windows_and_bad_shapes_are_refused() {
        let mut places = [LayerPlace::default(); 3];
        assert_eq!(
            KvGroups::plan(&[0, 64, 128], &mut places),
            Err(GroupsError::MixedWindows)
        );
        assert_eq!(KvGroups::new(0, 1, 64), Err(GroupsError::Shape));
        assert_eq!(KvGroups::new(1, 1, 0), Err(GroupsError::Shape));
        assert_eq!(KvGroups::new(4, 5, 64), Err(GroupsError::Shape));
    }

    #[test]
    fn a_window_needs_at_most_its_pages_plus_one() {
        let g = KvGroups::new(1, 1, 512).unwrap();
        for pos in 0..5_000u32 {
            let first = g.first_needed_page(pos);
            let held = pos / PAGE + 1 - first;
            assert!(held <= g.window_pages(), "pos {pos}");
            // The first needed page holds the first visible position.
            let visible = (pos + 1).saturating_sub(g.window());
            assert!(
                first * PAGE <= visible && visible < (first + 1) * PAGE,
                "pos {pos}"
            );
        }
    }
}
