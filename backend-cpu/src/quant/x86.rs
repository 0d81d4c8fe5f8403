//! AVX2 + FMA (+ F16C for F16 weights). Each weight block is unpacked in
//! registers to 32-byte vectors of small integers, then multiplied with
//! every activation row by `_mm256_maddubs_epi16` (unsigned × signed bytes
//! to pairwise i16 sums) and `_mm256_madd_epi16` (to i32, times a scale):
//! exact integers, one f32 FMA per block and row. Signed weights use the
//! sign trick (|w| × (x · sign w)), since `maddubs` wants its first operand
//! unsigned. No i16 sum can saturate: |w| ≤ 128 and |x| ≤ 127 give pairs of
//! at most 32,512.
//!
//! With f32 activations, Q4_0, Q4_1 and Q8_0 blocks (most of a Q4 model's
//! bytes) are widened with shifts and masks on 32-bit lanes instead of byte
//! shuffles, which share one port with the conversions on the cores this
//! was measured on (AMD Zen 2, one activation row, old and new alternated
//! in one bench run: Q4_1 in 0.52–0.66× the time, the Q8_0 head in 0.71×);
//! the activations are kept in the matching lane order
//! ([`NIBBLE_ORDER`](super::act::NIBBLE_ORDER)), permuted once per step.

use std::arch::x86_64::*;

use pagoda_core::QuantKind;

use super::act::{ActFormat, QuantizedActivations, KB, KSUM, LANES, QB};
use super::{scalar, unpack};

/// The sum of a vector's eight lanes.
#[inline(always)]
unsafe fn hsum(v: __m256) -> f32 {
    let quad = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let pair = _mm_add_ps(quad, _mm_movehl_ps(quad, quad));
    let one = _mm_add_ss(pair, _mm_shuffle_ps::<0b01>(pair, pair));
    _mm_cvtss_f32(one)
}

/// 32 bytes from `s` (which must hold at least 32).
#[inline(always)]
unsafe fn load32<T>(s: &[T]) -> __m256i {
    debug_assert!(std::mem::size_of_val(s) >= 32);
    _mm256_loadu_si256(s.as_ptr().cast())
}

/// 16 nibble bytes as 32 values: low nibbles first, then high nibbles.
#[inline(always)]
unsafe fn nibbles(s: &[u8]) -> __m256i {
    let v = _mm_loadu_si128(s[..16].as_ptr().cast());
    let low = _mm_set1_epi8(0x0f);
    let lo = _mm_and_si128(v, low);
    let hi = _mm_and_si128(_mm_srli_epi16::<4>(v), low);
    _mm256_set_m128i(hi, lo)
}

/// 0x10 in byte `j` where bit `j` of `qh` is set (a Q5 block's fifth bits).
#[inline(always)]
unsafe fn fifth_bits(qh: u32) -> __m256i {
    let v = _mm256_set1_epi32(qh as i32);
    // Byte j takes byte j / 8 of `qh` (lanes shuffle separately; both hold
    // all four bytes), then tests its bit j % 8.
    let spread = _mm256_setr_epi8(
        0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3,
        3, 3,
    );
    let bytes = _mm256_shuffle_epi8(v, spread);
    let others = _mm256_set1_epi64x(0x7fbf_dfef_f7fb_fdfe_u64 as i64);
    let set = _mm256_cmpeq_epi8(_mm256_or_si256(bytes, others), _mm256_set1_epi8(-1));
    _mm256_and_si256(set, _mm256_set1_epi8(0x10))
}

/// The f16 at `b[at..at + 2]`, by F16C (the portable conversion branches
/// on the exponent, which costs more than the rest of a block's unpacking).
#[inline(always)]
unsafe fn half(b: &[u8], at: usize) -> f32 {
    half_bits(u16::from_le_bytes([b[at], b[at + 1]]))
}

/// [`unpack::k_scales`] with the two f16 scales converted by F16C.
#[inline(always)]
unsafe fn k_scales(kind: QuantKind, b: &[u8]) -> ([i32; 16], [i32; 16], f32, f32) {
    let (sc, c, d, dc) = unpack::k_scale_bits(kind, b);
    (sc, c, half_bits(d), half_bits(dc))
}

/// The f16 `h` as f32, by F16C.
#[inline(always)]
unsafe fn half_bits(h: u16) -> f32 {
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(h))))
}

