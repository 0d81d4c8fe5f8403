//! AVX2 + FMA (+ F16C for F16 weights): the row kernels of the quantized
//! products. [`dots`] picks one per weight type and activation format:
//! [`int8`] multiplies blocks with 8-bit activations as exact integer dot
//! products, [`widen`] widens blocks to f32 for f32 activations. The block
//! unpacking both share (legacy blocks, K blocks and their scales, f16
//! scales by F16C) lives here.

use std::arch::x86_64::*;

use pagoda_core::quant::{e8m0_half_to_f32, IQ4_VALUES, MXFP4_VALUES};
use pagoda_core::QuantKind;

use super::act::{ActFormat, QuantizedActivations, QUAD_MIN_ROWS};
use super::unpack;

mod dot;
mod hints;
mod int8;
mod quads;
pub(super) mod round;
mod rows8;
mod widen;

use int8::{kquants, legacy, packed};
pub(super) use quads::kquads;
use quads::quads;
pub(super) use rows8::{interleaved, takes_interleaved};
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

/// A K block's scales in vector form, unpacked in registers (no scalar
/// scale arrays): `s[k]` multiplies the i16 pair sums of values
/// `32k..32k + 32` (its low lane group `2k`, its high lane group `2k + 1`),
/// `c` holds the 16 per-16 corrections that the activation sums of 16 pay,
/// `w = d × s × q − dc × c` per 16.
pub(super) struct KScales {
    pub s: [__m256i; 8],
    pub c: __m256i,
    pub d: f32,
    pub dc: f32,
}

/// The per-16 scales of a K block as 16 i16 lanes (group `g` in lane `g`),
/// and its corrections the same way (see [`KScales`]).
#[inline(always)]
unsafe fn k_scale_lanes(kind: QuantKind, b: &[u8]) -> (__m256i, __m256i) {
    match kind {
        QuantKind::Q2_K => {
            // A byte per 16: the scale's nibble, then the minimum's.
            let v = _mm256_cvtepu8_epi16(_mm_loadu_si128(b[..16].as_ptr().cast()));
            let low = _mm256_set1_epi16(0x0f);
            return (
                _mm256_and_si256(v, low),
                _mm256_and_si256(_mm256_srli_epi16::<4>(v), low),
            );
        }
        QuantKind::Q3_K => {
            // Sixteen 6-bit scales by masks on words, less the 32 they are
            // stored plus; the values' −4 is paid as 4 × scale.
            let bytes = unpack::q3_k_scale_bytes(&b[96..108]);
            let v = _mm_sub_epi8(_mm_loadu_si128(bytes.as_ptr().cast()), _mm_set1_epi8(32));
            let sc = _mm256_cvtepi8_epi16(v);
            return (sc, _mm256_slli_epi16::<2>(sc));
        }
        QuantKind::IQ4_XS => {
            // One scale per 32 values, each taken for both of its 16s; the
            // signed values pay no correction.
            let word = unpack::iq4_xs_scale_word(b);
            let v = _mm_sub_epi8(_mm_cvtsi64_si128(word as i64), _mm_set1_epi8(32));
            let v = _mm_cvtepi8_epi16(v);
            let sc = _mm256_set_m128i(_mm_unpackhi_epi16(v, v), _mm_unpacklo_epi16(v, v));
            return (sc, _mm256_setzero_si256());
        }
        _ => {}
    }
    if kind == QuantKind::Q6_K {
        let sc = _mm256_cvtepi8_epi16(_mm_loadu_si128(b[192..208].as_ptr().cast()));
        // Q6_K's values are stored plus 32: the correction is 32 × scale
        // (|32 × −128| fits i16).
        return (sc, _mm256_slli_epi16::<5>(sc));
    }
    let (scales, mins) = unpack::k4_scale_words(&b[4..16]);
    // One 6-bit scale and minimum per 32 values: each taken for both of
    // its groups of 16.
    (per16(scales), per16(mins))
}

/// Eight bytes (one per 32 values) as 16 i16 lanes, each byte twice.
#[inline(always)]
unsafe fn per16(w: u64) -> __m256i {
    let v = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(w as i64));
    _mm256_set_m128i(_mm_unpackhi_epi16(v, v), _mm_unpacklo_epi16(v, v))
}

