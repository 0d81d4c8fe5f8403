//! A model from a GGUF file's metadata and tensors: the `llama` family
//! (SmolLM2, TinyLlama, Llama 2 and 3.x, Mistral) and `qwen2`.
//!
//! GGUF stores a projection as `out` rows of `in` elements; the forward pass
//! wants `[in, out]`, which is the transposed view of the same buffer (no
//! copy). llama.cpp's converter permutes the rows of a `llama` file's query
//! and key projections for its interleaved-pair rotary mode; the forward pass
//! rotates halves (NeoX), so those rows are put back at load. `qwen2` files
//! already use the NeoX mode.

use std::path::Path;
use std::sync::Arc;

use ndarray::{Array1, Array2};
use pagoda_core::gguf::{Gguf, GgufError, Value};

use super::config::ModelConfig;
use super::dequant::{matrix, vector};
use super::file::ModelFile;
use super::forward::Model;
use super::load_error::LoadError;
use super::quantized::QuantizedWeights;
use super::weights::{LayerWeights, Weights};

/// The architectures the loader knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Arch {
    /// Rotary in interleaved pairs in the file, no attention biases.
    Llama,
    /// NeoX rotary, q/k/v biases.
    Qwen2,
}

pub(super) fn arch(g: &Gguf<'_>) -> Result<(Arch, &'static str), LoadError> {
    let name = g
        .get_str("general.architecture")
        .map_err(|e| meta("general.architecture", e))?;
    match name {
        "llama" => Ok((Arch::Llama, "llama")),
        "qwen2" => Ok((Arch::Qwen2, "qwen2")),
        other => Err(LoadError::UnsupportedArchitecture(other.to_string())),
    }
}

fn meta(key: &str, source: GgufError) -> LoadError {
    LoadError::Metadata {
        key: key.to_string(),
        source,
    }
}

fn bad(key: &str, value: impl ToString, reason: &'static str) -> LoadError {
    LoadError::HyperParameter {
        key: key.to_string(),
        value: value.to_string(),
        reason,
    }
}

/// An unsigned integer under `key` (any integer type that fits a u32), or
/// `None` when absent.
fn uint(g: &Gguf<'_>, key: &str) -> Result<Option<u32>, LoadError> {
    let value: i128 = match g.get(key) {
        None => return Ok(None),
        Some(Value::U8(v)) => v.into(),
        Some(Value::U16(v)) => v.into(),
        Some(Value::U32(v)) => v.into(),
        Some(Value::U64(v)) => v.into(),
        Some(Value::I8(v)) => v.into(),
        Some(Value::I16(v)) => v.into(),
        Some(Value::I32(v)) => v.into(),
        Some(Value::I64(v)) => v.into(),
        Some(_) => return g.get_u32(key).map(Some).map_err(|e| meta(key, e)),
    };
    u32::try_from(value)
        .map(Some)
        .map_err(|_| bad(key, value, "must fit an unsigned 32-bit integer"))
}

fn required_uint(g: &Gguf<'_>, key: &str) -> Result<u32, LoadError> {
    uint(g, key)?.ok_or_else(|| {
        meta(
            key,
            GgufError::MissingKey {
                key: pagoda_core::gguf::Name::new(key.as_bytes()),
            },
        )
    })
}

/// A float under `key` (f32 or f64), or `None` when absent.
fn float(g: &Gguf<'_>, key: &str) -> Result<Option<f32>, LoadError> {
    match g.get(key) {
        None => Ok(None),
        Some(Value::F64(v)) => Ok(Some(v as f32)),
        Some(_) => g.get_f32(key).map(Some).map_err(|e| meta(key, e)),
    }
}

