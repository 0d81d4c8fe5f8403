//! The contract between the core and an attention backend (CPU, Vulkan).
//!
//! The core decides which pages hold which tokens; a backend owns the bytes.
//! One trait, statically dispatched: the host picks a backend with an enum.
//! A batch is any mix of decode (one new token), prefill and chunked prefill:
//! each sequence brings its page-table row as the core keeps it, its context
//! length, and its new query tokens as a range of one packed query tensor.
//! New tokens are the last `query_len` positions of the context, causal among
//! themselves and attending to every cached position before them.
//!
//! Every input is checked by [`validate_attention`] and
//! [`validate_scatter`] before any memory is touched, so every backend
//! refuses the same inputs with the same [`InputError`].

use core::fmt;

use crate::geometry::{KvGeometry, PAGE_SIZE};
use crate::ids::{PageId, Slot};
use crate::page_table::PageCopy;

/// What kind of failure a backend hit, so an engine can react without
/// knowing the backend: shed load, rebuild the device, fall back, or report
/// the caller's mistake.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum BackendErrorKind {
    /// Host or device memory ran out.
    OutOfMemory,
    /// The device was lost; its objects are gone.
    DeviceLost,
    /// The backend cannot do this (head dim, dtype, missing feature).
    Unsupported,
    /// The request itself is wrong (out-of-range slot, page or length).
    InvalidInput,
}

/// A backend's error: anything displayable with a [`BackendErrorKind`].
pub trait BackendError: fmt::Debug + fmt::Display {
    /// Its kind.
    fn kind(&self) -> BackendErrorKind;
}

/// Head dimensions the core accepts, each a multiple of 16. The CPU
/// backend runs them all; the last, 576, is multi-head latent attention's
/// cached row (DeepSeek's 512-wide latent and its 64 rotary dimensions, one
/// "head" every query head reads), which Vulkan, whose kernels size shared
/// memory for at most 256, refuses.
pub const SUPPORTED_HEAD_DIMS: [u32; 7] = [64, 80, 96, 128, 192, 256, 576];

/// The head dimension of multi-head latent attention's cached row.
pub const LATENT_HEAD_DIM: u32 = 576;

/// The attention's head layout: grouped-query when `q_heads` is a multiple of
/// `kv_heads` (multi-query when `kv_heads` is 1).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttentionShape {
    /// Query heads.
    pub q_heads: u32,
    /// Key/value heads (the geometry's).
    pub kv_heads: u32,
    /// Dimension of one head.
    pub head_dim: u32,
    /// Softmax scale, usually `1 / sqrt(head_dim)`.
    pub scale: f32,
    /// Sliding window: a query at position `p` sees keys at positions
    /// `p - window + 1 ..= p` only (Gemma's, Mistral's local layers); 0
    /// for the whole context. Pages wholly before every query's window are
    /// never read, so a caller may have given them back to the pool.
    pub window: u32,
    /// Soft cap of the scaled scores, `cap × tanh(score / cap)` (Gemma 2);
    /// 0 for none.
    pub softcap: f32,
}

impl AttentionShape {
    /// The first key position a query at `pos` sees.
    pub const fn first_visible(&self, pos: u32) -> u32 {
        if self.window == 0 {
            0
        } else {
            (pos + 1).saturating_sub(self.window)
        }
    }

    /// Query heads sharing one KV head.
    pub const fn group(&self) -> u32 {
        match self.q_heads.checked_div(self.kv_heads) {
            Some(g) => g,
            None => 0,
        }
    }

    /// Floats in one query (or output) row: `q_heads × head_dim`.
    pub const fn q_row(&self) -> usize {
        self.q_heads as usize * self.head_dim as usize
    }

    /// Floats in one new key (or value) row: `kv_heads × head_dim`.
    pub const fn kv_row(&self) -> usize {
        self.kv_heads as usize * self.head_dim as usize
    }
}

/// One sequence of an attention batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeqAttention<'a> {
    /// The sequence's page-table row, as [`PageTable::pages`](crate::PageTable::pages)
    /// or a row of [`PageTable::block_table`](crate::PageTable::block_table) gives it.
    pub pages: &'a [PageId],
    /// Tokens in the cache, the new ones included (their keys and values
    /// were scattered first).
    pub context_len: u32,
    /// First row of this sequence's queries in the packed query tensor.
    pub query_start: u32,
    /// New query tokens: the last `query_len` positions of the context.
    pub query_len: u32,
}

