//! Interleaved K-quant group blocks unpacked into their eight rows' plain
//! K blocks ([`KBlock`]), for the quad kernel past
//! [`GROUP_KERNEL_MAX_ROWS`](super::GROUP_KERNEL_MAX_ROWS) activation
//! rows (`quads::kquads_interleaved`).

use std::arch::x86_64::*;

use super::super::super::interleave::{
    GROUP, K4_DMIN, K4_MINS, K4_SCALES, K5_GROUP_BLOCK, K5_QH, K5_QS, K6_D, K6_GROUP_BLOCK,
    K6_PAIRS, K6_SCALES,
};
use super::super::quads::KBlock;
use super::super::{load32, prefetch_line, PREFETCH_AHEAD};
use super::q6k::q6k_step;

/// The eight rows' K blocks of the interleaved Q6_K group block `wb`, as
/// the plain kernel unpacks a row's ([`KBlock`]: values 0..=63 in element
/// order, scales and their `32 ×` corrections as i16, `d` twice). Vector
/// `t` of steps 0..8 holds values `64t..64t + 32` of every row, four
/// bytes a lane, so an 8 × 8 transpose of their 32-bit lanes gives each
/// row's 32 values in one vector; steps 8..16 the next 32.
#[inline(always)]
pub(in super::super) unsafe fn q6k_group_blocks(wb: &[u8], rows: &mut [KBlock; GROUP]) {
    let wb = &wb[..K6_GROUP_BLOCK];
    for half in 0..2 {
        let steps: [[__m256i; 4]; 8] = {
            let mut s = [[_mm256_setzero_si256(); 4]; 8];
            for (i, v) in s.iter_mut().enumerate() {
                *v = q6k_step(wb, 8 * half + i, PREFETCH_AHEAD);
            }
            s
        };
        for t in 0..4 {
            let mut column = [_mm256_setzero_si256(); 8];
            for (c, step) in column.iter_mut().zip(&steps) {
                *c = step[t];
            }
            let lanes = transpose8x8(column);
            for (row, v) in rows.iter_mut().zip(lanes) {
                let at = 64 * t + 32 * half;
                _mm256_storeu_si256(row.values[at..at + 32].as_mut_ptr().cast(), v);
            }
        }
    }
    // The scales: pair `p` of row `r` is the 16-bit element `r` of the
    // pairs' load `p`, so an 8 × 8 transpose of 16-bit elements gives each
    // row its eight pairs, which one shuffle puts in sub-block order.
    let pairs: [__m128i; 8] = std::array::from_fn(|p| {
        let at = K6_SCALES + 16 * p;
        _mm_loadu_si128(wb[at..at + 16].as_ptr().cast())
    });
    let order = _mm_loadu_si128(Q6K_SCALE_ORDER.as_ptr().cast());
    let mut d = [0.0f32; GROUP];
    _mm256_storeu_ps(
        d.as_mut_ptr(),
        _mm256_cvtph_ps(_mm_loadu_si128(wb[K6_D..K6_D + 16].as_ptr().cast())),
    );
    for ((row, pairs), d) in rows.iter_mut().zip(transpose8x8_epi16(pairs)).zip(d) {
        let scales = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(pairs, order));
        _mm256_storeu_si256(row.scales.as_mut_ptr().cast(), scales);
        // Q6_K's values are stored plus 32 (|32 × −128| fits i16).
        let corrections = _mm256_slli_epi16::<5>(scales);
        _mm256_storeu_si256(row.corrections.as_mut_ptr().cast(), corrections);
        (row.d, row.dmin) = (d, d);
    }
}

/// Where each sub-block's scale sits among a row's eight scale pairs (in
/// the order of [`K6_PAIRS`]): the byte shuffle to sub-block order.
const Q6K_SCALE_ORDER: [i8; 16] = {
    let mut at = [0i8; 16];
    let mut p = 0;
    while p < K6_PAIRS.len() {
        let (s1, s2) = K6_PAIRS[p];
        at[s1] = 2 * p as i8;
        at[s2] = 2 * p as i8 + 1;
        p += 1;
    }
    at
};

