//! The shape of a Llama-architecture decoder.

use pagoda_core::backend::{AttentionShape, SUPPORTED_HEAD_DIMS};
use pagoda_core::{GeometryError, KvDtype, KvGeometry};

/// The architectures the engine runs, as `general.architecture` names them
/// (each built by its file in `model/arch/`).
pub const SUPPORTED_ARCHITECTURES: &[&str] = &[
    "llama",
    "qwen2",
    "qwen2moe",
    "qwen3",
    "qwen3moe",
    "phi3",
    "gemma2",
    "gemma3",
    "granite",
    "granitemoe",
    "smollm3",
    "olmo2",
    "gpt-oss",
    "glm4",
    "glm4moe",
    "deepseek2",
    "qwen2vl",
    "qwen3vl",
    "qwen3vlmoe",
    "ernie4_5",
    "ernie4_5-moe",
    "seed_oss",
    "olmoe",
    "exaone",
    "exaone4",
    "mistral3",
    "hunyuan-dense",
    "command-r",
    "cohere2",
    "lfm2",
    "lfm2moe",
    "qwen35",
    "qwen35moe",
    "qwen3next",
    "minimax-m2",
    "granitehybrid",
    "nemotron_h",
    "nemotron_h_moe",
];

/// The widest row (hidden size, MLP width, all query heads) a model may
/// have: 2^24 values, hundreds of times the widest real model's.
pub const MAX_WIDTH: u64 = 1 << 24;

/// Hyper-parameters of a Llama-style decoder: token embedding, `layers` ×
/// (RMSNorm, grouped-query attention with rotary positions, RMSNorm, SwiGLU
/// MLP), final RMSNorm, output head.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct ModelConfig {
    /// Token ids are `0..vocab`.
    pub vocab: u32,
    /// Width of the residual stream.
    pub hidden: u32,
    /// Decoder layers.
    pub layers: u32,
    /// Query heads.
    pub q_heads: u32,
    /// Key/value heads (a divisor of `q_heads`).
    pub kv_heads: u32,
    /// Dimension of one head.
    pub head_dim: u32,
    /// Leading dimensions of each query/key head that rotary positions
    /// rotate (even, at most `head_dim`; `head_dim` for full rotary).
    pub rope_dim: u32,
    /// Width of the MLP's hidden layer.
    pub ffn: u32,
    /// Base of the rotary position embedding.
    pub rope_theta: f32,
    /// The norms' epsilon (RMSNorm's, or LayerNorm's where the program's
    /// norms are).
    pub rms_eps: f32,
    /// Longest sequence (prompt plus output) the model serves.
    pub max_context: u32,
}

impl ModelConfig {
    /// The embedded default: a small model of the Llama shape (4 layers,
    /// 8 query heads over 2 KV heads of 64 dims, a 2,048-token vocabulary,
    /// 4.7 M parameters with the embedding and output head), big enough that compute dominates a step and small
    /// enough that `pagoda bench` finishes in seconds on two cores.
    pub const EMBEDDED: Self = Self {
        vocab: 2048,
        hidden: 256,
        layers: 4,
        q_heads: 8,
        kv_heads: 2,
        head_dim: 64,
        rope_dim: 64,
        ffn: 768,
        rope_theta: 10_000.0,
        rms_eps: 1e-5,
        max_context: 2048,
    };

