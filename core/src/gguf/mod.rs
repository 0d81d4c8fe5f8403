//! A GGUF (v2 and v3) reader over borrowed bytes.
//!
//! GGUF is llama.cpp's model file: a header, metadata key/value pairs, tensor
//! infos, then the tensors' data at an aligned offset. [`Gguf::parse`] checks
//! the whole structure once (every count against the bytes left before
//! trusting it, every value, every tensor's type, shape and data range,
//! duplicate keys and names, overlapping data) and returns a view that
//! borrows the file: a host memory-maps it, an embedded target hands in
//! flash. Nothing is allocated or copied; metadata and tensors are found by
//! linear scans over the bytes and arrays are read lazily.
//!
//! Duplicate and overlap checks need no memory: [`Gguf::parse`] compares
//! every pair (O(n²) in the key and tensor counts, which real files keep in
//! the hundreds); [`Gguf::parse_indexed`] sorts a caller-provided index
//! instead (O(n log n)) for files with many entries.
//!
//! ```
//! # fn demo(bytes: &[u8]) -> Result<(), pagoda_core::gguf::GgufError> {
//! use pagoda_core::gguf::Gguf;
//! let file = Gguf::parse(bytes)?;
//! let layers = file.get_u32("llama.block_count")?;
//! for tensor in file.tensors() {
//!     let _ = (tensor.name(), tensor.kind(), tensor.dims(), tensor.data());
//! }
//! # let _ = layers; Ok(()) }
//! ```

mod cursor;
mod dedup;
mod error;
mod tensor;
mod typed;
mod value;

use cursor::Cursor;
use dedup::Dedup;
pub use error::{GgufError, Name, NAME_CAPACITY};
pub use tensor::{TensorInfo, Tensors, MAX_DIMS};
pub use typed::{F32Array, I32Array, StrArray, StrIter};
pub use value::{Array, ArrayIter, Value, ValueKind, ValueType};

/// The file's first four bytes.
pub const MAGIC: [u8; 4] = *b"GGUF";

/// Data alignment when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u32 = 32;

/// How deep arrays may nest (an array of arrays is depth 2). Bounds the
/// reader's recursion on hostile files.
pub const MAX_ARRAY_DEPTH: u32 = 8;

/// The key that sets the data alignment.
pub const ALIGNMENT_KEY: &str = "general.alignment";

/// The fewest bytes a key/value pair takes (empty key, one-byte value).
const MIN_KV_BYTES: usize = 8 + 4 + 1;

/// A parsed GGUF file, borrowing its bytes.
#[derive(Copy, Clone, Debug)]
pub struct Gguf<'a> {
    bytes: &'a [u8],
    version: u32,
    kv_count: u64,
    tensor_count: u64,
    kv_start: usize,
    tensors_start: usize,
    data_start: usize,
    alignment: u32,
}

/// One metadata entry.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Kv<'a> {
    /// The key.
    pub key: &'a str,
    /// Its value.
    pub value: Value<'a>,
    /// Where the entry starts in the file.
    pub offset: usize,
}

/// Iterator over a parsed file's metadata, in file order.
#[derive(Clone)]
pub struct Metadata<'a> {
    cur: Cursor<'a>,
    left: u64,
}

impl<'a> Iterator for Metadata<'a> {
    type Item = Kv<'a>;

    fn next(&mut self) -> Option<Kv<'a>> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        match read_kv(&mut self.cur) {
            Ok(kv) => Some(kv),
            Err(_) => {
                debug_assert!(false, "a validated key/value failed to read");
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

fn read_kv<'a>(cur: &mut Cursor<'a>) -> Result<Kv<'a>, GgufError> {
    let offset = cur.pos();
    let key = cur.utf8("metadata key")?;
    let at = cur.offset();
    let id = cur.u32("value type")?;
    let ty = ValueType::from_id(id).ok_or(GgufError::UnknownValueType { offset: at, id })?;
    let value = value::read_value(cur, ty, 0)?;
    Ok(Kv { key, value, offset })
}

/// The header fields and where the metadata starts.
fn header(bytes: &[u8]) -> Result<(u32, u64, u64, Cursor<'_>), GgufError> {
    let mut cur = Cursor::new(bytes, 0);
    let magic = cur.array::<4>("magic").map_err(|_| GgufError::BadMagic {
        found: first4(bytes),
    })?;
    if magic != MAGIC {
        return Err(GgufError::BadMagic { found: magic });
    }
    let version = cur.u32("version")?;
    if version != 2 && version != 3 {
        return Err(GgufError::UnsupportedVersion { version });
    }
    let tensor_count = cur.u64("tensor count")?;
    let kv_count = cur.count(MIN_KV_BYTES, "metadata count")?;
    Ok((version, tensor_count, kv_count, cur))
}

