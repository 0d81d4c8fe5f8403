//! `glm4` and `glm4moe`: Zhipu's GLM-4 (GLM-4-9B-0414, GLM-4-32B-0414,
//! GLM-Z1) and GLM-4.5 (Air, the 355B model, GLM-4.6), as llama.cpp's
//! `models/glm4.cpp` and `models/glm4-moe.cpp` build them.
//!
//! `glm4`: the pre-norm layer with a norm after each block too
//! (`post_attention_norm`, `post_ffw_norm`, as Gemma's), q/k/v biases,
//! one fused `ffn_up` (the gate's rows, then the up projection's) and
//! interleaved rotary on the first `rope.dimension_count` dimensions of a
//! head (half of it). The projections may also come fused (`attn_qkv`).
//!
//! `glm4moe`: the plain pre-norm layer (its MLP's norm named
//! `post_attention_norm`, as gpt-oss's), q/k/v biases, QK-norm where the
//! file has it, NeoX rotary on half a head. The first
//! `leading_dense_block_count` layers have a dense MLP; the rest a mixture
//! of experts scored by sigmoids (`expert_gating_func`), chosen with the
//! load-balancing bias `exp_probs_b` added, weighted by their unbiased
//! scores renormalized (`expert_weights_norm`) and scaled
//! (`expert_weights_scale`; groups where the file has them, as
//! DeepSeek-V3's), plus `expert_shared_count` shared experts as
//! one ungated MLP that many experts wide. The multi-token-prediction block
//! at the end (`nextn_predict_layers`) is not part of the trunk: the
//! configuration leaves it out and nothing reads it.

use pagoda_core::gguf::Value;

use super::super::load_error::LoadError;
use super::super::meta::uint;
use super::super::program::{AttentionBlock, Program, Scoring};
use super::super::rope::RopeMode;
use super::router::Router;
use super::{Ffn, Loader};

/// The model of a `glm4` file.
pub(super) fn build(l: &Loader<'_>) -> Result<Program, LoadError> {
    refuse_mrope(l)?;
    let h = l.config.hidden as usize;
    l.pre_norm_decoder(&l.rope(RopeMode::Interleaved)?, |i| {
        let attention = AttentionBlock {
            post_norm: Some(l.layer_vector(i, "post_attention_norm.weight", h)?),
            ..attention(l, i)?
        };
        let mut mlp = l.fused_swiglu(i)?;
        mlp.post_norm = Some(l.layer_vector(i, "post_ffw_norm.weight", h)?);
        Ok((attention, mlp))
    })
}

/// The model of a `glm4moe` file.
pub(super) fn build_moe(l: &Loader<'_>) -> Result<Program, LoadError> {
    refuse_mrope(l)?;
    let d = l.config.head_dim as usize;
    let router = Router::read(l, Scoring::Sigmoid)?;
    let width = l.expert_width(l.ffn_per_used_expert()?)?;
    let shared_count = uint(l.g, &l.key("expert_shared_count"))?.unwrap_or(0) as usize;
    let dense_lead = uint(l.g, &l.key("leading_dense_block_count"))?.unwrap_or(0);
    l.decoder(
        "post_attention_norm.weight",
        &l.rope(RopeMode::Neox)?,
        |i| {
            let q_norm = format!("blk.{i}.attn_q_norm.weight");
            let qk_norm = if l.has(&q_norm) {
                let k_norm = l.layer_vector(i, "attn_k_norm.weight", d)?;
                Some((l.vector(&q_norm, d)?, k_norm))
            } else {
                None
            };
            let attention = AttentionBlock {
                qk_norm,
                ..attention(l, i)?
            };
            if i < dense_lead {
                return Ok((attention, Ffn::Dense(l.swiglu(i)?)));
            }
            let mut experts = router.biased_experts(l, i, width)?;
            if shared_count > 0 {
                experts.shared = Some(l.shared_expert(i, width * shared_count, false)?);
            }
            Ok((attention, Ffn::Experts(experts)))
        },
    )
}

/// Layer `i`'s projections, separate or fused, with their biases where
/// the file has them.
fn attention(l: &Loader<'_>, i: u32) -> Result<AttentionBlock, LoadError> {
    if let Some(fused) = l.fused_attention(i)? {
        return Ok(fused);
    }
    Ok(AttentionBlock {
        biases: l.qkv_biases(i, false)?,
        ..l.attention(i)?
    })
}

/// Refuses GLM-4V's multimodal rotary (`rope.dimension_sections`, M-RoPE),
/// which llama.cpp takes in place of the plain one where the first two
/// sections are positive.
fn refuse_mrope(l: &Loader<'_>) -> Result<(), LoadError> {
    let key = l.key("rope.dimension_sections");
    let Some(Value::Array(sections)) = l.g.get(&key) else {
        return Ok(());
    };
    let positive = |v: Option<Value<'_>>| match v {
        Some(Value::I32(n)) => n > 0,
        Some(Value::U32(n)) => n > 0,
        Some(Value::I64(n)) => n > 0,
        Some(Value::U64(n)) => n > 0,
        _ => false,
    };
    let mut it = sections.iter();
    if positive(it.next()) && positive(it.next()) {
        return Err(l.unsupported("multimodal rotary (rope.dimension_sections)".into()));
    }
    Ok(())
}
