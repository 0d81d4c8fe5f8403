//! The two hot loops of paged attention, per page of 16 keys, with runtime
//! dispatch to SIMD: scores of many query rows against a page of keys (each
//! key loaded once for all rows), and accumulation of a page of values
//! weighted by probabilities (each value loaded once per block of rows).
//!
//! The scalar versions are the reference the SIMD versions must match within
//! rounding (`tests` below compare them on random inputs).

#[cfg(target_arch = "aarch64")]
mod neon;
mod scalar;
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86;

use crate::element::KvElement;

/// The instruction set the kernels use, detected at run time.
///
/// The VNNI sets are AVX2 plus one instruction, `vpdpbusd` (four u8 × i8
/// products added into each 32-bit lane), which the 8-bit products of
/// interleaved weights take in place of `maddubs`, `madd` and `add`; every
/// other kernel runs the AVX2 code on them ([`Isa::base`]). Both use 256-bit
/// vectors: `Avx512Vnni` is the EVEX form (AVX-512 VL), which Zen 4 and 5
/// and Xeons since Cascade Lake have, `AvxVnni` the VEX form of Intel's
/// client cores since Alder Lake, which have no AVX-512.
///
/// On aarch64 likewise: `NeonDotprod` and `NeonI8mm` differ from `Neon` only
/// in the 8-bit products of quantized weights (`sdot`; `smmla`, two weight
/// rows by two activation rows at once), and run NEON's code elsewhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isa {
    /// Portable Rust.
    Scalar,
    /// AVX2 + FMA + F16C.
    #[cfg(target_arch = "x86_64")]
    Avx2,
    /// [`Isa::Avx2`] with AVX-VNNI (VEX-encoded `vpdpbusd`).
    #[cfg(target_arch = "x86_64")]
    AvxVnni,
    /// [`Isa::Avx2`] with AVX-512 F, BW, VL and VNNI (`vpdpbusd` on 256-bit
    /// vectors, EVEX-encoded).
    #[cfg(target_arch = "x86_64")]
    Avx512Vnni,
    /// NEON (always present on aarch64).
    #[cfg(target_arch = "aarch64")]
    Neon,
    /// [`Isa::Neon`] with the dot product extension (`sdot`: Cortex-A55, A75
    /// and later, Neoverse N1, Apple M1).
    #[cfg(target_arch = "aarch64")]
    NeonDotprod,
    /// [`Isa::NeonDotprod`] with the 8-bit matrix multiply extension
    /// (`smmla`: Neoverse V1, N2 and V2, as in Graviton 3 and 4; Apple M2 on).
    #[cfg(target_arch = "aarch64")]
    NeonI8mm,
}

impl Isa {
    /// Every instruction set built for this architecture, best first.
    pub const ALL: &'static [Isa] = &[
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512Vnni,
        #[cfg(target_arch = "x86_64")]
        Isa::AvxVnni,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2,
        #[cfg(target_arch = "aarch64")]
        Isa::NeonI8mm,
        #[cfg(target_arch = "aarch64")]
        Isa::NeonDotprod,
        #[cfg(target_arch = "aarch64")]
        Isa::Neon,
        Isa::Scalar,
    ];

    /// The best the CPU supports.
    pub fn detect() -> Self {
        Self::ALL
            .iter()
            .copied()
            .find(|isa| isa.is_supported())
            .unwrap_or(Isa::Scalar)
    }

    /// Every instruction set this CPU can run, best first ([`Isa::Scalar`]
    /// last): the paths tests compare with the scalar reference.
    pub fn supported() -> impl Iterator<Item = Isa> {
        Self::ALL.iter().copied().filter(|isa| isa.is_supported())
    }

    /// Whether this CPU has every extension the set needs (checked at run
    /// time; the answers are cached by the standard library).
    pub fn is_supported(self) -> bool {
        match self {
            Isa::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => {
                std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
                    && std::arch::is_x86_feature_detected!("f16c")
            }
            #[cfg(target_arch = "x86_64")]
            Isa::AvxVnni => {
                Isa::Avx2.is_supported() && std::arch::is_x86_feature_detected!("avxvnni")
            }
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512Vnni => {
                Isa::Avx2.is_supported()
                    && std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512bw")
                    && std::arch::is_x86_feature_detected!("avx512vl")
                    && std::arch::is_x86_feature_detected!("avx512vnni")
            }
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => std::arch::is_aarch64_feature_detected!("neon"),
            #[cfg(target_arch = "aarch64")]
            Isa::NeonDotprod => {
                Isa::Neon.is_supported() && std::arch::is_aarch64_feature_detected!("dotprod")
            }
            #[cfg(target_arch = "aarch64")]
            Isa::NeonI8mm => {
                Isa::NeonDotprod.is_supported() && std::arch::is_aarch64_feature_detected!("i8mm")
            }
        }
    }

    /// The set whose kernels serve this one where it has none of its own:
    /// AVX2 for the VNNI sets, NEON for the dot product and matrix multiply
    /// sets, the set itself otherwise.
    pub fn base(self) -> Self {
        match self {
            #[cfg(target_arch = "x86_64")]
            Isa::AvxVnni | Isa::Avx512Vnni => Isa::Avx2,
            #[cfg(target_arch = "aarch64")]
            Isa::NeonDotprod | Isa::NeonI8mm => Isa::Neon,
            other => other,
        }
    }

    /// A name for reports.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => "avx2+fma+f16c",
            #[cfg(target_arch = "x86_64")]
            Isa::AvxVnni => "avx2+fma+f16c+avxvnni",
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512Vnni => "avx2+fma+f16c+avx512vnni",
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => "neon",
            #[cfg(target_arch = "aarch64")]
            Isa::NeonDotprod => "neon+dotprod",
            #[cfg(target_arch = "aarch64")]
            Isa::NeonI8mm => "neon+dotprod+i8mm",
        }
    }
}

