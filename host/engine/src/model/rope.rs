//! Rotary position embedding: its frequencies, taken once per model from
//! what the architecture says (pair order, base, per-frequency factors, a linear
//! position scale, an attention factor), and the rotation itself.
//!
//! Angle `i` at position `p` is `p / scale × base^(−2i/rope_dim) /
//! factor[i]`; both its cosine and sine are multiplied by `attn_factor`
//! (LongRoPE's magnitude correction; 1 elsewhere). Llama 3.x's scaling
//! arrives as factors (`rope_freqs.weight`, which llama.cpp's converter
//! computes from the `llama3` formula), Phi-3's LongRoPE as the long or short
//! factors and an attention factor. YaRN ([`Yarn`]) blends each frequency
//! between itself and itself divided by the extension factor, and
//! multiplies the attention factor by `1 + 0.1 ln factor`.

use super::config::ModelError;

/// Which dimensions of a head rotate together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeMode {
    /// Pairs `(2i, 2i+1)`: a `llama` file's query and key rows, which
    /// llama.cpp's converter permuted for this order.
    Interleaved,
    /// Pairs `(i, i + rope_dim/2)` (GPT-NeoX's rotate-half).
    Neox,
}

/// How an architecture's rotary embedding is parametrized.
#[derive(Debug, Clone, PartialEq)]
pub struct RopeSpec {
    /// Pair order.
    pub mode: RopeMode,
    /// Base of the frequencies.
    pub base: f32,
    /// Leading dimensions of a head that rotate (even).
    pub dims: u32,
    /// Divisors of the frequencies, `dims/2` of them.
    pub factors: Option<Vec<f32>>,
    /// Positions are divided by this (linear scaling; 1 for none).
    pub scale: f32,
    /// Cosines and sines are multiplied by this (1 for none).
    pub attn_factor: f32,
    /// YaRN's context extension, if the file asks for it.
    pub yarn: Option<Yarn>,
}

/// YaRN (Peng et al., 2023; "NTK-by-parts" with a magnitude correction),
/// as llama.cpp's `rope_yarn` and Hugging Face's `_compute_yarn_parameters`
/// compute it: pairs that turn more than `beta_fast` times over the
/// original context keep their frequency, pairs that turn fewer than
/// `beta_slow` times are divided by `factor` (interpolated), and the pairs
/// between are blended along a linear ramp; cosines and sines are scaled by
/// `1 + 0.1 ln factor`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Yarn {
    /// How many times the trained context is extended (at least 1).
    pub factor: f32,
    /// The context the model was trained at.
    pub original_context: u32,
    /// Turns over the original context above which a pair extrapolates.
    pub beta_fast: f32,
    /// Turns below which a pair interpolates.
    pub beta_slow: f32,
    /// HF's `mscale_all_dim` (`rope.scaling.yarn_log_multiplier`, as
    /// Ministral 3's files carry it), with `mscale` 1: the magnitude
    /// becomes `(1 + 0.1 ln factor) / (1 + 0.1 mscale_all_dim ln factor)`;
    /// 0 for none.
    pub mscale_all_dim: f32,
}

impl Yarn {
    /// The first and last pair of the ramp for `dims` rotated dimensions
    /// at `base` (llama.cpp's `ggml_rope_yarn_corr_dims`).
    fn ramp(&self, dims: u32, base: f32) -> (f64, f64) {
        let (dims, base) = (f64::from(dims), f64::from(base));
        let original = f64::from(self.original_context);
        let pair = |turns: f32| {
            let turns = f64::from(turns) * 2.0 * std::f64::consts::PI;
            dims * (original / turns).ln() / (2.0 * base.ln())
        };
        let low = pair(self.beta_fast).floor().max(0.0);
        let high = pair(self.beta_slow).ceil().min(dims - 1.0);
        (low, high)
    }

    /// Pair `i`'s frequency, from its unscaled one.
    fn frequency(&self, i: usize, freq: f64, (low, high): (f64, f64)) -> f64 {
        let y = (i as f64 - low) / (high - low).max(0.001);
        let extrapolate = 1.0 - y.clamp(0.0, 1.0);
        let interpolated = freq / f64::from(self.factor);
        interpolated * (1.0 - extrapolate) + freq * extrapolate
    }

    /// The factor on cosines and sines (HF's `get_mscale` of the factor,
    /// over that of `mscale_all_dim` where set).
    fn magnitude(&self) -> f64 {
        let mscale = |m: f64| 1.0 + 0.1 * m * f64::from(self.factor).ln();
        match self.mscale_all_dim {
            0.0 => mscale(1.0),
            all => mscale(1.0) / mscale(f64::from(all)),
        }
    }
}

