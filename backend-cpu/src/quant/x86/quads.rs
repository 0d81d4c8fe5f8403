//! Q4_0, Q4_1 and Q8_0 weights against activation rows interleaved four at
//! a time ([`QuantizedActivations::quads`]): the kernel for steps of several
//! rows (decode batches), where the multiplies, not the weight bytes, set
//! the pace.
//!
//! A 32-byte vector holds 8 values of each of four activation rows. The
//! weight's matching 8 values, broadcast to all four quarters, go through
//! `maddubs` against it, so each row's products land in its own four i16
//! lanes. The four chunks of a block add up in i16 (4-bit weights are
//! 0..15 and activations ±127: at most 4 × 2 × 15 × 127 = 15,240), and
//! one `madd` widens the sums to i32, two lanes a row. A block and a group
//! of four rows then cost four `maddubs` and one `madd`, where one row at
//! a time costs a `maddubs` and a `madd` per row: `maddubs` and `madd`
//! share one port on Zen 2, so this is the bound.
//!
//! Weights go in unsigned; a Q4_0 block's −8 is paid, like Q4_1's
//! minimum, from each activation block's `d × Σ q`. Q8_0 blocks take the
//! sign trick and widen each chunk on its own ([`signed_span`]).

use std::arch::x86_64::*;
use std::ops::Range;

use pagoda_core::QuantKind;

use super::super::act::{QuantizedActivations, KB, KSUM, QB, QUAD, QUAD_CHUNK};
use super::super::interleave::{GROUP, K5_GROUP_BLOCK, K6_GROUP_BLOCK};
use super::rows8::{q5k_group_blocks, q6k_group_blocks};
use super::{half, k_block, k_scales, load32, nibbles, prefetch_ahead, Q4_1, Q8_0};

/// Weight blocks unpacked ahead of the products at a time (1 KiB of
/// values on the stack, read back by broadcasts).
const SPAN: usize = 32;

/// `res[k × m + j] = w_k · x_{first + j}` for Q4_0, Q4_1 or Q8_0 (`KIND`)
/// weight rows and `m` = `res.len()` / rows activation rows from
/// `first` (a multiple of [`QUAD`]), in passes of up to four groups.
#[inline(always)]
pub(super) unsafe fn quads<const KIND: u8>(
    w: &[u8],
    row_bytes: usize,
    x: &QuantizedActivations,
    first: usize,
    res: &mut [f32],
) {
    for (pass, groups) in passes(w.len() / row_bytes, first, res.len()) {
        match groups {
            1 => quads_pass::<KIND, 1>(w, row_bytes, x, pass, res),
            2 => quads_pass::<KIND, 2>(w, row_bytes, x, pass, res),
            3 => quads_pass::<KIND, 3>(w, row_bytes, x, pass, res),
            _ => quads_pass::<KIND, 4>(w, row_bytes, x, pass, res),
        }
    }
}

/// The passes of a product over `rows` weight rows whose results fill
/// `len` floats, activation rows from `first` (a multiple of [`QUAD`]):
/// up to four groups of rows each, with their count.
fn passes(rows: usize, first: usize, len: usize) -> impl Iterator<Item = (Pass, usize)> {
    debug_assert_eq!(first % QUAD, 0);
    let m = len.checked_div(rows).unwrap_or(0);
    let groups = m.div_ceil(QUAD);
    (0..groups).step_by(4).map(move |g| {
        let pass = Pass {
            group: first / QUAD + g,
            col: g * QUAD,
            m,
        };
        (pass, (groups - g).min(4))
    })
}

