//! `olmoe`: AI2's OLMoE (1B-7B), as llama.cpp's `models/olmoe.cpp` builds
//! it and HF's `OlmoeForCausalLM` defines it: pre-norm layers whose
//! queries and keys are RMS-normed across all their heads together
//! (`attn_q_norm` of `heads × head_dim`, `attn_k_norm` of the KV width,
//! as OLMo 2's) before NeoX rotary, and a mixture of experts
//! `feed_forward_length` wide in place of each MLP, scored by softmax,
//! their weights not renormalized over the chosen ones
//! (`norm_topk_prob` false).

use super::super::load_error::LoadError;
use super::super::program::{AttentionBlock, Program};
use super::super::rope::RopeMode;
use super::{Ffn, Loader};

/// The model of an `olmoe` file.
pub(super) fn build(l: &Loader<'_>) -> Result<Program, LoadError> {
    let c = &l.config;
    let width = l.expert_width(c.ffn)?;
    l.pre_norm_decoder(&l.rope(RopeMode::Neox)?, |i| {
        let attention = AttentionBlock {
            qk_norm: Some((
                l.layer_vector(i, "attn_q_norm.weight", c.q_dim())?,
                l.layer_vector(i, "attn_k_norm.weight", c.kv_dim())?,
            )),
            ..l.attention(i)?
        };
        Ok((attention, Ffn::Experts(l.experts(i, width, false)?)))
    })
}
