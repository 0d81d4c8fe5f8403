//! The CPU backend's interpreter of a [`Program`]: every new token of the
//! batch, packed in one tensor per buffer, through every op; attention goes
//! through the backend's paged KV cache. One path for every weight format:
//! each product takes its matrix's format from the matrix.
//!
//! The products run on the [`Activations`]' thread team. A linear op's
//! input rows are prepared once for all the matrices that read them (q, k
//! and v; gate and up), kept f32 or, where the precision
//! [rounds](ActPrecision::rounds) them, quantized once per weight format to
//! 8-bit blocks for integer products. f32 matrices (dense models) take the
//! team's f32 product up to [`DENSE_TEAM_MAX_ROWS`] rows and the general
//! product, split across the team, above. Only the sampled rows go through
//! the final norm and the head.

use std::sync::{Mutex, PoisonError};

use ndarray::linalg::general_mat_mul;
use ndarray::{s, ArrayView2, ArrayViewMut2, Axis};
use pagoda_core::backend::{AttentionShape, Backend};
use pagoda_cpu::quant::MAX_ROWS_PER_PASS;
use pagoda_cpu::{
    gelu_tanh_mul, matmul_team, matmul_team_each, silu_mul, swiglu_oai_mul, ActFormat, Isa,
    QMatError, QuantMatrix, QuantizedActivations, Team, TeamError,
};

use super::config::{ModelConfig, ModelError};
use super::input::{ForwardError, StepInput};
use super::precision::ActPrecision;
use super::program::{Buf, Experts, Gating, NormKind, Op, Program, Proj};
use super::recurrent::RecurrentStates;
use super::rope::StepAngles;
use super::tensors::Matrix;

mod conv;
mod delta;
mod experts;
mod norm;
mod spans;
mod ssm;

use experts::{mixture, Routing};
use norm::{normalize, normalize_in_place, Gains};

fn index(b: Buf) -> usize {
    b as usize
}

/// Reusable activation buffers: they grow to the largest step seen and are
/// not reallocated after that. They also hold the thread team the products
/// run on (one per engine, created once; on the CPU backend the backend's
/// own team, so attention and products share its threads).
#[derive(Debug)]
pub struct Activations {
    bufs: [Vec<f32>; Buf::ALL.len()],
    /// A head's rows gathered for a per-head product, and its output.
    head_in: Vec<f32>,
    head_out: Vec<f32>,
    /// The sampled rows of the residual stream, then normed.
    rows: Vec<f32>,
    last: Vec<f32>,
    /// The input rows of a product, prepared once per weight format.
    qx: [QuantizedActivations; 4],
    /// This step's rotary angles under each of the program's tables.
    angles: Vec<StepAngles>,
    /// A mixture of experts' routing and rows.
    moe: Routing,
    /// Each sequence's recurrent state (a hybrid model's), the one thing
    /// here that outlives its step, a short convolution's window and what
    /// a delta net or a state space reuses.
    states: RecurrentStates,
    conv_window: Vec<f32>,
    delta: delta::RecurrentScratch,
    /// Workers for the products; started on first use when built by
    /// [`Default`].
    team: Option<Team>,
    threads: usize,
    isa: Isa,
}

impl Default for Activations {
    /// Buffers for a team of one worker per available core, started on the
    /// first step.
    fn default() -> Self {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        Self::empty(threads)
    }
}

