//! The element types keys and values are stored as.

use half::{bf16, f16};
use pagoda_core::KvDtype;

/// A stored key/value element: converts to and from the f32 the kernels
/// compute in.
pub trait KvElement: Copy + Default + Send + Sync + 'static {
    /// The dtype this element is.
    const DTYPE: KvDtype;
    /// Rounds an f32 to this element.
    fn from_f32(value: f32) -> Self;
    /// Widens to f32 (exact).
    fn to_f32(self) -> f32;
}

impl KvElement for f32 {
    const DTYPE: KvDtype = KvDtype::F32;
    #[inline(always)]
    fn from_f32(value: f32) -> Self {
        value
    }
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }
}

impl KvElement for f16 {
    const DTYPE: KvDtype = KvDtype::F16;
    #[inline(always)]
    fn from_f32(value: f32) -> Self {
        f16::from_f32(value)
    }
    #[inline(always)]
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
}

impl KvElement for bf16 {
    const DTYPE: KvDtype = KvDtype::Bf16;
    #[inline(always)]
    fn from_f32(value: f32) -> Self {
        bf16::from_f32(value)
    }
    #[inline(always)]
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
}
