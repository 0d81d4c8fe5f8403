//! `phi3`: Phi-3 and Phi-3.5 (mini, medium) and Phi-4-mini. One fused
//! `attn_qkv` tensor (query rows, then key, then value) and one fused
//! `ffn_up` (the gate's rows, then the up projection's), read as views;
//! NeoX rotary with LongRoPE: per-frequency factors, the long ones when the
//! context is past the trained one (as llama.cpp picks them for a full
//! context), and an attention factor on the cosines and sines.

use std::ops::Range;

use super::super::load_error::LoadError;
use super::super::meta::{bad, float, uint};
use super::super::program::{Attend, AttentionBlock, Gating, MlpBlock, Program};
use super::super::rope::RopeMode;
use super::super::tensors::Matrix;
use super::{check_factors, Loader};

/// The model of a `phi3` file.
pub(super) fn build(l: &Loader<'_>) -> Result<Program, LoadError> {
    let c = &l.config;
    let (h, q, kv, f) = (c.hidden as usize, c.q_dim(), c.kv_dim(), c.ffn as usize);
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
        let name = |t: &str| format!("blk.{i}.{t}.weight");
        let split = |m: &Matrix, t: &str, rows: Range<usize>| {
            m.view(rows)
                .ok_or_else(|| LoadError::MissingTensor(name(t)))
        };
        let qkv = l.layer_matrix(i, "attn_qkv", h, q + 2 * kv)?;
        let up = l.layer_matrix(i, "ffn_up", h, 2 * f)?;
        let attention = AttentionBlock {
            q: split(&qkv, "attn_qkv", 0..q)?,
            k: split(&qkv, "attn_qkv", q..q + kv)?,
            v: split(&qkv, "attn_qkv", q + kv..q + 2 * kv)?,
            biases: [None, None, None],
            qk_norm: None,
            output: l.layer_matrix(i, "attn_output", q, h)?,
            output_bias: None,
            post_norm: None,
            rope: Some(0),
            attend: Attend::full(c),
        };
        let mlp = MlpBlock {
            gate: split(&up, "ffn_up", 0..f)?,
            up: split(&up, "ffn_up", f..2 * f)?,
            down: l.layer_matrix(i, "ffn_down", f, h)?,
            gating: Gating::Silu,
            post_norm: None,
        };
        Ok((attention, mlp))
    })
}
