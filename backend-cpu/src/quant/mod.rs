//! Matrix products of quantized weights with a step's activations.
//!
//! Weights stay in their GGUF blocks ([`QuantMatrix`] borrows the bytes, so a
//! memory-mapped tensor is used in place). Activations are quantized once per
//! step to 8-bit blocks ([`QuantizedActivations`]) so that each block product
//! is an integer dot product with one f32 multiply at the end, as llama.cpp
//! pairs them:
//!
//! | weights | activations | why |
//! |---|---|---|
//! | Q8_0, Q4_0, Q5_0 | Q8_0: 32 × i8, f32 scale | symmetric weights: `Σ w·x = dw·dx·Σ qw·qx` |
//! | Q4_1, Q5_1 | Q8_1: Q8_0 plus `dx·Σ qx` | the weight's offset `m` adds `m·Σ x`, precomputed once |
//! | Q4_K, Q5_K, Q6_K | Q8_K: 256 × i8, f32 scale, sums per 16 | one scale per super-block; the per-16 sums pay the K minimums (and Q6_K's −32) |
//! | F32, F16, BF16 | f32 | no integer form: widen and FMA |
//! | any quantized | f32 ([`QuantizedActivations::keep_f32`]) | no activation rounding: blocks widened to f32 in registers, then FMA |
//!
//! Prefill-sized steps with f32 activations (at least
//! `PANEL_MIN_ROWS` = 24 rows) widen each worker's weight rows once to an
//! f32 panel and multiply it by a dense product (`matrixmultiply`'s
//! single-threaded `sgemm`), so every widened weight serves all rows from
//! cache.
//!
//! Every integer sum is exact, so the scalar reference and the SIMD paths
//! differ only in the order of the f32 adds. [`matmul`] computes a range of
//! weight rows; [`matmul_team`] splits the rows across a [`Team`], each worker
//! claiming runs of whole row tiles until none is left, so no two write the
//! same output and a worker held up leaves its share to the others.
//!
//! ```
//! use pagoda_core::QuantKind;
//! use pagoda_cpu::{matmul_team, Isa, QuantMatrix, QuantizedActivations, Team};
//!
//! // Two Q8_0 rows of 32 weights: f16 scale 1.0 (0x3c00), then 32 × i8.
//! let mut data = Vec::new();
//! for q in [1i8, -2] {
//!     data.extend_from_slice(&0x3c00u16.to_le_bytes());
//!     data.extend(std::iter::repeat(q as u8).take(32));
//! }
//! let w = QuantMatrix::new(QuantKind::Q8_0, 2, 32, &data).unwrap();
//! let mut x = QuantizedActivations::new();
//! x.quantize(QuantKind::Q8_0, &[0.5; 32], 1, 32).unwrap(); // one row
//! let mut out = [0.0f32; 2];
//! let mut team = Team::new(2).unwrap();
//! matmul_team(&mut team, Isa::detect(), &w, &x, &mut out).unwrap();
//! assert_eq!(out, [16.0, -32.0]);
//! ```

mod act;
pub mod interleave;
mod kernel;
mod lines;
#[cfg(target_arch = "aarch64")]
mod neon;
mod scalar;
mod unpack;
#[cfg(target_arch = "x86_64")]
mod x86;

use std::fmt;
use std::ops::Range;

use interleave::WeightLayout;

use pagoda_core::QuantKind;

pub use act::{ActFormat, QuantizedActivations};

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use crate::team::{Team, TeamError};
use crate::Isa;

/// Activation rows one pass over a weight row serves (decode batches up to
/// this many read each weight block once).
pub const MAX_ROWS_PER_PASS: usize = 16;

/// Why a quantized matrix product refused its inputs. Nothing is written.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum QMatError {
    /// A row of `cols` elements is not whole blocks of `kind`.
    PartialBlock {
        /// The weight or activation type.
        kind: QuantKind,
        /// Elements per row.
        cols: usize,
    },
    /// The weight bytes are not `rows` rows of `cols` elements.
    DataLength {
        /// Bytes the shape needs.
        expected: usize,
        /// Bytes given.
        found: usize,
    },
    /// The shape's byte or element count overflows `usize`.
    Overflow,
    /// The activations are not `rows × cols` floats.
    InputLength {
        /// Floats the shape needs.
        expected: usize,
        /// Floats given.
        found: usize,
    },
    /// The output slice is shorter than `activation rows × weight rows`.
    OutputLength {
        /// Floats needed.
        expected: usize,
        /// Floats given.
        found: usize,
    },
    /// The weight rows asked for are not inside the matrix.
    RowRange {
        /// The range asked for.
        range: Range<usize>,
        /// Rows the matrix has.
        rows: usize,
    },
    /// Weights and activations disagree on the row length.
    ColsMismatch {
        /// The weights' row length.
        weights: usize,
        /// The activations' row length.
        activations: usize,
    },
    /// The activations were quantized for another weight type.
    FormatMismatch {
        /// The weight type.
        kind: QuantKind,
        /// The activations' format.
        format: ActFormat,
    },
    /// A worker of the thread team panicked.
    Team(TeamError),
    /// The weight type has no interleaved layout
    /// ([`interleave::interleaves`]).
    Layout {
        /// The weight type.
        kind: QuantKind,
    },
}

