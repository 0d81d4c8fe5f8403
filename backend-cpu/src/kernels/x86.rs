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

/// Starts loading the 64-byte lines covering `bytes` bytes at `ptr` into
/// the caches; nothing when `ptr` is null.
#[inline(always)]
unsafe fn prefetch_lines(ptr: *const u8, bytes: usize) {
    if ptr.is_null() {
        return;
    }
    let mut line = 0;
    while line < bytes {
        _mm_prefetch::<_MM_HINT_T0>(ptr.add(line).cast::<i8>());
        line += 64;
    }
}

/// `ptr` advanced by `bytes`, null staying null.
#[inline(always)]
unsafe fn advance(ptr: *const u8, bytes: usize) -> *const u8 {
    if ptr.is_null() {
        ptr
    } else {
        ptr.add(bytes)
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

/// The lane sums of eight vectors, as one vector: lane `i` is the sum of
/// `v[i]`'s lanes. Pairwise horizontal adds share the work, 9 instructions
/// instead of 8 separate reductions.
#[inline(always)]
unsafe fn hsum8(v: &[__m256; 8]) -> __m256 {
    let h01 = _mm256_hadd_ps(v[0], v[1]);
    let h23 = _mm256_hadd_ps(v[2], v[3]);
    let h45 = _mm256_hadd_ps(v[4], v[5]);
    let h67 = _mm256_hadd_ps(v[6], v[7]);
    // Per 128-bit half: [s0 s1 s2 s3] and [s4 s5 s6 s7] partial sums.
    let h0123 = _mm256_hadd_ps(h01, h23);
    let h4567 = _mm256_hadd_ps(h45, h67);
    let low = _mm256_permute2f128_ps::<0x20>(h0123, h4567);
    let high = _mm256_permute2f128_ps::<0x31>(h0123, h4567);
    _mm256_add_ps(low, high)
}

/// Scores of `R` query rows starting at `q` against `keys` key rows, `K`
/// keys at a time. An FMA waits on the previous one into the same
/// accumulator, so a block keeps `R × K = 8` accumulators in flight (enough
/// to cover the FMA latency at two per cycle); each key load serves all `R`
/// rows and each query load all `K` keys. Each key row's counterpart in
/// `ahead` (the next block to be scored, or null) is prefetched as the row
/// is used, so the load of the next block overlaps this one's arithmetic.
#[inline(always)]
unsafe fn scores_block<E: KvElement, const R: usize, const K: usize>(
    q: *const f32,
    k: *const E,
    keys: usize,
    dim: usize,
    scores: *mut f32,
    ahead: *const u8,
) {
    let row_bytes = dim * size_of::<E>();
    let mut first = 0;
    while first + K <= keys {
        prefetch_lines(advance(ahead, first * row_bytes), K * row_bytes);
        let mut a = [[_mm256_setzero_ps(); K]; R];
        let mut d = 0;
        while d < dim {
            let mut x = [_mm256_setzero_ps(); K];
            for (j, x) in x.iter_mut().enumerate() {
                *x = load8(k.add((first + j) * dim + d));
            }
            for (r, a) in a.iter_mut().enumerate() {
                let qv = _mm256_loadu_ps(q.add(r * dim + d));
                for (a, x) in a.iter_mut().zip(&x) {
                    *a = _mm256_fmadd_ps(qv, *x, *a);
                }
            }
            d += 8;
        }
        if R * K == 8 {
            // All eight sums at once, row-major: row r's K sums are lanes
            // r·K.., contiguous in its scores row.
            let sums = hsum8(&*(a.as_ptr().cast::<[__m256; 8]>()));
            let mut lanes = [0.0f32; 8];
            _mm256_storeu_ps(lanes.as_mut_ptr(), sums);
            for r in 0..R {
                core::ptr::copy_nonoverlapping(
                    lanes.as_ptr().add(r * K),
                    scores.add(r * 16 + first),
                    K,
                );
            }
        } else {
            for (r, a) in a.iter().enumerate() {
                for (j, a) in a.iter().enumerate() {
                    *scores.add(r * 16 + first + j) = hsum(*a);
                }
            }
        }
        first += K;
    }
    if first < keys {
        scores_block::<E, R, 1>(
            q,
            k.add(first * dim),
            keys - first,
            dim,
            scores.add(first),
            advance(ahead, first * row_bytes),
        );
    }
}

/// The start of `ahead` as a byte pointer, null when it is empty.
fn ahead_ptr<E>(ahead: &[E]) -> *const u8 {
    if ahead.is_empty() {
        std::ptr::null()
    } else {
        ahead.as_ptr().cast()
    }
}

/// See [`super::page_scores`].
///
/// Safety: the CPU has AVX2, FMA and F16C; the slices hold `rows × dim`,
/// `keys × dim` and `rows × 16` elements, `dim` is a multiple of 8, and
/// `ahead` is empty or holds `keys × dim` elements.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn page_scores<E: KvElement>(
    q: &[f32],
    rows: usize,
    k: &[E],
    keys: usize,
    dim: usize,
    scores: &mut [f32],
    ahead: &[E],
) {
    // The first row block prefetches `ahead`; later ones find it loaded.
    let mut ahead = ahead_ptr(ahead);
    // Blocks of at most 4 rows × 2 keys: 6 loads feed 8 FMAs. (8 rows × 1 key
    // needs 9 loads for 8 FMAs and measured 15% slower on prefill.)
    let mut r = 0;
    while r < rows {
        let (qp, sp) = (q.as_ptr().add(r * dim), scores.as_mut_ptr().add(r * 16));
        let left = rows - r;
        let step = match left {
            4.. => {
                scores_block::<E, 4, 2>(qp, k.as_ptr(), keys, dim, sp, ahead);
                4
            }
            2..=3 => {
                scores_block::<E, 2, 4>(qp, k.as_ptr(), keys, dim, sp, ahead);
                2
            }
            _ => {
                scores_block::<E, 1, 8>(qp, k.as_ptr(), keys, dim, sp, ahead);
                1
            }
        };
        r += step;
        ahead = std::ptr::null();
    }
}

/// Accumulates `keys` weighted value rows into `R` accumulator rows, `D`
/// vectors of each row at a time (`R × D = 8` accumulators in flight, as in
/// [`scores_block`]); a tail narrower than `D` vectors goes one at a time.
/// `ahead` (or null) is prefetched as in [`scores_block`], a line of each
/// row whenever a strip starts a new line.
#[inline(always)]
unsafe fn accumulate_block<E: KvElement, const R: usize, const D: usize>(
    acc: *mut f32,
    p: *const f32,
    v: *const E,
    keys: usize,
    dim: usize,
    ahead: *const u8,
) {
    let mut d = 0;
    while d + 8 * D <= dim {
        accumulate_strip::<E, R, D>(acc, p, v, keys, dim, d, ahead);
        d += 8 * D;
    }
    while d < dim {
        accumulate_strip::<E, R, 1>(acc, p, v, keys, dim, d, ahead);
        d += 8;
    }
}

/// Columns `d..d + 8 × D` of [`accumulate_block`].
#[inline(always)]
unsafe fn accumulate_strip<E: KvElement, const R: usize, const D: usize>(
    acc: *mut f32,
    p: *const f32,
    v: *const E,
    keys: usize,
    dim: usize,
    d: usize,
    ahead: *const u8,
) {
    let (row_bytes, column) = (dim * size_of::<E>(), d * size_of::<E>());
    let ahead = if column % 64 == 0 {
        ahead
    } else {
        std::ptr::null()
    };
    let mut a = [[_mm256_setzero_ps(); D]; R];
    for (r, a) in a.iter_mut().enumerate() {
        for (j, a) in a.iter_mut().enumerate() {
            *a = _mm256_loadu_ps(acc.add(r * dim + d + 8 * j));
        }
    }
    for i in 0..keys {
        prefetch_lines(advance(ahead, i * row_bytes + column), 1);
        let mut x = [_mm256_setzero_ps(); D];
        for (j, x) in x.iter_mut().enumerate() {
            *x = load8(v.add(i * dim + d + 8 * j));
        }
        for (r, a) in a.iter_mut().enumerate() {
            let w = _mm256_set1_ps(*p.add(r * 16 + i));
            for (a, x) in a.iter_mut().zip(&x) {
                *a = _mm256_fmadd_ps(w, *x, *a);
            }
        }
    }
    for (r, a) in a.iter().enumerate() {
        for (j, a) in a.iter().enumerate() {
            _mm256_storeu_ps(acc.add(r * dim + d + 8 * j), *a);
        }
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
    ahead: &[E],
) {
    // Blocks of at most 4 rows × 16 columns, for the reason in `page_scores`.
    let mut ahead = ahead_ptr(ahead);
    let mut r = 0;
    while r < rows {
        let (ap, pp) = (acc.as_mut_ptr().add(r * dim), p.as_ptr().add(r * 16));
        let left = rows - r;
        let step = match left {
            4.. => {
                accumulate_block::<E, 4, 2>(ap, pp, v.as_ptr(), keys, dim, ahead);
                4
            }
            2..=3 => {
                accumulate_block::<E, 2, 4>(ap, pp, v.as_ptr(), keys, dim, ahead);
                2
            }
            _ => {
                accumulate_block::<E, 1, 8>(ap, pp, v.as_ptr(), keys, dim, ahead);
                1
            }
        };
        r += step;
        ahead = std::ptr::null();
    }
}

/// `e^x` in 8 lanes for `x ≤ 0`, `-inf` giving 0: the steps of
/// [`scalar::exp_nonpositive`](super::scalar::exp_nonpositive).
#[inline(always)]
unsafe fn exp8(x: __m256) -> __m256 {
    use super::scalar::{LN2_HI, LN2_LO};
    let floor = _mm256_set1_ps(-87.0);
    let masked = _mm256_cmp_ps::<_CMP_LT_OQ>(x, floor);
    let y = _mm256_max_ps(x, floor);
    let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_mul_ps(
        y,
        _mm256_set1_ps(core::f32::consts::LOG2_E),
    ));
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_HI), y);
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_LO), r);
    let mut p = _mm256_set1_ps(1.0 / 720.0);
    for c in [1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0] {
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
    }
    let exponent = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
    let scale = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(exponent));
    _mm256_andnot_ps(masked, _mm256_mul_ps(p, scale))
}

