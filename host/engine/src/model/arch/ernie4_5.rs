//! `ernie4_5` and `ernie4_5-moe`: Baidu's ERNIE 4.5 (0.3B dense;
//! 21B-A3B and 300B-A47B mixtures), as llama.cpp's `models/ernie4-5.cpp`
//! and `models/ernie4-5-moe.cpp` build them and HF's `Ernie4_5` and
//! `Ernie4_5_Moe` define them.
//!
//! `ernie4_5`: the `llama` layer, interleaved rotary over the whole head,
//! biases where a file carries them (HF's `use_bias`; llama.cpp's graph
//! leaves an output bias out, HF's adds it, and so does Pagoda).
//!
//! `ernie4_5-moe`: the same attention; layer `i` has a mixture of experts
//! where `i >= leading_dense_block_count` and `(i + 1)` is a multiple of
//! `interleave_moe_layer_step` (a dense MLP elsewhere). Experts
//! `expert_feed_forward_length` wide are scored by a softmax, chosen with
//! the load-balancing bias `exp_probs_b` added where the file has it,
//! weighted by their unbiased probabilities renormalized over the chosen
//! ones; the shared experts (`expert_shared_feed_forward_length` wide in
//! all) are one ungated MLP every row goes through.

use super::super::config::ModelError;
use super::super::load_error::LoadError;
use super::super::meta::{bad, uint};
use super::super::program::{AttentionBlock, Program, Scoring};
use super::super::rope::RopeMode;
use super::router::Router;
use super::{Ffn, Loader};

/// The model of an `ernie4_5` file, or (`mixture`) of an `ernie4_5-moe`
/// one.
pub(super) fn build(l: &Loader<'_>, mixture: bool) -> Result<Program, LoadError> {
    let h = l.config.hidden as usize;
    let rope = l.rope(RopeMode::Interleaved)?;
    let attention = |i: u32| -> Result<AttentionBlock, LoadError> {
        Ok(AttentionBlock {
            biases: l.qkv_biases(i, false)?,
            output_bias: l.optional_vector(&format!("blk.{i}.attn_output.bias"), h)?,
            ..l.attention(i)?
        })
    };
    if !mixture {
        return l.pre_norm_decoder(&rope, |i| Ok((attention(i)?, Ffn::Dense(l.swiglu(i)?))));
    }
    let router = Router::read(l, Scoring::Softmax)?;
    let width = l.expert_width(l.ffn_per_used_expert()?)?;
    let shared_key = l.key("expert_shared_feed_forward_length");
    let shared = uint(l.g, &shared_key)?.unwrap_or(0) as usize;
    let lead = uint(l.g, &l.key("leading_dense_block_count"))?.unwrap_or(0);
    let step_key = l.key("interleave_moe_layer_step");
    let step = uint(l.g, &step_key)?.unwrap_or(1);
    if step == 0 {
        return Err(bad(&step_key, step, "must be positive"));
    }
    l.pre_norm_decoder(&rope, |i| {
        if i < lead || !(i + 1).is_multiple_of(step) {
            return Ok((attention(i)?, Ffn::Dense(l.swiglu(i)?)));
        }
        let mut experts = l.experts(i, width, true)?;
        router.apply(&mut experts);
        // ERNIE always renormalizes (llama.cpp's graph and HF's
        // `norm_min` division), whatever `expert_weights_norm` says.
        experts.normalize = true;
        let n = experts.experts.len();
        let bias = l.optional_vector(&format!("blk.{i}.exp_probs_b.bias"), n)?;
        if bias
            .as_ref()
            .is_some_and(|b| !b.iter().all(|v| v.is_finite()))
        {
            return Err(ModelError::NonFinite.into());
        }
        experts.selection_bias = bias;
        if shared > 0 {
            experts.shared = Some(l.shared_expert(i, shared, false)?);
        } else if l.has(&format!("blk.{i}.ffn_up_shexp.weight")) {
            // llama.cpp would leave them unread.
            return Err(bad(&shared_key, 0, "the file has shared experts"));
        }
        Ok((attention(i)?, Ffn::Experts(experts)))
    })
}