/// `scores[r * 16 + i] = q[r] · k[i]` for `rows` query rows of `dim` floats
/// and `keys` (≤ 16) keys, `k` being a dimension-major `[dim, 16]` block
/// (see [`crate::store`]). Scores past `keys` are unspecified: the softmax
/// masks them.
///
/// `ahead` is the block of keys the caller scores next (or empty). The SIMD
/// kernels prefetch it a few lines at a time while they compute, so the memory
/// system keeps streaming during the arithmetic: a decode step is bound by
/// how well the two overlap.
#[inline]
#[allow(clippy::too_many_arguments)]
pub fn page_scores<E: KvElement>(
    isa: Isa,
    q: &[f32],
    rows: usize,
    k: &[E],
    keys: usize,
    dim: usize,
    scores: &mut [f32],
    ahead: &[E],
) {
    assert!(q.len() >= rows * dim && k.len() >= 16 * dim && scores.len() >= rows * 16);
    assert!(keys <= 16 && dim.is_multiple_of(8) && (ahead.is_empty() || ahead.len() >= 16 * dim));
    match isa {
        Isa::Scalar => scalar::page_scores(q, rows, k, keys, dim, scores),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the AVX2 sets are only chosen when the CPU has AVX2, FMA and F16C,
        // and the asserts above bound every access the kernel makes.
        Isa::Avx2 | Isa::AvxVnni | Isa::Avx512Vnni => unsafe {
            x86::page_scores(q, rows, k, dim, scores, ahead)
        },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: `Neon` is only chosen when the CPU has NEON; the asserts
        // above bound every access.
        Isa::Neon | Isa::NeonDotprod | Isa::NeonI8mm => unsafe {
            neon::page_scores(q, rows, k, keys, dim, scores)
        },
    }
}

/// `acc[r] += Σ_i p[r * 16 + i] · v[i]` for `rows` accumulator rows of `dim`
/// floats and `keys` (≤ 16) value rows, `v` being a tiled
/// `[dim / 16, 16, 16]` block (see [`crate::store`]); `ahead` as in
/// [`page_scores`].
#[inline]
#[allow(clippy::too_many_arguments)]
pub fn page_accumulate<E: KvElement>(
    isa: Isa,
    acc: &mut [f32],
    rows: usize,
    p: &[f32],
    v: &[E],
    keys: usize,
    dim: usize,
    ahead: &[E],
) {
    assert!(acc.len() >= rows * dim && v.len() >= 16 * dim && p.len() >= rows * 16);
    assert!(keys <= 16 && dim.is_multiple_of(16) && (ahead.is_empty() || ahead.len() >= 16 * dim));
    match isa {
        Isa::Scalar => scalar::page_accumulate(acc, rows, p, v, keys, dim),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as in `page_scores`.
        Isa::Avx2 | Isa::AvxVnni | Isa::Avx512Vnni => unsafe {
            x86::page_accumulate(acc, rows, p, v, keys, dim, ahead)
        },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: as in `page_scores`.
        Isa::Neon | Isa::NeonDotprod | Isa::NeonI8mm => unsafe {
            neon::page_accumulate(acc, rows, p, v, keys, dim)
        },
    }
}

