//! `pagoda synth`: writes a GGUF file with the shapes of a real model and
//! random weights in a chosen block type, so speed can be measured on a
//! machine without downloading the model (an 8B-shaped Q4_0 file is written
//! in seconds). The weights are random, so the text is meaningless; the
//! bytes each step reads are the real model's.
//!
//! Each file is a `llama` model (Mixtral's mixture included; a `qwen3moe`
//! one for Qwen3's, a `gpt-oss` one for gpt-oss, `glm4moe` and `deepseek2`
//! ones for GLM-4.5's and DeepSeek's, an `lfm2` one for LFM2's hybrid of
//! attention and short convolutions, a `qwen35` one for Qwen3.5's of gated
//! attention and gated delta nets) with a byte-level `gpt2` tokenizer (one token per byte,
//! then filler tokens up to the vocabulary size), so `pagoda run`,
//! `bench --model` and `serve --model` take it like any other. `--layers`
//! keeps the first layers of a shape only: a file that fits a small
//! machine, each step's work per layer the real model's.

mod blocks;
mod hybrid;
mod latent;
mod writer;

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::time::Instant;

use clap::{Args, ValueEnum};
use pagoda_core::QuantKind;

use self::writer::{GgufWriter, TensorSpec};

/// `pagoda synth` options.
#[derive(Args)]
pub(crate) struct SynthArgs {
    /// Whose shapes to copy.
    #[arg(long, value_enum, default_value = "tiny")]
    pub shape: Shape,
    /// Block type of the weight matrices (norms stay f32), or llama.cpp's
    /// mix for a `Q4_K_M` / `Q5_K_M` file (Q6_K for the output, the
    /// embedding when tied, and for `attn_v` and `ffn_down` on the layers
    /// llama.cpp's quantizer picks, the base K-quant elsewhere) or a
    /// `Q3_K_M` file (Q6_K output, Q5_K or Q4_K `attn_v`, `ffn_down` and
    /// `attn_output`, Q3_K elsewhere). A super-block type on rows that are
    /// not a multiple of 256 falls back as llama.cpp does: Q2_K and Q3_K to
    /// Q4_0, Q4_K to Q5_0, Q5_K to Q5_1, Q6_K to Q8_0, IQ4_XS to IQ4_NL (an
    /// output to Q8_0).
    #[arg(long = "type", value_enum, default_value = "q4_0", ignore_case = true)]
    pub weight_type: WeightType,
    /// Where to write the file.
    #[arg(long, short)]
    pub out: PathBuf,
    /// Seed of the random weights.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Keep only the first N of the shape's layers (at least 1, at most
    /// the shape's).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub layers: Option<u32>,
}

