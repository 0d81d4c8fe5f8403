//! Products of interleaved weights ([`interleave`](super::super::interleave))
//! with 8-bit activations: each 32-byte load holds four bytes of each of
//! eight weight rows, one per 32-bit lane, so `maddubs` against four
//! activation bytes broadcast to every lane gives all eight rows' sums in
//! their own lanes, and one vector of the rows' eight f16 scales (one
//! F16C conversion) scales them. No horizontal sums: a block costs one FMA
//! per activation row for all eight weight rows.
//!
//! The kernels are written once over [`Dot`], the step they repeat, and
//! compiled once per instruction set (see `instances!`): AVX2 takes
//! `maddubs` and `madd`, the VNNI sets `vpdpbusd`.
//!
//! Q4_K's and Q5_K's group kernel lives in [`qk`], Q6_K's in [`q6k`],
//! IQ4_XS's (and its wide form) in [`iq4`], Q2_K's and Q3_K's (and
//! theirs) in [`k16`];
//! [`unpack`] turns Q5_K and Q6_K group blocks into plain K blocks for the
//! quad kernel on many rows.

use std::arch::x86_64::*;
use std::ops::Range;

use pagoda_core::QuantKind;

use crate::Isa;

use super::super::act::{ActFormat, QuantizedActivations, QB};
use super::super::interleave::{
    interleaved_len, GROUP, K4_DMIN, K4_GROUP_BLOCK, K4_MINS, K4_QS, K4_SCALES, K5_GROUP_BLOCK,
    K5_QH, K5_QS,
};
use super::dot::{Avx2Dot, Dot, EvexVnni, VexVnni};

mod iq4;
mod k16;
mod q6k;
mod q8_0;
mod qk;
mod unpack;
mod wide;

use super::{e8m0_halves, load32, mxfp4_unsigned, prefetch_block_at, MXFP4_OFFSET};
use iq4::group_iq4_xs;
use k16::group_k16;
use q6k::group_q6k;
use q8_0::{group_q8_0, Backs, SIGN_TRICK_MAX_ROWS, TILE_BACKS};
use qk::group_qk;
pub(super) use unpack::{q5k_group_blocks, q6k_group_blocks};

/// Whether [`interleaved`] takes `kind` weights against `x`: every
/// interleaved type against its activation format, at any row count (Q5_K
/// and Q6_K past [`GROUP_KERNEL_MAX_ROWS`] by the quad kernel on unpacked
/// groups; the copy back to plain rows that Q5_K took from 16 rows ran
/// 0.65× the plain layout at 16 rows, 0.88-0.91× at 64, one thread, 2048²).
pub(in super::super) fn takes_interleaved(kind: QuantKind, x: &QuantizedActivations) -> bool {
    match kind {
        QuantKind::Q4_0 | QuantKind::Q5_0 | QuantKind::Q8_0 | QuantKind::MXFP4 => {
            x.format() == ActFormat::Q8_0
        }
        QuantKind::Q4_1 | QuantKind::Q5_1 => x.format() == ActFormat::Q8_1,
        QuantKind::Q2_K
        | QuantKind::Q3_K
        | QuantKind::Q4_K
        | QuantKind::Q5_K
        | QuantKind::Q6_K
        | QuantKind::IQ4_XS => x.format() == ActFormat::Q8_K,
        _ => false,
    }
}

