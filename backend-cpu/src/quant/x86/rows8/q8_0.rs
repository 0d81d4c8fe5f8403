//! Q8_0's group kernel ([`group_q8_0`]): eight interleaved rows against up
//! to [`Q8_0_ROWS_PER_CALL`](super::Q8_0_ROWS_PER_CALL) Q8_0 activation
//! rows, and the sums it pays back per block ([`Backs`]), which a thread
//! keeps for the tile in hand ([`TILE_BACKS`]).

use std::arch::x86_64::*;
use std::cell::RefCell;

use super::super::super::act::{QuantizedActivations, QB};
use super::super::super::interleave::GROUP;
use super::super::{load32, prefetch_block_at};
use super::{broadcast4, Dot, GroupSums};

/// What an AVX2 Q8_0 group kernel call on more than
/// [`SIGN_TRICK_MAX_ROWS`] activation rows does with the `Σ |w|` it pays
/// back per block and weight row (as negative sums, one `[i32; 8]` per
/// block; see [`group_q8_0`]). Other kernels ignore it.
pub(super) enum Backs<'a> {
    /// Works them out from the weights and keeps nothing.
    Work,
    /// Works them out and writes them here.
    Keep(&'a mut [[i32; GROUP]]),
    /// Reads them from here, as an earlier call wrote them.
    Read(&'a [[i32; GROUP]]),
}

/// The [`Backs`] of the tile one thread has in hand: they depend on the
/// weights only, so the first pass of activation rows over a tile works
/// them out and the later passes read them. Worked out on every call, they
/// took 6-8% of the kernel's time at 16 and 128 rows (one thread, 2048²).
#[derive(Default)]
pub(super) struct TileBacks {
    /// The tile they are for: the matrix's address and length, its
    /// columns, and the tile's groups.
    pub(super) tile: Option<(usize, usize, usize, usize, usize)>,
    /// `[group in the tile × blocks + block][lane]`.
    pub(super) sums: Vec<[i32; GROUP]>,
}

thread_local! {
    /// Each thread's [`TileBacks`], kept between products as the kernels'
    /// other buffers are.
    pub(super) static TILE_BACKS: RefCell<TileBacks> = RefCell::new(TileBacks::default());
}

/// Activation rows up to which the AVX2 Q8_0 kernel takes the sign trick
/// (`sign(x, w)` against `|w|`: one `sign` per row and chunk, and nothing
/// per chunk beside `|w|`); past them, the `xor` form (see
/// [`group_q8_0`]), whose per-chunk work for all rows is larger but whose
/// per-row work runs on more pipes. One thread, 2048², against the sign
/// trick at four rows a call (AVX2-only Zen 4, alternating runs, medians):
/// at one and four rows the `xor` form ran 0.82× and 0.70×; at 8, 16 and
/// 128 rows, eight rows a call, 1.11×, 1.12× and 1.12× with the paid-back
/// sums worked out in every call.
pub(super) const SIGN_TRICK_MAX_ROWS: usize = 4;

/// [`group_q4`](super::group_q4) for Q8_0 weights: signed bytes, against up to
/// [`Q8_0_ROWS_PER_CALL`](super::Q8_0_ROWS_PER_CALL) activation rows. `maddubs` needs one side
/// unsigned. Without VNNI, up to [`SIGN_TRICK_MAX_ROWS`] rows take the
/// sign trick (`|w|` against `x` with `w`'s sign). Past them, each chunk's
/// `|w|` and sign mask `n` (−1 where `w < 0`) serve all rows, each row's
/// bytes are flipped by `x ^ n` (`−x − 1` where `w < 0`, by an `xor`, which
/// runs on twice the pipes `sign` does) and the block pays back `Σ |w|` of
/// its negative weights per weight row ([`Backs`]: one more `maddubs` per
/// chunk, `|w|` against `n`, unless an earlier call kept them). A pair
/// reaches at most 2 × 128 × 128 = 2¹⁵ in magnitude, negative (`|w| =
/// 128`, `x ^ n = −128`), so nothing saturates for any byte. With VNNI,
/// whose sums are i32, the weights are made unsigned once for all rows
/// (`w + 128`, by flipping the top bit) and the block pays back `128 × Σ
/// x` from the activation's block sums: one instruction per activation
/// row.
#[inline(always)]
pub(super) unsafe fn group_q8_0<D: Dot, const N: usize>(
    w: &[u8],
    x: &QuantizedActivations,
    first: usize,
    ahead: usize,
    mut backs: Backs<'_>,
    sums: &mut GroupSums,
) {
    const BLOCK: usize = GROUP * 34;
    let blocks = w.len() / BLOCK;
    let mut qs: [&[i8]; N] = [&[]; N];
    let mut ds: [&[f32]; N] = [&[]; N];
    let mut ss: [&[i32]; N] = [&[]; N];
    for j in 0..N {
        qs[j] = &x.q_row(first + j)[..blocks * QB];
        ds[j] = &x.d_row(first + j)[..blocks];
        if D::FUSED {
            ss[j] = &x.sum_row(first + j)[..blocks];
        }
    }
    let top = _mm256_set1_epi8(-128);
    let zero = _mm256_setzero_si256();
    let reads_backs = matches!(backs, Backs::Read(_));
    let mut acc = [_mm256_setzero_ps(); N];
    for b in 0..blocks {
        let wb = &w[b * BLOCK..b * BLOCK + BLOCK];
        prefetch_block_at(wb, ahead);
        let dw = _mm256_cvtph_ps(_mm_loadu_si128(wb[..16].as_ptr().cast()));
        let mut isum = [_mm256_setzero_si256(); N];
        // −Σ |w| of the block's negative weights, in i16 pairs by row.
        let mut back = _mm256_setzero_si256();
        for c in 0..8 {
            let q = load32(&wb[16 + 32 * c..48 + 32 * c]);
            if D::FUSED {
                let u = _mm256_xor_si256(q, top);
                for j in 0..N {
                    let xb = &qs[j][b * QB..b * QB + QB];
                    isum[j] = D::dot(isum[j], u, broadcast4(xb, 4 * c));
                }
            } else if N <= SIGN_TRICK_MAX_ROWS {
                let aq = _mm256_sign_epi8(q, q);
                for j in 0..N {
                    let xb = &qs[j][b * QB..b * QB + QB];
                    let vx = _mm256_sign_epi8(broadcast4(xb, 4 * c), q);
                    isum[j] = D::dot(isum[j], aq, vx);
                }
            } else {
                let aq = _mm256_abs_epi8(q);
                let neg = _mm256_cmpgt_epi8(zero, q);
                if !reads_backs {
                    back = _mm256_add_epi16(back, _mm256_maddubs_epi16(aq, neg));
                }
                for j in 0..N {
                    let xb = &qs[j][b * QB..b * QB + QB];
                    let vx = _mm256_xor_si256(broadcast4(xb, 4 * c), neg);
                    isum[j] = D::dot(isum[j], aq, vx);
                }
            }
        }
        if D::FUSED {
            for j in 0..N {
                isum[j] = _mm256_sub_epi32(isum[j], _mm256_set1_epi32(128 * ss[j][b]));
            }
        } else if N > SIGN_TRICK_MAX_ROWS {
            let back = match &mut backs {
                Backs::Read(kept) => _mm256_loadu_si256(kept[b].as_ptr().cast()),
                // Eight chunks' pairs of at most 2 × 128 add to 4,096: i16.
                Backs::Work => _mm256_madd_epi16(back, _mm256_set1_epi16(1)),
                Backs::Keep(kept) => {
                    let back = _mm256_madd_epi16(back, _mm256_set1_epi16(1));
                    _mm256_storeu_si256(kept[b].as_mut_ptr().cast(), back);
                    back
                }
            };
            for sum in &mut isum {
                *sum = _mm256_sub_epi32(*sum, back);
            }
        }
        for j in 0..N {
            let scale = _mm256_mul_ps(dw, _mm256_set1_ps(ds[j][b]));
            acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[j]), scale, acc[j]);
        }
    }
    for j in 0..N {
        _mm256_storeu_ps(sums[j].as_mut_ptr(), acc[j]);
    }
}
