//! A model's weights kept in the memory-mapped GGUF file, in their quantized
//! blocks: each matrix is a view (type, shape, byte range) into the map, so
//! loading copies nothing but the small vectors (norm gains, biases, rope
//! factors), which are dequantized to f32.
//!
//! Rows stay in the file's order. For `llama` files that means the query and
//! key rows are in llama.cpp's interleaved-pair rotary order; the quantized
//! forward pass rotates interleaved pairs for them instead of permuting
//! rows (see [`QuantizedWeights::interleaved_rope`]).

use std::ops::Range;
use std::sync::Arc;

use ndarray::Array1;
use pagoda_core::gguf::Gguf;
use pagoda_core::{dequantize_row, QuantKind};
use pagoda_cpu::{QMatError, QuantMatrix};

use super::config::{ModelConfig, ModelError};
use super::dequant::{tensor, vector};
use super::file::ModelFile;
use super::load::{arch, Arch};
use super::load_error::LoadError;

/// How the quantized pass feeds activations to its matrix products.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ActPrecision {
    /// Unrounded f32, each weight block widened to f32 in registers: the
    /// products add only f32 summation error, so the logits are the dense
    /// path's (within 2e-5 of the logit range of a float64 reference).
    #[default]
    F32,
    /// 8-bit activations on decode steps, where the integer kernels are
    /// the faster ones: products of fewer than
    /// [`INT8_DECODE_ROWS`](Self::INT8_DECODE_ROWS) rows with Q4_0, Q4_1
    /// or K-quant weights, and with Q8_0 weights from
    /// [`INT8_Q8_0_ROWS`](Self::INT8_Q8_0_ROWS) rows; f32 for everything
    /// else. Steps that hold any prompt rows keep f32 although the integer
    /// products are faster there too (Q4_1 at 128 rows: 1.6×): a prompt's
    /// keys and values stay in the cache for every later token and every
    /// request that shares the prefix, so they are computed unrounded, and
    /// a prompt's first token does not depend on how much of it the prefix
    /// cache held (a cached prompt's last few tokens make a short step).
    Int8Decode,
    /// Rounded to 8-bit blocks for every product, as llama.cpp does: every
    /// product adds the rounding, and over 30 layers the logits move by
    /// about 3% of their range, enough to flip a near tie.
    Int8,
}

impl ActPrecision {
    /// The rows from which [`Int8Decode`](Self::Int8Decode) keeps f32
    /// activations on decode steps too (with f32 activations, products of
    /// this many rows widen the weights to f32 panels).
    pub const INT8_DECODE_ROWS: usize = 24;

    /// The rows from which [`Int8Decode`](Self::Int8Decode) rounds for
    /// Q8_0 weights: from there the AVX2 kernel takes four activation rows
    /// per multiply, and runs 1.3× its f32 path at 8 and 16 rows (one row
    /// at a time, the integer products gained 0.9–1.15×).
    pub const INT8_Q8_0_ROWS: usize = 5;

    /// Whether a product of `rows` activation rows with `weights`-typed
    /// weights takes them rounded to 8-bit blocks, in a step that holds
    /// prompt rows (`prompt`) or only decodes.
    ///
    /// The single-threaded kernels, integer against f32, in weight bytes
    /// per second on AVX2 (Zen 2; `cargo bench -p pagoda-cpu --bench
    /// qmatmul`): Q4_1 at 1, 4 and 16 rows 2.4×, 1.9× and 1.9×; Q4_K 2.2×,
    /// 1.9× and 4.5×; Q8_0 0.9× and 1.15× at 1 and 4 rows, 1.3× at 8 and 16.
    pub fn rounds(self, rows: usize, prompt: bool, weights: QuantKind) -> bool {
        match self {
            Self::F32 => false,
            Self::Int8Decode => {
                !prompt
                    && rows < Self::INT8_DECODE_ROWS
                    && match weights {
                        QuantKind::Q4_0
                        | QuantKind::Q4_1
                        | QuantKind::Q4_K
                        | QuantKind::Q5_K
                        | QuantKind::Q6_K => true,
                        QuantKind::Q8_0 => rows >= Self::INT8_Q8_0_ROWS,
                        _ => false,
                    }
            }
            Self::Int8 => true,
        }
    }
}

