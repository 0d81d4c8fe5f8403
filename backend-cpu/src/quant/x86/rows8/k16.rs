//! The group kernels of the K-quants with a scale per 16 values and 2-bit
//! planes, Q2_K and Q3_K (`THREE`): eight interleaved rows (the layouts
//! of [`interleave`](super::super::super::interleave)'s `k2` and `k3`)
//! against up to [`ROWS_PER_CALL`](super::ROWS_PER_CALL) Q8_K activation
//! rows ([`group_k16`]), and their AVX-512 form on two groups at once
//! ([`pair_k16`]).
//!
//! Each 32-byte load holds four bytes of each row's 2-bit values; a shift
//! by `2p` and a mask give plane `p`: four values per row, each 0..3. Q3_K
//! adds its high bit from the rows' bit bytes (two immediate shifts and a
//! mask bring bit `4h + p` to bit 2), so its values are 0..7 and each sub-block's
//! sums open at `−4 × Σ_{16} x`, which takes the file's 4 back exactly.
//! The values are small (a `maddubs` pair at most 2 × 7 × 127), so AVX2's
//! three-instruction step is exact too. A sub-block's i32 sums are then
//! multiplied by the rows' scales (Q2_K's low nibbles; Q3_K's 6-bit bytes
//! less 32); Q2_K's minimums pay `Σ_s m_s × Σ_{16} x` by `madd` of the
//! rows' minimum pairs against the activation's pairs of sums of 16, as
//! Q4_K's do.

use std::arch::x86_64::*;

use super::super::super::act::{QuantizedActivations, KB, KSUM};
use super::super::super::interleave::{
    K2_DMIN, K2_GROUP_BLOCK, K2_QS, K2_SCALES, K3_GROUP_BLOCK, K3_HM, K3_QS, K3_SCALES,
};
use super::super::{load32, prefetch_line_at};
use super::wide::{
    both, broadcast4 as broadcast4_wide, bytes_as_i32, halves, k_rows, PAIR, WIDE_ROWS,
};
use super::{broadcast4, unroll8, Dot, GroupSums};

/// Sums of 16 activation values per Q8_K block.
const SUMS: usize = KB / KSUM;

/// The block layout: its bytes, where its scales and its values start.
fn layout(three: bool) -> (usize, usize, usize) {
    if three {
        (K3_GROUP_BLOCK, K3_SCALES, K3_QS)
    } else {
        (K2_GROUP_BLOCK, K2_SCALES, K2_QS)
    }
}

/// Runs `$body` for each half `$h` (0, 1) and plane `$p` (0..4) of a
/// block, with the shifts of that plane as constants: `$plane` (2p, the
/// values' bits to bits 0..2) and `$left`, `$right`, which bring bit `4h +
/// p` of each byte (its high bits) to bit 2 in 16-bit lanes (a high
/// byte's bit moves by at most 5, so it stays in its byte; the mask that
/// follows keeps bit 2 alone). Immediate shifts: with the counts in a
/// register, the one-row Q3_K kernel ran 7.1 GiB/s of weights, 0.95× the
/// plain layout, where immediate shifts run 17.2, 2.0× (one thread, 1536²,
/// one run each).
macro_rules! planes {
    ($h:ident, $p:ident, $plane:ident, $left:ident, $right:ident, $body:block) => {
        planes!(@ $h, $p, $plane, $left, $right, $body,
            (0, 0, 0, 2, 0), (0, 1, 2, 1, 0), (0, 2, 4, 0, 0), (0, 3, 6, 0, 1),
            (1, 0, 0, 0, 2), (1, 1, 2, 0, 3), (1, 2, 4, 0, 4), (1, 3, 6, 0, 5))
    };
    (@ $h:ident, $p:ident, $plane:ident, $left:ident, $right:ident, $body:block,
        $(($hv:literal, $pv:literal, $planev:literal, $leftv:literal, $rightv:literal)),*) => {
        $({
            const $plane: i32 = $planev;
            const $left: i32 = $leftv;
            const $right: i32 = $rightv;
            let ($h, $p): (usize, usize) = ($hv, $pv);
            $body
        })*
    };
}