fn first4(bytes: &[u8]) -> [u8; 4] {
    let mut out = [0; 4];
    for (o, b) in out.iter_mut().zip(bytes) {
        *o = *b;
    }
    out
}

impl<'a> Gguf<'a> {
    /// Parses and checks a whole file. Duplicate keys, duplicate tensor names
    /// and overlapping tensor data are found by comparing every pair.
    pub fn parse(bytes: &'a [u8]) -> Result<Gguf<'a>, GgufError> {
        Self::parse_with(bytes, Dedup::pairs())
    }

    /// As [`parse`](Self::parse), but finds duplicates and overlaps by
    /// sorting `index`, which must hold at least as many entries as the file
    /// has keys and tensors (each count separately). Which of several
    /// duplicates or overlaps is reported may differ from `parse`.
    pub fn parse_indexed(bytes: &'a [u8], index: &mut [usize]) -> Result<Gguf<'a>, GgufError> {
        Self::parse_with(bytes, Dedup::Index(index))
    }

    fn parse_with(bytes: &'a [u8], mut dedup: Dedup<'_>) -> Result<Gguf<'a>, GgufError> {
        let (version, tensor_count, kv_count, mut cur) = header(bytes)?;
        let kv_start = cur.pos();
        dedup.reserve(kv_count)?;
        let mut alignment = DEFAULT_ALIGNMENT;
        for i in 0..kv_count {
            let kv = read_kv(&mut cur)?;
            if kv.key == ALIGNMENT_KEY {
                alignment = alignment_of(&kv)?;
            }
            dedup.key(bytes, i, &kv)?;
        }
        dedup.finish_keys(bytes, kv_count)?;

        let tensors_start = cur.pos();
        if tensor_count > (cur.remaining() / tensor::MIN_INFO_BYTES) as u64 {
            return Err(GgufError::CountTooLarge {
                offset: 8,
                what: "tensor count",
                count: tensor_count,
            });
        }
        dedup.reserve(tensor_count)?;
        for _ in 0..tensor_count {
            tensor::read_info(&mut cur)?;
        }
        let mask = u64::from(alignment) - 1;
        let data_start = cur
            .offset()
            .checked_add(mask)
            .map(|e| e & !mask)
            .and_then(|e| usize::try_from(e).ok())
            .ok_or(GgufError::SizeOverflow {
                tensor: Name::new(b""),
                what: "data section start",
            })?;

        let file = Gguf {
            bytes,
            version,
            kv_count,
            tensor_count,
            kv_start,
            tensors_start,
            data_start,
            alignment,
        };
        dedup.tensors(&file)?;
        Ok(file)
    }

    /// The format version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The data alignment (`general.alignment`, default 32).
    pub fn alignment(&self) -> u32 {
        self.alignment
    }

    /// Where the data section starts in the file.
    pub fn data_offset(&self) -> usize {
        self.data_start
    }

    /// The file's bytes.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Number of metadata entries.
    pub fn kv_count(&self) -> u64 {
        self.kv_count
    }

    /// Number of tensors.
    pub fn tensor_count(&self) -> u64 {
        self.tensor_count
    }

    /// The metadata entries, in file order.
    pub fn metadata(&self) -> Metadata<'a> {
        Metadata {
            cur: Cursor::new(self.bytes, self.kv_start),
            left: self.kv_count,
        }
    }

    /// The tensors, in file order.
    pub fn tensors(&self) -> Tensors<'a> {
        Tensors {
            cur: Cursor::new(self.bytes, self.tensors_start),
            left: self.tensor_count,
            data_start: self.data_start,
            alignment: self.alignment,
        }
    }

    /// The value stored under `key`, if any (a linear scan).
    pub fn get(&self, key: &str) -> Option<Value<'a>> {
        self.metadata().find(|kv| kv.key == key).map(|kv| kv.value)
    }

    /// The tensor named `name`, if any (a linear scan).
    pub fn tensor(&self, name: &str) -> Option<TensorInfo<'a>> {
        self.tensors().find(|t| t.name() == name)
    }

    /// The value under `key`, or [`GgufError::MissingKey`].
    pub fn require(&self, key: &str) -> Result<Value<'a>, GgufError> {
        self.get(key).ok_or(GgufError::MissingKey {
            key: Name::new(key.as_bytes()),
        })
    }
}

/// `general.alignment`: a u32 power of two.
fn alignment_of(kv: &Kv<'_>) -> Result<u32, GgufError> {
    match kv.value {
        Value::U32(a) if a.is_power_of_two() => Ok(a),
        Value::U32(a) => Err(GgufError::BadAlignment { alignment: a }),
        other => Err(GgufError::WrongType {
            key: Name::new(kv.key.as_bytes()),
            expected: ValueKind::Scalar(ValueType::U32),
            found: other.kind(),
        }),
    }
}
