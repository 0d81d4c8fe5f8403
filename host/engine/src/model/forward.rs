//! The forward pass of one engine step: every new token of the batch, packed
//! in one tensor, through every layer; attention goes through the backend's
//! paged KV cache.

use std::sync::{Mutex, PoisonError};

use ndarray::linalg::general_mat_mul;
use ndarray::{s, Array1, ArrayView2, ArrayViewMut2, Axis};
use pagoda_core::backend::{Backend, SeqAttention};
use pagoda_core::Slot;

use pagoda_core::QuantKind;
use pagoda_cpu::quant::MAX_ROWS_PER_PASS;
use pagoda_cpu::{matmul_team, Isa, QMatError, QuantMatrix, QuantizedActivations, Team, TeamError};

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
    /// How many of the rows are prompt tokens (prefill); 0 for a step that
    /// only decodes. Under [`ActPrecision::Int8Decode`](super::ActPrecision::Int8Decode)
    /// a step with any prompt row keeps f32 activations, so a prompt gives
    /// the same first token whether or not part of it came from the cache.
    pub prompt_rows: usize,
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
/// not reallocated after that. They also hold the thread team the forward
/// pass multiplies with (one per engine, created once; on the CPU backend
/// the backend's own team, so attention and products share its threads).
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
    /// A product's result before it is added to the residual stream.
    pub(super) sum: Vec<f32>,
    /// The normed activations quantized once per weight format.
    pub(super) qx: [QuantizedActivations; 4],
    /// Workers for the products; started on first use when built by
    /// [`Default`].
    pub(super) team: Option<Team>,
    /// A model's weights on a Vulkan device, uploaded by its first step
    /// there (see `device`).
    pub(super) device: Option<super::device::DeviceModel>,
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
            sum: Vec::new(),
            qx: Default::default(),
            team: None,
            device: None,
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

    /// Buffers over `team`, a handle on threads that may also serve the
    /// backend (see [`pagoda_cpu::CpuBackend::team`]): the step then runs on
    /// those threads and no others.
    pub fn with_team(team: Team) -> Self {
        let mut act = Self::empty(team.workers());
        act.team = Some(team);
        act
    }

    /// Workers the products use.
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
    /// Tells models apart (clones share it: same weights), so a backend
    /// knows which model's weights it holds (see `device`).
    id: u64,
}