/// A legacy block's 32 values (offset removed for the symmetric types),
/// its scale and its minimum.
#[inline(always)]
unsafe fn legacy_block(kind: QuantKind, b: &[u8]) -> (__m256i, f32, f32) {
    let d = half(b, 0);
    match kind {
        QuantKind::Q8_0 => (load32(&b[2..34]), d, 0.0),
        QuantKind::Q4_0 => (
            _mm256_sub_epi8(nibbles(&b[2..18]), _mm256_set1_epi8(8)),
            d,
            0.0,
        ),
        QuantKind::Q4_1 => (nibbles(&b[4..20]), d, half(b, 2)),
        QuantKind::Q5_0 => {
            let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
            let q = _mm256_or_si256(nibbles(&b[6..22]), fifth_bits(qh));
            (_mm256_sub_epi8(q, _mm256_set1_epi8(16)), d, 0.0)
        }
        _ => {
            let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
            let q = _mm256_or_si256(nibbles(&b[8..24]), fifth_bits(qh));
            (q, d, half(b, 2))
        }
    }
}

/// `res[k × m + j] = w_k · x_{first + j}` for the weight rows `w_k` of
/// `row_bytes` bytes each that `w` holds back to back (`m` = `res.len()`
/// over the row count). Taking a tile of rows per call keeps the set-up
/// out of the row loop: a SmolLM2 row is only 18 blocks.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn dots(
    kind: QuantKind,
    w: &[u8],
    row_bytes: usize,
    x: &QuantizedActivations,
    first: usize,
    res: &mut [f32],
) {
    let rows = w.len() / row_bytes;
    match kind {
        QuantKind::Q4_0 if x.format() == ActFormat::Q8_0 => {
            packed::<Q4_0>(w, row_bytes, x, first, res)
        }
        QuantKind::Q4_1 if x.format() == ActFormat::Q8_1 => {
            packed::<Q4_1>(w, row_bytes, x, first, res)
        }
        QuantKind::Q8_0 if x.format() == ActFormat::Q8_0 => {
            packed::<Q8_0>(w, row_bytes, x, first, res)
        }
        _ => {
            let m = res.len() / rows;
            for (wr, out) in w.chunks_exact(row_bytes).zip(res.chunks_exact_mut(m)) {
                row_dots(kind, wr, x, first, out);
            }
        }
    }
}

/// `res[j] = w · x_{first + j}`; `w` one weight row of `kind`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline(never)]
unsafe fn row_dots(
    kind: QuantKind,
    w: &[u8],
    x: &QuantizedActivations,
    first: usize,
    res: &mut [f32],
) {
    match kind {
        QuantKind::F32 | QuantKind::F16 | QuantKind::BF16 => floats(kind, w, x, first, res),
        QuantKind::Q4_K | QuantKind::Q5_K | QuantKind::Q6_K if x.format() == ActFormat::F32 => {
            widened_k(kind, w, x, first, res)
        }
        QuantKind::Q4_0 if x.format() == ActFormat::F32 => shifted::<Q4_0>(w, x, first, res),
        QuantKind::Q4_1 if x.format() == ActFormat::F32 => shifted::<Q4_1>(w, x, first, res),
        QuantKind::Q8_0 if x.format() == ActFormat::F32 => shifted::<Q8_0>(w, x, first, res),
        _ if x.format() == ActFormat::F32 => widened(kind, w, x, first, res),
        QuantKind::Q4_K | QuantKind::Q5_K | QuantKind::Q6_K => kquants(kind, w, x, first, res),
        _ => legacy(kind, w, x, first, res),
    }
}

/// Bytes ahead of the block in hand that [`shifted_rows`] asks the cache
/// to fetch. A worker streams its weight rows back to back, and the
/// hardware prefetcher alone left decode short of the bandwidth: SmolLM2
/// Q4_1 at batch 1 decoded 84–85 tok/s without the hint, 87 at 512 bytes,
/// 88 at 2 KiB and 89–90 at 4 and 8 KiB (2 cores, Zen 2).
const PREFETCH_AHEAD: usize = 4096;

