//! The Q4_K and Q5_K group kernel ([`group_qk`]): eight interleaved rows
//! (the layouts of [`interleave`](super::super::super::interleave)'s `k4`
//! and `k5`) against up to [`ROWS_PER_CALL`](super::ROWS_PER_CALL) Q8_K activation rows.

use std::arch::x86_64::*;

use super::super::super::act::{QuantizedActivations, KB, KSUM};
use super::super::super::interleave::{
    K4_DMIN, K4_GROUP_BLOCK, K4_MINS, K4_QS, K4_SCALES, K5_GROUP_BLOCK, K5_QH, K5_QS,
};
use super::super::{load32, prefetch_line_at};
use super::{broadcast4, unroll8, Dot, GroupSums};

/// One group of eight interleaved Q4_K rows against `N` Q8_K activation
/// rows. For each 64 values, eight 32-byte loads give every row's four
/// bytes in its lane; their low nibbles (sub-block `2i`) and high nibbles
/// (`2i + 1`) meet the activation's four bytes broadcast, and eight
/// `maddubs` add in i16 (eight pairs of at most 2 × 15 × 127: 30,480)
/// before one `madd` by the rows' scales, which a shuffle spreads to each
/// lane's two i16s. The minimums pay `Σ_j m_j × (sums of 16 of sub-block
/// j)` by four `madd` of the rows' minimum pairs against the activation's
/// pairs of sub-block sums.
///
/// Q5_K rows (`FIVE`) take each value's fifth bit from the group's bit
/// bytes, laid out as the nibbles: one shift of a load by `2i` brings the
/// bits of chunk `i` to bits 0 (low nibbles) and 1 (high nibbles) of each
/// byte. Their 5-bit values make a `maddubs` pair reach 2 × 31 × 128, so
/// four (not eight) add in i16 before each `madd`.
///
/// With VNNI each sub-block's sums add in i32 (at most 32 × 31 × 128 =
/// 126,976) and are multiplied by the rows' scales as i32 (6 bits: the
/// block's total stays below 2²⁷).
#[inline(always)]
pub(super) unsafe fn group_qk<D: Dot, const N: usize, const FIVE: bool>(
    w: &[u8],
    x: &QuantizedActivations,
    first: usize,
    ahead: usize,
    sums: &mut GroupSums,
) {
    let (block, qs_at) = if FIVE {
        (K5_GROUP_BLOCK, K5_QS)
    } else {
        (K4_GROUP_BLOCK, K4_QS)
    };
    let blocks = w.len() / block;
    let mut qs: [&[i8]; N] = [&[]; N];
    let mut ds: [&[f32]; N] = [&[]; N];
    let mut bs: [&[i16]; N] = [&[]; N];
    for j in 0..N {
        qs[j] = &x.q_row(first + j)[..blocks * KB];
        ds[j] = &x.d_row(first + j)[..blocks];
        bs[j] = &x.bsums_row(first + j)[..blocks * (KB / KSUM)];
    }
    let low = _mm256_set1_epi8(0x0f);
    // Lane r's two i16s take byte r (even sub-block) or 8 + r (odd) of the
    // 16 scale bytes of a pair of sub-blocks, in both 128-bit halves.
    let z = -128i8; // 0x80: a zero byte
    let even = _mm256_setr_epi8(
        0, z, 0, z, 1, z, 1, z, 2, z, 2, z, 3, z, 3, z, 4, z, 4, z, 5, z, 5, z, 6, z, 6, z, 7, z,
        7, z,
    );
    let odd = _mm256_add_epi8(
        even,
        _mm256_setr_epi8(
            8, 0, 8, 0, 8, 0, 8, 0, 8, 0, 8, 0, 8, 0, 8, 0, 8, 0, 8, 0, 8, 0, 8, 0, 8, 0, 8, 0, 8,
            0, 8, 0,
        ),
    );
    let fifth = _mm256_set1_epi8(0x10);
    // Chunks of 32 values whose `maddubs` sums add in i16 before a `madd`
    // (all eight with VNNI, whose sums are i32).
    let run = if FIVE && !D::FUSED { 4 } else { 8 };
    let mut acc = [_mm256_setzero_ps(); N];
    let mut accm = [_mm256_setzero_ps(); N];
    for b in 0..blocks {
        let wb = &w[b * block..b * block + block];
        let mut xb: [&[i8]; N] = [&[]; N];
        for j in 0..N {
            xb[j] = &qs[j][b * KB..b * KB + KB];
        }
        let mut isum = [_mm256_setzero_si256(); N];
        for i in 0..4 {
            let at = K4_SCALES + 16 * i;
            let (se, so) = if D::FUSED {
                // The rows' scales as i32, one per lane.
                (
                    _mm256_cvtepu8_epi32(_mm_loadl_epi64(wb[at..at + 8].as_ptr().cast())),
                    _mm256_cvtepu8_epi32(_mm_loadl_epi64(wb[at + 8..at + 16].as_ptr().cast())),
                )
            } else {
                let pair =
                    _mm256_broadcastsi128_si256(_mm_loadu_si128(wb[at..at + 16].as_ptr().cast()));
                (
                    _mm256_shuffle_epi8(pair, even),
                    _mm256_shuffle_epi8(pair, odd),
                )
            };
            let shift = _mm_cvtsi32_si128(2 * i as i32);
            for c0 in (0..8).step_by(run) {
                let mut slo = [_mm256_setzero_si256(); N];
                let mut shi = [_mm256_setzero_si256(); N];
                unroll8!(k, {
                    if k < run {
                        let c = c0 + k;
                        // One line of the block ahead per chunk (see
                        // `prefetch_line`): its 18 (Q5_K: 23) over its 32 chunks.
                        let line = 64 * (8 * i + c);
                        if line < block {
                            prefetch_line_at(wb, ahead, line);
                        }
                        let at = qs_at + 32 * (8 * i + c);
                        let v = load32(&wb[at..at + 32]);
                        let mut lo = _mm256_and_si256(v, low);
                        let mut hi = _mm256_and_si256(_mm256_srli_epi16::<4>(v), low);
                        if FIVE {
                            let at = K5_QH + 32 * c;
                            let h = _mm256_srl_epi16(load32(&wb[at..at + 32]), shift);
                            lo = _mm256_or_si256(
                                lo,
                                _mm256_and_si256(_mm256_slli_epi16::<4>(h), fifth),
                            );
                            hi = _mm256_or_si256(
                                hi,
                                _mm256_and_si256(_mm256_slli_epi16::<3>(h), fifth),
                            );
                        }
                        for j in 0..N {
                            let xl = broadcast4(xb[j], 64 * i + 4 * c);
                            let xh = broadcast4(xb[j], 64 * i + 32 + 4 * c);
                            if D::FUSED {
                                slo[j] = D::dot(slo[j], lo, xl);
                                shi[j] = D::dot(shi[j], hi, xh);
                            } else {
                                slo[j] = _mm256_add_epi16(slo[j], _mm256_maddubs_epi16(lo, xl));
                                shi[j] = _mm256_add_epi16(shi[j], _mm256_maddubs_epi16(hi, xh));
                            }
                        }
                    }
                });
                for j in 0..N {
                    let p = if D::FUSED {
                        _mm256_add_epi32(
                            _mm256_mullo_epi32(slo[j], se),
                            _mm256_mullo_epi32(shi[j], so),
                        )
                    } else {
                        _mm256_add_epi32(
                            _mm256_madd_epi16(slo[j], se),
                            _mm256_madd_epi16(shi[j], so),
                        )
                    };
                    isum[j] = _mm256_add_epi32(isum[j], p);
                }
            }
        }
        let d = _mm256_cvtph_ps(_mm_loadu_si128(wb[..16].as_ptr().cast()));
        let dmin = _mm256_cvtph_ps(_mm_loadu_si128(wb[K4_DMIN..K4_DMIN + 16].as_ptr().cast()));
        for j in 0..N {
            // Sums of each 32 values: pairs of the sums of 16 (|Σ| ≤ 4,064).
            let s16 = load32(&bs[j][b * (KB / KSUM)..(b + 1) * (KB / KSUM)]);
            let s32 = _mm_hadd_epi16(
                _mm256_castsi256_si128(s16),
                _mm256_extracti128_si256::<1>(s16),
            );
            let s32 = _mm256_broadcastsi128_si256(s32);
            let mut msum = _mm256_setzero_si256();
            for k in 0..4 {
                let at = K4_MINS + 16 * k;
                let mins = _mm256_cvtepu8_epi16(_mm_loadu_si128(wb[at..at + 16].as_ptr().cast()));
                let xs = match k {
                    0 => _mm256_shuffle_epi32::<0x00>(s32),
                    1 => _mm256_shuffle_epi32::<0x55>(s32),
                    2 => _mm256_shuffle_epi32::<0xaa>(s32),
                    _ => _mm256_shuffle_epi32::<0xff>(s32),
                };
                msum = D::dot_pairs(msum, mins, xs);
            }
            let dx = _mm256_set1_ps(ds[j][b]);
            acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[j]), _mm256_mul_ps(d, dx), acc[j]);
            accm[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(msum), _mm256_mul_ps(dmin, dx), accm[j]);
        }
    }
    for j in 0..N {
        _mm256_storeu_ps(sums[j].as_mut_ptr(), _mm256_sub_ps(acc[j], accm[j]));
    }
}