impl fmt::Display for QMatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::PartialBlock { kind, cols } => write!(
                f,
                "rows of {cols} elements are not whole {kind} blocks of {}",
                kind.block_elems()
            ),
            Self::DataLength { expected, found } => {
                write!(
                    f,
                    "weight data is {found} bytes, the shape needs {expected}"
                )
            }
            Self::Overflow => f.write_str("the shape's size overflows"),
            Self::InputLength { expected, found } => {
                write!(
                    f,
                    "activations are {found} floats, the shape needs {expected}"
                )
            }
            Self::OutputLength { expected, found } => {
                write!(f, "output is {found} floats, needs {expected}")
            }
            Self::RowRange { range, rows } => {
                write!(f, "weight rows {range:?} are outside 0..{rows}")
            }
            Self::ColsMismatch {
                weights,
                activations,
            } => write!(
                f,
                "weight rows have {weights} elements, activation rows {activations}"
            ),
            Self::FormatMismatch { kind, format } => {
                write!(
                    f,
                    "{kind} weights need {:?} or F32 activations, got {format:?}",
                    ActFormat::for_weights(*kind)
                )
            }
            Self::Team(e) => write!(f, "thread team: {e}"),
            Self::Layout { kind } => write!(f, "{kind} weights have no interleaved layout"),
        }
    }
}

impl std::error::Error for QMatError {}

/// A row-major weight matrix in GGUF's layout: `rows` rows of `cols`
/// elements, each row whole blocks of `kind`, rows back to back.
#[derive(Debug, Clone, Copy)]
pub struct QuantMatrix<'a> {
    kind: QuantKind,
    rows: usize,
    cols: usize,
    row_bytes: usize,
    data: &'a [u8],
    layout: WeightLayout,
}

impl<'a> QuantMatrix<'a> {
    /// Checks that `data` is exactly `rows` rows of `cols` `kind` elements.
    pub fn new(
        kind: QuantKind,
        rows: usize,
        cols: usize,
        data: &'a [u8],
    ) -> Result<Self, QMatError> {
        let row_bytes = kind.bytes_for(cols).map_err(|e| match e {
            pagoda_core::QuantError::PartialBlock { .. } => QMatError::PartialBlock { kind, cols },
            _ => QMatError::Overflow,
        })?;
        let expected = row_bytes.checked_mul(rows).ok_or(QMatError::Overflow)?;
        if data.len() != expected {
            return Err(QMatError::DataLength {
                expected,
                found: data.len(),
            });
        }
        Ok(Self {
            kind,
            rows,
            cols,
            row_bytes,
            data,
            layout: WeightLayout::Plain,
        })
    }

    /// Checks that `data` is `rows` rows of `cols` `kind` elements in the
    /// interleaved layout ([`interleave::interleave`]'s output).
    pub fn interleaved(
        kind: QuantKind,
        rows: usize,
        cols: usize,
        data: &'a [u8],
    ) -> Result<Self, QMatError> {
        let expected = interleave::interleaved_len(kind, rows, cols)?;
        if data.len() != expected {
            return Err(QMatError::DataLength {
                expected,
                found: data.len(),
            });
        }
        // `interleaved_len` checked that rows are whole blocks.
        let row_bytes = kind.bytes_for(cols).map_err(|_| QMatError::Overflow)?;
        Ok(Self {
            kind,
            rows,
            cols,
            row_bytes,
            data,
            layout: WeightLayout::Interleaved,
        })
    }

    /// A matrix of no rows and no columns: a placeholder where a real one
    /// could not be had (products refuse it, as any shape mismatch).
    pub const fn empty(kind: QuantKind) -> Self {
        Self {
            kind,
            rows: 0,
            cols: 0,
            row_bytes: 0,
            data: &[],
            layout: WeightLayout::Plain,
        }
    }

    /// How the rows are laid out.
    pub fn layout(&self) -> WeightLayout {
        self.layout
    }

    /// The weight type.
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

    /// Bytes per row.
    pub fn row_bytes(&self) -> usize {
        self.row_bytes
    }

