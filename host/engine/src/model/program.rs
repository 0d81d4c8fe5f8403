//! The architecture as data: a [`Program`] says what one step computes,
//! layer by layer, over a few named activation buffers, and every backend
//! runs it (the CPU interpreter in `cpu/`, the Vulkan lowering in
//! `device/program.rs`). An architecture file (`arch/*.rs`) builds it once
//! at load from the GGUF metadata and tensors; nothing else knows which
//! architecture a model is.
//!
//! A layer is a list of [`Op`]s over the buffers of [`Buf`]: norms, linear
//! products (with biases, over views of fused tensors), rotary positions,
//! paged attention (with an optional sliding window, its own scale and a
//! soft cap), gated MLP activations, a mixture of experts and residual
//! adds. The helpers at the bottom ([`attention_block`], [`mlp_block`],
//! [`experts_block`]) are the decoder block every architecture here shares
//! (pre-norm, with Gemma's optional norms after each block), so it is
//! written once.

use super::config::ModelConfig;
pub(crate) use super::experts::{
    Expert, ExpertBiases, ExpertGroups, Experts, Scoring, SharedExpert,
};
pub(crate) use super::recurrent::{DeltaLayout, DeltaNet, ShortConv, StateSpace};
use super::rope::Rope;
use super::tensors::Matrix;

/// An activation buffer: `rows × width` f32 values, the width from the
/// model's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Buf {
    /// The residual stream, `hidden` wide.
    X,
    /// Normed rows, `hidden` wide.
    H,
    /// Queries, `q_dim` wide.
    Q,
    /// Keys, `kv_dim` wide.
    K,
    /// Values, `kv_dim` wide.
    V,
    /// Attention output, `q_dim` wide.
    Attn,
    /// MLP gate, `ffn` wide.
    Gate,
    /// MLP up projection, `ffn` wide.
    Up,
    /// A product before it joins the residual stream, `hidden` wide.
    Sum,
    /// Latent attention's low-rank query rows, [`Latent::q_rank`] wide
    /// (DeepSeek's `q_lora_rank`).
    QLatent,
    /// Latent attention's queries as the file projects them, before the
    /// key part of each head is absorbed: `q_heads ×` [`Latent::q_head`].
    QHeads,
    /// Latent attention's values, each head's taken out of the latent:
    /// `q_heads ×` [`Latent::v_head`].
    VHeads,
    /// A short convolution's input projection: its gate `B`, its output
    /// gate `C` and its input `x`, each `hidden` wide, side by side; or a
    /// gated delta net's queries, keys and values before their
    /// convolution; or a Mamba-2 mixer's whole input product
    /// ([`StateSpace::input_width`]) (0 wide in a program without any).
    Conv,
    /// Gated attention's queries, each head's `head_dim` followed by its
    /// output gate's (Qwen3.5's): `2 × q_dim` wide where a layer gates.
    QGate,
    /// A gated delta net's output gate `z`, then its gated output:
    /// [`DeltaNet::value_width`] wide; a Mamba-2 mixer's gated output,
    /// [`StateSpace::inner`] wide.
    OutGate,
    /// A gated delta net's write strength per value head, before its
    /// sigmoid.
    Beta,
    /// A gated delta net's decay per value head, before its softplus.
    Alpha,
}

impl Buf {
    /// Every buffer, in declaration order (so `b as usize` is its place).
    pub(crate) const ALL: [Buf; 17] = [
        Buf::X,
        Buf::H,
        Buf::Q,
        Buf::K,
        Buf::V,
        Buf::Attn,
        Buf::Gate,
        Buf::Up,
        Buf::Sum,
        Buf::QLatent,
        Buf::QHeads,
        Buf::VHeads,
        Buf::Conv,
        Buf::QGate,
        Buf::OutGate,
        Buf::Beta,
        Buf::Alpha,
    ];

    /// Values per row of a model of shape `c` whose program has `latent`
    /// attention (0 for a latent buffer of a program without).
    pub(crate) fn width(self, c: &ModelConfig, latent: Option<&Latent>) -> usize {
        let heads = c.q_heads as usize;
        match self {
            Buf::X | Buf::H | Buf::Sum => c.hidden as usize,
            Buf::Q | Buf::Attn => c.q_dim(),
            Buf::K | Buf::V => c.kv_dim(),
            Buf::Gate | Buf::Up => c.ffn as usize,
            Buf::QLatent => latent.map_or(0, |l| l.q_rank as usize),
            Buf::QHeads => latent.map_or(0, |l| heads * l.q_head as usize),
            Buf::VHeads => latent.map_or(0, |l| heads * l.v_head as usize),
            // Sized by the program, which knows its recurrent layers.
            Buf::Conv | Buf::QGate | Buf::OutGate | Buf::Beta | Buf::Alpha => 0,
        }
    }
}

