//! AVX-512 kernels that take two interleaved groups at once: sixteen weight
//! rows in the sixteen 32-bit lanes of a 512-bit vector. The layout stays
//! the eight-row one ([`interleave`](super::super::super::interleave)): a
//! chunk's 32 bytes of group `g` fill the low half of a vector and the same
//! chunk of group `g + 1` the high half (one `vinserti64x4` per load,
//! shared by every activation row), so the activation's four bytes are
//! still one broadcast and each `vpdpbusd` serves sixteen rows where the
//! 256-bit kernels' serves eight. CPUs that run 512-bit vectors at full
//! width (AMD Zen 5, Intel Xeon) then do each product's integer work in
//! about half the instructions; the memory read is the same bytes. Each
//! kernel is its eight-row VNNI kernel's steps on wider vectors: the same
//! floats bit for bit.
//!
//! The AVX-512 VNNI set takes them for every interleaved type from
//! [`MIN_ROWS`] activation rows, Q5_K and Q6_K included (in place of the
//! quad kernel on unpacked groups past eight rows). Llama-3.2-1B, 2
//! threads, Zen 5, 512-token prefill against the 256-bit kernels
//! (alternating runs): Q4_0 295 → 416 tok/s; Q4_K_M 263 → 365 with the
//! Q4_K kernel, then 366 → 412 with Q6_K's; Q5_K_M 215 → 375; 16
//! sequences decoding after a shared prompt, Q4_0 232 → 324.
//!
//! Decode (one activation row) keeps the eight-row kernels: reading two
//! groups side by side, the wide ones decoded at 0.85× (Q4_0) and 0.86×
//! (Q4_K_M), with hints ahead of both groups too; probably because the
//! weights come from memory there, and one stream per worker reads faster
//! than two (not checked further).

use std::arch::x86_64::*;

use pagoda_core::QuantKind;

use super::super::super::act::{QuantizedActivations, KB, KSUM, QB};
use super::super::super::interleave::{K6_D, K6_GROUP_BLOCK, K6_PAIRS, K6_QS, K6_SCALES};
use super::super::{
    e8m0_halves, mxfp4_unsigned, prefetch_block_at, prefetch_line_at, MXFP4_OFFSET,
};
use super::iq4::pair_iq4_xs;
use super::k16::pair_k16;
use super::{
    hint_distance, interleaved_len, store_lanes, unroll8, Range, GROUP, K4_DMIN, K4_GROUP_BLOCK,
    K4_MINS, K4_QS, K4_SCALES, K5_GROUP_BLOCK, K5_QH, K5_QS, ROWS_PER_CALL,
};

/// Weight rows one wide kernel call takes: two groups.
pub(super) const PAIR: usize = 2 * GROUP;

/// Activation rows a wide kernel call takes at most: eight for Q8_0,
/// whose kernel keeps only one chunk's weights beside the rows' sums;
/// four for the others (see [`rows_per_call`]).
pub(super) const WIDE_ROWS: usize = 8;

/// Activation rows one call of [`pair`] takes for `kind`. Eight rows a
/// call prefilled Llama-3.2-1B Q8_0 at 1.12× four (three alternating
/// 512-token runs, 2 threads, Zen 5) but Q4_0 at 0.83× (its kernel keeps
/// a block's eight unpacked vectors beside the sums, likely spilling; not
/// checked).
pub(super) fn rows_per_call(kind: QuantKind) -> usize {
    if kind == QuantKind::Q8_0 {
        WIDE_ROWS
    } else {
        ROWS_PER_CALL
    }
}

/// Activation rows from which the wide kernels run: below (decode), the
/// eight-row kernels read one group at a time (see the module docs).
pub(super) const MIN_ROWS: usize = 2;