/// Activation rows up to which Q5_K and Q6_K products take the group
/// kernel: past them, the quad kernel on each group's rows unpacked
/// together ([`kquads_interleaved`](super::quads::kquads_interleaved)),
/// whose products serve four activation rows per weight load. One thread,
/// 2048², against the plain layout (alternating runs, medians):
///
/// | rows | Q6_K group | Q6_K unpacked | Q5_K group | Q5_K unpacked |
/// |---|---|---|---|---|
/// | 1-4 | 1.35-1.48× | | | |
/// | 8 | 0.82-0.95× | 0.80-0.85× * | 1.34× | 1.01× * |
/// | 16 | 0.75-0.81× | 0.99-1.02× | 0.98× | 0.99× |
/// | 64 | 0.76-0.81× | 1.00-1.03× | 1.02× | 1.06× |
/// | 512 | | 1.02-1.09× | | 1.04× |
///
/// Unpacked groups gather their scales by vector transposes; the figures
/// marked * are from before, when they gathered them byte by byte. With
/// the transposes, at 5, 6 and 8 rows they ran 0.76×, 0.73× and 0.99× the
/// group kernel for Q6_K, 0.61×, 0.78× and 0.89× for Q5_K.
///
/// Q4_K keeps its group kernel (1.27×, 1.09× and 1.12× at 8, 16 and 64
/// rows, where unpacked groups gave 1.04×, 1.08× and 1.08×; with the scales
/// gathered by vector transposes, unpacked groups ran 0.87×, 1.05×, 0.94×
/// and 0.93× the group kernel at 8, 16, 64 and 512 rows; since its chunk
/// loop is unrolled (`unroll8!`) the group kernel runs 1.16-1.25× what it
/// did at 16 to 512 rows, so the gap only grew).
///
/// On AVX-512 VNNI the wide group kernels ([`wide`]) take every row count
/// from two: Llama-3.2-1B Q4_K_M prefilled 512 tokens at 1.13× and Q5_K_M
/// at 1.75× what the wide kernels up to eight rows and unpacked groups
/// past them gave (2 threads, Zen 5).
const GROUP_KERNEL_MAX_ROWS: usize = 8;

/// Whether [`interleaved`] multiplies `kind` rows against `m` activation
/// rows of `x` by the quad kernel on each group's rows unpacked together
/// ([`kquads_interleaved`](super::quads::kquads_interleaved)) rather than
/// by the group kernel: Q5_K and Q6_K past [`GROUP_KERNEL_MAX_ROWS`].
fn takes_unpacked_groups(kind: QuantKind, x: &QuantizedActivations, m: usize) -> bool {
    matches!(kind, QuantKind::Q5_K | QuantKind::Q6_K) && x.has_quads() && m > GROUP_KERNEL_MAX_ROWS
}

/// Activation rows one kernel call takes: each kernel is built for 1 to 4
/// (its sums for four rows fit the 16 vector registers beside a block's
/// unpacked weights), Q8_0's for 1 to [`Q8_0_ROWS_PER_CALL`].
const ROWS_PER_CALL: usize = 4;

/// Activation rows one Q8_0 kernel call takes. Its weights need no
/// unpacking, so eight rows' sums fit the registers beside a chunk, its
/// `|w|` and its sign mask, and each chunk's load and those two serve
/// twice the rows.
const Q8_0_ROWS_PER_CALL: usize = 8;

/// A group kernel call's sums, `[j][lane]`, for up to
/// [`Q8_0_ROWS_PER_CALL`] activation rows (the others fill four).
type GroupSums = [[f32; GROUP]; Q8_0_ROWS_PER_CALL];

/// Activation rows one group kernel call takes for `kind` weights.
fn rows_per_call(kind: QuantKind) -> usize {
    if kind == QuantKind::Q8_0 {
        Q8_0_ROWS_PER_CALL
    } else {
        ROWS_PER_CALL
    }
}

/// `$kernel::<N>` (or `::<N, FLAGS...>`) for `N` = `$n` rows, 1 to
/// [`ROWS_PER_CALL`]: one instance per row count, so each keeps its sums in
/// registers.
macro_rules! by_rows {
    ($n:expr, $kernel:ident $(, $flag:literal)*; $($arg:expr),*) => {
        match $n {
            1 => $kernel::<1 $(, $flag)*>($($arg),*),
            2 => $kernel::<2 $(, $flag)*>($($arg),*),
            3 => $kernel::<3 $(, $flag)*>($($arg),*),
            _ => $kernel::<4 $(, $flag)*>($($arg),*),
        }
    };
}

