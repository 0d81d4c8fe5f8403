//! `phi3`: Phi-3 and Phi-3.5 (mini, medium) and Phi-4-mini. One fused
//! `attn_qkv` tensor (query rows, then key, then value) and one fused
//! `ffn_up` (the gate's rows, then the up projection's), read as views;
//! NeoX rotary with LongRoPE: per-frequency factors, the long ones when the
//! context is past the trained one (as llama.cpp picks them for a full
//! context), and an attention factor on the cosines and sines.

use super::super::load_error::LoadError;
use super::super::meta::{bad, float, uint};
use super::super::program::Program;
use super::super::rope::RopeMode;
use super::{check_factors, Loader};

/// The model of a `phi3` file.
pub(super) fn build(l: &Loader<'_>) -> Result<Program, LoadError> {
    let c = &l.config;
    let mut rope = l.rope(RopeMode::Neox)?;
    let original = uint(l.g, &l.key("rope.scaling.original_context_length"))?;
    let long = original.is_some_and(|o| c.max_context > o);
    let factors = if long {
        "rope_factors_long.weight"
    } else {
        "rope_factors_short.weight"
    };
    if let Some(factors) = l.optional_vector(factors, c.rope_dim as usize / 2)? {
        rope.factors = Some(factors);
    }
    check_factors(&rope.factors)?;
    let attn_factor_key = l.key("rope.scaling.attn_factor");
    rope.attn_factor = float(l.g, &attn_factor_key)?.unwrap_or(1.0);
    if !(rope.attn_factor.is_finite() && rope.attn_factor > 0.0) {
        return Err(bad(&attn_factor_key, rope.attn_factor, "must be positive"));
    }
    l.pre_norm_decoder(&rope, |i| {
        let attention = l
            .fused_attention(i)?
            .ok_or_else(|| LoadError::MissingTensor(format!("blk.{i}.attn_qkv.weight")))?;
        Ok((attention, l.fused_swiglu(i)?))
    })
}
