//! `gemma2` and `gemma3`: Gemma 2 and Gemma 3 (text). The embedding is
//! scaled by `√hidden`; each block is RMS-normed before and after (the
//! output norm before the residual add: `post_attention_norm`,
//! `post_ffw_norm`); the MLP gates with GELU's tanh approximation; NeoX
//! rotary. Local layers attend over a sliding window
//! (`attention.sliding_window`): Gemma 2's even layers; Gemma 3's five of
//! every six (`attention.sliding_window_pattern`, default 6), which rotate
//! with their own base (10,000, as llama.cpp sets it). Gemma 3 norms each
//! head of q and k; Gemma 2 soft-caps attention scores and logits.
//!
//! The query scale is `1/√key_length`, but for the 27B models
//! (62 and 46 layers) `1/√(hidden/heads)`: their `query_pre_attn_scalar`,
//! which the files do not carry (llama.cpp decides by size too). The norm
//! gains are used as stored: llama.cpp's converter adds Gemma's `1 + w`.

use super::super::load_error::LoadError;
use super::super::meta::{bad, float, uint};
use super::super::program::{
    attention_block, mlp_block, Attend, AttentionBlock, Gating, MlpBlock, Program,
};
use super::super::rope::{Rope, RopeMode, RopeSpec};
use super::Loader;

/// Which generation a file is.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Gemma {
    Two,
    Three,
}

/// The model of a `gemma2` or `gemma3` file.
pub(super) fn build(l: &Loader<'_>, gen: Gemma) -> Result<Program, LoadError> {
    let c = &l.config;
    let (h, d) = (c.hidden as usize, c.head_dim as usize);
    let window_key = l.key("attention.sliding_window");
    let window = uint(l.g, &window_key)?.unwrap_or(0);
    // Absent, the pattern is Gemma 2's even layers, Gemma 3's five of six.
    let local_layers = l.local_layers(match gen {
        Gemma::Two => 2,
        Gemma::Three => 6,
    })?;
    let softcap = |name: &str| -> Result<f32, LoadError> {
        let key = l.key(name);
        let cap = float(l.g, &key)?.unwrap_or(0.0);
        if cap.is_finite() && cap >= 0.0 {
            Ok(cap)
        } else {
            Err(bad(&key, cap, "a soft cap must be finite and non-negative"))
        }
    };
    let head_dim = match c.layers {
        62 | 46 => c.hidden / c.q_heads,
        _ => c.head_dim,
    };
    let full = Attend {
        scale: 1.0 / (head_dim as f32).sqrt(),
        window: 0,
        softcap: softcap("attn_logit_softcapping")?,
        sinks: None,
    };
    let local = Attend {
        window,
        ..full.clone()
    };
    let global = l.rope(RopeMode::Neox)?;
    let mut ropes = vec![Rope::new(&global, c.max_context)];
    if gen == Gemma::Three {
        let base = float(l.g, &l.key("rope.freq_base_swa"))?.unwrap_or(10_000.0);
        let spec = RopeSpec {
            base,
            factors: None,
            scale: 1.0,
            yarn: None,
            ..global
        };
        ropes.push(Rope::new(&spec, c.max_context));
    }
    let (embed, head) = l.embedding_and_head()?;
    let mut layers = Vec::with_capacity(c.layers as usize);
    for i in 0..c.layers {
        let is_local = window > 0 && local_layers[i as usize];
        let qk_norm = match gen {
            Gemma::Two => None,
            Gemma::Three => Some((
                l.layer_vector(i, "attn_q_norm.weight", d)?,
                l.layer_vector(i, "attn_k_norm.weight", d)?,
            )),
        };
        let attention = AttentionBlock {
            qk_norm,
            post_norm: Some(l.layer_vector(i, "post_attention_norm.weight", h)?),
            rope: Some(usize::from(is_local && gen == Gemma::Three)),
            attend: if is_local {
                local.clone()
            } else {
                full.clone()
            },
            ..l.attention(i)?
        };
        let mlp = MlpBlock {
            gating: Gating::GeluTanh,
            post_norm: Some(l.layer_vector(i, "post_ffw_norm.weight", h)?),
            ..l.swiglu(i)?
        };
        let mut ops = Vec::new();
        attention_block(
            &mut ops,
            c,
            l.layer_vector(i, "attn_norm.weight", h)?,
            attention,
        );
        mlp_block(&mut ops, l.layer_vector(i, "ffn_norm.weight", h)?, mlp);
        layers.push(ops);
    }
    let final_norm = l.vector("output_norm.weight", h)?;
    Ok(Program {
        embed_scale: (h as f32).sqrt(),
        head_softcap: softcap("final_logit_softcapping")?,
        ..Program::plain(embed, layers, final_norm, head, ropes)
    })
}
