//! The row loop shared by every instruction set: weight rows in cache-sized
//! tiles; for each tile, the activation rows in passes of up to
//! [`MAX_ROWS_PER_PASS`], each pass reading a weight row once and using
//! each block for every activation row of the pass.

use std::ops::Range;

use super::{scalar, QuantMatrix, QuantizedActivations, MAX_ROWS_PER_PASS};
use crate::Isa;

/// Weight rows whose blocks stay in cache while every pass of activation
/// rows goes over them (64 rows of 576 Q4_1 weights: 23 KiB), so a prefill
/// step reads each weight row from memory once, not once per pass.
const ROW_TILE: usize = 64;

/// Computes `x_i · w_r` for every activation row `i` and `r` in `rows`
/// (checked by the caller) and hands each to `store(i, r, value)`.
pub(super) fn rows(
    isa: Isa,
    w: &QuantMatrix<'_>,
    x: &QuantizedActivations,
    rows: Range<usize>,
    mut store: impl FnMut(usize, usize, f32),
) {
    let mut res = [0.0f32; MAX_ROWS_PER_PASS];
    for tile in (rows.start..rows.end).step_by(ROW_TILE) {
        let tile = tile..(tile + ROW_TILE).min(rows.end);
        for first in (0..x.rows()).step_by(MAX_ROWS_PER_PASS) {
            let m = (x.rows() - first).min(MAX_ROWS_PER_PASS);
            let res = &mut res[..m];
            for r in tile.clone() {
                let wrow = w.row(r);
                match isa {
                    Isa::Scalar => scalar::dots(w.kind, wrow, x, first, res),
                    #[cfg(target_arch = "x86_64")]
                    // SAFETY: `isa` went through `usable`, so the CPU has
                    // AVX2 and FMA; the shapes were validated, and the
                    // kernel slices every input with bounds checks before
                    // loading from it.
                    Isa::Avx2 => unsafe { super::x86::dots(w.kind, wrow, x, first, res) },
                    #[cfg(target_arch = "aarch64")]
                    // SAFETY: as above, for NEON.
                    Isa::Neon => unsafe { super::neon::dots(w.kind, wrow, x, first, res) },
                }
                for (j, &v) in res.iter().enumerate() {
                    store(first + j, r, v);
                }
            }
        }
    }
}

/// An output slice that several workers write disjoint floats of.
pub(super) struct SharedOut {
    ptr: *mut f32,
    len: usize,
}

// SAFETY: `SharedOut` is only a pointer to floats; `write`'s contract (no
// two threads write the same index while the borrow lives) is what makes
// sharing it sound.
unsafe impl Sync for SharedOut {}
// SAFETY: as for `Sync`.
unsafe impl Send for SharedOut {}

impl SharedOut {
    /// Wraps `out` for the duration of its borrow by the caller.
    pub(super) fn new(out: &mut [f32]) -> Self {
        Self {
            ptr: out.as_mut_ptr(),
            len: out.len(),
        }
    }

    /// Writes `v` at `at`.
    ///
    /// # Safety
    /// The slice given to `new` must still be borrowed by the caller, and
    /// no other thread may read or write index `at` meanwhile.
    pub(super) unsafe fn write(&self, at: usize, v: f32) {
        assert!(at < self.len, "output index out of range");
        // SAFETY: `at` is in bounds (asserted) and, by the contract, the
        // slice is alive and nobody else touches this float.
        unsafe { self.ptr.add(at).write(v) }
    }
}
