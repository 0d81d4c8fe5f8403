//! `mistral3`: Mistral's Ministral 3 (3B, 8B, 14B) and the Mistral 3
//! language models llama.cpp writes under this name, as its
//! `models/mistral3.cpp` builds them and HF's `Ministral3` defines them:
//! the `llama` layer (interleaved rotary on the converter's rows, an
//! output bias where the file has one) with YaRN whose magnitude is
//! HF's ratio of `get_mscale`s (`rope.scaling.yarn_log_multiplier` as
//! `mscale_all_dim`), and Llama 4's attention temperature
//! (`attention.temperature_scale`): each query at position `p` multiplied
//! by `1 + beta ln(1 + floor(p / original_context))`, folded into the
//! queries' own rotary table. The scores' scale is `attention.scale`
//! where the file sets it.

use super::super::config::ModelError;
use super::super::load_error::LoadError;
use super::super::meta::{bad, float, uint};
use super::super::program::{Attend, AttentionBlock, Buf, Op, Program};
use super::super::rope::{Rope, RopeMode, Temperature};
use super::Loader;

/// The model of a `mistral3` file.
pub(super) fn build(l: &Loader<'_>) -> Result<Program, LoadError> {
    let c = &l.config;
    let h = c.hidden as usize;
    // llama.cpp reads MLP biases here; they are not built, so a file with
    // any is refused rather than run wrong.
    for i in 0..c.layers {
        for tensor in ["ffn_gate", "ffn_up", "ffn_down"] {
            if l.has(&format!("blk.{i}.{tensor}.bias")) {
                return Err(l.unsupported(format!("{tensor} biases")));
            }
        }
    }
    let mut rope = l.rope(RopeMode::Interleaved)?;
    let log_key = l.key("rope.scaling.yarn_log_multiplier");
    if let (Some(yarn), Some(all)) = (rope.yarn.as_mut(), float(l.g, &log_key)?) {
        if !(all.is_finite() && all >= 0.0) {
            return Err(bad(&log_key, all, "must be finite and non-negative"));
        }
        yarn.mscale_all_dim = all;
    }
    let temperature_key = l.key("attention.temperature_scale");
    let beta = float(l.g, &temperature_key)?.filter(|&b| b != 0.0);
    let scale = l.attention_scale()?;
    let mut program = l.pre_norm_decoder(&rope, |i| {
        let attention = AttentionBlock {
            biases: l.qkv_biases(i, false)?,
            output_bias: l.optional_vector(&format!("blk.{i}.attn_output.bias"), h)?,
            attend: Attend {
                scale,
                ..Attend::full(c)
            },
            ..l.attention(i)?
        };
        Ok((attention, l.swiglu(i)?))
    })?;
    if let Some(beta) = beta {
        if !beta.is_finite() {
            return Err(ModelError::NonFinite.into());
        }
        // The temperature rides on the queries' rotation, which must
        // span the whole head to scale all of it (llama.cpp asserts so).
        if c.rope_dim != c.head_dim {
            return Err(l.unsupported("attention temperature with partial rotary".into()));
        }
        // llama.cpp's `n_ctx_orig_yarn`: the original context where the
        // file gives one, else the context length.
        let original_key = l.key("rope.scaling.original_context_length");
        let floor = uint(l.g, &original_key)?
            .filter(|&n| n > 0)
            .unwrap_or(c.max_context);
        if floor == 0 {
            return Err(bad(&original_key, 0, "must be positive"));
        }
        let queries = Rope::new(&rope, c.max_context).with_temperature(Temperature { beta, floor });
        let table = program.ropes.len();
        program.ropes.push(queries);
        for op in program.layers.iter_mut().flatten() {
            if let Op::Rope {
                buf: Buf::Q,
                table: t,
                ..
            } = op
            {
                *t = table;
            }
        }
    }
    Ok(program)
}
