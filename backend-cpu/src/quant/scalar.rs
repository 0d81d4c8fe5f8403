//! The portable reference: unpack each weight block once, then an exact
//! integer dot product with every activation row, one f32 multiply-add per
//! block. The SIMD paths must match it within f32 rounding.

use pagoda_core::quant::{bf16_to_f32, f16_to_f32};
use pagoda_core::{dequantize_row, QuantKind};

use super::act::{ActFormat, QuantizedActivations, KB, KSUM, QB};
use super::unpack;

/// `res[j] = w · x_{first + j}` for the weight row `w` (`kind` blocks).
pub(super) fn dots(
    kind: QuantKind,
    w: &[u8],
    x: &QuantizedActivations,
    first: usize,
    res: &mut [f32],
) {
    res.fill(0.0);
    match kind {
        QuantKind::F32 | QuantKind::F16 | QuantKind::BF16 => floats(kind, w, x, first, res),
        _ if x.format() == ActFormat::F32 => widened(kind, w, x, first, res),
        _ if unpack::is_super_block(kind) => kquants(kind, w, x, first, res),
        _ => legacy(kind, w, x, first, res),
    }
}

/// The weight element at `e` of a float row.
#[inline]
pub(super) fn float_at(kind: QuantKind, w: &[u8], e: usize) -> f32 {
    match kind {
        QuantKind::F32 => f32::from_le_bytes([w[4 * e], w[4 * e + 1], w[4 * e + 2], w[4 * e + 3]]),
        QuantKind::F16 => f16_to_f32(u16::from_le_bytes([w[2 * e], w[2 * e + 1]])),
        _ => bf16_to_f32(u16::from_le_bytes([w[2 * e], w[2 * e + 1]])),
    }
}

fn floats(kind: QuantKind, w: &[u8], x: &QuantizedActivations, first: usize, res: &mut [f32]) {
    // Partial sums per 32 elements keep the f32 error near the SIMD paths'.
    let mut wb = [0.0f32; 32];
    for start in (0..x.cols()).step_by(32) {
        let n = (x.cols() - start).min(32);
        for (e, o) in wb[..n].iter_mut().enumerate() {
            *o = float_at(kind, w, start + e);
        }
        for (j, r) in res.iter_mut().enumerate() {
            let xr = &x.f_row(first + j)[start..start + n];
            *r += wb[..n].iter().zip(xr).map(|(a, b)| a * b).sum::<f32>();
        }
    }
}

/// Quantized weights with f32 activations: each block dequantized (by
/// `pagoda_core`, the loader's own dequantization), then f32 products with
/// a partial sum per 32 elements, as the SIMD paths add them.
pub(super) fn widened(
    kind: QuantKind,
    w: &[u8],
    x: &QuantizedActivations,
    first: usize,
    res: &mut [f32],
) {
    let n = kind.block_elems();
    let mut wb = [0.0f32; KB];
    for (b, bytes) in w.chunks_exact(kind.block_bytes()).enumerate() {
        // The row was validated as whole blocks, so this cannot fail.
        let ok = dequantize_row(kind, bytes, &mut wb[..n]).is_ok();
        debug_assert!(ok, "a whole block dequantizes");
        for (j, r) in res.iter_mut().enumerate() {
            let xr = &x.f_row(first + j)[b * n..(b + 1) * n];
            for (wc, xc) in wb[..n].chunks_exact(QB).zip(xr.chunks_exact(QB)) {
                *r += wc.iter().zip(xc).map(|(a, b)| a * b).sum::<f32>();
            }
        }
    }
}

fn legacy(kind: QuantKind, w: &[u8], x: &QuantizedActivations, first: usize, res: &mut [f32]) {
    let with_min = unpack::has_min(kind);
    for (b, wb) in w.chunks_exact(kind.block_bytes()).enumerate() {
        let blk = unpack::legacy(kind, wb);
        for (j, r) in res.iter_mut().enumerate() {
            let i = first + j;
            let qx = &x.q_row(i)[b * QB..(b + 1) * QB];
            let isum: i32 = blk
                .q
                .iter()
                .zip(qx)
                .map(|(&a, &c)| i32::from(a) * i32::from(c))
                .sum();
            *r += blk.d * x.d_row(i)[b] * isum as f32;
            if with_min {
                *r += blk.m * x.s_row(i)[b];
            }
        }
    }
}

fn kquants(kind: QuantKind, w: &[u8], x: &QuantizedActivations, first: usize, res: &mut [f32]) {
    for (b, wb) in w.chunks_exact(kind.block_bytes()).enumerate() {
        let blk = unpack::kquant(kind, wb);
        for (j, r) in res.iter_mut().enumerate() {
            let i = first + j;
            let qx = &x.q_row(i)[b * KB..(b + 1) * KB];
            let bs = &x.bsums_row(i)[b * (KB / KSUM)..(b + 1) * (KB / KSUM)];
            let (mut isum, mut corr) = (0i32, 0i32);
            for g in 0..KB / KSUM {
                let dot: i32 = blk.q[g * KSUM..(g + 1) * KSUM]
                    .iter()
                    .zip(&qx[g * KSUM..(g + 1) * KSUM])
                    .map(|(&a, &c)| i32::from(a as i8) * i32::from(c))
                    .sum();
                isum += blk.sc[g] * dot;
                corr += blk.c[g] * i32::from(bs[g]);
            }
            let dx = x.d_row(i)[b];
            *r += blk.d * dx * isum as f32 - blk.dc * dx * corr as f32;
        }
    }
}
