//! The IQ4_XS group kernels: eight interleaved rows (the layout of
//! [`interleave`](super::super::super::interleave)'s `i4`, Q4_K's nibbles
//! with bytes for scales) against up to
//! [`ROWS_PER_CALL`](super::ROWS_PER_CALL) Q8_K activation rows
//! ([`group_iq4_xs`]), and their AVX-512 form on two groups at once
//! ([`pair_iq4_xs`]).
//!
//! An index names one of sixteen signed values (−127..113). With VNNI a
//! byte shuffle turns each nibble vector into the values plus 128 (1..241,
//! unsigned), `vpdpbusd` multiplies them by the activation bytes into i32,
//! and each sub-block's sums open at `−128 × Σ_{32} x`, which takes the
//! offset back exactly: no sign instruction per activation row, and the
//! same integers as the signed values give. Without VNNI (AVX2, whose
//! `maddubs` would saturate on 241 × 127 pairs) the shuffle gives the
//! signed values, and each chunk takes the sign trick (`|v|` against `x`
//! with `v`'s sign) and its own `madd`. A sub-block's i32 sums are then
//! multiplied by the rows' scales (`s − 32`), each block's total (below
//! 2²⁸) converted to f32 once.

use std::arch::x86_64::*;

use super::super::super::act::{QuantizedActivations, KB, KSUM};
use super::super::super::interleave::{I4_GROUP_BLOCK, I4_QS, I4_SCALES};
use super::super::{load32, prefetch_line_at};
use super::wide::{
    both, broadcast4 as broadcast4_wide, bytes_as_i32, halves, k_rows, PAIR, WIDE_ROWS,
};
use super::{broadcast4, unroll8, Dot, GroupSums};
use pagoda_core::quant::IQ4_VALUES;

/// The IQ4 values plus 128, as bytes: what the VNNI kernels multiply.
const OFFSET_VALUES: [u8; 16] = {
    let mut out = [0u8; 16];
    let mut i = 0;
    while i < 16 {
        out[i] = (IQ4_VALUES[i] as i16 + 128) as u8;
        i += 1;
    }
    out
};

/// `−128 × Σ x` of each 32 activation values of Q8_K row block `b`, in
/// lane `s` for sub-block `s`, from its sums of 16 (`bs`, 16 of them):
/// what the offset values add, taken back.
#[inline(always)]
unsafe fn offset_back(bs: &[i16], b: usize) -> __m256i {
    let s16 = load32(&bs[b * (KB / KSUM)..(b + 1) * (KB / KSUM)]);
    let s32 = _mm_hadd_epi16(
        _mm256_castsi256_si128(s16),
        _mm256_extracti128_si256::<1>(s16),
    );
    // |Σ| ≤ 32 × 127: times 128 fits i32 with room.
    _mm256_sub_epi32(
        _mm256_setzero_si256(),
        _mm256_slli_epi32::<7>(_mm256_cvtepi16_epi32(s32)),
    )
}

/// Lane `s` of `v` in every lane.
#[inline(always)]
unsafe fn lane(v: __m256i, s: usize) -> __m256i {
    _mm256_permutevar8x32_epi32(v, _mm256_set1_epi32(s as i32))
}

