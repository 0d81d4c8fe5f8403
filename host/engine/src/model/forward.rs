//! The forward pass of one engine step: every new token of the batch, packed
//! in one tensor, through every layer; attention goes through the backend's
//! paged KV cache.

use ndarray::linalg::general_mat_mul;
use ndarray::{Array1, ArrayView2, ArrayViewMut2};
use pagoda_core::backend::{Backend, SeqAttention};
use pagoda_core::Slot;

use pagoda_cpu::{Isa, QMatError, QuantizedActivations, Team, TeamError};

use super::config::{ModelConfig, ModelError};
use super::quantized::QuantizedWeights;
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
/// not reallocated after that. They also hold the thread team the quantized
/// forward pass multiplies with (one per engine, created once).
#[derive(Debug)]
pub struct Activations {
    pub(super) x: Vec<f32>,
    pub(super) h: Vec<f32>,
    pub(super) q: Vec<f32>,
    pub(super) k: Vec<f32>,
    pub(super) v: Vec<f32>,
    pub(super) attn: Vec<f32>,
    pub(super) gate: Vec<f32>,
    pub(super) up: Vec<f32>,
    pub(super) last: Vec<f32>,
    /// The normed activations quantized once per weight format.
    pub(super) qx: [QuantizedActivations; 4],
    /// Workers for the quantized products; started on first use when
    /// built by [`Default`].
    pub(super) team: Option<Team>,
    threads: usize,
    pub(super) isa: Isa,
}

impl Default for Activations {
    /// Buffers for a team of one worker per available core, started on the
    /// first quantized step.
    fn default() -> Self {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        Self::empty(threads)
    }
}

impl Activations {
    fn empty(threads: usize) -> Self {
        Self {
            x: Vec::new(),
            h: Vec::new(),
            q: Vec::new(),
            k: Vec::new(),
            v: Vec::new(),
            attn: Vec::new(),
            gate: Vec::new(),
            up: Vec::new(),
            last: Vec::new(),
            qx: Default::default(),
            team: None,
            threads: threads.max(1),
            isa: Isa::detect(),
        }
    }

    /// Buffers and a team of `threads` workers (the caller counts as one;
    /// at least one), started now.
    pub fn with_threads(threads: usize) -> Result<Self, TeamError> {
        let mut act = Self::empty(threads);
        act.team = Some(Team::new(act.threads)?);
        Ok(act)
    }

    /// Workers the quantized products use.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// The team, taken out (the caller puts it back), started if it was
    /// not yet.
    pub(super) fn take_team(&mut self) -> Result<Team, ModelError> {
        match self.team.take() {
            Some(team) => Ok(team),
            None => Team::new(self.threads).map_err(|e| ModelError::Kernel(QMatError::Team(e))),
        }
    }
}

pub(super) fn view(buf: &mut Vec<f32>, rows: usize, cols: usize) -> ArrayViewMut2<'_, f32> {
    if buf.len() < rows * cols {
        buf.resize(rows * cols, 0.0);
    }
    ArrayViewMut2::from_shape((rows, cols), &mut buf[..rows * cols]).expect("length checked above")
}

pub(super) fn read(buf: &[f32], rows: usize, cols: usize) -> ArrayView2<'_, f32> {
    ArrayView2::from_shape((rows, cols), &buf[..rows * cols]).expect("length checked by view")
}

/// The weights a model runs on.
#[derive(Debug, Clone)]
enum Repr {
    /// Dequantized to f32 (the embedded model, and a reference path).
    Dense(Weights),
    /// Kept quantized in the mapped file.
    Quantized(QuantizedWeights),
}

/// A Llama-architecture decoder ready to run: weights (dense or quantized
/// in place) plus the rotary tables.
#[derive(Debug, Clone)]
pub struct Model {
    repr: Repr,
    /// Rotate interleaved pairs `(2i, 2i+1)` rather than halves `(i, i +
    /// rope_dim/2)`: a `llama` file's own row order, kept in place.
    interleaved: bool,
    /// `cos` and `sin` of position × frequency, `[max_context, rope_dim/2]`.
    rope_cos: Vec<f32>,
    rope_sin: Vec<f32>,
}

impl Model {
    /// A model over dense f32 `weights` (rotate-half rotary).
    pub fn new(weights: Weights) -> Self {
        Self::build(Repr::Dense(weights), false)
    }

    /// A model over weights kept quantized in their file; rotary in the
    /// file's order ([`QuantizedWeights::interleaved_rope`]).
    pub fn from_quantized(weights: QuantizedWeights) -> Self {
        let interleaved = weights.interleaved_rope();
        Self::build(Repr::Quantized(weights), interleaved)
    }

