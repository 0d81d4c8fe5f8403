//! `lfm2` and `lfm2moe`: Liquid AI's LFM2 (350M to 2.6B) and LFM2-MoE
//! (8B-A1B, 24B-A2B), hybrids of attention and short convolutions, after
//! llama.cpp's `models/lfm2.cpp`. Each layer is pre-norm: its operator
//! (`attn_norm`, then attention or a convolution) and its MLP (`ffn_norm`,
//! then SwiGLU or a mixture), each added to the residual stream.
//!
//! A layer whose `attention.head_count_kv` is 0 convolves: `in_proj` makes
//! `B`, `C` and `x`, and `out_proj` takes `C × conv(B × x)`, a causal
//! convolution of `shortconv.l_cache` taps along each channel
//! ([`Op::ShortConv`], whose state is a recurrent one). The others attend,
//! with each head of q and k RMS-normed before NeoX rotary. The final norm
//! is `token_embd_norm` (the converter's name); the head is tied.
//!
//! `lfm2moe`'s first `leading_dense_block_count` layers have the MLP, the
//! rest experts scored by sigmoids (`expert_gating_func`), chosen with a
//! selection bias (`exp_probs_b`), renormalized and scaled by
//! `expert_weights_scale`.

use super::super::config::ModelError;
use super::super::load_error::LoadError;
use super::super::meta::{bad, layer_uints, required_uint, uint};
use super::super::program::{
    attention_block, experts_block, mlp_block, pre_norm, AttentionBlock, Buf, Op, Program, Proj,
    Scoring, ShortConv,
};
use super::super::rope::{Rope, RopeMode};
use super::router::Router;
use super::Loader;

/// The most taps a short convolution may have (LFM2's have 3).
const MAX_TAPS: u32 = 64;

/// The model of an `lfm2` file, or (`mixture`) of an `lfm2moe` one.
pub(super) fn build(l: &Loader<'_>, mixture: bool) -> Result<Program, LoadError> {
    let c = &l.config;
    let (h, d) = (c.hidden as usize, c.head_dim as usize);
    let window_key = l.key("attention.sliding_window");
    if uint(l.g, &window_key)?.unwrap_or(0) > 0 {
        return Err(l.unsupported("sliding-window attention (attention.sliding_window)".into()));
    }
    let taps_key = l.key("shortconv.l_cache");
    let taps = required_uint(l.g, &taps_key)?;
    if !(2..=MAX_TAPS).contains(&taps) {
        return Err(bad(&taps_key, taps, "must be between 2 and 64"));
    }
    // One entry per block of the file, as the configuration read them.
    let kv_key = l.key("attention.head_count_kv");
    let blocks = required_uint(l.g, &l.key("block_count"))?;
    let kv_per_layer = layer_uints(l.g, &kv_key, blocks)?.unwrap_or_default();
    let convolves = |i: u32| kv_per_layer.get(i as usize) == Some(&0);
    let mixture = if mixture {
        // llama.cpp renormalizes LFM2-MoE's weights whatever the file says.
        let router = Router::read(l, Scoring::Sigmoid)?.normalized();
        let width = l.expert_width(0)?;
        let dense_lead = uint(l.g, &l.key("leading_dense_block_count"))?.unwrap_or(0);
        Some((router, width, dense_lead))
    } else {
        None
    };
    let rope = l.rope(RopeMode::Neox)?;
    let (embed, head) = l.embedding_and_head()?;
    let mut layers = Vec::with_capacity(c.layers as usize);
    let mut states = 0;
    for i in 0..c.layers {
        let mut ops = Vec::new();
        let norm = l.layer_vector(i, "attn_norm.weight", h)?;
        if convolves(i) {
            ops.push(pre_norm(norm));
            short_conv(l, i, taps, states, &mut ops)?;
            states += 1;
        } else {
            let attention = AttentionBlock {
                qk_norm: Some((
                    l.layer_vector(i, "attn_q_norm.weight", d)?,
                    l.layer_vector(i, "attn_k_norm.weight", d)?,
                )),
                ..l.attention(i)?
            };
            attention_block(&mut ops, c, norm, attention);
        }
        let norm = l.layer_vector(i, "ffn_norm.weight", h)?;
        match &mixture {
            Some((router, width, dense_lead)) if i >= *dense_lead => {
                let experts = router.biased_experts(l, i, *width)?;
                experts_block(&mut ops, norm, experts);
            }
            _ => mlp_block(&mut ops, norm, l.swiglu(i)?),
        }
        layers.push(ops);
    }
    let final_norm = l.vector("token_embd_norm.weight", h)?;
    let ropes = vec![Rope::new(&rope, c.max_context)];
    Ok(Program::plain(embed, layers, final_norm, head, ropes))
}

/// Layer `i`'s convolution of the normed rows in [`Buf::H`], state number
/// `state`, added to the residual stream.
fn short_conv(
    l: &Loader<'_>,
    i: u32,
    taps: u32,
    state: u32,
    ops: &mut Vec<Op>,
) -> Result<(), LoadError> {
    let h = l.config.hidden as usize;
    let in_proj = l.layer_matrix(i, "shortconv.in_proj", h, 3 * h)?;
    let name = format!("blk.{i}.shortconv.conv.weight");
    let weights = l.matrix_values(&name, taps as usize, h)?;
    if !weights.iter().all(|w| w.is_finite()) {
        return Err(ModelError::NonFinite.into());
    }
    let out_proj = l.layer_matrix(i, "shortconv.out_proj", h, h)?;
    ops.push(Op::Linear {
        src: Buf::H,
        projs: vec![Proj {
            w: in_proj,
            out: Buf::Conv,
            bias: None,
        }],
    });
    ops.push(Op::ShortConv(ShortConv {
        taps,
        weights,
        state,
    }));
    ops.push(Op::Linear {
        src: Buf::H,
        projs: vec![Proj {
            w: out_proj,
            out: Buf::Sum,
            bias: None,
        }],
    });
    ops.push(Op::Residual { src: Buf::Sum });
    Ok(())
}
