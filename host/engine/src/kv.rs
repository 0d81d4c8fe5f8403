//! The storage the engine's core structures live in, allocated once the way
//! an embedded host would hand in statics, and its split into the KV cache
//! ([`KvCache`]: pool, page tables, radix cache, scratch row) and the rest
//! (queue, scheduler slots, watch table).

use pagoda_core::queue::QueueSlot;
use pagoda_core::scheduler::{SchedSlot, Scheduler};
use pagoda_core::{
    CacheEvent, KvCache, KvGroups, KvStorage, LayerPlace, PageEntry, PageId, RadixCache, RadixNode,
    SeqEntry, StorageError, PAGE_SIZE,
};

use crate::config::EngineConfig;
use crate::model::Model;
use crate::request::Queued;

/// How a model's layers share KV pages: one group of every layer, or (for a
/// model with sliding-window layers, on a backend that pages groups) the
/// core's [`KvGroups`], windowed groups holding only their window.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct KvLayout {
    groups: KvGroups,
    /// Layers each page holds; 0 for one group of every layer.
    per_group: u32,
    /// Each layer's group and index within the group's pages; empty for one
    /// group of every layer.
    places: Vec<LayerPlace>,
}

impl KvLayout {
    /// Every layer in one group: each page holds every layer.
    pub fn single() -> Self {
        Self::default()
    }

    /// The model's layers grouped by their windows ([`KvGroups::plan`]):
    /// one group when no layer has a window, or when the windows differ.
    pub fn for_model(model: &Model) -> Self {
        let windows = model.layer_windows();
        let mut places = vec![LayerPlace::default(); windows.len()];
        match KvGroups::plan(&windows, &mut places) {
            Ok((groups, per_group)) if groups.count() > 1 => Self {
                groups,
                per_group,
                places,
            },
            _ => Self::single(),
        }
    }

    /// The groups.
    pub fn groups(&self) -> KvGroups {
        self.groups
    }

    /// Layers each page holds, `None` when a page holds every layer.
    pub fn per_group(&self) -> Option<u32> {
        (self.per_group > 0).then_some(self.per_group)
    }

    /// Each layer's place; empty when a page holds every layer.
    pub fn places(&self) -> &[LayerPlace] {
        &self.places
    }

    /// Pool pages for the bytes `kv_pages` pages of every layer take: each
    /// page of a group holds `per_group` of the model's `layers`.
    pub fn pool_pages(&self, kv_pages: u32, layers: u32) -> u32 {
        match self.per_group() {
            None => kv_pages,
            Some(per) => {
                let pages = u64::from(kv_pages) * u64::from(layers) / u64::from(per);
                u32::try_from(pages).unwrap_or(u32::MAX - 1)
            }
        }
    }
}

/// Every buffer the engine's core structures live in, allocated once, the
/// way an embedded host would hand in statics.
pub struct EngineStorage {
    pages: Vec<PageEntry>,
    rows: Vec<PageId>,
    seqs: Vec<SeqEntry>,
    nodes: Vec<RadixNode>,
    index: Vec<u64>,
    queue: Vec<QueueSlot<Queued>>,
    slots: Vec<SchedSlot<Queued>>,
    watch: Vec<u32>,
    scratch: Vec<PageId>,
    events: Vec<CacheEvent>,
    group_pages: Vec<PageId>,
    layout: KvLayout,
}

impl EngineStorage {
    /// Storage for `config` and a model whose context is `max_context`
    /// tokens, every layer in one group.
    pub fn new(config: &EngineConfig, max_context: u32) -> Self {
        Self::with_layout(config, max_context, KvLayout::single(), config.kv_pages)
    }

    /// Storage for `config` and `model`, its layers grouped by their
    /// windows when `grouped` (a backend that pages groups:
    /// [`StepBackend::KV_GROUPS`](crate::StepBackend::KV_GROUPS)). The pool
    /// takes the bytes `config.kv_pages` pages of every layer would, in
    /// pages of a group's layers.
    pub fn for_model(config: &EngineConfig, model: &Model, grouped: bool) -> Self {
        let layout = if grouped {
            KvLayout::for_model(model)
        } else {
            KvLayout::single()
        };
        let pool_pages = layout.pool_pages(config.kv_pages, model.cache_layers());
        Self::with_layout(config, model.config().max_context, layout, pool_pages)
    }

    fn with_layout(
        config: &EngineConfig,
        max_context: u32,
        layout: KvLayout,
        pool_pages: u32,
    ) -> Self {
        let pages_per_seq = max_context.div_ceil(PAGE_SIZE as u32) as usize;
        let groups = layout.groups().count() as usize;
        let max_seqs = config.scheduler.max_batch as usize;
        let nodes = pool_pages.max(1) as usize;
        let slots = config.scheduler_slots.max(1) as usize;
        Self {
            pages: vec![PageEntry::EMPTY; pool_pages as usize],
            rows: vec![PageId::VACANT; max_seqs * groups * pages_per_seq],
            seqs: vec![SeqEntry::EMPTY; max_seqs],
            nodes: vec![RadixNode::EMPTY; nodes],
            index: vec![0; RadixCache::index_len_for(nodes)],
            queue: (0..config.queue_capacity.max(1))
                .map(|_| QueueSlot::EMPTY)
                .collect(),
            slots: (0..slots).map(|_| SchedSlot::EMPTY).collect(),
            watch: vec![0; Scheduler::<Queued>::watch_len_for(slots)],
            scratch: vec![PageId::VACANT; groups * pages_per_seq],
            events: vec![CacheEvent::EMPTY; config.cache_events as usize],
            group_pages: vec![PageId::VACANT; nodes * (groups - 1)],
            layout,
        }
    }

    /// How the storage groups the model's layers.
    pub fn layout(&self) -> &KvLayout {
        &self.layout
    }

    /// Pages of the KV pool.
    pub fn pool_pages(&self) -> u32 {
        self.pages.len() as u32
    }
}

/// The storage the queue and the scheduler take, besides the KV cache.
pub(crate) struct OtherStorage<'s> {
    pub(crate) queue: &'s mut [QueueSlot<Queued>],
    pub(crate) slots: &'s mut [SchedSlot<Queued>],
    pub(crate) watch: &'s mut [u32],
}

impl EngineStorage {
    /// Builds the KV cache over this storage; returns the rest of it.
    #[allow(clippy::type_complexity)]
    pub(crate) fn split(
        &mut self,
    ) -> Result<(KvCache<'_>, OtherStorage<'_>, &KvLayout), StorageError> {
        let Self {
            pages,
            rows,
            seqs,
            nodes,
            index,
            queue,
            slots,
            watch,
            scratch,
            events,
            group_pages,
            layout,
        } = self;
        let storage = KvStorage {
            pages,
            rows,
            seqs,
            nodes,
            index,
            scratch,
        };
        let mut kv = KvCache::with_groups(storage, layout.groups(), group_pages)?;
        kv.set_event_ring(events);
        Ok((
            kv,
            OtherStorage {
                queue,
                slots,
                watch,
            },
            layout,
        ))
    }
}