/// Writes weight row `k`'s sums for a pass's `G` groups (`acc[g]`: row `r`
/// of the group in lanes `2r` and `2r + 1`) to `res`, skipping rows past
/// the product's last (a partial group's padding): by weight row
/// (`res[k × m + j]`, as the plain kernels leave a tile), or with
/// `BY_ACTIVATION` by activation row (`res[j × rows + k]`, `rows` =
/// `res.len() / m`, as [`interleaved`](super::rows8::interleaved) leaves
/// every tile).
#[inline(always)]
unsafe fn store_groups<const G: usize, const BY_ACTIVATION: bool>(
    acc: &[__m256; G],
    pass: Pass,
    k: usize,
    res: &mut [f32],
) {
    let rows = res.len() / pass.m;
    for (g, four) in group_sums(acc).iter().enumerate() {
        for (r, &v) in four.iter().enumerate() {
            let j = pass.col + g * QUAD + r;
            if j < pass.m {
                let at = if BY_ACTIVATION {
                    j * rows + k
                } else {
                    k * pass.m + j
                };
                res[at] = v;
            }
        }
    }
}

/// The four activation rows' sums of each of `G` groups (`acc[g]`: row `r`
/// of the group in lanes `2r` and `2r + 1`).
#[inline(always)]
unsafe fn group_sums<const G: usize>(acc: &[__m256; G]) -> [[f32; QUAD]; G] {
    let mut sums = [[0.0f32; QUAD]; G];
    for (a, out) in acc.iter().zip(sums.iter_mut()) {
        let h = _mm256_hadd_ps(*a, *a);
        let four = _mm_shuffle_ps::<0b01_00_01_00>(
            _mm256_castps256_ps128(h),
            _mm256_extractf128_ps::<1>(h),
        );
        _mm_storeu_ps(out.as_mut_ptr(), four);
    }
    sums
}

/// Where one pass reads and writes.
#[derive(Clone, Copy)]
struct Pass {
    /// The first group of activation rows.
    group: usize,
    /// Its first row, counted from the product's `first`.
    col: usize,
    /// Activation rows of the whole product (the result row length).
    m: usize,
}

/// [`quads`] for `G` groups of activation rows.
#[inline(always)]
unsafe fn quads_pass<const KIND: u8, const G: usize>(
    w: &[u8],
    row_bytes: usize,
    x: &QuantizedActivations,
    pass: Pass,
    res: &mut [f32],
) {
    let bytes = match KIND {
        Q4_1 => 20,
        Q8_0 => 34,
        _ => 18,
    };
    let blocks = x.cols() / QB;
    let qs: [&[i8]; G] =
        std::array::from_fn(|g| &x.quad_values(pass.group + g)[..blocks * QUAD * QB]);
    let ss: [&[f32]; G] = std::array::from_fn(|g| &x.quad_scales(pass.group + g)[..blocks * LINE]);
    let mut values = [[0u8; QB]; SPAN];
    // Each block's scale and minimum.
    let mut scales = [[0.0f32; 2]; SPAN];
    for (k, wr) in w.chunks_exact(row_bytes).enumerate() {
        let mut acc = [_mm256_setzero_ps(); G];
        for (s, span) in wr.chunks(SPAN * bytes).enumerate() {
            let n = span.len() / bytes;
            for (b, wb) in span.chunks_exact(bytes).enumerate() {
                prefetch_ahead(wb);
                let q = match KIND {
                    Q4_1 => {
                        // d and m side by side: one conversion for both.
                        let dm = u32::from_le_bytes([wb[0], wb[1], wb[2], wb[3]]);
                        let v = _mm_cvtph_ps(_mm_cvtsi32_si128(dm as i32));
                        _mm_storel_epi64(scales[b].as_mut_ptr().cast(), _mm_castps_si128(v));
                        nibbles(&wb[4..20])
                    }
                    Q8_0 => {
                        scales[b] = [half(wb, 0), 0.0];
                        load32(&wb[2..34])
                    }
                    _ => {
                        let d = half(wb, 0);
                        scales[b] = [d, -8.0 * d];
                        nibbles(&wb[2..18])
                    }
                };
                _mm256_storeu_si256(values[b].as_mut_ptr().cast(), q);
            }
            let xq: [&[i8]; G] =
                std::array::from_fn(|g| &qs[g][s * SPAN * QUAD * QB..][..n * QUAD * QB]);
            let xs: [&[f32]; G] = std::array::from_fn(|g| &ss[g][s * SPAN * LINE..][..n * LINE]);
            if KIND == Q8_0 {
                signed_span::<G>(&values[..n], &scales[..n], &xq, &xs, &mut acc);
                // Symmetric: no minimum.
                continue;
            }
            integer_span::<G>(&values[..n], &scales[..n], &xq, &xs, &mut acc);
        }
        store_groups::<G, false>(&acc, pass, k, res);
    }
}