/// Why a batch, scatter or copy was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum InputError {
    /// Query heads are not a positive multiple of KV heads, or KV heads differ
    /// from the store's.
    HeadLayout,
    /// The head dimension is not one the backend supports.
    HeadDim(u32),
    /// The softmax scale is not finite and positive.
    Scale,
    /// The soft cap is not finite and non-negative.
    Softcap,
    /// A page id is outside the store.
    PageOutOfRange(PageId),
    /// A slot is outside the store.
    SlotOutOfRange(Slot),
    /// The layer is outside the store.
    LayerOutOfRange(u32),
    /// A sequence's context is longer than its row's pages hold.
    ContextTooLong {
        /// Tokens asked.
        context_len: u32,
        /// Tokens the row's pages hold.
        capacity: u64,
    },
    /// A sequence has more query tokens than context, or none.
    QueryLength,
    /// A tensor's length does not match what the batch describes.
    TensorLength {
        /// Floats expected.
        expected: u64,
        /// Floats given.
        actual: u64,
    },
    /// A copy-on-write copy names too many slots.
    CopySlots(u32),
    /// Attention sinks are not one finite logit per query head.
    Sinks {
        /// Sinks given.
        len: usize,
        /// Query heads.
        q_heads: u32,
    },
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::HeadLayout => {
                f.write_str("query heads must be a positive multiple of the store's KV heads")
            }
            Self::HeadDim(d) => write!(f, "unsupported head dimension {d}"),
            Self::Scale => f.write_str("softmax scale must be finite and positive"),
            Self::Softcap => f.write_str("soft cap must be finite and non-negative"),
            Self::PageOutOfRange(p) => write!(f, "{p} is outside the KV store"),
            Self::SlotOutOfRange(s) => write!(f, "slot {} is outside the KV store", s.0),
            Self::LayerOutOfRange(l) => write!(f, "layer {l} is outside the KV store"),
            Self::ContextTooLong {
                context_len,
                capacity,
            } => {
                write!(
                    f,
                    "context of {context_len} tokens exceeds its {capacity}-token row"
                )
            }
            Self::QueryLength => {
                f.write_str("query length must be between 1 and the context length")
            }
            Self::TensorLength { expected, actual } => {
                write!(f, "tensor has {actual} floats, the batch needs {expected}")
            }
            Self::CopySlots(n) => write!(f, "page copy of {n} slots exceeds a page"),
            Self::Sinks { len, q_heads } => write!(
                f,
                "attention sinks must be {q_heads} finite logits, one per query head (got {len})"
            ),
        }
    }
}

/// Checks attention sinks for `shape`: one finite logit per query head.
pub fn validate_sinks(shape: &AttentionShape, sinks: &[f32]) -> Result<(), InputError> {
    if sinks.len() != shape.q_heads as usize || !sinks.iter().all(|s| s.is_finite()) {
        return Err(InputError::Sinks {
            len: sinks.len(),
            q_heads: shape.q_heads,
        });
    }
    Ok(())
}

/// A paged-attention backend.
///
/// The engine's order per layer and step: [`copy_pages`](Self::copy_pages)
/// for copy-on-write, [`scatter`](Self::scatter) the new tokens' keys and
/// values into their slots, then [`attention`](Self::attention).
pub trait Backend {
    /// The KV store: every page's keys and values for every layer.
    type KvStore;
    /// The backend's error.
    type Error: BackendError;

    /// A short name for reports.
    fn name(&self) -> &'static str;

    /// Creates a store of `pages` pages for `geometry`.
    fn create_kv_store(
        &mut self,
        geometry: KvGeometry,
        pages: u32,
    ) -> Result<Self::KvStore, Self::Error>;

    /// Writes new keys and values (rows of `kv_heads × head_dim` f32, one per
    /// slot) of `layer` into `slots`.
    fn scatter(
        &mut self,
        store: &mut Self::KvStore,
        layer: u32,
        slots: &[Slot],
        keys: &[f32],
        values: &[f32],
    ) -> Result<(), Self::Error>;

