//! `exaone` and `exaone4`: LG AI Research's EXAONE 3.0/3.5 (and EXAONE
//! Deep) and EXAONE 4.0, as llama.cpp's `models/exaone.cpp` and
//! `models/exaone4.cpp` build them and HF's `Exaone4` defines the latter.
//!
//! `exaone`: the `llama` layer with NeoX rotary (Llama 3's factors as
//! `rope_freqs` where the file has them).
//!
//! `exaone4`: OLMo 2's post-norm layer ([`post_norm_decoder`]) with q and
//! k normed per head. The hybrid models (EXAONE-4.0-32B) attend over a
//! sliding window (`attention.sliding_window`) on three of every four
//! layers and over the whole context, without rotary positions (NoPE), on
//! the fourth: the file's `attention.sliding_window_pattern` array where
//! it has one (HF's `layer_types`), else llama.cpp's rule, which takes
//! the 64-layer model as hybrid with pattern 4 and every other one as
//! rotating every layer over the whole context (EXAONE-4.0-1.2B).

use pagoda_core::gguf::Value;

use super::super::load_error::LoadError;
use super::super::meta::uint;
use super::super::program::{Attend, AttentionBlock, Program};
use super::super::rope::RopeMode;
use super::olmo2::{post_norm_decoder, QkNorm};
use super::Loader;

/// The model of an `exaone` file.
pub(super) fn build(l: &Loader<'_>) -> Result<Program, LoadError> {
    l.pre_norm_decoder(&l.rope(RopeMode::Neox)?, |i| {
        let attention = AttentionBlock {
            biases: l.qkv_biases(i, false)?,
            ..l.attention(i)?
        };
        Ok((attention, l.swiglu(i)?))
    })
}

/// Layers of the one EXAONE 4 model llama.cpp takes as hybrid without a
/// pattern in its file (EXAONE-4.0-32B), and that pattern.
const HYBRID_LAYERS: u32 = 64;
const HYBRID_PATTERN: u32 = 4;

/// The model of an `exaone4` file.
pub(super) fn build_v4(l: &Loader<'_>) -> Result<Program, LoadError> {
    let c = &l.config;
    let window = uint(l.g, &l.key("attention.sliding_window"))?.unwrap_or(0);
    let pattern_key = l.key("attention.sliding_window_pattern");
    let listed = matches!(l.g.get(&pattern_key), Some(Value::Array(_)));
    let local = if window > 0 && (listed || c.layers == HYBRID_LAYERS) {
        l.local_layers(HYBRID_PATTERN)?
    } else {
        vec![false; c.layers as usize]
    };
    let hybrid = local.contains(&true);
    let full = Attend::full(c);
    post_norm_decoder(l, &[l.rope(RopeMode::Neox)?], QkNorm::PerHead, |i| {
        let is_local = local[i as usize];
        let attend = Attend {
            window: if is_local { window } else { 0 },
            ..full.clone()
        };
        (attend, (is_local || !hybrid).then_some(0))
    })
}