/// [`shifted`]'s weight types, as const parameters.
const Q4_0: u8 = 0;
const Q4_1: u8 = 1;
const Q8_0: u8 = 2;

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
/// [`NIBBLE_ORDER`](super::act::NIBBLE_ORDER) or
/// [`BYTE_ORDER`](super::act::BYTE_ORDER), unpacked with shifts and masks
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
unsafe fn shifted<const KIND: u8>(
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
        // A hint only: it never faults, and the address is never read.
        _mm_prefetch::<_MM_HINT_T0>(wb.as_ptr().wrapping_add(PREFETCH_AHEAD).cast());
        let wv = shifted_block::<KIND>(wb);
        for j in 0..N {
            let xr = &xs[j][b * QB..b * QB + QB];
            fma4(&mut acc[j], &wv, xr, lanes::<N>());
        }
    }
    for j in 0..N {
        let [a, b, c, d] = acc[j];
        res[j] = hsum(_mm256_add_ps(_mm256_add_ps(a, b), _mm256_add_ps(c, d)));
    }
}

/// Q4_0, Q4_1 and Q8_0 weights with 8-bit activations, in groups of up to
/// four activation rows: each block is unpacked once per group to 32 bytes
/// in element order, then each (weight row, activation row) pair costs one
/// `maddubs`, one `madd`, one conversion and one FMA. One or two
/// activation rows take four or two weight rows together, so enough
/// independent sums hide the FMA latency and each activation block loaded
/// serves several weight rows. Groups of four beat groups of eight, whose
/// sums no longer fit the registers (Q4_1 at 8 and 16 rows: 2.15 and 1.08
/// GiB/s against 1.95 and 1.00, one thread, Zen 2).
#[inline(always)]
unsafe fn packed<const KIND: u8>(
    w: &[u8],
    row_bytes: usize,
    x: &QuantizedActivations,
    first: usize,
    res: &mut [f32],
) {
    let rows = w.len() / row_bytes;
    let m = res.len() / rows;
    for g in (0..m).step_by(4) {
        match m - g {
            1 => packed_rows::<KIND, 1, 4>(w, row_bytes, x, first + g, res, m, g),
            2 => packed_rows::<KIND, 2, 2>(w, row_bytes, x, first + g, res, m, g),
            3 => packed_lanes::<KIND, 3>(w, row_bytes, x, first + g, res, m, g),
            _ => packed_lanes::<KIND, 4>(w, row_bytes, x, first + g, res, m, g),
        }
    }
}

/// [`packed`] for `N` activation rows from `first`: every weight row of
/// `w`, `R` at a time (the last few one at a time), each result written to
/// `res[k × m + g + j]`.
#[inline(always)]
unsafe fn packed_rows<const KIND: u8, const N: usize, const R: usize>(
    w: &[u8],
    row_bytes: usize,
    x: &QuantizedActivations,
    first: usize,
    res: &mut [f32],
    m: usize,
    g: usize,
) {
    let blocks = x.cols() / QB;
    let qs: [&[i8]; N] = std::array::from_fn(|j| &x.q_row(first + j)[..blocks * QB]);
    let ds: [&[f32]; N] = std::array::from_fn(|j| &x.d_row(first + j)[..blocks]);
    let ss: [&[f32]; N] = std::array::from_fn(|j| {
        if KIND == Q4_1 {
            &x.s_row(first + j)[..blocks]
        } else {
            &[]
        }
    });
    let x = PackedActs { qs, ds, ss };
    let mut tiles = w.chunks_exact(R * row_bytes);
    let mut k = 0;
    for tile in tiles.by_ref() {
        let sums = packed_tile::<KIND, N, R>(tile, row_bytes, &x);
        for (r, row) in sums.iter().enumerate() {
            res[(k + r) * m + g..(k + r) * m + g + N].copy_from_slice(row);
        }
        k += R;
    }
    for wr in tiles.remainder().chunks_exact(row_bytes) {
        let [row] = packed_tile::<KIND, N, 1>(wr, row_bytes, &x);
        res[k * m + g..k * m + g + N].copy_from_slice(&row);
        k += 1;
    }
}

