//! The shapes `pagoda synth` copies: each real model's hyper-parameters
//! (`Dims`), which `describe` turns into a file's metadata and tensors.

use clap::ValueEnum;

use super::{hybrid, latent};

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
    /// Granite-4.0-H-Micro (`granitehybrid`): 40 layers, hidden 2048; four
    /// attend (32 heads of 64 over 8, no rotary), the others are Mamba-2
    /// mixers (64 heads of 64, one group of state 128, 4 taps); SwiGLU of
    /// 8192, a tied vocabulary of 100,352; Granite's multipliers.
    #[value(name = "granite-4.0-h-micro")]
    Granite4HMicro,
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
    /// `granitehybrid`: Mamba-2 mixers but on
    /// [`hybrid::granite_attends`]'s layers, which attend without rotary.
    Granite(hybrid::MixerDims),
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
            Self::Granite4HMicro => "granite-4.0-h-micro",
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
            Self::Granite4HMicro => Dims {
                hybrid: Some(Hybrid::Granite(hybrid::MixerDims { heads: 64 })),
                ..d(2048, 40, 32, 8, 8192, 100_352, 131_072, 10_000.0, true)
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
