//! Quantized weights with f32 activations: each block widened to f32 in
//! registers (scales by F16C) and multiplied with FMA, so no rounding is
//! added to the activations.
//!
//! Q4_0, Q4_1 and Q8_0 blocks (most of a Q4 model's bytes) are widened
//! with shifts and masks on 32-bit lanes instead of byte shuffles, which
//! share one port with the conversions on the cores this was measured on
//! (AMD Zen 2, one activation row, old and new alternated in one bench run:
//! Q4_1 in 0.52–0.66× the time, the Q8_0 head in 0.71×); the activations
//! are kept in the matching lane order
//! ([`NIBBLE_ORDER`](super::super::act::NIBBLE_ORDER)), permuted once per
//! step.

use std::arch::x86_64::*;

use pagoda_core::QuantKind;

use super::super::act::{QuantizedActivations, KB, QB};
use super::super::scalar;
use super::{half, hsum, k_block, k_scales, legacy_block, load32, prefetch_ahead, Q4_1, Q8_0};

/// The 32-bit lanes of `v` shifted right by `4k` bits (`k` < 4).
#[inline(always)]
unsafe fn nibble_lanes(v: __m256i, k: usize) -> __m256i {
    let s = match k {
        0 => v,
        1 => _mm256_srli_epi32::<4>(v),
        2 => _mm256_srli_epi32::<8>(v),
        _ => _mm256_srli_epi32::<12>(v),
    };
    _mm256_and_si256(s, _mm256_set1_epi32(0xf))
}

/// Byte `k` (< 4) of each 32-bit lane of `v`, sign-extended.
#[inline(always)]
unsafe fn byte_lanes(v: __m256i, k: usize) -> __m256i {
    match k {
        0 => _mm256_srai_epi32::<24>(_mm256_slli_epi32::<24>(v)),
        1 => _mm256_srai_epi32::<24>(_mm256_slli_epi32::<16>(v)),
        2 => _mm256_srai_epi32::<24>(_mm256_slli_epi32::<8>(v)),
        _ => _mm256_srai_epi32::<24>(v),
    }
}

/// A Q4_0, Q4_1 or Q8_0 block's 32 weights as four vectors of f32
/// (`d × q + c`: Q4_1's minimum `c`, `-8d` for Q4_0, none for Q8_0) in
/// [`NIBBLE_ORDER`](super::super::act::NIBBLE_ORDER) or
/// [`BYTE_ORDER`](super::super::act::BYTE_ORDER), unpacked with shifts and masks
/// only: byte shuffles would compete for one port with the conversions.
#[inline(always)]
unsafe fn shifted_block<const KIND: u8>(b: &[u8]) -> [__m256; 4] {
    let d = half(b, 0);
    if KIND == Q8_0 {
        let v = load32(&b[2..34]);
        let d = _mm256_set1_ps(d);
        return std::array::from_fn(|k| _mm256_mul_ps(_mm256_cvtepi32_ps(byte_lanes(v, k)), d));
    }
    let (at, c) = if KIND == Q4_1 {
        (4, half(b, 2))
    } else {
        (2, -8.0 * d)
    };
    // The 16 bytes in both halves; the upper half's words shifted down 16
    // bits, so lane l ≥ 4 holds word l − 4's upper four nibbles.
    let v = _mm256_broadcastsi128_si256(_mm_loadu_si128(b[at..at + 16].as_ptr().cast()));
    let v = _mm256_blend_epi32::<0xf0>(v, _mm256_srli_epi32::<16>(v));
    let (d, c) = (_mm256_set1_ps(d), _mm256_set1_ps(c));
    std::array::from_fn(|k| _mm256_fmadd_ps(_mm256_cvtepi32_ps(nibble_lanes(v, k)), d, c))
}

/// Q4_0, Q4_1 and Q8_0 weights with f32 activations kept in the matching
/// order: as [`widened`], each block widened once per group of up to eight
/// activation rows (one sum each, the eight sums and four weight vectors
/// fitting the registers).
#[inline(always)]
pub(super) unsafe fn shifted<const KIND: u8>(
    w: &[u8],
    x: &QuantizedActivations,
    first: usize,
    res: &mut [f32],
) {
    for (g, out) in res.chunks_mut(8).enumerate() {
        let first = first + 8 * g;
        match out.len() {
            1 => shifted_rows::<KIND, 1>(w, x, first, out),
            2 => shifted_rows::<KIND, 2>(w, x, first, out),
            3 => shifted_rows::<KIND, 3>(w, x, first, out),
            4 => shifted_rows::<KIND, 4>(w, x, first, out),
            5 => shifted_rows::<KIND, 5>(w, x, first, out),
            6 => shifted_rows::<KIND, 6>(w, x, first, out),
            7 => shifted_rows::<KIND, 7>(w, x, first, out),
            _ => shifted_rows::<KIND, 8>(w, x, first, out),
        }
    }
}

