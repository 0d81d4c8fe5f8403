//! The forward pass over weights kept quantized in the mapped file: each
//! layer's normed activations are prepared once and used for every matrix
//! that reads them (q, k, v; gate, up), the products split over the
//! [`Activations`]' thread team. Under [`ActPrecision::F32`](super::ActPrecision::F32) they stay f32
//! and each weight block is widened to f32 in registers, so the logits are
//! the dense pass's; where the precision
//! [rounds](super::ActPrecision::rounds) a
//! step's rows, they are quantized once per weight format to 8-bit blocks
//! for integer products. Element-wise steps are as in the dense pass; the
//! output head runs only for the rows that sample.

use pagoda_core::backend::Backend;
use pagoda_cpu::{
    matmul_team, matmul_team_each, silu_mul, ActFormat, Isa, QMatError, QuantMatrix,
    QuantizedActivations, Team,
};

use super::config::ModelError;
use super::forward::{add_bias, rms_norm, Activations, ForwardError, Model, StepInput};
use super::quantized::{ActPrecision, QuantTensor, QuantizedWeights};

/// Where each activation format is kept in [`Activations`].
fn slot(format: ActFormat) -> usize {
    match format {
        ActFormat::F32 => 0,
        ActFormat::Q8_0 => 1,
        ActFormat::Q8_1 => 2,
        ActFormat::Q8_K => 3,
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
    /// The format a product with `w` takes the activations in (and the
    /// slot [`quantize`] leaves them in).
    fn format(self, w: &QuantTensor) -> ActFormat {
        if self.precision.rounds(self.rows, self.prompt, w.kind()) {
            ActFormat::for_weights(w.kind())
        } else {
            ActFormat::F32
        }
    }
}

/// Prepares `x` (`rows × cols`) for every matrix in `weights`, once for
/// each format they take it in: kept f32 (the F32 slot) or quantized to
/// the 8-bit blocks their type pairs with.
fn quantize(
    qx: &mut [QuantizedActivations; 4],
    feed: Feed,
    weights: &[&QuantTensor],
    x: &[f32],
    cols: usize,
) -> Result<(), ModelError> {
    let rows = feed.rows;
    let x = &x[..rows * cols];
    let mut done = [false; 4];
    for w in weights {
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
        prepared.map_err(ModelError::Kernel)?;
        done[s] = true;
    }
    Ok(())
}

/// `out[..rows × w.rows()] = x · wᵀ` on the team, `x` from the slot
/// [`quantize`] left it in.
fn product(
    team: &mut Team,
    isa: Isa,
    file: &[u8],
    w: &QuantTensor,
    qx: &[QuantizedActivations; 4],
    feed: Feed,
    out: &mut Vec<f32>,
) -> Result<(), ModelError> {
    let x = &qx[slot(feed.format(w))];
    let len = x.rows() * w.rows();
    if out.len() < len {
        out.resize(len, 0.0);
    }
    let m = w.matrix(file).map_err(ModelError::Kernel)?;
    matmul_team(team, isa, &m, x, &mut out[..len]).map_err(ModelError::Kernel)
}

/// [`product`] for several matrices that read the same activations, in one
/// run of the team.
fn products<const N: usize>(
    team: &mut Team,
    isa: Isa,
    file: &[u8],
    ws: [&QuantTensor; N],
    qx: &[QuantizedActivations; 4],
    feed: Feed,
    outs: [&mut Vec<f32>; N],
) -> Result<(), ModelError> {
    let first = feed.format(ws[0]);
    if ws.iter().any(|w| feed.format(w) != first) {
        // The matrices take different formats: one product each.
        for (w, out) in ws.into_iter().zip(outs) {
            product(team, isa, file, w, qx, feed, out)?;
        }
        return Ok(());
    }
    let x = &qx[slot(first)];
    let mut error = None;
    let matrices: [QuantMatrix<'_>; N] = std::array::from_fn(|i| {
        ws[i].matrix(file).unwrap_or_else(|e| {
            error.get_or_insert(e);
            QuantMatrix::empty(ws[i].kind())
        })
    });
    if let Some(e) = error {
        return Err(ModelError::Kernel(e));
    }
    let mut outs = outs;
    for (m, out) in matrices.iter().zip(outs.iter_mut()) {
        let len = x.rows() * m.rows();
        if out.len() < len {
            out.resize(len, 0.0);
        }
    }
    let ms = std::array::from_fn(|i| &matrices[i]);
    matmul_team_each(team, isa, ms, x, outs.map(|out| out.as_mut_slice()))
        .map_err(ModelError::Kernel)
}