impl Activations {
    fn empty(threads: usize) -> Self {
        Self {
            bufs: Default::default(),
            head_in: Vec::new(),
            head_out: Vec::new(),
            rows: Vec::new(),
            last: Vec::new(),
            qx: Default::default(),
            angles: Vec::new(),
            moe: Routing::default(),
            states: RecurrentStates::default(),
            conv_window: Vec::new(),
            delta: delta::RecurrentScratch::default(),
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
    fn take_team(&mut self) -> Result<Team, ModelError> {
        match self.team.take() {
            Some(team) => Ok(team),
            None => Team::new(self.threads).map_err(|e| ModelError::Kernel(QMatError::Team(e))),
        }
    }
}

/// One step being run: the program's shape, the step's rows, the buffers.
struct Run<'a> {
    c: &'a ModelConfig,
    t: usize,
    /// Each buffer's values per row, by [`index`].
    widths: [usize; Buf::ALL.len()],
    feed: Feed,
    act: &'a mut Activations,
    team: &'a mut Team,
}

/// Runs `program` for one step (see [`Model::forward`](super::Model::forward)).
#[allow(clippy::too_many_arguments)]
pub(super) fn forward<B: Backend>(
    program: &Program,
    c: &ModelConfig,
    precision: ActPrecision,
    backend: &mut B,
    store: &mut B::KvStore,
    input: &StepInput<'_>,
    act: &mut Activations,
    logits: &mut Vec<f32>,
) -> Result<(), ForwardError<B::Error>> {
    // The team is lent out for the step so the buffers can be borrowed
    // beside it, and put back whatever happens.
    let mut team = act.take_team().map_err(ForwardError::Model)?;
    let t = input.tokens.len();
    // Decode steps may round their rows; a step with prompt rows does not,
    // its head included, so a prompt's first token comes from f32
    // activations however much of it the cache held.
    let feed = Feed {
        precision,
        rows: t,
        prompt: input.prompt_rows > 0,
    };
    let mut run = Run {
        c,
        t,
        widths: Buf::ALL.map(|b| program.width(b, c)),
        feed,
        act,
        team: &mut team,
    };
    let result = run.step(program, backend, store, input, logits);
    act.team = Some(team);
    result
}

impl Run<'_> {
    fn step<B: Backend>(
        &mut self,
        program: &Program,
        backend: &mut B,
        store: &mut B::KvStore,
        input: &StepInput<'_>,
        logits: &mut Vec<f32>,
    ) -> Result<(), ForwardError<B::Error>> {
        let (c, t) = (self.c, self.t);
        let hidden = c.hidden as usize;
        let model = ForwardError::Model;
        for b in Buf::ALL {
            grow(&mut self.act.bufs[index(b)], t * self.widths[index(b)]);
        }
        let x = &mut self.act.bufs[index(Buf::X)];
        for (row, &token) in x.chunks_exact_mut(hidden).zip(input.tokens) {
            program.embed.row_into(token as usize, row).map_err(model)?;
            if program.embed_scale != 1.0 {
                row.iter_mut().for_each(|v| *v *= program.embed_scale);
            }
        }
        let angles = &mut self.act.angles;
        angles.resize_with(program.ropes.len(), StepAngles::default);
        for (rope, angles) in program.ropes.iter().zip(angles.iter_mut()) {
            rope.step_angles(input.positions, angles);
        }
        // The cache holds the attending layers' keys and values, in order.
        let mut cache_layer = 0;
        for ops in &program.layers {
            for op in ops {
                match op {
                    Op::Norm {
                        src,
                        dst,
                        gain,
                        per_head,
                    } => self
                        .norm(program.norm, *src, *dst, gain, *per_head)
                        .map_err(model)?,
                    Op::Linear { src, projs } => self.linear(*src, projs).map_err(model)?,
                    Op::Rope {
                        buf,
                        heads,
                        table,
                        offset,
                    } => {
                        let rows = &mut self.act.bufs[index(*buf)][..t * self.widths[index(*buf)]];
                        let (rope, angles) = program
                            .ropes
                            .get(*table)
                            .zip(self.act.angles.get(*table))
                            .ok_or(model(ModelError::RopeTable(*table)))?;
                        rope.apply(rows, *heads, c.head_dim, *offset, angles)
                            .map_err(model)?;
                    }
                    Op::NormSpan { span, gain } => self.norm_span(*span, gain).map_err(model)?,
                    Op::Copy { from, to } => self.copy(*from, *to).map_err(model)?,
                    Op::HeadLinear { from, to, heads } => {
                        self.head_linear(*from, *to, heads).map_err(model)?
                    }
                    Op::Attention(attend) => {
                        let layer = cache_layer;
                        cache_layer += 1;
                        let (kv_layer, slots, seqs) = input
                            .layer_kv(layer)
                            .ok_or(model(ModelError::KvPlace(layer)))?;
                        let bufs = &mut self.act.bufs;
                        let (kv, q) = (t * c.kv_dim(), t * c.q_dim());
                        backend
                            .scatter(
                                store,
                                kv_layer,
                                slots,
                                &bufs[index(Buf::K)][..kv],
                                &bufs[index(Buf::V)][..kv],
                            )
                            .map_err(ForwardError::Backend)?;
                        let mut out = std::mem::take(&mut bufs[index(Buf::Attn)]);
                        let shape = AttentionShape {
                            scale: attend.scale,
                            window: attend.window,
                            softcap: attend.softcap,
                            ..c.attention_shape()
                        };
                        let queries = &bufs[index(Buf::Q)][..q];
                        let result = match &attend.sinks {
                            Some(sinks) => backend.attention_with_sinks(
                                store,
                                kv_layer,
                                shape,
                                sinks,
                                seqs,
                                queries,
                                &mut out[..q],
                            ),
                            None => backend.attention(
                                store,
                                kv_layer,
                                shape,
                                seqs,
                                queries,
                                &mut out[..q],
                            ),
                        };
                        bufs[index(Buf::Attn)] = out;
                        result.map_err(ForwardError::Backend)?;
                    }
                    Op::Glu(gating) => self.gate(*gating).map_err(model)?,
                    Op::ShortConv(conv) => {
                        let act = &mut *self.act;
                        let mix = std::mem::take(&mut act.bufs[index(Buf::Conv)]);
                        let rows = conv::ConvRows {
                            mix: &mix[..t * 3 * hidden],
                            out: &mut act.bufs[index(Buf::H)][..t * hidden],
                            hidden,
                        };
                        let seqs = (input.seqs, input.states, input.positions);
                        let result = conv::short_conv(
                            conv,
                            rows,
                            seqs,
                            &mut act.states,
                            &mut act.conv_window,
                        );
                        act.bufs[index(Buf::Conv)] = mix;
                        result.map_err(model)?;
                    }
                    Op::DeltaNet(net) => self.delta_net(net, input).map_err(model)?,
                    Op::StateSpace(ssm) => self.state_space(ssm, input).map_err(model)?,
                    Op::SigmoidGate { to, gate } => self.sigmoid_gate(*to, *gate).map_err(model)?,
                    Op::Experts(experts) => self.experts(experts).map_err(model)?,
                    Op::Residual { src } => {
                        let n = t * hidden;
                        let bufs = &mut self.act.bufs;
                        let y = std::mem::take(&mut bufs[index(*src)]);
                        // × 1 is exact: unscaled streams add the same sums.
                        let scale = program.residual_scale;
                        for (a, b) in bufs[index(Buf::X)][..n].iter_mut().zip(&y[..n]) {
                            *a += scale * b;
                        }
                        bufs[index(*src)] = y;
                    }
                }
            }
        }
        self.head(program, input.sample_rows, logits).map_err(model)
    }

