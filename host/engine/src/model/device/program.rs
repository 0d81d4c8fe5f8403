//! One engine step as a Vulkan step program: the same computation as the
//! CPU forward pass (`forward.rs`, `qforward.rs`), op for op, over one
//! activation buffer.
//!
//! Activations, in elements: the biases (`Image::consts`), then `x` (the
//! residual stream), `h` (normed rows), `q`, the `[k | v]` rows the scatter
//! takes, the attention output, gate, up, `s` (a product before it joins
//! the residual), the sampled rows normed, and their logits. Meta: the
//! token ids, then the positions.

use std::ops::Range;

use pagoda_vulkan::{Op, StepOp, VulkanError};

use super::super::config::ModelConfig;
use super::super::forward::StepInput;
use super::image::{Image, Matrix};

/// A step's ops and buffers.
pub(crate) struct Program {
    pub ops: Vec<StepOp>,
    pub meta: Vec<u32>,
    pub act_len: u32,
    /// Where the logits are, `sample_rows × vocab`.
    pub logits: Range<u32>,
    /// Where the greedy tokens are in meta (empty unless asked for).
    pub tokens: Range<u32>,
}

/// Element offsets of the activation regions.
struct Regions {
    x: u32,
    h: u32,
    q: u32,
    kv: u32,
    attn: u32,
    gate: u32,
    up: u32,
    s: u32,
    last: u32,
    logits: u32,
    end: u32,
}

impl Regions {
    fn new(consts: usize, c: &ModelConfig, t: u64, samples: u64) -> Option<Self> {
        let (hidden, q, kv, ffn) = (
            u64::from(c.hidden),
            c.q_dim() as u64,
            c.kv_dim() as u64,
            u64::from(c.ffn),
        );
        let sizes = [
            t * hidden,
            t * hidden,
            t * q,
            2 * t * kv,
            t * q,
            t * ffn,
            t * ffn,
            t * hidden,
            samples * hidden,
            samples * u64::from(c.vocab),
        ];
        let mut at = [0u32; 11];
        let mut next = consts as u64;
        for (slot, size) in at.iter_mut().zip(sizes.iter().chain([&0])) {
            *slot = u32::try_from(next).ok()?;
            next += size;
        }
        let [x, h, q, kv, attn, gate, up, s, last, logits, end] = at;
        Some(Self {
            x,
            h,
            q,
            kv,
            attn,
            gate,
            up,
            s,
            last,
            logits,
            end,
        })
    }
}

fn matmul(m: &Matrix, batch: u32, x: u32, y: u32, y_stride: u32) -> StepOp {
    StepOp::Op(Op::Matmul {
        kind: m.kind,
        weights: m.at,
        rows: m.rows,
        cols: m.cols,
        batch,
        x,
        x_stride: m.cols,
        y,
        y_stride,
    })
}

fn add(cols: u32, batch: u32, x: u32, x_stride: u32, y: u32, y_stride: u32) -> StepOp {
    StepOp::Op(Op::Add {
        cols,
        batch,
        x,
        x_stride,
        y,
        y_stride,
    })
}

fn norm(gains: u64, cols: u32, batch: u32, x: u32, y: u32, eps: f32) -> StepOp {
    StepOp::Op(Op::RmsNorm {
        gains,
        cols,
        batch,
        x,
        x_stride: cols,
        y,
        y_stride: cols,
        eps,
    })
}

