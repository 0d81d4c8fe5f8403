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
use super::super::{half_bits, load32, prefetch_line};
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
                *v = q6k_step(wb, 8 * half + i);
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
    for (lane, row) in rows.iter_mut().enumerate() {
        for (p, &(s1, s2)) in K6_PAIRS.iter().enumerate() {
            let at = K6_SCALES + 16 * p + 2 * lane;
            row.scales[s1] = i16::from(wb[at] as i8);
            row.scales[s2] = i16::from(wb[at + 1] as i8);
        }
        // Q6_K's values are stored plus 32 (|32 × −128| fits i16).
        row.corrections = row.scales.map(|s| 32 * s);
        let d = half_bits(u16::from_le_bytes([
            wb[K6_D + 2 * lane],
            wb[K6_D + 2 * lane + 1],
        ]));
        (row.d, row.dmin) = (d, d);
    }
}

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
    for (lane, row) in rows.iter_mut().enumerate() {
        for j in 0..8 {
            let scale = i16::from(wb[K4_SCALES + 8 * j + lane]);
            row.scales[2 * j] = scale;
            row.scales[2 * j + 1] = scale;
        }
        for k in 0..4 {
            for (half, &min) in wb[K4_MINS + 16 * k + 2 * lane..][..2].iter().enumerate() {
                let sub = 2 * k + half;
                row.corrections[2 * sub] = i16::from(min);
                row.corrections[2 * sub + 1] = i16::from(min);
            }
        }
        let half_at = |at: usize| half_bits(u16::from_le_bytes([wb[at], wb[at + 1]]));
        (row.d, row.dmin) = (half_at(2 * lane), half_at(K4_DMIN + 2 * lane));
    }
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