/// Model shapes `pagoda synth` writes.
#[derive(Clone, Copy, PartialEq, Eq, Debug, ValueEnum)]
pub(crate) enum Shape {
    /// Two small layers, for tests (hidden 256, vocabulary 512).
    Tiny,
    /// `tiny` with a mixture of eight experts of 128 (two a token) in
    /// place of each MLP, as a `qwen3moe` file, for tests.
    #[value(name = "tiny-moe")]
    TinyMoe,
    /// SmolLM2-135M: 30 layers, hidden 576, 9 heads over 3 KV heads, tied.
    #[value(name = "smollm2-135m")]
    Smollm2_135m,
    /// Llama 3.2 1B: 16 layers, hidden 2048, 32 heads over 8, tied.
    #[value(name = "llama3.2-1b")]
    Llama3_2_1b,
    /// Llama 3 8B: 32 layers, hidden 4096, 32 heads over 8, FFN 14336.
    #[value(name = "llama3-8b")]
    Llama3_8b,
    /// Qwen3-30B-A3B (`qwen3moe`): 48 layers, hidden 2048, 32 heads of 128
    /// over 4, QK-norm, 128 experts of 768 of which 8 are used.
    #[value(name = "qwen3-30b-a3b")]
    Qwen3_30bA3b,
    /// Mixtral 8x7B (`llama` with experts): 32 layers, hidden 4096, 32
    /// heads over 8, 8 experts of 14336 of which 2 are used.
    #[value(name = "mixtral-8x7b")]
    Mixtral8x7b,
    /// gpt-oss-20b (`gpt-oss`): 24 layers, hidden 2880, 64 heads of 64
    /// over 8 (sinks; a 128-token window on even layers), 32 experts of
    /// 2880 of which 4 are used, biases everywhere; with `--type
    /// mxfp4_moe` as OpenAI ships it.
    #[value(name = "gpt-oss-20b")]
    GptOss20b,
    /// GLM-4.5-Air (`glm4moe`): 46 layers, hidden 4096, 96 heads of 128
    /// over 8 with q/k/v biases, rotary on half of each head; layer 0 a
    /// dense MLP of 10944, the others 128 experts of 1408 of which 8 are
    /// used (sigmoid-scored, with `exp_probs_b`) and one shared expert.
    #[value(name = "glm-4.5-air")]
    Glm45Air,
    /// DeepSeek-V2-Lite (`deepseek2`): 27 layers, hidden 2048, 16 heads of
    /// latent attention (a 512-wide latent and 64 rotary dims cached, key
    /// parts of 128, values of 128), YaRN; layer 0 a dense MLP of 10944,
    /// the others 64 experts of 1408 of which 6 are used (softmax) and two
    /// shared experts.
    #[value(name = "deepseek-v2-lite")]
    DeepseekV2Lite,
    /// LFM2-1.2B (`lfm2`): 16 layers, hidden 2048; layers 2, 5, 8, 10, 12
    /// and 14 attend (32 heads over 8, QK-norm), the others run a short
    /// convolution of 3 taps; SwiGLU of 8192, tied.
    #[value(name = "lfm2-1.2b")]
    Lfm2_1_2b,
    /// Qwen3.5-2B (`qwen35`): 24 layers, hidden 2048; every fourth layer
    /// gated attention (8 heads of 256 over 2, rotary on 64 dims), the
    /// others gated delta nets (16 key and 16 value heads of 128, 4
    /// taps); SwiGLU of 6144, a tied vocabulary of 248,320.
    #[value(name = "qwen3.5-2b")]
    Qwen35_2b,
    /// Qwen3.5-9B (`qwen35`): 32 layers, hidden 4096; every fourth layer
    /// gated attention (16 heads of 256 over 4), the others delta nets (16
    /// key heads and 32 value heads of 128); SwiGLU of 12,288, untied.
    #[value(name = "qwen3.5-9b")]
    Qwen35_9b,
}

/// Weight block types `pagoda synth` writes.
#[derive(Clone, Copy, PartialEq, Eq, Debug, ValueEnum)]
#[allow(non_camel_case_types)]
pub(crate) enum WeightType {
    F32,
    F16,
    #[value(name = "q4_0", alias = "Q4_0")]
    Q4_0,
    #[value(name = "q4_1", alias = "Q4_1")]
    Q4_1,
    #[value(name = "q5_0", alias = "Q5_0")]
    Q5_0,
    #[value(name = "q5_1", alias = "Q5_1")]
    Q5_1,
    #[value(name = "q8_0", alias = "Q8_0")]
    Q8_0,
    #[value(name = "q4_k", alias = "Q4_K")]
    Q4_K,
    #[value(name = "q5_k", alias = "Q5_K")]
    Q5_K,
    #[value(name = "q6_k", alias = "Q6_K")]
    Q6_K,
    #[value(name = "q2_k", alias = "Q2_K")]
    Q2_K,
    #[value(name = "q3_k", alias = "Q3_K")]
    Q3_K,
    #[value(name = "iq4_nl", alias = "IQ4_NL")]
    IQ4_NL,
    #[value(name = "iq4_xs", alias = "IQ4_XS")]
    IQ4_XS,
    #[value(name = "q3_k_m", alias = "Q3_K_M")]
    Q3_K_M,
    #[value(name = "q4_k_m", alias = "Q4_K_M")]
    Q4_K_M,
    /// llama.cpp's `MXFP4_MOE`: experts MXFP4, every other matrix Q8_0.
    #[value(name = "mxfp4_moe", alias = "MXFP4_MOE")]
    MXFP4_MOE,
    #[value(name = "q5_k_m", alias = "Q5_K_M")]
    Q5_K_M,
}

/// What a weight matrix is in the model: llama.cpp's mixes pick its block
/// type by it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Role {
    TokenEmbd,
    Output,
    AttnQ,
    AttnK,
    AttnV,
    AttnOutput,
    FfnGate,
    FfnUp,
    FfnDown,
}