/// Floats per group and block in [`QuantizedActivations::quad_scales`].
const LINE: usize = 4 * QUAD;

/// The products of one span of unpacked weight blocks (`values`, their
/// scales and minimums `scales`) with `G` groups' activations (`xq`:
/// 128 bytes a block; `xs`: [`LINE`] floats a block), added to `acc`: the
/// integer sums times both scales, plus each minimum times the rows'
/// `d × Σ q` (lane `2r` only, so each row counts it once).
#[inline(always)]
unsafe fn integer_span<const G: usize>(
    values: &[[u8; QB]],
    scales: &[[f32; 2]],
    xq: &[&[i8]; G],
    xs: &[&[f32]; G],
    acc: &mut [__m256; G],
) {
    let n = values.len().min(scales.len());
    for g in 0..G {
        assert!(xq[g].len() >= n * QUAD * QB && xs[g].len() >= n * LINE);
    }
    let ones = _mm256_set1_epi16(1);
    let vp = values.as_ptr().cast::<u8>();
    for (b, [d, m]) in scales[..n].iter().enumerate() {
        // SAFETY: `b < n` and `values` holds `n` blocks of 32 bytes, so
        // each 8-byte chunk read is inside it.
        let wv: [__m256i; 4] = std::array::from_fn(|c| unsafe {
            _mm256_set1_epi64x(
                vp.add(b * QB + c * QUAD_CHUNK)
                    .cast::<i64>()
                    .read_unaligned(),
            )
        });
        let (dw, mw) = (_mm256_broadcast_ss(d), _mm256_broadcast_ss(m));
        for g in 0..G {
            // SAFETY: asserted above: group `g` holds 128 bytes and LINE
            // floats for each of the `n` blocks.
            let (xp, sp) = unsafe {
                (
                    xq[g].as_ptr().add(b * QUAD * QB),
                    xs[g].as_ptr().add(b * LINE),
                )
            };
            let mut sum = _mm256_setzero_si256();
            for (c, wc) in wv.iter().enumerate() {
                let xc = _mm256_loadu_si256(xp.add(c * QB).cast());
                sum = _mm256_add_epi16(sum, _mm256_maddubs_epi16(*wc, xc));
            }
            let p = _mm256_madd_epi16(sum, ones);
            let scale = _mm256_mul_ps(dw, _mm256_loadu_ps(sp));
            acc[g] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), scale, acc[g]);
            acc[g] = _mm256_fmadd_ps(mw, _mm256_loadu_ps(sp.add(2 * QUAD)), acc[g]);
        }
    }
}