/// The widths of multi-head latent attention (DeepSeek-V2 and V3, Kimi
/// K2), which caches one latent row per token that every head reads
/// instead of keys and values per head: the model's `head_dim` is the
/// latent's width plus the rotary part (512 + 64), `kv_heads` is 1, and
/// each head's queries take the latent's side by an absorbed product.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Latent {
    /// The low-rank query's width; 0 when queries are projected directly
    /// (DeepSeek-V2-Lite).
    pub q_rank: u32,
    /// The cached latent's width (`kv_lora_rank`): the leading part of each
    /// cached row, which the rotary part follows.
    pub kv_rank: u32,
    /// A query head as the file projects it: its key part then its rotary
    /// part (`key_length_mla`, 128 + 64).
    pub q_head: u32,
    /// A head's value out of the latent (`value_length_mla`, 128).
    pub v_head: u32,
}

/// The same run of values in every head of a buffer's rows: `width`
/// values from `offset` of each `stride`-wide head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    pub buf: Buf,
    pub stride: u32,
    pub offset: u32,
    pub width: u32,
}

/// One product of a [`Op::Linear`]: `out = src · wᵀ (+ bias)`.
#[derive(Debug, Clone)]
pub(crate) struct Proj {
    pub w: Matrix,
    pub out: Buf,
    pub bias: Option<Vec<f32>>,
}

/// The MLP's gating activation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gating {
    /// `silu(gate) × up` (SwiGLU).
    Silu,
    /// `relu(x)²` of the up product alone, which [`Buf::Gate`] holds
    /// (Nemotron-H's ungated MLP and experts: no gate matrix, [`Buf::Up`]
    /// unread).
    ReluSquared,
    /// `gelu(gate) × up` with GELU's tanh approximation (GeGLU; Gemma).
    GeluTanh,
    /// gpt-oss's clamped SwiGLU: `g = min(gate, 7)`, `u = clamp(up, −7, 7)`,
    /// `g × sigmoid(1.702 g) × (u + 1)` (the constants llama.cpp and the
    /// reference implementation fix).
    SwigluOai,
}

impl Gating {
    /// gpt-oss's clamp of the gate and up values.
    pub(crate) const OAI_LIMIT: f32 = 7.0;
    /// gpt-oss's sigmoid slope.
    pub(crate) const OAI_ALPHA: f32 = 1.702;
}

/// How a program's norms normalize a row before its gains scale it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NormKind {
    /// `x / sqrt(mean(x²) + eps)` (RMSNorm; every architecture but
    /// Cohere's).
    Rms,
    /// `(x − mean(x)) / sqrt(var(x) + eps)`: LayerNorm without a bias
    /// (Cohere's Command-R and Command R7B).
    Layer,
}

/// How one layer's attention reads the cache.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Attend {
    /// Softmax scale of the scores.
    pub scale: f32,
    /// Sliding window in positions; 0 for the whole context.
    pub window: u32,
    /// Soft cap of the scaled scores; 0 for none.
    pub softcap: f32,
    /// A learned logit per query head that each head's softmax also counts
    /// (gpt-oss's sinks); `None` for none.
    pub sinks: Option<Vec<f32>>,
}

impl Attend {
    /// Attention over the whole context at `1 / sqrt(head_dim)`, uncapped.
    pub(crate) fn full(c: &ModelConfig) -> Self {
        Self {
            scale: 1.0 / (c.head_dim as f32).sqrt(),
            window: 0,
            softcap: 0.0,
            sinks: None,
        }
    }
}