impl WeightType {
    /// The name `--type` takes.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Q3_K_M => "q3_k_m",
            Self::Q4_K_M => "q4_k_m",
            Self::Q5_K_M => "q5_k_m",
            Self::MXFP4_MOE => "mxfp4_moe",
            other => other.kind().name(),
        }
    }

    /// llama.cpp's `general.file_type` (its `llama_ftype`) for the file.
    fn file_type(self) -> u32 {
        match self {
            Self::F32 => 0,
            Self::F16 => 1,
            Self::Q4_0 => 2,
            Self::Q4_1 => 3,
            Self::Q8_0 => 7,
            Self::Q5_0 => 8,
            Self::Q5_1 => 9,
            Self::Q4_K => 14,
            Self::Q4_K_M => 15,
            Self::Q5_K => 16,
            Self::Q5_K_M => 17,
            Self::Q6_K => 18,
            Self::Q2_K => 10,
            Self::Q3_K => 11,
            Self::Q3_K_M => 12,
            Self::IQ4_NL => 25,
            Self::IQ4_XS => 30,
            Self::MXFP4_MOE => 38,
        }
    }

    /// The block type of a matrix of `role` in `layer` of `layers`, whose
    /// rows are `cols` long, in a model whose output is the embedding when
    /// `tied`: the one type, or llama.cpp's mix
    /// (`llama_tensor_get_type` in its `llama-quant.cpp`).
    pub(crate) fn matrix(
        self,
        role: Role,
        layer: u32,
        layers: u32,
        cols: u64,
        tied: bool,
    ) -> QuantKind {
        let base = match self {
            Self::Q3_K_M => QuantKind::Q3_K,
            Self::Q4_K_M => QuantKind::Q4_K,
            Self::Q5_K_M => QuantKind::Q5_K,
            Self::MXFP4_MOE => return matrix_kind(QuantKind::Q8_0, cols),
            uniform => return matrix_kind(uniform.kind(), cols),
        };
        // Layers that get more bits: the first and last eighths, and every
        // third between (`i >= n / 8` where the last test runs).
        let more_bits = |i: u32, n: u32| i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
        let output = role == Role::Output || (tied && role == Role::TokenEmbd);
        if output {
            // The output has its own rule: Q8_0 where Q6_K does not fit.
            return if cols.is_multiple_of(256) {
                QuantKind::Q6_K
            } else {
                QuantKind::Q8_0
            };
        }
        let kind = match (self, role) {
            // Q3_K_M: Q5_K for the first two `attn_v` and the first
            // sixteenth of `ffn_down`, Q4_K for the rest of both and for
            // `attn_output`.
            (Self::Q3_K_M, Role::AttnV) if layer < 2 => QuantKind::Q5_K,
            (Self::Q3_K_M, Role::FfnDown) if layer < layers / 16 => QuantKind::Q5_K,
            (Self::Q3_K_M, Role::AttnV | Role::FfnDown | Role::AttnOutput) => QuantKind::Q4_K,
            (Self::Q3_K_M, _) => base,
            (_, Role::AttnV | Role::FfnDown) if more_bits(layer, layers) => QuantKind::Q6_K,
            _ => base,
        };
        matrix_kind(kind, cols)
    }

    /// The block type of an expert stack of `role`: MXFP4 in an
    /// `MXFP4_MOE` file, else as [`matrix`](Self::matrix) gives it.
    pub(crate) fn expert_matrix(self, role: Role, layer: u32, layers: u32, cols: u64) -> QuantKind {
        match self {
            Self::MXFP4_MOE => matrix_kind(QuantKind::MXFP4, cols),
            _ => self.matrix(role, layer, layers, cols, false),
        }
    }

    fn kind(self) -> QuantKind {
        match self {
            Self::MXFP4_MOE => QuantKind::Q8_0,
            Self::F32 => QuantKind::F32,
            Self::F16 => QuantKind::F16,
            Self::Q4_0 => QuantKind::Q4_0,
            Self::Q4_1 => QuantKind::Q4_1,
            Self::Q5_0 => QuantKind::Q5_0,
            Self::Q5_1 => QuantKind::Q5_1,
            Self::Q8_0 => QuantKind::Q8_0,
            Self::Q4_K => QuantKind::Q4_K,
            Self::Q5_K => QuantKind::Q5_K,
            Self::Q6_K => QuantKind::Q6_K,
            Self::Q2_K => QuantKind::Q2_K,
            Self::Q3_K => QuantKind::Q3_K,
            Self::IQ4_NL => QuantKind::IQ4_NL,
            Self::IQ4_XS => QuantKind::IQ4_XS,
            Self::Q3_K_M => QuantKind::Q3_K,
            Self::Q4_K_M => QuantKind::Q4_K,
            Self::Q5_K_M => QuantKind::Q5_K,
        }
    }
}