/// The shuffle that broadcasts i16 lane `2k` across the low 128 bits and
/// lane `2k + 1` across the high (`k < 4`).
#[inline(always)]
unsafe fn scale_pick(k: usize) -> __m256i {
    let (a, b) = (4 * k as i8, 4 * k as i8 + 2);
    _mm256_setr_epi8(
        a,
        a + 1,
        a,
        a + 1,
        a,
        a + 1,
        a,
        a + 1,
        a,
        a + 1,
        a,
        a + 1,
        a,
        a + 1,
        a,
        a + 1,
        b,
        b + 1,
        b,
        b + 1,
        b,
        b + 1,
        b,
        b + 1,
        b,
        b + 1,
        b,
        b + 1,
        b,
        b + 1,
        b,
        b + 1,
    )
}

/// [`KScales`] of the K block `b`.
#[inline(always)]
unsafe fn k_scale_vectors(kind: QuantKind, b: &[u8]) -> KScales {
    let (sc, c) = k_scale_lanes(kind, b);
    let (d, dc) = match kind {
        QuantKind::Q6_K => (half(b, 208), half(b, 208)),
        QuantKind::Q3_K => (half(b, 108), half(b, 108)),
        QuantKind::Q2_K => (half(b, 80), half(b, 82)),
        QuantKind::IQ4_XS => (half(b, 0), 0.0),
        _ => (half(b, 0), half(b, 2)),
    };
    // Each lane's groups 0–7 (first four vectors) or 8–15 (last four) in
    // both lanes, then one shuffle per vector picks its two i16s. (Plain
    // loops, no closures: a closure handed to a generic function is not
    // compiled with this function's target features, and its intrinsics
    // become calls.)
    let first = _mm256_permute2x128_si256::<0x00>(sc, sc);
    let second = _mm256_permute2x128_si256::<0x11>(sc, sc);
    let mut s = [_mm256_setzero_si256(); 8];
    for (k, s) in s.iter_mut().enumerate() {
        let base = if k < 4 { first } else { second };
        *s = _mm256_shuffle_epi8(base, scale_pick(k % 4));
    }
    KScales { s, c, d, dc }
}

