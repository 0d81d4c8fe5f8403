//! The reader's typed errors: small `Copy` values that say what is wrong and
//! where (a byte offset, a key or a tensor name), with no allocation.

use core::fmt;

use super::value::ValueKind;

/// Bytes of a key or tensor name an error keeps; longer names are cut (and
/// shown with a trailing `…`).
pub const NAME_CAPACITY: usize = 40;

/// A copy of (the start of) a key or tensor name, so errors own what they
/// name and need no lifetime.
#[derive(Copy, Clone, PartialEq, Eq, Hash)]
pub struct Name {
    bytes: [u8; NAME_CAPACITY],
    len: u8,
    truncated: bool,
}

impl Name {
    /// Copies up to [`NAME_CAPACITY`] bytes of `name`.
    pub fn new(name: &[u8]) -> Name {
        let len = name.len().min(NAME_CAPACITY);
        let mut bytes = [0; NAME_CAPACITY];
        bytes[..len].copy_from_slice(&name[..len]);
        Name {
            bytes,
            len: len as u8,
            truncated: name.len() > NAME_CAPACITY,
        }
    }

    /// The bytes kept.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    /// Whether the name was longer than [`NAME_CAPACITY`].
    pub fn is_truncated(&self) -> bool {
        self.truncated
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for chunk in self.as_bytes().utf8_chunks() {
            f.write_str(chunk.valid())?;
            if !chunk.invalid().is_empty() {
                f.write_str("\u{fffd}")?;
            }
        }
        if self.truncated {
            f.write_str("…")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "\"{self}\"")
    }
}

/// Why a GGUF file, or a lookup in it, was refused. Offsets are byte offsets
/// from the start of the file.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum GgufError {
    /// The file does not start with `GGUF`.
    BadMagic {
        /// The first four bytes.
        found: [u8; 4],
    },
    /// A version other than 2 or 3 (v1 used 32-bit counts; big-endian files
    /// read as a byte-swapped version).
    UnsupportedVersion {
        /// The version field.
        version: u32,
    },
    /// The file ends inside a field.
    Truncated {
        /// Where the field starts.
        offset: u64,
        /// The field.
        what: &'static str,
    },
    /// A count or length promises more entries than the bytes left can hold.
    CountTooLarge {
        /// Where the count is stored.
        offset: u64,
        /// What it counts.
        what: &'static str,
        /// Its value.
        count: u64,
    },
    /// A metadata value type id outside 0..=12.
    UnknownValueType {
        /// Where the id is stored.
        offset: u64,
        /// The id.
        id: u32,
    },
    /// Arrays nested deeper than [`MAX_ARRAY_DEPTH`](super::MAX_ARRAY_DEPTH).
    NestingTooDeep {
        /// Where the innermost refused array starts.
        offset: u64,
    },
    /// A bool stored as a byte other than 0 or 1.
    BadBool {
        /// Where the byte is.
        offset: u64,
        /// The byte.
        value: u8,
    },
    /// A key, tensor name or requested string that is not UTF-8.
    NotUtf8 {
        /// Where the string's bytes start.
        offset: u64,
    },
    /// The same metadata key twice.
    DuplicateKey {
        /// The key.
        key: Name,
        /// Where the second occurrence starts.
        offset: u64,
    },
    /// `general.alignment` is 0 or not a power of two.
    BadAlignment {
        /// Its value.
        alignment: u32,
    },
    /// A metadata value of another type than the caller (or the format, for
    /// `general.alignment`) requires.
    WrongType {
        /// The key.
        key: Name,
        /// The type required.
        expected: ValueKind,
        /// The type stored.
        found: ValueKind,
    },
    /// A required key is absent.
    MissingKey {
        /// The key.
        key: Name,
    },
    /// A tensor with more than 4 dimensions.
    TooManyDims {
        /// The tensor.
        tensor: Name,
        /// Its dimension count.
        dims: u32,
    },
    /// A tensor with a dimension of 0.
    ZeroDim {
        /// The tensor.
        tensor: Name,
        /// Which dimension (0 is the row).
        axis: u32,
    },
    /// A tensor type id this crate does not lay out.
    UnknownTensorType {
        /// The tensor.
        tensor: Name,
        /// The GGML type id.
        id: u32,
    },
    /// A tensor's element count, byte count or data end overflows.
    SizeOverflow {
        /// The tensor.
        tensor: Name,
        /// Which count overflowed.
        what: &'static str,
    },
    /// A tensor's rows are not whole blocks of its type.
    PartialBlock {
        /// The tensor.
        tensor: Name,
        /// Elements per row (the first dimension).
        row: u64,
        /// Elements per block of its type.
        block: u32,
    },
    /// A tensor's data offset is not a multiple of the alignment.
    Misaligned {
        /// The tensor.
        tensor: Name,
        /// Its offset inside the data section.
        offset: u64,
    },
    /// A tensor's data runs past the end of the file.
    DataOutOfBounds {
        /// The tensor.
        tensor: Name,
        /// Where its data would end.
        end: u64,
        /// The file's length.
        len: u64,
    },
    /// Two tensors' data overlap.
    Overlap {
        /// The later tensor.
        tensor: Name,
        /// The earlier tensor it overlaps.
        other: Name,
    },
    /// The same tensor name twice.
    DuplicateTensor {
        /// The name.
        tensor: Name,
        /// Where the second tensor info starts.
        offset: u64,
    },
    /// A caller-provided index is smaller than the file's entry count.
    ScratchTooSmall {
        /// Entries it must hold.
        needed: u64,
    },
}

