//! Activation rows rounded to 8-bit blocks eight values at a time: the
//! same blocks as the scalar [`act::round_block`](super::super::act), bit
//! for bit (the same `amax / 127` scale, the same reciprocal, rounding
//! halves away from zero, NaN to 0), at a fraction of the cost: a batch-16
//! decode step rounds about 1.6 million values, and the scalar rounding of
//! Q8_K blocks was 3% of a 512-token Llama-3.2-1B Q4_K_M prefill.

use std::arch::x86_64::*;

use super::super::act::{KSUM, QB};
use crate::kernels::x86::hmax;

/// Rounds each `block`-value block of `x` into `q` (`block` a multiple of
/// 32: Q8_0's and Q8_1's 32, Q8_K's 256) and calls `each(d, sums)` with
/// its scale and the sums of its values sixteen at a time, block by block.
/// `x` and `q` hold whole blocks (extra values are ignored).
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(in super::super) unsafe fn round_blocks(
    x: &[f32],
    q: &mut [i8],
    block: usize,
    mut each: impl FnMut(f32, &[i32]),
) {
    debug_assert!(block.is_multiple_of(QB) && block <= MAX_BLOCK);
    let sign = _mm256_set1_ps(-0.0);
    let mut sums = [0i32; MAX_BLOCK / KSUM];
    for (xb, qb) in x.chunks_exact(block).zip(q.chunks_exact_mut(block)) {
        // `max` returns its second operand when either is NaN, so a NaN
        // value leaves the running maximum alone, as `f32::max` does.
        let mut amax = _mm256_setzero_ps();
        for v in xb.chunks_exact(8) {
            amax = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(v.as_ptr())), amax);
        }
        let d = hmax(amax) / 127.0;
        let id = _mm256_set1_ps(if d > 0.0 { 1.0 / d } else { 0.0 });
        for ((xc, qc), pair) in xb
            .chunks_exact(QB)
            .zip(qb.chunks_exact_mut(QB))
            .zip(sums.chunks_exact_mut(2))
        {
            let v: [__m256; 4] =
                std::array::from_fn(|k| _mm256_loadu_ps(xc[8 * k..8 * k + 8].as_ptr()));
            let (bytes, ints) = round32(v, id);
            _mm256_storeu_si256(qc.as_mut_ptr().cast(), bytes);
            pair[0] = hsum_i32(_mm256_add_epi32(ints[0], ints[1]));
            pair[1] = hsum_i32(_mm256_add_epi32(ints[2], ints[3]));
        }
        each(d, &sums[..block / KSUM]);
    }
}

/// The longest block [`round_blocks`] takes (Q8_K's).
const MAX_BLOCK: usize = 256;

/// 32 values `v` times `id`, rounded to the nearest integer (halves away
/// from zero, NaN to 0) within ±127: as bytes in order, and as the four
/// vectors of i32 they were packed from (values `8k..8k + 8` in `ints[k]`).
#[inline(always)]
unsafe fn round32(v: [__m256; 4], id: __m256) -> (__m256i, [__m256i; 4]) {
    let (lo, hi) = (_mm256_set1_ps(-127.0), _mm256_set1_ps(127.0));
    let (half, neg_half) = (_mm256_set1_ps(0.5), _mm256_set1_ps(-0.5));
    let mut ints = [_mm256_setzero_si256(); 4];
    for (int, vk) in ints.iter_mut().zip(v) {
        let s = _mm256_mul_ps(vk, id);
        // NaN to 0 (an unordered compare is all zeros), then clamp.
        let s = _mm256_and_ps(s, _mm256_cmp_ps::<_CMP_ORD_Q>(s, s));
        let r = _mm256_min_ps(_mm256_max_ps(s, lo), hi);
        let t = _mm256_cvttps_epi32(r);
        let frac = _mm256_sub_ps(r, _mm256_cvtepi32_ps(t));
        // Masks are −1 where true: subtracting `up` adds one.
        let up = _mm256_castps_si256(_mm256_cmp_ps::<_CMP_GE_OQ>(frac, half));
        let down = _mm256_castps_si256(_mm256_cmp_ps::<_CMP_LE_OQ>(frac, neg_half));
        *int = _mm256_add_epi32(_mm256_sub_epi32(t, up), down);
    }
    // Packing works within 128-bit lanes: 32-bit to 16-bit to 8-bit
    // leaves the values in the order 0 4 1 5 2 6 3 7 (groups of four),
    // which one permutation of 32-bit words undoes.
    let words = _mm256_packs_epi16(
        _mm256_packs_epi32(ints[0], ints[1]),
        _mm256_packs_epi32(ints[2], ints[3]),
    );
    let bytes = _mm256_permutevar8x32_epi32(words, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    (bytes, ints)
}

/// The sum of a vector's eight i32 lanes.
#[inline(always)]
unsafe fn hsum_i32(v: __m256i) -> i32 {
    let quad = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
    let pair = _mm_add_epi32(quad, _mm_unpackhi_epi64(quad, quad));
    _mm_cvtsi128_si32(_mm_add_epi32(pair, _mm_shuffle_epi32::<0b01>(pair)))
}
