//! `hunyuan-dense`: Tencent's Hunyuan dense models (0.5B-7B), as
//! llama.cpp's `models/hunyuan-vl.cpp` builds them and HF's
//! `HunYuanDenseV1` defines them: the `llama` layer with NeoX rotary and
//! QK-norm per head applied after the rotary, not before it. Their
//! NTK-aware scaling arrives folded into `rope.freq_base` by the
//! converter, or (Hunyuan-VL's files) as `rope.scaling.alpha`, which
//! multiplies the base by `alpha^(head_dim / (head_dim - 2))`.

use super::super::load_error::LoadError;
use super::super::meta::{bad, float};
use super::super::program::{AttentionBlock, Program};
use super::super::rope::RopeMode;
use super::Loader;

/// The model of a `hunyuan-dense` file.
pub(super) fn build(l: &Loader<'_>) -> Result<Program, LoadError> {
    let d = l.config.head_dim as usize;
    let mut rope = l.rope(RopeMode::Neox)?;
    let alpha_key = l.key("rope.scaling.alpha");
    if let Some(alpha) = float(l.g, &alpha_key)?.filter(|&a| a != 0.0) {
        if !(alpha.is_finite() && alpha > 0.0) || d <= 2 {
            return Err(bad(&alpha_key, alpha, "must be finite and positive"));
        }
        let base = f64::from(rope.base) * f64::from(alpha).powf(d as f64 / (d as f64 - 2.0));
        if !base.is_finite() || base > f64::from(f32::MAX) {
            return Err(bad(
                &alpha_key,
                alpha,
                "scales the rotary base out of range",
            ));
        }
        rope.base = base as f32;
    }
    l.pre_norm_decoder(&rope, |i| {
        let attention = AttentionBlock {
            biases: l.qkv_biases(i, false)?,
            qk_norm: Some((
                l.layer_vector(i, "attn_q_norm.weight", d)?,
                l.layer_vector(i, "attn_k_norm.weight", d)?,
            )),
            qk_norm_after_rope: true,
            ..l.attention(i)?
        };
        Ok((attention, l.swiglu(i)?))
    })
}
