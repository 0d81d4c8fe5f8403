//! The forward pass of one engine step: every new token of the batch, packed
//! in one tensor, through every layer; attention goes through the backend's
//! paged KV cache.

use ndarray::linalg::general_mat_mul;
use ndarray::{Array1, ArrayView2, ArrayViewMut2};
use pagoda_core::backend::{Backend, SeqAttention};
use pagoda_core::Slot;

use super::config::{ModelConfig, ModelError};
use super::weights::Weights;

/// The new tokens of one step, packed: row `i` is token `tokens[i]` at
/// `positions[i]`, whose keys and values go to `slots[i]`. `seqs` says which
/// rows belong to which sequence; logits are computed only for
/// `sample_rows` (the last row of each sequence that samples this step).
#[derive(Debug, Clone, Copy)]
pub struct StepInput<'a> {
    /// Token ids.
    pub tokens: &'a [u32],
    /// Their positions in their sequences.
    pub positions: &'a [u32],
    /// Their KV slots.
    pub slots: &'a [Slot],
    /// The attention batch over those rows.
    pub seqs: &'a [SeqAttention<'a>],
    /// Rows whose logits are wanted.
    pub sample_rows: &'a [u32],
}

/// Why a forward pass failed.
#[derive(Debug)]
pub enum ForwardError<E> {
    /// The input does not fit the model (checked before any compute).
    Model(ModelError),
    /// The backend refused or failed.
    Backend(E),
}

/// Reusable activation buffers: they grow to the largest step seen and are
/// not reallocated after that.
#[derive(Debug, Default)]
pub struct Activations {
    x: Vec<f32>,
    h: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    attn: Vec<f32>,
    gate: Vec<f32>,
    up: Vec<f32>,
    last: Vec<f32>,
}

fn view(buf: &mut Vec<f32>, rows: usize, cols: usize) -> ArrayViewMut2<'_, f32> {
    if buf.len() < rows * cols {
        buf.resize(rows * cols, 0.0);
    }
    ArrayViewMut2::from_shape((rows, cols), &mut buf[..rows * cols]).expect("length checked above")
}

fn read(buf: &[f32], rows: usize, cols: usize) -> ArrayView2<'_, f32> {
    ArrayView2::from_shape((rows, cols), &buf[..rows * cols]).expect("length checked by view")
}

/// A Llama-architecture decoder ready to run: weights plus the rotary
/// tables.
#[derive(Debug, Clone)]
pub struct Model {
    weights: Weights,
    /// `cos` and `sin` of position × frequency, `[max_context, rope_dim/2]`.
    rope_cos: Vec<f32>,
    rope_sin: Vec<f32>,
}

impl Model {
    /// A model over `weights`.
    pub fn new(weights: Weights) -> Self {
        let c = *weights.config();
        let half = (c.rope_dim / 2) as usize;
        let mut rope_cos = Vec::with_capacity(c.max_context as usize * half);
        let mut rope_sin = Vec::with_capacity(c.max_context as usize * half);
        let factors = weights.rope_factors();
        for pos in 0..c.max_context {
            for i in 0..half {
                let mut freq =
                    f64::from(c.rope_theta).powf(-2.0 * i as f64 / f64::from(c.rope_dim));
                if let Some(f) = factors {
                    freq /= f64::from(f[i]);
                }
                let angle = f64::from(pos) * freq;
                rope_cos.push(angle.cos() as f32);
                rope_sin.push(angle.sin() as f32);
            }
        }
        Self {
            weights,
            rope_cos,
            rope_sin,
        }
    }

    /// The model's configuration.
    pub fn config(&self) -> &ModelConfig {
        self.weights.config()
    }

    /// The model's weights.
    pub fn weights(&self) -> &Weights {
        &self.weights
    }