    /// Checks every size: positive, heads that group, a head dimension the
    /// backends support, a rotary width that pairs and fits in a head, a
    /// finite RoPE base.
    pub fn validate(&self) -> Result<(), ModelError> {
        let sizes = [
            ("vocab", self.vocab),
            ("hidden", self.hidden),
            ("layers", self.layers),
            ("q_heads", self.q_heads),
            ("kv_heads", self.kv_heads),
            ("ffn", self.ffn),
            ("max_context", self.max_context),
        ];
        for (name, value) in sizes {
            if value == 0 {
                return Err(ModelError::ZeroSize(name));
            }
        }
        // The widest real models' rows are tens of thousands of values; a
        // width past this is a damaged file, and would overflow the
        // 32-bit sizes the backends compute with.
        let widths = [
            ("hidden", u64::from(self.hidden)),
            ("ffn", u64::from(self.ffn)),
            ("q_heads × head_dim", self.q_dim() as u64),
            ("kv_heads × head_dim", self.kv_dim() as u64),
        ];
        for (name, width) in widths {
            if width > MAX_WIDTH {
                return Err(ModelError::TooWide { name, width });
            }
        }
        if !self.q_heads.is_multiple_of(self.kv_heads) {
            return Err(ModelError::HeadsDoNotGroup {
                q_heads: self.q_heads,
                kv_heads: self.kv_heads,
            });
        }
        if !SUPPORTED_HEAD_DIMS.contains(&self.head_dim) {
            return Err(ModelError::UnsupportedHeadDim(self.head_dim));
        }
        if self.rope_dim == 0 || !self.rope_dim.is_multiple_of(2) || self.rope_dim > self.head_dim {
            return Err(ModelError::RopeDim {
                rope_dim: self.rope_dim,
                head_dim: self.head_dim,
            });
        }
        if !(self.rope_theta.is_finite() && self.rope_theta > 1.0) {
            return Err(ModelError::RopeTheta(self.rope_theta));
        }
        if !(self.rms_eps.is_finite() && self.rms_eps > 0.0) {
            return Err(ModelError::RmsEps(self.rms_eps));
        }
        Ok(())
    }

    /// Width of all query heads together.
    pub const fn q_dim(&self) -> usize {
        self.q_heads as usize * self.head_dim as usize
    }

    /// Width of all key (or value) heads together.
    pub const fn kv_dim(&self) -> usize {
        self.kv_heads as usize * self.head_dim as usize
    }

    /// The KV cache's geometry for this model.
    pub fn kv_geometry(&self, dtype: KvDtype) -> Result<KvGeometry, ModelError> {
        Ok(KvGeometry::new(
            self.layers,
            self.kv_heads,
            self.head_dim,
            dtype,
        )?)
    }

    /// The attention's head layout and `1/sqrt(head_dim)` scale.
    pub fn attention_shape(&self) -> AttentionShape {
        AttentionShape {
            q_heads: self.q_heads,
            kv_heads: self.kv_heads,
            head_dim: self.head_dim,
            scale: 1.0 / (self.head_dim as f32).sqrt(),
            window: 0,
            softcap: 0.0,
        }
    }
}