    /// The final norm and the head, for the rows that sample.
    fn head(
        &mut self,
        program: &Program,
        sample_rows: &[u32],
        logits: &mut Vec<f32>,
    ) -> Result<(), ModelError> {
        let hidden = self.c.hidden as usize;
        let s = sample_rows.len();
        let act = &mut *self.act;
        grow(&mut act.rows, s * hidden);
        let x = &act.bufs[index(Buf::X)];
        for (row, &r) in act.rows.chunks_exact_mut(hidden).zip(sample_rows) {
            let start = r as usize * hidden;
            row.copy_from_slice(&x[start..start + hidden]);
        }
        normalize(
            self.team,
            program.norm,
            &act.rows,
            &mut act.last,
            s,
            hidden,
            Gains::new(&program.final_norm, hidden),
            self.c.rms_eps,
        )?;
        let vocab = self.c.vocab as usize;
        if logits.len() != s * vocab {
            logits.resize(s * vocab, 0.0);
        }
        let feed = Feed {
            rows: s,
            ..self.feed
        };
        let last = std::mem::take(&mut act.last);
        let result = project(
            self.team,
            act.isa,
            &mut act.qx,
            feed,
            &last,
            hidden,
            &[&program.head],
            [logits],
        );
        act.last = last;
        if result.is_ok() {
            program.cap_logits(logits);
        }
        result
    }