/// One group of eight interleaved IQ4_XS rows against `N` Q8_K activation
/// rows from `first`: `sums[j][lane]` (see the module docs).
#[inline(always)]
pub(super) unsafe fn group_iq4_xs<D: Dot, const N: usize>(
    w: &[u8],
    x: &QuantizedActivations,
    first: usize,
    ahead: usize,
    sums: &mut GroupSums,
) {
    let blocks = w.len() / I4_GROUP_BLOCK;
    let (qs, ds, bs) = k_rows::<N>(x, first, blocks);
    let low = _mm256_set1_epi8(0x0f);
    let table = if D::FUSED {
        _mm256_broadcastsi128_si256(_mm_loadu_si128(OFFSET_VALUES.as_ptr().cast()))
    } else {
        _mm256_broadcastsi128_si256(_mm_loadu_si128(IQ4_VALUES.as_ptr().cast()))
    };
    let bias = _mm256_set1_epi32(32);
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm256_setzero_ps(); N];
    for b in 0..blocks {
        let wb = &w[b * I4_GROUP_BLOCK..(b + 1) * I4_GROUP_BLOCK];
        let mut xb: [&[i8]; N] = [&[]; N];
        let mut back = [_mm256_setzero_si256(); N];
        for j in 0..N {
            xb[j] = &qs[j][b * KB..b * KB + KB];
            if D::FUSED {
                back[j] = offset_back(bs[j], b);
            }
        }
        let mut isum = [_mm256_setzero_si256(); N];
        for i in 0..4 {
            let at = I4_SCALES + 16 * i;
            // The rows' scales of sub-blocks 2i and 2i + 1 as i32.
            let se = _mm256_sub_epi32(
                _mm256_cvtepu8_epi32(_mm_loadl_epi64(wb[at..at + 8].as_ptr().cast())),
                bias,
            );
            let so = _mm256_sub_epi32(
                _mm256_cvtepu8_epi32(_mm_loadl_epi64(wb[at + 8..at + 16].as_ptr().cast())),
                bias,
            );
            let mut slo = [_mm256_setzero_si256(); N];
            let mut shi = [_mm256_setzero_si256(); N];
            if D::FUSED {
                for j in 0..N {
                    slo[j] = lane(back[j], 2 * i);
                    shi[j] = lane(back[j], 2 * i + 1);
                }
            }
            unroll8!(c, {
                // One line of the block ahead per chunk (see
                // `prefetch_line`): its 17.25 over its 32 chunks.
                let line = 64 * (8 * i + c);
                if line < I4_GROUP_BLOCK {
                    prefetch_line_at(wb, ahead, line);
                }
                let at = I4_QS + 32 * (8 * i + c);
                let v = load32(&wb[at..at + 32]);
                let lo = _mm256_shuffle_epi8(table, _mm256_and_si256(v, low));
                let hi =
                    _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16::<4>(v), low));
                if D::FUSED {
                    for j in 0..N {
                        let xl = broadcast4(xb[j], 64 * i + 4 * c);
                        let xh = broadcast4(xb[j], 64 * i + 32 + 4 * c);
                        slo[j] = D::dot(slo[j], lo, xl);
                        shi[j] = D::dot(shi[j], hi, xh);
                    }
                } else {
                    // |v| ≤ 127 against |x| ≤ 127: a pair ≤ 32,258.
                    let (alo, ahi) = (_mm256_abs_epi8(lo), _mm256_abs_epi8(hi));
                    for j in 0..N {
                        let xl = _mm256_sign_epi8(broadcast4(xb[j], 64 * i + 4 * c), lo);
                        let xh = _mm256_sign_epi8(broadcast4(xb[j], 64 * i + 32 + 4 * c), hi);
                        let pl = _mm256_madd_epi16(_mm256_maddubs_epi16(alo, xl), ones);
                        let ph = _mm256_madd_epi16(_mm256_maddubs_epi16(ahi, xh), ones);
                        slo[j] = _mm256_add_epi32(slo[j], pl);
                        shi[j] = _mm256_add_epi32(shi[j], ph);
                    }
                }
            });
            for j in 0..N {
                let p = _mm256_add_epi32(
                    _mm256_mullo_epi32(slo[j], se),
                    _mm256_mullo_epi32(shi[j], so),
                );
                isum[j] = _mm256_add_epi32(isum[j], p);
            }
        }
        let d = _mm256_cvtph_ps(_mm_loadu_si128(wb[..16].as_ptr().cast()));
        for j in 0..N {
            let dx = _mm256_set1_ps(ds[j][b]);
            acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[j]), _mm256_mul_ps(d, dx), acc[j]);
        }
    }
    for j in 0..N {
        _mm256_storeu_ps(sums[j].as_mut_ptr(), acc[j]);
    }
}