    fn build(repr: Repr, interleaved: bool) -> Self {
        let (c, factors) = match &repr {
            Repr::Dense(w) => (*w.config(), w.rope_factors()),
            Repr::Quantized(w) => (*w.config(), w.rope_factors()),
        };
        let half = (c.rope_dim / 2) as usize;
        let mut rope_cos = Vec::with_capacity(c.max_context as usize * half);
        let mut rope_sin = Vec::with_capacity(c.max_context as usize * half);
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
            repr,
            interleaved,
            rope_cos,
            rope_sin,
        }
    }

    /// The model's configuration.
    pub fn config(&self) -> &ModelConfig {
        match &self.repr {
            Repr::Dense(w) => w.config(),
            Repr::Quantized(w) => w.config(),
        }
    }

    /// The dense weights; `None` when the model runs on quantized ones.
    pub fn weights(&self) -> Option<&Weights> {
        match &self.repr {
            Repr::Dense(w) => Some(w),
            Repr::Quantized(_) => None,
        }
    }

    /// The quantized weights; `None` for a dense model.
    pub fn quantized_weights(&self) -> Option<&QuantizedWeights> {
        match &self.repr {
            Repr::Dense(_) => None,
            Repr::Quantized(w) => Some(w),
        }
    }

    /// Whether the matrices stay quantized in the mapped file.
    pub fn is_quantized(&self) -> bool {
        matches!(self.repr, Repr::Quantized(_))
    }

    /// Whether the output head is the embedding.
    pub fn is_tied(&self) -> bool {
        match &self.repr {
            Repr::Dense(w) => w.is_tied(),
            Repr::Quantized(w) => w.is_tied(),
        }
    }

    /// Parameters held: a tied head counts once, biases count.
    pub fn parameters(&self) -> u64 {
        match &self.repr {
            Repr::Dense(w) => w.parameters(),
            Repr::Quantized(w) => w.parameters(),
        }
    }

    /// Bytes of weights a decode step reads: the quantized blocks as the
    /// file holds them, or 4 per parameter for dense f32 weights (the
    /// embedding only as the output head when tied; lookups read a row).
    pub fn weight_bytes(&self) -> u64 {
        match &self.repr {
            Repr::Dense(w) => {
                let lookup_only = if w.is_tied() {
                    0
                } else {
                    w.embed().len() as u64
                };
                4 * (w.parameters() - lookup_only)
            }
            Repr::Quantized(w) => w.weight_bytes(),
        }
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
        self.check(input).map_err(ForwardError::Model)?;
        match &self.repr {
            Repr::Dense(w) => self.forward_dense(w, backend, store, input, act, logits),
            Repr::Quantized(w) => self.forward_quantized(w, backend, store, input, act, logits),
        }
    }

    /// [`forward`](Self::forward) over dense weights, with ndarray.
    fn forward_dense<B: Backend>(
        &self,
        w: &Weights,
        backend: &mut B,
        store: &mut B::KvStore,
        input: &StepInput<'_>,
        act: &mut Activations,
        logits: &mut Vec<f32>,
    ) -> Result<(), ForwardError<B::Error>> {
        let c = self.config();
        let t = input.tokens.len();
        let (hidden, q_dim, kv_dim, ffn) =
            (c.hidden as usize, c.q_dim(), c.kv_dim(), c.ffn as usize);
        let shape = c.attention_shape();

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

    /// Rotary position embedding over each head's first `rope_dim`
    /// dimensions (the rest passes through): rotate-half pairs dimension
    /// `i` with `i + rope_dim/2`; interleaved pairs `2i` with `2i + 1`.
    /// Pair `i` turns by position × frequency `i` either way.
    pub(super) fn rope(&self, rows: &mut [f32], heads: u32, positions: &[u32]) {
        let d = self.config().head_dim as usize;
        let half = self.config().rope_dim as usize / 2;
        let width = heads as usize * d;
        for (row, &pos) in rows.chunks_exact_mut(width).zip(positions) {
            let cos = &self.rope_cos[pos as usize * half..][..half];
            let sin = &self.rope_sin[pos as usize * half..][..half];
            for head in row.chunks_exact_mut(d) {
                if self.interleaved {
                    for (i, pair) in head[..2 * half].chunks_exact_mut(2).enumerate() {
                        let (x1, x2) = (pair[0], pair[1]);
                        pair[0] = x1 * cos[i] - x2 * sin[i];
                        pair[1] = x2 * cos[i] + x1 * sin[i];
                    }
                } else {
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

/// Adds `bias` to every row of `rows` (nothing without a bias).
pub(super) fn add_bias(rows: &mut [f32], bias: Option<&Array1<f32>>) {
    let Some(bias) = bias else { return };
    for row in rows.chunks_exact_mut(bias.len()) {
        for (x, b) in row.iter_mut().zip(bias) {
            *x += b;
        }
    }
}

/// `out = x / rms(x) × gain`, row by row.
pub(super) fn rms_norm(
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