/// One model's rotary: each pair's frequency, from which a step's cosines
/// and sines are computed, once per step for all its layers
/// ([`StepAngles`]). A table over the whole context would cost `positions ×
/// dims` floats (34 MB for Llama-3.2-1B's 131,072 positions, 67 MB at 8B),
/// more than the 64 MiB a run may hold beyond its weights and KV pool; a
/// step computes `rows × dims/2` sines and cosines instead, the same floats
/// the table held.
#[derive(Debug, Clone)]
pub struct Rope {
    pub(crate) mode: RopeMode,
    pub(crate) half: usize,
    /// Pair `i`'s angle per unit of scaled position: `base^(−2i/dims) /
    /// factor[i]`, blended by YaRN where the spec has it.
    freqs: Vec<f64>,
    scale: f64,
    attn_factor: f64,
    /// Llama 4's attention temperature, on the queries' rotary only.
    temperature: Option<Temperature>,
    positions: u32,
}

/// Llama 4's (and Ministral 3's) attention temperature: the queries at
/// position `p` are multiplied by `1 + beta ln(1 + floor(p / floor))`, so
/// that scores stay sharp past the trained context; 1 below `floor`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Temperature {
    /// `llama_4_scaling_beta` (`attention.temperature_scale`).
    pub beta: f32,
    /// Positions per step of the logarithm (the original context).
    pub floor: u32,
}

impl Temperature {
    fn at(&self, pos: u32) -> f64 {
        let steps = f64::from(pos / self.floor.max(1));
        1.0 + f64::from(self.beta) * steps.ln_1p()
    }
}

/// One step's cosines and sines under one [`Rope`]: `[rows, dims/2]` each,
/// the rows' positions in order.
#[derive(Debug, Clone, Default)]
pub struct StepAngles {
    cos: Vec<f32>,
    sin: Vec<f32>,
}

impl Rope {
    /// The rotary of `spec` for positions `0..positions`.
    pub fn new(spec: &RopeSpec, positions: u32) -> Self {
        let half = (spec.dims / 2) as usize;
        let ramp = spec.yarn.map(|y| y.ramp(spec.dims, spec.base));
        let freqs = (0..half)
            .map(|i| {
                let freq = f64::from(spec.base).powf(-2.0 * i as f64 / f64::from(spec.dims));
                let freq = match &spec.factors {
                    Some(f) => freq / f64::from(f[i]),
                    None => freq,
                };
                match (spec.yarn, ramp) {
                    (Some(y), Some(ramp)) => y.frequency(i, freq, ramp),
                    _ => freq,
                }
            })
            .collect();
        let magnitude = spec.yarn.map_or(1.0, |y| y.magnitude());
        Self {
            mode: spec.mode,
            half,
            freqs,
            scale: f64::from(spec.scale),
            attn_factor: f64::from(spec.attn_factor) * magnitude,
            temperature: None,
            positions,
        }
    }

    /// This rotary with `temperature`'s factor on its cosines and sines:
    /// the queries' table of a model with an attention temperature (its
    /// keys keep the plain one). Scaling the rotation scales the rotated
    /// values only, so it stands for the temperature where the rotary
    /// spans the whole head.
    pub fn with_temperature(self, temperature: Temperature) -> Self {
        Self {
            temperature: Some(temperature),
            ..self
        }
    }

    /// The cosines and sines of position `pos`'s angles, `half` each.
    fn angles(&self, pos: u32, cos: &mut [f32], sin: &mut [f32]) {
        let scaled = f64::from(pos) / self.scale;
        let factor = self.attn_factor * self.temperature.map_or(1.0, |t| t.at(pos));
        for ((c, s), &freq) in cos.iter_mut().zip(sin.iter_mut()).zip(&self.freqs) {
            let (sine, cosine) = (scaled * freq).sin_cos();
            *c = (cosine * factor) as f32;
            *s = (sine * factor) as f32;
        }
    }

    /// `[positions, dims/2]` tables of cosines and sines: what a device
    /// that looks angles up is given.
    pub fn tables(&self) -> (Vec<f32>, Vec<f32>) {
        let len = self.positions as usize * self.half;
        let (mut cos, mut sin) = (vec![0.0; len], vec![0.0; len]);
        let rows = cos
            .chunks_exact_mut(self.half.max(1))
            .zip(sin.chunks_exact_mut(self.half.max(1)));
        for (pos, (c, s)) in (0..).zip(rows) {
            self.angles(pos, c, s);
        }
        (cos, sin)
    }

    /// The angles of `positions`, into `out`.
    pub fn step_angles(&self, positions: &[u32], out: &mut StepAngles) {
        let len = positions.len() * self.half;
        out.cos.resize(len, 0.0);
        out.sin.resize(len, 0.0);
        let rows = out
            .cos
            .chunks_exact_mut(self.half.max(1))
            .zip(out.sin.chunks_exact_mut(self.half.max(1)));
        for (&pos, (c, s)) in positions.iter().zip(rows) {
            self.angles(pos, c, s);
        }
    }