    /// `dst = norm(src) × gain`, over rows or each head of them.
    fn norm(
        &mut self,
        kind: NormKind,
        src: Buf,
        dst: Buf,
        gain: &[f32],
        per_head: Option<u32>,
    ) -> Result<(), ModelError> {
        let eps = self.c.rms_eps;
        let src_width = self.widths[index(src)];
        let (width, rows) = match per_head {
            Some(d) => (d as usize, self.t * src_width / d as usize),
            None => (src_width, self.t),
        };
        let gains = Gains::new(gain, width);
        let bufs = &mut self.act.bufs;
        if src == dst {
            normalize_in_place(
                kind,
                &mut bufs[index(src)][..rows * width],
                width,
                gains,
                eps,
            );
            return Ok(());
        }
        let x = std::mem::take(&mut bufs[index(src)]);
        let out = &mut bufs[index(dst)];
        let result = normalize(self.team, kind, &x, out, rows, width, gains, eps);
        bufs[index(src)] = x;
        result
    }

    /// Every projection of `projs` from `src`'s rows, then their biases.
    fn linear(&mut self, src: Buf, projs: &[Proj]) -> Result<(), ModelError> {
        let t = self.t;
        let act = &mut *self.act;
        if projs.is_empty() || projs.len() > 3 {
            return Err(ModelError::Kernel(QMatError::Overflow));
        }
        // Rows are packed at the width their writer gave them: a product
        // may read a buffer narrower than its widest (an MLP of its own
        // width, Nemotron-H's), never wider.
        let cols = projs[0].w.cols();
        if cols > self.widths[index(src)] || projs.iter().any(|p| p.w.cols() != cols) {
            return Err(ModelError::Span);
        }
        let n = projs.len();
        // Buffers taken out for the products and put back after: no
        // allocation per op.
        let x = std::mem::take(&mut act.bufs[index(src)]);
        let mut outs: [Vec<f32>; 3] = Default::default();
        for (out, p) in outs.iter_mut().zip(projs) {
            *out = std::mem::take(&mut act.bufs[index(p.out)]);
        }
        let ws: [&Matrix; 3] = std::array::from_fn(|i| &projs[i.min(n - 1)].w);
        let ws = &ws[..n];
        // One call per count of products: `project` takes them as an array.
        macro_rules! products {
            ($($out:ident),+) => {
                project(self.team, act.isa, &mut act.qx, self.feed, &x, cols, ws, [$($out),+])
            };
        }
        let result = match &mut outs[..n] {
            [a] => products!(a),
            [a, b] => products!(a, b),
            [a, b, c] => products!(a, b, c),
            _ => Err(ModelError::Kernel(QMatError::Overflow)),
        };
        for (p, out) in projs.iter().zip(outs.iter_mut()).filter(|_| result.is_ok()) {
            if let Some(bias) = &p.bias {
                add_rows(&mut out[..t * p.w.rows()], bias);
            }
        }
        act.bufs[index(src)] = x;
        for (p, out) in projs.iter().zip(outs) {
            act.bufs[index(p.out)] = out;
        }
        result
    }

    /// `Sum = Σ weight × expert(H)` over each row's chosen experts: the
    /// router's scores (from f32 activations, so rounding never changes
    /// which experts a row takes), the rows grouped by expert, then each
    /// expert's products over its rows only, added into the rows' sums.
    fn experts(&mut self, m: &Experts) -> Result<(), ModelError> {
        let act = &mut *self.act;
        let x = std::mem::take(&mut act.bufs[index(Buf::H)]);
        let mut sum = std::mem::take(&mut act.bufs[index(Buf::Sum)]);
        let result = mixture(self.team, act, self.c, self.feed, m, &x, &mut sum);
        act.bufs[index(Buf::H)] = x;
        act.bufs[index(Buf::Sum)] = sum;
        result
    }

