//! `qwen3` and `qwen3moe`: Qwen3, dense and mixture of experts. The `qwen2`
//! layer without biases, with QK-norm: each head of the queries and keys is
//! RMS-normed by its own gain (`attn_q_norm`, `attn_k_norm`) after the
//! projection, before rotary. `qwen3moe` (Qwen3-30B-A3B, 235B-A22B) has
//! experts `expert_feed_forward_length` wide in place of each MLP, their
//! weights renormalized over the chosen ones (`norm_topk_prob`, as
//! llama.cpp builds it).

use super::super::load_error::LoadError;
use super::super::program::{AttentionBlock, Program};
use super::super::rope::RopeMode;
use super::{Ffn, Loader};

/// The model of a `qwen3` file, or (`mixture`) of a `qwen3moe` one.
pub(super) fn build(l: &Loader<'_>, mixture: bool) -> Result<Program, LoadError> {
    let d = l.config.head_dim as usize;
    let width = if mixture {
        l.expert_width(l.ffn_per_used_expert()?)?
    } else {
        0
    };
    l.pre_norm_decoder(&l.rope(RopeMode::Neox)?, |i| {
        let attention = AttentionBlock {
            qk_norm: Some((
                l.layer_vector(i, "attn_q_norm.weight", d)?,
                l.layer_vector(i, "attn_k_norm.weight", d)?,
            )),
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