/// The next [`Model`]'s id.
static NEXT_MODEL_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

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
            id: NEXT_MODEL_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        }
    }

    /// The model's id: equal for a model and its clones only.
    pub(super) fn id(&self) -> u64 {
        self.id
    }

    /// The rotary tables (`[max_context, rope_dim/2]` cosines, then sines)
    /// and whether they rotate interleaved pairs.
    pub(super) fn rope_tables(&self) -> (&[f32], &[f32], bool) {
        (&self.rope_cos, &self.rope_sin, self.interleaved)
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
        // The products run on the team (see `Projector`); it is lent out
        // for the step and put back whatever happens.
        let mut team = act.take_team().map_err(ForwardError::Model)?;
        let result = self.dense_step(w, backend, store, input, act, &mut team, logits);
        act.team = Some(team);
        result
    }

    #[allow(clippy::too_many_arguments)]
    fn dense_step<B: Backend>(
        &self,
        w: &Weights,
        backend: &mut B,
        store: &mut B::KvStore,
        input: &StepInput<'_>,
        act: &mut Activations,
        team: &mut Team,
        logits: &mut Vec<f32>,
    ) -> Result<(), ForwardError<B::Error>> {
        let c = self.config();
        let t = input.tokens.len();
        let (hidden, q_dim, kv_dim, ffn) =
            (c.hidden as usize, c.q_dim(), c.kv_dim(), c.ffn as usize);
        let shape = c.attention_shape();
        let model = ForwardError::Model;
        let Activations {
            x,
            h,
            q,
            k,
            v,
            attn,
            gate,
            up,
            last,
            sum,
            qx,
            isa,
            ..
        } = act;
        let mut p = Projector {
            team,
            isa: *isa,
            qx: &mut qx[0],
            sum,
        };

        grow(x, t * hidden);
        for (row, &token) in x.chunks_exact_mut(hidden).zip(input.tokens) {
            for (d, s) in row.iter_mut().zip(w.embed.row(token as usize)) {
                *d = *s;
            }
        }
        for (layer_index, layer) in w.layers.iter().enumerate() {
            let layer_id = layer_index as u32;
            rms_norm(p.team, x, h, t, hidden, &layer.attn_norm, c.rms_eps).map_err(model)?;
            p.project(h, t, layer.wq.view(), q, false).map_err(model)?;
            p.project(h, t, layer.wk.view(), k, false).map_err(model)?;
            p.project(h, t, layer.wv.view(), v, false).map_err(model)?;
            add_bias(&mut q[..t * q_dim], layer.bq.as_ref());
            add_bias(&mut k[..t * kv_dim], layer.bk.as_ref());
            add_bias(&mut v[..t * kv_dim], layer.bv.as_ref());
            self.rope(&mut q[..t * q_dim], c.q_heads, input.positions);
            self.rope(&mut k[..t * kv_dim], c.kv_heads, input.positions);
            backend
                .scatter(
                    store,
                    layer_id,
                    input.slots,
                    &k[..t * kv_dim],
                    &v[..t * kv_dim],
                )
                .map_err(ForwardError::Backend)?;
            grow(attn, t * q_dim);
            backend
                .attention(
                    store,
                    layer_id,
                    shape,
                    input.seqs,
                    &q[..t * q_dim],
                    &mut attn[..t * q_dim],
                )
                .map_err(ForwardError::Backend)?;
            p.project(attn, t, layer.wo.view(), x, true)
                .map_err(model)?;

            rms_norm(p.team, x, h, t, hidden, &layer.ffn_norm, c.rms_eps).map_err(model)?;
            p.project(h, t, layer.w_gate.view(), gate, false)
                .map_err(model)?;
            p.project(h, t, layer.w_up.view(), up, false)
                .map_err(model)?;
            for (g, u) in gate[..t * ffn].iter_mut().zip(&up[..t * ffn]) {
                *g = *g / (1.0 + (-*g).exp()) * u;
            }
            p.project(gate, t, layer.w_down.view(), x, true)
                .map_err(model)?;
        }

        // Only the rows that sample need the output head.
        let s = input.sample_rows.len();
        grow(h, s * hidden);
        for (row, &r) in h[..s * hidden]
            .chunks_exact_mut(hidden)
            .zip(input.sample_rows)
        {
            let start = r as usize * hidden;
            row.copy_from_slice(&x[start..start + hidden]);
        }
        rms_norm(p.team, h, last, s, hidden, &w.final_norm, c.rms_eps).map_err(model)?;
        let vocab = c.vocab as usize;
        if logits.len() != s * vocab {
            logits.resize(s * vocab, 0.0);
        }
        p.project(last, s, w.lm_head(), logits, false)
            .map_err(model)
    }

    /// Every token in the vocabulary, every position in the context, one
    /// slot and position per token, sample rows in range.
    pub(super) fn check(&self, input: &StepInput<'_>) -> Result<(), ModelError> {
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

/// Grows `buf` to at least `len` (buffers never shrink).
fn grow(buf: &mut Vec<f32>, len: usize) {
    if buf.len() < len {
        buf.resize(len, 0.0);
    }
}

/// Most rows of a dense step that go to the team's f32 products: they stream
/// each weight row once, which wins while a step is bound by reading the
/// weights; past a few rows the step is bound by arithmetic, where the
/// general product's packed, tiled kernel is several times faster
/// (SmolLM2, 2 cores: 1 row 2.7× faster on the team, 16 rows 2× slower).
const DENSE_TEAM_MAX_ROWS: usize = 4;
const _: () = assert!(DENSE_TEAM_MAX_ROWS <= MAX_ROWS_PER_PASS);

/// Output columns a worker's share of a general product is a multiple of:
/// whole register tiles of the single-threaded kernel.
const GENERAL_COLUMNS: usize = 16;

/// Projections of a dense step: `out = x · w` or `out += x · w` for `t`
/// rows, on the team. A step of at most [`DENSE_TEAM_MAX_ROWS`] rows over a
/// matrix whose output columns are contiguous (a GGUF file's rows, or the
/// tied head) goes to the team's f32 product, which streams each weight row
/// once for every row of the step; a general matrix product would first
/// pack the whole matrix, moving its bytes twice per decode step. Anything
/// else takes the general product, its output columns split across the
/// team (see [`general_on_team`]).
struct Projector<'a> {
    team: &'a mut Team,
    isa: Isa,
    qx: &'a mut QuantizedActivations,
    sum: &'a mut Vec<f32>,
}

