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
mod shape;
mod writer;

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::time::Instant;

use clap::{Args, ValueEnum};
use pagoda_core::QuantKind;

pub(crate) use self::shape::{Dims, ExpertLayer, Hybrid, Shape};
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
        _ if matches!(d.hybrid, Some(Hybrid::Granite(_))) => "granitehybrid",
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
        Some(Hybrid::Granite(m)) => hybrid::mixer_metadata(&mut w, &key, (d.layers, d.kv_heads), m),
        Some(Hybrid::Qwen35(delta)) => {
            w.u32(&key("attention.head_count_kv"), d.kv_heads);
            w.u32(&key("attention.key_length"), d.head_dim as u32);
            w.u32(&key("attention.value_length"), d.head_dim as u32);
            hybrid::delta_metadata(&mut w, &key, d.layers, delta);
        }
        None => w.u32(&key("attention.head_count_kv"), d.kv_heads),
    }
    let (delta, mixer) = match d.hybrid {
        Some(Hybrid::Qwen35(delta)) => (Some(delta), None),
        Some(Hybrid::Granite(m)) => (None, Some(m)),
        _ => (None, None),
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
        } else if let Some(m) = mixer.filter(|_| !hybrid::granite_attends(l)) {
            hybrid::mixer_tensors(&mut tensor, l, h, m, &kind);
        } else {
            // Qwen3.5's queries come with their gates.
            let q_rows = q_width * if delta.is_some() { 2 } else { 1 };
            tensor(b("attn_q"), &[h, q_rows], kind(Role::AttnQ, l, h));
            tensor(b("attn_k"), &[h, kv_width], kind(Role::AttnK, l, h));
            tensor(b("attn_v"), &[h, kv_width], kind(Role::AttnV, l, h));
            let attn_output = kind(Role::AttnOutput, l, q_width);
            tensor(b("attn_output"), &[q_width, h], attn_output);
            if d.hybrid.is_some() && mixer.is_none() {
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