/// [`packed`] for `N` (3 or 4) activation rows from `first` (a multiple
/// of 4), one weight row at a time: the block scales of the rows'
/// [`LANES`]-row group come in one vector
/// ([`QuantizedActivations::lane_scales`]), so each block costs
/// one multiply for all the rows' scales (and one FMA for all Q4_1
/// minimum terms), and each (weight row, activation row) pair only the
/// integer product, its conversion, a lane broadcast and one FMA.
#[inline(always)]
unsafe fn packed_lanes<const KIND: u8, const N: usize>(
    w: &[u8],
    row_bytes: usize,
    x: &QuantizedActivations,
    first: usize,
    res: &mut [f32],
    m: usize,
    g: usize,
) {
    let blocks = x.cols() / QB;
    let bytes = match KIND {
        Q8_0 => 34,
        Q4_1 => 20,
        _ => 18,
    };
    let qs: [&[i8]; N] = std::array::from_fn(|j| &x.q_row(first + j)[..blocks * QB]);
    let table = &x.lane_scales(first / LANES)[..blocks * 2 * LANES];
    // A group of four may start half way along a line.
    let lane0 = first % LANES;
    let ones = _mm256_set1_epi16(1);
    for (k, wr) in w.chunks_exact(row_bytes).enumerate() {
        let mut acc = [_mm256_setzero_ps(); N];
        let mut mins = _mm256_setzero_ps();
        for (b, wb) in wr.chunks_exact(bytes).enumerate() {
            // A hint only: it never faults, and the address is never read.
            _mm_prefetch::<_MM_HINT_T0>(wb.as_ptr().wrapping_add(PREFETCH_AHEAD).cast());
            let dw = half(wb, 0);
            let q = match KIND {
                Q8_0 => load32(&wb[2..34]),
                Q4_1 => nibbles(&wb[4..20]),
                _ => _mm256_sub_epi8(nibbles(&wb[2..18]), _mm256_set1_epi8(8)),
            };
            let aw = if KIND == Q4_1 {
                q
            } else {
                _mm256_sign_epi8(q, q)
            };
            let line = &table[b * 2 * LANES..(b + 1) * 2 * LANES];
            // Stored and broadcast back one lane at a time: a broadcast
            // from memory is a load, and leaves the vector ports to the
            // products.
            let mut scales = [0.0f32; LANES];
            let v = _mm256_mul_ps(_mm256_set1_ps(dw), _mm256_loadu_ps(line.as_ptr()));
            _mm256_storeu_ps(scales.as_mut_ptr(), v);
            if KIND == Q4_1 {
                let s = _mm256_loadu_ps(line[LANES..].as_ptr());
                mins = _mm256_fmadd_ps(_mm256_set1_ps(half(wb, 2)), s, mins);
            }
            for j in 0..N {
                let vx = load32(&qs[j][b * QB..b * QB + QB]);
                let vx = if KIND == Q4_1 {
                    vx
                } else {
                    _mm256_sign_epi8(vx, q)
                };
                let p = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, vx), ones);
                let scale = _mm256_broadcast_ss(&scales[lane0 + j]);
                acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), scale, acc[j]);
            }
        }
        let mut lane_mins = [0.0f32; LANES];
        _mm256_storeu_ps(lane_mins.as_mut_ptr(), mins);
        for j in 0..N {
            res[k * m + g + j] = hsum(acc[j]) + lane_mins[lane0 + j];
        }
    }
}

