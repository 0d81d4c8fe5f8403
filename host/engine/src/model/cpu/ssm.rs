//! The selective state space of a Mamba-2 mixer ([`StateSpace`]; Granite
//! 4.0-H's and Nemotron-H's recurrent layers): a causal convolution, bias
//! and SiLU over each row's `x`, `B` and `C`, then per head a `head_dim ×
//! state_dim` state that decays by the head's step size and takes `x ⊗ B`,
//! read by `C`, then the gate and the grouped norm. Token by token, as
//! llama.cpp's `ssm_scan` (and HF's `torch_forward` from a cached state)
//! runs it, the heads shared out to the team, each through every token of
//! its sequence in one pass over its state a token: `2 × inner ×
//! state_dim` multiply-adds, 2 M a layer at Granite 4.0-H-Small's 8192 ×
//! 128, against the 100 M of the layer's products.

use pagoda_core::backend::SeqAttention;

use pagoda_cpu::{QMatError, Team};

use super::super::config::ModelError;
use super::super::input::StepInput;
use super::super::program::{Buf, StateSpace};
use super::super::recurrent::{RecurrentStates, StateRow};
use super::conv::convolve_row;
use super::delta::{sigmoid, softplus, RecurrentScratch};
use super::{index, Run};

/// A step's rows through a state space, every sequence's side by side.
pub(super) struct SsmRows<'a> {
    /// The input product's rows ([`StateSpace::input_width`] each): `z`,
    /// then `x`, `B` and `C`, then a step size per head.
    pub input: &'a [f32],
    /// The gated, normed output, [`StateSpace::inner`] a row.
    pub out: &'a mut [f32],
    /// The gated norm's epsilon (the model's RMS epsilon).
    pub eps: f32,
}

