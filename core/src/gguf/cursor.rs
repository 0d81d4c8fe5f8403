//! Bounds-checked little-endian reads over the borrowed file.

use super::GgufError;

/// A read position in the file's bytes. Every read checks the bytes left
/// first and names the field it was reading when they run out.
#[derive(Clone)]
pub(super) struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub(super) fn new(bytes: &'a [u8], pos: usize) -> Self {
        Cursor { bytes, pos }
    }

    pub(super) fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    pub(super) fn pos(&self) -> usize {
        self.pos
    }

    pub(super) fn offset(&self) -> u64 {
        self.pos as u64
    }

    pub(super) fn remaining(&self) -> usize {
        self.bytes.len().saturating_sub(self.pos)
    }

    pub(super) fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], GgufError> {
        let end = self.pos.checked_add(n);
        let Some(out) = end.and_then(|end| self.bytes.get(self.pos..end)) else {
            return Err(GgufError::Truncated {
                offset: self.offset(),
                what,
            });
        };
        self.pos += n;
        Ok(out)
    }

    pub(super) fn array<const N: usize>(
        &mut self,
        what: &'static str,
    ) -> Result<[u8; N], GgufError> {
        let mut out = [0; N];
        out.copy_from_slice(self.take(N, what)?);
        Ok(out)
    }

    pub(super) fn u8(&mut self, what: &'static str) -> Result<u8, GgufError> {
        Ok(self.array::<1>(what)?[0])
    }

    pub(super) fn u32(&mut self, what: &'static str) -> Result<u32, GgufError> {
        self.array(what).map(u32::from_le_bytes)
    }

    pub(super) fn u64(&mut self, what: &'static str) -> Result<u64, GgufError> {
        self.array(what).map(u64::from_le_bytes)
    }

    /// A count of entries at least `min_size` bytes each, refused when the
    /// bytes left cannot hold that many.
    pub(super) fn count(&mut self, min_size: usize, what: &'static str) -> Result<u64, GgufError> {
        let offset = self.offset();
        let count = self.u64(what)?;
        if count > (self.remaining() / min_size.max(1)) as u64 {
            return Err(GgufError::CountTooLarge {
                offset,
                what,
                count,
            });
        }
        Ok(count)
    }

    /// A length-prefixed byte string.
    pub(super) fn string(&mut self, what: &'static str) -> Result<&'a [u8], GgufError> {
        let len = self.count(1, what)?;
        // `count` bounded it by the bytes left, so it fits in usize.
        self.take(len as usize, what)
    }

    /// A length-prefixed string that must be UTF-8 (keys and tensor names).
    pub(super) fn utf8(&mut self, what: &'static str) -> Result<&'a str, GgufError> {
        let at = self.offset() + 8;
        let bytes = self.string(what)?;
        core::str::from_utf8(bytes).map_err(|_| GgufError::NotUtf8 { offset: at })
    }
}
