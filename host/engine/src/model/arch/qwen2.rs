//! `qwen2`: Qwen2 and Qwen2.5. The `llama` layer with query, key and value
//! biases (required) and NeoX rotary.

use super::super::load_error::LoadError;
use super::super::program::{AttentionBlock, Program};
use super::super::rope::RopeMode;
use super::Loader;

/// The model of a `qwen2` file.
pub(super) fn build(l: &Loader<'_>) -> Result<Program, LoadError> {
    l.pre_norm_decoder(&l.rope(RopeMode::Neox)?, |i| {
        let attention = AttentionBlock {
            biases: l.qkv_biases(i, true)?,
            ..l.attention(i)?
        };
        Ok((attention, l.swiglu(i)?))
    })
}