/// The hyper-parameters of a shape.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Dims {
    pub hidden: u64,
    pub layers: u32,
    pub heads: u32,
    pub kv_heads: u32,
    pub ffn: u64,
    pub vocab: u64,
    pub context: u32,
    pub rope_base: f32,
    pub tied: bool,
    /// Width of one head.
    pub head_dim: u64,
    /// A mixture of experts in place of each MLP.
    pub experts: Option<ExpertDims>,
    /// A hybrid's recurrent layers: LFM2's short convolutions or Qwen3.5's
    /// delta nets on the layers that do not attend.
    pub hybrid: Option<Hybrid>,
}

/// The recurrent layers of a hybrid shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hybrid {
    /// `lfm2`: short convolutions but on [`hybrid::attends`]'s layers.
    Lfm2,
    /// `qwen35`: gated delta nets on [`hybrid::recurs`]'s layers, gated
    /// attention on the rest.
    Qwen35(hybrid::DeltaDims),
}

/// A mixture of experts' shape.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ExpertDims {
    pub count: u32,
    pub used: u32,
    /// Width of one expert's MLP.
    pub width: u64,
    /// Whose layer: Mixtral's (`llama`), Qwen3's (`qwen3moe`: QK-norm,
    /// its own expert width and head width keys) or gpt-oss's.
    pub layer: ExpertLayer,
}

/// The layer a mixture of experts sits in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ExpertLayer {
    Mixtral,
    Qwen3,
    /// `gpt-oss`: biases on every projection, router and expert,
    /// attention sinks, sliding windows on even layers, YaRN.
    GptOss,
    /// `glm4moe`: q/k/v biases, half-head rotary, a dense first layer,
    /// sigmoid routing with a selection bias, one shared expert.
    Glm45,
    /// `deepseek2`: latent attention, a dense first layer, softmax
    /// routing, two shared experts.
    DeepSeek2,
}

