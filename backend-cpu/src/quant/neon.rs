//! NEON. Weight blocks are unpacked as in the scalar path (`unpack`), then
//! every activation row takes widening `i8 × i8 → i16` multiplies
//! (`vmull_s8`, exact: |w|, |x| ≤ 128) and pairwise adds to i32, so the
//! integer sums equal the scalar path's. Where the CPU has the dot product
//! extension (`dotprod`, checked at run time), `sdot` does 16 products and
//! their sums in one instruction instead; its intrinsic is not stable at the
//! workspace's minimum Rust version, so it is written as inline assembly.
//! Both give the same integers, so the same floats. Floats widen in Rust and
//! multiply with `vfmaq_f32`.
//!
//! Where the CPU also has the 8-bit matrix multiply extension (`i8mm`),
//! [`pairs`] takes two weight rows against two activation rows at once:
//! `smmla` multiplies a 2 × 8 block of each (32 products, twice `sdot`'s
//! 16) into a 2 × 2 tile of i32 sums, the same integers again. Its
//! intrinsic is not stable either (Rust 1.95), so it is inline assembly
//! too. Only correctness is checked here (under QEMU, whose default CPU
//! has i8mm); its speed has not been measured on an Arm CPU.

use std::arch::aarch64::*;
use std::arch::asm;
use std::cell::RefCell;

use pagoda_core::QuantKind;

use super::act::{ActFormat, QuantizedActivations, KB, KSUM, QB};
use super::{scalar, unpack, MAX_ROWS_PER_PASS};

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

