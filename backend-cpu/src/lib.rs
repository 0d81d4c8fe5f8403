//! # pagoda-cpu
//!
//! Pagoda's CPU paged-attention backend, implementing
//! [`pagoda_core::backend::Backend`].
//!
//! - One pass over each sequence's pages with an online softmax: no score
//!   matrix, page boundaries invisible to the result.
//! - Grouped-query heads are processed together, so decode reads every key
//!   and value once per group of query heads that share it.
//! - SIMD through `std::arch`, detected at run time: AVX2 + FMA + F16C on
//!   x86_64, NEON on aarch64, and a portable path giving the same answers
//!   within rounding. Keys and values are stored as f32, f16 or bf16 and
//!   widened in registers.
//! - Multi-threaded on one persistent [`Team`] across sequences, KV heads
//!   and query tiles, and across the KV length for long contexts (split-KV,
//!   then a merge of the partial softmaxes), so one long sequence uses every
//!   core. The team is a shareable handle: [`CpuBackend::team`] gives it to
//!   the model's matrix products, so a whole step runs on `threads` threads
//!   (the caller and `threads − 1` workers) and nothing else.
//!
//! ```
//! use pagoda_core::backend::{AttentionShape, Backend, SeqAttention};
//! use pagoda_core::{KvDtype, KvGeometry, PageId, Slot};
//! use pagoda_cpu::CpuBackend;
//!
//! let geometry = KvGeometry::new(1, 1, 64, KvDtype::F16).unwrap();
//! let mut cpu = CpuBackend::new();
//! let mut store = cpu.create_kv_store(geometry, 4).unwrap();
//! // One token in slot 3 × 16 + 0 (page 3), then attend to it.
//! let (k, v) = (vec![0.5f32; 64], vec![2.0f32; 64]);
//! cpu.scatter(&mut store, 0, &[Slot(48)], &k, &v).unwrap();
//! let shape = AttentionShape { q_heads: 1, kv_heads: 1, head_dim: 64, scale: 0.125, window: 0, softcap: 0.0 };
//! let pages = [PageId::from_index(3)];
//! let batch = [SeqAttention { pages: &pages, context_len: 1, query_start: 0, query_len: 1 }];
//! let mut out = vec![0.0f32; 64];
//! cpu.attention(&store, 0, shape, &batch, &vec![1.0; 64], &mut out).unwrap();
//! assert!(out.iter().all(|&o| o == 2.0)); // one key: softmax weight 1
//! ```

#![warn(missing_docs, clippy::undocumented_unsafe_blocks)]

mod attention;
mod data;
mod element;
mod kernels;
pub mod probe;
pub mod quant;
mod store;
pub mod team;

use std::fmt;

use pagoda_core::backend::{
    validate_attention, validate_copies, validate_scatter, validate_sinks, AttentionShape, Backend,
    BackendError, BackendErrorKind, InputError, SeqAttention, SUPPORTED_HEAD_DIMS,
};
use pagoda_core::{KvGeometry, PageCopy, Slot, PAGE_SIZE};

use data::{with_elements, KvData};
pub use element::KvElement;
pub use kernels::{gelu_tanh_mul, silu_mul, swiglu_oai_mul, Isa};
pub use quant::{
    matmul, matmul_team, matmul_team_each, ActFormat, QMatError, QuantMatrix, QuantizedActivations,
};
use store::{in_block, Layout};
pub use team::{split, Team, TeamError};

/// Why the CPU backend refused or failed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CpuError {
    /// The input is wrong; nothing was touched.
    Input(InputError),
    /// The store does not fit in memory.
    OutOfMemory {
        /// Bytes asked for.
        bytes: u64,
    },
    /// The thread team could not start.
    Threads(String),
    /// A kernel panicked on a worker thread (a bug); the team survives it.
    Worker(String),
}

impl fmt::Display for CpuError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Input(e) => write!(f, "invalid input: {e}"),
            Self::OutOfMemory { bytes } => write!(f, "cannot allocate a {bytes}-byte KV store"),
            Self::Threads(e) => write!(f, "cannot start the thread team: {e}"),
            Self::Worker(e) => write!(f, "attention failed on a worker: {e}"),
        }
    }
}

impl std::error::Error for CpuError {}

impl BackendError for CpuError {
    fn kind(&self) -> BackendErrorKind {
        match self {
            Self::Input(_) => BackendErrorKind::InvalidInput,
            Self::OutOfMemory { .. } => BackendErrorKind::OutOfMemory,
            Self::Threads(_) | Self::Worker(_) => BackendErrorKind::Unsupported,
        }
    }
}

impl From<InputError> for CpuError {
    fn from(e: InputError) -> Self {
        Self::Input(e)
    }
}

/// A KV store in host memory; see `store.rs` for the layout.
#[derive(Debug)]
pub struct CpuKvStore {
    geometry: KvGeometry,
    pages: u32,
    layout: Layout,
    data: KvData,
}