/// The rows' scales of sub-block `s` (eight bytes at `scales_at + 8s` of
/// the group block `w`) as i32: Q3_K's less 32, Q2_K's low nibbles.
#[inline(always)]
unsafe fn scales8<const THREE: bool>(w: &[u8], scales_at: usize, s: usize) -> __m256i {
    let at = scales_at + 8 * s;
    let v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(w[at..at + 8].as_ptr().cast()));
    if THREE {
        _mm256_sub_epi32(v, _mm256_set1_epi32(32))
    } else {
        _mm256_and_si256(v, _mm256_set1_epi32(0x0f))
    }
}

/// [`scales8`] of both groups: `w0`'s in lanes 0..8, `w1`'s in 8..16.
#[inline(always)]
unsafe fn scales16<const THREE: bool>(w0: &[u8], w1: &[u8], scales_at: usize, s: usize) -> __m512i {
    let v = bytes_as_i32(w0, w1, scales_at + 8 * s);
    if THREE {
        _mm512_sub_epi32(v, _mm512_set1_epi32(32))
    } else {
        _mm512_and_si512(v, _mm512_set1_epi32(0x0f))
    }
}

/// Lane `r`'s i16 pair: the minimums (high nibbles) of sub-blocks `2q`
/// and `2q + 1` of row `r` of the Q2_K group block `w`.
#[inline(always)]
unsafe fn min_pairs(w: &[u8], q: usize) -> __m128i {
    let at = K2_SCALES + 16 * q;
    let two = _mm_loadu_si128(w[at..at + 16].as_ptr().cast());
    _mm_unpacklo_epi8(two, _mm_srli_si128::<8>(two))
}

/// `−4 × Σ_{16} x` of sub-block `s` of activation block `b` (Q3_K's 4
/// taken back), for sums of 16 `bs`.
#[inline(always)]
fn offset_back(bs: &[i16], b: usize, s: usize) -> i32 {
    -4 * i32::from(bs[b * SUMS + s])
}

/// The sums of 16 of sub-blocks `2q` and `2q + 1` of activation block `b`
/// as one 32-bit word: the i16 pair `madd` meets the minimums' pair with.
#[inline(always)]
fn sum_pair(bs: &[i16], b: usize, q: usize) -> i32 {
    let lo = bs[b * SUMS + 2 * q] as u16;
    let hi = bs[b * SUMS + 2 * q + 1] as u16;
    (u32::from(lo) | (u32::from(hi) << 16)) as i32
}

