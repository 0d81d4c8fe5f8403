//! The bytes a model's weights take on the device, and where each tensor
//! of its [`Program`] lies in them: every matrix as GGUF rows in its own
//! format (a file's quantized blocks as they are, f32 rows as they are;
//! BF16, which no device kernel reads, widened to f32),
//! then the f32 vectors (norm gains) and the rotary tables. Biases are added
//! from the activations (the add op reads only those), so they are kept
//! apart, in [`Image::consts`].

use pagoda_core::QuantKind;

use super::super::program::{Op, Program};
use super::super::rope::RopeMode;
use super::super::tensors::Matrix;

/// Where tensors start: every kernel reads whole words, and 16 keeps any
/// block type's rows word-aligned.
const ALIGN: usize = 16;

/// A matrix in the image: `rows` outputs of `cols` inputs in `kind` blocks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Placed {
    pub kind: QuantKind,
    pub at: u64,
    pub rows: u32,
    pub cols: u32,
}

/// What one op of the program reads from the image.
#[derive(Debug, Clone)]
pub(crate) enum Placement {
    /// Nothing (rotary reads the tables; attention the KV store).
    None,
    /// A norm's gains, at this byte offset.
    Gains(u64),
    /// A linear op's matrices, each with where its bias starts in
    /// [`Image::consts`].
    Products(Vec<(Placed, Option<u32>)>),
}

/// A rotary table in the image: cosines and sines, `rows` positions of
/// `half` values each.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct RopeTable {
    pub cos: u64,
    pub sin: u64,
    /// Positions the table covers.
    pub rows: u32,
    /// Pairs `(2i, 2i+1)` rather than `(i, i + half)`.
    pub interleaved: bool,
}

/// A model's weights laid out for the device.
#[derive(Debug)]
pub(crate) struct Image {
    pub bytes: Vec<u8>,
    pub embed: Placed,
    pub head: Placed,
    /// Per layer, per op of the program.
    pub layers: Vec<Vec<Placement>>,
    pub final_norm: u64,
    /// Each rotary table of the program, in its order.
    pub ropes: Vec<RopeTable>,
    /// Values every step starts its activations with (the biases).
    pub consts: Vec<f32>,
    /// Where the image may be split across storage bindings: the start of
    /// every tensor but a rotary table's sines (which the rotary op reads
    /// with its cosines).
    pub cuts: Vec<u64>,
}

/// Lays tensors out one after another.
struct Builder {
    bytes: Vec<u8>,
    cuts: Vec<u64>,
}

impl Builder {
    fn start(&mut self) -> u64 {
        let at = self.bytes.len().next_multiple_of(ALIGN);
        self.bytes.resize(at, 0);
        self.cuts.push(at as u64);
        at as u64
    }

    fn raw(&mut self, bytes: &[u8]) -> u64 {
        let at = self.start();
        self.bytes.extend_from_slice(bytes);
        at
    }

    fn f32s(&mut self, values: &[f32]) -> u64 {
        self.raw(bytemuck::cast_slice(values))
    }

    /// A matrix in its own format; BF16 (which the device's kernels do
    /// not read) widened to f32, exactly.
    fn matrix(&mut self, m: &Matrix) -> Placed {
        let (kind, at) = match m.kind() {
            QuantKind::BF16 => {
                let at = self.start();
                let plain = m.plain_bytes();
                let halves = plain.chunks_exact(2);
                let widened = halves.flat_map(|h| {
                    ((u32::from(u16::from_le_bytes([h[0], h[1]]))) << 16).to_le_bytes()
                });
                self.bytes.extend(widened);
                (QuantKind::F32, at)
            }
            kind => (kind, self.raw(&m.plain_bytes())),
        };
        Placed {
            kind,
            at,
            rows: m.rows() as u32,
            cols: m.cols() as u32,
        }
    }
}

impl Image {
    /// The image of `program`'s weights (copied; the model keeps its own).
    pub fn new(program: &Program) -> Self {
        let mut b = Builder {
            bytes: Vec::new(),
            cuts: Vec::new(),
        };
        let mut consts = Vec::new();
        let embed = b.matrix(&program.embed);
        let head = if program.is_tied() {
            embed
        } else {
            b.matrix(&program.head)
        };
        let layers = program
            .layers
            .iter()
            .map(|ops| {
                ops.iter()
                    .map(|op| match op {
                        Op::Norm { gain, .. } => Placement::Gains(b.f32s(gain)),
                        Op::Linear { projs, .. } => Placement::Products(
                            projs
                                .iter()
                                .map(|p| {
                                    let bias = p.bias.as_ref().map(|bias| {
                                        let at = consts.len() as u32;
                                        consts.extend_from_slice(bias);
                                        at
                                    });
                                    (b.matrix(&p.w), bias)
                                })
                                .collect(),
                        ),
                        _ => Placement::None,
                    })
                    .collect()
            })
            .collect();
        let final_norm = b.f32s(&program.final_norm);
        let ropes = program
            .ropes
            .iter()
            .map(|rope| {
                let (cos, sin) = rope.tables();
                let (cos, sin) = (b.f32s(&cos), b.f32s(&sin));
                // The sines go in the cosines' binding.
                b.cuts.pop();
                RopeTable {
                    cos,
                    sin,
                    rows: rope.positions() as u32,
                    interleaved: rope.mode == RopeMode::Interleaved,
                }
            })
            .collect();
        Self {
            embed,
            head,
            layers,
            final_norm,
            ropes,
            consts,
            bytes: b.bytes,
            cuts: b.cuts,
        }
    }
}
