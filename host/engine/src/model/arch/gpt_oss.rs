//! `gpt-oss`: OpenAI's gpt-oss (20B, 120B), as llama.cpp's
//! `models/openai-moe.cpp`. A pre-norm decoder (the MLP's norm is named
//! `post_attention_norm`) whose every projection has a bias; attention
//! with a learned sink logit per head (`attn_sinks`), over a sliding
//! window (`attention.sliding_window`, 128) on even layers
//! (`attention.sliding_window_pattern`, default 2) and the whole context
//! on odd ones; NeoX rotary with YaRN; and in place of each MLP a mixture
//! of experts (four of 32 or 128 a token) whose router and experts have
//! biases, weighted by the softmax of the chosen experts' scores (the
//! renormalized softmax of all of them), each expert gated by the clamped
//! SwiGLU ([`Gating::SwigluOai`]). The experts ship in MXFP4.

use super::super::config::ModelError;
use super::super::load_error::LoadError;
use super::super::meta::{float, required_uint};
use super::super::program::{
    attention_block, experts_block, Attend, AttentionBlock, Gating, Program,
};
use super::super::rope::{Rope, RopeMode, RopeSpec};
use super::Loader;

/// The model of a `gpt-oss` file.
pub(super) fn build(l: &Loader<'_>) -> Result<Program, LoadError> {
    let c = &l.config;
    let (h, heads) = (c.hidden as usize, c.q_heads as usize);
    let window = required_uint(l.g, &l.key("attention.sliding_window"))?;
    let local_layers = l.local_layers(2)?;
    let rope = l.rope(RopeMode::Neox)?;
    let mut ropes = vec![Rope::new(&rope, c.max_context)];
    // Local layers rotate with their own base only where the file gives
    // one (llama.cpp reads `rope.freq_base_swa` as optional).
    let local_rope = match float(l.g, &l.key("rope.freq_base_swa"))? {
        Some(base) if base != rope.base => {
            ropes.push(Rope::new(&RopeSpec { base, ..rope }, c.max_context));
            1
        }
        _ => 0,
    };
    let width = l.expert_width(c.ffn)?;
    let (embed, head) = l.embedding_and_head()?;
    let mut layers = Vec::with_capacity(c.layers as usize);
    for i in 0..c.layers {
        let local = window > 0 && local_layers[i as usize];
        // Checked here, not at every step: a sink is a logit.
        let sinks = l.layer_vector(i, "attn_sinks.weight", heads)?;
        if !sinks.iter().all(|s| s.is_finite()) {
            return Err(ModelError::NonFinite.into());
        }
        let attention = AttentionBlock {
            biases: l.qkv_biases(i, false)?,
            output_bias: Some(l.layer_vector(i, "attn_output.bias", h)?),
            rope: Some(if local { local_rope } else { 0 }),
            attend: Attend {
                window: if local { window } else { 0 },
                sinks: Some(sinks),
                ..Attend::full(c)
            },
            ..l.attention(i)?
        };
        let mut experts = l.experts(i, width, true)?;
        experts.gating = Gating::SwigluOai;
        l.expert_biases(i, &mut experts)?;
        let mut ops = Vec::new();
        attention_block(
            &mut ops,
            c,
            l.layer_vector(i, "attn_norm.weight", h)?,
            attention,
        );
        let norm = l.layer_vector(i, "post_attention_norm.weight", h)?;
        experts_block(&mut ops, norm, experts);
        layers.push(ops);
    }
    let final_norm = l.vector("output_norm.weight", h)?;
    Ok(Program::plain(embed, layers, final_norm, head, ropes))
}