/// One group of eight interleaved Q2_K (Q3_K with `THREE`) rows against
/// `N` Q8_K activation rows from `first`: `sums[j][lane]`.
#[inline(always)]
pub(super) unsafe fn group_k16<D: Dot, const N: usize, const THREE: bool>(
    w: &[u8],
    x: &QuantizedActivations,
    first: usize,
    ahead: usize,
    sums: &mut GroupSums,
) {
    let (block, scales_at, qs_at) = layout(THREE);
    let blocks = w.len() / block;
    let (qs, ds, bs) = k_rows::<N>(x, first, blocks);
    let (three, bit2) = (_mm256_set1_epi8(3), _mm256_set1_epi8(4));
    let mut acc = [_mm256_setzero_ps(); N];
    let mut accm = [_mm256_setzero_ps(); N];
    for b in 0..blocks {
        let wb = &w[b * block..(b + 1) * block];
        let mut xb: [&[i8]; N] = [&[]; N];
        for j in 0..N {
            xb[j] = &qs[j][b * KB..b * KB + KB];
        }
        let mut isum = [_mm256_setzero_si256(); N];
        planes!(h, p, PLANE, LEFT, RIGHT, {
            let s0 = 8 * h + 2 * p;
            let se = scales8::<THREE>(wb, scales_at, s0);
            let so = scales8::<THREE>(wb, scales_at, s0 + 1);
            let mut slo = [_mm256_setzero_si256(); N];
            let mut shi = [_mm256_setzero_si256(); N];
            if THREE {
                for j in 0..N {
                    slo[j] = _mm256_set1_epi32(offset_back(bs[j], b, s0));
                    shi[j] = _mm256_set1_epi32(offset_back(bs[j], b, s0 + 1));
                }
            }
            unroll8!(c, {
                // One line of the block ahead per chunk (see
                // `prefetch_line`): its 10.5 (Q3_K: 14.25) over 64.
                let line = 64 * (8 * (4 * h + p) + c);
                if line < block {
                    prefetch_line_at(wb, ahead, line);
                }
                let at = qs_at + 32 * (8 * h + c);
                let mut v =
                    _mm256_and_si256(_mm256_srli_epi16::<PLANE>(load32(&wb[at..at + 32])), three);
                if THREE {
                    let at = K3_HM + 32 * c;
                    let bits = _mm256_slli_epi16::<LEFT>(load32(&wb[at..at + 32]));
                    v = _mm256_or_si256(
                        v,
                        _mm256_and_si256(_mm256_srli_epi16::<RIGHT>(bits), bit2),
                    );
                }
                for j in 0..N {
                    let xv = broadcast4(xb[j], 128 * h + 32 * p + 4 * c);
                    if c < 4 {
                        slo[j] = D::dot(slo[j], v, xv);
                    } else {
                        shi[j] = D::dot(shi[j], v, xv);
                    }
                }
            });
            for j in 0..N {
                let sp = _mm256_add_epi32(
                    _mm256_mullo_epi32(slo[j], se),
                    _mm256_mullo_epi32(shi[j], so),
                );
                isum[j] = _mm256_add_epi32(isum[j], sp);
            }
        });
        let d = _mm256_cvtph_ps(_mm_loadu_si128(wb[..16].as_ptr().cast()));
        for j in 0..N {
            let dx = _mm256_set1_ps(ds[j][b]);
            acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[j]), _mm256_mul_ps(d, dx), acc[j]);
        }
        if !THREE {
            let dmin = _mm256_cvtph_ps(_mm_loadu_si128(wb[K2_DMIN..K2_DMIN + 16].as_ptr().cast()));
            let mut msum = [_mm256_setzero_si256(); N];
            for q in 0..8 {
                let mins = _mm256_srli_epi16::<4>(_mm256_cvtepu8_epi16(min_pairs(wb, q)));
                for j in 0..N {
                    let xs = _mm256_set1_epi32(sum_pair(bs[j], b, q));
                    msum[j] = D::dot_pairs(msum[j], mins, xs);
                }
            }
            for j in 0..N {
                let dx = _mm256_set1_ps(ds[j][b]);
                accm[j] = _mm256_fmadd_ps(
                    _mm256_cvtepi32_ps(msum[j]),
                    _mm256_mul_ps(dmin, dx),
                    accm[j],
                );
            }
        }
    }
    for j in 0..N {
        _mm256_storeu_ps(sums[j].as_mut_ptr(), _mm256_sub_ps(acc[j], accm[j]));
    }
}