impl Model {
    /// [`forward`](Self::forward) over quantized weights.
    pub(super) fn forward_quantized<B: Backend>(
        &self,
        w: &QuantizedWeights,
        backend: &mut B,
        store: &mut B::KvStore,
        input: &StepInput<'_>,
        act: &mut Activations,
        logits: &mut Vec<f32>,
    ) -> Result<(), ForwardError<B::Error>> {
        // The team is lent out for the step so the buffers can be borrowed
        // beside it, and put back whatever happens.
        let mut team = act.take_team().map_err(ForwardError::Model)?;
        let result = self.quantized_step(w, backend, store, input, act, &mut team, logits);
        act.team = Some(team);
        result
    }

    #[allow(clippy::too_many_arguments)]
    fn quantized_step<B: Backend>(
        &self,
        w: &QuantizedWeights,
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
        let file = w.file().bytes();
        let model = ForwardError::Model;
        let isa = act.isa;
        let p = w.precision();
        // Decode steps may round their rows; a step with prompt rows does
        // not, its head included, so a prompt's first token comes from f32
        // activations however much of it the cache held.
        let feed = Feed {
            precision: p,
            rows: t,
            prompt: input.prompt_rows > 0,
        };
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
            qx,
            ..
        } = act;

        if x.len() < t * hidden {
            x.resize(t * hidden, 0.0);
        }
        for (row, &token) in x.chunks_exact_mut(hidden).zip(input.tokens) {
            w.embed()
                .row_into(file, token as usize, row)
                .map_err(model)?;
        }
        for (layer_index, layer) in w.layers.iter().enumerate() {
            let layer_id = layer_index as u32;
            rms_norm(team, x, h, t, hidden, &layer.attn_norm, c.rms_eps).map_err(model)?;
            quantize(qx, feed, &[&layer.wq, &layer.wk, &layer.wv], h, hidden).map_err(model)?;
            let (wq, wk, wv) = (&layer.wq, &layer.wk, &layer.wv);
            products(team, isa, file, [wq, wk, wv], qx, feed, [q, k, v]).map_err(model)?;
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
            if attn.len() < t * q_dim {
                attn.resize(t * q_dim, 0.0);
            }
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
            quantize(qx, feed, &[&layer.wo], attn, q_dim).map_err(model)?;
            // The projection lands in `h` (free until the next norm), then
            // joins the residual stream.
            product(team, isa, file, &layer.wo, qx, feed, h).map_err(model)?;
            add(&mut x[..t * hidden], &h[..t * hidden]);

            rms_norm(team, x, h, t, hidden, &layer.ffn_norm, c.rms_eps).map_err(model)?;
            quantize(qx, feed, &[&layer.w_gate, &layer.w_up], h, hidden).map_err(model)?;
            let (wg, wu) = (&layer.w_gate, &layer.w_up);
            products(team, isa, file, [wg, wu], qx, feed, [gate, up]).map_err(model)?;
            swiglu(team, isa, &mut gate[..t * ffn], &up[..t * ffn]).map_err(model)?;
            quantize(qx, feed, &[&layer.w_down], gate, ffn).map_err(model)?;
            product(team, isa, file, &layer.w_down, qx, feed, h).map_err(model)?;
            add(&mut x[..t * hidden], &h[..t * hidden]);
        }

        // Only the rows that sample need the output head.
        let s = input.sample_rows.len();
        if h.len() < s * hidden {
            h.resize(s * hidden, 0.0);
        }
        for (row, &r) in h.chunks_exact_mut(hidden).zip(input.sample_rows) {
            let start = r as usize * hidden;
            row.copy_from_slice(&x[start..start + hidden]);
        }
        rms_norm(team, h, last, s, hidden, &w.final_norm, c.rms_eps).map_err(model)?;
        let head_feed = Feed {
            precision: p,
            rows: s,
            prompt: feed.prompt,
        };
        let head = w.lm_head();
        quantize(qx, head_feed, &[head], last, hidden).map_err(model)?;
        let vocab = c.vocab as usize;
        if logits.len() != s * vocab {
            logits.resize(s * vocab, 0.0);
        }
        product(team, isa, file, head, qx, head_feed, logits).map_err(model)?;
        Ok(())
    }
}

/// Values per piece of [`swiglu`] on the team: a decode step's single row
/// (SmolLM2: 1,536) still splits.
const GATE_PIECE: usize = 256;

/// `gate = silu(gate) × up` ([`silu_mul`]), in pieces across the team:
/// with `f32::exp` on the caller alone, the gating cost a batch-16 SmolLM2
/// step about 7% of its time.
fn swiglu(team: &mut Team, isa: Isa, gate: &mut [f32], up: &[f32]) -> Result<(), ModelError> {
    team.for_each_chunk(gate, GATE_PIECE, &|i, g| {
        silu_mul(isa, g, &up[i * GATE_PIECE..])
    })
    .map_err(|e| ModelError::Kernel(QMatError::Team(e)))
}

/// `x += y`, element by element.
fn add(x: &mut [f32], y: &[f32]) {
    for (a, b) in x.iter_mut().zip(y) {
        *a += b;
    }
}