/// A legacy block's 32 values (offset removed for the symmetric types),
/// its scale and its minimum.
#[inline(always)]
unsafe fn legacy_block(kind: QuantKind, b: &[u8]) -> (__m256i, f32, f32) {
    if kind == QuantKind::MXFP4 {
        let table = _mm_loadu_si128(MXFP4_VALUES.as_ptr().cast());
        let q = _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(table), nibbles(&b[1..17]));
        return (q, e8m0_half_to_f32(b[0]), 0.0);
    }
    let d = half(b, 0);
    match kind {
        QuantKind::Q8_0 => (load32(&b[2..34]), d, 0.0),
        QuantKind::Q4_0 => (
            _mm256_sub_epi8(nibbles(&b[2..18]), _mm256_set1_epi8(8)),
            d,
            0.0,
        ),
        QuantKind::Q4_1 => (nibbles(&b[4..20]), d, half(b, 2)),
        QuantKind::IQ4_NL => (iq4_values(nibbles(&b[2..18])), d, 0.0),
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

/// What the interleaved kernels add to MXFP4's values to make them
/// unsigned (for `maddubs` and `vpdpbusd`): each block's sum then opens at
/// −12 × Σx, from the activation block's integer sum.
pub(super) const MXFP4_OFFSET: i32 = 12;

/// MXFP4's sixteen values plus [`MXFP4_OFFSET`] (0 to 24), for one byte
/// shuffle.
#[inline(always)]
pub(super) unsafe fn mxfp4_unsigned() -> __m256i {
    const TABLE: [u8; 16] = {
        let mut t = [0u8; 16];
        let mut i = 0;
        while i < 16 {
            t[i] = (MXFP4_VALUES[i] as i32 + MXFP4_OFFSET) as u8;
            i += 1;
        }
        t
    };
    _mm256_broadcastsi128_si256(_mm_loadu_si128(TABLE.as_ptr().cast()))
}

/// Eight E8M0 bytes as the f32 halves MXFP4 scales by, `2^(e − 128)`,
/// exactly (`pagoda_core::quant::e8m0_half_to_f32`: the exponent field
/// `e − 1`, or for `e` below 2 the subnormal `2^21 << e`).
#[inline(always)]
pub(super) unsafe fn e8m0_halves(bytes: &[u8]) -> __m256 {
    let e = _mm256_cvtepu8_epi32(_mm_loadl_epi64(bytes[..8].as_ptr().cast()));
    let normal = _mm256_slli_epi32::<23>(_mm256_sub_epi32(e, _mm256_set1_epi32(1)));
    let tiny = _mm256_sllv_epi32(_mm256_set1_epi32(0x0020_0000), e);
    let below_two = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
    _mm256_castsi256_ps(_mm256_blendv_epi8(normal, tiny, below_two))
}

/// The IQ4 table values (`pagoda_core::quant::IQ4_VALUES`) that the 4-bit
/// indices in the bytes of `indices` name: one byte shuffle.
#[inline(always)]
unsafe fn iq4_values(indices: __m256i) -> __m256i {
    let table = _mm_loadu_si128(IQ4_VALUES.as_ptr().cast());
    _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(table), indices)
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
/// activation rows of it at a time: K-quants and IQ4_XS against
/// interleaved Q8_K rows. It is called apart from [`dots`] (see `kernel::rows`): with the call
/// inside `dots`, the code generated for the other kernels changed and
/// Q4_1 at four rows fell from 3.7 to 1.8 GiB/s.
pub(super) fn takes_kquads(kind: QuantKind, x: &QuantizedActivations, m: usize) -> bool {
    unpack::is_super_block(kind)
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
        // Signed table values: the portable widening (f32 activations
        // are the `--precision f32` path; decode rounds IQ4_XS to 8 bits).
        QuantKind::IQ4_XS if x.format() == ActFormat::F32 => {
            super::scalar::dots(kind, w, x, first, res)
        }
        _ if unpack::is_super_block(kind) && x.format() == ActFormat::F32 => {
            widened_k(kind, w, x, first, res)
        }
        QuantKind::Q4_0 if x.format() == ActFormat::F32 => shifted::<Q4_0>(w, x, first, res),
        QuantKind::Q4_1 if x.format() == ActFormat::F32 => shifted::<Q4_1>(w, x, first, res),
        QuantKind::Q8_0 if x.format() == ActFormat::F32 => shifted::<Q8_0>(w, x, first, res),
        _ if x.format() == ActFormat::F32 => widened(kind, w, x, first, res),
        _ if unpack::is_super_block(kind) => kquants(kind, w, x, first, res),
        _ => legacy(kind, w, x, first, res),
    }
}

/// Bytes ahead of the block in hand that the kernels ask the cache to
/// fetch ([`prefetch_ahead`], [`prefetch_line`]). A worker streams its weight rows back to back, and the
/// hardware prefetcher alone left decode short of the bandwidth: SmolLM2
/// Q4_1 at batch 1 decoded 84–85 tok/s without the hint, 87 at 512 bytes,
/// 88 at 2 KiB and 89–90 at 4 and 8 KiB (2 cores, Zen 2).
const PREFETCH_AHEAD: usize = 4096;

/// Asks the cache for every line of the block `b` [`PREFETCH_AHEAD`]
/// bytes on. One hint per block covers every line of blocks shorter than a
/// line, but K blocks are 144 to 210 bytes: with one hint each, most of
/// their lines were left to the hardware prefetcher, and Llama-3.2-1B
/// Q4_K_M decoded at 14.6 tok/s against 28.8 with every line asked for
/// (2 threads, Zen 2).
#[inline(always)]
unsafe fn prefetch_ahead(b: &[u8]) {
    prefetch_block_at(b, PREFETCH_AHEAD);
}

/// [`prefetch_ahead`] `ahead` bytes on: the row loops point their later
/// passes over a group at the next group instead (see `rows8`'s
/// `hint_distance`).
#[inline(always)]
unsafe fn prefetch_block_at(b: &[u8], ahead: usize) {
    for line in (0..b.len()).step_by(64) {
        prefetch_line_at(b, ahead, line);
    }
}

/// Asks the cache for line `line` of the block `b` [`PREFETCH_AHEAD`]
/// bytes on. Kernels over long blocks (an interleaved group's K block is
/// 1,152 or 1,440 bytes) spread their hints over the block's work: all 18
/// at the head of each block left Llama-3.2-1B Q4_K_M decoding at
/// 15.5-17.1 tok/s against 15.4-20.2 (medians 16.2 and 17.6) with one hint
/// per 32-byte chunk (6 alternating runs each, 2 threads, Zen 3).
#[inline(always)]
unsafe fn prefetch_line(b: &[u8], line: usize) {
    prefetch_line_at(b, PREFETCH_AHEAD, line);
}

