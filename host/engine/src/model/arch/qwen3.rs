//! `qwen3`: Qwen3 (dense). The `qwen2` layer without biases, with QK-norm:
//! each head of the queries and keys is RMS-normed by its own gain
//! (`attn_q_norm`, `attn_k_norm`) after the projection, before rotary.

use super::super::load_error::LoadError;
use super::super::program::{AttentionBlock, Program};
use super::super::rope::RopeMode;
use super::Loader;

/// The model of a `qwen3` file.
pub(super) fn build(l: &Loader<'_>) -> Result<Program, LoadError> {
    let d = l.config.head_dim as usize;
    l.pre_norm_decoder(&l.rope(RopeMode::Neox)?, |i| {
        let attention = AttentionBlock {
            qk_norm: Some((
                l.layer_vector(i, "attn_q_norm.weight", d)?,
                l.layer_vector(i, "attn_k_norm.weight", d)?,
            )),
            ..l.attention(i)?
        };
        Ok((attention, l.swiglu(i)?))
    })
}
