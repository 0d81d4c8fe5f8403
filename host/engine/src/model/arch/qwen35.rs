//! `qwen35` and `qwen35moe`: Qwen3.5 (0.8B to 27B; Qwen3.6's files too)
//! and its mixtures (35B-A3B to 397B-A17B), hybrids of gated attention and
//! gated delta nets, after llama.cpp's `models/qwen35.cpp` and HF's
//! `Qwen3_5DecoderLayer`. Each layer is pre-norm: its operator
//! (`attn_norm`, then attention or a delta net) and its MLP
//! (`post_attention_norm`, then SwiGLU or a mixture), each added to the
//! residual stream. The converter stores every norm gain but the delta
//! net's as `1 + w`, so they read as plain RMSNorm gains.
//!
//! Layers attend where `attention.recurrent_layers` is false, or, without
//! it, every `full_attention_interval`-th (4). An attending layer's
//! `attn_q` makes each head's query and then its output gate; q and k are
//! RMS-normed per head, turned by NeoX rotary on their first
//! `rope.dimension_count` (a quarter), and the attention output is
//! multiplied by the gate's sigmoid before `attn_output`. Qwen3.5's
//! interleaved M-RoPE turns a text token's pairs all by its position (its
//! sections, 11 + 11 + 10, cover every pair), which is the NeoX rotary.
//!
//! A recurrent layer is a [`DeltaNet`]: `attn_qkv` makes its queries, keys
//! and values (convolved by `ssm_conv1d`), `attn_gate` its output gate,
//! `ssm_beta` and `ssm_alpha` its write strength and decay (with
//! `ssm_dt.bias` and `ssm_a`), `ssm_norm` its gated norm, and `ssm_out`
//! takes the result back to the residual stream.
//!
//! `qwen35moe`'s MLPs are experts `expert_feed_forward_length` wide,
//! softmax-routed and renormalized over the chosen, plus a shared expert
//! `expert_shared_feed_forward_length` wide scaled by the sigmoid of its
//! gate. The multi-token-prediction block (`nextn_predict_layers`) is not
//! part of the trunk.
//!
//! `qwen3next` (Qwen3-Next-80B-A3B, after llama.cpp's
//! `models/qwen3next.cpp`) is `qwen35moe` as its converter writes it:
//! each key head serves its group of consecutive value heads
//! ([`DeltaLayout::Grouped`]), `β` and `α` come from one product
//! (`ssm_beta_alpha`, each group's `β`s then `α`s), and its rotary has no
//! sections. Files from before the converter split `ssm_in` into
//! `attn_qkv` and `attn_gate` are refused by name.

use super::super::config::ModelError;
use super::super::load_error::LoadError;
use super::super::meta::{bad, required_uint, uint};
use super::super::program::{
    experts_block, mlp_block, pre_norm, Attend, Buf, DeltaLayout, DeltaNet, Op, Program, Proj, Span,
};
use super::super::rope::{Rope, RopeMode};
use super::Loader;

/// The most taps a delta net's convolution may have (Qwen3.5's have 4).
const MAX_TAPS: u32 = 64;
/// The widest query, key or value head of a delta net (Qwen3.5's are
/// 128): a state is `key_dim × value_dim` a value head, per sequence.
const MAX_HEAD_DIM: u32 = 256;
/// The most value heads of a delta net (Qwen3.5's have 16 to 64).
const MAX_VALUE_HEADS: u32 = 256;

/// Which of the architectures a file is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Qwen35 {
    Dense,
    Mixture,
    /// `qwen3next`: a mixture, its delta nets laid out as
    /// [`DeltaLayout::Grouped`].
    Next,
}

/// The model of a `qwen35`, `qwen35moe` or `qwen3next` file.
pub(super) fn build(l: &Loader<'_>, arch: Qwen35) -> Result<Program, LoadError> {
    let c = &l.config;
    let h = c.hidden as usize;
    let recurrent = recurrent_layers(l)?;
    let shape = DeltaShape::read(l, arch)?;
    let mixture = arch != Qwen35::Dense;
    let widths = if mixture {
        let width = l.expert_width(l.ffn_per_used_expert()?)?;
        let shared_key = l.key("expert_shared_feed_forward_length");
        let shared = uint(l.g, &shared_key)?.filter(|&w| w > 0);
        Some((width, shared.unwrap_or(c.ffn) as usize))
    } else {
        None
    };
    let rope = l.rope(RopeMode::Neox)?;
    let (embed, head) = l.embedding_and_head()?;
    let mut layers = Vec::with_capacity(c.layers as usize);
    let mut states = 0;
    for (i, &recurs) in (0..c.layers).zip(&recurrent) {
        let mut ops = vec![pre_norm(l.layer_vector(i, "attn_norm.weight", h)?)];
        if recurs {
            delta_net(l, i, &shape, states, &mut ops)?;
            states += 1;
        } else {
            gated_attention(l, i, &mut ops)?;
        }
        let norm = l.layer_vector(i, "post_attention_norm.weight", h)?;
        match widths {
            Some((width, shared_width)) => {
                let mut experts = l.experts(i, width, true)?;
                experts.shared = Some(l.shared_expert(i, shared_width, true)?);
                experts_block(&mut ops, norm, experts);
            }
            None => mlp_block(&mut ops, norm, l.swiglu(i)?),
        }
        layers.push(ops);
    }
    let final_norm = l.vector("output_norm.weight", h)?;
    let ropes = vec![Rope::new(&rope, c.max_context)];
    Ok(Program::plain(embed, layers, final_norm, head, ropes))
}