/// [`prefetch_line`] `ahead` bytes on.
#[inline(always)]
unsafe fn prefetch_line_at(b: &[u8], ahead: usize, line: usize) {
    // A hint only: it never faults, and the address is never read.
    _mm_prefetch::<_MM_HINT_T0>(b.as_ptr().wrapping_add(ahead + line).cast());
}

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
    k_values(kind, b, q);
    for (c, s) in s.iter_mut().enumerate() {
        // Scales fit in i16: 6-bit unsigned (Q4_K, Q5_K) or i8 (Q6_K).
        let (a, b) = (sc[2 * c] as i16, sc[2 * c + 1] as i16);
        *s = _mm256_set_m128i(_mm_set1_epi16(b), _mm_set1_epi16(a));
    }
}

/// A K block's 256 values (0..=63, unsigned) as 8 vectors in element order.
#[inline(always)]
unsafe fn k_values(kind: QuantKind, b: &[u8], q: &mut [__m256i; 8]) {
    for (k, q) in q.iter_mut().enumerate() {
        *q = k_value(kind, b, k);
    }
}

/// Values `32k..32k + 32` of a K block (0..=63, unsigned; IQ4_XS's signed
/// table values), unpacked alone
/// (`k < 8`): a kernel that multiplies each vector as soon as it has it
/// keeps a few registers live, not eight. Inlined into a loop over `k`,
/// the loads that neighbouring vectors share are made once.
#[inline(always)]
unsafe fn k_value(kind: QuantKind, b: &[u8], k: usize) -> __m256i {
    let low = _mm256_set1_epi8(0x0f);
    match kind {
        QuantKind::Q2_K | QuantKind::Q3_K => {
            // Plane `k % 4` of half `k / 4` of the 2-bit values; Q3_K's
            // third bit is bit `k` of its 32 high-bit bytes.
            let at = if kind == QuantKind::Q3_K { 32 } else { 16 } + 32 * (k / 4);
            let v = _mm256_srl_epi16(
                load32(&b[at..at + 32]),
                _mm_cvtsi32_si128(2 * (k % 4) as i32),
            );
            let v = _mm256_and_si256(v, _mm256_set1_epi8(3));
            if kind == QuantKind::Q2_K {
                return v;
            }
            let h = _mm256_srl_epi16(load32(&b[..32]), _mm_cvtsi32_si128(k as i32));
            let h = _mm256_slli_epi16::<2>(_mm256_and_si256(h, _mm256_set1_epi8(1)));
            return _mm256_or_si256(v, h);
        }
        QuantKind::IQ4_XS => {
            // Sub-block `k`'s 16 index bytes: signed table values.
            return iq4_values(nibbles(&b[8 + 16 * k..24 + 16 * k]));
        }
        _ => {}
    }
    if kind == QuantKind::Q6_K {
        // Half `n` of the block: 64 bytes of low nibbles (two vectors, each
        // giving its low then its high nibbles) and 32 of 2-bit pairs.
        let (n, v) = (k / 4, k % 4);
        let ql = load32(&b[64 * n + 32 * (v % 2)..64 * n + 32 * (v % 2) + 32]);
        let qh = load32(&b[128 + 32 * n..160 + 32 * n]);
        let ql = if v < 2 {
            ql
        } else {
            _mm256_srli_epi16::<4>(ql)
        };
        let qh = _mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * v as i32));
        return _mm256_or_si256(_mm256_and_si256(ql, low), two_bits(qh));
    }
    let five = kind == QuantKind::Q5_K;
    let qs = if five { &b[48..176] } else { &b[16..144] };
    let i = k / 2;
    let v = load32(&qs[32 * i..32 * i + 32]);
    let q = if k.is_multiple_of(2) {
        _mm256_and_si256(v, low)
    } else {
        _mm256_and_si256(_mm256_srli_epi16::<4>(v), low)
    };
    if five {
        _mm256_or_si256(q, fifth_of(load32(&b[16..48]), k as i32))
    } else {
        q
    }
}