/// [`by_rows!`] for 1 to [`Q8_0_ROWS_PER_CALL`] rows.
macro_rules! by_rows8 {
    ($n:expr, $kernel:ident; $($arg:expr),*) => {
        match $n {
            1 => $kernel::<1>($($arg),*),
            2 => $kernel::<2>($($arg),*),
            3 => $kernel::<3>($($arg),*),
            4 => $kernel::<4>($($arg),*),
            5 => $kernel::<5>($($arg),*),
            6 => $kernel::<6>($($arg),*),
            7 => $kernel::<7>($($arg),*),
            _ => $kernel::<8>($($arg),*),
        }
    };
}

/// `sums[j][lane]` for one group of eight interleaved rows (`w`) against
/// `n` (1 to [`rows_per_call`]) activation rows from `first`, by the
/// group kernel for the weights' type (Q8_0's on AVX2 also taking the
/// group's [`Backs`]).
type GroupKernel = unsafe fn(
    QuantKind,
    &[u8],
    &QuantizedActivations,
    usize,
    usize,
    usize,
    Backs<'_>,
    &mut GroupSums,
);

/// Compiles the group kernels for one instruction set: module `$module`
/// holds `group` (a [`GroupKernel`]) and one function per kernel and row
/// count, each built with `$features` and kept out of line so that it keeps
/// its sums in registers, around the shared bodies taking `$dot`.
macro_rules! instances {
    ($module:ident, $dot:ty, $features:literal) => {
        mod $module {
            use super::*;

            /// A [`GroupKernel`] on this set.
            ///
            /// # Safety
            /// The CPU must have the set's extensions.
            #[target_feature(enable = $features)]
            #[allow(clippy::too_many_arguments)]
            pub(super) unsafe fn group(
                kind: QuantKind,
                w: &[u8],
                x: &QuantizedActivations,
                at: usize,
                n: usize,
                ahead: usize,
                backs: Backs<'_>,
                sums: &mut GroupSums,
            ) {
                match kind {
                    QuantKind::Q4_K => by_rows!(n, group_qk, false; w, x, at, ahead, sums),
                    QuantKind::Q5_K => by_rows!(n, group_qk, true; w, x, at, ahead, sums),
                    QuantKind::Q6_K => by_rows!(n, group_q6k; w, x, at, ahead, sums),
                    QuantKind::IQ4_XS => by_rows!(n, group_iq4_xs; w, x, at, ahead, sums),
                    QuantKind::Q2_K => by_rows!(n, group_k16, false; w, x, at, ahead, sums),
                    QuantKind::Q3_K => by_rows!(n, group_k16, true; w, x, at, ahead, sums),
                    QuantKind::Q4_0 => by_rows!(n, group_q4, false, false, false; w, x, at, ahead, sums),
                    QuantKind::Q4_1 => by_rows!(n, group_q4, true, false, false; w, x, at, ahead, sums),
                    QuantKind::Q5_0 => by_rows!(n, group_q4, false, true, false; w, x, at, ahead, sums),
                    QuantKind::Q5_1 => by_rows!(n, group_q4, true, true, false; w, x, at, ahead, sums),
                    QuantKind::MXFP4 => by_rows!(n, group_q4, false, false, true; w, x, at, ahead, sums),
                    _ => by_rows8!(n, group_q8_0; w, x, at, ahead, backs, sums),
                }
            }

            #[target_feature(enable = $features)]
            #[inline(never)]
            unsafe fn group_q4<const N: usize, const MIN: bool, const FIVE: bool, const TABLE: bool>(
                w: &[u8],
                x: &QuantizedActivations,
                first: usize,
                ahead: usize,
                sums: &mut GroupSums,
            ) {
                super::group_q4::<$dot, N, MIN, FIVE, TABLE>(w, x, first, ahead, sums)
            }

            #[target_feature(enable = $features)]
            #[inline(never)]
            unsafe fn group_q8_0<const N: usize>(
                w: &[u8],
                x: &QuantizedActivations,
                first: usize,
                ahead: usize,
                backs: Backs<'_>,
                sums: &mut GroupSums,
            ) {
                super::group_q8_0::<$dot, N>(w, x, first, ahead, backs, sums)
            }

            #[target_feature(enable = $features)]
            #[inline(never)]
            unsafe fn group_q6k<const N: usize>(
                w: &[u8],
                x: &QuantizedActivations,
                first: usize,
                ahead: usize,
                sums: &mut GroupSums,
            ) {
                super::group_q6k::<$dot, N>(w, x, first, ahead, sums)
            }

            #[target_feature(enable = $features)]
            #[inline(never)]
            unsafe fn group_k16<const N: usize, const THREE: bool>(
                w: &[u8],
                x: &QuantizedActivations,
                first: usize,
                ahead: usize,
                sums: &mut GroupSums,
            ) {
                super::group_k16::<$dot, N, THREE>(w, x, first, ahead, sums)
            }

            #[target_feature(enable = $features)]
            #[inline(never)]
            unsafe fn group_iq4_xs<const N: usize>(
                w: &[u8],
                x: &QuantizedActivations,
                first: usize,
                ahead: usize,
                sums: &mut GroupSums,
            ) {
                super::group_iq4_xs::<$dot, N>(w, x, first, ahead, sums)
            }

            #[target_feature(enable = $features)]
            #[inline(never)]
            unsafe fn group_qk<const N: usize, const FIVE: bool>(
                w: &[u8],
                x: &QuantizedActivations,
                first: usize,
                ahead: usize,
                sums: &mut GroupSums,
            ) {
                super::group_qk::<$dot, N, FIVE>(w, x, first, ahead, sums)
            }
        }
    };
}