/// One matrix in the map: `rows` rows (outputs) of `cols` elements (inputs)
/// of `kind`, at `bytes` in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuantTensor {
    kind: QuantKind,
    rows: usize,
    cols: usize,
    bytes: Range<usize>,
}

impl QuantTensor {
    /// Looks up `name`, checks it is `out` rows of `inp` elements and that
    /// its bytes form whole rows, and records where it lies in `file`.
    fn find(
        g: &Gguf<'_>,
        file: &ModelFile,
        name: &str,
        inp: usize,
        out: usize,
    ) -> Result<Self, LoadError> {
        let t = tensor(g, name, &[inp as u64, out as u64])?;
        let data = t.data();
        // The reader hands out sub-slices of the map: their offset in it is
        // the difference of the addresses.
        let start = (data.as_ptr() as usize).wrapping_sub(file.bytes().as_ptr() as usize);
        let bytes = start..start + data.len();
        let qt = QuantTensor {
            kind: t.kind(),
            rows: out,
            cols: inp,
            bytes,
        };
        // Compared by address, not content: reading the bytes would fault
        // the whole file in at load.
        let same = file
            .bytes()
            .get(qt.bytes.clone())
            .is_some_and(|s| std::ptr::eq(s.as_ptr(), data.as_ptr()) && s.len() == data.len());
        if !same {
            return Err(LoadError::Shape {
                tensor: name.to_string(),
                expected: vec![inp as u64, out as u64],
                found: t.dims().to_vec(),
            });
        }
        qt.matrix(file.bytes()).map_err(|e| LoadError::Matrix {
            tensor: name.to_string(),
            source: e,
        })?;
        Ok(qt)
    }

    /// The weight type.
    pub fn kind(&self) -> QuantKind {
        self.kind
    }

    /// Rows (outputs).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Elements per row (inputs).
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Where the tensor's bytes lie in the file.
    pub fn byte_range(&self) -> Range<usize> {
        self.bytes.clone()
    }

    /// The matrix over `file`'s bytes (checked when loaded, so this fails
    /// only for another file).
    pub(super) fn matrix<'a>(&self, file: &'a [u8]) -> Result<QuantMatrix<'a>, QMatError> {
        let data = file.get(self.bytes.clone()).unwrap_or_default();
        QuantMatrix::new(self.kind, self.rows, self.cols, data)
    }

    /// Dequantizes row `r` into `out` (`cols` floats).
    pub(super) fn row_into(
        &self,
        file: &[u8],
        r: usize,
        out: &mut [f32],
    ) -> Result<(), ModelError> {
        let row_bytes = self.bytes.len() / self.rows.max(1);
        let start = self.bytes.start + r * row_bytes;
        let bytes = file
            .get(start..start + row_bytes)
            .ok_or(ModelError::Token {
                token: r as u32,
                vocab: self.rows as u32,
            })?;
        dequantize_row(self.kind, bytes, out).map_err(ModelError::Dequantize)
    }

    fn elems(&self) -> u64 {
        (self.rows * self.cols) as u64
    }
}

/// One decoder layer: matrices in the map, vectors in f32.
#[derive(Debug, Clone)]
pub struct QuantLayer {
    pub(super) attn_norm: Array1<f32>,
    pub(super) wq: QuantTensor,
    pub(super) wk: QuantTensor,
    pub(super) wv: QuantTensor,
    pub(super) bq: Option<Array1<f32>>,
    pub(super) bk: Option<Array1<f32>>,
    pub(super) bv: Option<Array1<f32>>,
    pub(super) wo: QuantTensor,
    pub(super) ffn_norm: Array1<f32>,
    pub(super) w_gate: QuantTensor,
    pub(super) w_up: QuantTensor,
    pub(super) w_down: QuantTensor,
}