/// [`integer_span`] for Q8_0 weights (signed bytes): `maddubs` wants its
/// first operand unsigned, so each chunk goes in as |w| against the
/// activations with w's sign, and, since two such products can reach
/// 2 × 128 × 127, each chunk's i16 pairs widen to i32 on their own. (The
/// values widened to i16 and multiplied by `madd` alone ran slower: 1.75
/// against 1.93 GiB/s for SmolLM2's head at 16 rows, one thread.)
#[inline(always)]
unsafe fn signed_span<const G: usize>(
    values: &[[u8; QB]],
    scales: &[[f32; 2]],
    xq: &[&[i8]; G],
    xs: &[&[f32]; G],
    acc: &mut [__m256; G],
) {
    let n = values.len().min(scales.len());
    for g in 0..G {
        assert!(xq[g].len() >= n * QUAD * QB && xs[g].len() >= n * LINE);
    }
    let ones = _mm256_set1_epi16(1);
    let vp = values.as_ptr().cast::<u8>();
    for (b, [d, _]) in scales[..n].iter().enumerate() {
        // SAFETY: `b < n` and `values` holds `n` blocks of 32 bytes.
        let chunk = |c: usize| unsafe {
            _mm256_set1_epi64x(
                vp.add(b * QB + c * QUAD_CHUNK)
                    .cast::<i64>()
                    .read_unaligned(),
            )
        };
        let magnitudes: [__m256i; 4] = std::array::from_fn(|c| _mm256_abs_epi8(chunk(c)));
        let dw = _mm256_broadcast_ss(d);
        for g in 0..G {
            // SAFETY: asserted above, as in `integer_span`.
            let (xp, sp) = unsafe {
                (
                    xq[g].as_ptr().add(b * QUAD * QB),
                    xs[g].as_ptr().add(b * LINE),
                )
            };
            let mut sum = _mm256_setzero_si256();
            for (c, mag) in magnitudes.iter().enumerate() {
                let xc = _mm256_sign_epi8(_mm256_loadu_si256(xp.add(c * QB).cast()), chunk(c));
                let p = _mm256_madd_epi16(_mm256_maddubs_epi16(*mag, xc), ones);
                sum = _mm256_add_epi32(sum, p);
            }
            let scale = _mm256_mul_ps(dw, _mm256_loadu_ps(sp));
            acc[g] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), scale, acc[g]);
        }
    }
}

/// K blocks unpacked ahead of the products at a time (2 KiB of values).
const K_SPAN: usize = 8;

/// K-quant weights against interleaved Q8_K rows, as [`quads`]: for Q4_K
/// and Q5_K each 32-value sub-block's four chunks add in i16 (5-bit values:
/// at most 4 × 2 × 31 × 127 = 31,496), then one `madd` by the sub-block's
/// 6-bit scale widens them to i32; Q6_K's 6-bit values allow two chunks
/// (2 × 2 × 63 × 127 = 32,004), which is also its scale's reach (16
/// values). The sub-blocks add in i32. The minimums (and Q6_K's −32) are
/// paid from the rows' sums of 16 (`quad_bsums`) by one `madd` per four of
/// them, and each super-block costs two conversions and two FMAs per group
/// of four rows.
/// Kept out of [`super::dots`] (see [`super::takes_kquads`]).
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(in super::super) unsafe fn kquads(
    kind: QuantKind,
    w: &[u8],
    row_bytes: usize,
    x: &QuantizedActivations,
    first: usize,
    res: &mut [f32],
) {
    let scales = match kind {
        QuantKind::Q2_K | QuantKind::Q3_K | QuantKind::Q6_K => PER_16,
        QuantKind::IQ4_XS => SIGNED,
        _ => PER_32,
    };
    /// The pass for one scale layout, by its group count.
    macro_rules! by_groups {
        ($scales:ident, $groups:expr, $pass:expr) => {
            match $groups {
                1 => kquads_pass::<1, $scales>(kind, w, row_bytes, x, $pass, res),
                2 => kquads_pass::<2, $scales>(kind, w, row_bytes, x, $pass, res),
                3 => kquads_pass::<3, $scales>(kind, w, row_bytes, x, $pass, res),
                _ => kquads_pass::<4, $scales>(kind, w, row_bytes, x, $pass, res),
            }
        };
    }
    for (pass, groups) in passes(w.len() / row_bytes, first, res.len()) {
        match scales {
            PER_32 => by_groups!(PER_32, groups, pass),
            PER_16 => by_groups!(PER_16, groups, pass),
            _ => by_groups!(SIGNED, groups, pass),
        }
    }
}

/// [`k_block_products`]' scale layouts, as const parameters: one unsigned
/// value scale per 32 values (Q4_K, Q5_K), one per 16 (Q2_K, Q3_K, Q6_K),
/// or one per 32 of signed values (IQ4_XS's table values, up to 127 in
/// size, which `maddubs` takes as their magnitude with the activation
/// taking their sign).
const PER_32: u8 = 0;
const PER_16: u8 = 1;
const SIGNED: u8 = 2;

