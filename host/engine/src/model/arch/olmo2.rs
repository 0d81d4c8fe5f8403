//! `olmo2`: AI2's OLMo 2 and OLMo 3. Norms after each block only: the
//! residual stream feeds the q/k/v and gate/up products directly, and each
//! block's output is RMS-normed (`post_attention_norm`, `post_ffw_norm`)
//! before it is added. The queries and keys are RMS-normed across all
//! their heads together (`attn_q_norm` of `heads × head_dim`,
//! `attn_k_norm` of the KV width) before NeoX rotary (llama.cpp's
//! `olmo2.cpp`). OLMo 3's files add `attention.sliding_window`: the layers
//! the pattern marks (three of every four by default) attend over the
//! window and rotate by the plain rotary of `rope.freq_base_swa` (the base
//! where absent), without the file's YaRN, which only the global layers
//! take (HF's `Olmo3` keeps a default rotary for its sliding layers).
//! EXAONE 4 builds on the same layer ([`post_norm_decoder`]), its q and k
//! normed per head.

use super::super::load_error::LoadError;
use super::super::meta::{float, uint};
use super::super::program::{Attend, Buf, Op, Program, Proj};
use super::super::rope::{Rope, RopeMode, RopeSpec};
use super::Loader;

/// The model of an `olmo2` file.
pub(super) fn build(l: &Loader<'_>) -> Result<Program, LoadError> {
    let c = &l.config;
    let global = l.rope(RopeMode::Neox)?;
    let full = Attend::full(c);
    let window = uint(l.g, &l.key("attention.sliding_window"))?.unwrap_or(0);
    if window == 0 {
        return post_norm_decoder(l, &[global], QkNorm::AcrossHeads, |_| {
            (full.clone(), Some(0))
        });
    }
    let local = l.local_layers(4)?;
    let base = float(l.g, &l.key("rope.freq_base_swa"))?.unwrap_or(global.base);
    let plain = RopeSpec {
        base,
        factors: None,
        scale: 1.0,
        attn_factor: 1.0,
        yarn: None,
        ..global.clone()
    };
    post_norm_decoder(l, &[global, plain], QkNorm::AcrossHeads, |i| {
        let is_local = local[i as usize];
        let attend = Attend {
            window: if is_local { window } else { 0 },
            ..full.clone()
        };
        (attend, Some(usize::from(is_local)))
    })
}

/// How a post-norm layer's queries and keys are RMS-normed.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum QkNorm {
    /// All of a row's heads together (OLMo 2).
    AcrossHeads,
    /// Each head on its own (EXAONE 4).
    PerHead,
}

/// A decoder of post-norm layers: the residual stream feeds the q/k/v and
/// gate/up products directly, q and k are RMS-normed as `qk` says, and
/// each block's output is RMS-normed (`post_attention_norm`,
/// `post_ffw_norm`) before it is added. `layer(i)` gives layer `i`'s
/// attention and which of the `ropes` rotates its queries and keys (`None`:
/// none does).
pub(super) fn post_norm_decoder(
    l: &Loader<'_>,
    ropes: &[RopeSpec],
    qk: QkNorm,
    layer: impl Fn(u32) -> (Attend, Option<usize>),
) -> Result<Program, LoadError> {
    let c = &l.config;
    let h = c.hidden as usize;
    let (embed, head) = l.embedding_and_head()?;
    let proj = |w, out| Proj { w, out, bias: None };
    let norm = |buf, gain, per_head| Op::Norm {
        src: buf,
        dst: buf,
        gain,
        per_head,
    };
    let (q_gain, k_gain, per_head) = match qk {
        QkNorm::AcrossHeads => (c.q_dim(), c.kv_dim(), None),
        QkNorm::PerHead => (c.head_dim as usize, c.head_dim as usize, Some(c.head_dim)),
    };
    let mut layers = Vec::with_capacity(c.layers as usize);
    for i in 0..c.layers {
        let a = l.attention(i)?;
        let m = l.swiglu(i)?;
        let (attend, rotary) = layer(i);
        let mut ops = vec![
            Op::Linear {
                src: Buf::X,
                projs: vec![proj(a.q, Buf::Q), proj(a.k, Buf::K), proj(a.v, Buf::V)],
            },
            norm(
                Buf::Q,
                l.layer_vector(i, "attn_q_norm.weight", q_gain)?,
                per_head,
            ),
            norm(
                Buf::K,
                l.layer_vector(i, "attn_k_norm.weight", k_gain)?,
                per_head,
            ),
        ];
        if let Some(table) = rotary {
            for (buf, heads) in [(Buf::Q, c.q_heads), (Buf::K, c.kv_heads)] {
                ops.push(Op::Rope {
                    buf,
                    heads,
                    table,
                    offset: 0,
                });
            }
        }
        ops.extend([
            Op::Attention(attend),
            Op::Linear {
                src: Buf::Attn,
                projs: vec![proj(a.output, Buf::Sum)],
            },
            norm(
                Buf::Sum,
                l.layer_vector(i, "post_attention_norm.weight", h)?,
                None,
            ),
            Op::Residual { src: Buf::Sum },
            Op::Linear {
                src: Buf::X,
                projs: vec![proj(m.gate, Buf::Gate), proj(m.up, Buf::Up)],
            },
            Op::Glu(m.gating),
            Op::Linear {
                src: Buf::Gate,
                projs: vec![proj(m.down, Buf::Sum)],
            },
            norm(
                Buf::Sum,
                l.layer_vector(i, "post_ffw_norm.weight", h)?,
                None,
            ),
            Op::Residual { src: Buf::Sum },
        ]);
        layers.push(ops);
    }
    let final_norm = l.vector("output_norm.weight", h)?;
    let ropes = ropes.iter().map(|r| Rope::new(r, c.max_context)).collect();
    Ok(Program::plain(embed, layers, final_norm, head, ropes))
}