/// One operation of a layer.
#[derive(Debug, Clone)]
pub(crate) enum Op {
    /// `dst = norm(src) × gain` (the program's [`NormKind`]), over whole
    /// rows, or with `per_head` over each head of that many values
    /// (QK-norm; `gain` is one head, or one head's after another: each
    /// head its own).
    Norm {
        src: Buf,
        dst: Buf,
        gain: Vec<f32>,
        per_head: Option<u32>,
    },
    /// Products that read the same rows, run together.
    Linear { src: Buf, projs: Vec<Proj> },
    /// Rotary positions on each of `heads` heads of `buf` (the rotary
    /// dimensions from `offset` of each `head_dim`-wide head: 0 but for
    /// latent attention, whose rotary part follows the latent), from the
    /// program's rotary tables number `table`.
    Rope {
        buf: Buf,
        heads: u32,
        table: usize,
        offset: u32,
    },
    /// Keys and values into the paged cache, then attention of the queries
    /// over it into [`Buf::Attn`].
    Attention(Attend),
    /// `Gate = act(Gate) × Up`.
    Glu(Gating),
    /// A mixture of experts from [`Buf::H`] into [`Buf::Sum`].
    Experts(Box<Experts>),
    /// `X += src`.
    Residual { src: Buf },
    /// Each span of `span` RMS-normed in place by `gain` (`span.width`
    /// values): latent attention's latent, before the rotary part.
    NormSpan { span: Span, gain: Vec<f32> },
    /// Each head's span of `from` copied to the same head's span of `to`.
    Copy { from: Span, to: Span },
    /// [`Buf::H`] = `C × conv(B × x)` of the `B`, `C` and `x` of each row
    /// of [`Buf::Conv`]: a causal convolution over each channel, along the
    /// sequence, from the recurrent state of its last tokens (LFM2's).
    ShortConv(ShortConv),
    /// A gated delta net (Qwen3.5's linear attention) over the rows of
    /// [`Buf::Conv`], [`Buf::Beta`] and [`Buf::Alpha`], its gated output
    /// into [`Buf::OutGate`] in place of the gate, from and into the
    /// recurrent state of its convolution and of each value head.
    DeltaNet(Box<DeltaNet>),
    /// A Mamba-2 mixer's state space over the rows of [`Buf::Conv`] (its
    /// input product), its gated, normed output into [`Buf::OutGate`],
    /// from and into the recurrent state of its convolution and of each
    /// head.
    StateSpace(Box<StateSpace>),
    /// Each span of `to` times the sigmoid of the same head's span of
    /// `gate` (gated attention's output gate).
    SigmoidGate { to: Span, gate: Span },
    /// Head `h`'s span of `to` = `heads[h] · (head h's span of from)`: a
    /// product per head, each of its own matrix (latent attention's
    /// absorbed key products and its values out of the latent).
    HeadLinear {
        from: Span,
        to: Span,
        heads: Vec<Matrix>,
    },
}

/// A whole model as data: embedding, layers, final norm, head.
#[derive(Debug, Clone)]
pub(crate) struct Program {
    /// Token embedding, `vocab` rows of `hidden`.
    pub embed: Matrix,
    /// Factor on the embedded rows (Gemma: `sqrt(hidden)`; 1 elsewhere).
    pub embed_scale: f32,
    /// Each layer's operations.
    pub layers: Vec<Vec<Op>>,
    /// Final norm gain.
    pub final_norm: Vec<f32>,
    /// How every [`Op::Norm`] and the final norm normalize their rows.
    pub norm: NormKind,
    /// Output head, `vocab` rows of `hidden` (the embedding when tied).
    pub head: Matrix,
    /// Soft cap of the logits, `cap × tanh(logit / cap)`; 0 for none.
    pub head_softcap: f32,
    /// Factor on the logits (Cohere's `logit_scale`, the inverse of
    /// Granite's; 1 elsewhere).
    pub logit_factor: f32,
    /// Factor on each block's output before it joins the residual stream
    /// (Granite's `residual_scale`; 1 elsewhere).
    pub residual_scale: f32,
    /// The rotary tables the [`Op::Rope`]s read (Gemma 3's local layers
    /// have their own base: two tables).
    pub ropes: Vec<Rope>,
    /// The widths of latent attention, for a program that has it.
    pub latent: Option<Latent>,
}

impl Program {
    /// A program with no factors, caps or latent attention: what most
    /// architectures build, the others changing a field or two of it.
    pub(crate) fn plain(
        embed: Matrix,
        layers: Vec<Vec<Op>>,
        final_norm: Vec<f32>,
        head: Matrix,
        ropes: Vec<Rope>,
    ) -> Self {
        Self {
            embed,
            embed_scale: 1.0,
            layers,
            final_norm,
            norm: NormKind::Rms,
            head,
            head_softcap: 0.0,
            logit_factor: 1.0,
            residual_scale: 1.0,
            ropes,
            latent: None,
        }
    }

