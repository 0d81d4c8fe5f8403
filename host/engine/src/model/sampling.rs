//! Picking the next token from logits: greedy, or temperature with top-k,
//! top-p (nucleus) and min-p filtering, from a seeded generator; before
//! that, the per-request adjustments of the logits (bias, penalties, a
//! minimum length), in vLLM's order and with its meanings.

use std::fmt;

use super::constraint::Constraint;

/// How a request samples. `temperature == 0` is greedy (top-k, top-p and
/// min-p are then irrelevant); the adjustments of the logits apply either
/// way, and each costs nothing while it is off.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SamplingParams {
    /// Softmax temperature; 0 picks the most likely token.
    pub temperature: f32,
    /// Keep only the `top_k` most likely tokens; 0 keeps all.
    pub top_k: u32,
    /// Keep the smallest set of most likely tokens whose probability reaches
    /// `top_p`; 1 keeps all.
    pub top_p: f32,
    /// Drop tokens less likely than `min_p` times the most likely one
    /// (after the temperature); 0 keeps all.
    pub min_p: f32,
    /// Subtracted once from the logit of every token the output holds
    /// (OpenAI's, in [-2, 2]); 0: off.
    pub presence_penalty: f32,
    /// Subtracted from a token's logit once per time the output holds it
    /// (OpenAI's, in [-2, 2]); 0: off.
    pub frequency_penalty: f32,
    /// The prompt's and output's tokens' logits are divided by it where
    /// positive and multiplied where not (CTRL's, as transformers and vLLM
    /// apply it); 1: off.
    pub repetition_penalty: f32,
    /// Added to the logits of these tokens (OpenAI's `logit_bias`, each in
    /// [-100, 100]).
    pub logit_bias: Vec<(u32, f32)>,
    /// The stop tokens cannot be sampled before this many output tokens.
    pub min_tokens: u32,
    /// Report each sampled token's log probability and this many of the
    /// most likely tokens' ([`MAX_TOP_LOGPROBS`] at most), from the model's
    /// raw logits (before any adjustment or temperature, as vLLM reports
    /// them by default); `None`: none.
    pub logprobs: Option<u32>,
    /// Take [`logprobs`](Self::logprobs) after the bias, the penalties and
    /// the minimum length (vLLM's `processed_logprobs`, before the
    /// temperature and the structured-output mask) instead of from the raw
    /// logits.
    pub logprobs_processed: bool,
    /// Score the prompt: each prompt token's log probability after the
    /// first, and this many of the most likely tokens' at each position
    /// ([`MAX_TOP_LOGPROBS`] at most), from the raw logits (vLLM's
    /// `prompt_logprobs`, what `echo` with `logprobs` returns). The prefix
    /// cache does not serve such a request: every prompt row is computed.
    pub prompt_logprobs: Option<u32>,
    /// What the output may be (a JSON schema, a regular expression, a
    /// grammar): tokens it rules out are masked before each sample.
    pub constraint: Option<Constraint>,
}

/// The most alternatives [`SamplingParams::logprobs`] may ask for (vLLM's
/// default limit; OpenAI's chat API allows 20).
pub const MAX_TOP_LOGPROBS: u32 = 20;

/// A sampled token's log probability and the most likely tokens', from one
/// row of raw logits.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprobs {
    /// The sampled token's.
    pub logprob: f32,
    /// The most likely tokens and theirs, most likely first (ties: lower
    /// id first).
    pub top: Vec<(u32, f32)>,
}

impl TokenLogprobs {
    /// The log-softmax of `logits` at `token`, and its `top` largest
    /// entries; NaN logits count as impossible. One pass for the maximum,
    /// one for the normaliser (in f64) and the top entries.
    pub fn of(logits: &[f32], token: u32, top: usize) -> Self {
        let max = logits
            .iter()
            .copied()
            .filter(|l| !l.is_nan())
            .fold(f32::NEG_INFINITY, f32::max);
        let mut best: Vec<(u32, f32)> = Vec::with_capacity(top + 1);
        let mut sum = 0.0f64;
        for (i, &l) in logits.iter().enumerate() {
            if l.is_nan() {
                continue;
            }
            sum += f64::from(l - max).exp();
            if top > 0 && (best.len() < top || l > best[best.len() - 1].1) {
                let at = best.partition_point(|&(_, b)| b >= l);
                best.insert(at, (i as u32, l));
                best.truncate(top);
            }
        }
        let norm = f64::from(max) + sum.ln();
        let log_p = |l: f32| {
            if l.is_nan() {
                f32::NEG_INFINITY
            } else {
                (f64::from(l) - norm) as f32
            }
        };
        let chosen = logits.get(token as usize).copied().unwrap_or(f32::NAN);
        Self {
            logprob: log_p(chosen),
            top: best.into_iter().map(|(i, l)| (i, log_p(l))).collect(),
        }
    }
}