/// Which layers are delta nets: `attention.recurrent_layers` (one flag per
/// block, the trunk's first), else all but every
/// `full_attention_interval`-th. At least one layer must attend.
fn recurrent_layers(l: &Loader<'_>) -> Result<Vec<bool>, LoadError> {
    let layers = l.config.layers as usize;
    let key = l.key("attention.recurrent_layers");
    let flags = if let Some(flags) = l.layer_flags(&key)? {
        if flags.len() < layers {
            return Err(bad(&key, flags.len(), "must hold one bool per layer"));
        }
        flags[..layers].to_vec()
    } else {
        let key = l.key("full_attention_interval");
        let n = uint(l.g, &key)?.unwrap_or(4);
        if n == 0 {
            return Err(bad(&key, n, "must be positive"));
        }
        (1..=layers as u32).map(|i| i % n != 0).collect()
    };
    if flags.iter().all(|&r| r) {
        return Err(bad(&key, "every layer", "at least one layer must attend"));
    }
    Ok(flags)
}

/// The widths every delta net of a file shares.
struct DeltaShape {
    layout: DeltaLayout,
    taps: u32,
    key_heads: u32,
    value_heads: u32,
    key_dim: u32,
    value_dim: u32,
}

impl DeltaShape {
    fn read(l: &Loader<'_>, arch: Qwen35) -> Result<Self, LoadError> {
        let taps_key = l.key("ssm.conv_kernel");
        let taps = required_uint(l.g, &taps_key)?;
        if !(2..=MAX_TAPS).contains(&taps) {
            return Err(bad(&taps_key, taps, "must be between 2 and 64"));
        }
        let dim_key = l.key("ssm.state_size");
        let key_dim = required_uint(l.g, &dim_key)?;
        if !(1..=MAX_HEAD_DIM).contains(&key_dim) {
            return Err(bad(&dim_key, key_dim, "must be between 1 and 256"));
        }
        let heads_key = l.key("ssm.time_step_rank");
        let value_heads = required_uint(l.g, &heads_key)?;
        if !(1..=MAX_VALUE_HEADS).contains(&value_heads) {
            return Err(bad(&heads_key, value_heads, "must be between 1 and 256"));
        }
        let groups_key = l.key("ssm.group_count");
        let key_heads = required_uint(l.g, &groups_key)?;
        if key_heads == 0 || !value_heads.is_multiple_of(key_heads) {
            return Err(bad(
                &groups_key,
                key_heads,
                "must divide ssm.time_step_rank",
            ));
        }
        let inner_key = l.key("ssm.inner_size");
        let inner = required_uint(l.g, &inner_key)?;
        let value_dim = inner / value_heads;
        if value_dim == 0 || value_dim > MAX_HEAD_DIM || value_dim * value_heads != inner {
            return Err(bad(
                &inner_key,
                inner,
                "must be ssm.time_step_rank heads of 1 to 256",
            ));
        }
        let layout = if arch == Qwen35::Next {
            DeltaLayout::Grouped
        } else {
            DeltaLayout::Tiled
        };
        Ok(Self {
            layout,
            taps,
            key_heads,
            value_heads,
            key_dim,
            value_dim,
        })
    }
}

