//! A growable buffer whose first element starts a 64-byte cache line.
//!
//! The row kernels load activations 32 bytes at a time. From a `Vec`'s
//! 16-byte-aligned start, every other such load straddles two cache lines
//! and costs two; from a line-aligned start, rows whose length is a whole
//! number of lines (576 or 1536 floats or bytes, as model widths are) never
//! split a load. `bytemuck` views the lines as elements, so no `unsafe` is
//! needed for the cast.

use std::marker::PhantomData;

use bytemuck::{Pod, Zeroable};

/// One cache line of bytes, aligned to its size.
#[derive(Debug, Clone, Copy, Pod, Zeroable)]
#[repr(C, align(64))]
struct Line([u8; 64]);

/// `len` elements of `T` over whole cache lines.
#[derive(Debug, Clone)]
pub(super) struct LineBuf<T> {
    lines: Vec<Line>,
    len: usize,
    _elem: PhantomData<T>,
}

impl<T: Pod> LineBuf<T> {
    /// An empty buffer.
    pub(super) const fn new() -> Self {
        Self {
            lines: Vec::new(),
            len: 0,
            _elem: PhantomData,
        }
    }

    /// Sets the length to `len` elements and returns them for the caller
    /// to fill: lines already held are reused with whatever they hold (new
    /// ones are zero), so once grown a step allocates nothing.
    pub(super) fn reset(&mut self, len: usize) -> &mut [T] {
        let bytes = len * std::mem::size_of::<T>();
        let lines = bytes.div_ceil(64);
        if self.lines.len() < lines {
            self.lines.resize(lines, Line([0; 64]));
        }
        self.len = len;
        &mut bytemuck::cast_slice_mut(&mut self.lines)[..len]
    }

    /// The elements.
    pub(super) fn as_slice(&self) -> &[T] {
        &bytemuck::cast_slice(&self.lines)[..self.len]
    }
}

impl<T: Pod> Default for LineBuf<T> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_on_a_line_and_keeps_its_length() {
        let mut b = LineBuf::<f32>::new();
        for len in [0usize, 1, 15, 16, 17, 576, 3, 1536] {
            let s = b.reset(len);
            assert_eq!(s.len(), len);
            for (i, v) in s.iter_mut().enumerate() {
                *v = i as f32;
            }
            let s = b.as_slice();
            assert_eq!(s.len(), len);
            assert_eq!(s.as_ptr() as usize % 64, 0);
            assert!(s.iter().enumerate().all(|(i, &v)| v == i as f32));
        }
        let mut q = LineBuf::<i8>::new();
        assert_eq!(q.reset(33).as_ptr() as usize % 64, 0);
    }
}