/// The largest of a vector's eight lanes.
#[inline(always)]
unsafe fn hmax(v: __m256) -> f32 {
    let quad = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let pair = _mm_max_ps(quad, _mm_movehl_ps(quad, quad));
    let one = _mm_max_ss(pair, _mm_shuffle_ps::<0b01>(pair, pair));
    _mm_cvtss_f32(one)
}

/// See [`super::page_softmax`]: a row's 16 scores are two vectors, masked,
/// reduced and exponentiated without leaving registers.
///
/// Safety: the CPU has AVX2 and FMA; `scores` holds `visible.len() × 16`
/// elements, `max`, `sum` and `correction` `visible.len()`, and every
/// `visible` entry is at most 16.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn page_softmax(
    scores: &mut [f32],
    visible: &[u32],
    max: &mut [f32],
    sum: &mut [f32],
    correction: &mut [f32],
) {
    let lanes_low = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    let lanes_high = _mm256_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15);
    let minus_inf = _mm256_set1_ps(f32::NEG_INFINITY);
    for (r, &seen) in visible.iter().enumerate() {
        let row = scores.as_mut_ptr().add(r * 16);
        if seen == 0 {
            _mm256_storeu_ps(row, _mm256_setzero_ps());
            _mm256_storeu_ps(row.add(8), _mm256_setzero_ps());
            *correction.get_unchecked_mut(r) = 1.0;
            continue;
        }
        // Keys at or past `seen` become -inf, hence weight 0.
        let n = _mm256_set1_epi32(seen as i32);
        let keep_low = _mm256_castsi256_ps(_mm256_cmpgt_epi32(n, lanes_low));
        let keep_high = _mm256_castsi256_ps(_mm256_cmpgt_epi32(n, lanes_high));
        let low = _mm256_blendv_ps(minus_inf, _mm256_loadu_ps(row), keep_low);
        let high = _mm256_blendv_ps(minus_inf, _mm256_loadu_ps(row.add(8)), keep_high);
        let old_max = *max.get_unchecked(r);
        let new_max = old_max.max(hmax(_mm256_max_ps(low, high)));
        let m = _mm256_set1_ps(new_max);
        let low = exp8(_mm256_sub_ps(low, m));
        let high = exp8(_mm256_sub_ps(high, m));
        _mm256_storeu_ps(row, low);
        _mm256_storeu_ps(row.add(8), high);
        let c = super::scalar::exp_nonpositive(old_max - new_max);
        *sum.get_unchecked_mut(r) = *sum.get_unchecked(r) * c + hsum(_mm256_add_ps(low, high));
        *max.get_unchecked_mut(r) = new_max;
        *correction.get_unchecked_mut(r) = c;
    }
}