impl Shape {
    /// The name `--shape` takes.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Tiny => "tiny",
            Self::TinyMoe => "tiny-moe",
            Self::Smollm2_135m => "smollm2-135m",
            Self::Llama3_2_1b => "llama3.2-1b",
            Self::Llama3_8b => "llama3-8b",
            Self::Qwen3_30bA3b => "qwen3-30b-a3b",
            Self::Mixtral8x7b => "mixtral-8x7b",
            Self::GptOss20b => "gpt-oss-20b",
            Self::Glm45Air => "glm-4.5-air",
            Self::DeepseekV2Lite => "deepseek-v2-lite",
            Self::Lfm2_1_2b => "lfm2-1.2b",
            Self::Qwen35_2b => "qwen3.5-2b",
            Self::Qwen35_9b => "qwen3.5-9b",
        }
    }

    pub(crate) fn dims(self) -> Dims {
        let d = |hidden, layers, heads, kv_heads, ffn, vocab, context, rope_base, tied| Dims {
            hidden,
            layers,
            heads,
            kv_heads,
            ffn,
            vocab,
            context,
            rope_base,
            tied,
            head_dim: hidden / u64::from(heads),
            experts: None,
            hybrid: None,
        };
        match self {
            Self::Tiny => d(256, 2, 4, 2, 768, 512, 1024, 10_000.0, false),
            Self::TinyMoe => Dims {
                experts: Some(ExpertDims {
                    count: 8,
                    used: 2,
                    width: 128,
                    layer: ExpertLayer::Qwen3,
                }),
                ..d(256, 2, 4, 2, 768, 512, 1024, 10_000.0, false)
            },
            Self::Smollm2_135m => d(576, 30, 9, 3, 1536, 49_152, 8192, 100_000.0, true),
            Self::Llama3_2_1b => d(2048, 16, 32, 8, 8192, 128_256, 131_072, 500_000.0, true),
            Self::Llama3_8b => d(4096, 32, 32, 8, 14_336, 128_256, 8192, 500_000.0, false),
            Self::Qwen3_30bA3b => Dims {
                head_dim: 128,
                experts: Some(ExpertDims {
                    count: 128,
                    used: 8,
                    width: 768,
                    layer: ExpertLayer::Qwen3,
                }),
                ..d(2048, 48, 32, 4, 6144, 151_936, 40_960, 1_000_000.0, false)
            },
            Self::Mixtral8x7b => Dims {
                experts: Some(ExpertDims {
                    count: 8,
                    used: 2,
                    width: 14_336,
                    layer: ExpertLayer::Mixtral,
                }),
                ..d(4096, 32, 32, 8, 14_336, 32_000, 32_768, 1_000_000.0, false)
            },
            Self::GptOss20b => Dims {
                head_dim: 64,
                experts: Some(ExpertDims {
                    count: 32,
                    used: 4,
                    width: 2880,
                    layer: ExpertLayer::GptOss,
                }),
                ..d(2880, 24, 64, 8, 2880, 201_088, 131_072, 150_000.0, false)
            },
            Self::Glm45Air => Dims {
                head_dim: 128,
                experts: Some(ExpertDims {
                    count: 128,
                    used: 8,
                    width: 1408,
                    layer: ExpertLayer::Glm45,
                }),
                ..d(
                    4096,
                    46,
                    96,
                    8,
                    10_944,
                    151_552,
                    131_072,
                    1_000_000.0,
                    false,
                )
            },
            Self::DeepseekV2Lite => Dims {
                // The cached row: the latent and the rotary part.
                head_dim: latent::ROW,
                experts: Some(ExpertDims {
                    count: 64,
                    used: 6,
                    width: 1408,
                    layer: ExpertLayer::DeepSeek2,
                }),
                ..d(2048, 27, 16, 1, 10_944, 102_400, 163_840, 10_000.0, false)
            },
            Self::Lfm2_1_2b => Dims {
                hybrid: Some(Hybrid::Lfm2),
                ..d(2048, 16, 32, 8, 8192, 65_536, 128_000, 1_000_000.0, true)
            },
            Self::Qwen35_2b => Dims {
                head_dim: 256,
                hybrid: Some(Hybrid::Qwen35(hybrid::DeltaDims {
                    key_heads: 16,
                    value_heads: 16,
                })),
                ..d(2048, 24, 8, 2, 6144, 248_320, 262_144, 10_000_000.0, true)
            },
            Self::Qwen35_9b => Dims {
                head_dim: 256,
                hybrid: Some(Hybrid::Qwen35(hybrid::DeltaDims {
                    key_heads: 16,
                    value_heads: 32,
                })),
                ..d(
                    4096,
                    32,
                    16,
                    4,
                    12_288,
                    248_320,
                    262_144,
                    10_000_000.0,
                    false,
                )
            },
        }
    }
}

/// The block type a `cols`-wide matrix gets: K-quants need rows of 256.
pub(crate) fn matrix_kind(kind: QuantKind, cols: u64) -> QuantKind {
    if cols.is_multiple_of(kind.block_elems() as u64) {
        return kind;
    }
    match kind {
        QuantKind::Q2_K | QuantKind::Q3_K => QuantKind::Q4_0,
        QuantKind::Q4_K => QuantKind::Q5_0,
        QuantKind::Q5_K => QuantKind::Q5_1,
        QuantKind::IQ4_XS => QuantKind::IQ4_NL,
        _ => QuantKind::Q8_0,
    }
}

/// The byte GPT-2's byte-level BPE writes for each byte: printable bytes
/// stand for themselves, the rest are moved past 255.
fn byte_token(byte: u8) -> char {
    let printable = |b: u8| (33..=126).contains(&b) || (161..=172).contains(&b) || b >= 174;
    if printable(byte) {
        return char::from(byte);
    }
    let moved = (0..byte).filter(|&b| !printable(b)).count() as u32;
    char::from_u32(256 + moved).unwrap_or('?')
}

