//! `olmo2`: AI2's OLMo 2. Norms after each block only: the residual
//! stream feeds the q/k/v and gate/up products directly, and each block's
//! output is RMS-normed (`post_attention_norm`, `post_ffw_norm`) before it
//! is added. The queries and keys are RMS-normed across all their heads
//! together (`attn_q_norm` of `heads × head_dim`, `attn_k_norm` of the KV
//! width) before NeoX rotary (llama.cpp's `olmo2.cpp`). EXAONE 4 builds
//! on the same layer ([`post_norm_decoder`]), its q and k normed per head.

use super::super::load_error::LoadError;
use super::super::meta::uint;
use super::super::program::{Attend, Buf, Op, Program, Proj};
use super::super::rope::{Rope, RopeMode, RopeSpec};
use super::Loader;

/// The model of an `olmo2` file.
pub(super) fn build(l: &Loader<'_>) -> Result<Program, LoadError> {
    // OLMo 3 is written as `olmo2` with sliding-window layers that rotate
    // without the file's YaRN: not built, so refused rather than run wrong.
    let window_key = l.key("attention.sliding_window");
    if uint(l.g, &window_key)?.is_some_and(|w| w > 0) {
        return Err(l.unsupported("sliding-window layers (OLMo 3)".into()));
    }
    let full = Attend::full(&l.config);
    post_norm_decoder(l, &l.rope(RopeMode::Neox)?, QkNorm::AcrossHeads, |_| {
        (full.clone(), true)
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
/// attention and whether it rotates its queries and keys.
pub(super) fn post_norm_decoder(
    l: &Loader<'_>,
    rope: &RopeSpec,
    qk: QkNorm,
    layer: impl Fn(u32) -> (Attend, bool),
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
        if rotary {
            for (buf, heads) in [(Buf::Q, c.q_heads), (Buf::K, c.kv_heads)] {
                ops.push(Op::Rope {
                    buf,
                    heads,
                    table: 0,
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
    let ropes = vec![Rope::new(rope, c.max_context)];
    Ok(Program::plain(embed, layers, final_norm, head, ropes))
}
