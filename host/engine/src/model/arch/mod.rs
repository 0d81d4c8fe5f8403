//! Architectures: each file builds one architecture's [`Program`] from a
//! GGUF file's metadata and tensors, once at load, in the shape of
//! llama.cpp's `src/models/*.cpp`. This module holds what they share: the
//! name dispatch (and the refusals, which name what is not built), the
//! [`Loader`] that finds tensors by name and shape and holds them as the
//! caller asked (views of the map, or dequantized to f32; its reading of
//! mixtures of experts in `mixture.rs`), and the rotary parameters most
//! files read the same way.
//!
//! Adding an architecture: a file here with a `build(&Loader) ->
//! Result<Program, LoadError>` that reads its tensors and pushes its ops
//! (the blocks in `program.rs` cover the usual pre-norm layer), a line in
//! [`build`] and in `SUPPORTED_ARCHITECTURES` (`config.rs`), its definition in the NumPy reference
//! (`tests/reference/forward_ref.py`) and a tiny file in
//! `make_tiny_gguf.py`; `docs/ARCHITECTURE.md` walks through it.

mod cohere;
mod deepseek2;
mod ernie4_5;
mod exaone;
mod gemma;
mod glm4;
mod gpt_oss;
mod granite;
mod granite_hybrid;
mod hunyuan;
mod lfm2;
mod llama;
mod mamba2;
mod minimax_m2;
mod mistral3;
mod mixture;
mod nemotron_h;
mod olmo2;
mod olmoe;
mod phi3;
mod qwen2;
mod qwen3;
mod qwen35;
mod router;
mod seed_oss;
mod smollm3;

use std::ops::Range;

use std::sync::Arc;

use pagoda_core::gguf::{Gguf, Value};

use super::config::{ModelConfig, SUPPORTED_ARCHITECTURES as SUPPORTED};
use super::dequant;
use super::file::ModelFile;
use super::load_error::LoadError;
pub(super) use super::meta::architecture as name;
use super::meta::{bad, float, meta, positive_float, uint};
use super::program::{
    attention_block, experts_block, mlp_block, Attend, AttentionBlock, Buf, Experts, Gating,
    MlpBlock, Op, Program,
};
use super::repack_cache::RepackCache;
use super::rope::{Rope, RopeMode, RopeSpec, Yarn};
use super::tensors::Matrix;

/// How the loader holds the matrices.
#[derive(Clone)]
pub(super) enum Source {
    /// Views of the mapped file, in their own format.
    Mapped(Arc<ModelFile>),
    /// As [`Source::Mapped`], but the matrices of types with interleaved
    /// kernels copied out with their rows interleaved eight at a time (or
    /// read from a repack cache), and their pages of the map let go.
    Interleaved(Arc<ModelFile>, Option<Arc<RepackCache>>),
    /// Dequantized to f32 rows.
    Dense,
}

/// Where `data`, a tensor's bytes as the reader hands them out, lies in
/// `file`'s map (`None` if it is not a sub-slice of it). The reader hands
/// out sub-slices of the map: their offset is the difference of addresses.
fn map_range(file: &ModelFile, data: &[u8]) -> Option<std::ops::Range<usize>> {
    let start = (data.as_ptr() as usize).wrapping_sub(file.bytes().as_ptr() as usize);
    let range = start..start.checked_add(data.len())?;
    let inside = file
        .bytes()
        .get(range.clone())
        .is_some_and(|s| std::ptr::eq(s.as_ptr(), data.as_ptr()) && s.len() == data.len());
    inside.then_some(range)
}

/// A file's tensors and metadata for one architecture's builder.
pub(super) struct Loader<'a> {
    pub g: &'a Gguf<'a>,
    pub source: Source,
    pub config: ModelConfig,
    /// The architecture's name: the prefix of its metadata keys.
    pub arch: &'static str,
}

