//! `llama`: Llama 1-3.x, TinyLlama, SmolLM, Mistral and Mistral-Nemo (which
//! llama.cpp writes as `llama`, a head width of its own included), and
//! Mixtral (`llama` with `expert_count` experts in place of each MLP).
//! Pre-norm layers of attention and a SwiGLU MLP; query and key rows in the
//! interleaved-pair order llama.cpp's converter gives them; Llama 3.x's
//! rope scaling as `rope_freqs.weight` factors. Attention biases where a
//! converted fine-tune carries them.

use super::super::load_error::LoadError;
use super::super::program::{AttentionBlock, Program};
use super::super::rope::RopeMode;
use super::{Ffn, Loader};

/// The model of a `llama` file.
pub(super) fn build(l: &Loader<'_>) -> Result<Program, LoadError> {
    // Mixtral's experts are as wide as the dense MLP would be, and their
    // weights renormalized over the chosen two (HF's MixtralSparseMoeBlock).
    let mixture = l.expert_count()? > 0;
    if l.has("blk.0.ffn_up_shexp.weight") {
        return Err(l.unsupported("shared experts".into()));
    }
    let width = l.expert_width(l.config.ffn)?;
    l.pre_norm_decoder(&l.rope(RopeMode::Interleaved)?, |i| {
        let attention = AttentionBlock {
            biases: l.qkv_biases(i, false)?,
            ..l.attention(i)?
        };
        let ffn = if mixture {
            Ffn::Experts(l.experts(i, width, true)?)
        } else {
            Ffn::Dense(l.swiglu(i)?)
        };
        Ok((attention, ffn))
    })
}
