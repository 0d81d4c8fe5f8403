//! The store's elements in the type its dtype names, and the one place that
//! turns the dtype back into that type: every operation is written once,
//! generic over [`KvElement`], and compiled once per element type.

use half::{bf16, f16};
use pagoda_core::KvDtype;

use crate::{CpuError, KvElement};

/// The keys and values, in the dtype the geometry names.
#[derive(Debug)]
pub(crate) enum KvData {
    F32(Vec<f32>),
    F16(Vec<f16>),
    Bf16(Vec<bf16>),
}

/// Evaluates `$body` with `$d` bound to the elements of a [`KvData`] (taken
/// by value, `&` or `&mut`, as `$data` is), typed as their own element
/// type: a generic call in `$body` is monomorphised for each dtype, exactly
/// as three hand-written match arms would be.
macro_rules! with_elements {
    ($data:expr, |$d:ident| $body:expr) => {
        match $data {
            $crate::data::KvData::F32($d) => $body,
            $crate::data::KvData::F16($d) => $body,
            $crate::data::KvData::Bf16($d) => $body,
        }
    };
}
pub(crate) use with_elements;

impl KvData {
    /// `n` zeroed elements of `dtype`; `bytes` is what the caller asked
    /// for, reported if the allocation fails.
    pub fn zeroed(dtype: KvDtype, n: usize, bytes: u64) -> Result<Self, CpuError> {
        Ok(match dtype {
            KvDtype::F32 => Self::F32(zeroed(n, bytes)?),
            KvDtype::F16 => Self::F16(zeroed(n, bytes)?),
            KvDtype::Bf16 => Self::Bf16(zeroed(n, bytes)?),
        })
    }
}

/// `n` default (zero) elements, or a typed refusal if they do not fit.
fn zeroed<E: KvElement>(n: usize, bytes: u64) -> Result<Vec<E>, CpuError> {
    let mut v = Vec::new();
    v.try_reserve_exact(n)
        .map_err(|_| CpuError::OutOfMemory { bytes })?;
    v.resize(n, E::default());
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The dispatch hands each variant's elements to the body as their own
    /// type: the dtype a generic function sees is the variant's.
    #[test]
    fn every_dtype_reaches_its_own_element_type() {
        fn dtype_of<E: KvElement>(d: &[E]) -> (KvDtype, usize) {
            (E::DTYPE, d.len())
        }
        for dtype in [KvDtype::F32, KvDtype::F16, KvDtype::Bf16] {
            let mut data = KvData::zeroed(dtype, 5, 20).unwrap();
            assert_eq!(with_elements!(&data, |d| dtype_of(d)), (dtype, 5));
            with_elements!(&mut data, |d| d[4] = KvElement::from_f32(1.5));
            let last = with_elements!(&data, |d| d[4].to_f32());
            assert_eq!(last, 1.5, "{dtype:?}");
        }
    }

    #[test]
    fn a_store_too_large_to_allocate_is_refused_with_its_size() {
        let err = KvData::zeroed(KvDtype::F32, usize::MAX / 2, 42).unwrap_err();
        assert_eq!(err, CpuError::OutOfMemory { bytes: 42 });
    }
}