impl ModelConfig {
    /// The hyper-parameters from a GGUF file's `{arch}.*` metadata; the
    /// vocabulary from the embedding tensor. Refuses an architecture other
    /// than `llama` or `qwen2`, RoPE scaling other than per-frequency factors,
    /// and a configuration [`validate`](Self::validate) refuses.
    pub fn from_gguf(g: &Gguf<'_>) -> Result<ModelConfig, LoadError> {
        let (_, a) = arch(g)?;
        let key = |k: &str| format!("{a}.{k}");
        let layers = required_uint(g, &key("block_count"))?;
        let hidden = required_uint(g, &key("embedding_length"))?;
        let ffn = required_uint(g, &key("feed_forward_length"))?;
        let q_heads = required_uint(g, &key("attention.head_count"))?;
        if q_heads == 0 {
            return Err(super::config::ModelError::ZeroSize("q_heads").into());
        }
        let kv_heads = uint(g, &key("attention.head_count_kv"))?.unwrap_or(q_heads);
        let head_dim = match uint(g, &key("attention.key_length"))? {
            Some(d) => d,
            None if hidden % q_heads == 0 => hidden / q_heads,
            None => {
                return Err(bad(
                    &key("embedding_length"),
                    hidden,
                    "not a multiple of the head count, and no attention.key_length",
                ))
            }
        };
        if let Some(v) = uint(g, &key("attention.value_length"))? {
            if v != head_dim {
                return Err(bad(
                    &key("attention.value_length"),
                    v,
                    "must equal the key length",
                ));
            }
        }
        let rope_dim = uint(g, &key("rope.dimension_count"))?.unwrap_or(head_dim);
        let rope_theta = float(g, &key("rope.freq_base"))?.unwrap_or(10_000.0);
        let rms_key = key("attention.layer_norm_rms_epsilon");
        let rms_eps = float(g, &rms_key)?.ok_or_else(|| {
            meta(
                &rms_key,
                GgufError::MissingKey {
                    key: pagoda_core::gguf::Name::new(rms_key.as_bytes()),
                },
            )
        })?;
        let max_context = required_uint(g, &key("context_length"))?;
        let scaling_key = key("rope.scaling.type");
        if g.get(&scaling_key).is_some() {
            let scaling = g.get_str(&scaling_key).map_err(|e| meta(&scaling_key, e))?;
            if scaling != "none" {
                return Err(bad(&scaling_key, scaling, "RoPE scaling is not supported"));
            }
        }
        let embed = g
            .tensor("token_embd.weight")
            .ok_or_else(|| LoadError::MissingTensor("token_embd.weight".into()))?;
        let vocab = match embed.dims() {
            [h, v] if *h == u64::from(hidden) => u32::try_from(*v)
                .map_err(|_| bad("token_embd.weight rows", v, "vocabulary too large"))?,
            found => {
                return Err(LoadError::Shape {
                    tensor: "token_embd.weight".into(),
                    expected: vec![u64::from(hidden), embed.rows()],
                    found: found.to_vec(),
                })
            }
        };
        let config = ModelConfig {
            vocab,
            hidden,
            layers,
            q_heads,
            kv_heads,
            head_dim,
            rope_dim,
            ffn,
            rope_theta,
            rms_eps,
            max_context,
        };
        config.validate()?;
        Ok(config)
    }
}

