//! Portable kernels: the reference for the SIMD ones.

use crate::element::KvElement;
use crate::store::value_at;

pub fn page_scores<E: KvElement>(
    q: &[f32],
    rows: usize,
    k: &[E],
    keys: usize,
    dim: usize,
    scores: &mut [f32],
) {
    for r in 0..rows {
        let qr = &q[r * dim..(r + 1) * dim];
        for i in 0..keys {
            // Key `i` is column `i` of the dimension-major block.
            let ki = k[i..].iter().step_by(16);
            scores[r * 16 + i] = qr.iter().zip(ki).map(|(a, b)| a * b.to_f32()).sum();
        }
    }
}

pub fn page_accumulate<E: KvElement>(
    acc: &mut [f32],
    rows: usize,
    p: &[f32],
    v: &[E],
    keys: usize,
    dim: usize,
) {
    for r in 0..rows {
        let ar = &mut acc[r * dim..(r + 1) * dim];
        for i in 0..keys {
            let w = p[r * 16 + i];
            for (d, a) in ar.iter_mut().enumerate() {
                *a += w * v[value_at(i, d)].to_f32();
            }
        }
    }
}

/// `e^x` for `x ≤ 0`; `-inf` (a masked key) gives exactly 0. Branch-free, so
/// loops over it vectorise: Cody–Waite range reduction `x = n·ln2 + r` and a
/// degree-6 polynomial for `e^r` (relative error about 2e-7, far inside the
/// f32 tolerance). The AVX2 version computes the same steps in 8 lanes.
#[inline]
pub fn exp_nonpositive(x: f32) -> f32 {
    let masked = x < -87.0;
    let y = x.max(-87.0);
    // Round to nearest for y ≤ 0 with a truncating conversion (one
    // instruction; `round` would be a library call).
    let n = (y * core::f32::consts::LOG2_E - 0.5) as i32 as f32;
    let r = y - n * LN2_HI - n * LN2_LO;
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0))))));
    let scale = f32::from_bits(((n as i32 + 127) as u32) << 23);
    if masked {
        0.0
    } else {
        p * scale
    }
}

/// [`super::silu_mul`] one value at a time: with `t = e^-|g|`, `σ(g)` is
/// `1 / (1 + t)` for `g ≥ 0` and `t / (1 + t)` below, so the exponential
/// never overflows.
pub fn silu_mul(gate: &mut [f32], up: &[f32]) {
    for (g, u) in gate.iter_mut().zip(up) {
        let t = exp_nonpositive(-g.abs());
        let top = if *g >= 0.0 { 1.0 } else { t };
        *g = *g * top / (1.0 + t) * u;
    }
}

/// `√(2/π)`, the tanh approximation's inner factor.
pub const GELU_K: f32 = 0.797_884_6;
/// The tanh approximation's cubic coefficient.
pub const GELU_C: f32 = 0.044_715;

/// [`super::gelu_tanh_mul`] one value at a time: `0.5·g·(1 + tanh u)` is
/// `g·σ(2u)` with `u = √(2/π)(g + 0.044715 g³)`, and `σ` is computed as in
/// [`silu_mul`], so nothing overflows.
pub fn gelu_tanh_mul(gate: &mut [f32], up: &[f32]) {
    for (g, u) in gate.iter_mut().zip(up) {
        let z = 2.0 * GELU_K * (*g + GELU_C * *g * *g * *g);
        let t = exp_nonpositive(-z.abs());
        let top = if z >= 0.0 { 1.0 } else { t };
        *g = *g * top / (1.0 + t) * u;
    }
}

/// `ln 2` split so that `n · LN2_HI` is exact for the `n` that occur.
pub const LN2_HI: f32 = 0.693_359_4;
pub const LN2_LO: f32 = -2.121_944_4e-4;

pub fn page_softmax(
    scores: &mut [f32],
    visible: &[u32],
    max: &mut [f32],
    sum: &mut [f32],
    correction: &mut [f32],
) {
    for (r, &seen) in visible.iter().enumerate() {
        let row = &mut scores[r * 16..r * 16 + 16];
        let seen = seen as usize;
        if seen == 0 {
            row.fill(0.0);
            correction[r] = 1.0;
            continue;
        }
        let page_max = row[..seen]
            .iter()
            .copied()
            .fold(f32::NEG_INFINITY, f32::max);
        let new_max = max[r].max(page_max);
        for s in &mut row[..seen] {
            *s = exp_nonpositive(*s - new_max);
        }
        row[seen..].fill(0.0);
        let c = exp_nonpositive(max[r] - new_max);
        sum[r] = sum[r] * c + row.iter().sum::<f32>();
        max[r] = new_max;
        correction[r] = c;
    }
}