/// One K block unpacked for [`kquads`]: values in element order, the
/// scales and the minimum corrections per 16 values, and the two f32
/// scales.
#[derive(Clone, Copy)]
pub(super) struct KBlock {
    pub values: [u8; KB],
    pub scales: [i16; KB / KSUM],
    pub corrections: [i16; KB / KSUM],
    pub d: f32,
    pub dmin: f32,
}

impl KBlock {
    const EMPTY: Self = Self {
        values: [0; KB],
        scales: [0; KB / KSUM],
        corrections: [0; KB / KSUM],
        d: 0.0,
        dmin: 0.0,
    };
}

/// [`kquads`] for `G` groups of activation rows, scales laid out as
/// `SCALES` says.
#[inline(always)]
unsafe fn kquads_pass<const G: usize, const SCALES: u8>(
    kind: QuantKind,
    w: &[u8],
    row_bytes: usize,
    x: &QuantizedActivations,
    pass: Pass,
    res: &mut [f32],
) {
    let bytes = kind.block_bytes();
    let blocks = x.cols() / KB;
    let (qs, ss, bs) = k_quad_rows::<G>(x, pass, blocks);
    let mut span = [KBlock::EMPTY; K_SPAN];
    let mut q = [_mm256_setzero_si256(); 8];
    let mut s = [_mm256_setzero_si256(); 8];
    for (k, wr) in w.chunks_exact(row_bytes).enumerate() {
        let mut acc = [_mm256_setzero_ps(); G];
        for (si, wspan) in wr.chunks(K_SPAN * bytes).enumerate() {
            let n = wspan.len() / bytes;
            for (blk, wb) in span.iter_mut().zip(wspan.chunks_exact(bytes)) {
                prefetch_ahead(wb);
                let (sc, c, d, dc) = k_scales(kind, wb);
                k_block(kind, wb, &mut q, &mut s, &sc);
                for (j, v) in q.iter().enumerate() {
                    _mm256_storeu_si256(blk.values[32 * j..].as_mut_ptr().cast(), *v);
                }
                // 6-bit scales and minimums, Q6_K's i8 scales and its
                // 32 × scale corrections fit i16.
                blk.scales = std::array::from_fn(|g| sc[g] as i16);
                blk.corrections = std::array::from_fn(|g| c[g] as i16);
                (blk.d, blk.dmin) = (d, dc);
            }
            for (b, blk) in span[..n].iter().enumerate() {
                let at = si * K_SPAN + b;
                k_block_products::<G, SCALES>(blk, &qs, &ss, &bs, at, &mut acc);
            }
        }
        store_groups::<G, false>(&acc, pass, k, res);
    }
}

/// [`kquads`] for Q5_K or Q6_K rows interleaved eight at a time (`data`,
/// whole groups of `cols` columns): `res[j × tile.len() + k] =
/// w_{tile.start + k} · x_{first + j}`, by activation row as the group
/// kernels. Each group block is unpacked into its eight rows' K
/// blocks at once (`rows8::q5k_group_blocks`, `rows8::q6k_group_blocks`: a
/// transpose of its 4-byte lanes), and each row's block meets every
/// activation row as a plain row's would, so a step of many rows pays the
/// plain kernel's products, not the group kernel's (one thread, 2048²,
/// against the plain layout: Q6_K 0.99-1.02× at 16 rows, 1.00-1.09× at 64
/// to 512, where the group kernel ran 0.75-0.81×; Q5_K 0.99-1.06× at 16 to
/// 512; two threads, Q6_K, 512 rows of 8192 × 2048 and 2048 × 8192, before
/// the scales were gathered by vector transposes: 0.95× and 1.01×).
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(in super::super) unsafe fn kquads_interleaved(
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
    for (pass, groups) in passes(tile.len(), first, res.len()) {
        let (tile, data) = (tile.clone(), Interleaved { data, cols });
        match (kind == QuantKind::Q6_K, groups) {
            (true, 1) => unpacked_pass::<1, true>(data, tile, x, pass, res),
            (true, 2) => unpacked_pass::<2, true>(data, tile, x, pass, res),
            (true, 3) => unpacked_pass::<3, true>(data, tile, x, pass, res),
            (true, _) => unpacked_pass::<4, true>(data, tile, x, pass, res),
            (false, 1) => unpacked_pass::<1, false>(data, tile, x, pass, res),
            (false, 2) => unpacked_pass::<2, false>(data, tile, x, pass, res),
            (false, 3) => unpacked_pass::<3, false>(data, tile, x, pass, res),
            (false, _) => unpacked_pass::<4, false>(data, tile, x, pass, res),
        }
    }
}

