//! Q6_K's group kernel ([`group_q6k`]): eight interleaved rows (the
//! layout of [`interleave`](super::super::super::interleave)'s `k6`)
//! against up to [`ROWS_PER_CALL`](super::ROWS_PER_CALL) activation rows, and the unpacking of
//! one step of a group block that [`unpack`](super::unpack) shares.

use std::arch::x86_64::*;

use super::super::super::act::{QuantizedActivations, KB, KSUM};
use super::super::super::interleave::{K6_D, K6_GROUP_BLOCK, K6_PAIRS, K6_QS, K6_SCALES};
use super::super::{load32, prefetch_line_at};
use super::{broadcast4, Dot, GroupSums};

/// One group of eight interleaved Q6_K rows (see the layout in
/// [`interleave`](super::super::super::interleave)) against `N` Q8_K activation
/// rows. Each step's three loads give four vectors of 6-bit values (three
/// masks; three masks, shifts and ors for the fourth), each meeting its
/// four activation bytes broadcast. The values are multiplied unsigned
/// (0..63): the block pays back `32 × Σ_s scale_s × Σ_{16} x` from the
/// activation's sums of 16, by eight `madd` of the rows' scale pairs.
/// Without VNNI two steps' `maddubs` add in i16 (2 × 2 × 63 × 128 =
/// 32,256) before one `madd` by the rows' scales, each spread to both
/// i16s of its lane (a shuffle to the high byte, an arithmetic shift
/// back); with VNNI two steps add in i32 and are multiplied as i32. A
/// block's total stays below 2²⁹ (16 × 16 × 63 × 128 × 128 for the
/// products, 32 × 16 × 128 × 2,048 for the offset).
#[inline(always)]
pub(super) unsafe fn group_q6k<D: Dot, const N: usize>(
    w: &[u8],
    x: &QuantizedActivations,
    first: usize,
    ahead: usize,
    sums: &mut GroupSums,
) {
    let blocks = w.len() / K6_GROUP_BLOCK;
    let mut acc = [_mm256_setzero_ps(); N];
    for b in 0..blocks {
        let wb = &w[b * K6_GROUP_BLOCK..(b + 1) * K6_GROUP_BLOCK];
        let xb = Q6Rows::<N>::new(x, first, b);
        let mut isum = [_mm256_setzero_si256(); N];
        for q in 0..4 {
            let sc = q6k_scales::<D>(wb, q);
            for pair in 0..2 {
                let i0 = 4 * q + 2 * pair;
                let (v0, v1) = (q6k_step(wb, i0, ahead), q6k_step(wb, i0 + 1, ahead));
                q6k_products::<D, N>(&v0, &v1, &sc, &xb, i0, &mut isum);
            }
        }
        q6k_finish::<D, N>(wb, &xb, &isum, &mut acc);
    }
    for j in 0..N {
        _mm256_storeu_ps(sums[j].as_mut_ptr(), acc[j]);
    }
}

