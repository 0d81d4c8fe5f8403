//! The row loop shared by every instruction set: weight rows in cache-sized
//! tiles; for each tile, the activation rows in passes of up to
//! [`MAX_ROWS_PER_PASS`], each pass reading a weight row once and using
//! each block for every activation row of the pass.

use std::cell::RefCell;
use std::ops::Range;

#[cfg(target_arch = "x86_64")]
use super::interleave::{multiplies_in_place, WeightLayout};
use super::{scalar, QuantMatrix, QuantizedActivations, MAX_ROWS_PER_PASS};
use crate::Isa;

/// Weight rows whose blocks stay in cache while every pass of activation
/// rows goes over them (64 rows of 576 Q4_1 weights: 23 KiB), so a prefill
/// step reads each weight row from memory once, not once per pass.
pub(super) const ROW_TILE: usize = 64;

/// Computes `x_i · w_r` for every activation row `i` and `r` in `rows`
/// (checked by the caller) and hands them over a tile at a time:
/// `store(first, tile, m, res)` with `res[j × tile.len() + k] = x_{first +
/// j} · w_{tile.start + k}`, in the output's order, so that each
/// activation row's run is one copy.
pub(super) fn rows(
    isa: Isa,
    w: &QuantMatrix<'_>,
    x: &QuantizedActivations,
    rows: Range<usize>,
    mut store: impl FnMut(usize, Range<usize>, usize, &[f32]),
) {
    let mut res = [0.0f32; ROW_TILE * MAX_ROWS_PER_PASS];
    let mut start = rows.start;
    while start < rows.end {
        // Tiles on multiples of ROW_TILE, so an interleaved group is never
        // split between two tiles of one worker.
        let tile = start..((start / ROW_TILE + 1) * ROW_TILE).min(rows.end);
        start = tile.end;
        #[cfg(target_arch = "x86_64")]
        if w.layout == WeightLayout::Interleaved
            && multiplies_in_place(isa, w.kind)
            && super::x86::takes_interleaved(w.kind, x)
        {
            for first in (0..x.rows()).step_by(MAX_ROWS_PER_PASS) {
                let m = (x.rows() - first).min(MAX_ROWS_PER_PASS);
                let res = &mut res[..tile.len() * m];
                // SAFETY: `isa` went through `usable`, so the CPU has every
                // extension of `isa` (AVX2, FMA and F16C at least); the
                // shapes were validated, and the kernel slices every input
                // with bounds checks before loading from it.
                unsafe {
                    super::x86::interleaved(
                        isa,
                        w.kind,
                        w.data,
                        w.cols,
                        tile.clone(),
                        x,
                        first,
                        res,
                    )
                };
                store(first, tile.clone(), m, res);
            }
            continue;
        }
        PLAIN.with(|buf| {
            let mut buf = buf.borrow_mut();
            let plain = w.plain_rows(tile.clone(), &mut buf);
            plain_tile(isa, w, plain, x, tile, &mut res, &mut store);
        });
    }
}

/// Hands `then` the products `res` as the plain kernels leave them (`[k ×
/// m + j]`, by weight row, each taking a weight row at a time) turned by
/// activation row (`[j × rows + k]`), in this thread's [`TURNED`].
fn by_activation(res: &[f32], m: usize, then: impl FnOnce(&[f32])) {
    if m == 0 {
        return then(&[]);
    }
    TURNED.with(|turned| {
        let mut turned = turned.borrow_mut();
        if turned.len() < res.len() {
            turned.resize(res.len(), 0.0);
        }
        let turned = &mut turned[..res.len()];
        let rows = res.len() / m;
        for (k, run) in res.chunks_exact(m).enumerate() {
            for (j, &v) in run.iter().enumerate() {
                turned[j * rows + k] = v;
            }
        }
        then(turned);
    });
}