/// An interleaved matrix's bytes and its columns.
#[derive(Clone, Copy)]
struct Interleaved<'a> {
    data: &'a [u8],
    cols: usize,
}

/// [`kquads_interleaved`] for `G` groups of activation rows, Q6_K rows
/// with `SIX` (else Q5_K).
#[inline(always)]
unsafe fn unpacked_pass<const G: usize, const SIX: bool>(
    w: Interleaved<'_>,
    tile: Range<usize>,
    x: &QuantizedActivations,
    pass: Pass,
    res: &mut [f32],
) {
    let block = if SIX { K6_GROUP_BLOCK } else { K5_GROUP_BLOCK };
    let blocks = w.cols / KB;
    let group_bytes = blocks * block;
    let (qs, ss, bs) = k_quad_rows::<G>(x, pass, blocks);
    let mut rows = [KBlock::EMPTY; GROUP];
    for g in tile.start / GROUP..tile.end.div_ceil(GROUP) {
        let wg = &w.data[g * group_bytes..(g + 1) * group_bytes];
        let mut acc = [[_mm256_setzero_ps(); G]; GROUP];
        for (b, wb) in wg.chunks_exact(block).enumerate() {
            if SIX {
                q6k_group_blocks(wb, &mut rows);
            } else {
                q5k_group_blocks(wb, &mut rows);
            }
            for (blk, acc) in rows.iter().zip(acc.iter_mut()) {
                if SIX {
                    k_block_products::<G, PER_16>(blk, &qs, &ss, &bs, b, acc);
                } else {
                    k_block_products::<G, PER_32>(blk, &qs, &ss, &bs, b, acc);
                }
            }
        }
        for (lane, acc) in acc.iter().enumerate() {
            let r = g * GROUP + lane;
            if tile.contains(&r) {
                store_groups::<G, true>(acc, pass, r - tile.start, res);
            }
        }
    }
}

/// A pass's `G` groups of Q8_K activation quads over `blocks` K blocks:
/// their values, scales and sums of 16.
#[allow(clippy::type_complexity)]
fn k_quad_rows<const G: usize>(
    x: &QuantizedActivations,
    pass: Pass,
    blocks: usize,
) -> ([&[i8]; G], [&[f32]; G], [&[i16]; G]) {
    (
        std::array::from_fn(|g| &x.quad_values(pass.group + g)[..blocks * QUAD * KB]),
        std::array::from_fn(|g| &x.quad_scales(pass.group + g)[..blocks * LINE]),
        std::array::from_fn(|g| &x.quad_bsums(pass.group + g)[..blocks * QUAD * (KB / KSUM)]),
    )
}

