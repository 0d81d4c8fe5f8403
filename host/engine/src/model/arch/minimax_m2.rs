//! `minimax-m2`: MiniMax-M2 (and M2.1, M2.5; 230B-A10B), after llama.cpp's
//! `models/minimax-m2.cpp`. The `llama` layer with q and k each RMS-normed
//! across all their heads together (`attn_q_norm` as wide as every query
//! head, `attn_k_norm` every KV head, as OLMoE's), NeoX rotary on the first
//! `rope.dimension_count` values of each head (64 of 128), and in place of
//! every MLP experts `expert_feed_forward_length` wide, scored by sigmoids
//! (`expert_gating_func`, sigmoid where the file names none), chosen with
//! the selection bias `exp_probs_b`, always renormalized (as llama.cpp
//! builds it) and scaled by `expert_weights_scale`. The head is untied.

use super::super::load_error::LoadError;
use super::super::program::{AttentionBlock, Program, Scoring};
use super::super::rope::RopeMode;
use super::router::Router;
use super::{Ffn, Loader};

/// The model of a `minimax-m2` file.
pub(super) fn build(l: &Loader<'_>) -> Result<Program, LoadError> {
    let c = &l.config;
    let (q, kv) = (c.q_dim(), c.kv_dim());
    let router = Router::read(l, Scoring::Sigmoid)?.normalized();
    let width = l.expert_width(0)?;
    l.pre_norm_decoder(&l.rope(RopeMode::Neox)?, |i| {
        let attention = AttentionBlock {
            qk_norm: Some((
                l.layer_vector(i, "attn_q_norm.weight", q)?,
                l.layer_vector(i, "attn_k_norm.weight", kv)?,
            )),
            ..l.attention(i)?
        };
        Ok((attention, Ffn::Experts(router.biased_experts(l, i, width)?)))
    })
}
