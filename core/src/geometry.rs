//! The shape of the KV cache: how many bytes a token and a page take.
//!
//! A page holds [`PAGE_SIZE`] token slots. For every layer it stores keys and
//! values of shape `[kv_heads, PAGE_SIZE, head_dim]`, so a page's bytes are
//! `2 × layers × kv_heads × PAGE_SIZE × head_dim × dtype size`. The core only
//! counts these bytes; the bytes themselves live in a backend.

use core::fmt;

/// Token slots per page. Fixed: kernels, page tables and the prefix cache all
/// rely on it.
pub const PAGE_SIZE: usize = 16;

/// Element type of the stored keys and values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum KvDtype {
    /// 32-bit IEEE float.
    F32,
    /// 16-bit IEEE float.
    F16,
    /// bfloat16.
    Bf16,
}

impl KvDtype {
    /// Bytes one element takes.
    pub const fn size_bytes(self) -> u32 {
        match self {
            Self::F32 => 4,
            Self::F16 | Self::Bf16 => 2,
        }
    }
}

/// Why a geometry or budget was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum GeometryError {
    /// Layers, KV heads or head dimension is zero.
    ZeroDimension,
    /// The bytes of one page do not fit in a `u64`.
    Overflow,
    /// The byte budget is smaller than one page.
    BudgetBelowOnePage,
    /// The budget or page count asks for more pages than page ids can address.
    TooManyPages,
}

impl fmt::Display for GeometryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::ZeroDimension => "layers, kv_heads and head_dim must all be non-zero",
            Self::Overflow => "bytes per page overflow a u64",
            Self::BudgetBelowOnePage => "the byte budget is smaller than one page",
            Self::TooManyPages => "more pages than page ids can address",
        })
    }
}

impl core::error::Error for GeometryError {}

/// The largest pool a page id can address (`u32::MAX` is reserved as "no page").
pub const MAX_PAGES: u32 = u32::MAX - 1;

/// The dimensions that decide how many bytes the KV cache needs.
///
/// ```
/// use pagoda_core::{KvDtype, KvGeometry};
/// // SmolLM2-135M: 30 layers, 3 KV heads of 64 dims, f16 cache.
/// let g = KvGeometry::new(30, 3, 64, KvDtype::F16).unwrap();
/// assert_eq!(g.bytes_per_token(), 2 * 30 * 3 * 64 * 2);
/// assert_eq!(g.bytes_per_page(), 16 * g.bytes_per_token());
/// assert_eq!(g.pages_for_budget(1 << 30).unwrap(), (1u64 << 30) as u32 / g.bytes_per_page() as u32);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct KvGeometry {
    layers: u32,
    kv_heads: u32,
    head_dim: u32,
    dtype: KvDtype,
    bytes_per_page: u64,
}

impl KvGeometry {
    /// Checks and builds a geometry.
    pub const fn new(
        layers: u32,
        kv_heads: u32,
        head_dim: u32,
        dtype: KvDtype,
    ) -> Result<Self, GeometryError> {
        if layers == 0 || kv_heads == 0 || head_dim == 0 {
            return Err(GeometryError::ZeroDimension);
        }
        // 2 (K and V) × layers × kv_heads × PAGE_SIZE × head_dim × dtype size.
        let factors = [
            layers as u64,
            kv_heads as u64,
            head_dim as u64,
            dtype.size_bytes() as u64,
            PAGE_SIZE as u64,
        ];
        let mut bytes: u64 = 2;
        let mut i = 0;
        while i < factors.len() {
            bytes = match bytes.checked_mul(factors[i]) {
                Some(b) => b,
                None => return Err(GeometryError::Overflow),
            };
            i += 1;
        }
        Ok(Self {
            layers,
            kv_heads,
            head_dim,
            dtype,
            bytes_per_page: bytes,
        })
    }

    /// Transformer layers.
    pub const fn layers(&self) -> u32 {
        self.layers
    }

    /// Key/value heads per layer.
    pub const fn kv_heads(&self) -> u32 {
        self.kv_heads
    }

    /// Elements per head.
    pub const fn head_dim(&self) -> u32 {
        self.head_dim
    }

    /// Element type of the stored keys and values.
    pub const fn dtype(&self) -> KvDtype {
        self.dtype
    }

    /// The shape of one layer's keys (or values) in one page:
    /// `[kv_heads, PAGE_SIZE, head_dim]`.
    pub const fn page_shape(&self) -> [usize; 3] {
        [self.kv_heads as usize, PAGE_SIZE, self.head_dim as usize]
    }

    /// Bytes of keys and values for one token across all layers.
    pub const fn bytes_per_token(&self) -> u64 {
        self.bytes_per_page / PAGE_SIZE as u64
    }

    /// Bytes of one page across all layers (keys and values).
    pub const fn bytes_per_page(&self) -> u64 {
        self.bytes_per_page
    }

    /// Pages needed to hold `tokens` tokens (rounded up to whole pages).
    pub const fn pages_for_tokens(tokens: u64) -> u64 {
        tokens.div_ceil(PAGE_SIZE as u64)
    }

    /// Bytes that `tokens` tokens occupy once rounded up to whole pages: the
    /// real footprint of a request in a paged cache.
    pub const fn bytes_for_tokens(&self, tokens: u64) -> u64 {
        // Cannot overflow: pages ≤ 2^60 and a page ≥ 2^6 bytes would, so saturate.
        Self::pages_for_tokens(tokens).saturating_mul(self.bytes_per_page)
    }

    /// How many whole pages fit in `budget` bytes: the pool size for a cache
    /// size limit.
    pub const fn pages_for_budget(&self, budget: u64) -> Result<u32, GeometryError> {
        let pages = budget / self.bytes_per_page;
        if pages == 0 {
            Err(GeometryError::BudgetBelowOnePage)
        } else if pages > MAX_PAGES as u64 {
            Err(GeometryError::TooManyPages)
        } else {
            Ok(pages as u32)
        }
    }
}

impl KvDtype {
    /// Its name as command lines and configuration files spell it.
    pub const fn name(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::F16 => "f16",
            Self::Bf16 => "bf16",
        }
    }
}

/// A name that is none of [`KvDtype`]'s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct ParseKvDtypeError;

impl fmt::Display for ParseKvDtypeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("unknown KV dtype (valid: f32, f16, bf16)")
    }
}

impl core::error::Error for ParseKvDtypeError {}

impl core::str::FromStr for KvDtype {
    type Err = ParseKvDtypeError;

    /// Parses `f32`, `f16` or `bf16`, in any case.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [Self::F32, Self::F16, Self::Bf16]
            .into_iter()
            .find(|d| d.name().eq_ignore_ascii_case(s.trim()))
            .ok_or(ParseKvDtypeError)
    }
}
