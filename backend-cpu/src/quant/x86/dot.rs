//! The integer step of the 8-bit products, per instruction set: AVX2 spells
//! it in two or three instructions, VNNI (AVX-VNNI, or AVX-512 VNNI with
//! VL) in one. Kernels written over [`Dot`] are compiled once per set, each
//! instance with its set's `target_feature`s, so the steps inline.

use std::arch::x86_64::*;

/// The integer steps of the 8-bit products.
pub(super) trait Dot {
    /// Whether [`Dot::dot`] is one instruction that adds in i32 (VNNI's
    /// `vpdpbusd`), so kernels add every step into i32 sums. Without it
    /// (`maddubs` into i16 pairs, then `madd`), kernels add several
    /// `maddubs` in i16, where the sums cannot overflow, and widen once.
    const FUSED: bool;

    /// `acc + Σ u × s` in each 32-bit lane over its four byte pairs (`u`
    /// unsigned, `s` signed).
    ///
    /// # Safety
    /// The CPU must have the set's extensions; called only from functions
    /// compiled with them.
    unsafe fn dot(acc: __m256i, u: __m256i, s: __m256i) -> __m256i;

    /// `acc + Σ a × b` in each 32-bit lane over its two i16 pairs (`madd`
    /// and `add`; VNNI's `vpdpwssd`).
    ///
    /// # Safety
    /// As [`Dot::dot`].
    unsafe fn dot_pairs(acc: __m256i, a: __m256i, b: __m256i) -> __m256i;
}

/// AVX2: `maddubs` (pairs into saturating i16), `madd` by ones, `add`.
/// Every caller keeps a pair below 2¹⁵, so nothing saturates.
pub(super) struct Avx2Dot;

impl Dot for Avx2Dot {
    const FUSED: bool = false;

    #[inline(always)]
    unsafe fn dot(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
        let pairs = _mm256_maddubs_epi16(u, s);
        _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)))
    }

    #[inline(always)]
    unsafe fn dot_pairs(acc: __m256i, a: __m256i, b: __m256i) -> __m256i {
        _mm256_add_epi32(acc, _mm256_madd_epi16(a, b))
    }
}

/// AVX-VNNI: `vpdpbusd` and `vpdpwssd`, VEX-encoded.
pub(super) struct VexVnni;

impl Dot for VexVnni {
    const FUSED: bool = true;

    #[inline(always)]
    unsafe fn dot(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
        _mm256_dpbusd_avx_epi32(acc, u, s)
    }

    #[inline(always)]
    unsafe fn dot_pairs(acc: __m256i, a: __m256i, b: __m256i) -> __m256i {
        _mm256_dpwssd_avx_epi32(acc, a, b)
    }
}

/// AVX-512 VNNI with VL: the same on 256-bit vectors, EVEX-encoded.
pub(super) struct EvexVnni;

impl Dot for EvexVnni {
    const FUSED: bool = true;

    #[inline(always)]
    unsafe fn dot(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
        _mm256_dpbusd_epi32(acc, u, s)
    }

    #[inline(always)]
    unsafe fn dot_pairs(acc: __m256i, a: __m256i, b: __m256i) -> __m256i {
        _mm256_dpwssd_epi32(acc, a, b)
    }
}

/// VNNI's steps done exactly by AVX2, so that the kernels' VNNI code runs,
/// and is tested, on any AVX2 CPU: `vpdpbusd` as two `maddubs` over the
/// unsigned bytes' nibbles (no pair can saturate: 2 × 15 × 128), the high
/// one's sums weighted 16 by `madd`.
#[cfg(test)]
pub(super) struct EmulatedVnni;

#[cfg(test)]
impl Dot for EmulatedVnni {
    const FUSED: bool = true;

    #[inline(always)]
    unsafe fn dot(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
        let low = _mm256_set1_epi8(0x0f);
        let lo = _mm256_maddubs_epi16(_mm256_and_si256(u, low), s);
        let hi = _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16::<4>(u), low), s);
        let acc = _mm256_add_epi32(acc, _mm256_madd_epi16(lo, _mm256_set1_epi16(1)));
        _mm256_add_epi32(acc, _mm256_madd_epi16(hi, _mm256_set1_epi16(16)))
    }

    #[inline(always)]
    unsafe fn dot_pairs(acc: __m256i, a: __m256i, b: __m256i) -> __m256i {
        Avx2Dot::dot_pairs(acc, a, b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The emulated `vpdpbusd` is exact over the whole range of both
    /// operands (where a single `maddubs` would saturate), as the VNNI
    /// kernels' tests on AVX2 need.
    #[test]
    fn emulated_vnni_is_exact_over_the_whole_range() {
        if !crate::Isa::Avx2.is_supported() {
            return;
        }
        #[target_feature(enable = "avx2")]
        unsafe fn emulated(acc: &[i32; 8], u: &[u8; 32], s: &[i8; 32]) -> [i32; 8] {
            let r = EmulatedVnni::dot(
                _mm256_loadu_si256(acc.as_ptr().cast()),
                _mm256_loadu_si256(u.as_ptr().cast()),
                _mm256_loadu_si256(s.as_ptr().cast()),
            );
            let mut out = [0i32; 8];
            _mm256_storeu_si256(out.as_mut_ptr().cast(), r);
            out
        }
        let mut rng = fastrand::Rng::with_seed(17);
        for round in 0..10_000 {
            let extreme = round % 2 == 0;
            let u: [u8; 32] = std::array::from_fn(|_| if extreme { 255 } else { rng.u8(..) });
            let s: [i8; 32] = std::array::from_fn(|_| match (extreme, rng.bool()) {
                (true, true) => -128,
                (true, false) => 127,
                _ => rng.i8(..),
            });
            let acc: [i32; 8] = std::array::from_fn(|_| rng.i32(-1 << 20..1 << 20));
            let want: [i32; 8] = std::array::from_fn(|l| {
                acc[l]
                    + (0..4)
                        .map(|k| i32::from(u[4 * l + k]) * i32::from(s[4 * l + k]))
                        .sum::<i32>()
            });
            // SAFETY: AVX2 was detected above.
            assert_eq!(unsafe { emulated(&acc, &u, &s) }, want);
        }
    }
}