    /// The bytes of `rows` (inside the matrix) in the plain layout, back
    /// to back: the matrix's own bytes, or (interleaved) copied out into
    /// `buf`.
    fn plain_rows<'s>(&'s self, rows: Range<usize>, buf: &'s mut Vec<u8>) -> &'s [u8] {
        let rb = self.row_bytes;
        match self.layout {
            WeightLayout::Plain => &self.data[rows.start * rb..rows.end * rb],
            WeightLayout::Interleaved => {
                buf.resize(rows.len() * rb, 0);
                for (r, out) in rows.zip(buf.chunks_exact_mut(rb.max(1))) {
                    interleave::plain_row(self.kind, self.cols, self.data, r, out);
                }
                &buf[..]
            }
        }
    }
}

/// Refuses inputs that do not fit together; `out_len` floats of output.
fn validate(
    w: &QuantMatrix<'_>,
    x: &QuantizedActivations,
    out_len: usize,
    rows: &Range<usize>,
) -> Result<(), QMatError> {
    if rows.start > rows.end || rows.end > w.rows {
        return Err(QMatError::RowRange {
            range: rows.clone(),
            rows: w.rows,
        });
    }
    if x.format() != ActFormat::for_weights(w.kind) && x.format() != ActFormat::F32 {
        return Err(QMatError::FormatMismatch {
            kind: w.kind,
            format: x.format(),
        });
    }
    if x.cols() != w.cols {
        return Err(QMatError::ColsMismatch {
            weights: w.cols,
            activations: x.cols(),
        });
    }
    let expected = x.rows().checked_mul(w.rows).ok_or(QMatError::Overflow)?;
    if out_len < expected {
        return Err(QMatError::OutputLength {
            expected,
            found: out_len,
        });
    }
    Ok(())
}

/// The instruction set to run: `isa` if this CPU has it, else scalar (an
/// `Isa` value can be built by hand, so it is not proof of support).
fn usable(isa: Isa) -> Isa {
    if isa.is_supported() {
        isa
    } else {
        Isa::Scalar
    }
}

/// `out[i × w.rows + r] = x_i · w_r` for every activation row `i` and the
/// weight rows in `rows`; other outputs are left alone. `out` holds
/// `x.rows() × w.rows()` floats (activation-row-major, as the next layer
/// reads them).
pub fn matmul(
    isa: Isa,
    w: &QuantMatrix<'_>,
    x: &QuantizedActivations,
    out: &mut [f32],
    rows: Range<usize>,
) -> Result<(), QMatError> {
    validate(w, x, out.len(), &rows)?;
    let (isa, stride) = (usable(isa), w.rows);
    if uses_panel(isa, x) {
        // SAFETY: `validate` checked that `out` holds `x.rows() × stride`
        // floats and that `rows` is inside the matrix; `out` is borrowed
        // mutably for the whole call.
        unsafe { kernel::panel(w, x, rows, out.as_mut_ptr(), stride) };
        return Ok(());
    }
    kernel::rows(isa, w, x, rows, |first, tile, m, res| {
        // Output row by output row, one copy each (see `SharedOut::write_tile`).
        for (j, run) in res.chunks_exact(tile.len()).take(m).enumerate() {
            out[(first + j) * stride..][tile.clone()].copy_from_slice(run);
        }
    });
    Ok(())
}

/// Whether a product widens its weights to a dense panel (see
/// [`kernel::panel`]): prefill-sized steps with f32 activations, on the
/// SIMD paths (the scalar path stays the plain reference).
fn uses_panel(isa: Isa, x: &QuantizedActivations) -> bool {
    isa != Isa::Scalar && x.format() == ActFormat::F32 && x.rows() >= kernel::PANEL_MIN_ROWS
}

/// [`matmul`] over all weight rows, split across `team`'s workers.
pub fn matmul_team(
    team: &mut Team,
    isa: Isa,
    w: &QuantMatrix<'_>,
    x: &QuantizedActivations,
    out: &mut [f32],
) -> Result<(), QMatError> {
    matmul_team_each(team, isa, [w], x, [out])
}

