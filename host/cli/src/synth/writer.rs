//! A GGUF (version 3) writer: metadata, tensor descriptions, then the tensor
//! data, each piece at the file's alignment.
//!
//! Written here rather than taken from a crate: the crates on crates.io that
//! write GGUF come inside whole ML frameworks (candle), and the format is a
//! short header of little-endian fields (see `core/src/gguf/` for the reader
//! it mirrors). Tensor data is streamed by a callback, so a file of many
//! gigabytes never sits in memory.

use std::io::{self, Write};

use pagoda_core::QuantKind;

/// GGUF's alignment when `general.alignment` is absent.
pub(crate) const ALIGNMENT: u64 = 32;

/// GGUF metadata value type ids.
const UINT32: u32 = 4;
const INT32: u32 = 5;
const FLOAT32: u32 = 6;
const BOOL: u32 = 7;
const STRING: u32 = 8;
const ARRAY: u32 = 9;

/// One tensor to write: its name, its dimensions (GGUF order: the row
/// length first) and its element type.
#[derive(Debug, Clone)]
pub(crate) struct TensorSpec {
    pub name: String,
    pub dims: Vec<u64>,
    pub kind: QuantKind,
}

impl TensorSpec {
    /// Elements in one row (`dims[0]`) and the number of rows.
    pub(crate) fn rows_cols(&self) -> (u64, u64) {
        let cols = self.dims[0];
        (self.dims[1..].iter().product(), cols)
    }

    /// Bytes of the tensor's data.
    pub(crate) fn bytes(&self) -> u64 {
        let (rows, cols) = self.rows_cols();
        rows * cols / self.kind.block_elems() as u64 * self.kind.block_bytes() as u64
    }
}

/// Metadata and tensor descriptions, collected before anything is written
/// (the header needs every tensor's offset).
#[derive(Debug, Default)]
pub(crate) struct GgufWriter {
    metadata: Vec<u8>,
    entries: u64,
    tensors: Vec<TensorSpec>,
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

impl GgufWriter {
    fn key(&mut self, key: &str, value_type: u32) -> &mut Vec<u8> {
        self.entries += 1;
        put_str(&mut self.metadata, key);
        self.metadata.extend_from_slice(&value_type.to_le_bytes());
        &mut self.metadata
    }

    pub(crate) fn u32(&mut self, key: &str, value: u32) {
        self.key(key, UINT32)
            .extend_from_slice(&value.to_le_bytes());
    }

    pub(crate) fn f32(&mut self, key: &str, value: f32) {
        self.key(key, FLOAT32)
            .extend_from_slice(&value.to_le_bytes());
    }

    pub(crate) fn bool(&mut self, key: &str, value: bool) {
        self.key(key, BOOL).push(u8::from(value));
    }

    pub(crate) fn str(&mut self, key: &str, value: &str) {
        put_str(self.key(key, STRING), value);
    }

    pub(crate) fn str_array<S: AsRef<str>>(&mut self, key: &str, values: &[S]) {
        let out = self.key(key, ARRAY);
        out.extend_from_slice(&STRING.to_le_bytes());
        out.extend_from_slice(&(values.len() as u64).to_le_bytes());
        for v in values {
            put_str(out, v.as_ref());
        }
    }

    pub(crate) fn i32_array(&mut self, key: &str, values: &[i32]) {
        let out = self.key(key, ARRAY);
        out.extend_from_slice(&INT32.to_le_bytes());
        out.extend_from_slice(&(values.len() as u64).to_le_bytes());
        for v in values {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }

    pub(crate) fn bool_array(&mut self, key: &str, values: &[bool]) {
        let out = self.key(key, ARRAY);
        out.extend_from_slice(&BOOL.to_le_bytes());
        out.extend_from_slice(&(values.len() as u64).to_le_bytes());
        out.extend(values.iter().map(|&v| u8::from(v)));
    }

    pub(crate) fn tensor(&mut self, spec: TensorSpec) {
        self.tensors.push(spec);
    }

    /// The tensors, in file order.
    pub(crate) fn tensors(&self) -> &[TensorSpec] {
        &self.tensors
    }

    /// Writes the file: the header, then each tensor's bytes as `fill`
    /// writes them (exactly [`TensorSpec::bytes`] of them), padded to the
    /// alignment. Returns the bytes written.
    pub(crate) fn write<W: Write>(
        &self,
        out: &mut W,
        mut fill: impl FnMut(usize, &TensorSpec, &mut dyn Write) -> io::Result<()>,
    ) -> io::Result<u64> {
        let mut header = Vec::new();
        header.extend_from_slice(b"GGUF");
        header.extend_from_slice(&3u32.to_le_bytes());
        header.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        header.extend_from_slice(&self.entries.to_le_bytes());
        header.extend_from_slice(&self.metadata);
        let mut offset = 0u64;
        for t in &self.tensors {
            put_str(&mut header, &t.name);
            header.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                header.extend_from_slice(&d.to_le_bytes());
            }
            header.extend_from_slice(&t.kind.ggml_id().to_le_bytes());
            header.extend_from_slice(&offset.to_le_bytes());
            offset = align(offset + t.bytes());
        }
        header.resize(align(header.len() as u64) as usize, 0);
        out.write_all(&header)?;
        let mut written = header.len() as u64;
        for (i, t) in self.tensors.iter().enumerate() {
            let mut counted = Counted {
                inner: &mut *out,
                bytes: 0,
            };
            fill(i, t, &mut counted)?;
            if counted.bytes != t.bytes() {
                return Err(io::Error::other(format!(
                    "tensor {} got {} bytes, expected {}",
                    t.name,
                    counted.bytes,
                    t.bytes()
                )));
            }
            let padded = align(t.bytes());
            out.write_all(&vec![0; (padded - t.bytes()) as usize])?;
            written += padded;
        }
        Ok(written)
    }
}

fn align(n: u64) -> u64 {
    n.div_ceil(ALIGNMENT) * ALIGNMENT
}

/// A writer that counts what passes through it.
struct Counted<'w, W: Write> {
    inner: &'w mut W,
    bytes: u64,
}

impl<W: Write> Write for Counted<'_, W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}