/// Layer `i`'s delta net of the normed rows in [`Buf::H`], state number
/// `state`, added to the residual stream.
fn delta_net(
    l: &Loader<'_>,
    i: u32,
    shape: &DeltaShape,
    state: u32,
    ops: &mut Vec<Op>,
) -> Result<(), LoadError> {
    let h = l.config.hidden as usize;
    let mut net = DeltaNet {
        taps: shape.taps,
        conv: Vec::new(),
        key_heads: shape.key_heads,
        value_heads: shape.value_heads,
        key_dim: shape.key_dim,
        value_dim: shape.value_dim,
        dt_bias: Vec::new(),
        decay: Vec::new(),
        norm: Vec::new(),
        state,
        layout: shape.layout,
    };
    let (width, heads) = (net.conv_width(), net.value_heads as usize);
    let (values, taps) = (net.value_width(), net.taps as usize);
    let product = |name: &str, out: usize, buf: Buf| -> Result<Proj, LoadError> {
        Ok(Proj {
            w: l.layer_matrix(i, name, h, out)?,
            out: buf,
            bias: None,
        })
    };
    if l.has(&format!("blk.{i}.ssm_in.weight")) {
        return Err(l.unsupported("the fused ssm_in of early conversions".into()));
    }
    let mixes = [
        product("attn_qkv", width, Buf::Conv)?,
        product("attn_gate", values, Buf::OutGate)?,
    ];
    match net.layout {
        // One op: a linear op runs at most three products.
        DeltaLayout::Grouped => {
            let gates = product("ssm_beta_alpha", 2 * heads, Buf::Beta)?;
            ops.push(Op::Linear {
                src: Buf::H,
                projs: mixes.into_iter().chain([gates]).collect(),
            });
        }
        DeltaLayout::Tiled => {
            ops.push(Op::Linear {
                src: Buf::H,
                projs: mixes.into(),
            });
            ops.push(Op::Linear {
                src: Buf::H,
                projs: vec![
                    product("ssm_beta", heads, Buf::Beta)?,
                    product("ssm_alpha", heads, Buf::Alpha)?,
                ],
            });
        }
    }
    net.conv = l.matrix_values(&format!("blk.{i}.ssm_conv1d.weight"), taps, width)?;
    net.dt_bias = l.layer_vector(i, "ssm_dt.bias", heads)?;
    net.decay = l.layer_vector(i, "ssm_a", heads)?;
    net.norm = l.layer_vector(i, "ssm_norm.weight", net.value_dim as usize)?;
    if !net.vectors().flatten().all(|v| v.is_finite()) {
        return Err(ModelError::NonFinite.into());
    }
    ops.push(Op::DeltaNet(Box::new(net)));
    ops.push(Op::Linear {
        src: Buf::OutGate,
        projs: vec![Proj {
            w: l.layer_matrix(i, "ssm_out", values, h)?,
            out: Buf::Sum,
            bias: None,
        }],
    });
    ops.push(Op::Residual { src: Buf::Sum });
    Ok(())
}

/// Layer `i`'s gated attention of the normed rows in [`Buf::H`], added to
/// the residual stream.
fn gated_attention(l: &Loader<'_>, i: u32, ops: &mut Vec<Op>) -> Result<(), LoadError> {
    let c = &l.config;
    let (h, d) = (c.hidden as usize, c.head_dim);
    let (q, kv) = (c.q_dim(), c.kv_dim());
    let proj = |name: &str, inp: usize, out: usize, buf: Buf| -> Result<Proj, LoadError> {
        Ok(Proj {
            w: l.layer_matrix(i, name, inp, out)?,
            out: buf,
            bias: None,
        })
    };
    ops.push(Op::Linear {
        src: Buf::H,
        projs: vec![
            proj("attn_q", h, 2 * q, Buf::QGate)?,
            proj("attn_k", h, kv, Buf::K)?,
            proj("attn_v", h, kv, Buf::V)?,
        ],
    });
    let head = |buf: Buf, stride: u32, offset: u32| Span {
        buf,
        stride,
        offset,
        width: d,
    };
    ops.push(Op::Copy {
        from: head(Buf::QGate, 2 * d, 0),
        to: head(Buf::Q, d, 0),
    });
    for (buf, name) in [
        (Buf::Q, "attn_q_norm.weight"),
        (Buf::K, "attn_k_norm.weight"),
    ] {
        ops.push(Op::Norm {
            src: buf,
            dst: buf,
            gain: l.layer_vector(i, name, d as usize)?,
            per_head: Some(d),
        });
    }
    for (buf, heads) in [(Buf::Q, c.q_heads), (Buf::K, c.kv_heads)] {
        ops.push(Op::Rope {
            buf,
            heads,
            table: 0,
            offset: 0,
        });
    }
    ops.push(Op::Attention(Attend {
        scale: l.attention_scale()?,
        ..Attend::full(c)
    }));
    ops.push(Op::SigmoidGate {
        to: head(Buf::Attn, d, 0),
        gate: head(Buf::QGate, 2 * d, d),
    });
    ops.push(Op::Linear {
        src: Buf::Attn,
        projs: vec![proj("attn_output", q, h, Buf::Sum)?],
    });
    ops.push(Op::Residual { src: Buf::Sum });
    Ok(())
}