/// [`interleaved`](super::interleaved) by the wide kernels, two groups
/// (sixteen rows) a call. A tile's odd last group is paired with itself,
/// and only its eight rows are stored.
///
/// # Safety
/// The CPU must have AVX-512 F, BW, VL and VNNI, with AVX2, FMA and F16C.
pub(super) unsafe fn by_pairs(
    kind: QuantKind,
    data: &[u8],
    cols: usize,
    tile: Range<usize>,
    x: &QuantizedActivations,
    first: usize,
    res: &mut [f32],
) {
    if tile.is_empty() {
        return;
    }
    let m = res.len() / tile.len();
    let group_bytes = interleaved_len(kind, GROUP, cols).unwrap_or(0);
    let groups = tile.start / GROUP..tile.end.div_ceil(GROUP);
    let step = rows_per_call(kind);
    for g in groups.clone().step_by(2) {
        let g1 = if g + 1 < groups.end { g + 1 } else { g };
        let w0 = &data[g * group_bytes..(g + 1) * group_bytes];
        let w1 = &data[g1 * group_bytes..(g1 + 1) * group_bytes];
        let rows = g * GROUP..(g1 + 1) * GROUP;
        for j0 in (0..m).step_by(step) {
            let n = (m - j0).min(step);
            let ahead = hint_distance(kind, first, j0, 2 * group_bytes);
            let mut sums = [[0.0f32; PAIR]; WIDE_ROWS];
            // SAFETY: the caller's CPU has the extensions the kernels were
            // compiled with; they slice their inputs with bounds checks.
            unsafe { pair(kind, w0, w1, x, first + j0, n, ahead, &mut sums) };
            store_lanes(res, &tile, rows.clone(), j0, &sums[..n]);
        }
    }
}

/// `sums[j][lane]` for the two groups `w0` (lanes 0..8) and `w1` (lanes
/// 8..16) of `kind` rows (an interleaved type) against `n` (1 to
/// [`rows_per_call`]) activation rows of `x` from `first`, hinting weights
/// `ahead` bytes on.
///
/// # Safety
/// The CPU must have AVX-512 F, BW, VL and VNNI, with AVX2, FMA and F16C.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn pair(
    kind: QuantKind,
    w0: &[u8],
    w1: &[u8],
    x: &QuantizedActivations,
    first: usize,
    n: usize,
    ahead: usize,
    sums: &mut [[f32; PAIR]; WIDE_ROWS],
) {
    macro_rules! rows {
        ($kernel:ident $(, $flag:literal)*) => {
            match n {
                1 => $kernel::<1 $(, $flag)*>(w0, w1, x, first, ahead, sums),
                2 => $kernel::<2 $(, $flag)*>(w0, w1, x, first, ahead, sums),
                3 => $kernel::<3 $(, $flag)*>(w0, w1, x, first, ahead, sums),
                _ => $kernel::<4 $(, $flag)*>(w0, w1, x, first, ahead, sums),
            }
        };
    }
    macro_rules! rows8 {
        ($kernel:ident $(, $flag:literal)*) => {
            match n {
                1 => $kernel::<1 $(, $flag)*>(w0, w1, x, first, ahead, sums),
                2 => $kernel::<2 $(, $flag)*>(w0, w1, x, first, ahead, sums),
                3 => $kernel::<3 $(, $flag)*>(w0, w1, x, first, ahead, sums),
                4 => $kernel::<4 $(, $flag)*>(w0, w1, x, first, ahead, sums),
                5 => $kernel::<5 $(, $flag)*>(w0, w1, x, first, ahead, sums),
                6 => $kernel::<6 $(, $flag)*>(w0, w1, x, first, ahead, sums),
                7 => $kernel::<7 $(, $flag)*>(w0, w1, x, first, ahead, sums),
                _ => $kernel::<8 $(, $flag)*>(w0, w1, x, first, ahead, sums),
            }
        };
    }
    match kind {
        QuantKind::Q4_0 => rows!(pair_q4, false, false, false),
        QuantKind::Q4_1 => rows!(pair_q4, true, false, false),
        QuantKind::Q5_0 => rows!(pair_q4, false, true, false),
        QuantKind::Q5_1 => rows!(pair_q4, true, true, false),
        QuantKind::MXFP4 => rows!(pair_q4, false, false, true),
        QuantKind::Q4_K => rows!(pair_qk, false),
        QuantKind::Q5_K => rows!(pair_qk, true),
        QuantKind::Q6_K => rows!(pair_q6k),
        QuantKind::IQ4_XS => rows!(pair_iq4_xs),
        QuantKind::Q2_K => rows!(pair_k16, false),
        QuantKind::Q3_K => rows!(pair_k16, true),
        _ => rows8!(pair_q8_0),
    }
}