/// [`group_k16`]'s VNNI form on two groups at once (`w0` in lanes 0..8,
/// `w1` in 8..16): the same integers per lane, so the same floats.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline(never)]
pub(super) unsafe fn pair_k16<const N: usize, const THREE: bool>(
    w0: &[u8],
    w1: &[u8],
    x: &QuantizedActivations,
    first: usize,
    ahead: usize,
    sums: &mut [[f32; PAIR]; WIDE_ROWS],
) {
    let (block, scales_at, qs_at) = layout(THREE);
    let blocks = w0.len().min(w1.len()) / block;
    let (qs, ds, bs) = k_rows::<N>(x, first, blocks);
    let (three, bit2) = (_mm512_set1_epi8(3), _mm512_set1_epi8(4));
    let mut acc = [_mm512_setzero_ps(); N];
    let mut accm = [_mm512_setzero_ps(); N];
    for b in 0..blocks {
        let (wb0, wb1) = (
            &w0[b * block..(b + 1) * block],
            &w1[b * block..(b + 1) * block],
        );
        let mut xb: [&[i8]; N] = [&[]; N];
        for j in 0..N {
            xb[j] = &qs[j][b * KB..b * KB + KB];
        }
        let mut isum = [_mm512_setzero_si512(); N];
        planes!(h, p, PLANE, LEFT, RIGHT, {
            let s0 = 8 * h + 2 * p;
            let se = scales16::<THREE>(wb0, wb1, scales_at, s0);
            let so = scales16::<THREE>(wb0, wb1, scales_at, s0 + 1);
            let mut slo = [_mm512_setzero_si512(); N];
            let mut shi = [_mm512_setzero_si512(); N];
            if THREE {
                for j in 0..N {
                    slo[j] = _mm512_set1_epi32(offset_back(bs[j], b, s0));
                    shi[j] = _mm512_set1_epi32(offset_back(bs[j], b, s0 + 1));
                }
            }
            unroll8!(c, {
                let line = 64 * (8 * (4 * h + p) + c);
                if line < block {
                    prefetch_line_at(wb0, ahead, line);
                    prefetch_line_at(wb1, ahead, line);
                }
                let at = qs_at + 32 * (8 * h + c);
                let mut v = _mm512_and_si512(
                    _mm512_srli_epi16::<{ PLANE as u32 }>(both(wb0, wb1, at)),
                    three,
                );
                if THREE {
                    let bits = _mm512_slli_epi16::<{ LEFT as u32 }>(both(wb0, wb1, K3_HM + 32 * c));
                    v = _mm512_or_si512(
                        v,
                        _mm512_and_si512(_mm512_srli_epi16::<{ RIGHT as u32 }>(bits), bit2),
                    );
                }
                for j in 0..N {
                    let xv = broadcast4_wide(xb[j], 128 * h + 32 * p + 4 * c);
                    if c < 4 {
                        slo[j] = _mm512_dpbusd_epi32(slo[j], v, xv);
                    } else {
                        shi[j] = _mm512_dpbusd_epi32(shi[j], v, xv);
                    }
                }
            });
            for j in 0..N {
                let sp = _mm512_add_epi32(
                    _mm512_mullo_epi32(slo[j], se),
                    _mm512_mullo_epi32(shi[j], so),
                );
                isum[j] = _mm512_add_epi32(isum[j], sp);
            }
        });
        let d = halves(wb0, wb1, 0);
        for j in 0..N {
            let dx = _mm512_set1_ps(ds[j][b]);
            acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[j]), _mm512_mul_ps(d, dx), acc[j]);
        }
        if !THREE {
            let dmin = halves(wb0, wb1, K2_DMIN);
            let mut msum = [_mm512_setzero_si512(); N];
            for q in 0..8 {
                let mins = _mm512_srli_epi16::<4>(_mm512_cvtepu8_epi16(_mm256_set_m128i(
                    min_pairs(wb1, q),
                    min_pairs(wb0, q),
                )));
                for j in 0..N {
                    let xs = _mm512_set1_epi32(sum_pair(bs[j], b, q));
                    msum[j] = _mm512_dpwssd_epi32(msum[j], mins, xs);
                }
            }
            for j in 0..N {
                let dx = _mm512_set1_ps(ds[j][b]);
                accm[j] = _mm512_fmadd_ps(
                    _mm512_cvtepi32_ps(msum[j]),
                    _mm512_mul_ps(dmin, dx),
                    accm[j],
                );
            }
        }
    }
    for j in 0..N {
        _mm512_storeu_ps(sums[j].as_mut_ptr(), _mm512_sub_ps(acc[j], accm[j]));
    }
}