/// Several products of the same activations in one run of `team` (a
/// layer's q, k and v, or gate and up): one hand-off to the workers instead
/// of one per matrix. `outs[i]` receives [`matmul`]'s output for `ws[i]`;
/// the workers split the matrices' rows taken together.
pub fn matmul_team_each<const N: usize>(
    team: &mut Team,
    isa: Isa,
    ws: [&QuantMatrix<'_>; N],
    x: &QuantizedActivations,
    outs: [&mut [f32]; N],
) -> Result<(), QMatError> {
    for (w, out) in ws.iter().zip(&outs) {
        validate(w, x, out.len(), &(0..w.rows))?;
    }
    let isa = usable(isa);
    let panel = uses_panel(isa, x);
    let mut starts = [0usize; N];
    let mut total = 0usize;
    for (start, w) in starts.iter_mut().zip(&ws) {
        *start = total;
        total += w.rows;
    }
    let sinks = outs.map(kernel::SharedOut::new);
    let claims = Claims::new(total, team.workers(), x.rows());
    team.run(&|_, _| {
        while let Some(mine) = claims.next() {
            for ((w, sink), &start) in ws.iter().zip(&sinks).zip(&starts) {
                let rows = mine.start.clamp(start, start + w.rows) - start
                    ..mine.end.clamp(start, start + w.rows) - start;
                if rows.is_empty() {
                    continue;
                }
                let stride = w.rows;
                if panel {
                    // SAFETY: `validate` checked that each output holds every
                    // row of its matrix, and each run of rows is claimed by one
                    // worker only (`Claims` hands out disjoint runs); `run`
                    // returns before the borrows end.
                    unsafe { kernel::panel(w, x, rows, sink.ptr(), stride) };
                    continue;
                }
                kernel::rows(isa, w, x, rows, |first, tile, m, res| {
                    // SAFETY: as above, for one tile of this worker's rows
                    // (`write_tile` also checks the indices against the
                    // output's length).
                    unsafe { sink.write_tile(first, tile, m, stride, res) }
                });
            }
        }
    })
    .map_err(QMatError::Team)
}

/// The runs of weight rows the workers of [`matmul_team_each`] claim, one
/// at a time, each a share of the rows still unclaimed (guided
/// scheduling): large runs first, and runs of one interleaved group (8
/// rows) at the end of a decode step's product, so the workers end
/// within one group's time of each other. A worker that is held up
/// (another process on its core, a page fault) leaves the remaining runs
/// to the others instead of keeping them all waiting at the end of the
/// product. With fixed runs of whole [`kernel::ROW_TILE`]s (about eight
/// a worker), a worker waited for the other's last run at every product:
/// the barrier spin was 2.9% of a Llama-3.2-1B Q8_0 decode profile, 1.0%
/// with these runs (Zen 3, 2 threads).
struct Claims {
    next: AtomicUsize,
    total: usize,
    /// Runs take `1 / share` of the rows left.
    share: usize,
    /// The smallest run: one group while each pass reads a group once
    /// (decode), one [`kernel::ROW_TILE`] beyond, where a run's weight
    /// rows are read once for many passes of activation rows.
    least: usize,
}

impl Claims {
    fn new(total: usize, workers: usize, activation_rows: usize) -> Self {
        Claims {
            next: AtomicUsize::new(0),
            total,
            share: workers.max(1) * CLAIM_SHARE,
            least: if activation_rows <= MAX_ROWS_PER_PASS {
                interleave::GROUP
            } else {
                kernel::ROW_TILE
            },
        }
    }

    /// The next unclaimed run, or `None` once every row is claimed.
    fn next(&self) -> Option<Range<usize>> {
        let mut first = self.next.load(Relaxed);
        loop {
            if first >= self.total {
                return None;
            }
            let len = (self.total - first)
                .div_ceil(self.share)
                .next_multiple_of(self.least);
            let end = (first + len).min(self.total);
            match self
                .next
                .compare_exchange_weak(first, end, Relaxed, Relaxed)
            {
                Ok(_) => return Some(first..end),
                Err(now) => first = now,
            }
        }
    }
}

/// See [`Claims`]: each run is `1 / (workers × CLAIM_SHARE)` of the rows
/// left.
const CLAIM_SHARE: usize = 2;

#[cfg(test)]
mod tests {
    use super::*;

    /// Claimed runs, taken one after another, cover every row once, in
    /// order; each starts on a multiple of the least run and none grows;
    /// a decode product's last runs are one group.
    #[test]
    fn claims_cover_the_rows_in_shrinking_aligned_runs() {
        let mut rng = fastrand::Rng::with_seed(40);
        for _ in 0..2000 {
            let total = rng.usize(0..20_000);
            let workers = rng.usize(1..9);
            let activation_rows = rng.usize(1..64);
            let claims = Claims::new(total, workers, activation_rows);
            let least = claims.least;
            let mut at = 0;
            let mut last = usize::MAX;
            while let Some(run) = claims.next() {
                assert_eq!(run.start, at);
                assert!(!run.is_empty() && run.start.is_multiple_of(least));
                assert!(run.len() <= last, "{run:?} after {last}");
                last = run.len();
                at = run.end;
            }
            assert_eq!(at, total);
            if total > 4 * least && activation_rows <= MAX_ROWS_PER_PASS {
                assert!(last <= least, "{total} rows end on {last}");
            }
        }
    }
}