/// Chunk `at..at + 32` of both groups: `w0`'s in the low half, `w1`'s in
/// the high half.
#[inline(always)]
pub(super) unsafe fn both(w0: &[u8], w1: &[u8], at: usize) -> __m512i {
    let (a, b) = (&w0[at..at + 32], &w1[at..at + 32]);
    _mm512_inserti64x4::<1>(
        _mm512_castsi256_si512(_mm256_loadu_si256(a.as_ptr().cast())),
        _mm256_loadu_si256(b.as_ptr().cast()),
    )
}

/// The 16 f16 values at `at..at + 16` of both groups (eight each) as f32.
#[inline(always)]
pub(super) unsafe fn halves(w0: &[u8], w1: &[u8], at: usize) -> __m512 {
    let (a, b) = (&w0[at..at + 16], &w1[at..at + 16]);
    _mm512_cvtph_ps(_mm256_set_m128i(
        _mm_loadu_si128(b.as_ptr().cast()),
        _mm_loadu_si128(a.as_ptr().cast()),
    ))
}

/// The four bytes of `x` from `at` in every 32-bit lane.
#[inline(always)]
pub(super) unsafe fn broadcast4(x: &[i8], at: usize) -> __m512i {
    let b = &x[at..at + 4];
    _mm512_set1_epi32(i32::from_le_bytes([
        b[0] as u8, b[1] as u8, b[2] as u8, b[3] as u8,
    ]))
}

/// [`group_q4`](super::group_q4) on two groups at once: Q4_0 (Q4_1 with
/// `MIN`, Q5_0 and Q5_1 with `FIVE`) rows against `N` Q8_0 (Q8_1)
/// activation rows, the same sums in the same order per lane.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline(never)]
unsafe fn pair_q4<const N: usize, const MIN: bool, const FIVE: bool, const TABLE: bool>(
    w0: &[u8],
    w1: &[u8],
    x: &QuantizedActivations,
    first: usize,
    ahead: usize,
    sums: &mut [[f32; PAIR]; WIDE_ROWS],
) {
    let head = match (TABLE, MIN) {
        (true, _) => GROUP,
        (false, true) => 32,
        (false, false) => 16,
    };
    let qs_at = if FIVE { head + 32 } else { head };
    let block = qs_at + GROUP * 16;
    let offset = match (TABLE, FIVE) {
        (true, _) => MXFP4_OFFSET,
        (false, true) => 16,
        (false, false) => 8,
    };
    let table = _mm512_broadcast_i32x4(_mm256_castsi256_si128(mxfp4_unsigned()));
    let blocks = w0.len().min(w1.len()) / block;
    let mut qs: [&[i8]; N] = [&[]; N];
    let mut ds: [&[f32]; N] = [&[]; N];
    let mut ss: [&[i32]; N] = [&[]; N];
    let mut ms: [&[f32]; N] = [&[]; N];
    for j in 0..N {
        qs[j] = &x.q_row(first + j)[..blocks * QB];
        ds[j] = &x.d_row(first + j)[..blocks];
        if MIN {
            ms[j] = &x.s_row(first + j)[..blocks];
        } else {
            ss[j] = &x.sum_row(first + j)[..blocks];
        }
    }
    let low = _mm512_set1_epi8(0x0f);
    let fifth = _mm512_set1_epi8(0x10);
    let mut acc = [_mm512_setzero_ps(); N];
    for b in 0..blocks {
        let (wb0, wb1) = (
            &w0[b * block..b * block + block],
            &w1[b * block..b * block + block],
        );
        prefetch_block_at(wb0, ahead);
        prefetch_block_at(wb1, ahead);
        let dw = if TABLE {
            let (d0, d1) = (e8m0_halves(&wb0[..GROUP]), e8m0_halves(&wb1[..GROUP]));
            let (d0, d1) = (_mm256_castps_si256(d0), _mm256_castps_si256(d1));
            _mm512_castsi512_ps(_mm512_inserti64x4::<1>(_mm512_castsi256_si512(d0), d1))
        } else {
            halves(wb0, wb1, 0)
        };
        let mw = if MIN {
            halves(wb0, wb1, 16)
        } else {
            _mm512_setzero_ps()
        };
        let bits = if FIVE {
            both(wb0, wb1, head)
        } else {
            _mm512_setzero_si512()
        };
        let mut lo = [_mm512_setzero_si512(); 4];
        let mut hi = [_mm512_setzero_si512(); 4];
        for c in 0..4 {
            let v = both(wb0, wb1, qs_at + 32 * c);
            lo[c] = _mm512_and_si512(v, low);
            hi[c] = _mm512_and_si512(_mm512_srli_epi16::<4>(v), low);
            if FIVE {
                let h = _mm512_srl_epi16(bits, _mm_cvtsi32_si128(2 * c as i32));
                lo[c] = _mm512_or_si512(lo[c], _mm512_and_si512(_mm512_slli_epi16::<4>(h), fifth));
                hi[c] = _mm512_or_si512(hi[c], _mm512_and_si512(_mm512_slli_epi16::<3>(h), fifth));
            }
            if TABLE {
                lo[c] = _mm512_shuffle_epi8(table, lo[c]);
                hi[c] = _mm512_shuffle_epi8(table, hi[c]);
            }
        }
        for j in 0..N {
            let xb = &qs[j][b * QB..b * QB + QB];
            // Two chains, so that each waits on half the steps.
            let (mut sl, mut sh) = (_mm512_setzero_si512(), _mm512_setzero_si512());
            for c in 0..4 {
                sl = _mm512_dpbusd_epi32(sl, lo[c], broadcast4(xb, 4 * c));
                sh = _mm512_dpbusd_epi32(sh, hi[c], broadcast4(xb, 16 + 4 * c));
            }
            let mut isum = _mm512_add_epi32(sl, sh);
            if !MIN {
                isum = _mm512_sub_epi32(isum, _mm512_set1_epi32(offset * ss[j][b]));
            }
            let scale = _mm512_mul_ps(dw, _mm512_set1_ps(ds[j][b]));
            acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), scale, acc[j]);
            if MIN {
                acc[j] = _mm512_fmadd_ps(mw, _mm512_set1_ps(ms[j][b]), acc[j]);
            }
        }
    }
    for j in 0..N {
        _mm512_storeu_ps(sums[j].as_mut_ptr(), acc[j]);
    }
}