/// One online-softmax step over a page of scores (`visible.len()` rows of
/// 16): row `r` sees its first `visible[r]` keys. Each row becomes its
/// weights `e^(s - m)` (0 for keys it does not see), where `m` is the row's
/// new running maximum; `max[r]` and `sum[r]` are updated, and
/// `correction[r]` gets `e^(old m - m)`, the factor the row's accumulated
/// values must be rescaled by (1 when the maximum did not move).
#[inline]
pub fn page_softmax(
    isa: Isa,
    scores: &mut [f32],
    visible: &[u32],
    max: &mut [f32],
    sum: &mut [f32],
    correction: &mut [f32],
) {
    let rows = visible.len();
    assert!(scores.len() >= rows * 16 && max.len() >= rows && sum.len() >= rows);
    assert!(correction.len() >= rows && visible.iter().all(|&v| v <= 16));
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the AVX2 sets are only chosen when the CPU has AVX2 and FMA; the
        // asserts above bound every access.
        Isa::Avx2 | Isa::AvxVnni | Isa::Avx512Vnni => unsafe {
            x86::page_softmax(scores, visible, max, sum, correction)
        },
        _ => scalar::page_softmax(scores, visible, max, sum, correction),
    }
}

/// `gate[i] = silu(gate[i]) × up[i]` (SwiGLU's gating, `silu(g) = g /
/// (1 + e^-g)`) over the common length. The exponential is
/// `scalar::exp_nonpositive` of `-|g|` (relative error about 2e-7), so
/// the AVX2 path runs eight lanes at a time where `f32::exp` is a library
/// call per value: a batch-16 SmolLM2 step gates 737,280 values.
#[inline]
pub fn silu_mul(isa: Isa, gate: &mut [f32], up: &[f32]) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the AVX2 sets are only chosen when the CPU has AVX2 and FMA; the
        // kernel reads and writes within the slices' common length.
        Isa::Avx2 | Isa::AvxVnni | Isa::Avx512Vnni => unsafe { x86::silu_mul(gate, up) },
        _ => scalar::silu_mul(gate, up),
    }
}

/// `gate[i] = gelu(gate[i]) × up[i]` (GeGLU's gating, with GELU's tanh
/// approximation `0.5·g·(1 + tanh(√(2/π)(g + 0.044715 g³)))`, as Gemma
/// uses it) over the common length, through the same exponential as
/// [`silu_mul`].
#[inline]
pub fn gelu_tanh_mul(isa: Isa, gate: &mut [f32], up: &[f32]) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the AVX2 sets are only chosen when the CPU has AVX2 and FMA; the
        // kernel reads and writes within the slices' common length.
        Isa::Avx2 | Isa::AvxVnni | Isa::Avx512Vnni => unsafe { x86::gelu_tanh_mul(gate, up) },
        _ => scalar::gelu_tanh_mul(gate, up),
    }
}