impl CpuKvStore {
    /// The geometry it was built for.
    pub fn geometry(&self) -> KvGeometry {
        self.geometry
    }

    /// Pages it holds.
    pub fn pages(&self) -> u32 {
        self.pages
    }
}

/// The CPU backend: a thread team, the instruction set it detected, and
/// the buffers attention reuses from call to call.
#[derive(Debug)]
pub struct CpuBackend {
    team: Team,
    isa: Isa,
    buffers: attention::Buffers,
}

impl Default for CpuBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl CpuBackend {
    /// A backend using every core and the best instruction set the CPU has
    /// (the calling thread alone if no other thread can start).
    pub fn new() -> Self {
        Self::with_threads(0).unwrap_or_else(|_| Self::on_team(Team::single()))
    }

    /// A backend running on `threads` threads, the caller included, so
    /// `threads − 1` are started (0: one per core).
    pub fn with_threads(threads: usize) -> Result<Self, CpuError> {
        let team = Team::new(Self::resolve_threads(threads))
            .map_err(|e| CpuError::Threads(e.to_string()))?;
        Ok(Self::on_team(team))
    }

    /// A backend running on `team`, which it shares with whoever else holds
    /// a handle to it (runs take turns).
    pub fn on_team(team: Team) -> Self {
        Self {
            team,
            isa: Isa::detect(),
            buffers: attention::Buffers::default(),
        }
    }

    /// A handle on the backend's team, for the products of the same step.
    pub fn team(&self) -> &Team {
        &self.team
    }

    /// Uses `isa` instead of the detected one if the CPU has it (`Scalar`
    /// always works; else the detected one stays).
    pub fn with_isa(mut self, isa: Isa) -> Self {
        if isa.is_supported() {
            self.isa = isa;
        }
        self
    }

    /// The instruction set in use.
    pub fn isa(&self) -> Isa {
        self.isa
    }

    /// Threads a call uses, the caller included.
    pub fn threads(&self) -> usize {
        self.team.workers()
    }

    /// The threads [`with_threads`](Self::with_threads)`(threads)` runs on,
    /// without starting them (0: one per core, or one when that count is
    /// unknown).
    pub fn resolve_threads(threads: usize) -> usize {
        if threads == 0 {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        } else {
            threads
        }
    }
}

/// One head row a scatter or gather moves.
struct SlotRow {
    /// 0 for keys, 1 for values.
    kv: usize,
    /// Its start in the caller's packed `[slots, kv_heads, head_dim]` tensor.
    row_at: usize,
    /// The start of its head's block in the store.
    block_at: usize,
    /// Its slot in the page.
    offset: usize,
}

/// Every head row a scatter or gather of `slots` moves.
fn slot_rows<'a>(
    layout: &'a Layout,
    layer: u32,
    slots: &'a [Slot],
) -> impl Iterator<Item = SlotRow> + 'a {
    let dim = layout.head_dim;
    slots.iter().enumerate().flat_map(move |(i, slot)| {
        let (page, offset) = (slot.page().index(), slot.offset() as usize);
        (0..2).flat_map(move |kv| {
            let base = layout.offset(layer, page, kv);
            (0..layout.kv_heads).map(move |h| SlotRow {
                kv,
                row_at: (i * layout.kv_heads + h) * dim,
                block_at: base + h * layout.head_block(),
                offset,
            })
        })
    })
}

fn scatter_into<E: KvElement>(
    data: &mut [E],
    layout: &Layout,
    layer: u32,
    slots: &[Slot],
    keys: &[f32],
    values: &[f32],
) {
    let dim = layout.head_dim;
    for row in slot_rows(layout, layer, slots) {
        let src = if row.kv == 0 { keys } else { values };
        let block = &mut data[row.block_at..row.block_at + layout.head_block()];
        for (d, s) in src[row.row_at..row.row_at + dim].iter().enumerate() {
            block[in_block(row.kv, row.offset, d)] = E::from_f32(*s);
        }
    }
}

fn gather_from<E: KvElement>(
    data: &[E],
    layout: &Layout,
    layer: u32,
    slots: &[Slot],
    keys: &mut [f32],
    values: &mut [f32],
) {
    let dim = layout.head_dim;
    for row in slot_rows(layout, layer, slots) {
        let dst = if row.kv == 0 {
            &mut *keys
        } else {
            &mut *values
        };
        let block = &data[row.block_at..row.block_at + layout.head_block()];
        for (d, out) in dst[row.row_at..row.row_at + dim].iter_mut().enumerate() {
            *out = block[in_block(row.kv, row.offset, d)].to_f32();
        }
    }
}

