//! `nemotron_h` and `nemotron_h_moe`: NVIDIA's Nemotron-H (8B, 47B, 56B),
//! Nemotron Nano 2 (9B, 12B) and Nemotron 3 Nano (30B-A3B), hybrids of
//! Mamba-2, attention and MLPs, after llama.cpp's `models/nemotron-h.cpp`.
//! Each layer is one block: `attn_norm`, then a [Mamba-2
//! mixer](super::mamba2), attention (without rotary positions) or an MLP,
//! added to the residual stream. A layer whose `attention.head_count_kv`
//! and `feed_forward_length` are both 0 is a mixer, one with KV heads
//! attends, the rest are MLPs.
//!
//! The MLP is ungated: `ffn_down · relu(ffn_up · x)²`. `nemotron_h_moe`'s
//! are experts of that MLP (`ffn_up_exps`, `ffn_down_exps`), scored by
//! sigmoids, chosen with `exp_probs_b`, renormalized where
//! `expert_weights_norm` says and scaled by `expert_weights_scale`, plus an
//! ungated shared expert. Nemotron 3 Super's latent experts
//! (`ffn_latent_down`) are refused by name.

use super::super::load_error::LoadError;
use super::super::meta::{bad, float, layer_uints, required_uint};
use super::super::program::{
    attention_block, experts_block, pre_norm, Attend, AttentionBlock, Buf, Gating, Op, Program,
    Proj, Scoring,
};
use super::mamba2::{mixer, MixerShape};
use super::router::Router;
use super::Loader;

/// What one layer of the trunk is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Block {
    Mixer,
    Attention,
    Mlp,
}

/// The model of a `nemotron_h` file, or (`mixture`) of a `nemotron_h_moe`
/// one.
pub(super) fn build(l: &Loader<'_>, mixture: bool) -> Result<Program, LoadError> {
    let c = &l.config;
    let h = c.hidden as usize;
    let blocks = required_uint(l.g, &l.key("block_count"))?;
    let per_layer = |name: &str| -> Result<Vec<u32>, LoadError> {
        Ok(layer_uints(l.g, &l.key(name), blocks)?.unwrap_or_default())
    };
    let (kv, ffn) = (
        per_layer("attention.head_count_kv")?,
        per_layer("feed_forward_length")?,
    );
    let block = |i: u32| match (kv.get(i as usize), ffn.get(i as usize)) {
        (Some(&k), _) if k > 0 => Block::Attention,
        (_, Some(&f)) if f > 0 => Block::Mlp,
        _ => Block::Mixer,
    };
    let shape = MixerShape::read(l)?;
    let router = if mixture {
        let width = l.expert_width(c.ffn)?;
        let shared_key = l.key("expert_shared_feed_forward_length");
        let shared = required_uint(l.g, &shared_key)? as usize;
        Some((Router::read(l, Scoring::Sigmoid)?, width, shared))
    } else {
        None
    };
    let scale_key = l.key("attention.scale");
    // 0 reads as unset, as llama.cpp reads it.
    let scale = match float(l.g, &scale_key)? {
        None | Some(0.0) => 1.0 / (c.head_dim as f32).sqrt(),
        Some(s) if s.is_finite() && s > 0.0 => s,
        Some(s) => return Err(bad(&scale_key, s, "must be finite and positive")),
    };
    let (embed, head) = l.embedding_and_head()?;
    let mut layers = Vec::with_capacity(c.layers as usize);
    let mut states = 0;
    for i in 0..c.layers {
        let mut ops = Vec::new();
        let norm = l.layer_vector(i, "attn_norm.weight", h)?;
        match block(i) {
            Block::Mixer => {
                ops.push(pre_norm(norm));
                mixer(l, i, &shape, states, &mut ops)?;
                states += 1;
            }
            Block::Attention => {
                let attention = AttentionBlock {
                    biases: l.qkv_biases(i, false)?,
                    output_bias: l.optional_vector(&format!("blk.{i}.attn_output.bias"), h)?,
                    rope: None,
                    attend: Attend {
                        scale,
                        ..Attend::full(c)
                    },
                    ..l.attention(i)?
                };
                attention_block(&mut ops, c, norm, attention);
            }
            Block::Mlp => match &router {
                Some((router, width, shared)) => {
                    if l.has(&format!("blk.{i}.ffn_latent_down.weight")) {
                        return Err(l.unsupported("latent experts (ffn_latent_down)".into()));
                    }
                    let mut experts = router.biased(l, i, l.ungated_experts(i, *width)?)?;
                    experts.shared = Some(l.ungated_shared_expert(i, *shared)?);
                    experts_block(&mut ops, norm, experts);
                }
                None => {
                    ops.push(pre_norm(norm));
                    relu_squared_mlp(l, i, ffn[i as usize] as usize, &mut ops)?;
                }
            },
        }
        layers.push(ops);
    }
    let final_norm = l.vector("output_norm.weight", h)?;
    Ok(Program::plain(embed, layers, final_norm, head, Vec::new()))
}

/// Layer `i`'s ungated MLP of the normed rows in [`Buf::H`], `width` wide:
/// `ffn_up` into the gate's buffer, `relu(·)²`, `ffn_down`, added to the
/// residual stream.
fn relu_squared_mlp(
    l: &Loader<'_>,
    i: u32,
    width: usize,
    ops: &mut Vec<Op>,
) -> Result<(), LoadError> {
    let h = l.config.hidden as usize;
    for tensor in ["ffn_up", "ffn_down"] {
        if l.has(&format!("blk.{i}.{tensor}.bias")) {
            return Err(l.unsupported(format!("{tensor} biases")));
        }
    }
    let proj = |name: &str, inp: usize, out: usize, buf: Buf| -> Result<Proj, LoadError> {
        Ok(Proj {
            w: l.layer_matrix(i, name, inp, out)?,
            out: buf,
            bias: None,
        })
    };
    ops.push(Op::Linear {
        src: Buf::H,
        projs: vec![proj("ffn_up", h, width, Buf::Gate)?],
    });
    ops.push(Op::Glu(Gating::ReluSquared));
    ops.push(Op::Linear {
        src: Buf::Gate,
        projs: vec![proj("ffn_down", width, h, Buf::Sum)?],
    });
    ops.push(Op::Residual { src: Buf::Sum });
    Ok(())
}