/// `N` rows of 8-bit activations, sliced once per group.
struct PackedActs<'a, const N: usize> {
    qs: [&'a [i8]; N],
    ds: [&'a [f32]; N],
    /// Q4_1 only: each block's `d × Σ q`.
    ss: [&'a [f32]; N],
}

/// The products of `R` weight rows (`w`, `row_bytes` each) with `N`
/// activation rows.
#[inline(always)]
unsafe fn packed_tile<const KIND: u8, const N: usize, const R: usize>(
    w: &[u8],
    row_bytes: usize,
    x: &PackedActs<'_, N>,
) -> [[f32; N]; R] {
    let bytes = match KIND {
        Q8_0 => 34,
        Q4_1 => 20,
        _ => 18,
    };
    let ones = _mm256_set1_epi16(1);
    let mut acc = [[_mm256_setzero_ps(); N]; R];
    let mut mins = [[0.0f32; N]; R];
    let ws: [&[u8]; R] = std::array::from_fn(|r| &w[r * row_bytes..(r + 1) * row_bytes]);
    for b in 0..row_bytes / bytes {
        for r in 0..R {
            let wb = &ws[r][b * bytes..b * bytes + bytes];
            // A hint only: it never faults, and the address is never read.
            _mm_prefetch::<_MM_HINT_T0>(wb.as_ptr().wrapping_add(PREFETCH_AHEAD).cast());
            let dw = half(wb, 0);
            let q = match KIND {
                Q8_0 => load32(&wb[2..34]),
                Q4_1 => nibbles(&wb[4..20]),
                _ => _mm256_sub_epi8(nibbles(&wb[2..18]), _mm256_set1_epi8(8)),
            };
            let mw = if KIND == Q4_1 { half(wb, 2) } else { 0.0 };
            // `maddubs` wants unsigned weights: signed ones go in as |w|
            // with the activation taking w's sign.
            let aw = if KIND == Q4_1 {
                q
            } else {
                _mm256_sign_epi8(q, q)
            };
            for j in 0..N {
                let vx = load32(&x.qs[j][b * QB..b * QB + QB]);
                let vx = if KIND == Q4_1 {
                    vx
                } else {
                    _mm256_sign_epi8(vx, q)
                };
                let p = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, vx), ones);
                let scale = _mm256_set1_ps(dw * x.ds[j][b]);
                acc[r][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), scale, acc[r][j]);
                if KIND == Q4_1 {
                    // Fused, as `packed_lanes` adds it, so a row's result
                    // does not depend on how many rows share its step.
                    mins[r][j] = mw.mul_add(x.ss[j][b], mins[r][j]);
                }
            }
        }
    }
    std::array::from_fn(|r| std::array::from_fn(|j| hsum(acc[r][j]) + mins[r][j]))
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
unsafe fn widened(
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
        let wv = legacy_floats(kind, wb);
        for j in 0..N {
            let xr = &xs[j][b * QB..b * QB + QB];
            fma4(&mut acc[j], &wv, xr, lanes::<N>());
        }
    }
    for j in 0..N {
        let [a, b, c, d] = acc[j];
        res[j] = hsum(_mm256_add_ps(_mm256_add_ps(a, b), _mm256_add_ps(c, d)));
    }
}

/// K weights with f32 activations: as [`widened`], in groups of up to four
/// activation rows.
#[inline(always)]
unsafe fn widened_k(
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
    for j in 0..N {
        let [a, b, c, d] = acc[j];
        res[j] = hsum(_mm256_add_ps(_mm256_add_ps(a, b), _mm256_add_ps(c, d)));
    }
}

#[inline(always)]
unsafe fn legacy(
    kind: QuantKind,
    w: &[u8],
    x: &QuantizedActivations,
    first: usize,
    res: &mut [f32],
) {
    let m = res.len();
    let with_min = unpack::has_min(kind);
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm256_setzero_ps(); 16];
    let mut mins = [0.0f32; 16];
    for (b, wb) in w.chunks_exact(kind.block_bytes()).enumerate() {
        let (qw, dw, mw) = legacy_block(kind, wb);
        let aw = if with_min {
            qw
        } else {
            _mm256_sign_epi8(qw, qw)
        };
        for j in 0..m {
            let i = first + j;
            let vx = load32(&x.q_row(i)[b * QB..(b + 1) * QB]);
            let vx = if with_min {
                vx
            } else {
                _mm256_sign_epi8(vx, qw)
            };
            let p = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, vx), ones);
            let scale = _mm256_set1_ps(dw * x.d_row(i)[b]);
            acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), scale, acc[j]);
            if with_min {
                mins[j] += mw * x.s_row(i)[b];
            }
        }
    }
    for j in 0..m {
        res[j] = hsum(acc[j]) + mins[j];
    }
}

/// Bits 0..2 of each byte, moved to bits 4..6 (Q6_K's high bits).
#[inline(always)]
unsafe fn two_bits(v: __m256i) -> __m256i {
    _mm256_slli_epi16::<4>(_mm256_and_si256(v, _mm256_set1_epi8(3)))
}

/// Bit `s` of each byte of `qh`, moved to bit 4 (Q5_K's fifth bits).
#[inline(always)]
unsafe fn fifth_of(qh: __m256i, s: i32) -> __m256i {
    let v = _mm256_srl_epi16(qh, _mm_cvtsi32_si128(s));
    _mm256_slli_epi16::<4>(_mm256_and_si256(v, _mm256_set1_epi8(1)))
}