fn copy_within<E: KvElement>(data: &mut [E], layout: &Layout, copies: &[PageCopy]) {
    for c in copies {
        let n = c.slots as usize;
        for layer in 0..layout.layers as u32 {
            for kv in 0..2 {
                let (src, dst) = (
                    layout.offset(layer, c.src.index(), kv),
                    layout.offset(layer, c.dst.index(), kv),
                );
                let (runs, width) = layout.runs(kv);
                for h in 0..layout.kv_heads {
                    for run in 0..runs {
                        let at = h * layout.head_block() + run * PAGE_SIZE * width;
                        data.copy_within(src + at..src + at + n * width, dst + at);
                    }
                }
            }
        }
    }
}

impl CpuBackend {
    /// Attention of a batch, checked, with `sinks` where given (checked by
    /// the caller).
    #[allow(clippy::too_many_arguments)]
    fn attend(
        &mut self,
        store: &CpuKvStore,
        layer: u32,
        shape: AttentionShape,
        sinks: Option<&[f32]>,
        batch: &[SeqAttention<'_>],
        queries: &[f32],
        out: &mut [f32],
    ) -> Result<(), CpuError> {
        validate_attention(
            &store.geometry,
            store.pages,
            layer,
            &shape,
            batch,
            queries.len(),
            out.len(),
        )?;
        let (team, buffers, isa, layout) =
            (&mut self.team, &mut self.buffers, self.isa, &store.layout);
        with_elements!(&store.data, |d| attention::attention(
            team, buffers, isa, d, layout, layer, &shape, sinks, batch, queries, out
        ))
        .map_err(|e| CpuError::Worker(e.to_string()))
    }
}

impl Backend for CpuBackend {
    type KvStore = CpuKvStore;
    type Error = CpuError;

    fn name(&self) -> &'static str {
        "cpu"
    }

    fn create_kv_store(
        &mut self,
        geometry: KvGeometry,
        pages: u32,
    ) -> Result<CpuKvStore, CpuError> {
        // The block layouts tile values 16 columns at a time, and attention
        // refuses other dims anyway: refuse them before any memory exists.
        if !SUPPORTED_HEAD_DIMS.contains(&geometry.head_dim()) {
            return Err(InputError::HeadDim(geometry.head_dim()).into());
        }
        let layout = Layout::new(&geometry, pages);
        let bytes = geometry.bytes_per_page().saturating_mul(u64::from(pages));
        let n = layout.elements().ok_or(CpuError::OutOfMemory { bytes })?;
        let data = KvData::zeroed(geometry.dtype(), n, bytes)?;
        Ok(CpuKvStore {
            geometry,
            pages,
            layout,
            data,
        })
    }

    fn scatter(
        &mut self,
        store: &mut CpuKvStore,
        layer: u32,
        slots: &[Slot],
        keys: &[f32],
        values: &[f32],
    ) -> Result<(), CpuError> {
        validate_scatter(
            &store.geometry,
            store.pages,
            layer,
            slots,
            keys.len(),
            values.len(),
        )?;
        let layout = store.layout;
        with_elements!(&mut store.data, |d| scatter_into(
            d, &layout, layer, slots, keys, values
        ));
        Ok(())
    }

    fn attention(
        &mut self,
        store: &CpuKvStore,
        layer: u32,
        shape: AttentionShape,
        batch: &[SeqAttention<'_>],
        queries: &[f32],
        out: &mut [f32],
    ) -> Result<(), CpuError> {
        self.attend(store, layer, shape, None, batch, queries, out)
    }

    fn attention_with_sinks(
        &mut self,
        store: &CpuKvStore,
        layer: u32,
        shape: AttentionShape,
        sinks: &[f32],
        batch: &[SeqAttention<'_>],
        queries: &[f32],
        out: &mut [f32],
    ) -> Result<(), CpuError> {
        validate_sinks(&shape, sinks)?;
        self.attend(store, layer, shape, Some(sinks), batch, queries, out)
    }

    fn gather(
        &mut self,
        store: &CpuKvStore,
        layer: u32,
        slots: &[Slot],
        keys: &mut [f32],
        values: &mut [f32],
    ) -> Result<(), CpuError> {
        validate_scatter(
            &store.geometry,
            store.pages,
            layer,
            slots,
            keys.len(),
            values.len(),
        )?;
        let layout = store.layout;
        with_elements!(&store.data, |d| gather_from(
            d, &layout, layer, slots, keys, values
        ));
        Ok(())
    }

    fn copy_pages(&mut self, store: &mut CpuKvStore, copies: &[PageCopy]) -> Result<(), CpuError> {
        validate_copies(store.pages, copies)?;
        let layout = store.layout;
        with_elements!(&mut store.data, |d| copy_within(d, &layout, copies));
        Ok(())
    }

    fn memory_bytes(&self, store: &CpuKvStore) -> u64 {
        let elements = store.layout.elements().unwrap_or(0) as u64;
        elements * u64::from(store.geometry.dtype().size_bytes())
    }
}
