//! `olmo2`: AI2's OLMo 2. Norms after each block only: the residual
//! stream feeds the q/k/v and gate/up products directly, and each block's
//! output is RMS-normed (`post_attention_norm`, `post_ffw_norm`) before it
//! is added. The queries and keys are RMS-normed across all their heads
//! together (`attn_q_norm` of `heads × head_dim`, `attn_k_norm` of the KV
//! width) before NeoX rotary (llama.cpp's `olmo2.cpp`).

use super::super::load_error::LoadError;
use super::super::meta::uint;
use super::super::program::{Buf, Op, Program, Proj};
use super::super::rope::{Rope, RopeMode};
use super::Loader;

/// The model of an `olmo2` file.
pub(super) fn build(l: &Loader<'_>) -> Result<Program, LoadError> {
    let c = &l.config;
    let h = c.hidden as usize;
    // OLMo 3 is written as `olmo2` with sliding-window layers that rotate
    // without the file's YaRN: not built, so refused rather than run wrong.
    let window_key = l.key("attention.sliding_window");
    if uint(l.g, &window_key)?.is_some_and(|w| w > 0) {
        return Err(l.unsupported("sliding-window layers (OLMo 3)".into()));
    }
    let rope = l.rope(RopeMode::Neox)?;
    let (embed, head) = l.embedding_and_head()?;
    let proj = |w, out| Proj { w, out, bias: None };
    let norm = |buf, gain| Op::Norm {
        src: buf,
        dst: buf,
        gain,
        per_head: None,
    };
    let mut layers = Vec::with_capacity(c.layers as usize);
    for i in 0..c.layers {
        let a = l.attention(i)?;
        let m = l.swiglu(i)?;
        let ops = vec![
            Op::Linear {
                src: Buf::X,
                projs: vec![proj(a.q, Buf::Q), proj(a.k, Buf::K), proj(a.v, Buf::V)],
            },
            norm(Buf::Q, l.layer_vector(i, "attn_q_norm.weight", c.q_dim())?),
            norm(Buf::K, l.layer_vector(i, "attn_k_norm.weight", c.kv_dim())?),
            Op::Rope {
                buf: Buf::Q,
                heads: c.q_heads,
                table: 0,
                offset: 0,
            },
            Op::Rope {
                buf: Buf::K,
                heads: c.kv_heads,
                table: 0,
                offset: 0,
            },
            Op::Attention(a.attend),
            Op::Linear {
                src: Buf::Attn,
                projs: vec![proj(a.output, Buf::Sum)],
            },
            norm(
                Buf::Sum,
                l.layer_vector(i, "post_attention_norm.weight", h)?,
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
            norm(Buf::Sum, l.layer_vector(i, "post_ffw_norm.weight", h)?),
            Op::Residual { src: Buf::Sum },
        ];
        layers.push(ops);
    }
    let final_norm = l.vector("output_norm.weight", h)?;
    let ropes = vec![Rope::new(&rope, c.max_context)];
    Ok(Program::plain(embed, layers, final_norm, head, ropes))
}