/// Every tensor of a GGUF model, matrices left in the shared map.
#[derive(Debug, Clone)]
pub struct QuantizedWeights {
    file: Arc<ModelFile>,
    config: ModelConfig,
    interleaved: bool,
    precision: ActPrecision,
    pub(super) embed: QuantTensor,
    pub(super) layers: Vec<QuantLayer>,
    pub(super) final_norm: Array1<f32>,
    /// `None`: tied to the embedding.
    pub(super) lm_head: Option<QuantTensor>,
    pub(super) rope_factors: Option<Array1<f32>>,
}

impl QuantizedWeights {
    /// The weights of `file` for `config` (from [`ModelConfig::from_gguf`]
    /// on the same file): every tensor looked up and shape-checked, the
    /// matrices recorded as ranges of the map.
    pub fn from_file(file: Arc<ModelFile>, config: ModelConfig) -> Result<Self, LoadError> {
        config.validate()?;
        let g = file.gguf()?;
        let (arch, _) = arch(&g)?;
        let (v, h, q, kv, f) = (
            config.vocab as usize,
            config.hidden as usize,
            config.q_dim(),
            config.kv_dim(),
            config.ffn as usize,
        );
        let m = |name: &str, inp: usize, out: usize| QuantTensor::find(&g, &file, name, inp, out);
        let bias = |name: String, len: usize| -> Result<Option<Array1<f32>>, LoadError> {
            if arch != Arch::Qwen2 && g.tensor(&name).is_none() {
                return Ok(None);
            }
            Ok(Some(vector(&g, &name, len)?))
        };
        let embed = m("token_embd.weight", h, v)?;
        let mut layers = Vec::with_capacity(config.layers as usize);
        for i in 0..config.layers {
            let n = |t: &str| format!("blk.{i}.{t}");
            layers.push(QuantLayer {
                attn_norm: vector(&g, &n("attn_norm.weight"), h)?,
                wq: m(&n("attn_q.weight"), h, q)?,
                wk: m(&n("attn_k.weight"), h, kv)?,
                wv: m(&n("attn_v.weight"), h, kv)?,
                bq: bias(n("attn_q.bias"), q)?,
                bk: bias(n("attn_k.bias"), kv)?,
                bv: bias(n("attn_v.bias"), kv)?,
                wo: m(&n("attn_output.weight"), q, h)?,
                ffn_norm: vector(&g, &n("ffn_norm.weight"), h)?,
                w_gate: m(&n("ffn_gate.weight"), h, f)?,
                w_up: m(&n("ffn_up.weight"), h, f)?,
                w_down: m(&n("ffn_down.weight"), f, h)?,
            });
        }
        let final_norm = vector(&g, "output_norm.weight", h)?;
        let lm_head = match g.tensor("output.weight") {
            Some(_) => Some(m("output.weight", h, v)?),
            None => None,
        };
        let rope_factors = match g.tensor("rope_freqs.weight") {
            Some(_) => {
                let factors = vector(&g, "rope_freqs.weight", config.rope_dim as usize / 2)?;
                if !factors.iter().all(|x| x.is_finite() && *x > 0.0) {
                    return Err(ModelError::NonFinite.into());
                }
                Some(factors)
            }
            None => None,
        };
        Ok(Self {
            file,
            config,
            interleaved: arch == Arch::Llama,
            precision: ActPrecision::default(),
            embed,
            layers,
            final_norm,
            lm_head,
            rope_factors,
        })
    }

    /// The same weights, run with activations at `precision`.
    pub fn with_precision(mut self, precision: ActPrecision) -> Self {
        self.precision = precision;
        self
    }

    /// How the forward pass feeds activations to the products.
    pub fn precision(&self) -> ActPrecision {
        self.precision
    }

    /// The configuration the tensors were checked against.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// The mapped file the matrices live in.
    pub fn file(&self) -> &Arc<ModelFile> {
        &self.file
    }