/// `res[j] = w · x_{first + j}`; `w` one weight row of `kind`: by `sdot`
/// with `sdot`, else by widening multiplies.
///
/// # Safety
/// The CPU must have NEON, and the dot product extension with `sdot`.
pub(super) unsafe fn dots(
    sdot: bool,
    kind: QuantKind,
    w: &[u8],
    x: &QuantizedActivations,
    first: usize,
    res: &mut [f32],
) {
    if sdot {
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
        _ if unpack::is_super_block(kind) => kquants::<SDOT>(kind, w, x, first, res),
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
            // The values' bits as i8 (see `unpack::KBlock`).
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

/// `SMMLA`: `acc + a × bᵀ` for two 2 × 8 matrices of i8 (row `i` in bytes
/// `8i..8i + 8`), so lane `2i + k` gains `a_i · b_k`.
///
/// # Safety
/// The CPU must have the `i8mm` extension, and the caller must be compiled
/// with it (the assembler checks).
#[inline(always)]
unsafe fn smmla(mut acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    // SAFETY: a register-only instruction (no memory, no stack, no flags);
    // the caller guarantees the extension.
    asm!(
        "smmla {acc:v}.4s, {a:v}.16b, {b:v}.16b",
        acc = inout(vreg) acc,
        a = in(vreg) a,
        b = in(vreg) b,
        options(pure, nomem, nostack, preserves_flags)
    );
    acc
}

/// Two rows eight bytes at a time, `[a[0..8], b[0..8], a[8..16], ...]`
/// into `out` (both rows' length), the operand layout of [`smmla`].
fn pair_rows<T: Copy>(a: &[T], b: &[T], out: &mut [T]) {
    let chunks = out
        .chunks_exact_mut(16)
        .zip(a.chunks_exact(8).zip(b.chunks_exact(8)));
    for (o, (a8, b8)) in chunks {
        o[..8].copy_from_slice(a8);
        o[8..].copy_from_slice(b8);
    }
}

/// The four lanes of a 2 × 2 tile from `a` (activation rows) and `w`
/// (weight rows): `[a0·w0, a0·w1, a1·w0, a1·w1]`.
#[inline(always)]
unsafe fn tile(a: [f32; 2], w: [f32; 2]) -> float32x4_t {
    vld1q_f32([a[0] * w[0], a[0] * w[1], a[1] * w[0], a[1] * w[1]].as_ptr())
}

thread_local! {
    /// Each thread's activation rows in pairs ([`pair_rows`]), kept
    /// between products like the other per-thread buffers.
    static PAIRED: RefCell<Vec<i8>> = const { RefCell::new(Vec::new()) };
}

/// Activation row pairs one [`pairs`] pass keeps sums for.
const PAIRS_PER_PASS: usize = MAX_ROWS_PER_PASS.div_ceil(2);

/// `res[k × m + j] = w_k · x_{first + j}` for the weight rows of `plain`
/// (`row_bytes` each, not 0) and `m = res.len() / rows` activation rows:
/// two weight rows by two activation rows at a time by `smmla` (an odd row
/// out is paired with itself and its copy's results dropped). Products
/// with f32 activations or float weights go to the one-row kernels.
///
/// A single activation row (a decode step) pairs with itself too: as many
/// `smmla` as the one-row kernel's `sdot`, and a row's floats then never
/// depend on how many rows share its step.
///
/// # Safety
/// The CPU must have NEON, `dotprod` and `i8mm`.
#[target_feature(enable = "neon,dotprod,i8mm")]
pub(super) unsafe fn pairs(
    kind: QuantKind,
    plain: &[u8],
    row_bytes: usize,
    x: &QuantizedActivations,
    first: usize,
    res: &mut [f32],
) {
    let rows = plain.len() / row_bytes.max(1);
    let m = res.len() / rows.max(1);
    let floats = matches!(kind, QuantKind::F32 | QuantKind::F16 | QuantKind::BF16);
    if floats || x.format() == ActFormat::F32 || m == 0 {
        for (wrow, out) in plain
            .chunks_exact(row_bytes.max(1))
            .zip(res.chunks_exact_mut(m.max(1)))
        {
            dots_with::<true>(kind, wrow, x, first, out);
        }
        return;
    }
    let cols = x.cols();
    PAIRED.with(|buf| {
        let mut paired = buf.borrow_mut();
        let pair_count = m.div_ceil(2);
        paired.resize(pair_count * 2 * cols, 0);
        for (p, out) in paired.chunks_exact_mut(2 * cols).enumerate() {
            let (a, b) = (2 * p, (2 * p + 1).min(m - 1));
            pair_rows(x.q_row(first + a), x.q_row(first + b), out);
        }
        for r in (0..rows).step_by(2) {
            let r1 = (r + 1).min(rows - 1);
            let w0 = &plain[r * row_bytes..(r + 1) * row_bytes];
            let w1 = &plain[r1 * row_bytes..(r1 + 1) * row_bytes];
            for p0 in (0..pair_count).step_by(PAIRS_PER_PASS) {
                let n = (pair_count - p0).min(PAIRS_PER_PASS);
                let mut sums = [vdupq_n_f32(0.0); PAIRS_PER_PASS];
                let pass = Pass {
                    x,
                    paired: &paired[p0 * 2 * cols..(p0 + n) * 2 * cols],
                    rows: (first + 2 * p0, m - 2 * p0),
                };
                if unpack::is_super_block(kind) {
                    kquant_pairs(kind, [w0, w1], &pass, &mut sums[..n]);
                } else {
                    legacy_pairs(kind, [w0, w1], &pass, &mut sums[..n]);
                }
                for (p, s) in sums[..n].iter().enumerate() {
                    let mut v = [0.0f32; 4];
                    vst1q_f32(v.as_mut_ptr(), *s);
                    let j = 2 * (p0 + p);
                    for (lane, (row, act)) in [(r, j), (r1, j), (r, j + 1), (r1, j + 1)]
                        .into_iter()
                        .enumerate()
                    {
                        // A weight row paired with itself writes the same
                        // float twice; an activation row's copy is dropped.
                        if act < m {
                            res[row * m + act] = v[lane];
                        }
                    }
                }
            }
        }
    });
}

/// The activation rows of one [`pairs`] pass: `paired` holds their pairs
/// ([`pair_rows`]); `rows` is the first row's index in `x` and the rows
/// left (the last pair's second row repeats its first when one is left).
struct Pass<'a> {
    x: &'a QuantizedActivations,
    paired: &'a [i8],
    rows: (usize, usize),
}

impl Pass<'_> {
    /// Indices in `x` of pair `p`'s two rows.
    fn pair(&self, p: usize) -> [usize; 2] {
        let (first, left) = self.rows;
        [first + 2 * p, first + (2 * p + 1).min(left - 1)]
    }

    /// Pair `p`'s `len` paired bytes of block `b` (blocks of `len / 2`).
    fn block(&self, p: usize, b: usize, len: usize) -> &[i8] {
        let cols = self.x.cols();
        &self.paired[p * 2 * cols + b * len..][..len]
    }
}