/// Describes the file: metadata, tokenizer and every tensor, of the
/// shape's first `layers` layers.
pub(crate) fn describe(shape: Shape, weight: WeightType, layers: u32) -> GgufWriter {
    let d = Dims {
        layers: layers.min(shape.dims().layers),
        ..shape.dims()
    };
    let layer = d.experts.map(|e| e.layer);
    let qwen3 = layer == Some(ExpertLayer::Qwen3);
    let oss = layer == Some(ExpertLayer::GptOss);
    let glm = layer == Some(ExpertLayer::Glm45);
    let deepseek = layer == Some(ExpertLayer::DeepSeek2);
    let arch = match layer {
        Some(ExpertLayer::Qwen3) => "qwen3moe",
        Some(ExpertLayer::GptOss) => "gpt-oss",
        Some(ExpertLayer::Glm45) => "glm4moe",
        Some(ExpertLayer::DeepSeek2) => "deepseek2",
        _ if d.hybrid == Some(Hybrid::Lfm2) => "lfm2",
        _ if d.hybrid.is_some() => "qwen35",
        _ => "llama",
    };
    let q_width = d.head_dim * u64::from(d.heads);
    let kv_width = d.head_dim * u64::from(d.kv_heads);
    let mut w = GgufWriter::default();
    let key = |k: &str| format!("{arch}.{k}");
    w.str("general.architecture", arch);
    w.str(
        "general.name",
        &format!("pagoda synthetic {} {}", shape.name(), weight.name()),
    );
    w.u32("general.file_type", weight.file_type());
    w.u32(&key("context_length"), d.context);
    w.u32(&key("embedding_length"), d.hidden as u32);
    w.u32(&key("block_count"), d.layers);
    w.u32(&key("feed_forward_length"), d.ffn as u32);
    w.u32(&key("attention.head_count"), d.heads);
    match d.hybrid {
        Some(Hybrid::Lfm2) => hybrid::metadata(&mut w, &key, d.layers, d.kv_heads),
        Some(Hybrid::Qwen35(delta)) => {
            w.u32(&key("attention.head_count_kv"), d.kv_heads);
            w.u32(&key("attention.key_length"), d.head_dim as u32);
            w.u32(&key("attention.value_length"), d.head_dim as u32);
            hybrid::delta_metadata(&mut w, &key, d.layers, delta);
        }
        None => w.u32(&key("attention.head_count_kv"), d.kv_heads),
    }
    let delta = match d.hybrid {
        Some(Hybrid::Qwen35(delta)) => Some(delta),
        _ => None,
    };
    // GLM rotates half of each head, Qwen3.5 a quarter, DeepSeek 64 dims.
    let rope_dim = match () {
        _ if glm => d.head_dim / 2,
        _ if delta.is_some() => d.head_dim / 4,
        _ if deepseek => latent::ROPE,
        _ => d.head_dim,
    };
    w.u32(&key("rope.dimension_count"), rope_dim as u32);
    w.f32(&key("rope.freq_base"), d.rope_base);
    w.f32(&key("attention.layer_norm_rms_epsilon"), 1e-5);
    w.u32(&key("vocab_size"), d.vocab as u32);
    if let Some(e) = d.experts {
        w.u32(&key("expert_count"), e.count);
        w.u32(&key("expert_used_count"), e.used);
    }
    if oss {
        w.u32(&key("attention.sliding_window"), 128);
        w.str(&key("rope.scaling.type"), "yarn");
        w.f32(&key("rope.scaling.factor"), 32.0);
        w.u32(&key("rope.scaling.original_context_length"), 4096);
    }
    if glm {
        w.u32(&key("leading_dense_block_count"), 1);
        w.u32(&key("expert_shared_count"), 1);
        w.bool(&key("expert_weights_norm"), true);
        w.f32(&key("expert_weights_scale"), 1.0);
        w.u32(&key("expert_gating_func"), 2);
    }
    if deepseek {
        latent::metadata(&mut w, &key);
    }
    if let (Some(e), true) = (d.experts, deepseek) {
        w.u32(&key("expert_feed_forward_length"), e.width as u32);
    }
    if let (Some(e), true) = (d.experts, qwen3 || oss || glm) {
        w.u32(&key("attention.key_length"), d.head_dim as u32);
        w.u32(&key("attention.value_length"), d.head_dim as u32);
        w.u32(&key("expert_feed_forward_length"), e.width as u32);
    }

    let vocab = d.vocab as usize;
    let mut tokens: Vec<String> = (0..=255u8).map(|b| byte_token(b).to_string()).collect();
    tokens.extend((256..vocab - 2).map(|i| format!("<|synthetic_{i}|>")));
    tokens.push("<|begin_of_text|>".into());
    tokens.push("<|end_of_text|>".into());
    let mut types = vec![1i32; vocab];
    types[256..].fill(3);
    w.str("tokenizer.ggml.model", "gpt2");
    w.str("tokenizer.ggml.pre", "default");
    w.str_array("tokenizer.ggml.tokens", &tokens);
    w.i32_array("tokenizer.ggml.token_type", &types);
    w.str_array::<&str>("tokenizer.ggml.merges", &[]);
    w.u32("tokenizer.ggml.bos_token_id", d.vocab as u32 - 2);
    w.u32("tokenizer.ggml.eos_token_id", d.vocab as u32 - 1);
    w.bool("tokenizer.ggml.add_bos_token", true);

    let mut tensor = |name: String, dims: &[u64], kind: QuantKind| {
        let dims = dims.to_vec();
        w.tensor(TensorSpec { name, dims, kind });
    };
    let n = d.layers;
    let kind = |role, layer, cols| weight.matrix(role, layer, n, cols, d.tied);
    let h = d.hidden;
    tensor(
        "token_embd.weight".into(),
        &[h, d.vocab],
        kind(Role::TokenEmbd, 0, h),
    );
    for l in 0..n {
        let b = |n: &str| format!("blk.{l}.{n}.weight");
        tensor(b("attn_norm"), &[h], QuantKind::F32);
        if deepseek {
            latent::tensors(&mut tensor, l, u64::from(d.heads), h, &kind);
        } else if d.hybrid == Some(Hybrid::Lfm2) && !hybrid::attends(l) {
            hybrid::conv_tensors(&mut tensor, l, h, &kind);
        } else if let Some(delta) = delta.filter(|_| hybrid::recurs(l)) {
            hybrid::delta_tensors(&mut tensor, l, h, delta, &kind);
        } else {
            // Qwen3.5's queries come with their gates.
            let q_rows = q_width * if delta.is_some() { 2 } else { 1 };
            tensor(b("attn_q"), &[h, q_rows], kind(Role::AttnQ, l, h));
            tensor(b("attn_k"), &[h, kv_width], kind(Role::AttnK, l, h));
            tensor(b("attn_v"), &[h, kv_width], kind(Role::AttnV, l, h));
            let attn_output = kind(Role::AttnOutput, l, q_width);
            tensor(b("attn_output"), &[q_width, h], attn_output);
            if d.hybrid.is_some() {
                tensor(b("attn_q_norm"), &[d.head_dim], QuantKind::F32);
                tensor(b("attn_k_norm"), &[d.head_dim], QuantKind::F32);
            }
        }
        if oss || glm {
            let bias = |n: &str| format!("blk.{l}.{n}.bias");
            let mut biased = vec![
                ("attn_q", q_width),
                ("attn_k", kv_width),
                ("attn_v", kv_width),
            ];
            if oss {
                biased.push(("attn_output", h));
                tensor(b("attn_sinks"), &[u64::from(d.heads)], QuantKind::F32);
            }
            for (name, len) in biased {
                tensor(bias(name), &[len], QuantKind::F32);
            }
        }
        // gpt-oss, GLM-4.5 and Qwen3.5 name the MLP's norm after the
        // attention.
        if oss || glm || delta.is_some() {
            tensor(b("post_attention_norm"), &[h], QuantKind::F32);
        } else {
            tensor(b("ffn_norm"), &[h], QuantKind::F32);
        }
        // GLM-4.5's and DeepSeek's first layer has a dense MLP.
        let experts = d.experts.filter(|_| !((glm || deepseek) && l == 0));
        match experts {
            None => {
                tensor(b("ffn_gate"), &[h, d.ffn], kind(Role::FfnGate, l, h));
                tensor(b("ffn_up"), &[h, d.ffn], kind(Role::FfnUp, l, h));
                tensor(b("ffn_down"), &[d.ffn, h], kind(Role::FfnDown, l, d.ffn));
            }
            Some(e) => {
                // Qwen3's QK-norm (LFM2's is written with its attention),
                // and the router, which llama.cpp's
                // quantizer leaves in f32.
                if e.layer == ExpertLayer::Qwen3 {
                    tensor(b("attn_q_norm"), &[d.head_dim], QuantKind::F32);
                    tensor(b("attn_k_norm"), &[d.head_dim], QuantKind::F32);
                }
                let count = u64::from(e.count);
                tensor(b("ffn_gate_inp"), &[h, count], QuantKind::F32);
                let expert = |role, cols| weight.expert_matrix(role, l, n, cols);
                let (gate, up) = (expert(Role::FfnGate, h), expert(Role::FfnUp, h));
                tensor(b("ffn_gate_exps"), &[h, e.width, count], gate);
                tensor(b("ffn_up_exps"), &[h, e.width, count], up);
                let down = expert(Role::FfnDown, e.width);
                tensor(b("ffn_down_exps"), &[e.width, h, count], down);
                if glm {
                    tensor(
                        format!("blk.{l}.exp_probs_b.bias"),
                        &[count],
                        QuantKind::F32,
                    );
                }
                if glm || deepseek {
                    // GLM-4.5's one shared expert, DeepSeek-V2-Lite's two.
                    let width = e.width * if deepseek { 2 } else { 1 };
                    let shared = |role, cols| kind(role, l, cols);
                    let (gate, up) = (shared(Role::FfnGate, h), shared(Role::FfnUp, h));
                    tensor(b("ffn_gate_shexp"), &[h, width], gate);
                    tensor(b("ffn_up_shexp"), &[h, width], up);
                    let down = shared(Role::FfnDown, width);
                    tensor(b("ffn_down_shexp"), &[width, h], down);
                }
                if oss {
                    let bias = |n: &str| format!("blk.{l}.{n}.bias");
                    tensor(bias("ffn_gate_inp"), &[count], QuantKind::F32);
                    tensor(bias("ffn_gate_exps"), &[e.width, count], QuantKind::F32);
                    tensor(bias("ffn_up_exps"), &[e.width, count], QuantKind::F32);
                    tensor(bias("ffn_down_exps"), &[h, count], QuantKind::F32);
                }
            }
        }
    }
    // LFM2's converter names its final norm after the embedding.
    let final_norm = if d.hybrid == Some(Hybrid::Lfm2) {
        "token_embd_norm.weight"
    } else {
        "output_norm.weight"
    };
    tensor(final_norm.into(), &[h], QuantKind::F32);
    if !d.tied {
        let output = kind(Role::Output, 0, h);
        tensor("output.weight".into(), &[h, d.vocab], output);
    }
    w
}