    /// Every matrix the program reads, each once (a tied head is the
    /// embedding; views of one fused tensor count as their rows).
    pub(crate) fn matrices(&self) -> impl Iterator<Item = &Matrix> {
        let layers = self.layers.iter().flatten().flat_map(|op| match op {
            Op::Linear { projs, .. } => projs.iter().map(|p| &p.w).collect::<Vec<_>>(),
            Op::HeadLinear { heads, .. } => heads.iter().collect(),
            Op::Experts(e) => e.matrices().collect(),
            _ => Vec::new(),
        });
        let head = (!self.is_tied()).then_some(&self.head);
        std::iter::once(&self.embed).chain(layers).chain(head)
    }

    /// Every f32 vector the program holds (norm gains, biases).
    pub(crate) fn vectors(&self) -> impl Iterator<Item = &[f32]> {
        let layers = self.layers.iter().flatten().flat_map(|op| match op {
            Op::Norm { gain, .. } | Op::NormSpan { gain, .. } => vec![gain.as_slice()],
            Op::ShortConv(conv) => vec![conv.weights.as_slice()],
            Op::DeltaNet(d) => d.vectors().collect(),
            Op::StateSpace(s) => s.vectors().collect(),
            Op::Linear { projs, .. } => projs.iter().filter_map(|p| p.bias.as_deref()).collect(),
            Op::Attention(a) => a.sinks.as_deref().into_iter().collect(),
            Op::Experts(e) => {
                let shared = e.shared.iter().filter_map(|s| s.gate.as_deref());
                let biases = e.experts.iter().filter_map(|x| x.biases.as_deref());
                let biases = biases.flat_map(|b| [&b.gate[..], &b.up[..], &b.down[..]]);
                let router = e.router_bias.iter().chain(&e.selection_bias);
                shared
                    .chain(biases)
                    .chain(router.map(Vec::as_slice))
                    .collect()
            }
            _ => Vec::new(),
        });
        layers.chain(std::iter::once(self.final_norm.as_slice()))
    }

    /// Scales the head's logits by the logit factor and soft-caps them in
    /// place where the program says (Granite, Cohere; `cap × tanh(logit /
    /// cap)`, Gemma 2). Every backend applies it to the logits it hands
    /// back: it keeps their order, so an argmax needs none.
    pub(crate) fn cap_logits(&self, logits: &mut [f32]) {
        if self.logit_factor != 1.0 {
            let factor = self.logit_factor;
            logits.iter_mut().for_each(|v| *v *= factor);
        }
        let cap = self.head_softcap;
        if cap > 0.0 {
            for v in logits {
                *v = cap * (*v / cap).tanh();
            }
        }
    }

    /// The mixtures of experts among the layers' ops.
    pub(crate) fn experts(&self) -> impl Iterator<Item = &Experts> {
        self.layers.iter().flatten().filter_map(|op| match op {
            Op::Experts(e) => Some(&**e),
            _ => None,
        })
    }

    /// Bytes of expert weights a one-row step does not read: the row goes
    /// through `used` of an op's experts, so the rest of them stay unread
    /// (a batch reads more of them).
    pub(crate) fn unread_expert_bytes(&self) -> u64 {
        self.unused_share(Matrix::byte_len)
    }

    /// Expert weights a row does not go through (as
    /// [`unread_expert_bytes`](Self::unread_expert_bytes), in elements).
    pub(crate) fn unused_expert_elems(&self) -> u64 {
        self.unused_share(Matrix::elems)
    }

    /// `size` summed over every mixture's routed experts, less the share
    /// of them a row takes (a shared expert is always taken).
    fn unused_share(&self, size: fn(&Matrix) -> u64) -> u64 {
        self.experts()
            .map(|e| {
                let all: u64 = e.experts.iter().flat_map(Expert::matrices).map(size).sum();
                let n = e.experts.len().max(1) as u128;
                let used = u128::from(e.used).min(n);
                (u128::from(all) * (n - used) / n) as u64
            })
            .sum()
    }

    /// Whether any layer's attention has sinks.
    pub(crate) fn has_sinks(&self) -> bool {
        self.layers
            .iter()
            .flatten()
            .any(|op| matches!(op, Op::Attention(a) if a.sinks.is_some()))
    }

    /// Layers whose keys and values the cache holds: those that attend, in
    /// order (a hybrid's recurrent layers hold none). The attention of the
    /// `n`th of them reads and writes cache layer `n`.
    pub(crate) fn cache_layers(&self) -> u32 {
        self.layers
            .iter()
            .filter(|ops| ops.iter().any(|op| matches!(op, Op::Attention(_))))
            .count() as u32
    }