impl Weights {
    /// Every tensor of a GGUF file, dequantized to f32, for `config` (from
    /// [`ModelConfig::from_gguf`] on the same file). Without `output.weight`
    /// the output head is tied to the embedding.
    pub fn from_gguf(g: &Gguf<'_>, config: ModelConfig) -> Result<Weights, LoadError> {
        config.validate()?;
        let (arch, _) = arch(g)?;
        let (v, h, q, kv, f) = (
            config.vocab as usize,
            config.hidden as usize,
            config.q_dim(),
            config.kv_dim(),
            config.ffn as usize,
        );
        let (d, rd) = (config.head_dim as usize, config.rope_dim as usize);
        // Row `r` of our query/key projection is the file's row
        // `rotary_source(r)`: llama's interleaved pairs (2j, 2j+1) of a head's
        // rotary part become the rotate-half pair (j, j + rope_dim/2).
        let rotary_source = move |r: usize| -> usize {
            let (head, t) = (r / d, r % d);
            if arch == Arch::Qwen2 || t >= rd {
                return r;
            }
            let half = rd / 2;
            head * d + 2 * (t % half) + t / half
        };
        let same = |r: usize| r;
        // `[out, in]` from the file, as the `[in, out]` view the forward
        // pass multiplies by.
        let proj = |name: String, inp: usize, out: usize, rotary: bool| {
            let m = if rotary {
                matrix(g, &name, inp, out, rotary_source)?
            } else {
                matrix(g, &name, inp, out, same)?
            };
            Ok::<Array2<f32>, LoadError>(m.reversed_axes())
        };
        let bias =
            |name: String, len: usize, rotary: bool| -> Result<Option<Array1<f32>>, LoadError> {
                if arch != Arch::Qwen2 && g.tensor(&name).is_none() {
                    return Ok(None);
                }
                let b = vector(g, &name, len)?;
                Ok(Some(if rotary {
                    Array1::from_shape_fn(len, |r| b[rotary_source(r)])
                } else {
                    b
                }))
            };
        let embed = matrix(g, "token_embd.weight", h, v, same)?;
        let mut layers = Vec::with_capacity(config.layers as usize);
        for i in 0..config.layers {
            let n = |t: &str| format!("blk.{i}.{t}");
            layers.push(LayerWeights {
                attn_norm: vector(g, &n("attn_norm.weight"), h)?,
                wq: proj(n("attn_q.weight"), h, q, true)?,
                wk: proj(n("attn_k.weight"), h, kv, true)?,
                wv: proj(n("attn_v.weight"), h, kv, false)?,
                bq: bias(n("attn_q.bias"), q, true)?,
                bk: bias(n("attn_k.bias"), kv, true)?,
                bv: bias(n("attn_v.bias"), kv, false)?,
                wo: proj(n("attn_output.weight"), q, h, false)?,
                ffn_norm: vector(g, &n("ffn_norm.weight"), h)?,
                w_gate: proj(n("ffn_gate.weight"), h, f, false)?,
                w_up: proj(n("ffn_up.weight"), h, f, false)?,
                w_down: proj(n("ffn_down.weight"), f, h, false)?,
            });
        }
        let final_norm = vector(g, "output_norm.weight", h)?;
        let lm_head = match g.tensor("output.weight") {
            Some(_) => Some(proj("output.weight".into(), h, v, false)?),
            None => None,
        };
        let weights = Weights::from_parts(config, embed, layers, final_norm, lm_head)?;
        // Llama 3.x: per-frequency divisors of the rotary angles.
        match g.tensor("rope_freqs.weight") {
            Some(_) => {
                let factors = vector(g, "rope_freqs.weight", rd / 2)?;
                Ok(weights.with_rope_factors(factors)?)
            }
            None => Ok(weights),
        }
    }
}

impl Model {
    /// The model a GGUF file holds, dequantized to f32 (the dense path:
    /// [`ModelConfig::from_gguf`] then [`Weights::from_gguf`]).
    pub fn from_gguf(g: &Gguf<'_>) -> Result<Model, LoadError> {
        let config = ModelConfig::from_gguf(g)?;
        Ok(Model::new(Weights::from_gguf(g, config)?))
    }

    /// The model a mapped GGUF file holds, its matrices kept quantized in
    /// the map ([`QuantizedWeights::from_file`]): loading reads only the
    /// metadata and the small vectors.
    pub fn from_file(file: Arc<ModelFile>) -> Result<Model, LoadError> {
        let config = ModelConfig::from_gguf(&file.gguf()?)?;
        Ok(Model::from_quantized(QuantizedWeights::from_file(
            file, config,
        )?))
    }

    /// Maps the GGUF file at `path` and loads it with [`from_file`](Self::from_file).
    pub fn load(path: impl AsRef<Path>) -> Result<Model, LoadError> {
        Model::from_file(Arc::new(ModelFile::open(path)?))
    }
}