impl fmt::Display for GgufError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use GgufError::*;
        match *self {
            BadMagic { found } => write!(f, "not a GGUF file (magic {found:02x?})"),
            UnsupportedVersion { version } => {
                write!(f, "GGUF version {version} is not supported (2 and 3 are)")
            }
            Truncated { offset, what } => write!(f, "file ends inside the {what} at byte {offset}"),
            CountTooLarge {
                offset,
                what,
                count,
            } => write!(
                f,
                "{what} {count} at byte {offset} is larger than the rest of the file"
            ),
            UnknownValueType { offset, id } => {
                write!(f, "unknown metadata value type {id} at byte {offset}")
            }
            NestingTooDeep { offset } => write!(f, "arrays nested too deep at byte {offset}"),
            BadBool { offset, value } => write!(f, "bool at byte {offset} is {value}, not 0 or 1"),
            NotUtf8 { offset } => write!(f, "string at byte {offset} is not UTF-8"),
            DuplicateKey { key, offset } => {
                write!(f, "metadata key `{key}` appears again at byte {offset}")
            }
            BadAlignment { alignment } => write!(
                f,
                "general.alignment {alignment} is not a power of two greater than 0"
            ),
            WrongType {
                key,
                expected,
                found,
            } => write!(f, "metadata `{key}` is {found}, expected {expected}"),
            MissingKey { key } => write!(f, "metadata key `{key}` is missing"),
            TooManyDims { tensor, dims } => {
                write!(f, "tensor `{tensor}` has {dims} dimensions (at most 4)")
            }
            ZeroDim { tensor, axis } => write!(f, "tensor `{tensor}` has dimension {axis} of 0"),
            UnknownTensorType { tensor, id } => {
                write!(f, "tensor `{tensor}` has unsupported type id {id}")
            }
            SizeOverflow { tensor, what } => write!(f, "tensor `{tensor}`: {what} overflow"),
            PartialBlock { tensor, row, block } => write!(
                f,
                "tensor `{tensor}` has rows of {row} elements, not whole blocks of {block}"
            ),
            Misaligned { tensor, offset } => {
                write!(f, "tensor `{tensor}` data offset {offset} is not aligned")
            }
            DataOutOfBounds { tensor, end, len } => write!(
                f,
                "tensor `{tensor}` data ends at byte {end}, past the file's {len} bytes"
            ),
            Overlap { tensor, other } => {
                write!(f, "tensor `{tensor}` data overlaps tensor `{other}`")
            }
            DuplicateTensor { tensor, offset } => {
                write!(f, "tensor `{tensor}` appears again at byte {offset}")
            }
            ScratchTooSmall { needed } => write!(f, "the index needs {needed} entries"),
        }
    }
}

impl core::error::Error for GgufError {}
