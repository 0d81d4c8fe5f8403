//! One engine step as a Vulkan step program: the model's [`Program`]
//! lowered op for op (the same computation the CPU interpreter in `cpu.rs`
//! runs) over one activation buffer.
//!
//! Activations, in elements: the biases (`Image::consts`), then `x` (the
//! residual stream), `h` (normed rows), `q`, the `[k | v]` rows the scatter
//! takes, the attention output, gate, up, `s` (a product before it joins
//! the residual), the sampled rows normed, and their logits. Meta: the
//! token ids, then the positions.

use std::ops::Range;

use pagoda_vulkan::{GluActivation, Op as DeviceOp, StepOp, VulkanError};

use super::super::config::ModelConfig;
use super::super::input::StepInput;
use super::super::program::{Buf, Gating, NormKind, Op, Program};
use super::image::{Image, Placed, Placement};

/// A step's ops and buffers.
pub(crate) struct Lowered {
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
        // Every region starts at a multiple of 4 elements: the GPU decode
        // product reads its inputs as vec4.
        for (slot, size) in at.iter_mut().zip(sizes.iter().chain([&0])) {
            next = next.next_multiple_of(4);
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

impl Regions {
    /// Where a buffer's first row starts and how far apart its rows are:
    /// keys and values share the `[k | v]` rows the scatter takes.
    fn of(&self, b: Buf, c: &ModelConfig) -> (u32, u32) {
        let (hidden, q, kv, ffn) = (c.hidden, c.q_dim() as u32, c.kv_dim() as u32, c.ffn);
        match b {
            Buf::X => (self.x, hidden),
            Buf::H => (self.h, hidden),
            Buf::Sum => (self.s, hidden),
            Buf::Q => (self.q, q),
            Buf::Attn => (self.attn, q),
            Buf::K => (self.kv, 2 * kv),
            Buf::V => (self.kv + kv, 2 * kv),
            Buf::Gate => (self.gate, ffn),
            Buf::Up => (self.up, ffn),
            // No regions: `build` refuses a program with latent attention
            // or a recurrent or gated layer.
            Buf::QLatent
            | Buf::QHeads
            | Buf::VHeads
            | Buf::Conv
            | Buf::QGate
            | Buf::OutGate
            | Buf::Beta
            | Buf::Alpha => (self.end, 0),
        }
    }
}

/// `y = m · x` (`y += m · x` with `accumulate`) for `batch` rows.
fn matmul(m: &Placed, batch: u32, x: u32, y: u32, y_stride: u32, accumulate: bool) -> StepOp {
    StepOp::Op(DeviceOp::Matmul {
        kind: m.kind,
        weights: m.at,
        rows: m.rows,
        cols: m.cols,
        batch,
        x,
        x_stride: m.cols,
        y,
        y_stride,
        accumulate,
    })
}

fn add(cols: u32, batch: u32, x: u32, x_stride: u32, y: u32, y_stride: u32) -> StepOp {
    StepOp::Op(DeviceOp::Add {
        cols,
        batch,
        x,
        x_stride,
        y,
        y_stride,
    })
}

fn norm(gains: u64, cols: u32, x: u32, y: u32, eps: f32, centered: bool) -> StepOp {
    StepOp::Op(DeviceOp::RmsNorm {
        gains,
        cols,
        batch: 1,
        x,
        x_stride: cols,
        y,
        y_stride: cols,
        eps,
        centered,
    })
}

/// The step program of `program` (laid out in `image`) for `input`
/// (checked by `Model::check`); with `greedy`, each sampled row's argmax
/// lands in meta after the positions.
pub(crate) fn build(
    image: &Image,
    program: &Program,
    c: &ModelConfig,
    input: &StepInput<'_>,
    greedy: bool,
) -> Result<Lowered, VulkanError> {
    if program.latent.is_some() {
        // `lowers` keeps such a program off the device: its buffers have
        // no regions here.
        return Err(VulkanError::Unsupported(
            "latent attention has no device lowering".into(),
        ));
    }
    let t = input.tokens.len() as u32;
    let samples = input.sample_rows.len() as u32;
    let r =
        Regions::new(image.consts.len(), c, u64::from(t), u64::from(samples)).ok_or_else(|| {
            VulkanError::Unsupported(format!("a step of {t} tokens needs over 2^32 activations"))
        })?;
    let hidden = c.hidden;
    let centered = program.norm == NormKind::Layer;
    let mut ops = vec![StepOp::Op(DeviceOp::Embed {
        kind: image.embed.kind,
        weights: image.embed.at,
        rows: image.embed.rows,
        cols: image.embed.cols,
        batch: t,
        tokens: 0,
        y: r.x,
        y_stride: hidden,
        scale: program.embed_scale,
    })];
    for ((layer, layer_ops), placed) in (0u32..).zip(&program.layers).zip(&image.layers) {
        let mut i = 0;
        while i < layer_ops.len() {
            // A product that a residual add takes next adds itself into the
            // residual stream instead: one dispatch, and `s` never written.
            if let Some(fused) = fused_residual(&layer_ops[i..], &placed[i..], &r, c, t) {
                ops.push(fused);
                i += 2;
                continue;
            }
            let at = Lowering { layer, centered, t };
            lower(&mut ops, &layer_ops[i], &placed[i], &at, &r, image, c)?;
            i += 1;
        }
    }
    // Only the rows that sample need the final norm and the output head.
    for (i, &row) in (0u32..).zip(input.sample_rows) {
        ops.push(norm(
            image.final_norm,
            hidden,
            r.x + row * hidden,
            r.last + i * hidden,
            c.rms_eps,
            centered,
        ));
    }
    if samples > 0 {
        ops.push(matmul(
            &image.head,
            samples,
            r.last,
            r.logits,
            c.vocab,
            false,
        ));
    }
    let mut meta = Vec::with_capacity(2 * t as usize + samples as usize);
    meta.extend_from_slice(input.tokens);
    meta.extend_from_slice(input.positions);
    let mut tokens = 0..0;
    if greedy && samples > 0 {
        ops.push(StepOp::Op(DeviceOp::Argmax {
            cols: c.vocab,
            batch: samples,
            x: r.logits,
            x_stride: c.vocab,
            out: 2 * t,
        }));
        tokens = 2 * t..2 * t + samples;
        meta.resize(tokens.end as usize, 0);
    }
    Ok(Lowered {
        ops,
        meta,
        act_len: r.end,
        logits: r.logits..r.end,
        tokens,
    })
}

/// `Linear` with one unbiased projection into a buffer that the next op,
/// `Residual`, adds to the residual stream: the product accumulated into
/// the stream.
fn fused_residual(
    ops: &[Op],
    placed: &[Placement],
    r: &Regions,
    c: &ModelConfig,
    t: u32,
) -> Option<StepOp> {
    let (Op::Linear { src, projs }, Op::Residual { src: added }) = (ops.first()?, ops.get(1)?)
    else {
        return None;
    };
    let (Placement::Products(products), [proj]) = (placed.first()?, projs.as_slice()) else {
        return None;
    };
    let [(m, None)] = products.as_slice() else {
        return None;
    };
    if proj.out != *added || m.rows != c.hidden {
        return None;
    }
    let (x, _) = r.of(*src, c);
    Some(matmul(m, t, x, r.x, c.hidden, true))
}

/// Where a program op is lowered: its layer, the step's rows, and whether
/// the program's norms take each row's mean off (LayerNorm).
#[derive(Clone, Copy)]
struct Lowering {
    layer: u32,
    centered: bool,
    t: u32,
}

/// The step ops of one program op.
fn lower(
    ops: &mut Vec<StepOp>,
    op: &Op,
    placement: &Placement,
    at: &Lowering,
    r: &Regions,
    image: &Image,
    c: &ModelConfig,
) -> Result<(), VulkanError> {
    let Lowering { layer, centered, t } = *at;
    let misplaced =
        || VulkanError::Unsupported("the weight image does not match the program".into());
    match (op, placement) {
        (
            Op::Norm {
                src,
                dst,
                per_head,
                gain,
            },
            Placement::Gains(gains),
        ) => {
            let ((x, x_stride), (y, y_stride)) = (r.of(*src, c), r.of(*dst, c));
            let width = src.width(c, None) as u32;
            let norm = |gains, cols, batch, x, x_stride, y, y_stride| {
                StepOp::Op(DeviceOp::RmsNorm {
                    gains,
                    cols,
                    batch,
                    x,
                    x_stride,
                    y,
                    y_stride,
                    eps: c.rms_eps,
                    centered,
                })
            };
            match per_head {
                None => ops.push(norm(*gains, width, t, x, x_stride, y, y_stride)),
                // Contiguous heads sharing one head's gains: one norm over
                // every head of every row.
                Some(d) if x_stride == width && y_stride == width && gain.len() == *d as usize => {
                    ops.push(norm(*gains, *d, t * (width / d), x, *d, y, *d))
                }
                // Heads of rows spaced apart (keys beside values), or each
                // head with gains of its own (Command R+): one norm per
                // head position.
                Some(d) => {
                    let own = gain.len() > *d as usize;
                    if own && gain.len() != width as usize {
                        return Err(VulkanError::Unsupported(format!(
                            "{} norm gains for heads of {d} in rows of {width}",
                            gain.len()
                        )));
                    }
                    for h in 0..width / d {
                        let at = if own {
                            gains + 4 * u64::from(h * d)
                        } else {
                            *gains
                        };
                        ops.push(norm(at, *d, t, x + h * d, x_stride, y + h * d, y_stride));
                    }
                }
            }
        }
        (Op::Linear { src, projs }, Placement::Products(placed)) => {
            let (x, _) = r.of(*src, c);
            for (p, (m, bias)) in projs.iter().zip(placed) {
                let (y, y_stride) = r.of(p.out, c);
                ops.push(matmul(m, t, x, y, y_stride, false));
                if let Some(at) = bias {
                    ops.push(add(m.rows, t, *at, 0, y, y_stride));
                }
            }
        }
        (
            Op::Rope {
                buf,
                heads,
                table,
                offset: 0,
            },
            Placement::None,
        ) => {
            let (x, x_stride) = r.of(*buf, c);
            let rope = image.ropes.get(*table).ok_or_else(misplaced)?;
            ops.push(StepOp::Op(DeviceOp::Rope {
                cos: rope.cos,
                sin: rope.sin,
                table_rows: rope.rows,
                half: c.rope_dim / 2,
                interleaved: rope.interleaved,
                heads: *heads,
                head_dim: c.head_dim,
                batch: t,
                x,
                x_stride,
                positions: t,
            }));
        }
        (Op::Attention(attend), Placement::None) => {
            ops.push(StepOp::Scatter { layer, kv: r.kv });
            ops.push(StepOp::Attention {
                layer,
                q: r.q,
                out: r.attn,
                scale: attend.scale,
                window: attend.window,
                softcap: attend.softcap,
            });
        }
        (Op::Glu(gating), Placement::None) => ops.push(StepOp::Op(DeviceOp::Glu {
            activation: match gating {
                Gating::Silu => GluActivation::Silu,
                Gating::GeluTanh => GluActivation::GeluTanh,
                // Only gpt-oss's experts gate so, and mixtures do not lower.
                Gating::SwigluOai | Gating::ReluSquared => return Err(misplaced()),
            },
            cols: c.ffn,
            batch: t,
            gate: r.gate,
            up: r.up,
            stride: c.ffn,
            y: r.gate,
            y_stride: c.ffn,
        })),
        (Op::Residual { src }, Placement::None) => {
            let (x, x_stride) = r.of(*src, c);
            ops.push(add(c.hidden, t, x, x_stride, r.x, c.hidden));
        }
        _ => return Err(misplaced()),
    }
    Ok(())
}
