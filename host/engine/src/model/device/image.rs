//! The bytes a model's weights take on the device, and where each tensor
//! of its [`Program`] lies in them: every matrix as GGUF rows in its own
//! format (a file's quantized blocks as they are, f32 rows as they are;
//! BF16, which no device kernel reads, widened to f32),
//! then the f32 vectors (norm gains) and the rotary tables. Biases are added
//! from the activations (the add op reads only those), so they are kept
//! apart, in [`Image::consts`].

use std::borrow::Cow;

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

/// The bytes of an [`Image`], as parts at their offsets: views of the
/// model's map where a tensor is in the device's format, owned bytes where
/// it is not (tables, widened BF16). Nothing is copied until the upload
/// copies each part into its staging piece ([`ImageBytes::fill`]), so
/// loading holds no second copy of the weights on the host.
#[derive(Debug, Default)]
pub(crate) struct ImageBytes<'a> {
    parts: Vec<(u64, Cow<'a, [u8]>)>,
    len: u64,
}

impl ImageBytes<'_> {
    /// The image's length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Copies the image's bytes from offset `at` into `dst` (zeros
    /// between parts and past the last), writing each byte once.
    pub fn fill(&self, at: u64, dst: &mut [u8]) {
        let end = at + dst.len() as u64;
        // The first part that ends after `at`; parts are in order and
        // do not overlap.
        let first = self
            .parts
            .partition_point(|(start, bytes)| start + bytes.len() as u64 <= at);
        let mut written = at;
        for (start, bytes) in &self.parts[first..] {
            if *start >= end {
                break;
            }
            let from = at.max(*start);
            let to = end.min(start + bytes.len() as u64);
            dst[(written - at) as usize..(from - at) as usize].fill(0);
            dst[(from - at) as usize..(to - at) as usize]
                .copy_from_slice(&bytes[(from - start) as usize..(to - start) as usize]);
            written = to;
        }
        dst[(written - at) as usize..].fill(0);
    }
}

/// Lays tensors out one after another.
struct Builder<'a> {
    bytes: ImageBytes<'a>,
    cuts: Vec<u64>,
}

impl<'a> Builder<'a> {
    fn start(&mut self) -> u64 {
        let at = self.bytes.len.next_multiple_of(ALIGN as u64);
        self.bytes.len = at;
        self.cuts.push(at);
        at
    }

    fn raw(&mut self, bytes: Cow<'a, [u8]>) -> u64 {
        let at = self.start();
        self.bytes.len += bytes.len() as u64;
        self.bytes.parts.push((at, bytes));
        at
    }

    fn f32s(&mut self, values: &[f32]) -> u64 {
        self.raw(Cow::Owned(bytemuck::cast_slice(values).to_vec()))
    }

    /// A matrix in its own format; BF16 (which the device's kernels do
    /// not read) widened to f32, exactly.
    fn matrix(&mut self, m: &'a Matrix) -> Placed {
        let (kind, at) = match m.kind() {
            QuantKind::BF16 => {
                let plain = m.plain_bytes();
                let halves = plain.chunks_exact(2);
                let widened = halves
                    .flat_map(|h| {
                        ((u32::from(u16::from_le_bytes([h[0], h[1]]))) << 16).to_le_bytes()
                    })
                    .collect();
                (QuantKind::F32, self.raw(Cow::Owned(widened)))
            }
            kind => (kind, self.raw(m.plain_bytes())),
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
    /// The layout of `program`'s weights on the device, and their bytes
    /// (borrowed from the model where they can be).
    pub fn new(program: &Program) -> (Self, ImageBytes<'_>) {
        let mut b = Builder {
            bytes: ImageBytes::default(),
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
        let image = Self {
            embed,
            head,
            layers,
            final_norm,
            ropes,
            consts,
            cuts: b.cuts,
        };
        (image, b.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `fill` gives any window of the image as one buffer built part by
    /// part would hold it: each part at its aligned offset, zeros between
    /// and past the parts.
    #[test]
    fn fill_matches_the_image_laid_out_whole() {
        let mut rng = fastrand::Rng::with_seed(5);
        for _ in 0..50 {
            let mut b = Builder {
                bytes: ImageBytes::default(),
                cuts: Vec::new(),
            };
            let mut whole: Vec<u8> = Vec::new();
            for _ in 0..rng.usize(0..8) {
                let part: Vec<u8> = (0..rng.usize(0..100)).map(|_| rng.u8(1..)).collect();
                let at = b.raw(Cow::Owned(part.clone())) as usize;
                assert_eq!(at % ALIGN, 0);
                whole.resize(at, 0);
                whole.extend_from_slice(&part);
            }
            assert_eq!(b.bytes.len(), whole.len() as u64);
            // Windows anywhere, some past the end (the upload's padding).
            whole.resize(whole.len() + 40, 0);
            for _ in 0..20 {
                let at = rng.usize(0..whole.len());
                let len = rng.usize(0..=whole.len() - at);
                let mut got = vec![0xAAu8; len];
                b.bytes.fill(at as u64, &mut got);
                assert_eq!(got, whole[at..at + len], "window {at}+{len}");
            }
        }
    }
}
