//! A model's weights, whatever their source.
//!
//! [`Weights::from_parts`] takes tensors from anywhere (the embedded seeded
//! default, a GGUF file through [`Weights::from_gguf`]) and checks every shape against the
//! [`ModelConfig`], so the forward pass never meets a malformed tensor.
//! Projection matrices are stored `[in, out]` so a row of activations times
//! the matrix is the projection; a loader whose format stores `[out, in]`
//! passes the transposed view (any memory layout is accepted). A tied output
//! head is not stored twice: without `lm_head` the forward pass multiplies by
//! the embedding's transpose.

use ndarray::{Array1, Array2, ArrayView2};

use super::config::{ModelConfig, ModelError};

/// One decoder layer's tensors.
#[derive(Debug, Clone)]
pub struct LayerWeights {
    /// RMSNorm gain before attention, `[hidden]`.
    pub attn_norm: Array1<f32>,
    /// Query projection, `[hidden, q_heads × head_dim]`.
    pub wq: Array2<f32>,
    /// Key projection, `[hidden, kv_heads × head_dim]`.
    pub wk: Array2<f32>,
    /// Value projection, `[hidden, kv_heads × head_dim]`.
    pub wv: Array2<f32>,
    /// Query bias, `[q_heads × head_dim]`, added after the projection (qwen2).
    pub bq: Option<Array1<f32>>,
    /// Key bias, `[kv_heads × head_dim]`.
    pub bk: Option<Array1<f32>>,
    /// Value bias, `[kv_heads × head_dim]`.
    pub bv: Option<Array1<f32>>,
    /// Output projection, `[q_heads × head_dim, hidden]`.
    pub wo: Array2<f32>,
    /// RMSNorm gain before the MLP, `[hidden]`.
    pub ffn_norm: Array1<f32>,
    /// SwiGLU gate, `[hidden, ffn]`.
    pub w_gate: Array2<f32>,
    /// SwiGLU up projection, `[hidden, ffn]`.
    pub w_up: Array2<f32>,
    /// MLP down projection, `[ffn, hidden]`.
    pub w_down: Array2<f32>,
}

/// Every tensor of a model, shape-checked against its configuration.
#[derive(Debug, Clone)]
pub struct Weights {
    config: ModelConfig,
    /// Token embedding, `[vocab, hidden]`.
    pub(crate) embed: Array2<f32>,
    pub(crate) layers: Vec<LayerWeights>,
    /// Final RMSNorm gain, `[hidden]`.
    pub(crate) final_norm: Array1<f32>,
    /// Output head, `[hidden, vocab]`; `None` when tied to the embedding.
    pub(crate) lm_head: Option<Array2<f32>>,
    /// Divisors of the rotary frequencies, `[rope_dim/2]` (Llama 3.x).
    pub(crate) rope_factors: Option<Array1<f32>>,
}

impl Weights {
    /// Assembles weights from tensors, checking each shape. `lm_head: None`
    /// ties the output head to the embedding.
    pub fn from_parts(
        config: ModelConfig,
        embed: Array2<f32>,
        layers: Vec<LayerWeights>,
        final_norm: Array1<f32>,
        lm_head: Option<Array2<f32>>,
    ) -> Result<Self, ModelError> {
        config.validate()?;
        let (v, h, q, kv, f) = (
            config.vocab as usize,
            config.hidden as usize,
            config.q_dim(),
            config.kv_dim(),
            config.ffn as usize,
        );
        check("embed", embed.shape(), &[v, h])?;
        check("final_norm", final_norm.shape(), &[h])?;
        if let Some(head) = &lm_head {
            check("lm_head", head.shape(), &[h, v])?;
        }
        if layers.len() != config.layers as usize {
            return Err(ModelError::LayerCount {
                given: layers.len(),
                expected: config.layers,
            });
        }
        for (i, layer) in layers.iter().enumerate() {
            let name = |t: &str| format!("layers.{i}.{t}");
            check(&name("attn_norm"), layer.attn_norm.shape(), &[h])?;
            check(&name("wq"), layer.wq.shape(), &[h, q])?;
            check(&name("wk"), layer.wk.shape(), &[h, kv])?;
            check(&name("wv"), layer.wv.shape(), &[h, kv])?;
            for (bias, t, width) in [
                (&layer.bq, "bq", q),
                (&layer.bk, "bk", kv),
                (&layer.bv, "bv", kv),
            ] {
                if let Some(b) = bias {
                    check(&name(t), b.shape(), &[width])?;
                }
            }
            check(&name("wo"), layer.wo.shape(), &[q, h])?;
            check(&name("ffn_norm"), layer.ffn_norm.shape(), &[h])?;
            check(&name("w_gate"), layer.w_gate.shape(), &[h, f])?;
            check(&name("w_up"), layer.w_up.shape(), &[h, f])?;
            check(&name("w_down"), layer.w_down.shape(), &[f, h])?;
        }
        let finite =
            embed.iter().all(|x| x.is_finite()) && lm_head.iter().flatten().all(|x| x.is_finite());
        if !finite {
            return Err(ModelError::NonFinite);
        }
        Ok(Self {
            config,
            embed,
            layers,
            final_norm,
            lm_head,
            rope_factors: None,
        })
    }

