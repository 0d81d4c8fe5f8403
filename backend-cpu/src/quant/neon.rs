//! NEON. Weight blocks are unpacked as in the scalar path (`unpack`), then
//! every activation row takes widening `i8 × i8 → i16` multiplies
//! (`vmull_s8`, exact: |w|, |x| ≤ 128) and pairwise adds to i32, so the
//! integer sums equal the scalar path's. Where the CPU has the dot product
//! extension (`dotprod`, checked at run time), `sdot` does 16 products and
//! their sums in one instruction instead; its intrinsic is not stable at the
//! workspace's minimum Rust version, so it is written as inline assembly.
//! Both give the same integers, so the same floats. Floats widen in Rust and
//! multiply with `vfmaq_f32`.

use std::arch::aarch64::*;
use std::arch::asm;

use pagoda_core::QuantKind;

use super::act::{QuantizedActivations, KB, KSUM, QB};
use super::{scalar, unpack};

/// `Σ a_k × b_k` over 16 bytes, as four i32 partial sums.
#[inline(always)]
unsafe fn dot16(a: int8x16_t, b: int8x16_t) -> int32x4_t {
    let lo = vmull_s8(vget_low_s8(a), vget_low_s8(b));
    let hi = vmull_high_s8(a, b);
    vaddq_s32(vpaddlq_s16(lo), vpaddlq_s16(hi))
}

/// [`dot16`] by `sdot`: four i32 sums of four products each.
///
/// # Safety
/// The CPU must have the `dotprod` extension, and the caller must be
/// compiled with it (the assembler checks).
#[inline(always)]
unsafe fn sdot16(a: int8x16_t, b: int8x16_t) -> int32x4_t {
    let mut acc = vdupq_n_s32(0);
    // SAFETY: a register-only instruction (no memory, no stack, no flags);
    // the caller guarantees the extension.
    asm!(
        "sdot {acc:v}.4s, {a:v}.16b, {b:v}.16b",
        acc = inout(vreg) acc,
        a = in(vreg) a,
        b = in(vreg) b,
        options(pure, nomem, nostack, preserves_flags)
    );
    acc
}

/// [`dot16`], or [`sdot16`] when `SDOT`.
#[inline(always)]
unsafe fn dot<const SDOT: bool>(a: int8x16_t, b: int8x16_t) -> int32x4_t {
    if SDOT {
        sdot16(a, b)
    } else {
        dot16(a, b)
    }
}

/// 16 signed bytes from `s` (which holds at least 16).
#[inline(always)]
unsafe fn load16(s: &[i8]) -> int8x16_t {
    vld1q_s8(s[..16].as_ptr())
}

/// `res[j] = w · x_{first + j}`; `w` one weight row of `kind`.
///
/// # Safety
/// The CPU must have NEON.
pub(super) unsafe fn dots(
    kind: QuantKind,
    w: &[u8],
    x: &QuantizedActivations,
    first: usize,
    res: &mut [f32],
) {
    if std::arch::is_aarch64_feature_detected!("dotprod") {
        dots_sdot(kind, w, x, first, res)
    } else {
        dots_plain(kind, w, x, first, res)
    }
}

/// [`dots`] with `sdot`.
///
/// # Safety
/// The CPU must have NEON and `dotprod`.
#[target_feature(enable = "neon,dotprod")]
unsafe fn dots_sdot(
    kind: QuantKind,
    w: &[u8],
    x: &QuantizedActivations,
    first: usize,
    res: &mut [f32],
) {
    dots_with::<true>(kind, w, x, first, res)
}

/// [`dots`] with widening multiplies.
///
/// # Safety
/// The CPU must have NEON.
#[target_feature(enable = "neon")]
unsafe fn dots_plain(
    kind: QuantKind,
    w: &[u8],
    x: &QuantizedActivations,
    first: usize,
    res: &mut [f32],
) {
    dots_with::<false>(kind, w, x, first, res)
}

#[inline(always)]
unsafe fn dots_with<const SDOT: bool>(
    kind: QuantKind,
    w: &[u8],
    x: &QuantizedActivations,
    first: usize,
    res: &mut [f32],
) {
    res.fill(0.0);
    match kind {
        QuantKind::F32 | QuantKind::F16 | QuantKind::BF16 => floats(kind, w, x, first, res),
        // Quantized weights with f32 activations: the portable path (a NEON
        // one is left for later).
        _ if x.format() == super::act::ActFormat::F32 => scalar::widened(kind, w, x, first, res),
        QuantKind::Q4_K | QuantKind::Q5_K | QuantKind::Q6_K => {
            kquants::<SDOT>(kind, w, x, first, res)
        }
        _ => legacy::<SDOT>(kind, w, x, first, res),
    }
}