    /// `Gate = act(Gate) × Up`.
    fn gate(&mut self, gating: Gating) -> Result<(), ModelError> {
        let n = self.t * self.c.ffn as usize;
        let bufs = &mut self.act.bufs;
        let up = std::mem::take(&mut bufs[index(Buf::Up)]);
        let result = gate(
            self.team,
            self.act.isa,
            gating,
            &mut bufs[index(Buf::Gate)][..n],
            &up[..n],
        );
        bufs[index(Buf::Up)] = up;
        result
    }
}

/// How one step's activations reach its products: the model's precision,
/// the step's row count and whether it holds prompt rows decide, matrix by
/// matrix, whether they are rounded to 8-bit blocks.
#[derive(Debug, Clone, Copy)]
struct Feed {
    precision: ActPrecision,
    rows: usize,
    prompt: bool,
}

impl Feed {
    /// The format a product with `w` takes the activations in.
    fn format(self, w: &Matrix) -> ActFormat {
        if self
            .precision
            .rounds(self.rows, self.prompt, w.kind(), w.is_interleaved())
        {
            ActFormat::for_weights(w.kind())
        } else {
            ActFormat::F32
        }
    }
}

/// Where each activation format is kept.
fn slot(format: ActFormat) -> usize {
    match format {
        ActFormat::F32 => 0,
        ActFormat::Q8_0 => 1,
        ActFormat::Q8_1 => 2,
        ActFormat::Q8_K => 3,
    }
}

/// Most rows of a product with f32 weights that go to the team's f32
/// product: it streams each weight row once, which wins while a step is
/// bound by reading the weights; past a few rows the step is bound by
/// arithmetic, where the general product's packed, tiled kernel is several
/// times faster (SmolLM2, 2 cores: 1 row 2.7× faster on the team, 16 rows
/// 2× slower).
const DENSE_TEAM_MAX_ROWS: usize = 4;
const _: () = assert!(DENSE_TEAM_MAX_ROWS <= MAX_ROWS_PER_PASS);

/// Output columns a worker's share of a general product is a multiple of:
/// whole register tiles of the single-threaded kernel.
const GENERAL_COLUMNS: usize = 16;

/// `outs[i][..rows × ws[i].rows()] = x · ws[i]ᵀ` for `rows = feed.rows`
/// rows of `cols`, on the team. f32 matrices above
/// [`DENSE_TEAM_MAX_ROWS`] rows take the general product; everything else
/// the team's products over `x` prepared once per format (all matrices in
/// one run of the team when they take the same format).
#[allow(clippy::too_many_arguments)]
fn project<const N: usize>(
    team: &mut Team,
    isa: Isa,
    qx: &mut [QuantizedActivations; 4],
    feed: Feed,
    x: &[f32],
    cols: usize,
    ws: &[&Matrix],
    outs: [&mut Vec<f32>; N],
) -> Result<(), ModelError> {
    let rows = feed.rows;
    let x = &x[..rows * cols];
    let kernel = ModelError::Kernel;
    if let Some(w) = ws.iter().find(|w| w.cols() != cols) {
        return Err(kernel(QMatError::DataLength {
            expected: w.cols(),
            found: cols,
        }));
    }
    let mut outs = outs;
    for (w, out) in ws.iter().zip(outs.iter_mut()) {
        grow(out, rows * w.rows());
    }
    let general = rows > DENSE_TEAM_MAX_ROWS && ws.iter().all(|w| w.f32_rows().is_some());
    if general {
        for (w, out) in ws.iter().zip(outs) {
            let data = w.f32_rows().unwrap_or_default();
            let file_rows = ArrayView2::from_shape((w.rows(), w.cols()), data)
                .map_err(|_| kernel(QMatError::Overflow))?;
            let len = rows * w.rows();
            let out = ArrayViewMut2::from_shape((rows, w.rows()), &mut out[..len])
                .map_err(|_| kernel(QMatError::Overflow))?;
            let x =
                ArrayView2::from_shape((rows, cols), x).map_err(|_| kernel(QMatError::Overflow))?;
            general_on_team(team, x, file_rows.t(), 0.0, out)
                .map_err(|e| kernel(QMatError::Team(e)))?;
        }
        return Ok(());
    }
    // Each format the matrices take, prepared once.
    let mut done = [false; 4];
    for w in ws {
        let format = feed.format(w);
        let s = slot(format);
        if done[s] {
            continue;
        }
        let prepared = if format == ActFormat::F32 {
            qx[s].keep_f32(x, rows, cols)
        } else {
            qx[s].quantize(w.kind(), x, rows, cols)
        };
        prepared.map_err(kernel)?;
        done[s] = true;
    }
    let first = feed.format(ws[0]);
    if N > 1 && ws.iter().all(|w| feed.format(w) == first) {
        let mut error = None;
        let matrices: [QuantMatrix<'_>; N] = std::array::from_fn(|i| {
            ws[i].quant_matrix().unwrap_or_else(|e| {
                error.get_or_insert(e);
                QuantMatrix::empty(ws[i].kind())
            })
        });
        if let Some(e) = error {
            return Err(kernel(e));
        }
        let ms = std::array::from_fn(|i| &matrices[i]);
        let lens: [usize; N] = std::array::from_fn(|i| rows * ws[i].rows());
        let mut i = 0;
        let slices = outs.map(|out| {
            let s = &mut out[..lens[i]];
            i += 1;
            s
        });
        return matmul_team_each(team, isa, ms, &qx[slot(first)], slices).map_err(kernel);
    }
    for (w, out) in ws.iter().zip(outs) {
        let m = w.quant_matrix().map_err(kernel)?;
        let len = rows * w.rows();
        matmul_team(team, isa, &m, &qx[slot(feed.format(w))], &mut out[..len]).map_err(kernel)?;
    }
    Ok(())
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