/// [`pairs`] for a pair of legacy rows (`w`): each block's 32 values as
/// four 2 × 8 matrices of the two rows, against each activation pair's.
#[inline(always)]
unsafe fn legacy_pairs(kind: QuantKind, w: [&[u8]; 2], pass: &Pass<'_>, sums: &mut [float32x4_t]) {
    let with_min = unpack::has_min(kind);
    let size = kind.block_bytes();
    for (b, (b0, b1)) in w[0]
        .chunks_exact(size)
        .zip(w[1].chunks_exact(size))
        .enumerate()
    {
        let (k0, k1) = (unpack::legacy(kind, b0), unpack::legacy(kind, b1));
        let wv: [int8x16_t; 4] = std::array::from_fn(|c| {
            let at = 8 * c..8 * c + 8;
            vcombine_s8(
                vld1_s8(k0.q[at.clone()].as_ptr()),
                vld1_s8(k1.q[at].as_ptr()),
            )
        });
        for (p, s) in sums.iter_mut().enumerate() {
            let xs = pass.block(p, b, 2 * QB);
            let mut acc = vdupq_n_s32(0);
            for (c, &wc) in wv.iter().enumerate() {
                acc = smmla(acc, vld1q_s8(xs[16 * c..16 * c + 16].as_ptr()), wc);
            }
            let [a0, a1] = pass.pair(p);
            let dx = [pass.x.d_row(a0)[b], pass.x.d_row(a1)[b]];
            *s = vfmaq_f32(*s, vcvtq_f32_s32(acc), tile(dx, [k0.d, k1.d]));
            if with_min {
                let sx = [pass.x.s_row(a0)[b], pass.x.s_row(a1)[b]];
                *s = vaddq_f32(*s, tile(sx, [k0.m, k1.m]));
            }
        }
    }
}

/// [`pairs`] for a pair of K-quant rows (`w`): each group of 16 values as
/// two 2 × 8 matrices, its 2 × 2 sums multiplied by the rows' scales in
/// i32; the minimums (Q6_K's +32) are paid from the activation's sums of
/// 16, as on the one-row path.
#[inline(always)]
unsafe fn kquant_pairs(kind: QuantKind, w: [&[u8]; 2], pass: &Pass<'_>, sums: &mut [float32x4_t]) {
    let size = kind.block_bytes();
    for (b, (b0, b1)) in w[0]
        .chunks_exact(size)
        .zip(w[1].chunks_exact(size))
        .enumerate()
    {
        let (k0, k1) = (unpack::kquant(kind, b0), unpack::kquant(kind, b1));
        // The values' bits as i8 (see `unpack::KBlock`).
        let wv: [int8x16_t; KB / 8] = std::array::from_fn(|c| {
            let at = 8 * c..8 * c + 8;
            vreinterpretq_s8_u8(vcombine_u8(
                vld1_u8(k0.q[at.clone()].as_ptr()),
                vld1_u8(k1.q[at].as_ptr()),
            ))
        });
        let (c0, c1) = (corrections_i16(&k0.c), corrections_i16(&k1.c));
        let scales: [int32x4_t; KB / KSUM] =
            std::array::from_fn(|g| vld1q_s32([k0.sc[g], k1.sc[g], k0.sc[g], k1.sc[g]].as_ptr()));
        for (p, s) in sums.iter_mut().enumerate() {
            let xs = pass.block(p, b, 2 * KB);
            let mut isum = vdupq_n_s32(0);
            for (g, &sc) in scales.iter().enumerate() {
                let at = 32 * g;
                let t = smmla(
                    vdupq_n_s32(0),
                    vld1q_s8(xs[at..at + 16].as_ptr()),
                    wv[2 * g],
                );
                let t = smmla(t, vld1q_s8(xs[at + 16..at + 32].as_ptr()), wv[2 * g + 1]);
                isum = vmlaq_s32(isum, t, sc);
            }
            let [a0, a1] = pass.pair(p);
            let groups = b * (KB / KSUM)..(b + 1) * (KB / KSUM);
            let (s0, s1) = (
                &pass.x.bsums_row(a0)[groups.clone()],
                &pass.x.bsums_row(a1)[groups],
            );
            let corr = [
                corrections(c0, s0),
                corrections(c1, s0),
                corrections(c0, s1),
                corrections(c1, s1),
            ];
            let dx = [pass.x.d_row(a0)[b], pass.x.d_row(a1)[b]];
            *s = vfmaq_f32(*s, vcvtq_f32_s32(isum), tile(dx, [k0.d, k1.d]));
            let corr = vcvtq_f32_s32(vld1q_s32(corr.as_ptr()));
            *s = vfmsq_f32(*s, corr, tile(dx, [k0.dc, k1.dc]));
        }
    }
}