#[inline(always)]
unsafe fn legacy<const SDOT: bool>(
    kind: QuantKind,
    w: &[u8],
    x: &QuantizedActivations,
    first: usize,
    res: &mut [f32],
) {
    let with_min = unpack::has_min(kind);
    for (b, wb) in w.chunks_exact(kind.block_bytes()).enumerate() {
        let blk = unpack::legacy(kind, wb);
        let (w0, w1) = (load16(&blk.q[..16]), load16(&blk.q[16..]));
        for (j, r) in res.iter_mut().enumerate() {
            let i = first + j;
            let qx = &x.q_row(i)[b * QB..(b + 1) * QB];
            let v = vaddq_s32(
                dot::<SDOT>(w0, load16(&qx[..16])),
                dot::<SDOT>(w1, load16(&qx[16..])),
            );
            *r += blk.d * x.d_row(i)[b] * vaddvq_s32(v) as f32;
            if with_min {
                *r += blk.m * x.s_row(i)[b];
            }
        }
    }
}

#[inline(always)]
unsafe fn kquants<const SDOT: bool>(
    kind: QuantKind,
    w: &[u8],
    x: &QuantizedActivations,
    first: usize,
    res: &mut [f32],
) {
    for (b, wb) in w.chunks_exact(kind.block_bytes()).enumerate() {
        let blk = unpack::kquant(kind, wb);
        let mut q = [vdupq_n_s8(0); KB / KSUM];
        for (g, v) in q.iter_mut().enumerate() {
            // Values are 0..=63, so the bytes read the same as i8.
            *v = vreinterpretq_s8_u8(vld1q_u8(blk.q[g * KSUM..(g + 1) * KSUM].as_ptr()));
        }
        for (j, r) in res.iter_mut().enumerate() {
            let i = first + j;
            let qx = &x.q_row(i)[b * KB..(b + 1) * KB];
            let mut isum = vdupq_n_s32(0);
            for (g, &wq) in q.iter().enumerate() {
                let p = dot::<SDOT>(wq, load16(&qx[g * KSUM..]));
                isum = vmlaq_n_s32(isum, p, blk.sc[g]);
            }
            let bs = &x.bsums_row(i)[b * (KB / KSUM)..(b + 1) * (KB / KSUM)];
            let corr: i32 = blk.c.iter().zip(bs).map(|(&c, &s)| c * i32::from(s)).sum();
            let dx = x.d_row(i)[b];
            *r += blk.d * dx * vaddvq_s32(isum) as f32 - blk.dc * dx * corr as f32;
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
    let cols = x.cols();
    let mut acc = [vdupq_n_f32(0.0); 16];
    let full = cols / 4 * 4;
    let mut wb = [0.0f32; 4];
    for e in (0..full).step_by(4) {
        for (k, o) in wb.iter_mut().enumerate() {
            *o = scalar::float_at(kind, w, e + k);
        }
        let wv = vld1q_f32(wb.as_ptr());
        for (j, a) in acc.iter_mut().take(res.len()).enumerate() {
            let xv = vld1q_f32(x.f_row(first + j)[e..e + 4].as_ptr());
            *a = vfmaq_f32(*a, wv, xv);
        }
    }
    for (j, r) in res.iter_mut().enumerate() {
        let xr = x.f_row(first + j);
        let tail: f32 = (full..cols)
            .map(|e| scalar::float_at(kind, w, e) * xr[e])
            .sum();
        *r = vaddvq_f32(acc[j]) + tail;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `sdot` and the widening multiplies give the same four-lane total on
    /// random bytes, the extremes included (where the CPU has `dotprod`).
    #[test]
    fn sdot_sums_equal_widening_sums() {
        if !std::arch::is_aarch64_feature_detected!("dotprod") {
            println!("skipped: no dotprod on this CPU");
            return;
        }
        #[target_feature(enable = "neon,dotprod")]
        unsafe fn both(a: &[i8; 16], b: &[i8; 16]) -> (i32, i32) {
            let (va, vb) = (vld1q_s8(a.as_ptr()), vld1q_s8(b.as_ptr()));
            (vaddvq_s32(sdot16(va, vb)), vaddvq_s32(dot16(va, vb)))
        }
        let mut rng = fastrand::Rng::with_seed(41);
        for round in 0..10_000 {
            let pick = |rng: &mut fastrand::Rng| match round % 4 {
                0 => rng.i8(..),
                1 => -128,
                2 => 127,
                _ => rng.i8(-8..8),
            };
            let a: [i8; 16] = std::array::from_fn(|_| pick(&mut rng));
            let b: [i8; 16] = std::array::from_fn(|_| rng.i8(..));
            let want: i32 = a
                .iter()
                .zip(&b)
                .map(|(&x, &y)| i32::from(x) * i32::from(y))
                .sum();
            // SAFETY: `dotprod` (and so NEON) was detected above.
            let (sdot, widening) = unsafe { both(&a, &b) };
            assert_eq!((sdot, widening), (want, want), "{a:?} · {b:?}");
        }
    }
}
