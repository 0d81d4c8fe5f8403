//! `smollm3`: Hugging Face's SmolLM3. The `llama` layer (interleaved
//! rotary on the converter's permuted rows, attention biases where a file
//! has them), except that every fourth layer (`(i + 1) % 4 == 0`) has no
//! rotary positions (NoPE): llama.cpp fixes that step at 4, as SmolLM3's
//! `no_rope_layer_interval` is, and the files carry no key for it.

use super::super::load_error::LoadError;
use super::super::program::{AttentionBlock, Program};
use super::super::rope::RopeMode;
use super::Loader;

/// Every this many layers, the last has no rotary positions.
const NO_ROPE_LAYER_STEP: u32 = 4;

/// The model of a `smollm3` file.
pub(super) fn build(l: &Loader<'_>) -> Result<Program, LoadError> {
    l.pre_norm_decoder(&l.rope(RopeMode::Interleaved)?, |i| {
        let rotary = (i + 1) % NO_ROPE_LAYER_STEP != 0;
        let attention = AttentionBlock {
            biases: l.qkv_biases(i, false)?,
            rope: rotary.then_some(0),
            ..l.attention(i)?
        };
        Ok((attention, l.swiglu(i)?))
    })
}