    /// Whether query and key rows are in interleaved-pair rotary order (a
    /// `llama` file), rather than rotate-half (`qwen2`).
    pub fn interleaved_rope(&self) -> bool {
        self.interleaved
    }

    /// Token embedding, `vocab` rows of `hidden`.
    pub fn embed(&self) -> &QuantTensor {
        &self.embed
    }

    /// Output head, `vocab` rows of `hidden`: the embedding when tied.
    pub fn lm_head(&self) -> &QuantTensor {
        self.lm_head.as_ref().unwrap_or(&self.embed)
    }

    /// Whether the output head is the embedding.
    pub fn is_tied(&self) -> bool {
        self.lm_head.is_none()
    }

    /// Divisors of the rotary frequencies, if any.
    pub fn rope_factors(&self) -> Option<&Array1<f32>> {
        self.rope_factors.as_ref()
    }

    /// Whether every layer has query, key and value biases.
    pub fn has_biases(&self) -> bool {
        self.layers
            .iter()
            .all(|l| l.bq.is_some() && l.bk.is_some() && l.bv.is_some())
    }

    /// Parameters held: a tied head counts once, biases count.
    pub fn parameters(&self) -> u64 {
        let len = |b: &Option<Array1<f32>>| b.as_ref().map_or(0, |b| b.len() as u64);
        let layers: u64 = self
            .layers
            .iter()
            .map(|l| {
                [&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down]
                    .iter()
                    .map(|t| t.elems())
                    .sum::<u64>()
                    + (l.attn_norm.len() + l.ffn_norm.len()) as u64
                    + len(&l.bq)
                    + len(&l.bk)
                    + len(&l.bv)
            })
            .sum();
        let head = self.lm_head.as_ref().map_or(0, QuantTensor::elems);
        self.embed.elems() + layers + self.final_norm.len() as u64 + head
    }

    /// Bytes a decode step reads for the matrices (the blocks in the map;
    /// a tied head's once) plus the f32 vectors: what bounds decode speed.
    pub fn weight_bytes(&self) -> u64 {
        let bytes = |t: &QuantTensor| t.byte_range().len() as u64;
        let vector = |b: &Option<Array1<f32>>| b.as_ref().map_or(0, |b| 4 * b.len() as u64);
        let layers: u64 = self
            .layers
            .iter()
            .map(|l| {
                [&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down]
                    .iter()
                    .map(|t| bytes(t))
                    .sum::<u64>()
                    + 4 * (l.attn_norm.len() + l.ffn_norm.len()) as u64
                    + vector(&l.bq)
                    + vector(&l.bk)
                    + vector(&l.bv)
            })
            .sum();
        let head = self.lm_head.as_ref().map_or(bytes(&self.embed), bytes);
        layers + 4 * self.final_norm.len() as u64 + head
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int8_decode_rounds_decode_steps_where_the_integer_kernels_win() {
        let p = ActPrecision::Int8Decode;
        assert!(p.rounds(1, false, QuantKind::Q4_1));
        assert!(p.rounds(16, false, QuantKind::Q4_K));
        // Any prompt row keeps the step f32, however short.
        assert!(!p.rounds(1, true, QuantKind::Q4_1));
        assert!(!p.rounds(ActPrecision::INT8_DECODE_ROWS, false, QuantKind::Q4_1));
        // Q8_0 only where four rows share each multiply.
        assert!(!p.rounds(ActPrecision::INT8_Q8_0_ROWS - 1, false, QuantKind::Q8_0));
        assert!(p.rounds(ActPrecision::INT8_Q8_0_ROWS, false, QuantKind::Q8_0));
        assert!(!p.rounds(8, false, QuantKind::F16));
        assert!(!ActPrecision::F32.rounds(1, false, QuantKind::Q4_1));
        assert!(ActPrecision::Int8.rounds(512, true, QuantKind::Q8_0));
    }
}