/// [`group_q8_0`](super::group_q8_0)'s VNNI form on two groups at once:
/// the weights made unsigned once for all rows (`w + 128`), each block
/// paying back `128 × Σ x`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline(never)]
unsafe fn pair_q8_0<const N: usize>(
    w0: &[u8],
    w1: &[u8],
    x: &QuantizedActivations,
    first: usize,
    ahead: usize,
    sums: &mut [[f32; PAIR]; WIDE_ROWS],
) {
    const BLOCK: usize = GROUP * 34;
    let blocks = w0.len().min(w1.len()) / BLOCK;
    let mut qs: [&[i8]; N] = [&[]; N];
    let mut ds: [&[f32]; N] = [&[]; N];
    let mut ss: [&[i32]; N] = [&[]; N];
    for j in 0..N {
        qs[j] = &x.q_row(first + j)[..blocks * QB];
        ds[j] = &x.d_row(first + j)[..blocks];
        ss[j] = &x.sum_row(first + j)[..blocks];
    }
    let top = _mm512_set1_epi8(-128);
    let mut acc = [_mm512_setzero_ps(); N];
    for b in 0..blocks {
        let (wb0, wb1) = (
            &w0[b * BLOCK..b * BLOCK + BLOCK],
            &w1[b * BLOCK..b * BLOCK + BLOCK],
        );
        prefetch_block_at(wb0, ahead);
        prefetch_block_at(wb1, ahead);
        let dw = halves(wb0, wb1, 0);
        let mut isum = [_mm512_setzero_si512(); N];
        for c in 0..8 {
            let u = _mm512_xor_si512(both(wb0, wb1, 16 + 32 * c), top);
            for j in 0..N {
                let xb = &qs[j][b * QB..b * QB + QB];
                isum[j] = _mm512_dpbusd_epi32(isum[j], u, broadcast4(xb, 4 * c));
            }
        }
        for j in 0..N {
            let isum = _mm512_sub_epi32(isum[j], _mm512_set1_epi32(128 * ss[j][b]));
            let scale = _mm512_mul_ps(dw, _mm512_set1_ps(ds[j][b]));
            acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), scale, acc[j]);
        }
    }
    for j in 0..N {
        _mm512_storeu_ps(sums[j].as_mut_ptr(), acc[j]);
    }
}