impl SamplingParams {
    /// Greedy decoding.
    pub const GREEDY: Self = Self {
        temperature: 0.0,
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
        presence_penalty: 0.0,
        frequency_penalty: 0.0,
        repetition_penalty: 1.0,
        logit_bias: Vec::new(),
        min_tokens: 0,
        logprobs: None,
        logprobs_processed: false,
        prompt_logprobs: None,
        constraint: None,
    };

    /// Checks the ranges: temperature finite and non-negative, top-p in
    /// (0, 1], min-p in [0, 1], presence and frequency penalties in
    /// [-2, 2], repetition penalty in (0, 10], biases finite in
    /// [-100, 100].
    pub fn validate(&self) -> Result<(), SamplingError> {
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return Err(SamplingError::Temperature(self.temperature));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(SamplingError::TopP(self.top_p));
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return Err(SamplingError::MinP(self.min_p));
        }
        for p in [self.presence_penalty, self.frequency_penalty] {
            if !(-2.0..=2.0).contains(&p) {
                return Err(SamplingError::Penalty(p));
            }
        }
        if !(self.repetition_penalty > 0.0 && self.repetition_penalty <= 10.0) {
            return Err(SamplingError::RepetitionPenalty(self.repetition_penalty));
        }
        if let Some(n) = [self.logprobs, self.prompt_logprobs]
            .into_iter()
            .flatten()
            .find(|&n| n > MAX_TOP_LOGPROBS)
        {
            return Err(SamplingError::TopLogprobs(n));
        }
        if let Some(&(token, bias)) = self
            .logit_bias
            .iter()
            .find(|(_, b)| !(-100.0..=100.0).contains(b))
        {
            return Err(SamplingError::LogitBias { token, bias });
        }
        Ok(())
    }

    /// Whether the logits are adjusted before sampling (bias, penalties,
    /// a minimum length not yet reached after `produced` output tokens).
    pub fn adjusts_logits(&self, produced: usize) -> bool {
        !self.logit_bias.is_empty()
            || self.presence_penalty != 0.0
            || self.frequency_penalty != 0.0
            || self.repetition_penalty != 1.0
            || produced < self.min_tokens as usize
    }

    /// Applies the adjustments to one row of logits, in vLLM's order: the
    /// bias; the stop tokens masked while the output is shorter than
    /// `min_tokens`; the repetition penalty over the prompt and output;
    /// the frequency and presence penalties over the output. `scratch` is
    /// reused (no allocation once it has grown).
    pub fn adjust_logits(
        &self,
        logits: &mut [f32],
        prompt: &[u32],
        output: &[u32],
        stop_tokens: &[u32],
        scratch: &mut Vec<u32>,
    ) {
        for &(token, bias) in &self.logit_bias {
            if let Some(l) = logits.get_mut(token as usize) {
                *l += bias;
            }
        }
        if output.len() < self.min_tokens as usize {
            for &token in stop_tokens {
                if let Some(l) = logits.get_mut(token as usize) {
                    *l = f32::NEG_INFINITY;
                }
            }
        }
        if self.repetition_penalty != 1.0 {
            scratch.clear();
            scratch.extend_from_slice(prompt);
            scratch.extend_from_slice(output);
            scratch.sort_unstable();
            scratch.dedup();
            let p = self.repetition_penalty;
            for &token in scratch.iter() {
                if let Some(l) = logits.get_mut(token as usize) {
                    *l = if *l > 0.0 { *l / p } else { *l * p };
                }
            }
        }
        if self.presence_penalty != 0.0 || self.frequency_penalty != 0.0 {
            scratch.clear();
            scratch.extend_from_slice(output);
            scratch.sort_unstable();
            for run in scratch.chunk_by(|a, b| a == b) {
                if let Some(l) = logits.get_mut(run[0] as usize) {
                    *l -= self.frequency_penalty * run.len() as f32 + self.presence_penalty;
                }
            }
        }
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
    /// Min-p outside [0, 1].
    MinP(f32),
    /// More top log probabilities than [`MAX_TOP_LOGPROBS`].
    TopLogprobs(u32),
    /// A presence or frequency penalty outside [-2, 2].
    Penalty(f32),
    /// A repetition penalty outside (0, 10].
    RepetitionPenalty(f32),
    /// A logit bias outside [-100, 100].
    LogitBias {
        /// The token.
        token: u32,
        /// Its bias.
        bias: f32,
    },
}

