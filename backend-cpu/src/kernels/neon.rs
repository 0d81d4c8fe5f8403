//! NEON kernels: four f32 lanes; f16 and bf16 widen lane by lane.

use std::arch::aarch64::*;

use pagoda_core::KvDtype;

use crate::element::KvElement;

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

/// See [`super::page_scores`].
///
/// Safety: the CPU has NEON; the slices hold `rows × dim`, `keys × dim` and
/// `rows × 16` elements, `dim` is a multiple of 8.
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
        for i in 0..keys {
            let ki = k.as_ptr().add(i * dim);
            let (mut a, mut b) = (vdupq_n_f32(0.0), vdupq_n_f32(0.0));
            let mut d = 0;
            while d < dim {
                a = vfmaq_f32(a, vld1q_f32(qr.add(d)), load4(ki.add(d)));
                b = vfmaq_f32(b, vld1q_f32(qr.add(d + 4)), load4(ki.add(d + 4)));
                d += 8;
            }
            *scores.get_unchecked_mut(r * 16 + i) = vaddvq_f32(vaddq_f32(a, b));
        }
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
                x = vfmaq_f32(x, w, load4(v.as_ptr().add(i * dim + d)));
            }
            vst1q_f32(ar.add(d), x);
            d += 4;
        }
    }
}
