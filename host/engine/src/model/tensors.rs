//! The model's matrices, whatever their format: one [`Matrix`] type whose
//! weight format (F32, F16, BF16 or a block type) is a property of the
//! tensor, not a code path. A matrix is `rows` outputs of `cols` inputs in
//! GGUF's row layout, its bytes either a range of the memory-mapped file
//! (loading copies nothing) or f32 rows the loader made (a dequantized file,
//! the seeded model). A view of some of its rows is a matrix too, which is
//! how fused tensors (`attn_qkv`, a fused gate/up) are split.

use std::ops::Range;
use std::sync::Arc;

use pagoda_core::{dequantize_row, QuantKind};
use pagoda_cpu::{QMatError, QuantMatrix};

use super::config::ModelError;
use super::file::ModelFile;

/// Where a matrix's bytes are.
#[derive(Debug, Clone)]
enum Bytes {
    /// A byte range of the mapped file.
    Mapped {
        file: Arc<ModelFile>,
        range: Range<usize>,
    },
    /// A range of f32 values the loader made.
    Owned {
        // A `Vec` behind the `Arc`, not a slice: turning the loader's
        // `Vec` into an `Arc<[f32]>` would copy every dense matrix.
        values: Arc<Vec<f32>>,
        range: Range<usize>,
    },
}

/// One weight matrix: `rows` outputs of `cols` inputs of `kind`, rows back
/// to back (checked whole when made, so every accessor below is total).
#[derive(Debug, Clone)]
pub struct Matrix {
    kind: QuantKind,
    rows: usize,
    cols: usize,
    bytes: Bytes,
}

impl Matrix {
    /// A matrix over `range` of `file`, checked to hold exactly `rows` rows
    /// of `cols` elements of `kind`.
    pub(super) fn mapped(
        file: Arc<ModelFile>,
        range: Range<usize>,
        kind: QuantKind,
        rows: usize,
        cols: usize,
    ) -> Result<Self, QMatError> {
        let data = file.bytes().get(range.clone()).unwrap_or_default();
        QuantMatrix::new(kind, rows, cols, data)?;
        Ok(Self {
            kind,
            rows,
            cols,
            bytes: Bytes::Mapped { file, range },
        })
    }

    /// An f32 matrix over `values`, `rows` rows of `cols`.
    pub(super) fn dense(values: Vec<f32>, rows: usize, cols: usize) -> Result<Self, ModelError> {
        if values.len() != rows * cols {
            return Err(ModelError::Shape {
                name: "matrix".into(),
                expected: vec![rows, cols],
                found: vec![values.len()],
            });
        }
        let len = values.len();
        Ok(Self {
            kind: QuantKind::F32,
            rows,
            cols,
            bytes: Bytes::Owned {
                values: Arc::new(values),
                range: 0..len,
            },
        })
    }

    /// The weight format.
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

    /// The matrix's bytes, rows back to back.
    pub fn bytes(&self) -> &[u8] {
        match &self.bytes {
            Bytes::Mapped { file, range } => file.bytes().get(range.clone()).unwrap_or_default(),
            Bytes::Owned { values, range } => bytemuck::cast_slice(&values[range.clone()]),
        }
    }

    /// Bytes the matrix takes (what a decode step reads of it).
    pub fn byte_len(&self) -> u64 {
        match &self.bytes {
            Bytes::Mapped { range, .. } => range.len() as u64,
            Bytes::Owned { range, .. } => 4 * range.len() as u64,
        }
    }

    /// Elements held.
    pub fn elems(&self) -> u64 {
        (self.rows * self.cols) as u64
    }

    /// The f32 rows, when the matrix is f32 and aligned for them: the dense
    /// general product reads them as a matrix.
    pub fn f32_rows(&self) -> Option<&[f32]> {
        match &self.bytes {
            Bytes::Owned { values, range } => Some(&values[range.clone()]),
            Bytes::Mapped { .. } if self.kind == QuantKind::F32 => {
                bytemuck::try_cast_slice(self.bytes()).ok()
            }
            Bytes::Mapped { .. } => None,
        }
    }

    /// The matrix for the products.
    pub fn quant_matrix(&self) -> Result<QuantMatrix<'_>, QMatError> {
        QuantMatrix::new(self.kind, self.rows, self.cols, self.bytes())
    }

    /// Rows `rows` of this matrix (the outputs of a fused tensor that one
    /// product computes); `None` past its end.
    pub fn view(&self, rows: Range<usize>) -> Option<Matrix> {
        if rows.start > rows.end || rows.end > self.rows {
            return None;
        }
        let row_len = match &self.bytes {
            Bytes::Mapped { range, .. } => range.len() / self.rows.max(1),
            Bytes::Owned { .. } => self.cols,
        };
        let narrow =
            |r: &Range<usize>| r.start + rows.start * row_len..r.start + rows.end * row_len;
        let bytes = match &self.bytes {
            Bytes::Mapped { file, range } => Bytes::Mapped {
                file: Arc::clone(file),
                range: narrow(range),
            },
            Bytes::Owned { values, range } => Bytes::Owned {
                values: Arc::clone(values),
                range: narrow(range),
            },
        };
        Some(Matrix {
            kind: self.kind,
            rows: rows.len(),
            cols: self.cols,
            bytes,
        })
    }

    /// Dequantizes row `r` into `out` (`cols` floats): an embedding lookup.
    pub fn row_into(&self, r: usize, out: &mut [f32]) -> Result<(), ModelError> {
        let row_bytes = self.bytes().len() / self.rows.max(1);
        let bytes =
            self.bytes()
                .get(r * row_bytes..(r + 1) * row_bytes)
                .ok_or(ModelError::Token {
                    token: r as u32,
                    vocab: self.rows as u32,
                })?;
        dequantize_row(self.kind, bytes, out).map_err(ModelError::Dequantize)
    }

    /// Every row dequantized to f32, `rows × cols`: a dense copy (tests'
    /// references, and the dense loader).
    pub fn to_f32(&self) -> Result<Vec<f32>, ModelError> {
        let mut out = vec![0.0; self.rows * self.cols];
        for (r, row) in out.chunks_exact_mut(self.cols.max(1)).enumerate() {
            self.row_into(r, row)?;
        }
        Ok(out)
    }

    /// Whether both are the same bytes (a tied head).
    pub(super) fn same_as(&self, other: &Matrix) -> bool {
        match (&self.bytes, &other.bytes) {
            (Bytes::Mapped { file: a, range: r }, Bytes::Mapped { file: b, range: s }) => {
                Arc::ptr_eq(a, b) && r == s
            }
            (
                Bytes::Owned {
                    values: a,
                    range: r,
                },
                Bytes::Owned {
                    values: b,
                    range: s,
                },
            ) => Arc::ptr_eq(a, b) && r == s,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_take_whole_rows() {
        let m = Matrix::dense((0..12).map(|v| v as f32).collect(), 4, 3).unwrap();
        let v = m.view(1..3).unwrap();
        assert_eq!((v.rows(), v.cols()), (2, 3));
        assert_eq!(v.f32_rows().unwrap(), &[3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
        assert_eq!(v.to_f32().unwrap(), v.f32_rows().unwrap());
        assert!(m.view(3..5).is_none());
        assert!(m.same_as(&m.clone()) && !m.same_as(&v));
    }
}