/// The program of one step of `input` (checked by `Model::check`); with
/// `greedy`, each sampled row's argmax lands in meta after the positions.
pub(crate) fn build(
    image: &Image,
    c: &ModelConfig,
    interleaved: bool,
    input: &StepInput<'_>,
    greedy: bool,
) -> Result<Program, VulkanError> {
    let t = input.tokens.len() as u32;
    let samples = input.sample_rows.len() as u32;
    let r =
        Regions::new(image.consts.len(), c, u64::from(t), u64::from(samples)).ok_or_else(|| {
            VulkanError::Unsupported(format!("a step of {t} tokens needs over 2^32 activations"))
        })?;
    let (hidden, q_dim, kv_dim, ffn) = (c.hidden, c.q_dim() as u32, c.kv_dim() as u32, c.ffn);
    let rope = |heads: u32, x: u32, x_stride: u32| {
        StepOp::Op(Op::Rope {
            cos: image.cos,
            sin: image.sin,
            table_rows: image.table_rows,
            half: c.rope_dim / 2,
            interleaved,
            heads,
            head_dim: c.head_dim,
            batch: t,
            x,
            x_stride,
            positions: t,
        })
    };
    let mut ops = vec![StepOp::Op(Op::Embed {
        kind: image.embed.kind,
        weights: image.embed.at,
        rows: image.embed.rows,
        cols: image.embed.cols,
        batch: t,
        tokens: 0,
        y: r.x,
        y_stride: hidden,
    })];
    for (layer, l) in (0u32..).zip(&image.layers) {
        ops.push(norm(l.attn_norm, hidden, t, r.x, r.h, c.rms_eps));
        ops.push(matmul(&l.wq, t, r.h, r.q, q_dim));
        ops.push(matmul(&l.wk, t, r.h, r.kv, 2 * kv_dim));
        ops.push(matmul(&l.wv, t, r.h, r.kv + kv_dim, 2 * kv_dim));
        let [bq, bk, bv] = l.biases;
        for (bias, cols, y, stride) in [
            (bq, q_dim, r.q, q_dim),
            (bk, kv_dim, r.kv, 2 * kv_dim),
            (bv, kv_dim, r.kv + kv_dim, 2 * kv_dim),
        ] {
            if let Some(at) = bias {
                ops.push(add(cols, t, at, 0, y, stride));
            }
        }
        ops.push(rope(c.q_heads, r.q, q_dim));
        ops.push(rope(c.kv_heads, r.kv, 2 * kv_dim));
        ops.push(StepOp::Scatter { layer, kv: r.kv });
        ops.push(StepOp::Attention {
            layer,
            q: r.q,
            out: r.attn,
        });
        ops.push(matmul(&l.wo, t, r.attn, r.s, hidden));
        ops.push(add(hidden, t, r.s, hidden, r.x, hidden));
        ops.push(norm(l.ffn_norm, hidden, t, r.x, r.h, c.rms_eps));
        ops.push(matmul(&l.gate, t, r.h, r.gate, ffn));
        ops.push(matmul(&l.up, t, r.h, r.up, ffn));
        ops.push(StepOp::Op(Op::SwiGlu {
            cols: ffn,
            batch: t,
            gate: r.gate,
            up: r.up,
            stride: ffn,
            y: r.gate,
            y_stride: ffn,
        }));
        ops.push(matmul(&l.down, t, r.gate, r.s, hidden));
        ops.push(add(hidden, t, r.s, hidden, r.x, hidden));
    }
    // Only the rows that sample need the final norm and the output head.
    for (i, &row) in (0u32..).zip(input.sample_rows) {
        ops.push(norm(
            image.final_norm,
            hidden,
            1,
            r.x + row * hidden,
            r.last + i * hidden,
            c.rms_eps,
        ));
    }
    if samples > 0 {
        ops.push(matmul(&image.head, samples, r.last, r.logits, c.vocab));
    }
    let mut meta = Vec::with_capacity(2 * t as usize + samples as usize);
    meta.extend_from_slice(input.tokens);
    meta.extend_from_slice(input.positions);
    let mut tokens = 0..0;
    if greedy && samples > 0 {
        ops.push(StepOp::Op(Op::Argmax {
            cols: c.vocab,
            batch: samples,
            x: r.logits,
            x_stride: c.vocab,
            out: 2 * t,
        }));
        tokens = 2 * t..2 * t + samples;
        meta.resize(tokens.end as usize, 0);
    }
    Ok(Program {
        ops,
        meta,
        act_len: r.end,
        logits: r.logits..r.end,
        tokens,
    })
}