/// One block of `N` activation rows: its values, sums of 16 and scale.
struct Q6Rows<'a, const N: usize> {
    q: [&'a [i8]; N],
    bsums: [&'a [i16]; N],
    d: [f32; N],
}

impl<'a, const N: usize> Q6Rows<'a, N> {
    /// Block `b` of rows `first..first + N` of `x`.
    #[inline(always)]
    fn new(x: &'a QuantizedActivations, first: usize, b: usize) -> Self {
        // Plain loops: `array::from_fn` was left a call per block.
        let mut rows = Self {
            q: [&[]; N],
            bsums: [&[]; N],
            d: [0.0; N],
        };
        for j in 0..N {
            rows.q[j] = &x.q_row(first + j)[b * KB..(b + 1) * KB];
            rows.bsums[j] = &x.bsums_row(first + j)[b * (KB / KSUM)..(b + 1) * (KB / KSUM)];
            rows.d[j] = x.d_row(first + j)[b];
        }
        rows
    }
}

/// Step `i`'s four vectors of values (0..=63) of the group block `wb`,
/// asking the cache for two lines of the block ahead (its 27 over its 16
/// steps; see [`prefetch_line`](super::super::prefetch_line)).
#[inline(always)]
pub(super) unsafe fn q6k_step(wb: &[u8], i: usize, ahead: usize) -> [__m256i; 4] {
    for line in (128 * i..128 * i + 128).step_by(64) {
        if line < K6_GROUP_BLOCK {
            prefetch_line_at(wb, ahead, line);
        }
    }
    let six = _mm256_set1_epi8(0x3f);
    let top = _mm256_set1_epi8(-64); // 0xc0
    let at = K6_QS + 96 * i;
    let v0 = load32(&wb[at..at + 32]);
    let v1 = load32(&wb[at + 32..at + 64]);
    let v2 = load32(&wb[at + 64..at + 96]);
    let fourth = _mm256_or_si256(
        _mm256_or_si256(
            _mm256_srli_epi16::<6>(_mm256_and_si256(v0, top)),
            _mm256_srli_epi16::<4>(_mm256_and_si256(v1, top)),
        ),
        _mm256_srli_epi16::<2>(_mm256_and_si256(v2, top)),
    );
    [
        _mm256_and_si256(v0, six),
        _mm256_and_si256(v1, six),
        _mm256_and_si256(v2, six),
        fourth,
    ]
}

/// The rows' scales of the four vectors of steps `4q..4q + 4`
/// (sub-blocks `q`, `4 + q`: pair `q`; `8 + q`, `12 + q`: pair `4 + q`),
/// each in both i16s of its lane (with VNNI, as its i32).
#[inline(always)]
unsafe fn q6k_scales<D: Dot>(wb: &[u8], q: usize) -> [__m256i; 4] {
    // Lane r takes byte 2r of a scale pair's 16 (its first scale) in the
    // high byte of each i16, or with VNNI of its i32; one more for the
    // second scale (a zeroing index stays one, its top bit set).
    let z = -128i8;
    let first_scale = if D::FUSED {
        _mm256_setr_epi8(
            z, z, z, 0, z, z, z, 2, z, z, z, 4, z, z, z, 6, z, z, z, 8, z, z, z, 10, z, z, z, 12,
            z, z, z, 14,
        )
    } else {
        _mm256_setr_epi8(
            z, 0, z, 0, z, 2, z, 2, z, 4, z, 4, z, 6, z, 6, z, 8, z, 8, z, 10, z, 10, z, 12, z, 12,
            z, 14, z, 14,
        )
    };
    let second_scale = _mm256_add_epi8(first_scale, _mm256_set1_epi8(1));
    let mut sc = [_mm256_setzero_si256(); 4];
    for h in 0..2 {
        let at = K6_SCALES + 16 * (4 * h + q);
        let p = _mm256_broadcastsi128_si256(_mm_loadu_si128(wb[at..at + 16].as_ptr().cast()));
        let (a, b) = (
            _mm256_shuffle_epi8(p, first_scale),
            _mm256_shuffle_epi8(p, second_scale),
        );
        sc[2 * h] = if D::FUSED {
            _mm256_srai_epi32::<24>(a)
        } else {
            _mm256_srai_epi16::<8>(a)
        };
        sc[2 * h + 1] = if D::FUSED {
            _mm256_srai_epi32::<24>(b)
        } else {
            _mm256_srai_epi16::<8>(b)
        };
    }
    sc
}

/// Steps `i0` (`v0`) and `i0 + 1` (`v1`) against `N` rows, by their
/// scales `sc`, added to `isum`.
#[inline(always)]
unsafe fn q6k_products<D: Dot, const N: usize>(
    v0: &[__m256i; 4],
    v1: &[__m256i; 4],
    sc: &[__m256i; 4],
    xb: &Q6Rows<'_, N>,
    i0: usize,
    isum: &mut [__m256i; N],
) {
    let zero = _mm256_setzero_si256();
    // Rows inside: each vector and scale is read once for all rows, and
    // neighbouring steps add to different rows' sums.
    for t in 0..4 {
        for (sum, q) in isum.iter_mut().zip(xb.q) {
            // Vector t of step i holds values 64t + 4i + k.
            let x0 = broadcast4(q, 64 * t + 4 * i0);
            let x1 = broadcast4(q, 64 * t + 4 * i0 + 4);
            *sum = if D::FUSED {
                let p = D::dot(D::dot(zero, v0[t], x0), v1[t], x1);
                _mm256_add_epi32(*sum, _mm256_mullo_epi32(p, sc[t]))
            } else {
                let p = _mm256_add_epi16(
                    _mm256_maddubs_epi16(v0[t], x0),
                    _mm256_maddubs_epi16(v1[t], x1),
                );
                D::dot_pairs(*sum, p, sc[t])
            };
        }
    }
}

/// A block's integer sums `isum` less the offset (`32 × Σ_s scale_s ×
/// Σ_{16} x`), scaled by the rows' `d` and the activation's, added to
/// `acc`.
#[inline(always)]
unsafe fn q6k_finish<D: Dot, const N: usize>(
    wb: &[u8],
    xb: &Q6Rows<'_, N>,
    isum: &[__m256i; N],
    acc: &mut [__m256; N],
) {
    // The activation's sums of 16 in the order of the scale pairs: each
    // half's i16s 0, 4, 1, 5, 2, 6, 3, 7.
    let pair_order = _mm256_setr_epi8(
        0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15, 0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12,
        13, 6, 7, 14, 15,
    );
    debug_assert_eq!(K6_PAIRS[1], (1, 5));
    let d = _mm256_cvtph_ps(_mm_loadu_si128(wb[K6_D..K6_D + 16].as_ptr().cast()));
    // The rows' scale pairs as i16, widened once for all `N` rows.
    let mut pairs = [_mm256_setzero_si256(); 8];
    for (p, v) in pairs.iter_mut().enumerate() {
        let at = K6_SCALES + 16 * p;
        *v = _mm256_cvtepi8_epi16(_mm_loadu_si128(wb[at..at + 16].as_ptr().cast()));
    }
    for j in 0..N {
        let s16 = _mm256_shuffle_epi8(load32(xb.bsums[j]), pair_order);
        let halves = [
            _mm256_permute2x128_si256::<0x00>(s16, s16),
            _mm256_permute2x128_si256::<0x11>(s16, s16),
        ];
        let mut offset = _mm256_setzero_si256();
        for (p, &pairs) in pairs.iter().enumerate() {
            let half = halves[p / 4];
            let xs = match p % 4 {
                0 => _mm256_shuffle_epi32::<0x00>(half),
                1 => _mm256_shuffle_epi32::<0x55>(half),
                2 => _mm256_shuffle_epi32::<0xaa>(half),
                _ => _mm256_shuffle_epi32::<0xff>(half),
            };
            offset = D::dot_pairs(offset, pairs, xs);
        }
        let total = _mm256_sub_epi32(isum[j], _mm256_slli_epi32::<5>(offset));
        let scale = _mm256_mul_ps(d, _mm256_set1_ps(xb.d[j]));
        acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(total), scale, acc[j]);
    }
}
