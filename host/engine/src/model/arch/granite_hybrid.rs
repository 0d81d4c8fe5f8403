//! `granitehybrid`: IBM's Granite 4.0-H (Micro 3B, Tiny 7B-A1B, Small
//! 32B-A9B) and Bamba, hybrids of attention and Mamba-2, after llama.cpp's
//! `models/granite-hybrid.cpp`. Each layer is pre-norm: its operator
//! (`attn_norm`, then attention or a [Mamba-2 mixer](super::mamba2)) and
//! its MLP (`ffn_norm`, then SwiGLU or Granite's mixture with its shared
//! expert), each scaled by `residual_scale` as it joins the residual
//! stream, with the rest of Granite's muP multipliers
//! ([`Multipliers`]).
//!
//! A layer whose `attention.head_count_kv` is 0 is a mixer. The attention
//! layers of Granite 4.0-H have no rotary positions (the converter writes
//! `rope.scaling.finetuned` false); Bamba's turn by the interleaved rotary.

use super::super::load_error::LoadError;
use super::super::meta::{layer_uints, required_uint, uint};
use super::super::program::{
    attention_block, experts_block, mlp_block, pre_norm, Attend, AttentionBlock, Program,
};
use super::super::rope::{Rope, RopeMode};
use super::granite::{ffn, Multipliers};
use super::mamba2::{mixer, MixerShape};
use super::{Ffn, Loader};

/// The model of a `granitehybrid` file.
pub(super) fn build(l: &Loader<'_>) -> Result<Program, LoadError> {
    let c = &l.config;
    let h = c.hidden as usize;
    let scales = Multipliers::read(l)?;
    let blocks = required_uint(l.g, &l.key("block_count"))?;
    let kv_key = l.key("attention.head_count_kv");
    let kv_per_layer = layer_uints(l.g, &kv_key, blocks)?.unwrap_or_default();
    let mixes = |i: u32| kv_per_layer.get(i as usize) == Some(&0);
    let shape = MixerShape::read(l)?;
    // llama.cpp turns positions unless `rope.scaling.finetuned` is false.
    let rotates = !matches!(l.g.get_bool(&l.key("rope.scaling.finetuned")), Ok(false));
    let ropes = if rotates {
        vec![Rope::new(&l.rope(RopeMode::Interleaved)?, c.max_context)]
    } else {
        Vec::new()
    };
    let mixture = uint(l.g, &l.key("expert_count"))?.unwrap_or(0) > 0;
    // llama.cpp reads the dense MLP's biases where present; they are not
    // built here, so a file with any is refused rather than run wrong.
    for i in 0..c.layers {
        for tensor in ["ffn_gate", "ffn_up", "ffn_down"] {
            if l.has(&format!("blk.{i}.{tensor}.bias")) {
                return Err(l.unsupported(format!("{tensor} biases")));
            }
        }
    }
    let (embed, head) = l.embedding_and_head()?;
    let mut layers = Vec::with_capacity(c.layers as usize);
    let mut states = 0;
    for i in 0..c.layers {
        let mut ops = Vec::new();
        let norm = l.layer_vector(i, "attn_norm.weight", h)?;
        if mixes(i) {
            ops.push(pre_norm(norm));
            mixer(l, i, &shape, states, &mut ops)?;
            states += 1;
        } else {
            let attention = AttentionBlock {
                biases: l.qkv_biases(i, false)?,
                output_bias: l.optional_vector(&format!("blk.{i}.attn_output.bias"), h)?,
                rope: rotates.then_some(0),
                attend: Attend {
                    scale: scales.attention,
                    ..Attend::full(c)
                },
                ..l.attention(i)?
            };
            attention_block(&mut ops, c, norm, attention);
        }
        let norm = l.layer_vector(i, "ffn_norm.weight", h)?;
        match ffn(l, i, mixture)? {
            Ffn::Dense(mlp) => mlp_block(&mut ops, norm, mlp),
            Ffn::Experts(experts) => experts_block(&mut ops, norm, experts),
        }
        layers.push(ops);
    }
    let final_norm = l.vector("output_norm.weight", h)?;
    let mut program = Program::plain(embed, layers, final_norm, head, ropes);
    scales.apply(&mut program);
    Ok(program)
}