    /// Divides rotary frequency `i` by `factors[i]` (Llama 3.x's
    /// `rope_freqs`); each factor must be finite and positive.
    pub fn with_rope_factors(mut self, factors: Array1<f32>) -> Result<Self, ModelError> {
        check(
            "rope_factors",
            factors.shape(),
            &[self.config.rope_dim as usize / 2],
        )?;
        if !factors.iter().all(|x| x.is_finite() && *x > 0.0) {
            return Err(ModelError::NonFinite);
        }
        self.rope_factors = Some(factors);
        Ok(self)
    }

    /// Weights drawn from `seed`: each projection uniform with unit output
    /// variance (±√3/√fan_in), norms at one. Same seed, same model, on every
    /// machine.
    pub fn seeded(config: ModelConfig, seed: u64) -> Result<Self, ModelError> {
        config.validate()?;
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut matrix = |rows: usize, cols: usize| {
            let bound = 3f32.sqrt() / (rows as f32).sqrt();
            Array2::from_shape_simple_fn((rows, cols), || (rng.f32() * 2.0 - 1.0) * bound)
        };
        let (v, h, q, kv, f) = (
            config.vocab as usize,
            config.hidden as usize,
            config.q_dim(),
            config.kv_dim(),
            config.ffn as usize,
        );
        // Embedding rows of unit variance: fan-in 1 (drawn as one row, then
        // reshaped, which cannot fail for a standard-layout array).
        let embed = matrix(1, v * h)
            .into_shape_with_order((v, h))
            .map_err(|_| ModelError::Shape {
                name: "embed".into(),
                expected: vec![v, h],
                found: vec![1, v * h],
            })?;
        let layers = (0..config.layers)
            .map(|_| LayerWeights {
                attn_norm: Array1::ones(h),
                wq: matrix(h, q),
                wk: matrix(h, kv),
                wv: matrix(h, kv),
                bq: None,
                bk: None,
                bv: None,
                wo: matrix(q, h),
                ffn_norm: Array1::ones(h),
                w_gate: matrix(h, f),
                w_up: matrix(h, f),
                w_down: matrix(f, h),
            })
            .collect();
        let lm_head = matrix(h, v);
        Self::from_parts(config, embed, layers, Array1::ones(h), Some(lm_head))
    }

    /// The configuration the tensors were checked against.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// Token embedding, `[vocab, hidden]`.
    pub fn embed(&self) -> &Array2<f32> {
        &self.embed
    }

    /// The decoder layers.
    pub fn layers(&self) -> &[LayerWeights] {
        &self.layers
    }

    /// Final RMSNorm gain, `[hidden]`.
    pub fn final_norm(&self) -> &Array1<f32> {
        &self.final_norm
    }

    /// Output head, `[hidden, vocab]`: the embedding's transpose when tied.
    pub fn lm_head(&self) -> ArrayView2<'_, f32> {
        match &self.lm_head {
            Some(head) => head.view(),
            None => self.embed.t(),
        }
    }

    /// Divisors of the rotary frequencies, if any.
    pub fn rope_factors(&self) -> Option<&Array1<f32>> {
        self.rope_factors.as_ref()
    }

    /// Whether the output head is the embedding (no separate tensor).
    pub fn is_tied(&self) -> bool {
        self.lm_head.is_none()
    }

    /// Parameters held: a tied head counts once, biases count.
    pub fn parameters(&self) -> u64 {
        let layers: usize = self
            .layers
            .iter()
            .map(|l| {
                let biases = [&l.bq, &l.bk, &l.bv]
                    .iter()
                    .map(|b| b.as_ref().map_or(0, |b| b.len()))
                    .sum::<usize>();
                l.attn_norm.len()
                    + l.wq.len()
                    + l.wk.len()
                    + l.wv.len()
                    + biases
                    + l.wo.len()
                    + l.ffn_norm.len()
                    + l.w_gate.len()
                    + l.w_up.len()
                    + l.w_down.len()
            })
            .sum();
        let head = self.lm_head.as_ref().map_or(0, |h| h.len());
        (self.embed.len() + layers + self.final_norm.len() + head) as u64
    }
}

fn check(name: &str, found: &[usize], expected: &[usize]) -> Result<(), ModelError> {
    if found == expected {
        Ok(())
    } else {
        Err(ModelError::Shape {
            name: name.into(),
            expected: expected.to_vec(),
            found: found.to_vec(),
        })
    }
}
