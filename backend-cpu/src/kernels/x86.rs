//! AVX2 + FMA + F16C kernels. Keys and values widen to f32 in registers:
//! f16 through F16C, bf16 by a 16-bit shift.

use std::arch::x86_64::*;

use pagoda_core::KvDtype;

use crate::element::KvElement;

/// Eight elements at `ptr`, widened to f32.
///
/// Safety: `ptr` must be valid for reading 8 elements, and the CPU must have
/// AVX2 and F16C.
#[inline(always)]
unsafe fn load8<E: KvElement>(ptr: *const E) -> __m256 {
    match E::DTYPE {
        KvDtype::F32 => _mm256_loadu_ps(ptr.cast::<f32>()),
        KvDtype::F16 => _mm256_cvtph_ps(_mm_loadu_si128(ptr.cast::<__m128i>())),
        KvDtype::Bf16 => {
            let wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(ptr.cast::<__m128i>()));
            _mm256_castsi256_ps(_mm256_slli_epi32::<16>(wide))
        }
    }
}

/// The sum of a vector's eight lanes.
#[inline(always)]
unsafe fn hsum(v: __m256) -> f32 {
    let quad = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let pair = _mm_add_ps(quad, _mm_movehl_ps(quad, quad));
    let one = _mm_add_ss(pair, _mm_shuffle_ps::<0b01>(pair, pair));
    _mm_cvtss_f32(one)
}

/// Scores of `R` query rows starting at `q` against `keys` key rows. With
/// few rows, two keys go together: twice the independent FMA chains, and
/// each query load serves both keys.
#[inline(always)]
unsafe fn scores_block<E: KvElement, const R: usize>(
    q: *const f32,
    k: *const E,
    keys: usize,
    dim: usize,
    scores: *mut f32,
) {
    let mut first = 0;
    if R <= 4 {
        while first + 2 <= keys {
            let mut a = [_mm256_setzero_ps(); R];
            let mut b = [_mm256_setzero_ps(); R];
            let (k0, k1) = (k.add(first * dim), k.add((first + 1) * dim));
            let mut d = 0;
            while d < dim {
                let (x0, x1) = (load8(k0.add(d)), load8(k1.add(d)));
                for r in 0..R {
                    let qv = _mm256_loadu_ps(q.add(r * dim + d));
                    a[r] = _mm256_fmadd_ps(qv, x0, a[r]);
                    b[r] = _mm256_fmadd_ps(qv, x1, b[r]);
                }
                d += 8;
            }
            for r in 0..R {
                *scores.add(r * 16 + first) = hsum(a[r]);
                *scores.add(r * 16 + first + 1) = hsum(b[r]);
            }
            first += 2;
        }
    }
    for i in first..keys {
        let mut acc = [_mm256_setzero_ps(); R];
        let ki = k.add(i * dim);
        let mut d = 0;
        while d < dim {
            let kv = load8(ki.add(d));
            for (r, a) in acc.iter_mut().enumerate() {
                *a = _mm256_fmadd_ps(_mm256_loadu_ps(q.add(r * dim + d)), kv, *a);
            }
            d += 8;
        }
        for (r, a) in acc.iter().enumerate() {
            *scores.add(r * 16 + i) = hsum(*a);
        }
    }
}

/// See [`super::page_scores`].
///
/// Safety: the CPU has AVX2, FMA and F16C; the slices hold `rows × dim`,
/// `keys × dim` and `rows × 16` elements, `dim` is a multiple of 8.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn page_scores<E: KvElement>(
    q: &[f32],
    rows: usize,
    k: &[E],
    keys: usize,
    dim: usize,
    scores: &mut [f32],
) {
    let mut r = 0;
    while r < rows {
        let (qp, sp) = (q.as_ptr().add(r * dim), scores.as_mut_ptr().add(r * 16));
        let left = rows - r;
        let step = match left {
            8.. => {
                scores_block::<E, 8>(qp, k.as_ptr(), keys, dim, sp);
                8
            }
            4..=7 => {
                scores_block::<E, 4>(qp, k.as_ptr(), keys, dim, sp);
                4
            }
            2..=3 => {
                scores_block::<E, 2>(qp, k.as_ptr(), keys, dim, sp);
                2
            }
            _ => {
                scores_block::<E, 1>(qp, k.as_ptr(), keys, dim, sp);
                1
            }
        };
        r += step;
    }
}

/// Accumulates `keys` weighted value rows into `R` accumulator rows.
#[inline(always)]
unsafe fn accumulate_block<E: KvElement, const R: usize>(
    acc: *mut f32,
    p: *const f32,
    v: *const E,
    keys: usize,
    dim: usize,
) {
    let mut d = 0;
    while d < dim {
        let mut a = [_mm256_setzero_ps(); R];
        for (r, x) in a.iter_mut().enumerate() {
            *x = _mm256_loadu_ps(acc.add(r * dim + d));
        }
        for i in 0..keys {
            let vv = load8(v.add(i * dim + d));
            for (r, x) in a.iter_mut().enumerate() {
                *x = _mm256_fmadd_ps(_mm256_set1_ps(*p.add(r * 16 + i)), vv, *x);
            }
        }
        for (r, x) in a.iter().enumerate() {
            _mm256_storeu_ps(acc.add(r * dim + d), *x);
        }
        d += 8;
    }
}

/// See [`super::page_accumulate`].
///
/// Safety: as for [`page_scores`].
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn page_accumulate<E: KvElement>(
    acc: &mut [f32],
    rows: usize,
    p: &[f32],
    v: &[E],
    keys: usize,
    dim: usize,
) {
    let mut r = 0;
    while r < rows {
        let (ap, pp) = (acc.as_mut_ptr().add(r * dim), p.as_ptr().add(r * 16));
        let left = rows - r;
        let step = match left {
            8.. => {
                accumulate_block::<E, 8>(ap, pp, v.as_ptr(), keys, dim);
                8
            }
            4..=7 => {
                accumulate_block::<E, 4>(ap, pp, v.as_ptr(), keys, dim);
                4
            }
            2..=3 => {
                accumulate_block::<E, 2>(ap, pp, v.as_ptr(), keys, dim);
                2
            }
            _ => {
                accumulate_block::<E, 1>(ap, pp, v.as_ptr(), keys, dim);
                1
            }
        };
        r += step;
    }
}