/// Why `pagoda synth` failed.
#[derive(Debug, thiserror::Error)]
#[error("cannot write {}: {source}", path.display())]
pub(crate) struct SynthError {
    path: PathBuf,
    source: std::io::Error,
}

/// Runs `pagoda synth`.
pub(crate) fn synth(args: SynthArgs) -> Result<(), SynthError> {
    let started = Instant::now();
    let fail = |source| SynthError {
        path: args.out.clone(),
        source,
    };
    let most = args.shape.dims().layers;
    let layers = args.layers.unwrap_or(most);
    if layers > most {
        let why = format!(
            "--layers {layers}: the {} shape has {most}",
            args.shape.name()
        );
        return Err(fail(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            why,
        )));
    }
    let writer = describe(args.shape, args.weight_type, layers);
    let params: u64 = writer
        .tensors()
        .iter()
        .map(|t| t.dims.iter().product::<u64>())
        .sum();
    let file = File::create(&args.out).map_err(fail)?;
    let mut out = BufWriter::with_capacity(4 << 20, file);
    let mut rng = fastrand::Rng::with_seed(args.seed);
    let bytes = writer
        .write(&mut out, |_, t, sink| {
            let (center, spread) = if t.name.ends_with("norm.weight") {
                (1.0, 0.1)
            } else if t.name.ends_with(".ssm_a") {
                // A delta net's −exp(A_log): every state decays.
                (-1.0, 0.5)
            } else {
                (0.0, 0.05)
            };
            let (rows, cols) = t.rows_cols();
            blocks::write_random(&mut rng, t.kind, rows * cols, center, spread, sink)
        })
        .map_err(fail)?;
    out.flush().map_err(fail)?;
    eprintln!(
        "wrote {}: {} shape, {} weights, {:.2}M parameters, {:.1} MiB in {:.1} s",
        args.out.display(),
        args.shape.name(),
        args.weight_type.name(),
        params as f64 / 1e6,
        bytes as f64 / (1u64 << 20) as f64,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

#[cfg(test)]
mod tests;