impl Loader<'_> {
    /// `{arch}.{key}`.
    pub fn key(&self, key: &str) -> String {
        format!("{}.{key}", self.arch)
    }

    /// Whether the file has tensor `name`.
    pub fn has(&self, name: &str) -> bool {
        self.g.tensor(name).is_some()
    }

    /// Matrix `name`, `out` rows of `inp` elements, held as the source
    /// says.
    pub fn matrix(&self, name: &str, inp: usize, out: usize) -> Result<Matrix, LoadError> {
        let m = self.file_matrix(name, inp, out)?;
        match &self.source {
            Source::Interleaved(file, cache) => Self::interleaved(file, cache, name, m),
            _ => Ok(m),
        }
    }

    /// `m` with its rows interleaved where its type has interleaved kernels
    /// (its pages of the map let go), else `m`.
    fn interleaved(
        file: &ModelFile,
        cache: &Option<Arc<RepackCache>>,
        name: &str,
        m: Matrix,
    ) -> Result<Matrix, LoadError> {
        let packed = m
            .interleaved(cache.as_deref())
            .map_err(|source| LoadError::Matrix {
                tensor: name.to_string(),
                source,
            })?;
        match packed {
            Some(packed) => {
                if let Some(range) = m.file_range() {
                    file.release(range);
                }
                Ok(packed)
            }
            None => Ok(m),
        }
    }

    /// Matrix `name` as the file holds it (dequantized for a dense source).
    fn file_matrix(&self, name: &str, inp: usize, out: usize) -> Result<Matrix, LoadError> {
        self.file_rows(name, &[inp as u64, out as u64])
    }

    /// Tensor `name` of GGUF dimensions `dims` (row length first) as one
    /// matrix of all its rows, as the file holds it (dequantized for a
    /// dense source): a matrix, or a stack of them (one per expert).
    fn file_rows(&self, name: &str, dims: &[u64]) -> Result<Matrix, LoadError> {
        let inp = dims.first().copied().unwrap_or(0) as usize;
        let rows = dims
            .iter()
            .skip(1)
            .try_fold(1usize, |n, &d| n.checked_mul(d as usize));
        let shape = || LoadError::Shape {
            tensor: name.to_string(),
            expected: dims.to_vec(),
            found: self
                .g
                .tensor(name)
                .map(|t| t.dims().to_vec())
                .unwrap_or_default(),
        };
        let out = rows.ok_or_else(shape)?;
        match &self.source {
            Source::Dense => {
                let values = dequant::stacked(self.g, name, dims)?;
                Ok(Matrix::dense(values, out, inp)?)
            }
            Source::Mapped(file) | Source::Interleaved(file, _) => {
                let t = dequant::tensor(self.g, name, dims)?;
                let Some(range) = map_range(file, t.data()) else {
                    return Err(shape());
                };
                Matrix::mapped(Arc::clone(file), range, t.kind(), out, inp).map_err(|source| {
                    LoadError::Matrix {
                        tensor: name.to_string(),
                        source,
                    }
                })
            }
        }
    }

    /// Layer `i`'s stack `name` of `count` matrices of `out` rows of `inp`
    /// (GGUF dimensions `[inp, out, count]`, one matrix per expert), held
    /// as the source says (interleaved as one matrix), as views of each.
    fn layer_stack(
        &self,
        i: u32,
        name: &str,
        (inp, out): (usize, usize),
        count: usize,
    ) -> Result<Vec<Matrix>, LoadError> {
        let name = format!("blk.{i}.{name}.weight");
        let dims = [inp as u64, out as u64, count as u64];
        let mut whole = self.file_rows(&name, &dims)?;
        // Repacked as one matrix when each expert is whole groups of rows
        // (every real model's), so each view is a range of the copy; an
        // expert of a part group would be a copy of its own, so
        // such a stack stays in the map's plain layout.
        let groups = out.is_multiple_of(pagoda_cpu::quant::interleave::GROUP);
        if let (Source::Interleaved(file, cache), true) = (&self.source, groups) {
            whole = Self::interleaved(file, cache, &name, whole)?;
        }
        let view = |rows: Range<usize>| {
            whole
                .view(rows)
                .ok_or_else(|| LoadError::ExpertView(name.clone()))
        };
        (0..count).map(|e| view(e * out..(e + 1) * out)).collect()
    }

    /// Layer `i`'s matrix `name` (`blk.{i}.{name}.weight`).
    pub fn layer_matrix(
        &self,
        i: u32,
        name: &str,
        inp: usize,
        out: usize,
    ) -> Result<Matrix, LoadError> {
        self.matrix(&format!("blk.{i}.{name}.weight"), inp, out)
    }

    /// Vector `name` of `len` values, in f32.
    pub fn vector(&self, name: &str, len: usize) -> Result<Vec<f32>, LoadError> {
        let values = dequant::vector(self.g, name, len)?;
        self.release_vector(name);
        Ok(values)
    }

    /// Layer `i`'s gains `blk.{i}.{name}`, a `head_dim` row for each of
    /// `heads` heads (GGUF dimensions `[head_dim, heads]`), head after head.
    pub fn layer_head_gains(&self, i: u32, name: &str, heads: u32) -> Result<Vec<f32>, LoadError> {
        let name = format!("blk.{i}.{name}");
        let dims = [u64::from(self.config.head_dim), u64::from(heads)];
        let values = dequant::stacked(self.g, &name, &dims)?;
        self.release_vector(&name);
        Ok(values)
    }

    /// Tensor `name`, `out` rows of `inp` values (GGUF dimensions `[inp,
    /// out]`), in f32 row after row: a small table an op reads whole (a
    /// short convolution's taps).
    pub fn matrix_values(&self, name: &str, inp: usize, out: usize) -> Result<Vec<f32>, LoadError> {
        let values = dequant::stacked(self.g, name, &[inp as u64, out as u64])?;
        self.release_vector(name);
        Ok(values)
    }

    /// Lets go of vector `name`'s pages of the map where the matrices are
    /// copied out: reading it mapped its page's whole page-cache folio (up
    /// to 2 MiB, mostly matrices already copied), or a 1B file's norms hold
    /// 61 MiB at the end of the load, its peak.
    fn release_vector(&self, name: &str) {
        if let Source::Interleaved(file, _) = &self.source {
            if let Some(range) = self.g.tensor(name).and_then(|t| map_range(file, t.data())) {
                file.release(range);
            }
        }
    }

    /// Layer `i`'s vector `blk.{i}.{name}`.
    pub fn layer_vector(&self, i: u32, name: &str, len: usize) -> Result<Vec<f32>, LoadError> {
        self.vector(&format!("blk.{i}.{name}"), len)
    }

    /// Vector `name`, if the file has it.
    pub fn optional_vector(&self, name: &str, len: usize) -> Result<Option<Vec<f32>>, LoadError> {
        if self.has(name) {
            self.vector(name, len).map(Some)
        } else {
            Ok(None)
        }
    }

    /// The token embedding, and the output head (`output.weight`, else the
    /// embedding: tied).
    pub fn embedding_and_head(&self) -> Result<(Matrix, Matrix), LoadError> {
        let (h, v) = (self.config.hidden as usize, self.config.vocab as usize);
        // Lookups read one row of the embedding: it stays as the file
        // holds it, unless it is a tied head, interleaved. Then lookups
        // read the copy too: the map's pages were let go, and a lookup
        // there would fault them back (up to a 2 MiB folio of the page
        // cache a row), growing resident memory past the file's size.
        let embed = self.file_matrix("token_embd.weight", h, v)?;
        if self.has("output.weight") {
            return Ok((embed, self.matrix("output.weight", h, v)?));
        }
        let head = match &self.source {
            Source::Interleaved(file, cache) => {
                Self::interleaved(file, cache, "token_embd.weight", embed)?
            }
            _ => embed,
        };
        Ok((head.clone(), head))
    }

    /// The rotary parameters the metadata gives (base, rotated dimensions,
    /// linear scaling or YaRN), pairs in `mode`, with `rope_freqs.weight`
    /// as the frequency factors where the file has it (Llama 3.x). Other
    /// scalings are refused by name.
    pub fn rope(&self, mode: RopeMode) -> Result<RopeSpec, LoadError> {
        let c = &self.config;
        let mut scale = 1.0;
        let mut yarn = None;
        let scaling_key = self.key("rope.scaling.type");
        if self.g.get(&scaling_key).is_some() {
            let scaling = self
                .g
                .get_str(&scaling_key)
                .map_err(|e| meta(&scaling_key, e))?;
            match scaling {
                "none" => {}
                "linear" => {
                    let key = self.key("rope.scaling.factor");
                    scale = float(self.g, &key)?.unwrap_or(1.0);
                    if !(scale.is_finite() && scale >= 1.0) {
                        return Err(bad(&key, scale, "a linear RoPE scale must be at least 1"));
                    }
                }
                "yarn" => yarn = Some(self.yarn()?),
                other => return Err(self.unsupported(format!("RoPE scaling {other:?}"))),
            }
        }
        let factors = self.optional_vector("rope_freqs.weight", c.rope_dim as usize / 2)?;
        check_factors(&factors)?;
        Ok(RopeSpec {
            mode,
            base: c.rope_theta,
            dims: c.rope_dim,
            factors,
            scale,
            // llama.cpp multiplies it in for every architecture (Phi-3's
            // LongRoPE, an OLMo 3 or other YaRN file's).
            attn_factor: positive_float(self.g, &self.key("rope.scaling.attn_factor"), 1.0)?,
            yarn,
        })
    }

    /// YaRN's parameters: `rope.scaling.factor` (at least 1),
    /// `rope.scaling.original_context_length` (the context length where it
    /// is absent or 0, as llama.cpp takes it) and the ramp's
    /// `rope.scaling.yarn_beta_fast` and `yarn_beta_slow` (32 and 1 by
    /// default; Hugging Face's config may set them and the converter
    /// writes them, which llama.cpp ignores for these architectures).
    fn yarn(&self) -> Result<Yarn, LoadError> {
        let factor_key = self.key("rope.scaling.factor");
        let factor = float(self.g, &factor_key)?.unwrap_or(1.0);
        if !(factor.is_finite() && factor >= 1.0) {
            return Err(bad(&factor_key, factor, "a YaRN factor must be at least 1"));
        }
        let original_key = self.key("rope.scaling.original_context_length");
        let original_context = uint(self.g, &original_key)?
            .filter(|&n| n > 0)
            .unwrap_or(self.config.max_context);
        let beta = |name: &str, default: f32| positive_float(self.g, &self.key(name), default);
        let (beta_fast, beta_slow) = (
            beta("rope.scaling.yarn_beta_fast", 32.0)?,
            beta("rope.scaling.yarn_beta_slow", 1.0)?,
        );
        Ok(Yarn {
            factor,
            original_context,
            beta_fast,
            beta_slow,
            mscale_all_dim: 0.0,
        })
    }

    /// The scores' scale: `attention.scale` where the file sets it (0 or
    /// absent: `1/√head_dim`, as llama.cpp reads it).
    pub fn attention_scale(&self) -> Result<f32, LoadError> {
        let key = self.key("attention.scale");
        let plain = 1.0 / (self.config.head_dim as f32).sqrt();
        match float(self.g, &key)? {
            Some(0.0) => Ok(plain),
            _ => positive_float(self.g, &key, plain),
        }
    }

    /// Layer `i`'s separate q, k, v and output projections (no biases).
    pub fn attention(&self, i: u32) -> Result<AttentionBlock, LoadError> {
        let c = &self.config;
        let (h, q, kv) = (c.hidden as usize, c.q_dim(), c.kv_dim());
        let [wq, wk, wv] = [("attn_q", q), ("attn_k", kv), ("attn_v", kv)]
            .map(|(name, rows)| self.layer_matrix(i, name, h, rows));
        self.attention_of(i, [wq?, wk?, wv?], [None, None, None])
    }

    /// Layer `i`'s attention block of the projections `qkv` with their
    /// `biases`, its output projection, rotary by table 0, and attention
    /// over the whole context: the block the architectures then amend.
    fn attention_of(
        &self,
        i: u32,
        [q, k, v]: [Matrix; 3],
        biases: [Option<Vec<f32>>; 3],
    ) -> Result<AttentionBlock, LoadError> {
        let c = &self.config;
        Ok(AttentionBlock {
            q,
            k,
            v,
            biases,
            qk_norm: None,
            qk_norm_after_rope: false,
            qk_norm_per_head: false,
            output: self.layer_matrix(i, "attn_output", c.q_dim(), c.hidden as usize)?,
            output_bias: None,
            post_norm: None,
            rope: Some(0),
            attend: Attend::full(c),
        })
    }

    /// Layer `i`'s projections from one fused `attn_qkv` tensor (query
    /// rows, then key, then value, read as views of it) and its biases
    /// (one fused `attn_qkv.bias`, else each of q, k and v where the file
    /// has it); `None` where the file has no fused tensor.
    pub fn fused_attention(&self, i: u32) -> Result<Option<AttentionBlock>, LoadError> {
        let c = &self.config;
        let (h, q, kv) = (c.hidden as usize, c.q_dim(), c.kv_dim());
        let name = format!("blk.{i}.attn_qkv.weight");
        if !self.has(&name) {
            return Ok(None);
        }
        let qkv = self.matrix(&name, h, q + 2 * kv)?;
        let parts = [0..q, q..q + kv, q + kv..q + 2 * kv];
        let [wq, wk, wv] = parts.clone().map(|rows| qkv.view(rows));
        let (Some(wq), Some(wk), Some(wv)) = (wq, wk, wv) else {
            return Err(LoadError::MissingTensor(name));
        };
        let biases = match self.optional_vector(&format!("blk.{i}.attn_qkv.bias"), q + 2 * kv)? {
            Some(b) => parts.map(|rows| Some(b[rows].to_vec())),
            None => self.qkv_biases(i, false)?,
        };
        self.attention_of(i, [wq, wk, wv], biases).map(Some)
    }

    /// Layer `i`'s q, k and v biases (`blk.{i}.attn_{q,k,v}.bias`): all
    /// required, or (`required` false) each where the file has it.
    pub fn qkv_biases(&self, i: u32, required: bool) -> Result<[Option<Vec<f32>>; 3], LoadError> {
        let c = &self.config;
        let bias = |name: &str, len: usize| {
            let name = format!("blk.{i}.{name}.bias");
            if required {
                self.vector(&name, len).map(Some)
            } else {
                self.optional_vector(&name, len)
            }
        };
        Ok([
            bias("attn_q", c.q_dim())?,
            bias("attn_k", c.kv_dim())?,
            bias("attn_v", c.kv_dim())?,
        ])
    }

    /// Layer `i`'s SwiGLU MLP from separate gate, up and down tensors.
    pub fn swiglu(&self, i: u32) -> Result<MlpBlock, LoadError> {
        let (h, f) = (self.config.hidden as usize, self.config.ffn as usize);
        Ok(MlpBlock {
            gate: self.layer_matrix(i, "ffn_gate", h, f)?,
            up: self.layer_matrix(i, "ffn_up", h, f)?,
            down: self.layer_matrix(i, "ffn_down", f, h)?,
            gating: Gating::Silu,
            post_norm: None,
        })
    }

    /// Layer `i`'s SwiGLU MLP from one fused `ffn_up` tensor (the gate's
    /// rows, then the up projection's, read as views of it: llama.cpp's
    /// `LLM_FFN_SWIGLU` over the fused product) and `ffn_down`.
    pub fn fused_swiglu(&self, i: u32) -> Result<MlpBlock, LoadError> {
        let (h, f) = (self.config.hidden as usize, self.config.ffn as usize);
        let up = self.layer_matrix(i, "ffn_up", h, 2 * f)?;
        let missing = || LoadError::MissingTensor(format!("blk.{i}.ffn_up.weight"));
        Ok(MlpBlock {
            gate: up.view(0..f).ok_or_else(missing)?,
            up: up.view(f..2 * f).ok_or_else(missing)?,
            down: self.layer_matrix(i, "ffn_down", f, h)?,
            gating: Gating::Silu,
            post_norm: None,
        })
    }

    /// A decoder of pre-norm layers (`attn_norm`, the attention block,
    /// `ffn_norm`, the MLP block or mixture of experts, each added to the
    /// residual stream) whose blocks `layer` reads, with the file's
    /// embedding, final norm and head.
    pub fn pre_norm_decoder<F: Into<Ffn>>(
        &self,
        rope: &RopeSpec,
        layer: impl Fn(u32) -> Result<(AttentionBlock, F), LoadError>,
    ) -> Result<Program, LoadError> {
        self.decoder("ffn_norm.weight", rope, layer)
    }

    /// [`pre_norm_decoder`](Self::pre_norm_decoder) with the MLP's norm
    /// named `blk.{i}.{ffn_norm}` (gpt-oss and GLM-4.5 name it
    /// `post_attention_norm`, after the block it follows).
    pub fn decoder<F: Into<Ffn>>(
        &self,
        ffn_norm: &str,
        rope: &RopeSpec,
        layer: impl Fn(u32) -> Result<(AttentionBlock, F), LoadError>,
    ) -> Result<Program, LoadError> {
        let c = &self.config;
        let h = c.hidden as usize;
        let (embed, head) = self.embedding_and_head()?;
        let mut layers = Vec::with_capacity(c.layers as usize);
        for i in 0..c.layers {
            let (attention, ffn) = layer(i)?;
            let mut ops = Vec::new();
            attention_block(
                &mut ops,
                c,
                self.layer_vector(i, "attn_norm.weight", h)?,
                attention,
            );
            let norm = self.layer_vector(i, ffn_norm, h)?;
            match ffn.into() {
                Ffn::Dense(mlp) => mlp_block(&mut ops, norm, mlp),
                Ffn::Experts(experts) => experts_block(&mut ops, norm, experts),
            }
            layers.push(ops);
        }
        let final_norm = self.vector("output_norm.weight", h)?;
        let ropes = vec![Rope::new(rope, c.max_context)];
        Ok(Program::plain(embed, layers, final_norm, head, ropes))
    }

    /// Which layers attend over the sliding window:
    /// `attention.sliding_window_pattern` as llama.cpp reads it, a number
    /// `n` (layer `i` is local unless `i % n == n - 1`) or one bool per
    /// layer; absent, the architecture's `default` `n`.
    pub fn local_layers(&self, default: u32) -> Result<Vec<bool>, LoadError> {
        let layers = self.config.layers as usize;
        let key = self.key("attention.sliding_window_pattern");
        if let Some(flags) = self.layer_flags(&key)? {
            if flags.len() != layers {
                return Err(bad(&key, flags.len(), "must hold one bool per layer"));
            }
            return Ok(flags);
        }
        let n = uint(self.g, &key)?.unwrap_or(default);
        if n == 0 {
            return Err(bad(&key, n, "must be positive"));
        }
        Ok((0..layers as u32).map(|i| i % n < n - 1).collect())
    }

    /// The bools of array `key`, if the file has one there (one a layer, as
    /// the caller checks).
    pub fn layer_flags(&self, key: &str) -> Result<Option<Vec<bool>>, LoadError> {
        let Some(Value::Array(flags)) = self.g.get(key) else {
            return Ok(None);
        };
        let flags = flags.iter().map(|v| match v {
            Value::Bool(b) => Ok(b),
            _ => Err(bad(key, "an array", "must hold one bool per layer")),
        });
        flags.collect::<Result<_, _>>().map(Some)
    }

    /// A refusal naming a feature of this architecture that is not built.
    pub fn unsupported(&self, feature: String) -> LoadError {
        LoadError::UnsupportedFeature {
            architecture: self.arch.to_string(),
            feature,
        }
    }
}