    /// Paged attention of `layer` for a batch: `queries` and `out` are packed
    /// rows of `q_heads × head_dim` f32, one per new token.
    fn attention(
        &mut self,
        store: &Self::KvStore,
        layer: u32,
        shape: AttentionShape,
        batch: &[SeqAttention<'_>],
        queries: &[f32],
        out: &mut [f32],
    ) -> Result<(), Self::Error>;

    /// [`attention`](Self::attention) where each query head's softmax also
    /// counts a learned sink logit, `sinks[head]` (`q_heads` values;
    /// gpt-oss): a key with no value behind it, so a head may give a query
    /// less than all of its attention. A backend without it refuses with an
    /// [`Unsupported`](BackendErrorKind::Unsupported) error.
    #[allow(clippy::too_many_arguments)]
    fn attention_with_sinks(
        &mut self,
        store: &Self::KvStore,
        layer: u32,
        shape: AttentionShape,
        sinks: &[f32],
        batch: &[SeqAttention<'_>],
        queries: &[f32],
        out: &mut [f32],
    ) -> Result<(), Self::Error>;

    /// Reads the keys and values of `layer` at `slots` back as f32 rows (the
    /// gather half of the spec's kernel integration, for tests and tools).
    fn gather(
        &mut self,
        store: &Self::KvStore,
        layer: u32,
        slots: &[Slot],
        keys: &mut [f32],
        values: &mut [f32],
    ) -> Result<(), Self::Error>;

    /// Runs copy-on-write copies (every layer, keys and values).
    fn copy_pages(
        &mut self,
        store: &mut Self::KvStore,
        copies: &[PageCopy],
    ) -> Result<(), Self::Error>;

    /// Bytes the store holds.
    fn memory_bytes(&self, store: &Self::KvStore) -> u64;
}

/// Checks an attention call against a store of `pages` pages and `geometry`
/// before anything is read or written. Returns the query rows the batch uses.
pub fn validate_attention(
    geometry: &KvGeometry,
    pages: u32,
    layer: u32,
    shape: &AttentionShape,
    batch: &[SeqAttention<'_>],
    queries: usize,
    out: usize,
) -> Result<u64, InputError> {
    if layer >= geometry.layers() {
        return Err(InputError::LayerOutOfRange(layer));
    }
    if shape.kv_heads != geometry.kv_heads()
        || shape.q_heads == 0
        || !shape.q_heads.is_multiple_of(shape.kv_heads)
    {
        return Err(InputError::HeadLayout);
    }
    if shape.head_dim != geometry.head_dim() || !SUPPORTED_HEAD_DIMS.contains(&shape.head_dim) {
        return Err(InputError::HeadDim(shape.head_dim));
    }
    if !(shape.scale.is_finite() && shape.scale > 0.0) {
        return Err(InputError::Scale);
    }
    if !(shape.softcap.is_finite() && shape.softcap >= 0.0) {
        return Err(InputError::Softcap);
    }
    let mut rows = 0u64;
    for seq in batch {
        if seq.query_len == 0 || seq.query_len > seq.context_len {
            return Err(InputError::QueryLength);
        }
        let capacity = seq.pages.len() as u64 * PAGE_SIZE as u64;
        if u64::from(seq.context_len) > capacity {
            return Err(InputError::ContextTooLong {
                context_len: seq.context_len,
                capacity,
            });
        }
        let used = (seq.context_len as usize).div_ceil(PAGE_SIZE);
        // Pages before the first query's window are never read: a windowed
        // row may have let them go.
        let first_query = seq.context_len - seq.query_len;
        let first = (shape.first_visible(first_query) as usize / PAGE_SIZE).min(used);
        if let Some(&bad) = seq.pages[first..used].iter().find(|p| p.index() >= pages) {
            return Err(InputError::PageOutOfRange(bad));
        }
        rows = rows.max(u64::from(seq.query_start) + u64::from(seq.query_len));
    }
    let row = shape.q_row() as u64;
    for len in [queries, out] {
        if (len as u64) < rows * row {
            return Err(InputError::TensorLength {
                expected: rows * row,
                actual: len as u64,
            });
        }
    }
    Ok(rows)
}

/// Checks a scatter before anything is written.
pub fn validate_scatter(
    geometry: &KvGeometry,
    pages: u32,
    layer: u32,
    slots: &[Slot],
    keys: usize,
    values: usize,
) -> Result<(), InputError> {
    if layer >= geometry.layers() {
        return Err(InputError::LayerOutOfRange(layer));
    }
    let limit = u64::from(pages) * PAGE_SIZE as u64;
    if let Some(&bad) = slots.iter().find(|s| s.0 >= limit) {
        return Err(InputError::SlotOutOfRange(bad));
    }
    let expected =
        slots.len() as u64 * u64::from(geometry.kv_heads()) * u64::from(geometry.head_dim());
    for len in [keys, values] {
        if len as u64 != expected {
            return Err(InputError::TensorLength {
                expected,
                actual: len as u64,
            });
        }
    }
    Ok(())
}

/// Checks copy-on-write copies before anything is written.
pub fn validate_copies(pages: u32, copies: &[PageCopy]) -> Result<(), InputError> {
    for c in copies {
        for p in [c.src, c.dst] {
            if p.index() >= pages {
                return Err(InputError::PageOutOfRange(p));
            }
        }
        if c.slots as usize > PAGE_SIZE {
            return Err(InputError::CopySlots(c.slots));
        }
    }
    Ok(())
}