    /// Whether any layer carries recurrent state (a short convolution, a
    /// delta net or a state space), so its steps need each sequence's
    /// [`StateRow`](super::recurrent::StateRow).
    pub(crate) fn is_recurrent(&self) -> bool {
        self.layers
            .iter()
            .flatten()
            .any(|op| matches!(op, Op::ShortConv(_) | Op::DeltaNet(_) | Op::StateSpace(_)))
    }

    /// Bytes of recurrent state one sequence holds: every short
    /// convolution's, delta net's and state space's (0 in a program
    /// without one).
    pub(crate) fn state_bytes(&self) -> u64 {
        let values: usize = self
            .layers
            .iter()
            .flatten()
            .map(|op| match op {
                Op::ShortConv(conv) => {
                    let taps = conv.taps.max(1) as usize;
                    (taps - 1) * (conv.weights.len() / taps)
                }
                Op::DeltaNet(d) => d.state_len(),
                Op::StateSpace(s) => s.state_len(),
                _ => 0,
            })
            .sum();
        values as u64 * 4
    }

    /// Values per row of buffer `b` for a model of shape `c`: the
    /// recurrent and gating buffers as wide as the widest op that reads
    /// them needs (0 in a program without one).
    pub(crate) fn width(&self, b: Buf, c: &ModelConfig) -> usize {
        let widest =
            |need: &dyn Fn(&Op) -> usize| self.layers.iter().flatten().map(need).max().unwrap_or(0);
        match b {
            Buf::Conv => widest(&|op| match op {
                Op::ShortConv(_) => 3 * c.hidden as usize,
                Op::DeltaNet(d) => d.conv_width(),
                Op::StateSpace(s) => s.input_width(),
                _ => 0,
            }),
            Buf::OutGate | Buf::Beta | Buf::Alpha => widest(&|op| match op {
                Op::DeltaNet(d) if b == Buf::OutGate => d.value_width(),
                Op::StateSpace(s) if b == Buf::OutGate => s.inner(),
                Op::DeltaNet(d) if b == Buf::Beta => d.gate_widths().0,
                Op::DeltaNet(d) => d.gate_widths().1,
                _ => 0,
            }),
            Buf::QGate => widest(&|op| match op {
                Op::SigmoidGate { gate, .. } if gate.buf == Buf::QGate => 2 * c.q_dim(),
                _ => 0,
            }),
            _ => b.width(c, self.latent.as_ref()),
        }
    }

    /// Whether the output head is the embedding.
    pub(crate) fn is_tied(&self) -> bool {
        self.head.same_as(&self.embed)
    }
}

/// The attention half of a pre-norm decoder layer, from the normed rows in
/// [`Buf::H`]: q/k/v products (with their biases), optional per-head norms
/// of q and k, rotary, attention, the output product, the residual add.
pub(crate) struct AttentionBlock {
    pub q: Matrix,
    pub k: Matrix,
    pub v: Matrix,
    /// Query, key and value biases (qwen2).
    pub biases: [Option<Vec<f32>>; 3],
    /// Norm gains of q and k: `head_dim` long, each head normed on
    /// its own (qwen3, gemma3); else as wide as all of q's or k's heads,
    /// normed together (olmoe).
    pub qk_norm: Option<(Vec<f32>, Vec<f32>)>,
    /// Whether q and k are normed after their rotary (Hunyuan's) rather
    /// than before it.
    pub qk_norm_after_rope: bool,
    /// Whether gains as wide as all the heads still norm each head on its
    /// own, each by its own `head_dim` of them (Command R+'s) rather than
    /// all of them together.
    pub qk_norm_per_head: bool,
    pub output: Matrix,
    /// The output product's bias (gpt-oss).
    pub output_bias: Option<Vec<f32>>,
    /// RMS norm gain of the output before the residual add (gemma3).
    pub post_norm: Option<Vec<f32>>,
    /// Which of the program's rotary tables the layer reads; `None`: the
    /// layer has no rotary positions (SmolLM3's every fourth).
    pub rope: Option<usize>,
    /// How the layer attends.
    pub attend: Attend,
}

/// The norm of each row of the residual stream by `gain` into [`Buf::H`],
/// which opens every pre-norm block.
pub(crate) fn pre_norm(gain: Vec<f32>) -> Op {
    Op::Norm {
        src: Buf::X,
        dst: Buf::H,
        gain,
        per_head: None,
    }
}