/// One unpacked K block (`blk`) against `G` groups' block `at`, added to
/// `acc`.
#[inline(always)]
unsafe fn k_block_products<const G: usize, const SCALES: u8>(
    blk: &KBlock,
    qs: &[&[i8]; G],
    ss: &[&[f32]; G],
    bs: &[&[i16]; G],
    at: usize,
    acc: &mut [__m256; G],
) {
    // Fixed-size blocks: each sub-block's and chunk's slice below is then
    // inside by its constant bounds, with no test per sub-block and group
    // (the loop tested all `G` slices on each of its eight turns).
    let xq: [&[i8; QUAD * KB]; G] = std::array::from_fn(|g| {
        qs[g][at * QUAD * KB..]
            .first_chunk()
            .expect("the activation quads hold every block of the row")
    });
    let mut isum = [_mm256_setzero_si256(); G];
    let vp = blk.values.as_ptr();
    for j in 0..8 {
        // SAFETY: `j < 8`, so the 32 values of sub-block `j` are inside
        // the block's 256.
        let wv: [__m256i; 4] = std::array::from_fn(|c| unsafe {
            _mm256_set1_epi64x(
                vp.add(32 * j + c * QUAD_CHUNK)
                    .cast::<i64>()
                    .read_unaligned(),
            )
        });
        // Signed values go in as their magnitude (the activations take
        // their sign below).
        let aw: [__m256i; 4] = if SCALES == SIGNED {
            std::array::from_fn(|c| _mm256_sign_epi8(wv[c], wv[c]))
        } else {
            wv
        };
        // Q4_K, Q5_K and IQ4_XS: one scale for the 32 values (both of its
        // 16s).
        let low = _mm256_set1_epi16(blk.scales[2 * j]);
        let high = _mm256_set1_epi16(blk.scales[2 * j + 1]);
        for (g, xg) in xq.iter().enumerate() {
            let xs = &xg[32 * j * QUAD..32 * (j + 1) * QUAD];
            let p: [__m256i; 4] = std::array::from_fn(|c| {
                let xc = _mm256_loadu_si256(xs[c * QB..(c + 1) * QB].as_ptr().cast());
                let xc = if SCALES == SIGNED {
                    _mm256_sign_epi8(xc, wv[c])
                } else {
                    xc
                };
                _mm256_maddubs_epi16(aw[c], xc)
            });
            let widened = match SCALES {
                PER_16 => _mm256_add_epi32(
                    _mm256_madd_epi16(_mm256_add_epi16(p[0], p[1]), low),
                    _mm256_madd_epi16(_mm256_add_epi16(p[2], p[3]), high),
                ),
                // Pairs of up to 2 × 127 × 127: no two chunks add in i16.
                SIGNED => _mm256_add_epi32(
                    _mm256_add_epi32(_mm256_madd_epi16(p[0], low), _mm256_madd_epi16(p[1], low)),
                    _mm256_add_epi32(_mm256_madd_epi16(p[2], low), _mm256_madd_epi16(p[3], low)),
                ),
                _ => {
                    let (first, second) =
                        (_mm256_add_epi16(p[0], p[1]), _mm256_add_epi16(p[2], p[3]));
                    _mm256_madd_epi16(_mm256_add_epi16(first, second), low)
                }
            };
            isum[g] = _mm256_add_epi32(isum[g], widened);
        }
    }
    let (d, dmin) = (_mm256_set1_ps(blk.d), _mm256_set1_ps(blk.dmin));
    if SCALES == SIGNED {
        // No minimums to pay.
        for g in 0..G {
            let dx = _mm256_loadu_ps(ss[g][at * LINE..][..QUAD * 2].as_ptr());
            acc[g] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[g]), _mm256_mul_ps(d, dx), acc[g]);
        }
        return;
    }
    let cp = blk.corrections.as_ptr();
    // SAFETY: `c < 4`, so each four corrections are inside the sixteen.
    let cv: [__m256i; 4] = std::array::from_fn(|c| unsafe {
        _mm256_set1_epi64x(cp.add(4 * c).cast::<i64>().read_unaligned())
    });
    for g in 0..G {
        let sums = &bs[g][at * QUAD * (KB / KSUM)..][..QUAD * (KB / KSUM)];
        let mut corr = _mm256_setzero_si256();
        for (c, cc) in cv.iter().enumerate() {
            let v = _mm256_loadu_si256(sums[c * 16..(c + 1) * 16].as_ptr().cast());
            corr = _mm256_add_epi32(corr, _mm256_madd_epi16(*cc, v));
        }
        let dx = _mm256_loadu_ps(ss[g][at * LINE..][..QUAD * 2].as_ptr());
        acc[g] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[g]), _mm256_mul_ps(d, dx), acc[g]);
        acc[g] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(corr), _mm256_mul_ps(dmin, dx), acc[g]);
    }
}