/// The state space of every sequence of the step, each from and into its
/// recurrent state.
pub(super) fn state_space(
    ssm: &StateSpace,
    rows: SsmRows<'_>,
    (seqs, seq_states, positions): (&[SeqAttention<'_>], &[StateRow], &[u32]),
    (states, scratch): (&mut RecurrentStates, &mut RecurrentScratch),
    team: &mut Team,
) -> Result<(), ModelError> {
    let SsmRows { input, out, eps } = rows;
    let (taps, width, inner) = (ssm.taps as usize, ssm.conv_width(), ssm.inner());
    let (heads, hd, ds) = (
        ssm.heads as usize,
        ssm.head_dim as usize,
        ssm.state_dim as usize,
    );
    let iw = ssm.input_width();
    let consistent = taps > 0
        && ssm.groups > 0
        && ssm.heads.is_multiple_of(ssm.groups)
        && ssm.conv.len() == taps * width
        && ssm.conv_bias.len() == width
        && [&ssm.dt_bias, &ssm.decay, &ssm.skip]
            .iter()
            .all(|v| v.len() == heads)
        && ssm.norm.len() == inner;
    if !consistent {
        return Err(ModelError::Span);
    }
    if seq_states.len() != seqs.len() {
        return Err(ModelError::StateRows {
            rows: seq_states.len(),
            seqs: seqs.len(),
        });
    }
    let kept = (taps - 1) * width;
    let RecurrentScratch {
        window,
        rows: conv_rows,
        outs,
    } = scratch;
    for (seq, &state_row) in seqs.iter().zip(seq_states) {
        let (start, len) = (seq.query_start as usize, seq.query_len as usize);
        let end = start.checked_add(len).ok_or(ModelError::Span)?;
        let (Some(input), Some(out), Some(&position)) = (
            input.get(start * iw..end * iw),
            out.get_mut(start * inner..end * inner),
            positions.get(start),
        ) else {
            return Err(ModelError::Span);
        };
        let state = states.continue_at(
            state_row,
            ssm.state,
            ssm.state_len(),
            position,
            seq.query_len,
        )?;
        let (conv_state, head_states) = state.split_at_mut(kept);
        window.clear();
        window.extend_from_slice(conv_state);
        for row in input.chunks_exact(iw) {
            window.extend_from_slice(&row[inner..inner + width]);
        }
        conv_rows.resize(len * width, 0.0);
        for (t, row) in conv_rows.chunks_exact_mut(width).enumerate() {
            convolve_row(&ssm.conv, taps, width, window, t, row);
            for (v, b) in row.iter_mut().zip(&ssm.conv_bias) {
                let y = *v + b;
                *v = y * sigmoid(y);
            }
        }
        // The state the next step reads: the window's last inputs.
        conv_state.copy_from_slice(&window[len * width..]);
        // Each head through the sequence's tokens, the heads shared out to
        // the team: `outs` holds head after head, token after token.
        outs.resize(heads * len * hd, 0.0);
        let mut work: Vec<(&mut [f32], &mut [f32])> = head_states
            .chunks_exact_mut(hd * ds)
            .zip(outs.chunks_exact_mut(len * hd))
            .collect();
        let (rows, steps) = (&conv_rows[..], input);
        team.for_each_chunk(&mut work, 1, &|h, piece| {
            for (s, out) in piece.iter_mut() {
                run_head(ssm, h, (rows, steps), s, out);
            }
        })
        .map_err(|e| ModelError::Kernel(QMatError::Team(e)))?;
        for (t, (row, out)) in input
            .chunks_exact(iw)
            .zip(out.chunks_exact_mut(inner))
            .enumerate()
        {
            for (h, y) in out.chunks_exact_mut(hd).enumerate() {
                y.copy_from_slice(&outs[(h * len + t) * hd..(h * len + t + 1) * hd]);
            }
            gated_norm(out, &row[..inner], &ssm.norm, ssm.groups as usize, eps);
        }
    }
    Ok(())
}

impl Run<'_> {
    /// The state space `ssm` of the step's rows: [`Buf::Conv`] (the input
    /// product) in, [`Buf::OutGate`] out.
    pub(super) fn state_space(
        &mut self,
        ssm: &StateSpace,
        input: &StepInput<'_>,
    ) -> Result<(), ModelError> {
        let t = self.t;
        let act = &mut *self.act;
        let mixed = std::mem::take(&mut act.bufs[index(Buf::Conv)]);
        let result = match (
            mixed.get(..t * ssm.input_width()),
            act.bufs[index(Buf::OutGate)].get_mut(..t * ssm.inner()),
        ) {
            (Some(rows), Some(out)) => {
                let rows = SsmRows {
                    input: rows,
                    out,
                    eps: self.c.rms_eps,
                };
                let seqs = (input.seqs, input.states, input.positions);
                let store = (&mut act.states, &mut act.delta);
                state_space(ssm, rows, seqs, store, self.team)
            }
            _ => Err(ModelError::Span),
        };
        act.bufs[index(Buf::Conv)] = mixed;
        result
    }
}

/// Head `h` through every token of a sequence: its convolved `rows` (`x`,
/// `B`, `C`) and the input product's rows (for its step sizes) in, its
/// state `s` carried, one output row of `head_dim` a token into `out`.
fn run_head(
    ssm: &StateSpace,
    h: usize,
    (rows, steps): (&[f32], &[f32]),
    s: &mut [f32],
    out: &mut [f32],
) {
    let (hd, ds, inner) = (ssm.head_dim as usize, ssm.state_dim as usize, ssm.inner());
    let (width, iw) = (ssm.conv_width(), ssm.input_width());
    let group = h / (ssm.heads / ssm.groups).max(1) as usize;
    let b_at = inner + group * ds;
    let c_at = inner + ssm.groups as usize * ds + group * ds;
    let (dt_bias, decay, skip) = (ssm.dt_bias[h], ssm.decay[h], ssm.skip[h]);
    for ((row, step), out) in rows
        .chunks_exact(width)
        .zip(steps.chunks_exact(iw))
        .zip(out.chunks_exact_mut(hd))
    {
        let dt = softplus(step[inner + width + h] + dt_bias);
        let da = (dt * decay).exp();
        let (b, c) = (&row[b_at..b_at + ds], &row[c_at..c_at + ds]);
        let x = &row[h * hd..(h + 1) * hd];
        for ((s_row, &xi), o) in s.chunks_exact_mut(ds).zip(x).zip(out.iter_mut()) {
            *o = update_row(s_row, (b, c), (da, xi * dt)) + skip * xi;
        }
    }
}

/// Lanes of [`update_row`]'s sums: independent partial sums, each run of
/// the row updated into a local array first, so the compiler keeps both
/// in vector registers (a row updated and summed in place ran scalar, and
/// the scan then cost half of a Granite 4.0-H prefill; this way a fifth).
const LANES: usize = 16;

/// One row of a head's state through a token: `s ← da·s + xdt·B`, and
/// the row's read `s·C` of the new state.
fn update_row(s: &mut [f32], (b, c): (&[f32], &[f32]), (da, xdt): (f32, f32)) -> f32 {
    let mut sums = [0.0f32; LANES];
    let whole = s.len() - s.len() % LANES;
    let (s_main, s_tail) = s.split_at_mut(whole);
    let lanes = s_main
        .chunks_exact_mut(LANES)
        .zip(b.chunks_exact(LANES))
        .zip(c.chunks_exact(LANES));
    for ((sv, bv), cv) in lanes {
        let mut next = [0.0f32; LANES];
        for ((n, &v), &bj) in next.iter_mut().zip(sv.iter()).zip(bv) {
            *n = v * da + bj * xdt;
        }
        sv.copy_from_slice(&next);
        for ((sum, &n), &cj) in sums.iter_mut().zip(&next).zip(cv) {
            *sum += n * cj;
        }
    }
    let mut y: f32 = sums.iter().sum();
    for ((sv, &bj), &cj) in s_tail.iter_mut().zip(&b[whole..]).zip(&c[whole..]) {
        *sv = *sv * da + bj * xdt;
        y += *sv * cj;
    }
    y
}

/// `y = rms(y × silu(z)) × gain` in place, the mean of squares taken over
/// each of the `groups` equal shares of the row (HF's
/// `MambaRMSNormGated`, the gate before the norm).
fn gated_norm(y: &mut [f32], z: &[f32], gain: &[f32], groups: usize, eps: f32) {
    y.iter_mut().zip(z).for_each(|(v, &g)| *v *= g * sigmoid(g));
    let share = y.len() / groups.max(1);
    for (part, gain) in y
        .chunks_exact_mut(share.max(1))
        .zip(gain.chunks_exact(share.max(1)))
    {
        let mean = part.iter().map(|v| v * v).sum::<f32>() / part.len() as f32;
        let inv = 1.0 / (mean + eps).sqrt();
        part.iter_mut().zip(gain).for_each(|(v, g)| *v *= inv * g);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ssm(rng: &mut fastrand::Rng) -> StateSpace {
        let mut v = |n: usize, scale: f32| -> Vec<f32> {
            (0..n).map(|_| (rng.f32() * 2.0 - 1.0) * scale).collect()
        };
        // A state row of 21: one run of the sums' lanes and a tail.
        let (taps, heads, head_dim, groups, state_dim) = (4, 4, 3, 2, 21);
        let width = heads * head_dim + 2 * groups * state_dim;
        StateSpace {
            taps: taps as u32,
            conv: v(width * taps, 0.8),
            conv_bias: v(width, 0.5),
            heads: heads as u32,
            head_dim: head_dim as u32,
            groups: groups as u32,
            state_dim: state_dim as u32,
            dt_bias: v(heads, 1.0),
            decay: v(heads, 1.0).iter().map(|x| -1.5 - x).collect(),
            skip: v(heads, 1.0),
            norm: v(heads * head_dim, 0.3).iter().map(|x| 1.0 + x).collect(),
            state: 1,
        }
    }

    /// The whole sequence from its definition, in f64: each channel's
    /// convolution over the inputs before it (zero before the first), then
    /// each head's state from zero, token by token.
    fn plain(ssm: &StateSpace, input: &[f32], len: usize) -> Vec<f64> {
        let (taps, width, iw, inner) = (
            ssm.taps as usize,
            ssm.conv_width(),
            ssm.input_width(),
            ssm.inner(),
        );
        let (heads, hd, ds, groups) = (
            ssm.heads as usize,
            ssm.head_dim as usize,
            ssm.state_dim as usize,
            ssm.groups as usize,
        );
        let silu = |x: f64| x / (1.0 + (-x).exp());
        let at = |t: usize, i: usize| f64::from(input[t * iw + i]);
        let mut states = vec![vec![vec![0.0f64; ds]; hd]; heads];
        let mut out = Vec::new();
        for t in 0..len {
            let conv: Vec<f64> = (0..width)
                .map(|ch| {
                    let mut sum = f64::from(ssm.conv_bias[ch]);
                    for k in 0..taps {
                        if let Some(s) = (t + k).checked_sub(taps - 1) {
                            sum += f64::from(ssm.conv[ch * taps + k]) * at(s, inner + ch);
                        }
                    }
                    silu(sum)
                })
                .collect();
            let mut y = vec![0.0f64; inner];
            for (h, s) in states.iter_mut().enumerate() {
                let g = h / (heads / groups);
                let b = &conv[inner + g * ds..inner + (g + 1) * ds];
                let c = &conv[inner + (groups + g) * ds..inner + (groups + g + 1) * ds];
                let raw = at(t, inner + width + h) + f64::from(ssm.dt_bias[h]);
                let dt = (1.0 + raw.exp()).ln();
                let da = (dt * f64::from(ssm.decay[h])).exp();
                for (i, row) in s.iter_mut().enumerate() {
                    let x = conv[h * hd + i];
                    for j in 0..ds {
                        row[j] = row[j] * da + dt * x * b[j];
                    }
                    let read: f64 = row.iter().zip(c).map(|(a, b)| a * b).sum();
                    y[h * hd + i] = read + f64::from(ssm.skip[h]) * x;
                }
            }
            let share = inner / groups;
            for (i, v) in y.iter_mut().enumerate() {
                *v *= silu(at(t, i));
            }
            for (g, part) in y.chunks(share).enumerate() {
                let rms = (part.iter().map(|v| v * v).sum::<f64>() / share as f64 + 1e-5).sqrt();
                for (j, v) in part.iter().enumerate() {
                    out.push(v / rms * f64::from(ssm.norm[g * share + j]));
                }
            }
        }
        out
    }

    /// Two sequences, each cut into random chunks, interleaved in steps as
    /// an engine batches them: every row as the whole sequence computes it.
    #[test]
    fn chunked_steps_of_two_sequences_match_the_whole_sequence() {
        let mut rng = fastrand::Rng::with_seed(21);
        let ssm = ssm(&mut rng);
        let (iw, inner) = (ssm.input_width(), ssm.inner());
        let lens = [17usize, 9];
        let inputs: Vec<Vec<f32>> = lens
            .iter()
            .map(|&n| (0..n * iw).map(|_| rng.f32() * 4.0 - 2.0).collect())
            .collect();
        let rows = [StateRow { row: 3, owner: 8 }, StateRow { row: 0, owner: 9 }];
        let mut got: Vec<Vec<f32>> = lens.iter().map(|&n| vec![0.0; n * inner]).collect();
        let (mut states, mut scratch) = (RecurrentStates::default(), RecurrentScratch::default());
        // Two workers: the heads are shared out.
        let mut team = Team::new(2).unwrap();
        let mut done = [0usize; 2];
        while done != lens {
            let (mut input, mut positions, mut spans) = (Vec::new(), Vec::new(), Vec::new());
            for s in [1, 0] {
                let n = (1 + rng.usize(..6)).min(lens[s] - done[s]);
                if n > 0 {
                    let (from, to) = (done[s], done[s] + n);
                    spans.push((s, positions.len(), n));
                    input.extend_from_slice(&inputs[s][from * iw..to * iw]);
                    positions.extend(from as u32..to as u32);
                }
            }
            let attention: Vec<SeqAttention<'_>> = spans
                .iter()
                .map(|&(_, start, n)| SeqAttention {
                    pages: &[],
                    context_len: 0,
                    query_start: start as u32,
                    query_len: n as u32,
                })
                .collect();
            let seq_rows: Vec<StateRow> = spans.iter().map(|&(s, _, _)| rows[s]).collect();
            let mut out = vec![0.0; positions.len() * inner];
            let step = SsmRows {
                input: &input,
                out: &mut out,
                eps: 1e-5,
            };
            let seqs = (&attention[..], &seq_rows[..], &positions[..]);
            state_space(&ssm, step, seqs, (&mut states, &mut scratch), &mut team).unwrap();
            for &(s, start, n) in &spans {
                got[s][done[s] * inner..(done[s] + n) * inner]
                    .copy_from_slice(&out[start * inner..(start + n) * inner]);
                done[s] += n;
            }
        }
        for (s, input) in inputs.iter().enumerate() {
            let want = plain(&ssm, input, lens[s]);
            for (g, w) in got[s].iter().zip(&want) {
                assert!(
                    (f64::from(*g) - w).abs() <= 1e-4 * (1.0 + w.abs()),
                    "{g} vs {w}"
                );
            }
        }
    }

    #[test]
    fn an_inconsistent_state_space_or_a_missing_state_row_is_refused() {
        let mut rng = fastrand::Rng::with_seed(4);
        let good = ssm(&mut rng);
        let seqs = [SeqAttention {
            pages: &[],
            context_len: 1,
            query_start: 0,
            query_len: 1,
        }];
        let (input, inner) = (vec![0.5; good.input_width()], good.inner());
        let run = |ssm: &StateSpace, rows: &[StateRow]| {
            let mut out = vec![0.0; inner];
            let step = SsmRows {
                input: &input,
                out: &mut out,
                eps: 1e-5,
            };
            let (mut states, mut scratch) =
                (RecurrentStates::default(), RecurrentScratch::default());
            let store = (&mut states, &mut scratch);
            state_space(ssm, step, (&seqs, rows, &[0]), store, &mut Team::single())
        };
        let row = [StateRow { row: 0, owner: 1 }];
        assert_eq!(run(&good, &row), Ok(()));
        assert_eq!(
            run(&good, &[]),
            Err(ModelError::StateRows { rows: 0, seqs: 1 })
        );
        let uneven = StateSpace {
            groups: 3,
            ..good.clone()
        };
        assert_eq!(run(&uneven, &row), Err(ModelError::Span));
        let short = StateSpace {
            skip: vec![1.0; 2],
            ..good
        };
        assert_eq!(run(&short, &row), Err(ModelError::Span));
    }
}