/// Rows `first..first + N` of the Q8_K activations `x` over `blocks`
/// blocks: their values, scales and sums of 16.
#[allow(clippy::type_complexity)]
#[inline(always)]
pub(super) fn k_rows<const N: usize>(
    x: &QuantizedActivations,
    first: usize,
    blocks: usize,
) -> ([&[i8]; N], [&[f32]; N], [&[i16]; N]) {
    let mut rows: ([&[i8]; N], [&[f32]; N], [&[i16]; N]) = ([&[]; N], [&[]; N], [&[]; N]);
    for j in 0..N {
        rows.0[j] = &x.q_row(first + j)[..blocks * KB];
        rows.1[j] = &x.d_row(first + j)[..blocks];
        rows.2[j] = &x.bsums_row(first + j)[..blocks * (KB / KSUM)];
    }
    rows
}

/// Eight bytes at `at` of both groups, widened to i32: `w0`'s in lanes
/// 0..8, `w1`'s in lanes 8..16.
#[inline(always)]
pub(super) unsafe fn bytes_as_i32(w0: &[u8], w1: &[u8], at: usize) -> __m512i {
    let (a, b) = (&w0[at..at + 8], &w1[at..at + 8]);
    _mm512_cvtepu8_epi32(_mm_unpacklo_epi64(
        _mm_loadl_epi64(a.as_ptr().cast()),
        _mm_loadl_epi64(b.as_ptr().cast()),
    ))
}

