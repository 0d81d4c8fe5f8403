//! Tensor infos: reading them, checking their shapes, types and data ranges,
//! and iterating over them.

use super::cursor::Cursor;
use super::{GgufError, Name};
use crate::quant::QuantKind;

/// The most dimensions a tensor may have (GGML's limit).
pub const MAX_DIMS: usize = 4;

/// The fewest bytes a tensor info takes (empty name, no dims): bounds the
/// tensor count.
pub(super) const MIN_INFO_BYTES: usize = 8 + 4 + 4 + 8;

/// One tensor: its name, type, shape and data, borrowed from the file.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo<'a> {
    name: &'a str,
    kind: QuantKind,
    dims: [u64; MAX_DIMS],
    n_dims: u32,
    offset: u64,
    info_offset: usize,
    data: &'a [u8],
}

impl<'a> TensorInfo<'a> {
    /// The tensor's name.
    pub fn name(&self) -> &'a str {
        self.name
    }

    /// Its weight type.
    pub fn kind(&self) -> QuantKind {
        self.kind
    }

    /// Its dimensions, row length first (GGML order: `dims()[0]` elements
    /// are contiguous).
    pub fn dims(&self) -> &[u64] {
        &self.dims[..self.n_dims as usize]
    }

    /// Elements per row (`dims()[0]`, or 1 for a scalar).
    pub fn row_elems(&self) -> u64 {
        self.dims[0]
    }

    /// Number of rows (the product of the other dimensions).
    pub fn rows(&self) -> u64 {
        self.dims[1] * self.dims[2] * self.dims[3]
    }

    /// Total elements.
    pub fn elems(&self) -> u64 {
        self.row_elems() * self.rows()
    }

    /// Its data's offset from the start of the data section.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Where its tensor info starts in the file.
    pub fn info_offset(&self) -> usize {
        self.info_offset
    }

    /// Its data: `rows()` rows of whole blocks of [`kind()`](Self::kind).
    pub fn data(&self) -> &'a [u8] {
        self.data
    }

    /// Row `index`'s bytes, or `None` past the last row.
    pub fn row(&self, index: u64) -> Option<&'a [u8]> {
        let row_bytes = self.data.len() / usize::try_from(self.rows()).ok()?;
        let start = usize::try_from(index).ok()?.checked_mul(row_bytes)?;
        self.data.get(start..start.checked_add(row_bytes)?)
    }
}

/// A tensor info as stored, before its data range is known.
pub(super) struct RawInfo<'a> {
    name: &'a str,
    dims: [u64; MAX_DIMS],
    n_dims: u32,
    type_id: u32,
    offset: u64,
    info_offset: usize,
}

/// Reads one tensor info at the cursor.
pub(super) fn read_info<'a>(cur: &mut Cursor<'a>) -> Result<RawInfo<'a>, GgufError> {
    let info_offset = cur.pos();
    let name = cur.utf8("tensor name")?;
    let n_dims = cur.u32("dimension count")?;
    if n_dims as usize > MAX_DIMS {
        return Err(GgufError::TooManyDims {
            tensor: Name::new(name.as_bytes()),
            dims: n_dims,
        });
    }
    let mut dims = [1; MAX_DIMS];
    for (axis, d) in dims.iter_mut().take(n_dims as usize).enumerate() {
        *d = cur.u64("dimension")?;
        if *d == 0 {
            return Err(GgufError::ZeroDim {
                tensor: Name::new(name.as_bytes()),
                axis: axis as u32,
            });
        }
    }
    let type_id = cur.u32("tensor type")?;
    let offset = cur.u64("tensor offset")?;
    Ok(RawInfo {
        name,
        dims,
        n_dims,
        type_id,
        offset,
        info_offset,
    })
}

impl<'a> RawInfo<'a> {
    fn refuse(&self) -> Name {
        Name::new(self.name.as_bytes())
    }

    /// Checks the type, the sizes and the data range inside `file`, whose
    /// data section starts at `data_start`.
    pub(super) fn resolve(
        &self,
        file: &'a [u8],
        data_start: usize,
        alignment: u32,
    ) -> Result<TensorInfo<'a>, GgufError> {
        let kind = QuantKind::from_ggml_id(self.type_id).ok_or(GgufError::UnknownTensorType {
            tensor: self.refuse(),
            id: self.type_id,
        })?;
        let overflow = |what| GgufError::SizeOverflow {
            tensor: self.refuse(),
            what,
        };
        let elems = self
            .dims
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .ok_or(overflow("element count"))?;
        let block = kind.block_elems() as u64;
        if !self.dims[0].is_multiple_of(block) {
            return Err(GgufError::PartialBlock {
                tensor: self.refuse(),
                row: self.dims[0],
                block: block as u32,
            });
        }
        let bytes = (elems / block)
            .checked_mul(kind.block_bytes() as u64)
            .ok_or(overflow("byte count"))?;
        if !self.offset.is_multiple_of(u64::from(alignment)) {
            return Err(GgufError::Misaligned {
                tensor: self.refuse(),
                offset: self.offset,
            });
        }
        let end = (data_start as u64)
            .checked_add(self.offset)
            .and_then(|s| s.checked_add(bytes))
            .ok_or(overflow("data end"))?;
        if end > file.len() as u64 {
            return Err(GgufError::DataOutOfBounds {
                tensor: self.refuse(),
                end,
                len: file.len() as u64,
            });
        }
        // end ≤ file.len(), so both fit in usize.
        let start = (end - bytes) as usize;
        Ok(TensorInfo {
            name: self.name,
            kind,
            dims: self.dims,
            n_dims: self.n_dims,
            offset: self.offset,
            info_offset: self.info_offset,
            data: &file[start..end as usize],
        })
    }
}

/// Iterator over a parsed file's tensors, in file order.
#[derive(Clone)]
pub struct Tensors<'a> {
    pub(super) cur: Cursor<'a>,
    pub(super) left: u64,
    pub(super) data_start: usize,
    pub(super) alignment: u32,
}

impl<'a> Iterator for Tensors<'a> {
    type Item = TensorInfo<'a>;

    fn next(&mut self) -> Option<TensorInfo<'a>> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let file = self.cur.bytes();
        // Every tensor info was checked when the file was parsed.
        match read_info(&mut self.cur)
            .and_then(|r| r.resolve(file, self.data_start, self.alignment))
        {
            Ok(t) => Some(t),
            Err(_) => {
                debug_assert!(false, "a validated tensor info failed to read");
                self.left = 0;
                None
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = usize::try_from(self.left).unwrap_or(usize::MAX);
        (n, Some(n))
    }
}
