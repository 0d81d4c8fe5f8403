//! `seed_oss`: ByteDance's Seed-OSS-36B, as llama.cpp's `models/seed-oss.cpp`
//! builds it: the `qwen2` layer (q/k/v biases, an output bias where the
//! file has one, NeoX rotary, a head width of its own) with the MLP's norm
//! named `post_attention_norm`, and the scores scaled by
//! `attention.scale` where the file sets it (0 or absent: `1/√head_dim`).

use super::super::load_error::LoadError;
use super::super::program::{Attend, AttentionBlock, Program};
use super::super::rope::RopeMode;
use super::Loader;

/// The model of a `seed_oss` file.
pub(super) fn build(l: &Loader<'_>) -> Result<Program, LoadError> {
    let h = l.config.hidden as usize;
    let scale = l.attention_scale()?;
    l.decoder(
        "post_attention_norm.weight",
        &l.rope(RopeMode::Neox)?,
        |i| {
            let attention = AttentionBlock {
                biases: l.qkv_biases(i, false)?,
                output_bias: l.optional_vector(&format!("blk.{i}.attn_output.bias"), h)?,
                attend: Attend {
                    scale,
                    ..Attend::full(&l.config)
                },
                ..l.attention(i)?
            };
            Ok((attention, l.swiglu(i)?))
        },
    )
}