/// [`group_qk`](super::group_qk)'s VNNI form on two groups at once: Q4_K
/// (Q5_K with `FIVE`) rows against `N` Q8_K activation rows, each
/// sub-block's sums in i32 multiplied by the rows' scales as i32, the
/// minimums paid by `vpdpwssd` against the activation's sums of 32.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline(never)]
unsafe fn pair_qk<const N: usize, const FIVE: bool>(
    w0: &[u8],
    w1: &[u8],
    x: &QuantizedActivations,
    first: usize,
    ahead: usize,
    sums: &mut [[f32; PAIR]; WIDE_ROWS],
) {
    let (block, qs_at) = if FIVE {
        (K5_GROUP_BLOCK, K5_QS)
    } else {
        (K4_GROUP_BLOCK, K4_QS)
    };
    let blocks = w0.len().min(w1.len()) / block;
    let (qs, ds, bs) = k_rows::<N>(x, first, blocks);
    let low = _mm512_set1_epi8(0x0f);
    let fifth = _mm512_set1_epi8(0x10);
    let mut acc = [_mm512_setzero_ps(); N];
    let mut accm = [_mm512_setzero_ps(); N];
    for b in 0..blocks {
        let (wb0, wb1) = (
            &w0[b * block..b * block + block],
            &w1[b * block..b * block + block],
        );
        let mut xb: [&[i8]; N] = [&[]; N];
        for j in 0..N {
            xb[j] = &qs[j][b * KB..b * KB + KB];
        }
        let mut isum = [_mm512_setzero_si512(); N];
        for i in 0..4 {
            // The rows' scales of sub-blocks 2i and 2i + 1 as i32.
            let se = bytes_as_i32(wb0, wb1, K4_SCALES + 16 * i);
            let so = bytes_as_i32(wb0, wb1, K4_SCALES + 16 * i + 8);
            let shift = _mm_cvtsi32_si128(2 * i as i32);
            let mut slo = [_mm512_setzero_si512(); N];
            let mut shi = [_mm512_setzero_si512(); N];
            unroll8!(c, {
                let line = 64 * (8 * i + c);
                if line < block {
                    prefetch_line_at(wb0, ahead, line);
                    prefetch_line_at(wb1, ahead, line);
                }
                let v = both(wb0, wb1, qs_at + 32 * (8 * i + c));
                let mut lo = _mm512_and_si512(v, low);
                let mut hi = _mm512_and_si512(_mm512_srli_epi16::<4>(v), low);
                if FIVE {
                    let h = _mm512_srl_epi16(both(wb0, wb1, K5_QH + 32 * c), shift);
                    lo = _mm512_or_si512(lo, _mm512_and_si512(_mm512_slli_epi16::<4>(h), fifth));
                    hi = _mm512_or_si512(hi, _mm512_and_si512(_mm512_slli_epi16::<3>(h), fifth));
                }
                for j in 0..N {
                    slo[j] = _mm512_dpbusd_epi32(slo[j], lo, broadcast4(xb[j], 64 * i + 4 * c));
                    shi[j] =
                        _mm512_dpbusd_epi32(shi[j], hi, broadcast4(xb[j], 64 * i + 32 + 4 * c));
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
        let dmin = halves(wb0, wb1, K4_DMIN);
        for j in 0..N {
            // Sums of each 32 values: pairs of the sums of 16 (|Σ| ≤ 4,064),
            // sub-blocks 2k and 2k + 1 in 32-bit lane k.
            let s16 = _mm256_loadu_si256(
                bs[j][b * (KB / KSUM)..(b + 1) * (KB / KSUM)]
                    .as_ptr()
                    .cast(),
            );
            let s32 = _mm_hadd_epi16(
                _mm256_castsi256_si128(s16),
                _mm256_extracti128_si256::<1>(s16),
            );
            let s32 = _mm512_broadcast_i32x4(s32);
            let mut msum = _mm512_setzero_si512();
            for k in 0..4 {
                let at = K4_MINS + 16 * k;
                let (m0, m1) = (&wb0[at..at + 16], &wb1[at..at + 16]);
                let mins = _mm512_cvtepu8_epi16(_mm256_set_m128i(
                    _mm_loadu_si128(m1.as_ptr().cast()),
                    _mm_loadu_si128(m0.as_ptr().cast()),
                ));
                let xs = match k {
                    0 => _mm512_shuffle_epi32::<_MM_PERM_AAAA>(s32),
                    1 => _mm512_shuffle_epi32::<_MM_PERM_BBBB>(s32),
                    2 => _mm512_shuffle_epi32::<_MM_PERM_CCCC>(s32),
                    _ => _mm512_shuffle_epi32::<_MM_PERM_DDDD>(s32),
                };
                msum = _mm512_dpwssd_epi32(msum, mins, xs);
            }
            let dx = _mm512_set1_ps(ds[j][b]);
            acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[j]), _mm512_mul_ps(d, dx), acc[j]);
            accm[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(msum), _mm512_mul_ps(dmin, dx), accm[j]);
        }
    }
    for j in 0..N {
        _mm512_storeu_ps(sums[j].as_mut_ptr(), _mm512_sub_ps(acc[j], accm[j]));
    }
}

/// The 16 bytes at `at` of `w0` in the two low 128-bit lanes, of `w1` in
/// the two high ones.
#[inline(always)]
unsafe fn lanes_of_16(w0: &[u8], w1: &[u8], at: usize) -> __m512i {
    let (a, b) = (&w0[at..at + 16], &w1[at..at + 16]);
    let both = _mm512_castsi256_si512(_mm256_set_m128i(
        _mm_loadu_si128(b.as_ptr().cast()),
        _mm_loadu_si128(a.as_ptr().cast()),
    ));
    _mm512_shuffle_i64x2::<0b01_01_00_00>(both, both)
}

/// [`group_q6k`](super::q6k::group_q6k)'s VNNI form on two groups at
/// once: Q6_K rows against `N` Q8_K activation rows, the values
/// multiplied unsigned and each block paying back `32 × Σ_s scale_s ×
/// Σ_{16} x`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline(never)]
unsafe fn pair_q6k<const N: usize>(
    w0: &[u8],
    w1: &[u8],
    x: &QuantizedActivations,
    first: usize,
    ahead: usize,
    sums: &mut [[f32; PAIR]; WIDE_ROWS],
) {
    let blocks = w0.len().min(w1.len()) / K6_GROUP_BLOCK;
    let (qs, ds, bs) = k_rows::<N>(x, first, blocks);
    let six = _mm512_set1_epi8(0x3f);
    let top = _mm512_set1_epi8(-64); // 0xc0
                                     // Lane r of each 128-bit half takes byte 2r (first scale of a pair)
                                     // or 2r + 1 (second) of its 16 into its top byte.
    let z = -128i8;
    let first_scale = _mm512_broadcast_i64x4(_mm256_setr_epi8(
        z, z, z, 0, z, z, z, 2, z, z, z, 4, z, z, z, 6, z, z, z, 8, z, z, z, 10, z, z, z, 12, z, z,
        z, 14,
    ));
    let second_scale = _mm512_add_epi8(first_scale, _mm512_set1_epi8(1));
    // The activation's sums of 16 in the order of the scale pairs.
    let pair_order = _mm256_setr_epi8(
        0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15, 0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12,
        13, 6, 7, 14, 15,
    );
    debug_assert_eq!(K6_PAIRS[1], (1, 5));
    let mut acc = [_mm512_setzero_ps(); N];
    for b in 0..blocks {
        let span = b * K6_GROUP_BLOCK..(b + 1) * K6_GROUP_BLOCK;
        let (wb0, wb1) = (&w0[span.clone()], &w1[span]);
        let mut xb: [&[i8]; N] = [&[]; N];
        for j in 0..N {
            xb[j] = &qs[j][b * KB..b * KB + KB];
        }
        let mut isum = [_mm512_setzero_si512(); N];
        for q in 0..4 {
            // The rows' scales of the four vectors of steps 4q..4q + 4.
            let mut sc = [_mm512_setzero_si512(); 4];
            for h in 0..2 {
                let p = lanes_of_16(wb0, wb1, K6_SCALES + 16 * (4 * h + q));
                sc[2 * h] = _mm512_srai_epi32::<24>(_mm512_shuffle_epi8(p, first_scale));
                sc[2 * h + 1] = _mm512_srai_epi32::<24>(_mm512_shuffle_epi8(p, second_scale));
            }
            for pair in 0..2 {
                let i0 = 4 * q + 2 * pair;
                let mut v = [[_mm512_setzero_si512(); 4]; 2];
                for (s, v) in v.iter_mut().enumerate() {
                    let i = i0 + s;
                    for line in (128 * i..128 * i + 128).step_by(64) {
                        if line < K6_GROUP_BLOCK {
                            prefetch_line_at(wb0, ahead, line);
                            prefetch_line_at(wb1, ahead, line);
                        }
                    }
                    let at = K6_QS + 96 * i;
                    let (v0, v1, v2) = (
                        both(wb0, wb1, at),
                        both(wb0, wb1, at + 32),
                        both(wb0, wb1, at + 64),
                    );
                    let fourth = _mm512_or_si512(
                        _mm512_or_si512(
                            _mm512_srli_epi16::<6>(_mm512_and_si512(v0, top)),
                            _mm512_srli_epi16::<4>(_mm512_and_si512(v1, top)),
                        ),
                        _mm512_srli_epi16::<2>(_mm512_and_si512(v2, top)),
                    );
                    *v = [
                        _mm512_and_si512(v0, six),
                        _mm512_and_si512(v1, six),
                        _mm512_and_si512(v2, six),
                        fourth,
                    ];
                }
                for t in 0..4 {
                    for j in 0..N {
                        // Vector t of step i holds values 64t + 4i + k.
                        let x0 = broadcast4(xb[j], 64 * t + 4 * i0);
                        let x1 = broadcast4(xb[j], 64 * t + 4 * i0 + 4);
                        let p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), v[0][t], x0);
                        let p = _mm512_dpbusd_epi32(p, v[1][t], x1);
                        isum[j] = _mm512_add_epi32(isum[j], _mm512_mullo_epi32(p, sc[t]));
                    }
                }
            }
        }
        let d = halves(wb0, wb1, K6_D);
        // The rows' scale pairs as i16, widened once for all `N` rows.
        let mut pairs = [_mm512_setzero_si512(); 8];
        for (p, v) in pairs.iter_mut().enumerate() {
            let at = K6_SCALES + 16 * p;
            let (a, b) = (&wb0[at..at + 16], &wb1[at..at + 16]);
            *v = _mm512_cvtepi8_epi16(_mm256_set_m128i(
                _mm_loadu_si128(b.as_ptr().cast()),
                _mm_loadu_si128(a.as_ptr().cast()),
            ));
        }
        for j in 0..N {
            let sums16 = &bs[j][b * (KB / KSUM)..(b + 1) * (KB / KSUM)];
            let s16 = _mm256_shuffle_epi8(_mm256_loadu_si256(sums16.as_ptr().cast()), pair_order);
            let halves = [
                _mm512_broadcast_i32x4(_mm256_castsi256_si128(s16)),
                _mm512_broadcast_i32x4(_mm256_extracti128_si256::<1>(s16)),
            ];
            let mut offset = _mm512_setzero_si512();
            for (p, &pairs) in pairs.iter().enumerate() {
                let half = halves[p / 4];
                let xs = match p % 4 {
                    0 => _mm512_shuffle_epi32::<_MM_PERM_AAAA>(half),
                    1 => _mm512_shuffle_epi32::<_MM_PERM_BBBB>(half),
                    2 => _mm512_shuffle_epi32::<_MM_PERM_CCCC>(half),
                    _ => _mm512_shuffle_epi32::<_MM_PERM_DDDD>(half),
                };
                offset = _mm512_dpwssd_epi32(offset, pairs, xs);
            }
            let total = _mm512_sub_epi32(isum[j], _mm512_slli_epi32::<5>(offset));
            let scale = _mm512_mul_ps(d, _mm512_set1_ps(ds[j][b]));
            acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(total), scale, acc[j]);
        }
    }
    for j in 0..N {
        _mm512_storeu_ps(sums[j].as_mut_ptr(), acc[j]);
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::random_case;
    use super::super::{avx512vnni, by_groups};
    use super::*;
    use crate::quant::interleave::interleaves;
    use crate::Isa;

    /// The wide kernels give the eight-row AVX-512 VNNI kernels' floats
    /// bit for bit, on tiles that start on any group and end on any row
    /// (pairs split, odd last groups paired with themselves), at 2 to 12
    /// activation rows (Q8_0's eight a call and a rest included).
    #[test]
    fn wide_kernels_match_eight_row_kernels_bit_for_bit() {
        if !Isa::Avx512Vnni.is_supported() {
            println!("skipped: no AVX-512 VNNI on this CPU");
            return;
        }
        let mut rng = fastrand::Rng::with_seed(11);
        let kinds = QuantKind::ALL.into_iter().filter(|&k| interleaves(k));
        for kind in kinds {
            for _ in 0..12 {
                let (rows, n) = (rng.usize(1..70), rng.usize(MIN_ROWS..13));
                let cols = kind.block_elems() * rng.usize(1..5);
                let (packed, x) = random_case(&mut rng, kind, rows, cols, n);
                let start = GROUP * rng.usize(0..rows.div_ceil(GROUP));
                let end = rng.usize(start + 1..=rows);
                let len = (end - start) * n;
                let (mut want, mut got) = (vec![0.0f32; len], vec![0.0f32; len]);
                // SAFETY: the CPU has AVX-512 VNNI, F, BW and VL with
                // AVX2, FMA and F16C (checked above).
                unsafe {
                    by_groups(
                        avx512vnni::group,
                        false,
                        kind,
                        &packed,
                        cols,
                        start..end,
                        &x,
                        0,
                        &mut want,
                    );
                    by_pairs(kind, &packed, cols, start..end, &x, 0, &mut got);
                }
                for (k, (a, b)) in got.iter().zip(&want).enumerate() {
                    assert_eq!(a.to_bits(), b.to_bits(), "{kind}: output {k}: {a} vs {b}");
                }
            }
        }
    }
}