/// A K block's 256 values as 8 vectors in element order, and for each
/// vector the i16 scales of its two 16-element groups.
#[inline(always)]
unsafe fn k_block(
    kind: QuantKind,
    b: &[u8],
    q: &mut [__m256i; 8],
    s: &mut [__m256i; 8],
    sc: &[i32; 16],
) {
    let low = _mm256_set1_epi8(0x0f);
    match kind {
        QuantKind::Q6_K => {
            for n in 0..2 {
                let ql0 = load32(&b[64 * n..64 * n + 32]);
                let ql1 = load32(&b[64 * n + 32..64 * n + 64]);
                let qh = load32(&b[128 + 32 * n..160 + 32 * n]);
                q[4 * n] = _mm256_or_si256(_mm256_and_si256(ql0, low), two_bits(qh));
                q[4 * n + 1] = _mm256_or_si256(
                    _mm256_and_si256(ql1, low),
                    two_bits(_mm256_srli_epi16::<2>(qh)),
                );
                q[4 * n + 2] = _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16::<4>(ql0), low),
                    two_bits(_mm256_srli_epi16::<4>(qh)),
                );
                q[4 * n + 3] = _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16::<4>(ql1), low),
                    two_bits(_mm256_srli_epi16::<6>(qh)),
                );
            }
        }
        _ => {
            let five = kind == QuantKind::Q5_K;
            let qs = if five { &b[48..176] } else { &b[16..144] };
            let qh = load32(&b[16..48]);
            for i in 0..4 {
                let v = load32(&qs[32 * i..32 * i + 32]);
                let mut lo = _mm256_and_si256(v, low);
                let mut hi = _mm256_and_si256(_mm256_srli_epi16::<4>(v), low);
                if five {
                    lo = _mm256_or_si256(lo, fifth_of(qh, 2 * i as i32));
                    hi = _mm256_or_si256(hi, fifth_of(qh, 2 * i as i32 + 1));
                }
                q[2 * i] = lo;
                q[2 * i + 1] = hi;
            }
        }
    }
    for (c, s) in s.iter_mut().enumerate() {
        // Scales fit in i16: 6-bit unsigned (Q4_K, Q5_K) or i8 (Q6_K).
        let (a, b) = (sc[2 * c] as i16, sc[2 * c + 1] as i16);
        *s = _mm256_set_m128i(_mm_set1_epi16(b), _mm_set1_epi16(a));
    }
}

// Indexed loops over the row sums: the iterator form compiled to slower
// code (Q4_K at one row 3.8 against 5.0 GiB/s).
#[allow(clippy::needless_range_loop)]
#[inline(always)]
unsafe fn kquants(
    kind: QuantKind,
    w: &[u8],
    x: &QuantizedActivations,
    first: usize,
    res: &mut [f32],
) {
    let m = res.len();
    let mut acc = [_mm256_setzero_ps(); 16];
    let mut q = [_mm256_setzero_si256(); 8];
    let mut s = [_mm256_setzero_si256(); 8];
    for (b, wb) in w.chunks_exact(kind.block_bytes()).enumerate() {
        let (sc, c, d, dc) = k_scales(kind, wb);
        k_block(kind, wb, &mut q, &mut s, &sc);
        // The corrections per 16 as i16 (|c| ≤ 32 × 128), so each row's
        // Σ c × bsums is one `madd` (pairs of at most 2 × 4096 × 2032).
        let c16: [i16; 16] = std::array::from_fn(|g| c[g] as i16);
        let cv = _mm256_loadu_si256(c16.as_ptr().cast());
        for j in 0..m {
            let i = first + j;
            let qx = &x.q_row(i)[b * KB..(b + 1) * KB];
            let mut isum = _mm256_setzero_si256();
            for k in 0..8 {
                let vx = load32(&qx[32 * k..32 * k + 32]);
                let p = _mm256_madd_epi16(_mm256_maddubs_epi16(q[k], vx), s[k]);
                isum = _mm256_add_epi32(isum, p);
            }
            let dx = x.d_row(i)[b];
            acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(d * dx), acc[j]);
            let bs = &x.bsums_row(i)[b * (KB / KSUM)..(b + 1) * (KB / KSUM)];
            let cs = _mm256_madd_epi16(load32(bs), cv);
            acc[j] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(cs), _mm256_set1_ps(dc * dx), acc[j]);
        }
    }
    for j in 0..m {
        res[j] = hsum(acc[j]);
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
unsafe fn floats(
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
