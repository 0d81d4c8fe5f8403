//! AVX2 + FMA + F16C kernels. Keys and values widen to f32 in registers:
//! f16 through F16C, bf16 by a 16-bit shift.

use std::arch::x86_64::*;

use pagoda_core::{KvDtype, PAGE_SIZE};

use crate::element::KvElement;
use crate::store::{value_at, VALUE_TILE};

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

/// The sum of a vector's eight lanes (the quantized products use it too).
#[inline(always)]
pub(crate) unsafe fn hsum(v: __m256) -> f32 {
    let quad = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let pair = _mm_add_ps(quad, _mm_movehl_ps(quad, quad));
    let one = _mm_add_ss(pair, _mm_shuffle_ps::<0b01>(pair, pair));
    _mm_cvtss_f32(one)
}

/// Scores of `R` query rows starting at `q` against the 16 keys of a
/// dimension-major block: per dimension the 16 keys are two vectors and a
/// row's query element one broadcast, so the accumulators hold the scores
/// themselves, with no horizontal sums. An FMA waits on the previous one
/// into the same accumulator, so `S` sets of `R × 2` accumulators take
/// alternate dimensions, `R × 2 × S = 8` in flight (enough to cover the FMA
/// latency at two per cycle). `ahead` (the next block to be scored, or
/// null) is prefetched 8 dimensions at a time as they are used, so its load
/// overlaps this block's arithmetic.
#[inline(always)]
unsafe fn scores_block<E: KvElement, const R: usize, const S: usize>(
    q: *const f32,
    k: *const E,
    dim: usize,
    scores: *mut f32,
    ahead: *const u8,
) {
    let chunk_bytes = 8 * 16 * size_of::<E>();
    let mut a = [[[_mm256_setzero_ps(); 2]; R]; S];
    let mut d = 0;
    while d < dim {
        prefetch_lines(advance(ahead, d * 16 * size_of::<E>()), chunk_bytes);
        for i in 0..8 {
            let at = d + i;
            let low = load8(k.add(at * 16));
            let high = load8(k.add(at * 16 + 8));
            for (r, a) in a[i % S].iter_mut().enumerate() {
                let w = _mm256_broadcast_ss(&*q.add(r * dim + at));
                a[0] = _mm256_fmadd_ps(w, low, a[0]);
                a[1] = _mm256_fmadd_ps(w, high, a[1]);
            }
        }
        d += 8;
    }
    for r in 0..R {
        let mut low = a[0][r][0];
        let mut high = a[0][r][1];
        for set in &a[1..] {
            low = _mm256_add_ps(low, set[r][0]);
            high = _mm256_add_ps(high, set[r][1]);
        }
        _mm256_storeu_ps(scores.add(r * 16), low);
        _mm256_storeu_ps(scores.add(r * 16 + 8), high);
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

/// See [`super::page_scores`]: all 16 keys are scored, whatever `keys` is.
///
/// Safety: the CPU has AVX2, FMA and F16C; `q` holds `rows × dim` elements,
/// `k` `16 × dim`, `scores` `rows × 16`, `dim` is a multiple of 8, and
/// `ahead` is empty or holds `16 × dim` elements.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn page_scores<E: KvElement>(
    q: &[f32],
    rows: usize,
    k: &[E],
    dim: usize,
    scores: &mut [f32],
    ahead: &[E],
) {
    // The first row block prefetches `ahead`; later ones find it loaded.
    let mut ahead = ahead_ptr(ahead);
    let mut r = 0;
    while r < rows {
        let (qp, sp) = (q.as_ptr().add(r * dim), scores.as_mut_ptr().add(r * 16));
        let step = match rows - r {
            4.. => {
                scores_block::<E, 4, 1>(qp, k.as_ptr(), dim, sp, ahead);
                4
            }
            2..=3 => {
                scores_block::<E, 2, 2>(qp, k.as_ptr(), dim, sp, ahead);
                2
            }
            _ => {
                scores_block::<E, 1, 4>(qp, k.as_ptr(), dim, sp, ahead);
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
/// `ahead` (or null) is prefetched as in [`scores_block`], one value tile
/// (16 columns of all 16 slots) whenever a strip starts one.
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
    // The tiles of `ahead` at this strip's columns, when the strip starts a
    // tile; outside the key loop, which stays branch-free.
    if d.is_multiple_of(VALUE_TILE) {
        let tiles = (8 * D).div_ceil(VALUE_TILE);
        let tile_bytes = PAGE_SIZE * VALUE_TILE * size_of::<E>();
        prefetch_lines(
            advance(ahead, value_at(0, d) * size_of::<E>()),
            tiles * tile_bytes,
        );
    }
    let mut a = [[_mm256_setzero_ps(); D]; R];
    for (r, a) in a.iter_mut().enumerate() {
        for (j, a) in a.iter_mut().enumerate() {
            *a = _mm256_loadu_ps(acc.add(r * dim + d + 8 * j));
        }
    }
    for i in 0..keys {
        let mut x = [_mm256_setzero_ps(); D];
        for (j, x) in x.iter_mut().enumerate() {
            *x = load8(v.add(value_at(i, d + 8 * j)));
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

/// [`scalar::silu_mul`](super::scalar::silu_mul) eight values at a time
/// (the tail through the scalar steps).
///
/// # Safety
/// The CPU must have AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn silu_mul(gate: &mut [f32], up: &[f32]) {
    let n = gate.len().min(up.len());
    let (body, tail) = gate[..n].split_at_mut(n - n % 8);
    let sign = _mm256_set1_ps(-0.0);
    let one = _mm256_set1_ps(1.0);
    for (g8, u8) in body.chunks_exact_mut(8).zip(up.chunks_exact(8)) {
        let g = _mm256_loadu_ps(g8.as_ptr());
        let t = exp8(_mm256_or_ps(g, sign));
        let negative = _mm256_cmp_ps::<_CMP_LT_OQ>(g, _mm256_setzero_ps());
        let top = _mm256_blendv_ps(one, t, negative);
        let s = _mm256_div_ps(_mm256_mul_ps(g, top), _mm256_add_ps(one, t));
        _mm256_storeu_ps(
            g8.as_mut_ptr(),
            _mm256_mul_ps(s, _mm256_loadu_ps(u8.as_ptr())),
        );
    }
    super::scalar::silu_mul(tail, &up[n - n % 8..n]);
}

/// [`scalar::gelu_tanh_mul`](super::scalar::gelu_tanh_mul) eight values
/// at a time (the tail through the scalar steps).
///
/// # Safety
/// The CPU must have AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn gelu_tanh_mul(gate: &mut [f32], up: &[f32]) {
    use super::scalar::{GELU_C, GELU_K};
    let n = gate.len().min(up.len());
    let (body, tail) = gate[..n].split_at_mut(n - n % 8);
    let sign = _mm256_set1_ps(-0.0);
    let one = _mm256_set1_ps(1.0);
    let (k2, c) = (_mm256_set1_ps(2.0 * GELU_K), _mm256_set1_ps(GELU_C));
    for (g8, u8) in body.chunks_exact_mut(8).zip(up.chunks_exact(8)) {
        let g = _mm256_loadu_ps(g8.as_ptr());
        // z = 2√(2/π)·(g + c·g³) = 2√(2/π)·g·(1 + c·g²)
        let z = _mm256_mul_ps(
            _mm256_mul_ps(k2, g),
            _mm256_fmadd_ps(c, _mm256_mul_ps(g, g), one),
        );
        let t = exp8(_mm256_or_ps(z, sign));
        let negative = _mm256_cmp_ps::<_CMP_LT_OQ>(z, _mm256_setzero_ps());
        let top = _mm256_blendv_ps(one, t, negative);
        let s = _mm256_div_ps(_mm256_mul_ps(g, top), _mm256_add_ps(one, t));
        _mm256_storeu_ps(
            g8.as_mut_ptr(),
            _mm256_mul_ps(s, _mm256_loadu_ps(u8.as_ptr())),
        );
    }
    super::scalar::gelu_tanh_mul(tail, &up[n - n % 8..n]);
}

/// The largest of a vector's eight lanes (activation rounding uses it too).
#[inline(always)]
pub(crate) unsafe fn hmax(v: __m256) -> f32 {
    let quad = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let pair = _mm_max_ps(quad, _mm_movehl_ps(quad, quad));
    let one = _mm_max_ss(pair, _mm_shuffle_ps::<0b01>(pair, pair));
    _mm_cvtss_f32(one)
}

/// The maxima of four vectors' lanes, as one 4-lane vector.
#[inline(always)]
unsafe fn hmax4(v: [__m256; 4]) -> __m128 {
    // Interleave rows 0/1 and 2/3, then 01/23, taking maxima each time.
    let t01 = _mm256_max_ps(
        _mm256_unpacklo_ps(v[0], v[1]),
        _mm256_unpackhi_ps(v[0], v[1]),
    );
    let t23 = _mm256_max_ps(
        _mm256_unpacklo_ps(v[2], v[3]),
        _mm256_unpackhi_ps(v[2], v[3]),
    );
    let u = _mm256_max_ps(
        _mm256_shuffle_ps::<0b01_00_01_00>(t01, t23),
        _mm256_shuffle_ps::<0b11_10_11_10>(t01, t23),
    );
    _mm_max_ps(_mm256_castps256_ps128(u), _mm256_extractf128_ps::<1>(u))
}

/// The sums of four vectors' lanes, as one 4-lane vector.
#[inline(always)]
unsafe fn hsum4(v: [__m256; 4]) -> __m128 {
    let h = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
    _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps::<1>(h))
}

/// Lane `i` of a 4-lane vector, in all eight lanes.
#[inline(always)]
unsafe fn splat<const I: i32>(v: __m128) -> __m256 {
    _mm256_broadcastss_ps(_mm_permute_ps::<I>(v))
}

/// See [`super::page_softmax`]. Four rows at a time (the rows of one KV
/// head in a decode step): their 16 scores are eight vectors, and the
/// per-row maxima, sums and rescale factors are 4-lane vectors, so the
/// horizontal reductions and exponentials of the four rows overlap instead
/// of forming four serial chains. Remaining rows go one at a time.
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
    let base = scores.as_mut_ptr();
    // Row `r`'s scores, keys at or past `seen` replaced by -inf (weight 0).
    let masked = |r: usize, seen: u32| {
        let row = base.add(r * 16);
        let n = _mm256_set1_epi32(seen as i32);
        let keep_low = _mm256_castsi256_ps(_mm256_cmpgt_epi32(n, lanes_low));
        let keep_high = _mm256_castsi256_ps(_mm256_cmpgt_epi32(n, lanes_high));
        (
            _mm256_blendv_ps(minus_inf, _mm256_loadu_ps(row), keep_low),
            _mm256_blendv_ps(minus_inf, _mm256_loadu_ps(row.add(8)), keep_high),
        )
    };
    let rows = visible.len();
    let mut r = 0;
    while r + 4 <= rows {
        let mut low = [_mm256_setzero_ps(); 4];
        let mut high = [_mm256_setzero_ps(); 4];
        for i in 0..4 {
            (low[i], high[i]) = masked(r + i, *visible.get_unchecked(r + i));
        }
        let both = [0, 1, 2, 3].map(|i| _mm256_max_ps(low[i], high[i]));
        let old_max = _mm_loadu_ps(max.as_ptr().add(r));
        let new_max = _mm_max_ps(old_max, hmax4(both));
        // A row that has seen nothing yet keeps a -inf maximum; subtracting
        // 0 instead keeps its weights at 0 rather than NaN.
        let unseen = _mm_cmpeq_ps(new_max, _mm_set1_ps(f32::NEG_INFINITY));
        let m = _mm_andnot_ps(unseen, new_max);
        let m8 = [
            splat::<0>(m),
            splat::<0x55>(m),
            splat::<0xAA>(m),
            splat::<0xFF>(m),
        ];
        let mut row_sums = [_mm256_setzero_ps(); 4];
        for i in 0..4 {
            let row = base.add((r + i) * 16);
            let l = exp8(_mm256_sub_ps(low[i], m8[i]));
            let h = exp8(_mm256_sub_ps(high[i], m8[i]));
            _mm256_storeu_ps(row, l);
            _mm256_storeu_ps(row.add(8), h);
            row_sums[i] = _mm256_add_ps(l, h);
        }
        // e^(old - new), in the low four lanes; 1 for a row that sees no
        // key in this page (as the one-row path gives).
        let c = _mm256_castps256_ps128(exp8(_mm256_castps128_ps256(_mm_sub_ps(old_max, m))));
        let seen = _mm_loadu_si128(visible.as_ptr().add(r).cast::<__m128i>());
        let none = _mm_castsi128_ps(_mm_cmpeq_epi32(seen, _mm_setzero_si128()));
        let c = _mm_blendv_ps(c, _mm_set1_ps(1.0), none);
        let old_sum = _mm_loadu_ps(sum.as_ptr().add(r));
        _mm_storeu_ps(
            sum.as_mut_ptr().add(r),
            _mm_fmadd_ps(old_sum, c, hsum4(row_sums)),
        );
        _mm_storeu_ps(max.as_mut_ptr().add(r), new_max);
        _mm_storeu_ps(correction.as_mut_ptr().add(r), c);
        r += 4;
    }
    for r in r..rows {
        let seen = *visible.get_unchecked(r);
        let row = base.add(r * 16);
        if seen == 0 {
            _mm256_storeu_ps(row, _mm256_setzero_ps());
            _mm256_storeu_ps(row.add(8), _mm256_setzero_ps());
            *correction.get_unchecked_mut(r) = 1.0;
            continue;
        }
        let (low, high) = masked(r, seen);
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
