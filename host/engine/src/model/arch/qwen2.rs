//! `qwen2` and `qwen2moe`: Qwen2 and Qwen2.5, and Qwen1.5-MoE and
//! Qwen2-57B-A14B. The `llama` layer with query, key and value biases
//! (required for `qwen2`; where the file has them for `qwen2moe`) and NeoX
//! rotary. `qwen2moe` has a mixture of experts `expert_feed_forward_length`
//! wide in place of each MLP, its weights not renormalized over the chosen
//! ones (`norm_topk_prob` false, as llama.cpp builds it), plus a shared
//! expert `expert_shared_feed_forward_length` wide that every token goes
//! through, scaled by the sigmoid of its gate.
//!
//! `qwen2vl` (Qwen2-VL, Qwen2.5-VL) is the `qwen2` text model with M-RoPE:
//! each pair of a head turns by the temporal, height or width position its
//! section (`rope.dimension_sections`) names, and a text token's three are
//! its position, so its pairs turn as the plain NeoX rotary turns them.
//! Pagoda runs these files on text; images (the separate `mmproj` file)
//! are not read.

use super::super::load_error::LoadError;
use super::super::meta::uint;
use super::super::program::{AttentionBlock, Program};
use super::super::rope::RopeMode;
use super::{Ffn, Loader};

/// The model of a `qwen2` file, or (`mixture`) of a `qwen2moe` one.
pub(super) fn build(l: &Loader<'_>, mixture: bool) -> Result<Program, LoadError> {
    let (width, shared_width) = if mixture {
        let width = l.expert_width(l.ffn_per_used_expert()?)?;
        // As llama.cpp reads it: `feed_forward_length` where absent or 0.
        let shared_key = l.key("expert_shared_feed_forward_length");
        let shared = uint(l.g, &shared_key)?.filter(|&w| w > 0);
        (width, shared.unwrap_or(l.config.ffn) as usize)
    } else {
        (0, 0)
    };
    l.pre_norm_decoder(&l.rope(RopeMode::Neox)?, |i| {
        let attention = AttentionBlock {
            biases: l.qkv_biases(i, !mixture)?,
            ..l.attention(i)?
        };
        let ffn = if mixture {
            let mut experts = l.experts(i, width, false)?;
            experts.shared = Some(l.shared_expert(i, shared_width, true)?);
            Ffn::Experts(experts)
        } else {
            Ffn::Dense(l.swiglu(i)?)
        };
        Ok((attention, ffn))
    })
}