/// A K block's 16 corrections as i16 (minimums of 6 bits; Q6_K's 32 ×
/// scale, at most 4,096 in size).
#[inline(always)]
unsafe fn corrections_i16(c: &[i32; 16]) -> [int16x8_t; 2] {
    let narrow = |h: &[i32]| {
        let lo = vmovn_s32(vld1q_s32(h[..4].as_ptr()));
        vmovn_high_s32(lo, vld1q_s32(h[4..8].as_ptr()))
    };
    [narrow(&c[..8]), narrow(&c[8..])]
}

/// `Σ_g c_g × s_g` over a block's 16 groups: its corrections `c` and an
/// activation row's sums of 16 (`s`); at most 16 × 4,096 × 2,048 in size.
#[inline(always)]
unsafe fn corrections(c: [int16x8_t; 2], s: &[i16]) -> i32 {
    let (s0, s1) = (vld1q_s16(s[..8].as_ptr()), vld1q_s16(s[8..16].as_ptr()));
    let t = vmull_s16(vget_low_s16(c[0]), vget_low_s16(s0));
    let t = vmlal_high_s16(t, c[0], s0);
    let t = vmlal_s16(t, vget_low_s16(c[1]), vget_low_s16(s1));
    vaddvq_s32(vmlal_high_s16(t, c[1], s1))
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

    /// `smmla`'s 2 × 2 tile holds the four dot products of its rows, on
    /// random bytes with the extremes (where the CPU has `i8mm`).
    #[test]
    fn smmla_tiles_are_the_rows_dot_products() {
        if !std::arch::is_aarch64_feature_detected!("i8mm") {
            println!("skipped: no i8mm on this CPU");
            return;
        }
        #[target_feature(enable = "neon,i8mm")]
        unsafe fn tile_of(a: &[i8; 16], b: &[i8; 16]) -> [i32; 4] {
            let acc = vld1q_s32([1, -2, 3, -4].as_ptr());
            let t = smmla(acc, vld1q_s8(a.as_ptr()), vld1q_s8(b.as_ptr()));
            let mut out = [0i32; 4];
            vst1q_s32(out.as_mut_ptr(), t);
            out
        }
        let dot = |a: &[i8], b: &[i8]| -> i32 {
            a.iter()
                .zip(b)
                .map(|(&x, &y)| i32::from(x) * i32::from(y))
                .sum()
        };
        let mut rng = fastrand::Rng::with_seed(43);
        for round in 0..10_000 {
            let pick = |rng: &mut fastrand::Rng| match round % 3 {
                0 => rng.i8(..),
                1 => [-128, 127][rng.usize(..2)],
                _ => rng.i8(-8..8),
            };
            let a: [i8; 16] = std::array::from_fn(|_| pick(&mut rng));
            let b: [i8; 16] = std::array::from_fn(|_| pick(&mut rng));
            let (a0, a1, b0, b1) = (&a[..8], &a[8..], &b[..8], &b[8..]);
            let want = [
                1 + dot(a0, b0),
                -2 + dot(a0, b1),
                3 + dot(a1, b0),
                -4 + dot(a1, b1),
            ];
            // SAFETY: `i8mm` (and so NEON) was detected above.
            assert_eq!(unsafe { tile_of(&a, &b) }, want, "{a:?} × {b:?}");
        }
    }

    #[test]
    fn rows_pair_eight_bytes_at_a_time() {
        let (a, b): (Vec<u8>, Vec<u8>) = ((0..24).collect(), (100..124).collect());
        let mut out = vec![0u8; 48];
        pair_rows(&a, &b, &mut out);
        for c in 0..3 {
            assert_eq!(&out[16 * c..16 * c + 8], &a[8 * c..8 * c + 8]);
            assert_eq!(&out[16 * c + 8..16 * c + 16], &b[8 * c..8 * c + 8]);
        }
    }

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