/// [`shifted`] for exactly `N` activation rows (`res.len() == N`).
#[inline(always)]
unsafe fn shifted_rows<const KIND: u8, const N: usize>(
    w: &[u8],
    x: &QuantizedActivations,
    first: usize,
    res: &mut [f32],
) {
    let cols = x.cols();
    let bytes = match KIND {
        Q8_0 => 34,
        Q4_1 => 20,
        _ => 18,
    };
    let xs: [&[f32]; N] = std::array::from_fn(|j| &x.ordered_row(first + j, KIND == Q8_0)[..cols]);
    let mut acc = [[_mm256_setzero_ps(); 4]; N];
    for (b, wb) in w.chunks_exact(bytes).enumerate() {
        prefetch_ahead(wb);
        let wv = shifted_block::<KIND>(wb);
        for j in 0..N {
            let xr = &xs[j][b * QB..b * QB + QB];
            fma4(&mut acc[j], &wv, xr, lanes::<N>());
        }
    }
    for (r, acc) in res.iter_mut().zip(acc) {
        *r = hsum4(acc);
    }
}

/// A legacy block's 32 weights as four vectors of f32 (`d × q + m`).
#[inline(always)]
unsafe fn legacy_floats(kind: QuantKind, b: &[u8]) -> [__m256; 4] {
    let (q, d, m) = legacy_block(kind, b);
    let (d, m) = (_mm256_set1_ps(d), _mm256_set1_ps(m));
    let (lo, hi) = (_mm256_castsi256_si128(q), _mm256_extracti128_si256::<1>(q));
    [
        widen8(lo, d, m),
        widen8(_mm_unpackhi_epi64(lo, lo), d, m),
        widen8(hi, d, m),
        widen8(_mm_unpackhi_epi64(hi, hi), d, m),
    ]
}

/// The low 8 signed bytes of `v` as f32, times `d` plus `m`. (A function,
/// not a closure: closures do not inherit `target_feature`.)
#[inline(always)]
unsafe fn widen8(v: __m128i, d: __m256, m: __m256) -> __m256 {
    _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)), d, m)
}

/// Legacy weights with f32 activations: activation rows in groups of up to
/// four, so each group's sums stay in registers; each block is widened once
/// per group (from cache after the first).
#[inline(always)]
pub(super) unsafe fn widened(
    kind: QuantKind,
    w: &[u8],
    x: &QuantizedActivations,
    first: usize,
    res: &mut [f32],
) {
    for (g, out) in res.chunks_mut(4).enumerate() {
        let first = first + 4 * g;
        match out.len() {
            1 => widened_rows::<1>(kind, w, x, first, out),
            2 => widened_rows::<2>(kind, w, x, first, out),
            3 => widened_rows::<3>(kind, w, x, first, out),
            _ => widened_rows::<4>(kind, w, x, first, out),
        }
    }
}

/// Independent sums per activation row for `N` rows: four when few rows
/// give the core too few FMA chains to hide their latency, two up to four
/// rows, one beyond (the others stay zero), so sums and weights fit the 16
/// registers.
#[inline(always)]
const fn lanes<const N: usize>() -> usize {
    if N <= 2 {
        4
    } else if N <= 4 {
        2
    } else {
        1
    }
}

/// `acc[k % lanes] += w[k] × x[8k..8k + 8]` for the four vectors of a block.
#[inline(always)]
unsafe fn fma4(acc: &mut [__m256; 4], w: &[__m256; 4], x: &[f32], lanes: usize) {
    for k in 0..4 {
        let v = _mm256_loadu_ps(x[8 * k..8 * k + 8].as_ptr());
        acc[k % lanes] = _mm256_fmadd_ps(w[k], v, acc[k % lanes]);
    }
}

/// [`widened`] for exactly `N` activation rows (`res.len() == N`).
#[inline(always)]
unsafe fn widened_rows<const N: usize>(
    kind: QuantKind,
    w: &[u8],
    x: &QuantizedActivations,
    first: usize,
    res: &mut [f32],
) {
    let cols = x.cols();
    let xs: [&[f32]; N] = std::array::from_fn(|j| &x.f_row(first + j)[..cols]);
    let mut acc = [[_mm256_setzero_ps(); 4]; N];
    for (b, wb) in w.chunks_exact(kind.block_bytes()).enumerate() {
        prefetch_ahead(wb);
        let wv = legacy_floats(kind, wb);
        for j in 0..N {
            let xr = &xs[j][b * QB..b * QB + QB];
            fma4(&mut acc[j], &wv, xr, lanes::<N>());
        }
    }
    for (r, acc) in res.iter_mut().zip(acc) {
        *r = hsum4(acc);
    }
}

