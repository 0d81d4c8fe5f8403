//! `qwen3` and `qwen3moe`: Qwen3, dense and mixture of experts. The `qwen2`
//! layer without biases, with QK-norm: each head of the queries and keys is
//! RMS-normed by its own gain (`attn_q_norm`, `attn_k_norm`) after the
//! projection, before rotary. `qwen3moe` (Qwen3-30B-A3B, 235B-A22B) has
//! experts `expert_feed_forward_length` wide in place of each MLP, their
//! weights renormalized over the chosen ones (`norm_topk_prob`, as
//! llama.cpp builds it).
//!
//! `qwen3vl` and `qwen3vlmoe` (Qwen3-VL) are their text models, with
//! interleaved M-RoPE and DeepStack: on text, the rotary is the plain NeoX
//! one (a text token's three positions are its position, as in
//! `qwen2vl`), and DeepStack adds nothing (it adds image features to the
//! first layers' outputs; a text token's are zero). llama.cpp's
//! interleaved sections leave two of a head's three slowest pairs
//! unturned on text (they fall to its fourth, zero, position); HF turns
//! them, and so does Pagoda: at position 32 768 (base 5e6, heads of 128)
//! they differ by about 0.01 radian.

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