instances!(avx2, Avx2Dot, "avx2,fma,f16c");
instances!(avxvnni, VexVnni, "avx2,fma,f16c,avxvnni");
instances!(
    avx512vnni,
    EvexVnni,
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni"
);

/// `res[j × tile.len() + k] = w_{tile.start + k} · x_{first + j}` (by
/// activation row, as the output) for the rows of `tile` and `m =
/// res.len() / tile.len()` activation rows, from the interleaved matrix
/// `data` (rows of `cols` `kind` elements), by `isa`'s kernels (AVX2's for
/// any set without its own). Whole groups are computed; rows outside
/// `tile` are not stored.
///
/// # Safety
/// The CPU must have every extension of `isa`, and AVX2, FMA and F16C.
#[allow(clippy::too_many_arguments)]
pub(in super::super) unsafe fn interleaved(
    isa: Isa,
    kind: QuantKind,
    data: &[u8],
    cols: usize,
    tile: Range<usize>,
    x: &QuantizedActivations,
    first: usize,
    res: &mut [f32],
) {
    let m = res.len().checked_div(tile.len()).unwrap_or(0);
    if isa == Isa::Avx512Vnni && m >= wide::MIN_ROWS {
        // SAFETY: the caller's CPU has AVX-512 VNNI with F, BW and VL.
        return unsafe { wide::by_pairs(kind, data, cols, tile, x, first, res) };
    }
    if takes_unpacked_groups(kind, x, m) {
        // SAFETY: every set here has AVX2, FMA and F16C.
        return unsafe { super::quads::kquads_interleaved(kind, data, cols, tile, x, first, res) };
    }
    let (group, keeps_backs): (GroupKernel, bool) = match isa {
        Isa::AvxVnni => (avxvnni::group, false),
        Isa::Avx512Vnni => (avx512vnni::group, false),
        _ => (avx2::group, kind == QuantKind::Q8_0),
    };
    // SAFETY: the caller's CPU has `isa`'s extensions, which `group` was
    // compiled with.
    unsafe { by_groups(group, keeps_backs, kind, data, cols, tile, x, first, res) }
}