impl fmt::Display for SamplingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Temperature(t) => write!(f, "temperature {t} must be finite and at least 0"),
            Self::TopP(p) => write!(f, "top-p {p} must be in (0, 1]"),
            Self::MinP(p) => write!(f, "min-p {p} must be in [0, 1]"),
            Self::TopLogprobs(n) => {
                write!(f, "{n} top log probabilities: at most {MAX_TOP_LOGPROBS}")
            }
            Self::Penalty(p) => write!(f, "penalty {p} must be in [-2, 2]"),
            Self::RepetitionPenalty(p) => {
                write!(f, "repetition penalty {p} must be in (0, 10]")
            }
            Self::LogitBias { token, bias } => {
                write!(
                    f,
                    "logit bias {bias} of token {token} must be in [-100, 100]"
                )
            }
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
    /// Picks a token from one row of logits. NaN and −∞ logits never win
    /// (0 when every logit is one).
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
        // NaN and −∞ (a token a mask or `min_tokens` ruled out) are never
        // candidates: a draw's rounding may fall through to the last
        // candidate, which must still be a possible token.
        cands.extend(
            logits
                .iter()
                .enumerate()
                .filter(|(_, &l)| !l.is_nan() && l != f32::NEG_INFINITY)
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
        // Min-p: the weights are relative to the best token's (1).
        if params.min_p > 0.0 {
            let floor = params.min_p;
            cands.retain(|c| c.0 >= floor);
            total = cands.iter().map(|c| f64::from(c.0)).sum();
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
            ..SamplingParams::GREEDY
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
            ..SamplingParams::GREEDY
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
            ..SamplingParams::GREEDY
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
            ..SamplingParams::GREEDY
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

    /// [`SamplingParams::adjust_logits`] against a plain reference that
    /// walks the vocabulary and counts each token's occurrences directly,
    /// on random rows, prompts, outputs and settings.
    #[test]
    fn logit_adjustments_match_a_plain_reference() {
        let mut rng = fastrand::Rng::with_seed(17);
        let mut scratch = Vec::new();
        for case in 0..500 {
            let vocab = rng.usize(1..40);
            let logits: Vec<f32> = (0..vocab).map(|_| rng.f32() * 8.0 - 4.0).collect();
            let prompt: Vec<u32> = (0..rng.usize(0..12))
                .map(|_| rng.u32(0..vocab as u32 + 2))
                .collect();
            let output: Vec<u32> = (0..rng.usize(0..12))
                .map(|_| rng.u32(0..vocab as u32 + 2))
                .collect();
            let stops: Vec<u32> = (0..rng.usize(0..3))
                .map(|_| rng.u32(0..vocab as u32 + 2))
                .collect();
            let pick = |rng: &mut fastrand::Rng, values: &[f32]| values[rng.usize(0..values.len())];
            let params = SamplingParams {
                presence_penalty: pick(&mut rng, &[0.0, 0.5, -1.0, 2.0]),
                frequency_penalty: pick(&mut rng, &[0.0, 0.3, -0.7]),
                repetition_penalty: pick(&mut rng, &[1.0, 1.3, 0.8]),
                logit_bias: (0..rng.usize(0..4))
                    .map(|_| (rng.u32(0..vocab as u32 + 2), rng.f32() * 200.0 - 100.0))
                    .collect(),
                min_tokens: rng.u32(0..6),
                ..SamplingParams::GREEDY
            };
            let mut ours = logits.clone();
            params.adjust_logits(&mut ours, &prompt, &output, &stops, &mut scratch);
            for (t, (&got, &l)) in ours.iter().zip(&logits).enumerate() {
                let id = t as u32;
                let mut want = l;
                for &(token, bias) in &params.logit_bias {
                    if token == id {
                        want += bias;
                    }
                }
                if output.len() < params.min_tokens as usize && stops.contains(&id) {
                    want = f32::NEG_INFINITY;
                }
                if prompt.contains(&id) || output.contains(&id) {
                    let p = params.repetition_penalty;
                    want = if want > 0.0 { want / p } else { want * p };
                }
                let count = output.iter().filter(|&&o| o == id).count();
                if count > 0 {
                    want -= params.frequency_penalty * count as f32 + params.presence_penalty;
                }
                let close = got == want || (got - want).abs() <= 1e-4 * want.abs().max(1.0);
                assert!(close, "case {case} token {t}: {got} vs {want} ({params:?})");
            }
            // Off: nothing to do, and nothing done.
            assert_eq!(
                params.adjusts_logits(output.len()),
                !params.logit_bias.is_empty()
                    || params.presence_penalty != 0.0
                    || params.frequency_penalty != 0.0
                    || params.repetition_penalty != 1.0
                    || output.len() < params.min_tokens as usize
            );
        }
    }

    #[test]
    fn min_p_drops_tokens_far_below_the_best() {
        // Weights relative to the best: 1, e^-2 ≈ 0.135, e^-3 ≈ 0.050.
        let logits = [3.0, 1.0, 0.0];
        let mut s = Sampler::default();
        let mut rng = fastrand::Rng::with_seed(5);
        let p = SamplingParams {
            temperature: 1.0,
            min_p: 0.1,
            ..SamplingParams::GREEDY
        };
        let mut seen = [0u32; 3];
        for _ in 0..4000 {
            seen[s.sample(&logits, &p, &mut rng) as usize] += 1;
        }
        assert_eq!(seen[2], 0, "{seen:?}");
        // The two kept share the mass as 1 : 0.135.
        let share = f64::from(seen[1]) / 4000.0;
        assert!((share - 0.135 / 1.135).abs() < 0.02, "{seen:?}");
    }

    #[test]
    fn out_of_range_controls_are_refused() {
        let bad = [
            SamplingParams {
                min_p: 1.5,
                ..SamplingParams::GREEDY
            },
            SamplingParams {
                presence_penalty: 2.5,
                ..SamplingParams::GREEDY
            },
            SamplingParams {
                frequency_penalty: f32::NAN,
                ..SamplingParams::GREEDY
            },
            SamplingParams {
                repetition_penalty: 0.0,
                ..SamplingParams::GREEDY
            },
            SamplingParams {
                logit_bias: vec![(3, 101.0)],
                ..SamplingParams::GREEDY
            },
        ];
        for p in bad {
            assert!(p.validate().is_err(), "{p:?}");
        }
    }

    /// [`TokenLogprobs::of`] against log-softmax in f64 and a full sort, on
    /// random rows with NaN, infinities and ties.
    #[test]
    fn logprobs_are_the_log_softmax_and_its_largest_entries() {
        let mut rng = fastrand::Rng::with_seed(23);
        for case in 0..300 {
            let len = rng.usize(1..300);
            let row: Vec<f32> = (0..len)
                .map(|_| match rng.usize(0..20) {
                    0 => f32::NAN,
                    1 => f32::NEG_INFINITY,
                    _ => (rng.f32() * 30.0 - 15.0).round() / 2.0,
                })
                .collect();
            if row.iter().all(|l| !l.is_finite()) {
                continue;
            }
            let token = rng.u32(0..len as u32);
            let top = rng.usize(0..25);
            let got = TokenLogprobs::of(&row, token, top);
            let finite: Vec<f64> = row
                .iter()
                .filter(|l| !l.is_nan())
                .map(|&l| f64::from(l))
                .collect();
            let max = finite.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let norm = max + finite.iter().map(|l| (l - max).exp()).sum::<f64>().ln();
            let want = |l: f32| {
                if l.is_nan() {
                    f64::NEG_INFINITY
                } else {
                    f64::from(l) - norm
                }
            };
            let close = |a: f32, b: f64| {
                (a.is_infinite() && b.is_infinite()) || (f64::from(a) - b).abs() < 1e-5
            };
            assert!(close(got.logprob, want(row[token as usize])), "case {case}");
            let mut sorted: Vec<(u32, f32)> = row
                .iter()
                .enumerate()
                .filter(|(_, l)| !l.is_nan())
                .map(|(i, &l)| (i as u32, l))
                .collect();
            sorted.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            sorted.truncate(top);
            assert_eq!(got.top.len(), sorted.len(), "case {case}");
            for ((id, p), (want_id, l)) in got.top.iter().zip(&sorted) {
                assert_eq!(id, want_id, "case {case}");
                assert!(close(*p, want(*l)), "case {case}");
            }
            // The probabilities sum to 1.
            let total: f64 = finite.iter().map(|&l| (l - norm).exp()).sum();
            assert!((total - 1.0).abs() < 1e-9);
        }
    }

    /// A masked token (−∞) is never drawn, however the draw rounds, with
    /// every filter; a row masked whole gives 0 and does not panic.
    #[test]
    fn masked_tokens_are_never_sampled() {
        let mut s = Sampler::default();
        let mut rng = fastrand::Rng::with_seed(9);
        let mut logits = vec![f32::NEG_INFINITY; 64];
        logits[7] = -30.0;
        logits[40] = -31.0;
        for p in [
            SamplingParams {
                temperature: 1.0,
                ..SamplingParams::GREEDY
            },
            SamplingParams {
                temperature: 2.0,
                min_p: 0.5,
                ..SamplingParams::GREEDY
            },
            SamplingParams {
                temperature: 0.7,
                top_p: 0.5,
                top_k: 50,
                ..SamplingParams::GREEDY
            },
        ] {
            for _ in 0..2000 {
                let t = s.sample(&logits, &p, &mut rng);
                assert!(t == 7 || t == 40, "{t} under {p:?}");
            }
            let all = vec![f32::NEG_INFINITY; 8];
            assert_eq!(s.sample(&all, &p, &mut rng), 0);
        }
    }
}
