//! Quantized weights with 8-bit activations: each weight block is unpacked
//! in registers to 32-byte vectors of small integers, then multiplied with
//! every activation row by `_mm256_maddubs_epi16` (unsigned × signed bytes
//! to pairwise i16 sums) and `_mm256_madd_epi16` (to i32, times a scale):
//! exact integers, one f32 FMA per block and row. Signed weights use the
//! sign trick (|w| × (x · sign w)), since `maddubs` wants its first operand
//! unsigned. No i16 sum can saturate: |w| ≤ 128 and |x| ≤ 127 give pairs of
//! at most 32,512.

use std::arch::x86_64::*;

use pagoda_core::QuantKind;

use super::super::act::{QuantizedActivations, KB, KSUM, LANES, QB};
use super::super::unpack;
use super::{
    half, hsum, k_block, k_scales, legacy_block, load32, nibbles, PREFETCH_AHEAD, Q4_1, Q8_0,
};

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
pub(super) unsafe fn packed<const KIND: u8>(
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
            // products. The store is aligned so that the loads are
            // forwarded from it: on a stack slot that happened to straddle
            // a line, Q4_1 at four rows ran at half speed (1.8 against
            // 3.7 GiB/s) after an unrelated kernel changed the frame.
            let mut scales = LaneLine([0.0; LANES]);
            let v = _mm256_mul_ps(_mm256_set1_ps(dw), _mm256_loadu_ps(line.as_ptr()));
            _mm256_store_ps(scales.0.as_mut_ptr(), v);
            let scales = &scales.0;
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

/// Eight lanes on a 32-byte boundary (for [`packed_lanes`]' aligned store).
#[repr(C, align(32))]
struct LaneLine([f32; LANES]);

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

#[inline(always)]
pub(super) unsafe fn legacy(
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

// Indexed loops over the row sums: the iterator form compiled to slower
// code (Q4_K at one row 3.8 against 5.0 GiB/s).
#[allow(clippy::needless_range_loop)]
#[inline(always)]
pub(super) unsafe fn kquants(
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
