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
    half, hsum, k_scale_vectors, k_value, legacy_block, load32, nibbles, prefetch_ahead, Q4_1, Q8_0,
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
            prefetch_ahead(wb);
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
            prefetch_ahead(wb);
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
        prefetch_ahead(wb);
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

/// K-quant weights (Q2_K to Q6_K, and IQ4_XS) against Q8_K activation rows, in
/// groups of up to four rows: each super-block's scales are unpacked in
/// registers ([`k_scale_vectors`]: a widening and one shuffle per 32
/// values, no scalar scale arrays) and its values once per group, then
/// each (weight row, activation row) pair costs per 32 values one
/// `maddubs` and one `madd` by the scale, and per super-block one `madd`
/// of the sums of 16 by the corrections and two FMAs. With the scales
/// unpacked one at a time in scalar code this ran Q4_K at one row at
/// 5.6 GiB/s (1536², one thread, Zen 2).
#[inline(always)]
pub(super) unsafe fn kquants(
    kind: QuantKind,
    w: &[u8],
    x: &QuantizedActivations,
    first: usize,
    res: &mut [f32],
) {
    let m = res.len();
    /// The kernel for one weight type, by the group's row count.
    macro_rules! by_rows {
        ($kind:ident, $out:expr, $first:expr) => {
            match $out.len() {
                1 => kquant_rows::<$kind, 1>(w, x, $first, $out),
                2 => kquant_rows::<$kind, 2>(w, x, $first, $out),
                3 => kquant_rows::<$kind, 3>(w, x, $first, $out),
                _ => kquant_rows::<$kind, 4>(w, x, $first, $out),
            }
        };
    }
    for g in (0..m).step_by(4) {
        let out = &mut res[g..(g + 4).min(m)];
        match kind {
            QuantKind::Q2_K => by_rows!(Q2K, out, first + g),
            QuantKind::Q3_K => by_rows!(Q3K, out, first + g),
            QuantKind::Q4_K => by_rows!(Q4K, out, first + g),
            QuantKind::Q5_K => by_rows!(Q5K, out, first + g),
            QuantKind::IQ4_XS => by_rows!(IQ4XS, out, first + g),
            _ => by_rows!(Q6K, out, first + g),
        }
    }
}

/// [`kquant_rows`]' weight types, as const parameters.
const Q4K: u8 = 0;
const Q5K: u8 = 1;
const Q6K: u8 = 2;
const Q2K: u8 = 3;
const Q3K: u8 = 4;
const IQ4XS: u8 = 5;

/// [`kquants`] for exactly `N` activation rows from `first`. A function of
/// its own, not inlined: in the shared row kernel its registers spilled.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline(never)]
unsafe fn kquant_rows<const KIND: u8, const N: usize>(
    w: &[u8],
    x: &QuantizedActivations,
    first: usize,
    res: &mut [f32],
) {
    let kind = match KIND {
        Q4K => QuantKind::Q4_K,
        Q5K => QuantKind::Q5_K,
        Q2K => QuantKind::Q2_K,
        Q3K => QuantKind::Q3_K,
        IQ4XS => QuantKind::IQ4_XS,
        _ => QuantKind::Q6_K,
    };
    let bytes = kind.block_bytes();
    let blocks = w.len() / bytes;
    // Plain loops, no `array::from_fn`: its closures were not inlined into
    // this function (whose target features they lack) and cost a call each.
    let mut qs: [&[i8]; N] = [&[]; N];
    let mut ds: [&[f32]; N] = [&[]; N];
    let mut bs: [&[i16]; N] = [&[]; N];
    for j in 0..N {
        qs[j] = &x.q_row(first + j)[..blocks * KB];
        ds[j] = &x.d_row(first + j)[..blocks];
        bs[j] = &x.bsums_row(first + j)[..blocks * (KB / KSUM)];
    }
    let mut acc = [_mm256_setzero_ps(); N];
    let mut corr = [_mm256_setzero_ps(); N];
    for b in 0..blocks {
        // Slices of constant length, so the loads below need no checks.
        let wb = &w[b * bytes..b * bytes + bytes];
        let mut xb: [&[i8]; N] = [&[]; N];
        for j in 0..N {
            xb[j] = &qs[j][b * KB..b * KB + KB];
        }
        prefetch_ahead(wb);
        let sc = k_scale_vectors(kind, wb);
        let mut isum = [_mm256_setzero_si256(); N];
        for k in 0..8 {
            let q = k_value(kind, wb, k);
            // IQ4_XS's values are signed: `maddubs` takes |q|, and the
            // activation takes q's sign (|q| ≤ 127, so no pair saturates).
            let aq = if KIND == IQ4XS {
                _mm256_sign_epi8(q, q)
            } else {
                q
            };
            for j in 0..N {
                let vx = load32(&xb[j][32 * k..32 * k + 32]);
                let vx = if KIND == IQ4XS {
                    _mm256_sign_epi8(vx, q)
                } else {
                    vx
                };
                let p = _mm256_madd_epi16(_mm256_maddubs_epi16(aq, vx), sc.s[k]);
                isum[j] = _mm256_add_epi32(isum[j], p);
            }
        }
        for j in 0..N {
            let dx = ds[j][b];
            acc[j] = _mm256_fmadd_ps(
                _mm256_cvtepi32_ps(isum[j]),
                _mm256_set1_ps(sc.d * dx),
                acc[j],
            );
            if KIND == IQ4XS {
                // No minimums to pay.
                continue;
            }
            let sums = load32(&bs[j][b * (KB / KSUM)..(b + 1) * (KB / KSUM)]);
            let cs = _mm256_madd_epi16(sums, sc.c);
            corr[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(cs), _mm256_set1_ps(sc.dc * dx), corr[j]);
        }
    }
    for j in 0..N {
        res[j] = hsum(acc[j]) - hsum(corr[j]);
    }
}
