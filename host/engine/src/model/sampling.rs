//! Picking the next token from logits: greedy, or temperature with top-k and
//! top-p (nucleus) filtering, from a seeded generator.

use std::fmt;

/// How a request samples. `temperature == 0` is greedy (top-k and top-p are
/// then irrelevant).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct SamplingParams {
    /// Softmax temperature; 0 picks the most likely token.
    pub temperature: f32,
    /// Keep only the `top_k` most likely tokens; 0 keeps all.
    pub top_k: u32,
    /// Keep the smallest set of most likely tokens whose probability reaches
    /// `top_p`; 1 keeps all.
    pub top_p: f32,
}

impl SamplingParams {
    /// Greedy decoding.
    pub const GREEDY: Self = Self {
        temperature: 0.0,
        top_k: 0,
        top_p: 1.0,
    };

    /// Checks the ranges: temperature finite and non-negative, top-p in
    /// (0, 1].
    pub fn validate(&self) -> Result<(), SamplingError> {
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return Err(SamplingError::Temperature(self.temperature));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(SamplingError::TopP(self.top_p));
        }
        Ok(())
    }
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self::GREEDY
    }
}

/// Out-of-range sampling parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SamplingError {
    /// Temperature negative or not finite.
    Temperature(f32),
    /// Top-p outside (0, 1].
    TopP(f32),
}

impl fmt::Display for SamplingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Temperature(t) => write!(f, "temperature {t} must be finite and at least 0"),
            Self::TopP(p) => write!(f, "top-p {p} must be in (0, 1]"),
        }
    }
}

impl std::error::Error for SamplingError {}

/// A sampler with its candidate buffer (reused, so sampling allocates
/// nothing after the first call).
#[derive(Debug, Default)]
pub struct Sampler {
    candidates: Vec<(f32, u32)>,
}

impl Sampler {
    /// Picks a token from one row of logits. NaN logits never win.
    pub fn sample(
        &mut self,
        logits: &[f32],
        params: &SamplingParams,
        rng: &mut fastrand::Rng,
    ) -> u32 {
        if params.temperature == 0.0 {
            return argmax(logits);
        }
        let cands = &mut self.candidates;
        cands.clear();
        cands.extend(
            logits
                .iter()
                .enumerate()
                .filter(|(_, l)| !l.is_nan())
                .map(|(i, &l)| (l, i as u32)),
        );
        if cands.is_empty() {
            return 0;
        }
        // Larger first, then lower id: a total order, so the same seed
        // picks the same token on every run.
        let by_weight = |a: &(f32, u32), b: &(f32, u32)| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1));
        let k = params.top_k as usize;
        if k > 0 && k < cands.len() {
            cands.select_nth_unstable_by(k - 1, by_weight);
            cands.truncate(k);
        }
        // Softmax at the temperature, relative to the best logit.
        let best = cands.iter().map(|c| c.0).fold(f32::NEG_INFINITY, f32::max);
        let mut total = 0.0f64;
        for c in cands.iter_mut() {
            let p = f64::from((c.0 - best) / params.temperature).exp();
            c.0 = p as f32;
            total += p;
        }
        let keep = if params.top_p < 1.0 {
            nucleus(cands, total * f64::from(params.top_p), by_weight)
        } else {
            // No nucleus: every candidate stays, in any order.
            cands.len()
        };
        let kept: f64 = cands[..keep].iter().map(|c| f64::from(c.0)).sum();
        let mut draw = rng.f64() * kept;
        for c in &cands[..keep] {
            draw -= f64::from(c.0);
            if draw < 0.0 {
                return c.1;
            }
        }
        cands[keep - 1].1
    }
}

