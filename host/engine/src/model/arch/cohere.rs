//! `command-r` and `cohere2`: Cohere's Command-R (35B, 08-2024, Aya 23)
//! and Command R+ (104B), and Command R7B (`cohere2`), as llama.cpp's
//! `models/command-r.cpp` and `models/cohere2.cpp` build them and HF's
//! `Cohere` and `Cohere2` define them.
//!
//! A parallel layer: one LayerNorm of the residual stream (no bias,
//! `attention.layer_norm_epsilon`) feeds both the attention and the SwiGLU
//! MLP, and both outputs are added to the stream. Rotary pairs are
//! interleaved; the logits are multiplied by `logit_scale`. Command R+
//! also LayerNorms q and k per head, each head by gains of its own
//! (`attn_q_norm` of `[head_dim, heads]`).
//!
//! `cohere2` attends over a sliding window (`attention.sliding_window`)
//! with rotary positions on three of every four layers
//! (`attention.sliding_window_pattern`), and over the whole context
//! without them on the fourth (HF's `Cohere2Attention` rotates its sliding
//! layers only).

use super::super::load_error::LoadError;
use super::super::meta::{float, positive_float, required_uint};
use super::super::program::{attention_block, mlp, Attend, AttentionBlock, NormKind, Program};
use super::super::rope::{Rope, RopeMode};
use super::Loader;

/// The model of a `command-r` file, or (`cohere2`) of a `cohere2` one.
pub(super) fn build(l: &Loader<'_>, cohere2: bool) -> Result<Program, LoadError> {
    let c = &l.config;
    let h = c.hidden as usize;
    // 0 reads as unset, as llama.cpp reads it.
    let scale_key = l.key("logit_scale");
    let logit_factor = match float(l.g, &scale_key)? {
        None | Some(0.0) => 1.0,
        _ => positive_float(l.g, &scale_key, 1.0)?,
    };
    let (window, local) = if cohere2 {
        let window = required_uint(l.g, &l.key("attention.sliding_window"))?;
        (window, l.local_layers(4)?)
    } else {
        (0, vec![false; c.layers as usize])
    };
    let rope = l.rope(RopeMode::Interleaved)?;
    let (embed, head) = l.embedding_and_head()?;
    let mut layers = Vec::with_capacity(c.layers as usize);
    for i in 0..c.layers {
        let is_local = local[i as usize];
        // Command R+'s; Cohere2 has none (HF's and llama.cpp's).
        let qk_norm = match !cohere2 && l.has(&format!("blk.{i}.attn_q_norm.weight")) {
            true => Some((
                l.layer_head_gains(i, "attn_q_norm.weight", c.q_heads)?,
                l.layer_head_gains(i, "attn_k_norm.weight", c.kv_heads)?,
            )),
            false => None,
        };
        let attention = AttentionBlock {
            // HF's `attention_bias`, where a file keeps them.
            biases: l.qkv_biases(i, false)?,
            output_bias: l.optional_vector(&format!("blk.{i}.attn_output.bias"), h)?,
            qk_norm,
            qk_norm_per_head: true,
            rope: (!cohere2 || is_local).then_some(0),
            attend: Attend {
                window: if is_local { window } else { 0 },
                ..Attend::full(c)
            },
            ..l.attention(i)?
        };
        let mut ops = Vec::new();
        attention_block(
            &mut ops,
            c,
            l.layer_vector(i, "attn_norm.weight", h)?,
            attention,
        );
        // The MLP reads the same normed rows, which the attention left in H.
        mlp(&mut ops, l.swiglu(i)?);
        layers.push(ops);
    }
    let final_norm = l.vector("output_norm.weight", h)?;
    let ropes = vec![Rope::new(&rope, c.max_context)];
    Ok(Program {
        norm: NormKind::Layer,
        logit_factor,
        ..Program::plain(embed, layers, final_norm, head, ropes)
    })
}
