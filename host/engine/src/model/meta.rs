//! A GGUF file's metadata as the loader reads it: integers and floats of
//! any width under a key, typed errors naming the key, and the decoder's
//! shape ([`ModelConfig::from_gguf`]) from the `{arch}.*` keys every
//! architecture shares.

use pagoda_core::gguf::{Gguf, GgufError, Value};

use super::config::{ModelConfig, SUPPORTED_ARCHITECTURES};
use super::load_error::LoadError;

/// The file's architecture name, if the engine runs it.
pub(super) fn architecture<'g>(g: &Gguf<'g>) -> Result<&'g str, LoadError> {
    let name = g
        .get_str("general.architecture")
        .map_err(|e| meta("general.architecture", e))?;
    if SUPPORTED_ARCHITECTURES.contains(&name) {
        Ok(name)
    } else {
        Err(LoadError::UnsupportedArchitecture(name.to_string()))
    }
}

pub(super) fn meta(key: &str, source: GgufError) -> LoadError {
    LoadError::Metadata {
        key: key.to_string(),
        source,
    }
}

pub(super) fn bad(key: &str, value: impl ToString, reason: &'static str) -> LoadError {
    LoadError::HyperParameter {
        key: key.to_string(),
        value: value.to_string(),
        reason,
    }
}

/// An integer value of any integer type.
fn integer(value: &Value<'_>) -> Option<i128> {
    Some(match *value {
        Value::U8(v) => v.into(),
        Value::U16(v) => v.into(),
        Value::U32(v) => v.into(),
        Value::U64(v) => v.into(),
        Value::I8(v) => v.into(),
        Value::I16(v) => v.into(),
        Value::I32(v) => v.into(),
        Value::I64(v) => v.into(),
        _ => return None,
    })
}

/// `value` under `key` as a u32.
fn to_u32(key: &str, value: i128) -> Result<u32, LoadError> {
    u32::try_from(value).map_err(|_| bad(key, value, "must fit an unsigned 32-bit integer"))
}

/// An unsigned integer under `key` (any integer type that fits a u32), or
/// `None` when absent.
pub(super) fn uint(g: &Gguf<'_>, key: &str) -> Result<Option<u32>, LoadError> {
    let Some(value) = g.get(key) else {
        return Ok(None);
    };
    match integer(&value) {
        Some(v) => to_u32(key, v).map(Some),
        None => g.get_u32(key).map(Some).map_err(|e| meta(key, e)),
    }
}

