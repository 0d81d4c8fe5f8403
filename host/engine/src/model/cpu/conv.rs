//! The short convolution of a hybrid model's recurrent layers (LFM2's):
//! each channel a causal convolution of a few taps along its sequence,
//! carried from step to step by the recurrent state of its last inputs.
//! It costs `taps` multiply-adds a value, next to the thousands of its
//! projections, so it runs on the calling thread.

use pagoda_core::backend::SeqAttention;

use super::super::config::ModelError;
use super::super::program::ShortConv;
use super::super::recurrent::{RecurrentStates, StateRow};

/// A step's rows through a short convolution, every sequence's side by
/// side.
pub(super) struct ConvRows<'a> {
    /// The step's rows of [`Buf::Conv`](super::Buf::Conv): `B`, `C`, `x`.
    pub mix: &'a [f32],
    /// The step's rows of the output, `hidden` wide.
    pub out: &'a mut [f32],
    pub hidden: usize,
}

/// `out = C × conv(B × x)` for every sequence of the step, each from and
/// into its recurrent state.
pub(super) fn short_conv(
    conv: &ShortConv,
    rows: ConvRows<'_>,
    (seqs, seq_states, positions): (&[SeqAttention<'_>], &[StateRow], &[u32]),
    states: &mut RecurrentStates,
    window: &mut Vec<f32>,
) -> Result<(), ModelError> {
    let ConvRows { mix, out, hidden } = rows;
    let taps = conv.taps as usize;
    if taps == 0 || conv.weights.len() != taps * hidden {
        return Err(ModelError::Span);
    }
    if seq_states.len() != seqs.len() {
        return Err(ModelError::StateRows {
            rows: seq_states.len(),
            seqs: seqs.len(),
        });
    }
    let kept = taps - 1;
    for (seq, &state_row) in seqs.iter().zip(seq_states) {
        let (start, len) = (seq.query_start as usize, seq.query_len as usize);
        let end = start.checked_add(len).ok_or(ModelError::Span)?;
        let (Some(mix), Some(out), Some(&position)) = (
            mix.get(start * 3 * hidden..end * 3 * hidden),
            out.get_mut(start * hidden..end * hidden),
            positions.get(start),
        ) else {
            return Err(ModelError::Span);
        };
        let state = states.continue_at(
            state_row,
            conv.state,
            kept * hidden,
            position,
            seq.query_len,
        )?;
        // The window: the state's inputs, then this step's `B × x`.
        window.clear();
        window.extend_from_slice(state);
        for row in mix.chunks_exact(3 * hidden) {
            let (b, x) = (&row[..hidden], &row[2 * hidden..]);
            window.extend(b.iter().zip(x).map(|(b, x)| b * x));
        }
        for (t, (row, out)) in mix
            .chunks_exact(3 * hidden)
            .zip(out.chunks_exact_mut(hidden))
            .enumerate()
        {
            convolve_row(&conv.weights, taps, hidden, window, t, out);
            let c = &row[hidden..2 * hidden];
            out.iter_mut().zip(c).for_each(|(o, gate)| *o *= gate);
        }
        // The state the next step reads: the window's last inputs.
        state.copy_from_slice(&window[len * hidden..]);
    }
    Ok(())
}

/// Row `t` of a causal convolution: `out[ch] = Σ_k weights[ch × taps + k]
/// × window[(t + k) × channels + ch]`, the window holding `taps − 1` rows of
/// earlier inputs before the step's (LFM2's and Qwen3.5's).
pub(super) fn convolve_row(
    weights: &[f32],
    taps: usize,
    channels: usize,
    window: &[f32],
    t: usize,
    out: &mut [f32],
) {
    let inputs = &window[t * channels..(t + taps) * channels];
    for (ch, (o, weights)) in out.iter_mut().zip(weights.chunks_exact(taps)).enumerate() {
        *o = weights
            .iter()
            .enumerate()
            .map(|(k, w)| w * inputs[k * channels + ch])
            .sum();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The convolution of a whole sequence, written from its definition:
    /// `y[t] = C[t] × Σ_k w[k] × (B × x)[t − (taps − 1) + k]`, zero before
    /// the first token.
    fn plain(conv: &ShortConv, mix: &[f32], hidden: usize) -> Vec<f32> {
        let taps = conv.taps as usize;
        let rows = mix.len() / (3 * hidden);
        let bx =
            |t: usize, ch: usize| mix[t * 3 * hidden + ch] * mix[t * 3 * hidden + 2 * hidden + ch];
        let mut out = vec![0.0; rows * hidden];
        for t in 0..rows {
            for ch in 0..hidden {
                let mut sum = 0.0;
                for k in 0..taps {
                    if let Some(s) = (t + k).checked_sub(taps - 1) {
                        sum += conv.weights[ch * taps + k] * bx(s, ch);
                    }
                }
                out[t * hidden + ch] = mix[t * 3 * hidden + hidden + ch] * sum;
            }
        }
        out
    }

    /// Two sequences, each cut into random chunks, interleaved in steps as
    /// an engine batches them: every row as the whole-sequence convolution
    /// computes it.
    #[test]
    fn chunked_steps_of_two_sequences_match_the_whole_convolution() {
        let mut rng = fastrand::Rng::with_seed(3);
        let hidden = 5;
        for taps in [1u32, 2, 3, 4] {
            let conv = ShortConv {
                taps,
                weights: (0..taps as usize * hidden)
                    .map(|_| rng.f32() - 0.5)
                    .collect(),
                state: 1,
            };
            let lens = [17usize, 9];
            let mixes: Vec<Vec<f32>> = lens
                .iter()
                .map(|&n| (0..n * 3 * hidden).map(|_| rng.f32() * 2.0 - 1.0).collect())
                .collect();
            let want: Vec<Vec<f32>> = mixes.iter().map(|m| plain(&conv, m, hidden)).collect();
            let mut got: Vec<Vec<f32>> = lens.iter().map(|&n| vec![0.0; n * hidden]).collect();
            let rows = [StateRow { row: 3, owner: 1 }, StateRow { row: 0, owner: 2 }];
            let (mut states, mut window) = (RecurrentStates::default(), Vec::new());
            let mut done = [0usize; 2];
            while done != lens {
                // A step: a chunk of each unfinished sequence, packed.
                let (mut mix, mut positions, mut spans) = (Vec::new(), Vec::new(), Vec::new());
                for s in 0..2 {
                    let n = (1 + rng.usize(..5)).min(lens[s] - done[s]);
                    if n > 0 {
                        let start = positions.len();
                        mix.extend_from_slice(
                            &mixes[s][done[s] * 3 * hidden..(done[s] + n) * 3 * hidden],
                        );
                        positions.extend(done[s] as u32..(done[s] + n) as u32);
                        spans.push((s, start, n));
                    }
                }
                let seqs: Vec<SeqAttention<'_>> = spans
                    .iter()
                    .map(|&(_, start, n)| SeqAttention {
                        pages: &[],
                        context_len: 0,
                        query_start: start as u32,
                        query_len: n as u32,
                    })
                    .collect();
                let seq_rows: Vec<StateRow> = spans.iter().map(|&(s, _, _)| rows[s]).collect();
                let mut out = vec![0.0; positions.len() * hidden];
                let rows_in = ConvRows {
                    mix: &mix,
                    out: &mut out,
                    hidden,
                };
                short_conv(
                    &conv,
                    rows_in,
                    (&seqs, &seq_rows, &positions),
                    &mut states,
                    &mut window,
                )
                .unwrap();
                for &(s, start, n) in &spans {
                    got[s][done[s] * hidden..(done[s] + n) * hidden]
                        .copy_from_slice(&out[start * hidden..(start + n) * hidden]);
                    done[s] += n;
                }
            }
            for (got, want) in got.iter().zip(&want) {
                for (g, w) in got.iter().zip(want) {
                    assert!((g - w).abs() <= 1e-5, "taps {taps}: {g} vs {w}");
                }
            }
        }
    }

    #[test]
    fn a_step_without_a_state_row_per_sequence_is_refused() {
        let conv = ShortConv {
            taps: 3,
            weights: vec![0.5; 6],
            state: 0,
        };
        let seqs = [SeqAttention {
            pages: &[],
            context_len: 1,
            query_start: 0,
            query_len: 1,
        }];
        let (mix, mut out) = (vec![1.0; 6], vec![0.0; 2]);
        let rows = ConvRows {
            mix: &mix,
            out: &mut out,
            hidden: 2,
        };
        let err = short_conv(
            &conv,
            rows,
            (&seqs, &[], &[0]),
            &mut RecurrentStates::default(),
            &mut Vec::new(),
        );
        assert_eq!(err, Err(ModelError::StateRows { rows: 0, seqs: 1 }));
    }
}