thread_local! {
    /// Each thread's products turned by activation row, for the plain
    /// kernels; kept between products, as [`PLAIN`]
    /// (a second array on the stack beside `res` cost a 4 KiB fill per
    /// call of [`rows`], several hundred a SmolLM2 decode step).
    static TURNED: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// [`rows`] for one tile whose weights are `plain` (the tile's rows in
/// GGUF's layout).
fn plain_tile(
    isa: Isa,
    w: &QuantMatrix<'_>,
    plain: &[u8],
    x: &QuantizedActivations,
    tile: Range<usize>,
    res: &mut [f32; ROW_TILE * MAX_ROWS_PER_PASS],
    store: &mut impl FnMut(usize, Range<usize>, usize, &[f32]),
) {
    let row_bytes = w.row_bytes;
    for first in (0..x.rows()).step_by(MAX_ROWS_PER_PASS) {
        let m = (x.rows() - first).min(MAX_ROWS_PER_PASS);
        let res = &mut res[..tile.len() * m];
        if row_bytes == 0 {
            // Rows of no columns: every product is the empty sum.
            res.fill(0.0);
            store(first, tile.clone(), m, res);
            continue;
        }
        match isa {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `isa` went through `usable`, so the CPU has AVX2,
            // FMA and F16C; the shapes were validated, and the kernel
            // slices every input with bounds checks before loading
            // from it.
            Isa::Avx2 | Isa::AvxVnni | Isa::Avx512Vnni => unsafe {
                if super::x86::takes_kquads(w.kind, x, m) {
                    super::x86::kquads(w.kind, plain, row_bytes, x, first, res)
                } else {
                    super::x86::dots(w.kind, plain, row_bytes, x, first, res)
                }
            },
            #[cfg(target_arch = "aarch64")]
            // SAFETY: `isa` went through `usable`, so the CPU has NEON, the
            // dot product and the matrix multiply extensions; the shapes
            // were validated, and the kernel slices every input with bounds
            // checks before loading from it.
            Isa::NeonI8mm => unsafe { super::neon::pairs(w.kind, plain, row_bytes, x, first, res) },
            _ => {
                for (wrow, out) in plain.chunks_exact(row_bytes).zip(res.chunks_exact_mut(m)) {
                    match isa {
                        #[cfg(target_arch = "aarch64")]
                        // SAFETY: as above, for NEON (and `sdot` where
                        // `isa` says the CPU has it).
                        Isa::Neon | Isa::NeonDotprod => unsafe {
                            super::neon::dots(isa == Isa::NeonDotprod, w.kind, wrow, x, first, out)
                        },
                        _ => scalar::dots(w.kind, wrow, x, first, out),
                    }
                }
            }
        }
        by_activation(res, m, |res| store(first, tile.clone(), m, res));
    }
}

thread_local! {
    /// Each thread's plain copy of an interleaved tile, for the kernels
    /// that read plain rows; kept between products, as [`PANEL`].
    static PLAIN: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Activation rows from which a product with f32 activations widens its
/// weight rows to an f32 panel once and multiplies it as a dense matrix
/// product (a prefill step): each widened weight is then used for every
/// row from cache, so arithmetic, not unpacking, sets the pace.
pub(super) const PANEL_MIN_ROWS: usize = 24;

thread_local! {
    /// Each thread's widened panel, kept between products: the team's
    /// workers live as long as the team, so a step allocates nothing once
    /// the largest panel has been seen.
    static PANEL: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Computes `out[i × stride + r] = x_i · w_r` for every activation row `i`
/// and `r` in `rows` by widening those weight rows to f32 and running one
/// dense product (f32 activations only).
///
/// # Safety
/// `out` must point to `x.rows() × stride` writable floats, `rows` must be
/// inside `w` with `rows.end <= stride`, and no other thread may touch the
/// outputs of these rows until this returns.
pub(super) unsafe fn panel(
    w: &QuantMatrix<'_>,
    x: &QuantizedActivations,
    rows: Range<usize>,
    out: *mut f32,
    stride: usize,
) {
    let (n, k, m) = (rows.len(), w.cols, x.rows());
    if n == 0 || m == 0 {
        return;
    }
    if k == 0 {
        // Rows of no columns: every product is the empty sum.
        for i in 0..m {
            for r in rows.clone() {
                // SAFETY: `i < x.rows()` and `r < rows.end <= stride`, so
                // the float is inside the caller's `x.rows() × stride`,
                // which no other thread touches (the contract above).
                unsafe { out.add(i * stride + r).write(0.0) };
            }
        }
        return;
    }
    PANEL.with(|panel| {
        let mut panel = panel.borrow_mut();
        if panel.len() < n * k {
            panel.resize(n * k, 0.0);
        }
        PLAIN.with(|buf| {
            let mut buf = buf.borrow_mut();
            for (r, dst) in rows.clone().zip(panel.chunks_exact_mut(k)) {
                // One row at a time, so an interleaved row is copied out
                // and widened while it is in cache.
                let row = w.plain_rows(r..r + 1, &mut buf);
                // The shape was validated, so the row is whole blocks.
                if pagoda_core::dequantize_row(w.kind, row, dst).is_err() {
                    dst.fill(f32::NAN);
                }
            }
        });
        let xs = &x.f[..m * k];
        // SAFETY: `xs` is `m × k` row-major; the panel is `n` rows of `k`,
        // read as the `k × n` matrix Wᵀ (row stride 1, column stride k); the
        // output block is `m × n` at `out + rows.start` with row stride
        // `stride`, inside the caller's buffer by the contract above.
        unsafe {
            matrixmultiply::sgemm(
                m,
                k,
                n,
                1.0,
                xs.as_ptr(),
                k as isize,
                1,
                panel.as_ptr(),
                1,
                k as isize,
                0.0,
                out.add(rows.start),
                stride as isize,
                1,
            );
        }
    });
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

    /// Writes a [`rows`] tile: `res[j × tile.len() + k]` to `(first + j) ×
    /// stride + tile.start + k`.
    ///
    /// # Safety
    /// The slice given to `new` must still be borrowed by the caller, and
    /// no other thread may read or write these floats meanwhile.
    pub(super) unsafe fn write_tile(
        &self,
        first: usize,
        tile: Range<usize>,
        m: usize,
        stride: usize,
        res: &[f32],
    ) {
        if tile.is_empty() || m == 0 {
            return;
        }
        let last = (first + m - 1) * stride + tile.end - 1;
        assert!(last < self.len, "output index out of range");
        assert!(res.len() >= tile.len() * m, "tile results too short");
        // Output row by output row: each one contiguous copy. Taken the
        // other way, a tile's 16 writes to one weight row's column sit
        // `stride` floats apart, a multiple of 4 KiB for most matrices, so
        // they all fall in one L1 set and evict each other (the store was
        // 9.6% of a 64-row Q4_K product).
        for (j, run) in res.chunks_exact(tile.len()).take(m).enumerate() {
            let row = (first + j) * stride + tile.start;
            // SAFETY: `row + tile.len() - 1` ≤ `last` < `len` (asserted
            // above), so the run is inside the slice, which by the contract
            // is alive and touched by nobody else; `res` is another slice.
            unsafe { std::ptr::copy_nonoverlapping(run.as_ptr(), self.ptr.add(row), run.len()) }
        }
    }

    /// The start of the slice, for [`panel`] (which writes whole blocks).
    pub(super) fn ptr(&self) -> *mut f32 {
        self.ptr
    }
}