/// Orders the most likely candidates first, just far enough for their mass
/// to reach `target`, and returns how many that takes. Only that prefix is
/// sorted (a 64-candidate prefix, then 4× wider until it suffices), not the
/// whole vocabulary: a nucleus is usually a few dozen tokens.
fn nucleus(
    cands: &mut [(f32, u32)],
    target: f64,
    order: impl Fn(&(f32, u32), &(f32, u32)) -> std::cmp::Ordering + Copy,
) -> usize {
    let mut width = cands.len().min(64);
    loop {
        if width < cands.len() {
            cands.select_nth_unstable_by(width - 1, order);
        }
        cands[..width].sort_unstable_by(order);
        let mut mass = 0.0;
        for (i, c) in cands[..width].iter().enumerate() {
            mass += f64::from(c.0);
            if mass >= target {
                return i + 1;
            }
        }
        if width == cands.len() {
            return width;
        }
        width = (width * 4).min(cands.len());
    }
}

/// The index of the largest logit (the first on ties; NaN never wins).
pub fn argmax(logits: &[f32]) -> u32 {
    // Two passes: the largest value in eight running lanes (a select the
    // compiler vectorizes; NaN never wins a `>`), then its first index. One
    // pass with the index in hand is a chain of dependent branches, and a
    // batch-16 step picks from 16 × 49,152 logits.
    let mut lanes = [f32::NEG_INFINITY; 8];
    let eights = logits.chunks_exact(8);
    let mut best_value =
        eights
            .remainder()
            .iter()
            .fold(f32::NEG_INFINITY, |m, &l| if l > m { l } else { m });
    for c in eights {
        for (m, &l) in lanes.iter_mut().zip(c) {
            *m = if l > *m { l } else { *m };
        }
    }
    for m in lanes {
        if m > best_value {
            best_value = m;
        }
    }
    if best_value == f32::NEG_INFINITY {
        return 0;
    }
    logits.iter().position(|&l| l == best_value).unwrap_or(0) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`argmax`] against the one-pass definition (first strict maximum,
    /// NaN skipped, 0 when nothing beats −∞) on random rows with ties,
    /// NaN and infinities.
    #[test]
    fn argmax_is_the_first_largest_value() {
        fn reference(logits: &[f32]) -> u32 {
            let (mut best, mut value) = (0, f32::NEG_INFINITY);
            for (i, &l) in logits.iter().enumerate() {
                if l > value {
                    (best, value) = (i, l);
                }
            }
            best as u32
        }
        let mut rng = fastrand::Rng::with_seed(3);
        for round in 0..2000 {
            let len = rng.usize(0..70);
            let row: Vec<f32> = (0..len)
                .map(|_| match rng.usize(0..10) {
                    0 => f32::NAN,
                    1 => f32::NEG_INFINITY,
                    2 if round % 3 == 0 => f32::INFINITY,
                    // Few distinct values, so ties are common.
                    _ => rng.usize(0..5) as f32,
                })
                .collect();
            assert_eq!(argmax(&row), reference(&row), "{row:?}");
        }
    }

    #[test]
    fn greedy_takes_the_largest_and_skips_nan() {
        assert_eq!(argmax(&[0.1, f32::NAN, 3.0, 2.0, 3.0]), 2);
        let mut s = Sampler::default();
        let mut rng = fastrand::Rng::with_seed(1);
        assert_eq!(
            s.sample(&[1.0, 5.0, 2.0], &SamplingParams::GREEDY, &mut rng),
            1
        );
    }

    #[test]
    fn the_partial_nucleus_is_the_fully_sorted_one() {
        let mut rng = fastrand::Rng::with_seed(11);
        let order = |a: &(f32, u32), b: &(f32, u32)| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1));
        for case in 0..200 {
            let n = [1, 7, 64, 65, 300, 5000][case % 6];
            // Peaked or flat distributions, with ties.
            let sharp = rng.f32() * 8.0;
            let mut cands: Vec<(f32, u32)> = (0..n)
                .map(|i| (((rng.f32() * sharp).round()).exp(), i as u32))
                .collect();
            let total: f64 = cands.iter().map(|c| f64::from(c.0)).sum();
            let target = total * f64::from(rng.f32().max(0.01));
            let mut sorted = cands.clone();
            sorted.sort_by(order);
            let mut mass = 0.0;
            let want = sorted
                .iter()
                .position(|c| {
                    mass += f64::from(c.0);
                    mass >= target
                })
                .map_or(n, |i| i + 1);
            let keep = nucleus(&mut cands, target, order);
            assert_eq!(keep, want, "case {case}");
            assert_eq!(cands[..keep], sorted[..keep], "case {case}");
        }
    }

    #[test]
    fn top_k_one_is_greedy() {
        let mut s = Sampler::default();
        let mut rng = fastrand::Rng::with_seed(7);
        let p = SamplingParams {
            temperature: 1.5,
            top_k: 1,
            top_p: 1.0,
        };
        for _ in 0..100 {
            assert_eq!(s.sample(&[0.3, 0.2, 0.9, -1.0], &p, &mut rng), 2);
        }
    }

    #[test]
    fn top_p_keeps_only_the_nucleus() {
        // Probabilities ≈ 0.844, 0.114, 0.042: top-p 0.9 keeps two tokens.
        let logits = [3.0, 1.0, 0.0];
        let p = SamplingParams {
            temperature: 1.0,
            top_k: 0,
            top_p: 0.9,
        };
        let mut s = Sampler::default();
        let mut rng = fastrand::Rng::with_seed(3);
        let mut seen = [0u32; 3];
        for _ in 0..5000 {
            seen[s.sample(&logits, &p, &mut rng) as usize] += 1;
        }
        assert_eq!(seen[2], 0, "the tail past the nucleus is never drawn");
        // Renormalised over the nucleus: 0.881 and 0.119.
        let share = f64::from(seen[0]) / 5000.0;
        assert!((share - 0.881).abs() < 0.03, "share {share}");
    }

    #[test]
    fn temperature_sampling_matches_the_softmax() {
        let logits = [1.0f32, 2.0, 0.5, 1.5];
        let p = SamplingParams {
            temperature: 0.7,
            top_k: 0,
            top_p: 1.0,
        };
        let weights: Vec<f64> = logits.iter().map(|&l| (f64::from(l) / 0.7).exp()).collect();
        let total: f64 = weights.iter().sum();
        let mut s = Sampler::default();
        let mut rng = fastrand::Rng::with_seed(11);
        let n = 20_000;
        let mut seen = [0u32; 4];
        for _ in 0..n {
            seen[s.sample(&logits, &p, &mut rng) as usize] += 1;
        }
        for (i, w) in weights.iter().enumerate() {
            let expected = w / total;
            let got = f64::from(seen[i]) / f64::from(n);
            assert!(
                (got - expected).abs() < 0.015,
                "token {i}: {got} vs {expected}"
            );
        }
    }

    #[test]
    fn same_seed_same_draws() {
        let logits: Vec<f32> = (0..100).map(|i| (i as f32 * 0.37).sin()).collect();
        let p = SamplingParams {
            temperature: 1.0,
            top_k: 20,
            top_p: 0.95,
        };
        let draw = |seed| {
            let mut s = Sampler::default();
            let mut rng = fastrand::Rng::with_seed(seed);
            (0..50)
                .map(|_| s.sample(&logits, &p, &mut rng))
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(5), draw(5));
        assert_ne!(draw(5), draw(6));
    }

    #[test]
    fn bad_parameters_are_refused() {
        let bad = SamplingParams {
            temperature: -1.0,
            ..SamplingParams::GREEDY
        };
        assert!(bad.validate().is_err());
        let bad = SamplingParams {
            top_p: 0.0,
            ..SamplingParams::GREEDY
        };
        assert!(bad.validate().is_err());
        assert!(SamplingParams::GREEDY.validate().is_ok());
    }
}
