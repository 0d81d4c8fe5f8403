//! `granite` and `granitemoe`: IBM's Granite 3.x (dense) and Granite MoE
//! (3.0 1B-A400M, 3B-A800M). The `llama` layer (interleaved rotary,
//! attention biases where a file has them) with four of muP's multipliers:
//! the embedding scaled by `embedding_scale`, the attention scores by
//! `attention.scale` in place of `1/√head_dim`, each block's output by
//! `residual_scale` before it joins the residual stream, and the logits
//! divided by `logit_scale` (llama.cpp's `granite.cpp`). `granitemoe` has a
//! mixture of experts in place of each MLP, its weights renormalized, and a
//! shared expert (ungated) where `expert_shared_feed_forward_length` is set.
//! Granite 4.0-H's hybrids (`granitehybrid.rs`) share both.

use super::super::load_error::LoadError;
use super::super::meta::{float, positive_float, uint};
use super::super::program::{Attend, AttentionBlock, Program};
use super::super::rope::RopeMode;
use super::{Ffn, Loader};

/// muP's multipliers of a Granite file (0 or absent: unset, as llama.cpp
/// reads them).
pub(super) struct Multipliers {
    pub embed: f32,
    pub residual: f32,
    pub logit: f32,
    /// The attention scores' scale (`1/√head_dim` unset).
    pub attention: f32,
}

impl Multipliers {
    pub(super) fn read(l: &Loader<'_>) -> Result<Self, LoadError> {
        let multiplier = |key: &str, default: f32| -> Result<f32, LoadError> {
            let key = l.key(key);
            match float(l.g, &key)? {
                Some(0.0) => Ok(default),
                _ => positive_float(l.g, &key, default),
            }
        };
        Ok(Self {
            embed: multiplier("embedding_scale", 1.0)?,
            residual: multiplier("residual_scale", 1.0)?,
            logit: multiplier("logit_scale", 1.0)?,
            attention: multiplier("attention.scale", 1.0 / (l.config.head_dim as f32).sqrt())?,
        })
    }

    /// Sets the program's scales of the embedding, the residual stream and
    /// the logits.
    pub(super) fn apply(&self, program: &mut Program) {
        program.embed_scale = self.embed;
        program.residual_scale = self.residual;
        program.logit_factor = 1.0 / self.logit;
    }
}

/// Layer `i`'s MLP: SwiGLU, or (`mixture`) the experts, renormalized, and
/// the shared expert where the file gives its width, joined unscaled.
pub(super) fn ffn(l: &Loader<'_>, i: u32, mixture: bool) -> Result<Ffn, LoadError> {
    if !mixture {
        return Ok(Ffn::Dense(l.swiglu(i)?));
    }
    let width = l.expert_width(l.config.ffn)?;
    let shared_width = uint(l.g, &l.key("expert_shared_feed_forward_length"))?.unwrap_or(0);
    let mut experts = l.experts(i, width, true)?;
    if shared_width > 0 {
        let mut shared = l.shared_expert(i, shared_width as usize, false)?;
        // Granite's shared expert joins unscaled.
        shared.gate = None;
        experts.shared = Some(shared);
    }
    Ok(Ffn::Experts(experts))
}

/// The model of a `granite` file, or (`mixture`) of a `granitemoe` one.
pub(super) fn build(l: &Loader<'_>, mixture: bool) -> Result<Program, LoadError> {
    let scales = Multipliers::read(l)?;
    // llama.cpp reads `rope.scaling.finetuned` false as "no rotary
    // positions" (Granite 4's NoPE layers), which only its hybrids have.
    let finetuned = l.key("rope.scaling.finetuned");
    if matches!(l.g.get_bool(&finetuned), Ok(false)) {
        return Err(l.unsupported("attention without rotary positions".into()));
    }
    // llama.cpp's granite reads these biases where present; they are not
    // built here, so a file with any is refused rather than run wrong.
    for i in 0..l.config.layers {
        for tensor in ["attn_output", "ffn_gate", "ffn_up", "ffn_down"] {
            if l.has(&format!("blk.{i}.{tensor}.bias")) {
                return Err(l.unsupported(format!("{tensor} biases")));
            }
        }
    }
    let mut program = l.pre_norm_decoder(&l.rope(RopeMode::Interleaved)?, |i| {
        let attention = AttentionBlock {
            biases: l.qkv_biases(i, false)?,
            attend: Attend {
                scale: scales.attention,
                ..Attend::full(&l.config)
            },
            ..l.attention(i)?
        };
        Ok((attention, ffn(l, i, mixture)?))
    })?;
    scales.apply(&mut program);
    Ok(program)
}