/// The eight rows' K blocks of the interleaved Q5_K group block `wb`, as
/// [`q6k_group_blocks`] does Q6_K's: load `c` of chunk `i` holds in its
/// low nibbles values `64i + 4c..64i + 4c + 4` of every row and in its high
/// nibbles the same 32 on (their fifth bits from load `c` of the bit
/// bytes, as [`group_qk`](super::group_qk) takes them), so an 8 × 8 transpose of the eight
/// loads' low (high) halves gives each row's 32 values. Each 32-value scale
/// and minimum serves both of its 16s.
#[inline(always)]
pub(in super::super) unsafe fn q5k_group_blocks(wb: &[u8], rows: &mut [KBlock; GROUP]) {
    let wb = &wb[..K5_GROUP_BLOCK];
    let low = _mm256_set1_epi8(0x0f);
    let fifth = _mm256_set1_epi8(0x10);
    for i in 0..4 {
        let shift = _mm_cvtsi32_si128(2 * i as i32);
        let mut lo = [_mm256_setzero_si256(); 8];
        let mut hi = [_mm256_setzero_si256(); 8];
        for c in 0..8 {
            prefetch_line(wb, 64 * (8 * i + c));
            let at = K5_QS + 32 * (8 * i + c);
            let v = load32(&wb[at..at + 32]);
            let h = _mm256_srl_epi16(load32(&wb[K5_QH + 32 * c..K5_QH + 32 * c + 32]), shift);
            lo[c] = _mm256_or_si256(
                _mm256_and_si256(v, low),
                _mm256_and_si256(_mm256_slli_epi16::<4>(h), fifth),
            );
            hi[c] = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16::<4>(v), low),
                _mm256_and_si256(_mm256_slli_epi16::<3>(h), fifth),
            );
        }
        for (half, vectors) in [lo, hi].into_iter().enumerate() {
            let at = 64 * i + 32 * half;
            for (row, v) in rows.iter_mut().zip(transpose8x8(vectors)) {
                _mm256_storeu_si256(row.values[at..at + 32].as_mut_ptr().cast(), v);
            }
        }
    }
    // Scales: byte `r` of the eight bytes from `K4_SCALES + 8j` is row
    // `r`'s scale `j` (an 8 × 8 byte transpose). Minimums: the 16-bit
    // element `r` of the 16 bytes from `K4_MINS + 16k` is row `r`'s
    // minimums `2k` and `2k + 1` (a 4 × 8 transpose of 16-bit elements).
    // Either way row `r` ends with its eight bytes in half `r % 2` of
    // vector `r / 2`, each serving both 16s of its 32 values.
    let scales = transpose8x8_epi8(std::array::from_fn(|j| {
        let at = K4_SCALES + 8 * j;
        _mm_loadl_epi64(wb[at..at + 8].as_ptr().cast())
    }));
    let mins = transpose4x8_epi16(std::array::from_fn(|k| {
        let at = K4_MINS + 16 * k;
        _mm_loadu_si128(wb[at..at + 16].as_ptr().cast())
    }));
    let twice = [
        _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7),
        _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15),
    ];
    let (mut d, mut dmin) = ([0.0f32; GROUP], [0.0f32; GROUP]);
    for (out, at) in [(&mut d, 0), (&mut dmin, K4_DMIN)] {
        let h = _mm_loadu_si128(wb[at..at + 16].as_ptr().cast());
        _mm256_storeu_ps(out.as_mut_ptr(), _mm256_cvtph_ps(h));
    }
    for (lane, row) in rows.iter_mut().enumerate() {
        let (v, half) = (lane / 2, twice[lane % 2]);
        let s = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(scales[v], half));
        _mm256_storeu_si256(row.scales.as_mut_ptr().cast(), s);
        let c = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(mins[v], half));
        _mm256_storeu_si256(row.corrections.as_mut_ptr().cast(), c);
        (row.d, row.dmin) = (d[lane], dmin[lane]);
    }
}

/// The 8 × 8 transpose of bytes: byte `r` of the low half of `v[i]` goes
/// to byte `i` of row `r`, which is half `r % 2` of vector `r / 2`. The
/// bytes of `v[2k]` and `v[2k + 1]` paired as 16-bit elements, then
/// [`transpose4x8_epi16`].
#[inline(always)]
unsafe fn transpose8x8_epi8(v: [__m128i; 8]) -> [__m128i; 4] {
    transpose4x8_epi16([
        _mm_unpacklo_epi8(v[0], v[1]),
        _mm_unpacklo_epi8(v[2], v[3]),
        _mm_unpacklo_epi8(v[4], v[5]),
        _mm_unpacklo_epi8(v[6], v[7]),
    ])
}