/// [`interleaved`] by the group kernel `group`; with `keeps_backs`, the
/// tile's [`Backs`] are kept in the thread's [`TILE_BACKS`]: worked out
/// on the first pass over the tile (`first == 0`, or a tile other than
/// the one kept), read on the later ones.
///
/// # Safety
/// The CPU must have the extensions `group` was compiled with.
#[allow(clippy::too_many_arguments)]
unsafe fn by_groups(
    group: GroupKernel,
    keeps_backs: bool,
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
    let per_call = rows_per_call(kind);
    let groups = tile.start / GROUP..tile.end.div_ceil(GROUP);
    let keeps = keeps_backs && m > SIGN_TRICK_MAX_ROWS;
    let blocks = if keeps { cols / QB } else { 0 };
    let key = (
        data.as_ptr() as usize,
        data.len(),
        cols,
        groups.start,
        groups.end,
    );
    TILE_BACKS.with(|kept| {
        let mut kept = kept.borrow_mut();
        let fresh = first == 0 || kept.tile != Some(key);
        if keeps && fresh {
            kept.tile = None;
            kept.sums.clear();
            kept.sums.resize(groups.len() * blocks, [0; GROUP]);
        }
        for (i, g) in groups.clone().enumerate() {
            let w = &data[g * group_bytes..(g + 1) * group_bytes];
            // Sized for the tile above, or by the fresh pass that kept
            // them for this same tile; empty (0 blocks) when not kept.
            let backs = &mut kept.sums[i * blocks..(i + 1) * blocks];
            for j0 in (0..m).step_by(per_call) {
                let n = (m - j0).min(per_call);
                let ahead = hint_distance(kind, first, j0, group_bytes);
                let backs = match (keeps, fresh && j0 == 0) {
                    (false, _) => Backs::Work,
                    (true, true) => Backs::Keep(&mut *backs),
                    (true, false) => Backs::Read(&*backs),
                };
                let mut sums = [[0.0f32; GROUP]; Q8_0_ROWS_PER_CALL];
                // SAFETY: the caller's CPU has the extensions `group` was
                // compiled with; it slices its inputs with bounds checks.
                unsafe { group(kind, w, x, first + j0, n, ahead, backs, &mut sums) };
                store_lanes(res, &tile, g * GROUP..(g + 1) * GROUP, j0, &sums[..n]);
            }
        }
        if keeps && fresh {
            kept.tile = Some(key);
        }
    });
}

/// How far ahead of the block in hand a row loop's kernel call asks the
/// cache for weights: [`PREFETCH_AHEAD`](super::PREFETCH_AHEAD) bytes (0,
/// the block in hand, where the CPU does better without; see `hints`),
/// except on the later calls (`j0 > 0`) of a tile's first pass of
/// activation rows (`first == 0`), which ask for the same place in the next
/// group (or pair of groups), `stride` bytes on.
///
/// Only the first call over a group finds it out of cache. With every call
/// hinting a fixed distance ahead, the first call waited on memory while
/// the later ones, working from cache, left it idle; pointed at the next
/// group, the later calls fetch it while they compute. 16 sequences
/// decoding Llama-3.2-1B after a shared prompt: Q4_0 303 → 363-368 tok/s,
/// Q4_K_M 301 → 349-351, Q8_0 306 → 352-355 (2 threads, Zen 5, AVX-512
/// VNNI, alternating runs); prefill and decode unchanged. On an AVX2-only
/// Zen 4 (the group kernels): Q4_0 1.03x, Q4_K_M 1.07x, Q8_0 0.97x, inside
/// the ±5% two builds of the same Q8_0 code gave there. Later passes of
/// activation rows find the tile in cache, and decode makes one call.
pub(super) fn hint_distance(kind: QuantKind, first: usize, j0: usize, stride: usize) -> usize {
    if first == 0 && j0 > 0 {
        stride
    } else if super::hints::fixed_hints(kind) {
        super::PREFETCH_AHEAD
    } else {
        0
    }
}

