//! Rotary position embedding: its tables, built once per model from what
//! the architecture says (pair order, base, per-frequency factors, a linear
//! position scale, an attention factor), and the rotation itself.
//!
//! Angle `i` at position `p` is `p / scale × base^(−2i/rope_dim) /
//! factor[i]`; both its cosine and sine are multiplied by `attn_factor`
//! (LongRoPE's magnitude correction; 1 elsewhere). Llama 3.x's scaling
//! arrives as factors (`rope_freqs.weight`, which llama.cpp's converter
//! computes from the `llama3` formula), Phi-3's LongRoPE as the long or short
//! factors and an attention factor.

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
}

/// The tables one model's rotary reads: `[positions, dims/2]` cosines and
/// sines.
#[derive(Debug, Clone)]
pub struct Rope {
    pub(crate) mode: RopeMode,
    pub(crate) half: usize,
    pub(crate) cos: Vec<f32>,
    pub(crate) sin: Vec<f32>,
}

impl Rope {
    /// The tables of `spec` for positions `0..positions`.
    pub fn new(spec: &RopeSpec, positions: u32) -> Self {
        let half = (spec.dims / 2) as usize;
        let mut cos = Vec::with_capacity(positions as usize * half);
        let mut sin = Vec::with_capacity(positions as usize * half);
        for pos in 0..positions {
            for i in 0..half {
                let mut freq = f64::from(spec.base).powf(-2.0 * i as f64 / f64::from(spec.dims));
                if let Some(f) = &spec.factors {
                    freq /= f64::from(f[i]);
                }
                let angle = f64::from(pos) / f64::from(spec.scale) * freq;
                cos.push((angle.cos() * f64::from(spec.attn_factor)) as f32);
                sin.push((angle.sin() * f64::from(spec.attn_factor)) as f32);
            }
        }
        Self {
            mode: spec.mode,
            half,
            cos,
            sin,
        }
    }

    /// Rotates the first `dims` values of each `head_dim`-wide head of each
    /// row (`heads` heads a row) by its row's position.
    pub fn apply(&self, rows: &mut [f32], heads: u32, head_dim: u32, positions: &[u32]) {
        let (d, half) = (head_dim as usize, self.half);
        let width = heads as usize * d;
        for (row, &pos) in rows.chunks_exact_mut(width).zip(positions) {
            let cos = &self.cos[pos as usize * half..][..half];
            let sin = &self.sin[pos as usize * half..][..half];
            for head in row.chunks_exact_mut(d) {
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
    }

    /// Positions the tables cover.
    pub fn positions(&self) -> usize {
        self.cos.len() / self.half.max(1)
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
        neox.apply(&mut a[..4], 1, 4, &[6]);
        inter.apply(&mut b[..4], 1, 4, &[6]);
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
    }
}