/// Grows `buf` to at least `len` (buffers never shrink).
fn grow(buf: &mut Vec<f32>, len: usize) {
    if buf.len() < len {
        buf.resize(len, 0.0);
    }
}

/// `rows += bias` for each row (`bias.len()` wide) of `rows`.
pub(super) fn add_rows(rows: &mut [f32], bias: &[f32]) {
    for row in rows.chunks_exact_mut(bias.len().max(1)) {
        for (v, b) in row.iter_mut().zip(bias) {
            *v += b;
        }
    }
}

/// Values per piece of [`gate`] on the team: a decode step's single row
/// (SmolLM2: 1,536) still splits.
const GATE_PIECE: usize = 256;

/// `gate = act(gate) × up` ([`silu_mul`], [`gelu_tanh_mul`],
/// [`swiglu_oai_mul`]), or `relu(gate)²` alone, in pieces across the team: with `f32::exp` on the
/// caller alone, the gating cost a batch-16 SmolLM2 step about 7% of its
/// time.
fn gate(
    team: &mut Team,
    isa: Isa,
    gating: Gating,
    gate: &mut [f32],
    up: &[f32],
) -> Result<(), ModelError> {
    let (alpha, limit) = (Gating::OAI_ALPHA, Gating::OAI_LIMIT);
    team.for_each_chunk(gate, GATE_PIECE, &|i, g| {
        // Empty for an ungated activation, which reads no up values.
        let up = up.get(i * GATE_PIECE..).unwrap_or_default();
        match gating {
            Gating::Silu => silu_mul(isa, g, up),
            Gating::GeluTanh => gelu_tanh_mul(isa, g, up),
            Gating::ReluSquared => g.iter_mut().for_each(|v| *v = v.max(0.0) * v.max(0.0)),
            Gating::SwigluOai => {
                // The kernel rewrites its up values: a copy of the piece's.
                let mut piece = [0.0f32; GATE_PIECE];
                let n = g.len().min(up.len());
                piece[..n].copy_from_slice(&up[..n]);
                swiglu_oai_mul(isa, g, &mut piece[..n], alpha, limit);
            }
        }
    })
    .map_err(|e| ModelError::Kernel(QMatError::Team(e)))
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
                    let xv = ArrayView2::from_shape((t, inputs), &x).unwrap();
                    general_on_team(&mut team, xv, w, beta, view).unwrap();
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
