//! The norms of a [`Program`](super::super::program::Program): RMSNorm and
//! Cohere's bias-free LayerNorm ([`NormKind`]), over whole rows or over
//! each head of q or k, a head's gains shared by every head or each head's
//! its own ([`Gains`]). Rows go to the team from two of them up.

use pagoda_cpu::{QMatError, Team};

use super::super::config::ModelError;
use super::super::program::NormKind;
use super::grow;

/// The gains of a norm of `width`-value rows: one row's, which every row
/// takes, or several rows' one after another, row `r` taking the
/// `r % count`-th (a head's gains each, Command R+'s QK-norm).
#[derive(Clone, Copy)]
pub(super) struct Gains<'a> {
    all: &'a [f32],
    width: usize,
}

impl<'a> Gains<'a> {
    pub(super) fn new(all: &'a [f32], width: usize) -> Self {
        Self { all, width }
    }

    /// The gains row `row` takes (all of them where they are not a whole
    /// number of rows: the loader sized them, so that is never the case).
    fn of(&self, row: usize) -> &'a [f32] {
        let count = (self.all.len() / self.width.max(1)).max(1);
        let start = (row % count) * self.width;
        self.all.get(start..start + self.width).unwrap_or(self.all)
    }
}

/// `out`'s first `rows` rows of `width` = `x`'s normed by `kind` and
/// scaled by `gains`, one row per piece on the team from two rows (a
/// single row is not worth a hand-off).
#[allow(clippy::too_many_arguments)]
pub(super) fn normalize(
    team: &mut Team,
    kind: NormKind,
    x: &[f32],
    out: &mut Vec<f32>,
    rows: usize,
    width: usize,
    gains: Gains<'_>,
    eps: f32,
) -> Result<(), ModelError> {
    grow(out, rows * width);
    let out = &mut out[..rows * width];
    if rows < 2 {
        for (i, (src, dst)) in x
            .chunks_exact(width)
            .zip(out.chunks_exact_mut(width))
            .enumerate()
        {
            norm_row(kind, src, dst, gains.of(i), eps);
        }
        return Ok(());
    }
    team.for_each_chunk(out, width, &|i, dst| {
        norm_row(kind, &x[i * width..(i + 1) * width], dst, gains.of(i), eps)
    })
    .map_err(|e| ModelError::Kernel(QMatError::Team(e)))
}

/// [`normalize`] in place, on the caller (the heads of q or k).
pub(super) fn normalize_in_place(
    kind: NormKind,
    x: &mut [f32],
    width: usize,
    gains: Gains<'_>,
    eps: f32,
) {
    for (i, row) in x.chunks_exact_mut(width).enumerate() {
        let (shift, inv) = moments(kind, row, eps);
        for (v, g) in row.iter_mut().zip(gains.of(i)) {
            *v = (*v - shift) * inv * g;
        }
    }
}

/// One row: `dst = (src − shift) × inv × gain`.
fn norm_row(kind: NormKind, src: &[f32], dst: &mut [f32], gain: &[f32], eps: f32) {
    let (shift, inv) = moments(kind, src, eps);
    for ((d, s), g) in dst.iter_mut().zip(src).zip(gain) {
        *d = (s - shift) * inv * g;
    }
}

/// What a row is shifted by and scaled by: 0 and `1 / rms` for RMSNorm,
/// the mean and `1 / std` for LayerNorm.
fn moments(kind: NormKind, src: &[f32], eps: f32) -> (f32, f32) {
    let n = src.len().max(1) as f32;
    match kind {
        NormKind::Rms => (0.0, 1.0 / (lane_sum(src, |v| v * v) / n + eps).sqrt()),
        NormKind::Layer => {
            // Two passes: the squares of the centred values, not the
            // difference of two large sums, which cancels.
            let mean = lane_sum(src, |v| v) / n;
            let var = lane_sum(src, |v| (v - mean) * (v - mean)) / n;
            (mean, 1.0 / (var + eps).sqrt())
        }
    }
}

/// `Σ f(v)` over `src`, summed in eight running lanes, which the compiler
/// keeps in vector registers (one running sum is a chain of dependent
/// adds).
fn lane_sum(src: &[f32], f: impl Fn(f32) -> f32) -> f32 {
    let mut lanes = [0.0f32; 8];
    let eights = src.chunks_exact(8);
    let rest: f32 = eights.remainder().iter().map(|&v| f(v)).sum();
    for c in eights {
        for (l, &v) in lanes.iter_mut().zip(c) {
            *l += f(v);
        }
    }
    lanes.iter().sum::<f32>() + rest
}

/// A row RMS-normed in place by `gain` (a latent's span).
pub(super) fn rms_norm_in_place(row: &mut [f32], gain: &[f32], eps: f32) {
    let width = row.len();
    normalize_in_place(NormKind::Rms, row, width, Gains::new(gain, width), eps);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each norm against its definition in f64, on random rows.
    #[test]
    fn norms_match_their_definitions() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed >> 11) as f64 / (1u64 << 53) as f64 * 4.0 - 1.0
        };
        for width in [1, 7, 8, 33, 256] {
            let row: Vec<f32> = (0..width).map(|_| (next() + 3.0) as f32).collect();
            let gain: Vec<f32> = (0..width).map(|_| next() as f32).collect();
            let eps = 1e-5;
            for kind in [NormKind::Rms, NormKind::Layer] {
                let x: Vec<f64> = row.iter().map(|&v| f64::from(v)).collect();
                let mean = x.iter().sum::<f64>() / width as f64;
                let shift = if kind == NormKind::Layer { mean } else { 0.0 };
                let spread = x.iter().map(|v| (v - shift).powi(2)).sum::<f64>() / width as f64;
                let inv = 1.0 / (spread + eps as f64).sqrt();
                let mut got = row.clone();
                normalize_in_place(kind, &mut got, width, Gains::new(&gain, width), eps);
                for i in 0..width {
                    let want = (x[i] - shift) * inv * f64::from(gain[i]);
                    let err = (f64::from(got[i]) - want).abs();
                    assert!(err <= 2e-5 * (1.0 + want.abs()), "{kind:?} {width}: {err}");
                }
            }
        }
    }

    /// Gains of several rows: row `r` takes the `r % count`-th.
    #[test]
    fn rows_take_their_own_gains() {
        let gain = [1.0, 1.0, 2.0, 2.0, 3.0, 3.0];
        let mut x = vec![1.0f32; 2 * 5];
        normalize_in_place(NormKind::Rms, &mut x, 2, Gains::new(&gain, 2), 0.0);
        let want = [1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 1.0, 1.0, 2.0, 2.0];
        assert_eq!(x, want);
    }
}
