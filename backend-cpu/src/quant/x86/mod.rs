//! AVX2 + FMA (+ F16C for F16 weights): the row kernels of the quantized
//! products. [`dots`] picks one per weight type and activation format:
//! [`int8`] multiplies blocks with 8-bit activations as exact integer dot
//! products, [`widen`] widens blocks to f32 for f32 activations. The block
//! unpacking both share (legacy blocks, K blocks and their scales, f16
//! scales by F16C) lives here.

use std::arch::x86_64::*;

use pagoda_core::QuantKind;

use super::act::{ActFormat, QuantizedActivations, QUAD_MIN_ROWS};
use super::unpack;

mod int8;
mod quads;
pub(super) mod round;
mod widen;

use int8::{kquants, legacy, packed};
pub(super) use quads::kquads;
use quads::quads;
use widen::{floats, shifted, widened, widened_k};

use crate::kernels::x86::hsum;

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
    let interleaved = x.has_quads() && res.len() / rows >= QUAD_MIN_ROWS;
    match kind {
        QuantKind::Q4_0 if x.format() == ActFormat::Q8_0 && interleaved => {
            quads::<Q4_0>(w, row_bytes, x, first, res)
        }
        QuantKind::Q4_1 if x.format() == ActFormat::Q8_1 && interleaved => {
            quads::<Q4_1>(w, row_bytes, x, first, res)
        }
        QuantKind::Q8_0 if x.format() == ActFormat::Q8_0 && interleaved => {
            quads::<Q8_0>(w, row_bytes, x, first, res)
        }
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

/// Whether [`kquads`] takes a tile of `kind` rows against `x`, `m`
/// activation rows of it at a time: K-quants against interleaved Q8_K rows.
/// It is called apart from [`dots`] (see `kernel::rows`): with the call
/// inside `dots`, the code generated for the other kernels changed and
/// Q4_1 at four rows fell from 3.7 to 1.8 GiB/s.
pub(super) fn takes_kquads(kind: QuantKind, x: &QuantizedActivations, m: usize) -> bool {
    matches!(kind, QuantKind::Q4_K | QuantKind::Q5_K | QuantKind::Q6_K)
        && x.format() == ActFormat::Q8_K
        && x.has_quads()
        && m >= QUAD_MIN_ROWS
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
