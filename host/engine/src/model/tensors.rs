//! The model's matrices, whatever their format: one [`Matrix`] type whose
//! weight format (F32, F16, BF16 or a block type) is a property of the
//! tensor, not a code path. A matrix is `rows` outputs of `cols` inputs in
//! GGUF's row layout, its bytes either a range of the memory-mapped file
//! (loading copies nothing) or f32 rows the loader made (a dequantized file,
//! the seeded model). A view of some of its rows is a matrix too, which is
//! how fused tensors (`attn_qkv`, a fused gate/up) are split.

use std::borrow::Cow;
use std::ops::Range;
use std::sync::Arc;

use memmap2::{Advice, Mmap, MmapMut};
use pagoda_core::{dequantize_row, QuantKind};
use pagoda_cpu::quant::interleave;
use pagoda_cpu::{QMatError, QuantMatrix};

use super::config::ModelError;
use super::file::ModelFile;
use super::repack_cache::{Origin, RepackCache};

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
    /// Whole groups of rows interleaved eight at a time
    /// ([`pagoda_cpu::quant::interleave`]), a byte range of a copy the
    /// loader made, and the file bytes it was made from (so a head tied
    /// to the embedding stays tied). The copy is the loader's, or a
    /// repack cache file's.
    Interleaved {
        data: Arc<Mmap>,
        range: Range<usize>,
        origin: Option<(Arc<ModelFile>, Range<usize>)>,
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

    /// The matrix's bytes as held: rows back to back, or interleaved (see
    /// [`plain_bytes`](Self::plain_bytes)).
    pub fn bytes(&self) -> &[u8] {
        match &self.bytes {
            Bytes::Mapped { file, range } => file.bytes().get(range.clone()).unwrap_or_default(),
            Bytes::Owned { values, range } => bytemuck::cast_slice(&values[range.clone()]),
            Bytes::Interleaved { data, range, .. } => &data[range.clone()],
        }
    }

    /// The matrix's rows in GGUF's layout, back to back (a copy when they
    /// are held interleaved): what a device upload reads.
    pub fn plain_bytes(&self) -> Cow<'_, [u8]> {
        if !self.is_interleaved() {
            return Cow::Borrowed(self.bytes());
        }
        let row_bytes = self.kind.bytes_for(self.cols).unwrap_or(0);
        let mut out = vec![0u8; self.rows * row_bytes];
        for (r, row) in out.chunks_exact_mut(row_bytes.max(1)).enumerate() {
            interleave::plain_row(self.kind, self.cols, self.bytes(), r, row);
        }
        Cow::Owned(out)
    }

    /// The range of the mapped file the matrix reads, if it reads the map.
    pub(super) fn file_range(&self) -> Option<Range<usize>> {
        match &self.bytes {
            Bytes::Mapped { range, .. } => Some(range.clone()),
            _ => None,
        }
    }

    /// The range of the mapped file an interleaved copy was made from.
    pub(super) fn copied_from(&self) -> Option<Range<usize>> {
        match &self.bytes {
            Bytes::Interleaved {
                origin: Some((_, range)),
                ..
            } => Some(range.clone()),
            _ => None,
        }
    }

    /// Whether the rows are held interleaved.
    pub fn is_interleaved(&self) -> bool {
        matches!(self.bytes, Bytes::Interleaved { .. })
    }

    /// Bytes the matrix takes (what a decode step reads of it).
    pub fn byte_len(&self) -> u64 {
        match &self.bytes {
            Bytes::Mapped { range, .. } | Bytes::Interleaved { range, .. } => range.len() as u64,
            Bytes::Owned { range, .. } => 4 * range.len() as u64,
        }
    }

    /// This matrix with its rows interleaved eight at a time in a copy
    /// (`None` where the type has no interleaved kernels on this CPU, or
    /// the matrix is f32 or already interleaved): `cache`'s, where it holds
    /// this matrix, else made now (and noted in `cache`). The copy's source
    /// pages in the map are not needed again: [`ModelFile::release`] lets
    /// them go.
    pub(super) fn interleaved(
        &self,
        cache: Option<&RepackCache>,
    ) -> Result<Option<Matrix>, QMatError> {
        let in_place = interleave::multiplies_in_place(pagoda_cpu::Isa::detect(), self.kind);
        let Bytes::Mapped { file, range } = &self.bytes else {
            return Ok(None);
        };
        if !in_place {
            return Ok(None);
        }
        let len = interleave::interleaved_len(self.kind, self.rows, self.cols)?;
        let origin = Origin {
            range: range.clone(),
            kind: self.kind,
            rows: self.rows,
            cols: self.cols,
        };
        let found = cache.and_then(|c| c.find(&origin, len));
        let (data, at) = match found {
            Some(found) => found,
            None => {
                let Some(mut data) = huge_pages(len) else {
                    // No memory for the copy: the plain layout in the map serves.
                    return Ok(None);
                };
                self.interleave_into(&mut data[..len])?;
                let Ok(data) = data.make_read_only() else {
                    return Ok(None);
                };
                let data = Arc::new(data);
                if let Some(cache) = cache {
                    cache.made(origin, Arc::clone(&data), 0..len);
                }
                (data, 0..len)
            }
        };
        Ok(Some(Matrix {
            kind: self.kind,
            rows: self.rows,
            cols: self.cols,
            bytes: Bytes::Interleaved {
                data,
                range: at,
                origin: Some((Arc::clone(file), range.clone())),
            },
        }))
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
            Bytes::Mapped { .. } | Bytes::Interleaved { .. } => None,
        }
    }

    /// The matrix for the products.
    pub fn quant_matrix(&self) -> Result<QuantMatrix<'_>, QMatError> {
        if self.is_interleaved() {
            QuantMatrix::interleaved(self.kind, self.rows, self.cols, self.bytes())
        } else {
            QuantMatrix::new(self.kind, self.rows, self.cols, self.bytes())
        }
    }

    /// Rows `rows` of this matrix (the outputs of a fused tensor that one
    /// product computes); `None` past its end.
    pub fn view(&self, rows: Range<usize>) -> Option<Matrix> {
        if rows.start > rows.end || rows.end > self.rows {
            return None;
        }
        if let Bytes::Interleaved {
            data,
            range,
            origin,
        } = &self.bytes
        {
            return self.interleaved_view(data, range, origin, rows);
        }
        let row_len = match &self.bytes {
            Bytes::Owned { .. } => self.cols,
            _ => self.bytes().len() / self.rows.max(1),
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
            Bytes::Interleaved { .. } => unreachable!("returned above"),
        };
        Some(Matrix {
            kind: self.kind,
            rows: rows.len(),
            cols: self.cols,
            bytes,
        })
    }

    /// Interleaves the (plain) rows into `out` on every core: groups are
    /// independent and lie in order, so each thread takes a run of them
    /// (an 8B model's 4 GB repacks in parallel at load), a piece at a time,
    /// letting the map's pages of each piece go once it is copied.
    fn interleave_into(&self, out: &mut [u8]) -> Result<(), QMatError> {
        let (kind, cols) = (self.kind, self.cols);
        let row_bytes = kind.bytes_for(cols).map_err(|_| QMatError::Overflow)?;
        let group_bytes = interleave::interleaved_len(kind, interleave::GROUP, cols)?.max(1);
        let groups = self.rows.div_ceil(interleave::GROUP);
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let per = groups.div_ceil(threads).max(1);
        let piece = (COPY_PIECE / (interleave::GROUP * row_bytes).max(1)).max(1);
        let plain = self.bytes();
        let mapped = match &self.bytes {
            Bytes::Mapped { file, range } => Some((file, range.start)),
            _ => None,
        };
        std::thread::scope(|scope| {
            let runs: Vec<_> = out
                .chunks_mut(per * group_bytes)
                .enumerate()
                .map(|(t, out)| {
                    scope.spawn(move || {
                        for (p, out) in out.chunks_mut(piece * group_bytes).enumerate() {
                            let first = (t * per + p * piece) * interleave::GROUP;
                            let rows = (self.rows - first)
                                .min(out.len() / group_bytes * interleave::GROUP);
                            let src = first * row_bytes..(first + rows) * row_bytes;
                            interleave::interleave(kind, rows, cols, &plain[src.clone()], out)?;
                            // The copied piece's pages go now, not once the
                            // whole matrix is copied: a large embedding
                            // (70% of Gemma 3 270M's file) would otherwise
                            // be resident twice at its end.
                            if let Some((file, at)) = mapped {
                                file.release(at + src.start..at + src.end);
                            }
                        }
                        Ok(())
                    })
                })
                .collect();
            // A repacking thread cannot panic on checked shapes; if one
            // did, the product refuses the matrix rather than use it.
            runs.into_iter()
                .try_for_each(|run| run.join().unwrap_or(Err(QMatError::Overflow)))
        })
    }

    /// [`view`](Self::view) of interleaved rows (`rows` inside the
    /// matrix): a range of whole groups where `rows` starts on one and ends
    /// on one or at the last row, else those rows interleaved afresh
    /// (`None` if no memory could be had for them).
    fn interleaved_view(
        &self,
        data: &Arc<Mmap>,
        range: &Range<usize>,
        origin: &Option<(Arc<ModelFile>, Range<usize>)>,
        rows: Range<usize>,
    ) -> Option<Matrix> {
        let row_bytes = self.kind.bytes_for(self.cols).unwrap_or(0);
        let origin = origin.as_ref().map(|(file, r)| {
            let narrowed = r.start + rows.start * row_bytes..r.start + rows.end * row_bytes;
            (Arc::clone(file), narrowed)
        });
        let aligned = rows.start.is_multiple_of(interleave::GROUP)
            && (rows.end.is_multiple_of(interleave::GROUP) || rows.end == self.rows);
        let (data, range) = if aligned {
            let group =
                interleave::interleaved_len(self.kind, interleave::GROUP, self.cols).unwrap_or(0);
            let start = range.start + rows.start / interleave::GROUP * group;
            let end = range.start + rows.end.div_ceil(interleave::GROUP) * group;
            (Arc::clone(data), start..end)
        } else {
            let mut plain = vec![0u8; rows.len() * row_bytes];
            for (r, row) in rows.clone().zip(plain.chunks_exact_mut(row_bytes.max(1))) {
                interleave::plain_row(self.kind, self.cols, self.bytes(), r, row);
            }
            let len = interleave::interleaved_len(self.kind, rows.len(), self.cols).ok()?;
            let mut packed = huge_pages(len)?;
            interleave::interleave(self.kind, rows.len(), self.cols, &plain, &mut packed[..len])
                .ok()?;
            (Arc::new(packed.make_read_only().ok()?), 0..len)
        };
        Some(Matrix {
            kind: self.kind,
            rows: rows.len(),
            cols: self.cols,
            bytes: Bytes::Interleaved {
                data,
                range,
                origin,
            },
        })
    }

    /// Dequantizes row `r` into `out` (`cols` floats): an embedding lookup.
    pub fn row_into(&self, r: usize, out: &mut [f32]) -> Result<(), ModelError> {
        let outside = ModelError::Token {
            token: r as u32,
            vocab: self.rows as u32,
        };
        if r >= self.rows {
            return Err(outside);
        }
        if self.is_interleaved() {
            let mut row = vec![0u8; self.kind.bytes_for(self.cols).unwrap_or(0)];
            interleave::plain_row(self.kind, self.cols, self.bytes(), r, &mut row);
            return dequantize_row(self.kind, &row, out).map_err(ModelError::Dequantize);
        }
        let row_bytes = self.bytes().len() / self.rows.max(1);
        let bytes = self
            .bytes()
            .get(r * row_bytes..(r + 1) * row_bytes)
            .ok_or(outside)?;
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

    /// Whether both are the same weights (a tied head): the same bytes, or
    /// an interleaved copy of the same bytes of the file.
    pub(super) fn same_as(&self, other: &Matrix) -> bool {
        self.identity() == other.identity()
    }

    /// Where the weights come from: the address of what holds them and the
    /// range in it (for an interleaved copy of file bytes, those bytes).
    fn identity(&self) -> (usize, Range<usize>) {
        match &self.bytes {
            Bytes::Mapped { file, range }
            | Bytes::Interleaved {
                origin: Some((file, range)),
                ..
            } => (Arc::as_ptr(file) as usize, range.clone()),
            Bytes::Owned { values, range } => (Arc::as_ptr(values) as usize, range.clone()),
            Bytes::Interleaved { data, range, .. } => (Arc::as_ptr(data) as usize, range.clone()),
        }
    }
}

/// Bytes of the map a repacking thread copies before it lets their pages
/// go: small enough that a matrix is barely resident twice, large enough
/// that the `madvise` calls cost nothing.
const COPY_PIECE: usize = 8 << 20;

/// `len` bytes of anonymous memory (zero) that the kernel may back with
/// huge pages (`MADV_HUGEPAGE`: fewer faults while the loader fills it,
/// fewer TLB misses while every decode step streams it); `None` if the
/// map fails.
fn huge_pages(len: usize) -> Option<MmapMut> {
    let map = MmapMut::map_anon(len.max(1)).ok()?;
    // Advice only: without huge pages the copy works the same.
    let _ = map.advise(Advice::HugePage);
    Some(map)
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