    /// Rotates the `dims` values from `offset` of each `head_dim`-wide
    /// head of each row (`heads` heads a row; `offset` 0 but for latent
    /// attention, whose rotary part follows its latent) by its row's angles
    /// (from [`step_angles`](Self::step_angles) of the rows' positions).
    /// Fails, touching nothing, where the rotated values do not fit in a
    /// head.
    pub fn apply(
        &self,
        rows: &mut [f32],
        heads: u32,
        head_dim: u32,
        offset: u32,
        angles: &StepAngles,
    ) -> Result<(), ModelError> {
        let (d, half, at) = (head_dim as usize, self.half, offset as usize);
        if at + 2 * half > d {
            return Err(ModelError::RopeSpan {
                offset,
                rope_dim: 2 * half as u32,
                head_dim,
            });
        }
        let width = heads as usize * d;
        let per_row = angles
            .cos
            .chunks_exact(half.max(1))
            .zip(angles.sin.chunks_exact(half.max(1)));
        for (row, (cos, sin)) in rows.chunks_exact_mut(width).zip(per_row) {
            for head in row.chunks_exact_mut(d) {
                let head = &mut head[at..];
                match self.mode {
                    RopeMode::Interleaved => {
                        for (i, pair) in head[..2 * half].chunks_exact_mut(2).enumerate() {
                            let (x1, x2) = (pair[0], pair[1]);
                            pair[0] = x1 * cos[i] - x2 * sin[i];
                            pair[1] = x2 * cos[i] + x1 * sin[i];
                        }
                    }
                    RopeMode::Neox => {
                        let (a, b) = head[..2 * half].split_at_mut(half);
                        for i in 0..half {
                            let (x1, x2) = (a[i], b[i]);
                            a[i] = x1 * cos[i] - x2 * sin[i];
                            b[i] = x2 * cos[i] + x1 * sin[i];
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Positions the model covers (the rows of [`tables`](Self::tables)).
    pub fn positions(&self) -> usize {
        self.positions as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_orders_turn_the_same_pairs_by_the_same_angles() {
        let spec = RopeSpec {
            mode: RopeMode::Neox,
            base: 10_000.0,
            dims: 4,
            factors: Some(vec![1.0, 2.0]),
            scale: 2.0,
            attn_factor: 1.5,
            yarn: None,
        };
        let neox = Rope::new(&spec, 8);
        let inter = Rope::new(
            &RopeSpec {
                mode: RopeMode::Interleaved,
                ..spec
            },
            8,
        );
        // Position 6: angle i = 6 / 2 × 10000^(−i/2) / factor[i].
        let angles = [3.0f64, 3.0 * 0.01 / 2.0];
        let mut a = [1.0, 2.0, 3.0, 4.0, 9.0];
        let mut b = [1.0, 3.0, 2.0, 4.0, 9.0];
        let mut step = StepAngles::default();
        neox.step_angles(&[6], &mut step);
        neox.apply(&mut a[..4], 1, 4, 0, &step).unwrap();
        inter.apply(&mut b[..4], 1, 4, 0, &step).unwrap();
        // Rotating past a head's end is refused and changes nothing.
        let before = a;
        let err = neox.apply(&mut a[..4], 1, 4, 2, &step).unwrap_err();
        assert!(matches!(
            err,
            ModelError::RopeSpan {
                offset: 2,
                rope_dim: 4,
                head_dim: 4
            }
        ));
        assert_eq!(a, before);
        for (i, &t) in angles.iter().enumerate() {
            let (x1, x2) = ([1.0, 2.0][i], [3.0, 4.0][i]);
            let (c, s) = (1.5 * t.cos(), 1.5 * t.sin());
            let want = (x1 * c - x2 * s, x2 * c + x1 * s);
            assert!(
                (f64::from(a[i]) - want.0).abs() < 1e-5
                    && (f64::from(a[i + 2]) - want.1).abs() < 1e-5
            );
            assert!(
                (f64::from(b[2 * i]) - want.0).abs() < 1e-5
                    && (f64::from(b[2 * i + 1]) - want.1).abs() < 1e-5
            );
        }
        assert_eq!(neox.positions(), 8);
        // The device's tables hold the angles the rotation used: turning
        // (1, 0) gives (cos, sin).
        let (cos, sin) = neox.tables();
        assert_eq!((cos.len(), sin.len()), (16, 16));
        let positions = [5, 0, 7, 5];
        neox.step_angles(&positions, &mut step);
        let mut units = [1.0, 1.0, 0.0, 0.0].repeat(positions.len());
        neox.apply(&mut units, 1, 4, 0, &step).unwrap();
        for (unit, &pos) in units.chunks_exact(4).zip(&positions) {
            let at = pos as usize * 2;
            assert_eq!([unit[0], unit[1]], [cos[at], cos[at + 1]]);
            assert_eq!([unit[2], unit[3]], [sin[at], sin[at + 1]]);
        }
    }
}