/// The 4 × 8 transpose of 16-bit elements: element `r` of `v[k]` goes to
/// element `k` of row `r`, which is half `r % 2` of vector `r / 2`.
#[inline(always)]
unsafe fn transpose4x8_epi16(v: [__m128i; 4]) -> [__m128i; 4] {
    let a = [
        _mm_unpacklo_epi16(v[0], v[1]),
        _mm_unpackhi_epi16(v[0], v[1]),
        _mm_unpacklo_epi16(v[2], v[3]),
        _mm_unpackhi_epi16(v[2], v[3]),
    ];
    [
        _mm_unpacklo_epi32(a[0], a[2]),
        _mm_unpackhi_epi32(a[0], a[2]),
        _mm_unpacklo_epi32(a[1], a[3]),
        _mm_unpackhi_epi32(a[1], a[3]),
    ]
}

/// The 8 × 8 transpose of 16-bit elements: element `r` of vector `i`
/// becomes element `i` of vector `r`. [`transpose4x8_epi16`] of each half
/// of `v` gives row `r`'s first (second) four elements in half `r % 2` of
/// vector `r / 2`; the halves then meet.
#[inline(always)]
unsafe fn transpose8x8_epi16(v: [__m128i; 8]) -> [__m128i; 8] {
    let first = transpose4x8_epi16([v[0], v[1], v[2], v[3]]);
    let second = transpose4x8_epi16([v[4], v[5], v[6], v[7]]);
    std::array::from_fn(|r| {
        if r % 2 == 0 {
            _mm_unpacklo_epi64(first[r / 2], second[r / 2])
        } else {
            _mm_unpackhi_epi64(first[r / 2], second[r / 2])
        }
    })
}

/// The 8 × 8 transpose of 32-bit lanes: lane `r` of vector `i` becomes
/// lane `i` of vector `r`.
#[inline(always)]
unsafe fn transpose8x8(v: [__m256i; 8]) -> [__m256i; 8] {
    let a: [__m256i; 8] = [
        _mm256_unpacklo_epi32(v[0], v[1]),
        _mm256_unpackhi_epi32(v[0], v[1]),
        _mm256_unpacklo_epi32(v[2], v[3]),
        _mm256_unpackhi_epi32(v[2], v[3]),
        _mm256_unpacklo_epi32(v[4], v[5]),
        _mm256_unpackhi_epi32(v[4], v[5]),
        _mm256_unpacklo_epi32(v[6], v[7]),
        _mm256_unpackhi_epi32(v[6], v[7]),
    ];
    let b: [__m256i; 8] = [
        _mm256_unpacklo_epi64(a[0], a[2]),
        _mm256_unpackhi_epi64(a[0], a[2]),
        _mm256_unpacklo_epi64(a[1], a[3]),
        _mm256_unpackhi_epi64(a[1], a[3]),
        _mm256_unpacklo_epi64(a[4], a[6]),
        _mm256_unpackhi_epi64(a[4], a[6]),
        _mm256_unpacklo_epi64(a[5], a[7]),
        _mm256_unpackhi_epi64(a[5], a[7]),
    ];
    // b[k] holds lane k of v[0..4] in its low half and lane 4 + k in its
    // high half (b[4 + k]: the same of v[4..8]); the halves meet across
    // vectors.
    [
        _mm256_permute2x128_si256::<0x20>(b[0], b[4]),
        _mm256_permute2x128_si256::<0x20>(b[1], b[5]),
        _mm256_permute2x128_si256::<0x20>(b[2], b[6]),
        _mm256_permute2x128_si256::<0x20>(b[3], b[7]),
        _mm256_permute2x128_si256::<0x31>(b[0], b[4]),
        _mm256_permute2x128_si256::<0x31>(b[1], b[5]),
        _mm256_permute2x128_si256::<0x31>(b[2], b[6]),
        _mm256_permute2x128_si256::<0x31>(b[3], b[7]),
    ]
}