impl Projector<'_> {
    fn project(
        &mut self,
        x: &[f32],
        t: usize,
        w: ArrayView2<'_, f32>,
        out: &mut Vec<f32>,
        accumulate: bool,
    ) -> Result<(), ModelError> {
        let (inputs, outputs) = w.dim();
        let len = t * outputs;
        grow(out, len);
        let columns_contiguous = w.strides() == [1, inputs as isize];
        let kernel = ModelError::Kernel;
        match w.as_slice_memory_order() {
            Some(data) if columns_contiguous && t <= DENSE_TEAM_MAX_ROWS => {
                let bytes: &[u8] = bytemuck::cast_slice(data);
                let m = QuantMatrix::new(QuantKind::F32, outputs, inputs, bytes).map_err(kernel)?;
                self.qx
                    .quantize(QuantKind::F32, &x[..t * inputs], t, inputs)
                    .map_err(kernel)?;
                if accumulate {
                    grow(self.sum, len);
                    matmul_team(self.team, self.isa, &m, self.qx, &mut self.sum[..len])
                        .map_err(kernel)?;
                    for (o, s) in out[..len].iter_mut().zip(&self.sum[..len]) {
                        *o += s;
                    }
                    Ok(())
                } else {
                    matmul_team(self.team, self.isa, &m, self.qx, &mut out[..len]).map_err(kernel)
                }
            }
            _ => {
                let beta = if accumulate { 1.0 } else { 0.0 };
                let out = ArrayViewMut2::from_shape((t, outputs), &mut out[..len])
                    .expect("sized by grow above");
                general_on_team(self.team, read(x, t, inputs), w, beta, out)
                    .map_err(|e| kernel(QMatError::Team(e)))
            }
        }
    }
}

/// `out = x · w + beta × out` with the output's columns split across the
/// team in runs of [`GENERAL_COLUMNS`], each worker running the
/// single-threaded general product on its own columns (packing only its
/// part of `w`). Nothing is allocated: workers take the next run of
/// columns from one shared iterator.
fn general_on_team(
    team: &mut Team,
    x: ArrayView2<'_, f32>,
    w: ArrayView2<'_, f32>,
    beta: f32,
    mut out: ArrayViewMut2<'_, f32>,
) -> Result<(), TeamError> {
    let workers = team.workers();
    if workers == 1 {
        general_mat_mul(1.0, &x, &w, beta, &mut out);
        return Ok(());
    }
    let width = w
        .ncols()
        .div_ceil(workers)
        .next_multiple_of(GENERAL_COLUMNS)
        .max(GENERAL_COLUMNS);
    let runs = Mutex::new(out.axis_chunks_iter_mut(Axis(1), width).enumerate());
    team.run(&|_, _| loop {
        let next = runs.lock().unwrap_or_else(PoisonError::into_inner).next();
        let Some((i, mut run)) = next else { break };
        let first = i * width;
        let w = w.slice(s![.., first..first + run.ncols()]);
        general_mat_mul(1.0, &x, &w, beta, &mut run);
    })
}