/// A layer's feed-forward half: one MLP, or a mixture of experts.
pub(super) enum Ffn {
    Dense(MlpBlock),
    Experts(Experts),
}

impl From<MlpBlock> for Ffn {
    fn from(mlp: MlpBlock) -> Self {
        Ffn::Dense(mlp)
    }
}

/// Frequency factors must be finite and positive.
pub(super) fn check_factors(factors: &Option<Vec<f32>>) -> Result<(), LoadError> {
    match factors {
        Some(f) if !f.iter().all(|x| x.is_finite() && *x > 0.0) => {
            Err(super::config::ModelError::NonFinite.into())
        }
        _ => Ok(()),
    }
}

/// The program of `g`'s architecture, its matrices held as `source` says.
pub(super) fn build(g: &Gguf<'_>, source: Source) -> Result<(ModelConfig, Program), LoadError> {
    // The configuration refuses a block count past the file's tensors, so
    // the builders may size their lists by it.
    let config = ModelConfig::from_gguf(g)?;
    let arch = SUPPORTED
        .iter()
        .copied()
        .find(|a| *a == name(g).unwrap_or_default())
        .ok_or_else(|| LoadError::UnsupportedArchitecture(String::new()))?;
    let loader = Loader {
        g,
        source,
        config,
        arch,
    };
    // Mixtral is `llama` with experts; the `moe` architectures always
    // have them.
    if !matches!(
        arch,
        "llama"
            | "qwen2moe"
            | "qwen3moe"
            | "qwen3vlmoe"
            | "granitemoe"
            | "granitehybrid"
            | "nemotron_h_moe"
            | "gpt-oss"
            | "glm4moe"
            | "deepseek2"
            | "ernie4_5-moe"
            | "olmoe"
            | "lfm2moe"
            | "qwen35moe"
            | "qwen3next"
            | "minimax-m2"
    ) {
        loader.refuse_experts()?;
    }
    let mut config = config;
    let program = match arch {
        "llama" => llama::build(&loader)?,
        // The vision-language files' text models: a text token's three
        // M-RoPE positions are its position, which turns every pair as
        // the plain NeoX rotary does.
        "qwen2" | "qwen2vl" => qwen2::build(&loader, false)?,
        "qwen2moe" => qwen2::build(&loader, true)?,
        "qwen3" | "qwen3vl" => qwen3::build(&loader, false)?,
        "qwen3moe" | "qwen3vlmoe" => qwen3::build(&loader, true)?,
        "phi3" => phi3::build(&loader)?,
        "smollm3" => smollm3::build(&loader)?,
        "olmo2" => olmo2::build(&loader)?,
        "granite" => granite::build(&loader, false)?,
        "granitemoe" => granite::build(&loader, true)?,
        "granitehybrid" => granite_hybrid::build(&loader)?,
        "nemotron_h" => nemotron_h::build(&loader, false)?,
        "nemotron_h_moe" => nemotron_h::build(&loader, true)?,
        "gemma2" => gemma::build(&loader, gemma::Gemma::Two)?,
        "gemma3" => gemma::build(&loader, gemma::Gemma::Three)?,
        "gpt-oss" => gpt_oss::build(&loader)?,
        "glm4" => glm4::build(&loader)?,
        "glm4moe" => glm4::build_moe(&loader)?,
        "deepseek2" => deepseek2::build(&loader)?,
        "ernie4_5" => ernie4_5::build(&loader, false)?,
        "ernie4_5-moe" => ernie4_5::build(&loader, true)?,
        "seed_oss" => seed_oss::build(&loader)?,
        "olmoe" => olmoe::build(&loader)?,
        "exaone" => exaone::build(&loader)?,
        "exaone4" => exaone::build_v4(&loader)?,
        "mistral3" => mistral3::build(&loader)?,
        "hunyuan-dense" => hunyuan::build(&loader)?,
        "command-r" => cohere::build(&loader, false)?,
        "cohere2" => cohere::build(&loader, true)?,
        "lfm2" => lfm2::build(&loader, false)?,
        "lfm2moe" => lfm2::build(&loader, true)?,
        "qwen35" => qwen35::build(&loader, qwen35::Qwen35::Dense)?,
        "qwen35moe" => qwen35::build(&loader, qwen35::Qwen35::Mixture)?,
        "qwen3next" => qwen35::build(&loader, qwen35::Qwen35::Next)?,
        "minimax-m2" => minimax_m2::build(&loader)?,
        other => return Err(LoadError::UnsupportedArchitecture(other.to_string())),
    };
    if let Source::Interleaved(file, _) = &loader.source {
        // Each copied tensor's pages were let go as it was copied, but a
        // fault maps its page's whole page-cache folio (up to 2 MiB), so
        // copying one tensor mapped its neighbours' ends again: about
        // 1 MiB a tensor stayed mapped, 55 MiB of the Llama-3.2-1B file.
        // Nothing reads the copied ranges now.
        for m in program.matrices().chain(std::iter::once(&program.head)) {
            if let Some(range) = m.copied_from() {
                file.release(range);
            }
        }
    }
    // A program of mixtures only reads no matrix `feed_forward_length`
    // wide (Qwen's is the dense MLP the experts replace, and no shape
    // checks it), yet the activations' gate and up rows are that wide:
    // they take the experts' width instead.
    let dense_mlp = program.layers.iter().flatten().any(
        |op| matches!(op, Op::Linear { projs, .. } if projs.iter().any(|p| p.out == Buf::Gate)),
    );
    if !dense_mlp {
        if let Some(width) = program.experts().map(Experts::width).max() {
            config.ffn = width as u32;
        }
    }
    Ok((config, program))
}