/// gpt-oss's clamped SwiGLU, `gate[i] = x σ(αx) (y + 1)` with `x =
/// min(gate[i], limit)` and `y = clamp(up[i], −limit, limit)`, over the
/// common length, through [`silu_mul`]: `x σ(αx)` is `silu(αx) / α`, so
/// the gate becomes `αx` and the up `(y + 1) / α` (which is why `up` is
/// overwritten) and the vector exponential does the rest.
#[inline]
pub fn swiglu_oai_mul(isa: Isa, gate: &mut [f32], up: &mut [f32], alpha: f32, limit: f32) {
    let n = gate.len().min(up.len());
    let (gate, up) = (&mut gate[..n], &mut up[..n]);
    for g in gate.iter_mut() {
        *g = alpha * g.min(limit);
    }
    for u in up.iter_mut() {
        *u = (u.clamp(-limit, limit) + 1.0) / alpha;
    }
    silu_mul(isa, gate, up);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both paths against `x / (1 + e^(−1.702x)) (y + 1)` in f64 with
    /// gpt-oss's clamps, on values from 1e-6 to 100 in magnitude (so both
    /// clamps bite), within 2e-6 relative plus 1e-12 (the far negative
    /// tail, ~1e-17, is where the f32 rounding of `αx` alone moves it by
    /// 2e-6 relative).
    #[test]
    fn swiglu_oai_mul_matches_f64_reference() {
        let mut seed = 13;
        for len in [0usize, 1, 7, 8, 9, 31, 1000] {
            let gate: Vec<f32> = (0..len)
                .map(|i| rng(&mut seed) * [1e-6, 1.0, 5.0, 30.0, 100.0][i % 5])
                .collect();
            let up: Vec<f32> = (0..len)
                .map(|i| rng(&mut seed) * [0.5, 3.0, 12.0][i % 3])
                .collect();
            for isa in [Isa::Scalar, Isa::detect()] {
                let (mut g, mut u) = (gate.clone(), up.clone());
                swiglu_oai_mul(isa, &mut g, &mut u, 1.702, 7.0);
                for ((&got, &x), &y) in g.iter().zip(&gate).zip(&up) {
                    let x = f64::from(x).min(7.0);
                    let y = f64::from(y).clamp(-7.0, 7.0);
                    let want = x / (1.0 + (-1.702 * x).exp()) * (y + 1.0);
                    let err = (f64::from(got) - want).abs();
                    assert!(
                        err <= 2e-6 * want.abs() + 1e-12,
                        "{isa:?} swiglu_oai({x}, {y}): {got} vs {want}"
                    );
                }
            }
        }
    }

    /// Both paths against `0.5·g·(1 + tanh(√(2/π)(g + 0.044715 g³)))·u`
    /// in f64, on values from 1e-6 to 100 in magnitude, within 2e-6
    /// relative plus 1e-9 (the far negative tail is ~1e-25, where the f32
    /// rounding of the tanh's argument alone moves it by 5e-6 relative).
    #[test]
    fn gelu_tanh_mul_matches_f64_reference() {
        let mut seed = 5;
        for len in [0usize, 1, 7, 8, 9, 31, 1000] {
            let gate: Vec<f32> = (0..len)
                .map(|i| rng(&mut seed) * [1e-6, 1.0, 3.0, 30.0, 100.0][i % 5])
                .collect();
            let up: Vec<f32> = (0..len).map(|_| rng(&mut seed) * 3.0).collect();
            for isa in [Isa::Scalar, Isa::detect()] {
                let mut g = gate.clone();
                gelu_tanh_mul(isa, &mut g, &up);
                for ((&got, &x), &u) in g.iter().zip(&gate).zip(&up) {
                    let (x, u) = (f64::from(x), f64::from(u));
                    let inner = (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x);
                    // 0.5·(1 + tanh u) as σ(2u): no cancellation for
                    // large negative u.
                    let want = x / (1.0 + (-2.0 * inner).exp()) * u;
                    let err = (f64::from(got) - want).abs();
                    assert!(
                        err <= 2e-6 * want.abs() + 1e-9,
                        "{isa:?} gelu({x}) × {u}: {got} vs {want}"
                    );
                }
            }
        }
    }
    use half::{bf16, f16};

    /// Both paths against `g / (1 + e^-g) × u` in f64, on values from
    /// 1e-6 to 100 in magnitude (and tails long enough to leave the
    /// eight-lane body), within 1e-6 relative (plus 1e-30).
    #[test]
    fn silu_mul_matches_f64_reference() {
        let mut seed = 11;
        for len in [0usize, 1, 7, 8, 9, 31, 1000] {
            let gate: Vec<f32> = (0..len)
                .map(|i| rng(&mut seed) * [1e-6, 1.0, 5.0, 30.0, 100.0][i % 5])
                .collect();
            let up: Vec<f32> = (0..len).map(|_| rng(&mut seed) * 3.0).collect();
            for isa in [Isa::Scalar, Isa::detect()] {
                let mut g = gate.clone();
                silu_mul(isa, &mut g, &up);
                for ((&got, &x), &u) in g.iter().zip(&gate).zip(&up) {
                    let (x, u) = (f64::from(x), f64::from(u));
                    let want = x / (1.0 + (-x).exp()) * u;
                    let err = (f64::from(got) - want).abs();
                    assert!(
                        err <= 1e-6 * want.abs() + 1e-30,
                        "{isa:?} silu({x}) × {u}: {got} vs {want}"
                    );
                }
            }
        }
    }

    fn rng(seed: &mut u64) -> f32 {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        ((*seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    fn check<E: KvElement>() {
        let isa = Isa::detect();
        let mut seed = 7;
        for dim in [64, 80, 96, 128, 192, 256, 576] {
            for rows in [1, 3, 8, 13] {
                for keys in [1, 7, 16] {
                    let q: Vec<f32> = (0..rows * dim).map(|_| rng(&mut seed)).collect();
                    // A full block, so the transposed keys (`[dim, 16]`) and
                    // the values (`[16, dim]`, first `keys` rows) share it.
                    let k: Vec<E> = (0..16 * dim).map(|_| E::from_f32(rng(&mut seed))).collect();
                    let mut a = vec![f32::NAN; rows * 16];
                    let mut b = vec![f32::NAN; rows * 16];
                    page_scores(Isa::Scalar, &q, rows, &k, keys, dim, &mut a, &[]);
                    page_scores(isa, &q, rows, &k, keys, dim, &mut b, &k);
                    for r in 0..rows {
                        for i in 0..keys {
                            let (x, y) = (a[r * 16 + i], b[r * 16 + i]);
                            assert!((x - y).abs() <= 1e-4 * (1.0 + x.abs()), "{x} vs {y}");
                        }
                    }
                    let p: Vec<f32> = (0..rows * 16).map(|_| rng(&mut seed).abs()).collect();
                    let start: Vec<f32> = (0..rows * dim).map(|_| rng(&mut seed)).collect();
                    let (mut a, mut b) = (start.clone(), start);
                    page_accumulate(Isa::Scalar, &mut a, rows, &p, &k, keys, dim, &[]);
                    page_accumulate(isa, &mut b, rows, &p, &k, keys, dim, &k);
                    for (x, y) in a.iter().zip(&b) {
                        assert!((x - y).abs() <= 1e-4 * (1.0 + x.abs()), "{x} vs {y}");
                    }
                }
            }
        }
    }

    #[test]
    fn exp_matches_std() {
        let mut worst = 0.0f64;
        // Down to -87, below which weights (< 2e-38) flush to 0.
        for step in 0..348_000 {
            let x = -(step as f32) * 0.000_25;
            let want = f64::from(x).exp();
            worst = worst.max((f64::from(scalar::exp_nonpositive(x)) - want).abs() / want);
        }
        assert!(worst < 1e-6, "relative error {worst}");
        assert_eq!(scalar::exp_nonpositive(-100.0), 0.0);
        assert_eq!(scalar::exp_nonpositive(f32::NEG_INFINITY), 0.0);
    }

    #[test]
    fn softmax_simd_matches_scalar() {
        let isa = Isa::detect();
        let mut seed = 11;
        for rows in [1, 4, 8, 13] {
            // (running max, running sum) for the scalar and the SIMD path.
            let fresh = (vec![f32::NEG_INFINITY; rows], vec![0.0f32; rows]);
            let mut state = [fresh.clone(), fresh];
            // Several pages in a row, with the visible count varying (causal
            // masks, partial last pages, rows that see nothing).
            for page in 0..6 {
                let scores: Vec<f32> = (0..rows * 16).map(|_| 8.0 * rng(&mut seed)).collect();
                let visible: Vec<u32> = (0..rows)
                    .map(|r| ((r * 5 + page * 3) % 17) as u32)
                    .collect();
                let mut out = [scores.clone(), scores];
                let mut corr = [vec![f32::NAN; rows], vec![f32::NAN; rows]];
                for (k, use_isa) in [Isa::Scalar, isa].into_iter().enumerate() {
                    let (max, sum) = &mut state[k];
                    page_softmax(use_isa, &mut out[k], &visible, max, sum, &mut corr[k]);
                }
                let close = |x: f32, y: f32| (x - y).abs() <= 1e-5 * (1.0 + x.abs());
                for r in 0..rows {
                    assert!(close(corr[0][r], corr[1][r]), "correction row {r}");
                    assert!(close(state[0].1[r], state[1].1[r]), "sum row {r}");
                    assert_eq!(state[0].0[r], state[1].0[r], "max row {r}");
                    for i in 0..16 {
                        let (x, y) = (out[0][r * 16 + i], out[1][r * 16 + i]);
                        assert!(close(x, y), "row {r} key {i}: {x} vs {y}");
                        if i >= visible[r] as usize {
                            assert_eq!(y, 0.0, "an unseen key weighs nothing");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn simd_matches_scalar_f32() {
        check::<f32>();
    }

    #[test]
    fn simd_matches_scalar_f16() {
        check::<f16>();
    }

    #[test]
    fn simd_matches_scalar_bf16() {
        check::<bf16>();
    }
}