/// Pushes `norm` then the [`AttentionBlock`] onto `ops`.
pub(crate) fn attention_block(
    ops: &mut Vec<Op>,
    c: &ModelConfig,
    norm: Vec<f32>,
    a: AttentionBlock,
) {
    ops.push(pre_norm(norm));
    let [bq, bk, bv] = a.biases;
    ops.push(Op::Linear {
        src: Buf::H,
        projs: vec![
            Proj {
                w: a.q,
                out: Buf::Q,
                bias: bq,
            },
            Proj {
                w: a.k,
                out: Buf::K,
                bias: bk,
            },
            Proj {
                w: a.v,
                out: Buf::V,
                bias: bv,
            },
        ],
    });
    let norms: Vec<Op> = a
        .qk_norm
        .into_iter()
        .flat_map(|(qn, kn)| {
            [(Buf::Q, qn), (Buf::K, kn)].map(|(buf, gain)| {
                let per_head =
                    (a.qk_norm_per_head || gain.len() == c.head_dim as usize).then_some(c.head_dim);
                Op::Norm {
                    src: buf,
                    dst: buf,
                    gain,
                    per_head,
                }
            })
        })
        .collect();
    let ropes: Vec<Op> = a
        .rope
        .into_iter()
        .flat_map(|table| {
            [(Buf::Q, c.q_heads), (Buf::K, c.kv_heads)].map(|(buf, heads)| Op::Rope {
                buf,
                heads,
                table,
                offset: 0,
            })
        })
        .collect();
    if a.qk_norm_after_rope {
        ops.extend(ropes.into_iter().chain(norms));
    } else {
        ops.extend(norms.into_iter().chain(ropes));
    }
    ops.push(Op::Attention(a.attend));
    ops.push(Op::Linear {
        src: Buf::Attn,
        projs: vec![Proj {
            w: a.output,
            out: Buf::Sum,
            bias: a.output_bias,
        }],
    });
    residual(ops, a.post_norm);
}

/// `X += Sum`, the sum RMS-normed first where `post_norm` is given.
pub(crate) fn residual(ops: &mut Vec<Op>, post_norm: Option<Vec<f32>>) {
    if let Some(gain) = post_norm {
        ops.push(Op::Norm {
            src: Buf::Sum,
            dst: Buf::Sum,
            gain,
            per_head: None,
        });
    }
    ops.push(Op::Residual { src: Buf::Sum });
}

/// The MLP half of a pre-norm decoder layer, from the normed rows in
/// [`Buf::H`]: gate and up products, gating, the down product.
pub(crate) struct MlpBlock {
    pub gate: Matrix,
    pub up: Matrix,
    pub down: Matrix,
    pub gating: Gating,
    /// RMS norm gain of the output before the residual add (gemma3).
    pub post_norm: Option<Vec<f32>>,
}

/// Pushes `norm`, the [`MlpBlock`] and its residual add onto `ops`.
pub(crate) fn mlp_block(ops: &mut Vec<Op>, norm: Vec<f32>, m: MlpBlock) {
    ops.push(pre_norm(norm));
    mlp(ops, m);
}

/// Pushes the [`MlpBlock`] of the rows [`Buf::H`] holds and its residual
/// add onto `ops`, with no norm before it: after an [`attention_block`],
/// which leaves `H` as its norm wrote it, a parallel layer's MLP (Cohere's:
/// both blocks of one normed row, added together).
pub(crate) fn mlp(ops: &mut Vec<Op>, m: MlpBlock) {
    ops.push(Op::Linear {
        src: Buf::H,
        projs: vec![
            Proj {
                w: m.gate,
                out: Buf::Gate,
                bias: None,
            },
            Proj {
                w: m.up,
                out: Buf::Up,
                bias: None,
            },
        ],
    });
    ops.push(Op::Glu(m.gating));
    ops.push(Op::Linear {
        src: Buf::Gate,
        projs: vec![Proj {
            w: m.down,
            out: Buf::Sum,
            bias: None,
        }],
    });
    residual(ops, m.post_norm);
}

/// Pushes `norm`, the mixture of experts and its residual add onto `ops`.
pub(crate) fn experts_block(ops: &mut Vec<Op>, norm: Vec<f32>, experts: Experts) {
    ops.push(pre_norm(norm));
    ops.push(Op::Experts(Box::new(experts)));
    residual(ops, None);
}