/// Stores `sums[j][lane]`, the products of weight rows `rows` (lane 0 is
/// `rows.start`; `rows` may be shorter than `L`, as the wide kernels' odd
/// last group paired with itself is, whose second eight lanes are not its
/// rows) with activation rows `j0..j0 + sums.len()`, into `res` by
/// activation row (`res[j × tile.len() + k]` for row `tile.start + k`):
/// the lanes inside `tile` only (all but at a tile's ragged ends), one
/// contiguous run per activation row. Stored by weight row instead, as
/// the plain kernels store, the sums' floats went one to a place `m`
/// apart, and the tile's copy to the output read them back that way: no
/// stores at all made a 128-row product 1.04× faster in Q8_0 and 1.07× in
/// Q4_0 (one thread, 2048²).
fn store_lanes<const L: usize>(
    res: &mut [f32],
    tile: &Range<usize>,
    rows: Range<usize>,
    j0: usize,
    sums: &[[f32; L]],
) {
    let runs = res.chunks_exact_mut(tile.len()).skip(j0).zip(sums);
    if rows.len() == L && tile.start <= rows.start && rows.end <= tile.end {
        // Every lane a row of the tile (all but at a tile's ragged ends and
        // an odd last group): a copy of constant length, a few vector
        // moves.
        let at = rows.start - tile.start;
        for (out, row) in runs {
            out[at..at + L].copy_from_slice(row);
        }
        return;
    }
    let (lo, hi) = (rows.start.max(tile.start), rows.end.min(tile.end));
    for (out, row) in runs {
        for (o, &v) in out[lo - tile.start..hi - tile.start]
            .iter_mut()
            .zip(&row[lo - rows.start..])
        {
            *o = v;
        }
    }
}

/// The four bytes of `x` from `at` in every 32-bit lane.
#[inline(always)]
unsafe fn broadcast4(x: &[i8], at: usize) -> __m256i {
    let b = &x[at..at + 4];
    _mm256_set1_epi32(i32::from_le_bytes([
        b[0] as u8, b[1] as u8, b[2] as u8, b[3] as u8,
    ]))
}

/// Runs `$body` eight times with `$k` bound to 0 to 7 as a constant: a
/// block's chunk loop, unrolled so that each chunk's addresses and its
/// prefetch test fold to constants. Left to the compiler, the loop spent
/// about one instruction in five on its counter, the activation rows'
/// addresses and the test: Q4_K from 16 to 512 rows ran 1.16-1.25× faster
/// unrolled (one thread, 2048², paired alternating runs), 0.94-1.01× at one.
macro_rules! unroll8 {
    ($k:ident, $body:block) => {
        unroll8!(@ $k, $body, 0, 1, 2, 3, 4, 5, 6, 7)
    };
    (@ $k:ident, $body:block, $($v:literal),*) => {
        $({
            let $k: usize = $v;
            $body
        })*
    };
}
use unroll8;