/// `out`'s first `rows` rows of `width` = `x`'s RMS-normed by `gain`
/// ([`rms_norm_row`]), one row per piece on the team from two rows (a
/// single row is not worth a hand-off).
pub(super) fn rms_norm(
    team: &mut Team,
    x: &[f32],
    out: &mut Vec<f32>,
    rows: usize,
    width: usize,
    gain: &Array1<f32>,
    eps: f32,
) -> Result<(), ModelError> {
    if out.len() < rows * width {
        out.resize(rows * width, 0.0);
    }
    let out = &mut out[..rows * width];
    if rows < 2 {
        for (src, dst) in x.chunks_exact(width).zip(out.chunks_exact_mut(width)) {
            rms_norm_row(src, dst, gain, eps);
        }
        return Ok(());
    }
    team.for_each_chunk(out, width, &|i, dst| {
        rms_norm_row(&x[i * width..(i + 1) * width], dst, gain, eps)
    })
    .map_err(|e| ModelError::Kernel(QMatError::Team(e)))
}

/// One row of [`rms_norm`]: `dst = src / rms(src) × gain`. The squares
/// are summed in eight running lanes, which the compiler keeps in vector
/// registers (one running sum is a chain of dependent adds).
fn rms_norm_row(src: &[f32], dst: &mut [f32], gain: &Array1<f32>, eps: f32) {
    let mut lanes = [0.0f32; 8];
    let eights = src.chunks_exact(8);
    let rest: f32 = eights.remainder().iter().map(|v| v * v).sum();
    for c in eights {
        for (l, v) in lanes.iter_mut().zip(c) {
            *l += v * v;
        }
    }
    let mean_square = (lanes.iter().sum::<f32>() + rest) / src.len() as f32;
    let inv = 1.0 / (mean_square + eps).sqrt();
    for ((d, s), g) in dst.iter_mut().zip(src).zip(gain) {
        *d = s * inv * g;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `general_on_team` on 1 to 3 workers (3 also where threads outnumber
    /// cores) against a plain f64 triple loop, over weights stored as a GGUF
    /// file's rows (a transposed view) and row-major, with and without
    /// accumulating, at widths that do not divide into the workers' runs.
    #[test]
    fn general_products_on_the_team_match_a_plain_loop() {
        let mut rng = fastrand::Rng::with_seed(3);
        for workers in [1, 2, 3] {
            let mut team = Team::new(workers).unwrap();
            for (t, inputs, outputs) in [(5, 64, 37), (9, 96, 100), (33, 40, 1000), (1, 8, 3)] {
                let x: Vec<f32> = (0..t * inputs).map(|_| rng.f32() - 0.5).collect();
                let rows: Vec<f32> = (0..outputs * inputs).map(|_| rng.f32() - 0.5).collect();
                let file_rows = ArrayView2::from_shape((outputs, inputs), &rows).unwrap();
                let row_major = file_rows.t().as_standard_layout().into_owned();
                for (w, beta) in [(file_rows.t(), 0.0), (row_major.view(), 1.0)] {
                    let start: Vec<f32> = (0..t * outputs).map(|_| rng.f32()).collect();
                    let mut out = start.clone();
                    let view = ArrayViewMut2::from_shape((t, outputs), &mut out).unwrap();
                    general_on_team(&mut team, read(&x, t, inputs), w, beta, view).unwrap();
                    for r in 0..t {
                        for c in 0..outputs {
                            let dot: f64 = (0..inputs)
                                .map(|i| f64::from(x[r * inputs + i]) * f64::from(w[[i, c]]))
                                .sum();
                            let want = dot + f64::from(beta * start[r * outputs + c]);
                            let got = f64::from(out[r * outputs + c]);
                            assert!(
                                (got - want).abs() < 1e-4,
                                "{workers} workers, {t}×{inputs}×{outputs} [{r},{c}]: {got} vs {want}"
                            );
                        }
                    }
                }
            }
        }
    }
}