    /// Runs one step: writes this step's keys and values into the KV store
    /// and `sample_rows.len() × vocab` logits into `logits`.
    pub fn forward<B: Backend>(
        &self,
        backend: &mut B,
        store: &mut B::KvStore,
        input: &StepInput<'_>,
        act: &mut Activations,
        logits: &mut Vec<f32>,
    ) -> Result<(), ForwardError<B::Error>> {
        let c = self.config();
        self.check(input).map_err(ForwardError::Model)?;
        let t = input.tokens.len();
        let (hidden, q_dim, kv_dim, ffn) =
            (c.hidden as usize, c.q_dim(), c.kv_dim(), c.ffn as usize);
        let shape = c.attention_shape();
        let w = &self.weights;

        let mut x = view(&mut act.x, t, hidden);
        for (mut row, &token) in x.rows_mut().into_iter().zip(input.tokens) {
            row.assign(&w.embed.row(token as usize));
        }
        for (layer_index, layer) in w.layers.iter().enumerate() {
            let layer_id = layer_index as u32;
            rms_norm(&act.x, &mut act.h, t, hidden, &layer.attn_norm, c.rms_eps);
            let h = read(&act.h, t, hidden);
            general_mat_mul(1.0, &h, &layer.wq, 0.0, &mut view(&mut act.q, t, q_dim));
            general_mat_mul(1.0, &h, &layer.wk, 0.0, &mut view(&mut act.k, t, kv_dim));
            general_mat_mul(1.0, &h, &layer.wv, 0.0, &mut view(&mut act.v, t, kv_dim));
            add_bias(&mut act.q[..t * q_dim], layer.bq.as_ref());
            add_bias(&mut act.k[..t * kv_dim], layer.bk.as_ref());
            add_bias(&mut act.v[..t * kv_dim], layer.bv.as_ref());
            self.rope(&mut act.q[..t * q_dim], c.q_heads, input.positions);
            self.rope(&mut act.k[..t * kv_dim], c.kv_heads, input.positions);
            backend
                .scatter(
                    store,
                    layer_id,
                    input.slots,
                    &act.k[..t * kv_dim],
                    &act.v[..t * kv_dim],
                )
                .map_err(ForwardError::Backend)?;
            view(&mut act.attn, t, q_dim);
            backend
                .attention(
                    store,
                    layer_id,
                    shape,
                    input.seqs,
                    &act.q[..t * q_dim],
                    &mut act.attn[..t * q_dim],
                )
                .map_err(ForwardError::Backend)?;
            let attn = read(&act.attn, t, q_dim);
            general_mat_mul(1.0, &attn, &layer.wo, 1.0, &mut view(&mut act.x, t, hidden));

            rms_norm(&act.x, &mut act.h, t, hidden, &layer.ffn_norm, c.rms_eps);
            let h = read(&act.h, t, hidden);
            general_mat_mul(
                1.0,
                &h,
                &layer.w_gate,
                0.0,
                &mut view(&mut act.gate, t, ffn),
            );
            general_mat_mul(1.0, &h, &layer.w_up, 0.0, &mut view(&mut act.up, t, ffn));
            for (g, u) in act.gate[..t * ffn].iter_mut().zip(&act.up[..t * ffn]) {
                *g = *g / (1.0 + (-*g).exp()) * u;
            }
            let gate = read(&act.gate, t, ffn);
            general_mat_mul(
                1.0,
                &gate,
                &layer.w_down,
                1.0,
                &mut view(&mut act.x, t, hidden),
            );
        }

        // Only the rows that sample need the output head.
        let s = input.sample_rows.len();
        if act.h.len() < s * hidden {
            act.h.resize(s * hidden, 0.0);
        }
        let gathered = &mut act.h[..s * hidden];
        for (row, &r) in gathered.chunks_exact_mut(hidden).zip(input.sample_rows) {
            let start = r as usize * hidden;
            row.copy_from_slice(&act.x[start..start + hidden]);
        }
        rms_norm(&act.h, &mut act.last, s, hidden, &w.final_norm, c.rms_eps);
        let vocab = c.vocab as usize;
        if logits.len() != s * vocab {
            logits.resize(s * vocab, 0.0);
        }
        let mut out =
            ArrayViewMut2::from_shape((s, vocab), &mut logits[..]).expect("logits sized above");
        general_mat_mul(
            1.0,
            &read(&act.last, s, hidden),
            &w.lm_head(),
            0.0,
            &mut out,
        );
        Ok(())
    }

    /// Every token in the vocabulary, every position in the context, one
    /// slot and position per token, sample rows in range.
    fn check(&self, input: &StepInput<'_>) -> Result<(), ModelError> {
        let c = self.config();
        let t = input.tokens.len();
        if input.positions.len() != t || input.slots.len() != t {
            return Err(ModelError::Batch {
                tokens: t,
                positions: input.positions.len(),
                slots: input.slots.len(),
            });
        }
        if let Some(&token) = input.tokens.iter().find(|&&x| x >= c.vocab) {
            return Err(ModelError::Token {
                token,
                vocab: c.vocab,
            });
        }
        if let Some(&position) = input.positions.iter().find(|&&p| p >= c.max_context) {
            return Err(ModelError::Position {
                position,
                max_context: c.max_context,
            });
        }
        if input.sample_rows.len() > t {
            return Err(ModelError::SampleRows {
                rows: input.sample_rows.len(),
                tokens: t,
            });
        }
        if let Some(&row) = input.sample_rows.iter().find(|&&r| r as usize >= t) {
            return Err(ModelError::SampleRow { row, tokens: t });
        }
        Ok(())
    }

    /// Rotary position embedding in the rotate-half layout over each head's
    /// first `rope_dim` dimensions: dimension `i` pairs with
    /// `i + rope_dim/2`; the rest of the head passes through.
    fn rope(&self, rows: &mut [f32], heads: u32, positions: &[u32]) {
        let d = self.config().head_dim as usize;
        let half = self.config().rope_dim as usize / 2;
        let width = heads as usize * d;
        for (row, &pos) in rows.chunks_exact_mut(width).zip(positions) {
            let cos = &self.rope_cos[pos as usize * half..][..half];
            let sin = &self.rope_sin[pos as usize * half..][..half];
            for head in row.chunks_exact_mut(d) {
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

/// Adds `bias` to every row of `rows` (nothing without a bias).
fn add_bias(rows: &mut [f32], bias: Option<&Array1<f32>>) {
    let Some(bias) = bias else { return };
    for row in rows.chunks_exact_mut(bias.len()) {
        for (x, b) in row.iter_mut().zip(bias) {
            *x += b;
        }
    }
}

/// `out = x / rms(x) × gain`, row by row.
fn rms_norm(
    x: &[f32],
    out: &mut Vec<f32>,
    rows: usize,
    width: usize,
    gain: &Array1<f32>,
    eps: f32,
) {
    if out.len() < rows * width {
        out.resize(rows * width, 0.0);
    }
    for (src, dst) in x[..rows * width]
        .chunks_exact(width)
        .zip(out[..rows * width].chunks_exact_mut(width))
    {
        let mean_square = src.iter().map(|v| v * v).sum::<f32>() / width as f32;
        let inv = 1.0 / (mean_square + eps).sqrt();
        for ((d, s), g) in dst.iter_mut().zip(src).zip(gain) {
            *d = s * inv * g;
        }
    }
}