/// One group of eight interleaved Q4_0 rows (`w`, every block) against `N`
/// activation rows from `first`: `sums[j][lane]`; Q4_1 rows with `MIN`,
/// Q5_0 and Q5_1 rows with `FIVE`. The values are multiplied unsigned
/// (0..15, or 0..31 with the fifth bit). Q4_0's −8 (Q5_0's −16) is taken
/// back exactly from the activation block's `Σ q`; Q4_1's (Q5_1's) minimum
/// `m` adds `m × dx × Σ q` (the Q8_1 block's `s`). A fifth bit comes from
/// the group's bit bytes ([`q5_lane_bits`](super::super::interleave)): one
/// shift of their load by `2c` brings chunk `c`'s to bits 0 (low nibbles)
/// and 1 (high nibbles) of each byte. Without VNNI, `maddubs` pair sums
/// add in i16: each is at most 2 × 15 × 127 = 3,810 (eight add to 30,480),
/// or with fifth bits 2 × 31 × 127 = 7,874 (four add to 31,496, so the low
/// and high nibbles' sums are kept apart).
#[inline(always)]
unsafe fn group_q4<D: Dot, const N: usize, const MIN: bool, const FIVE: bool, const TABLE: bool>(
    w: &[u8],
    x: &QuantizedActivations,
    first: usize,
    ahead: usize,
    sums: &mut GroupSums,
) {
    // The scales (and minimums, and fifth bits; MXFP4's exponent bytes),
    // then the nibbles.
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
    let table = mxfp4_unsigned();
    let blocks = w.len() / block;
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
    let low = _mm256_set1_epi8(0x0f);
    let fifth = _mm256_set1_epi8(0x10);
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm256_setzero_ps(); N];
    for b in 0..blocks {
        let wb = &w[b * block..b * block + block];
        prefetch_block_at(wb, ahead);
        let dw = if TABLE {
            e8m0_halves(&wb[..GROUP])
        } else {
            _mm256_cvtph_ps(_mm_loadu_si128(wb[..16].as_ptr().cast()))
        };
        let mw = if MIN {
            _mm256_cvtph_ps(_mm_loadu_si128(wb[16..32].as_ptr().cast()))
        } else {
            _mm256_setzero_ps()
        };
        let bits = if FIVE {
            load32(&wb[head..head + 32])
        } else {
            _mm256_setzero_si256()
        };
        let mut lo = [_mm256_setzero_si256(); 4];
        let mut hi = [_mm256_setzero_si256(); 4];
        for c in 0..4 {
            let v = load32(&wb[qs_at + 32 * c..qs_at + 32 + 32 * c]);
            lo[c] = _mm256_and_si256(v, low);
            hi[c] = _mm256_and_si256(_mm256_srli_epi16::<4>(v), low);
            if FIVE {
                let h = _mm256_srl_epi16(bits, _mm_cvtsi32_si128(2 * c as i32));
                lo[c] = _mm256_or_si256(lo[c], _mm256_and_si256(_mm256_slli_epi16::<4>(h), fifth));
                hi[c] = _mm256_or_si256(hi[c], _mm256_and_si256(_mm256_slli_epi16::<3>(h), fifth));
            }
            if TABLE {
                // The index's value plus 12: unsigned, 0 to 24.
                lo[c] = _mm256_shuffle_epi8(table, lo[c]);
                hi[c] = _mm256_shuffle_epi8(table, hi[c]);
            }
        }
        for j in 0..N {
            let xb = &qs[j][b * QB..b * QB + QB];
            // Byte i of a lane's four: low nibble value 4c + i, high nibble
            // value 16 + 4c + i (GGUF's order for all four types).
            let mut isum = if D::FUSED {
                // Two chains, so that each waits on half the steps.
                let (mut sl, mut sh) = (_mm256_setzero_si256(), _mm256_setzero_si256());
                for c in 0..4 {
                    sl = D::dot(sl, lo[c], broadcast4(xb, 4 * c));
                    sh = D::dot(sh, hi[c], broadcast4(xb, 16 + 4 * c));
                }
                _mm256_add_epi32(sl, sh)
            } else if FIVE || TABLE {
                // Values to 31 (or 24): four pairs of `maddubs` fill an
                // i16, eight would overflow it.
                let (mut sl, mut sh) = (_mm256_setzero_si256(), _mm256_setzero_si256());
                for c in 0..4 {
                    let (l, h) = (broadcast4(xb, 4 * c), broadcast4(xb, 16 + 4 * c));
                    sl = _mm256_add_epi16(sl, _mm256_maddubs_epi16(lo[c], l));
                    sh = _mm256_add_epi16(sh, _mm256_maddubs_epi16(hi[c], h));
                }
                _mm256_add_epi32(_mm256_madd_epi16(sl, ones), _mm256_madd_epi16(sh, ones))
            } else {
                let mut s16 = _mm256_setzero_si256();
                for c in 0..4 {
                    let (l, h) = (broadcast4(xb, 4 * c), broadcast4(xb, 16 + 4 * c));
                    s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(lo[c], l));
                    s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(hi[c], h));
                }
                _mm256_madd_epi16(s16, ones)
            };
            if !MIN {
                isum = _mm256_sub_epi32(isum, _mm256_set1_epi32(offset * ss[j][b]));
            }
            let scale = _mm256_mul_ps(dw, _mm256_set1_ps(ds[j][b]));
            acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), scale, acc[j]);
            if MIN {
                acc[j] = _mm256_fmadd_ps(mw, _mm256_set1_ps(ms[j][b]), acc[j]);
            }
        }
    }
    for j in 0..N {
        _mm256_storeu_ps(sums[j].as_mut_ptr(), acc[j]);
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::super::dot::EmulatedVnni;
    use super::*;
    use crate::quant::interleave::{interleave, interleaves};

    instances!(fused_on_avx2, EmulatedVnni, "avx2,fma,f16c");

    /// Random `rows × cols` `kind` weights (random bits, with f16 scales
    /// and minimums of 0.001..0.01 at the head of every block),
    /// interleaved, and `n` random activation rows rounded for them.
    pub(super) fn random_case(
        rng: &mut fastrand::Rng,
        kind: QuantKind,
        rows: usize,
        cols: usize,
        n: usize,
    ) -> (Vec<u8>, QuantizedActivations) {
        let (block, values) = (kind.block_bytes(), kind.block_elems());
        let mut data: Vec<u8> = (0..rows * cols / values * block)
            .map(|_| rng.u8(..))
            .collect();
        for b in data.chunks_exact_mut(block) {
            if kind == QuantKind::MXFP4 {
                // An exponent byte: 2^-12 to 2^-6, the subnormal and
                // smallest ones now and then (their own path).
                b[0] = if rng.u8(..16) == 0 {
                    rng.u8(0..3)
                } else {
                    rng.u8(116..123)
                };
                continue;
            }
            for at in [0, 2] {
                let h = half::f16::from_f32(0.001 + 0.009 * rng.f32());
                b[at..at + 2].copy_from_slice(&h.to_bits().to_le_bytes());
            }
        }
        let mut packed = vec![0u8; interleaved_len(kind, rows, cols).unwrap()];
        interleave(kind, rows, cols, &data, &mut packed).unwrap();
        let xs: Vec<f32> = (0..n * cols).map(|_| rng.f32() * 2.0 - 1.0).collect();
        let mut x = QuantizedActivations::new();
        x.quantize(kind, &xs, n, cols).unwrap();
        (packed, x)
    }

    /// The VNNI form of every kernel (its i32 sums, its scales multiplied
    /// as i32) gives AVX2's floats bit for bit: both sums are exact
    /// integers, and the float steps are the same. The one VNNI
    /// instruction itself is checked by `qmatmul_interleaved` on CPUs
    /// that have it. The activation rows go in passes of
    /// [`MAX_ROWS_PER_PASS`](super::super::super::MAX_ROWS_PER_PASS), as
    /// products take them, so that AVX2's Q8_0 kernel both keeps its
    /// [`Backs`] and reads them in later calls and passes.
    #[test]
    fn vnni_kernels_match_avx2_bit_for_bit() {
        if !Isa::Avx2.is_supported() {
            return;
        }
        let per_pass = super::super::super::MAX_ROWS_PER_PASS;
        let mut rng = fastrand::Rng::with_seed(7);
        let kinds = QuantKind::ALL.into_iter().filter(|&k| interleaves(k));
        for kind in kinds {
            for _ in 0..8 {
                let (rows, n) = (rng.usize(1..20), rng.usize(1..3 * per_pass));
                let cols = kind.block_elems() * rng.usize(1..4);
                let (packed, x) = random_case(&mut rng, kind, rows, cols, n);
                let (mut want, mut got) = (vec![0.0f32; rows * n], vec![0.0f32; rows * n]);
                for first in (0..n).step_by(per_pass) {
                    let pass = first * rows..(first + per_pass).min(n) * rows;
                    // SAFETY: the CPU has AVX2, FMA and F16C (checked
                    // above), which both instances were compiled with.
                    unsafe {
                        let want = &mut want[pass.clone()];
                        by_groups(
                            avx2::group,
                            true,
                            kind,
                            &packed,
                            cols,
                            0..rows,
                            &x,
                            first,
                            want,
                        );
                        let got = &mut got[pass];
                        let fused = fused_on_avx2::group;
                        by_groups(fused, false, kind, &packed, cols, 0..rows, &x, first, got);
                    }
                }
                for (k, (a, b)) in got.iter().zip(&want).enumerate() {
                    assert_eq!(a.to_bits(), b.to_bits(), "{kind}: output {k}: {a} vs {b}");
                }
            }
        }
    }
}
