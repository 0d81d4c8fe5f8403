//! The bytes a model's weights take on the device, and where each tensor
//! lies in them: matrices as GGUF rows (a file's quantized blocks as they
//! are, a dense model's f32 transposed to output rows), then the f32
//! vectors (norm gains) and the rotary tables. Biases are added from the
//! activations (the add op reads only those), so they are kept apart.

use ndarray::{Array1, ArrayView2, Axis};
use pagoda_core::QuantKind;

use super::super::forward::Model;
use super::super::quantized::QuantTensor;

/// Where tensors start: every kernel reads whole words, and 16 keeps any
/// block type's rows word-aligned.
const ALIGN: usize = 16;

/// A matrix in the image: `rows` outputs of `cols` inputs in `kind` blocks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Matrix {
    pub kind: QuantKind,
    pub at: u64,
    pub rows: u32,
    pub cols: u32,
}

/// One decoder layer in the image.
#[derive(Debug, Clone)]
pub(crate) struct Layer {
    pub attn_norm: u64,
    pub wq: Matrix,
    pub wk: Matrix,
    pub wv: Matrix,
    /// Where the query, key and value biases start in [`Image::consts`].
    pub biases: [Option<u32>; 3],
    pub wo: Matrix,
    pub ffn_norm: u64,
    pub gate: Matrix,
    pub up: Matrix,
    pub down: Matrix,
}

/// A model's weights laid out for the device.
#[derive(Debug)]
pub(crate) struct Image {
    pub bytes: Vec<u8>,
    pub embed: Matrix,
    pub head: Matrix,
    pub layers: Vec<Layer>,
    pub final_norm: u64,
    pub cos: u64,
    pub sin: u64,
    /// Positions the rotary tables cover.
    pub table_rows: u32,
    /// Values every step starts its activations with (the biases).
    pub consts: Vec<f32>,
    /// Bytes laid out.
    pub len: u64,
}

/// Lays tensors out one after another; while `counting` it only adds up
/// their sizes (to refuse a model too large before copying anything).
struct Builder {
    bytes: Vec<u8>,
    len: usize,
    counting: bool,
}

impl Builder {
    fn start(&mut self) -> u64 {
        self.len = self.len.next_multiple_of(ALIGN);
        if !self.counting {
            self.bytes.resize(self.len, 0);
        }
        self.len as u64
    }

    fn put(&mut self, count: usize, values: impl IntoIterator<Item = f32>) {
        self.len += 4 * count;
        if !self.counting {
            for v in values {
                self.bytes.extend_from_slice(&v.to_le_bytes());
            }
        }
    }

    fn f32s(&mut self, values: &Array1<f32>) -> u64 {
        let at = self.start();
        self.put(values.len(), values.iter().copied());
        at
    }

    fn table(&mut self, values: &[f32]) -> u64 {
        let at = self.start();
        self.put(values.len(), values.iter().copied());
        at
    }

    /// A dense `[in, out]` matrix as `out` f32 rows of `in`.
    fn dense(&mut self, w: ArrayView2<'_, f32>) -> Matrix {
        let at = self.start();
        let columns = w.axis_iter(Axis(1)).flat_map(|c| c.into_iter().copied());
        self.put(w.len(), columns);
        Matrix {
            kind: QuantKind::F32,
            at,
            rows: w.ncols() as u32,
            cols: w.nrows() as u32,
        }
    }

    /// A matrix of the mapped file, its blocks as they are.
    fn quantized(&mut self, file: &[u8], t: &QuantTensor) -> Matrix {
        let at = self.start();
        let bytes = file.get(t.byte_range()).unwrap_or_default();
        self.len += bytes.len();
        if !self.counting {
            self.bytes.extend_from_slice(bytes);
        }
        Matrix {
            kind: t.kind(),
            at,
            rows: t.rows() as u32,
            cols: t.cols() as u32,
        }
    }
}

/// Appends the biases a layer has to `consts`; returns where each starts.
fn biases(consts: &mut Vec<f32>, b: [Option<&Array1<f32>>; 3]) -> [Option<u32>; 3] {
    b.map(|bias| {
        bias.map(|bias| {
            let at = consts.len() as u32;
            consts.extend(bias.iter());
            at
        })
    })
}

impl Image {
    /// The bytes [`Image::new`] would lay out for `model`.
    pub fn size(model: &Model) -> u64 {
        Self::build(model, true).map_or(0, |image| image.len)
    }

    /// The image of `model`'s weights (copied; the model keeps its own).
    pub fn new(model: &Model) -> Option<Self> {
        Self::build(model, false)
    }

    fn build(model: &Model, counting: bool) -> Option<Self> {
        let mut b = Builder {
            bytes: Vec::new(),
            len: 0,
            counting,
        };
        let mut consts = Vec::new();
        let (embed, head, layers, final_norm) = if let Some(w) = model.weights() {
            let embed = b.dense(w.embed.t());
            let head = match &w.lm_head {
                Some(head) => b.dense(head.view()),
                None => embed,
            };
            let layers = w
                .layers
                .iter()
                .map(|l| Layer {
                    attn_norm: b.f32s(&l.attn_norm),
                    wq: b.dense(l.wq.view()),
                    wk: b.dense(l.wk.view()),
                    wv: b.dense(l.wv.view()),
                    biases: biases(&mut consts, [l.bq.as_ref(), l.bk.as_ref(), l.bv.as_ref()]),
                    wo: b.dense(l.wo.view()),
                    ffn_norm: b.f32s(&l.ffn_norm),
                    gate: b.dense(l.w_gate.view()),
                    up: b.dense(l.w_up.view()),
                    down: b.dense(l.w_down.view()),
                })
                .collect();
            (embed, head, layers, b.f32s(&w.final_norm))
        } else if let Some(w) = model.quantized_weights() {
            let file = w.file().bytes();
            let embed = b.quantized(file, w.embed());
            let head = match w.is_tied() {
                true => embed,
                false => b.quantized(file, w.lm_head()),
            };
            let layers = w
                .layers
                .iter()
                .map(|l| Layer {
                    attn_norm: b.f32s(&l.attn_norm),
                    wq: b.quantized(file, &l.wq),
                    wk: b.quantized(file, &l.wk),
                    wv: b.quantized(file, &l.wv),
                    biases: biases(&mut consts, [l.bq.as_ref(), l.bk.as_ref(), l.bv.as_ref()]),
                    wo: b.quantized(file, &l.wo),
                    ffn_norm: b.f32s(&l.ffn_norm),
                    gate: b.quantized(file, &l.w_gate),
                    up: b.quantized(file, &l.w_up),
                    down: b.quantized(file, &l.w_down),
                })
                .collect();
            (embed, head, layers, b.f32s(&w.final_norm))
        } else {
            return None;
        };
        let (cos, sin, _) = model.rope_tables();
        let half = (model.config().rope_dim / 2).max(1) as usize;
        Some(Self {
            embed,
            head,
            layers,
            final_norm,
            cos: b.table(cos),
            sin: b.table(sin),
            table_rows: (cos.len() / half) as u32,
            consts,
            len: b.len as u64,
            bytes: b.bytes,
        })
    }
}