/// [`group_iq4_xs`]'s VNNI form on two groups at once (`w0` in lanes
/// 0..8, `w1` in 8..16): the same integers per lane, so the same floats.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline(never)]
pub(super) unsafe fn pair_iq4_xs<const N: usize>(
    w0: &[u8],
    w1: &[u8],
    x: &QuantizedActivations,
    first: usize,
    ahead: usize,
    sums: &mut [[f32; PAIR]; WIDE_ROWS],
) {
    let blocks = w0.len().min(w1.len()) / I4_GROUP_BLOCK;
    let (qs, ds, bs) = k_rows::<N>(x, first, blocks);
    let low = _mm512_set1_epi8(0x0f);
    let table = _mm512_broadcast_i32x4(_mm_loadu_si128(OFFSET_VALUES.as_ptr().cast()));
    let bias = _mm512_set1_epi32(32);
    let mut acc = [_mm512_setzero_ps(); N];
    for b in 0..blocks {
        let (wb0, wb1) = (
            &w0[b * I4_GROUP_BLOCK..(b + 1) * I4_GROUP_BLOCK],
            &w1[b * I4_GROUP_BLOCK..(b + 1) * I4_GROUP_BLOCK],
        );
        let mut xb: [&[i8]; N] = [&[]; N];
        let mut back = [_mm256_setzero_si256(); N];
        for j in 0..N {
            xb[j] = &qs[j][b * KB..b * KB + KB];
            back[j] = offset_back(bs[j], b);
        }
        let mut isum = [_mm512_setzero_si512(); N];
        for i in 0..4 {
            let se = _mm512_sub_epi32(bytes_as_i32(wb0, wb1, I4_SCALES + 16 * i), bias);
            let so = _mm512_sub_epi32(bytes_as_i32(wb0, wb1, I4_SCALES + 16 * i + 8), bias);
            let mut slo = [_mm512_setzero_si512(); N];
            let mut shi = [_mm512_setzero_si512(); N];
            for j in 0..N {
                slo[j] = _mm512_broadcastd_epi32(_mm256_castsi256_si128(lane(back[j], 2 * i)));
                shi[j] = _mm512_broadcastd_epi32(_mm256_castsi256_si128(lane(back[j], 2 * i + 1)));
            }
            unroll8!(c, {
                let line = 64 * (8 * i + c);
                if line < I4_GROUP_BLOCK {
                    prefetch_line_at(wb0, ahead, line);
                    prefetch_line_at(wb1, ahead, line);
                }
                let v = both(wb0, wb1, I4_QS + 32 * (8 * i + c));
                let lo = _mm512_shuffle_epi8(table, _mm512_and_si512(v, low));
                let hi =
                    _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16::<4>(v), low));
                for j in 0..N {
                    slo[j] =
                        _mm512_dpbusd_epi32(slo[j], lo, broadcast4_wide(xb[j], 64 * i + 4 * c));
                    shi[j] = _mm512_dpbusd_epi32(
                        shi[j],
                        hi,
                        broadcast4_wide(xb[j], 64 * i + 32 + 4 * c),
                    );
                }
            });
            for j in 0..N {
                let p = _mm512_add_epi32(
                    _mm512_mullo_epi32(slo[j], se),
                    _mm512_mullo_epi32(shi[j], so),
                );
                isum[j] = _mm512_add_epi32(isum[j], p);
            }
        }
        let d = halves(wb0, wb1, 0);
        for j in 0..N {
            let dx = _mm512_set1_ps(ds[j][b]);
            acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[j]), _mm512_mul_ps(d, dx), acc[j]);
        }
    }
    for j in 0..N {
        _mm512_storeu_ps(sums[j].as_mut_ptr(), acc[j]);
    }
}