/// K weights with f32 activations: as [`widened`], in groups of up to four
/// activation rows.
#[inline(always)]
pub(super) unsafe fn widened_k(
    kind: QuantKind,
    w: &[u8],
    x: &QuantizedActivations,
    first: usize,
    res: &mut [f32],
) {
    for (g, out) in res.chunks_mut(4).enumerate() {
        let first = first + 4 * g;
        match out.len() {
            1 => widened_k_rows::<1>(kind, w, x, first, out),
            2 => widened_k_rows::<2>(kind, w, x, first, out),
            3 => widened_k_rows::<3>(kind, w, x, first, out),
            _ => widened_k_rows::<4>(kind, w, x, first, out),
        }
    }
}

/// Eight small unsigned bytes of `v` as f32, times `d` minus `c`.
#[inline(always)]
unsafe fn widen8_k(v: __m128i, d: __m256, c: __m256) -> __m256 {
    _mm256_fmsub_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v)), d, c)
}

/// [`widened_k`] for exactly `N` activation rows: each super-block unpacked
/// in registers as for the integer path, then each 32 values widened to f32
/// (`d × sc × q − dc × c`, per 16) and multiplied with every row.
#[inline(always)]
unsafe fn widened_k_rows<const N: usize>(
    kind: QuantKind,
    w: &[u8],
    x: &QuantizedActivations,
    first: usize,
    res: &mut [f32],
) {
    let cols = x.cols();
    let xs: [&[f32]; N] = std::array::from_fn(|j| &x.f_row(first + j)[..cols]);
    let mut acc = [[_mm256_setzero_ps(); 4]; N];
    let mut q = [_mm256_setzero_si256(); 8];
    let mut scales = [_mm256_setzero_si256(); 8];
    for (b, wb) in w.chunks_exact(kind.block_bytes()).enumerate() {
        prefetch_ahead(wb);
        let (sc, c, d, dc) = k_scales(kind, wb);
        k_block(kind, wb, &mut q, &mut scales, &sc);
        for (k, &qk) in q.iter().enumerate() {
            let (lo, hi) = (
                _mm256_castsi256_si128(qk),
                _mm256_extracti128_si256::<1>(qk),
            );
            let (da, ca) = (
                _mm256_set1_ps(d * sc[2 * k] as f32),
                _mm256_set1_ps(dc * c[2 * k] as f32),
            );
            let (db, cb) = (
                _mm256_set1_ps(d * sc[2 * k + 1] as f32),
                _mm256_set1_ps(dc * c[2 * k + 1] as f32),
            );
            let wv = [
                widen8_k(lo, da, ca),
                widen8_k(_mm_unpackhi_epi64(lo, lo), da, ca),
                widen8_k(hi, db, cb),
                widen8_k(_mm_unpackhi_epi64(hi, hi), db, cb),
            ];
            let at = b * KB + QB * k;
            for j in 0..N {
                let xr = &xs[j][at..at + QB];
                fma4(&mut acc[j], &wv, xr, lanes::<N>());
            }
        }
    }
    for (r, acc) in res.iter_mut().zip(acc) {
        *r = hsum4(acc);
    }
}

/// Eight weights of a float row from element `e` (which has 8 left).
#[inline(always)]
unsafe fn load8(kind: QuantKind, w: &[u8], e: usize) -> __m256 {
    match kind {
        QuantKind::F32 => _mm256_loadu_ps(w[4 * e..4 * e + 32].as_ptr().cast()),
        QuantKind::F16 => _mm256_cvtph_ps(_mm_loadu_si128(w[2 * e..2 * e + 16].as_ptr().cast())),
        _ => {
            let v = _mm_loadu_si128(w[2 * e..2 * e + 16].as_ptr().cast());
            _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(v)))
        }
    }
}

#[inline(always)]
pub(super) unsafe fn floats(
    kind: QuantKind,
    w: &[u8],
    x: &QuantizedActivations,
    first: usize,
    res: &mut [f32],
) {
    let m = res.len();
    let cols = x.cols();
    let mut acc = [_mm256_setzero_ps(); 16];
    let full = cols / 8 * 8;
    for e in (0..full).step_by(8) {
        let wv = load8(kind, w, e);
        for (j, a) in acc.iter_mut().take(m).enumerate() {
            let xv = _mm256_loadu_ps(x.f_row(first + j)[e..e + 8].as_ptr());
            *a = _mm256_fmadd_ps(wv, xv, *a);
        }
    }
    for j in 0..m {
        let xr = x.f_row(first + j);
        let tail: f32 = (full..cols)
            .map(|e| scalar::float_at(kind, w, e) * xr[e])
            .sum();
        res[j] = hsum(acc[j]) + tail;
    }
}

/// The sum of a row's four partial sums.
#[inline(always)]
unsafe fn hsum4([a, b, c, d]: [__m256; 4]) -> f32 {
    hsum(_mm256_add_ps(_mm256_add_ps(a, b), _mm256_add_ps(c, d)))
}