/// One unsigned integer per layer under `key`: an array of `layers` of
/// them (llama.cpp's `get_key_or_arr`: LFM2's `attention.head_count_kv`,
/// 0 on its recurrent layers), or one for every layer; `None` when absent.
pub(super) fn layer_uints(
    g: &Gguf<'_>,
    key: &str,
    layers: u32,
) -> Result<Option<Vec<u32>>, LoadError> {
    let Some(Value::Array(values)) = g.get(key) else {
        return Ok(uint(g, key)?.map(|v| vec![v; layers as usize]));
    };
    if values.len() != u64::from(layers) {
        return Err(bad(key, values.len(), "must hold one value per layer"));
    }
    values
        .iter()
        .map(|v| match integer(&v) {
            Some(v) => to_u32(key, v),
            None => Err(bad(key, "an array", "must hold integers")),
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// The architectures whose layers without KV heads are recurrent ones.
const RECURRENT: &[&str] = &[
    "lfm2",
    "lfm2moe",
    "granitehybrid",
    "nemotron_h",
    "nemotron_h_moe",
];

/// The KV heads of every attention layer, from `attention.head_count_kv`
/// (`None`: as many as query heads), one value or one per layer: the
/// attention layers must agree, and only a recurrent architecture has
/// layers with none.
fn kv_heads(
    arch: &str,
    key: &str,
    per_layer: Option<Vec<u32>>,
    q_heads: u32,
) -> Result<u32, LoadError> {
    let Some(per_layer) = per_layer else {
        return Ok(q_heads);
    };
    let mut attention = per_layer.iter().copied().filter(|&n| n > 0);
    let Some(first) = attention.next() else {
        return Err(bad(key, 0, "at least one layer must have KV heads"));
    };
    if attention.any(|n| n != first) {
        return Err(bad(
            key,
            "an array",
            "the attention layers must have as many KV heads",
        ));
    }
    if per_layer.contains(&0) && !RECURRENT.contains(&arch) {
        return Err(bad(
            key,
            0,
            "a layer without KV heads is a recurrent one, which this architecture has not",
        ));
    }
    Ok(first)
}

pub(super) fn required_uint(g: &Gguf<'_>, key: &str) -> Result<u32, LoadError> {
    uint(g, key)?.ok_or_else(|| {
        meta(
            key,
            GgufError::MissingKey {
                key: pagoda_core::gguf::Name::new(key.as_bytes()),
            },
        )
    })
}

/// A bool under `key`, or `None` when absent.
pub(super) fn boolean(g: &Gguf<'_>, key: &str) -> Result<Option<bool>, LoadError> {
    match g.get(key) {
        None => Ok(None),
        Some(_) => g.get_bool(key).map(Some).map_err(|e| meta(key, e)),
    }
}

/// A finite, positive float under `key`, or `default` when absent.
pub(super) fn positive_float(g: &Gguf<'_>, key: &str, default: f32) -> Result<f32, LoadError> {
    match float(g, key)? {
        None => Ok(default),
        Some(v) if v.is_finite() && v > 0.0 => Ok(v),
        Some(v) => Err(bad(key, v, "must be finite and positive")),
    }
}

/// A float under `key` (f32 or f64), or `None` when absent.
pub(super) fn float(g: &Gguf<'_>, key: &str) -> Result<Option<f32>, LoadError> {
    match g.get(key) {
        None => Ok(None),
        Some(Value::F64(v)) => Ok(Some(v as f32)),
        Some(_) => g.get_f32(key).map(Some).map_err(|e| meta(key, e)),
    }
}

impl ModelConfig {
    /// The shape from a GGUF file's `{arch}.*` metadata (the keys every
    /// architecture shares); the vocabulary from the embedding tensor.
    /// Refuses an architecture the engine does not run and a
    /// configuration [`validate`](Self::validate) refuses.
    pub fn from_gguf(g: &Gguf<'_>) -> Result<ModelConfig, LoadError> {
        let a = architecture(g)?;
        let key = |k: &str| format!("{a}.{k}");
        let blocks = required_uint(g, &key("block_count"))?;
        // The last `nextn_predict_layers` blocks (GLM-4.5's, DeepSeek-V3's)
        // predict further tokens for speculative decoding; the trunk that
        // gives the logits is the blocks before them, as llama.cpp runs it.
        let nextn_key = key("nextn_predict_layers");
        let nextn = uint(g, &nextn_key)?.unwrap_or(0);
        if nextn >= blocks && blocks > 0 {
            return Err(bad(&nextn_key, nextn, "must be fewer than block_count"));
        }
        // Every block has tensors of its own, so a count past the file's
        // tensors is a lie, refused before anything is sized by it (one
        // value per block, say, of a per-layer key given once).
        if blocks as usize > g.tensors().count() {
            return Err(bad(
                &key("block_count"),
                blocks,
                "more layers than the file has tensors",
            ));
        }
        let layers = blocks - nextn.min(blocks);
        let hidden = required_uint(g, &key("embedding_length"))?;
        // A mixture's file may give only its experts' width (Qwen3.5's);
        // a hybrid's may give one per layer, 0 on the layers without an
        // MLP (Nemotron-H's): the widest is the model's.
        let ffn_key = key("feed_forward_length");
        let widest = layer_uints(g, &ffn_key, blocks)?.and_then(|w| w.into_iter().max());
        let ffn = match (uint(g, &key("expert_feed_forward_length"))?, widest) {
            (_, Some(width)) => width,
            (Some(width), None) => width,
            (None, None) => required_uint(g, &ffn_key)?,
        };
        let q_heads = required_uint(g, &key("attention.head_count"))?;
        if q_heads == 0 {
            return Err(super::config::ModelError::ZeroSize("q_heads").into());
        }
        let kv_key = key("attention.head_count_kv");
        let mut kv_heads = kv_heads(a, &kv_key, layer_uints(g, &kv_key, blocks)?, q_heads)?;
        let mut head_dim = match uint(g, &key("attention.key_length"))? {
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
        // DeepSeek's latent attention caches one row a token that every
        // query head reads: the latent (`kv_lora_rank`) then the rotary
        // part, whatever the key and value lengths say (the latent's in
        // files converted for it, a decompressed head's in older ones).
        let latent = a == "deepseek2";
        if latent {
            let rank = required_uint(g, &key("attention.kv_lora_rank"))?;
            let rope = required_uint(g, &key("rope.dimension_count"))?;
            kv_heads = 1;
            head_dim = rank.saturating_add(rope);
        }
        if let Some(v) = uint(g, &key("attention.value_length"))?.filter(|_| !latent) {
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
        // The LayerNorm architectures (Cohere's) name their epsilon
        // without "rms".
        let rms_key = key("attention.layer_norm_rms_epsilon");
        let layer_key = key("attention.layer_norm_epsilon");
        let rms_eps = match float(g, &rms_key)? {
            Some(eps) => eps,
            None => float(g, &layer_key)?.ok_or_else(|| {
                meta(
                    &rms_key,
                    GgufError::MissingKey {
                        key: pagoda_core::gguf::Name::new(rms_key.as_bytes()),
                    },
                )
            })?,
        };
        let max_context = required_uint(g, &key("context_length"))?;
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