/// A model that cannot be built or run, or a step it cannot compute.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    /// A size in the configuration is zero.
    #[error("invalid model configuration: {0} must be positive")]
    ZeroSize(&'static str),
    /// A row of the model is wider than [`MAX_WIDTH`] values.
    #[error(
        "invalid model configuration: {name} is {width} values wide, past the limit of {MAX_WIDTH}"
    )]
    TooWide {
        /// Which width.
        name: &'static str,
        /// Its values.
        width: u64,
    },
    /// Query heads do not split evenly over key/value heads.
    #[error("invalid model configuration: q_heads ({q_heads}) must be a multiple of kv_heads ({kv_heads})")]
    HeadsDoNotGroup {
        /// Query heads.
        q_heads: u32,
        /// Key/value heads.
        kv_heads: u32,
    },
    /// No backend supports this head dimension.
    #[error("invalid model configuration: head_dim {0} is not supported (valid: {SUPPORTED_HEAD_DIMS:?})")]
    UnsupportedHeadDim(u32),
    /// The rotary dimension is zero, odd or wider than a head.
    #[error("invalid model configuration: rope_dim {rope_dim} must be even, positive and at most head_dim ({head_dim})")]
    RopeDim {
        /// The rotary dimension.
        rope_dim: u32,
        /// The head dimension.
        head_dim: u32,
    },
    /// The RoPE base is not a finite number above 1.
    #[error("invalid model configuration: rope_theta {0} must be above 1")]
    RopeTheta(f32),
    /// An op's spans do not fit its buffers' heads, or its per-head
    /// matrices do not fit its spans.
    #[error("the model's program has spans that do not fit its buffers")]
    Span,
    /// A rotary op's values reach past the end of a head.
    #[error(
        "the model's program rotates {rope_dim} values from {offset} of {head_dim}-value heads"
    )]
    RopeSpan {
        /// Where the rotated values start in a head.
        offset: u32,
        /// Values rotated.
        rope_dim: u32,
        /// The head's width.
        head_dim: u32,
    },
    /// An op names a rotary table the program does not have.
    #[error("the model's program names rotary table {0}, which it does not have")]
    RopeTable(usize),
    /// The RMSNorm epsilon is not a finite positive number.
    #[error("invalid model configuration: rms_eps {0} must be positive")]
    RmsEps(f32),
    /// The KV cache cannot have this geometry.
    #[error("KV geometry: {0}")]
    Geometry(#[from] GeometryError),
    /// The number of layer weights differs from the configuration's.
    #[error("{given} layers given, the configuration has {expected}")]
    LayerCount {
        /// Layers given.
        given: usize,
        /// Layers configured.
        expected: u32,
    },
    /// A weight tensor has the wrong shape.
    #[error("weight {name} has shape {found:?}, the configuration needs {expected:?}")]
    Shape {
        /// The tensor.
        name: String,
        /// The shape it must have.
        expected: Vec<usize>,
        /// The shape it has.
        found: Vec<usize>,
    },
    /// The embedding or the output head holds NaN or infinity, or a rotary
    /// factor is not positive.
    #[error("weights hold NaN, infinity or a non-positive rotary factor")]
    NonFinite,
    /// A step's tokens, positions and slots differ in number.
    #[error("{tokens} tokens, {positions} positions and {slots} slots in one step")]
    Batch {
        /// Tokens.
        tokens: usize,
        /// Positions.
        positions: usize,
        /// KV slots.
        slots: usize,
    },
    /// A token id outside the vocabulary.
    #[error("token {token} is outside the vocabulary (0..{vocab})")]
    Token {
        /// The token.
        token: u32,
        /// The vocabulary size.
        vocab: u32,
    },
    /// More rows to sample than tokens in the step.
    #[error("{rows} rows to sample in a step of {tokens} tokens")]
    SampleRows {
        /// Rows asked for.
        rows: usize,
        /// Tokens in the step.
        tokens: usize,
    },
    /// A layer whose KV group the step's input does not describe, or a
    /// group whose slots are not one per row.
    #[error("the step's KV groups do not describe layer {0}")]
    KvPlace(u32),
    /// A row to sample past the step's tokens.
    #[error("sample row {row} is past the step's {tokens} tokens")]
    SampleRow {
        /// The row.
        row: u32,
        /// Tokens in the step.
        tokens: usize,
    },
    /// A step that would continue a recurrent state its sequence did not
    /// leave at that position: another sequence's, or one that skips
    /// tokens (a recurrent model's sequences start at position 0 and
    /// continue where they left off).
    #[error("no recurrent state in row {row} continues at position {position}")]
    StateGap {
        /// The state's row.
        row: u32,
        /// The step's first position there.
        position: u32,
    },
    /// A step of a recurrent model without a state row per sequence.
    #[error("a recurrent model's step needs one state row per sequence: {rows} for {seqs}")]
    StateRows {
        /// State rows given.
        rows: usize,
        /// Sequences in the step.
        seqs: usize,
    },
    /// A recurrent state's row past the most a state store holds.
    #[error("recurrent state row {row} is past the limit of {max} rows")]
    StateRowRange {
        /// The row.
        row: u32,
        /// Rows a store holds at most.
        max: u32,
    },
    /// A position past the model's context.
    #[error("position {position} is past the model's context of {max_context}")]
    Position {
        /// The position.
        position: u32,
        /// The context length.
        max_context: u32,
    },
    /// The model needs something the backend does not have.
    #[error("the {backend} backend cannot run this model: {feature}")]
    BackendLacks {
        /// The backend's name.
        backend: &'static str,
        /// What it lacks.
        feature: &'static str,
    },
    /// A weight row of the quantized model could not be dequantized.
    #[error("dequantizing a weight row: {0}")]
    Dequantize(pagoda_core::quant::QuantError),
    /// A quantized matrix product refused its inputs, or its thread team
    /// failed.
    #[error("quantized matrix product: {0}")]
    Kernel(pagoda_cpu::QMatError),
}
