//! NEON kernels: four f32 lanes; f16 and bf16 widen lane by lane.

use std::arch::aarch64::*;

use pagoda_core::KvDtype;

use crate::element::KvElement;
use crate::store::value_at;

/// Four elements at `ptr`, widened to f32.
///
/// Safety: `ptr` must be valid for reading 4 elements.
#[inline(always)]
unsafe fn load4<E: KvElement>(ptr: *const E) -> float32x4_t {
    match E::DTYPE {
        KvDtype::F32 => vld1q_f32(ptr.cast::<f32>()),
        KvDtype::Bf16 => {
            let half = vld1_u16(ptr.cast::<u16>());
            vreinterpretq_f32_u32(vshlq_n_u32::<16>(vmovl_u16(half)))
        }
        KvDtype::F16 => {
            let w = [
                (*ptr).to_f32(),
                (*ptr.add(1)).to_f32(),
                (*ptr.add(2)).to_f32(),
                (*ptr.add(3)).to_f32(),
            ];
            vld1q_f32(w.as_ptr())
        }
    }
}

/// See [`super::page_scores`]: per dimension, the 16 keys of the
/// dimension-major block are four vectors, multiplied by the row's query
/// element.
///
/// Safety: the CPU has NEON; `q` holds `rows × dim` elements, `k`
/// `16 × dim` and `scores` `rows × 16`.
#[target_feature(enable = "neon")]
pub unsafe fn page_scores<E: KvElement>(
    q: &[f32],
    rows: usize,
    k: &[E],
    keys: usize,
    dim: usize,
    scores: &mut [f32],
) {
    for r in 0..rows {
        let qr = q.as_ptr().add(r * dim);
        let mut a = [vdupq_n_f32(0.0); 4];
        for d in 0..dim {
            let w = vdupq_n_f32(*qr.add(d));
            for (j, a) in a.iter_mut().enumerate() {
                *a = vfmaq_f32(*a, w, load4(k.as_ptr().add(d * 16 + 4 * j)));
            }
        }
        let mut row = [0.0f32; 16];
        for (j, a) in a.iter().enumerate() {
            vst1q_f32(row.as_mut_ptr().add(4 * j), *a);
        }
        scores[r * 16..r * 16 + keys].copy_from_slice(&row[..keys]);
    }
}

/// See [`super::page_accumulate`].
///
/// Safety: as for [`page_scores`].
#[target_feature(enable = "neon")]
pub unsafe fn page_accumulate<E: KvElement>(
    acc: &mut [f32],
    rows: usize,
    p: &[f32],
    v: &[E],
    keys: usize,
    dim: usize,
) {
    for r in 0..rows {
        let ar = acc.as_mut_ptr().add(r * dim);
        let mut d = 0;
        while d < dim {
            let mut x = vld1q_f32(ar.add(d));
            for i in 0..keys {
                let w = vdupq_n_f32(*p.get_unchecked(r * 16 + i));
                x = vfmaq_f32(x, w, load4(v.as_ptr().add(value_at(i, d))));
            }
            vst1q_f32(ar.add(d), x);
            d += 4;
        }
    }
}
