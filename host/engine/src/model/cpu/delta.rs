//! The gated delta net of Qwen3.5's linear-attention layers
//! ([`DeltaNet`]): a causal convolution and SiLU over each row's queries,
//! keys and values, then per value head a `key_dim × value_dim` state that
//! decays, takes the delta rule's correction and is read by the query,
//! then the gated norm. Token by token (the recurrence is sequential), as
//! HF's `torch_recurrent_gated_delta_rule` writes it, each value head on
//! its own: the heads are shared out to the team, each through every token
//! of its sequence. A token takes two passes over each head's state (one
//! reads `sᵀk` and `sᵀq`, one writes the state), `4 × key_dim ×
//! value_dim` multiply-adds: at Qwen3.5-9B's 32 heads of 128 × 128, 2 M a
//! layer, against the 100 M of the layer's products.

use pagoda_core::backend::SeqAttention;

use pagoda_cpu::{QMatError, Team};

use super::super::config::ModelError;
use super::super::input::StepInput;
#[cfg(test)]
use super::super::program::DeltaLayout;
use super::super::program::{Buf, DeltaNet};
use super::super::recurrent::{RecurrentStates, StateRow};
use super::conv::convolve_row;
use super::{index, Run};

/// HF's `l2norm` epsilon (FLA's), under the sum of squares.
const L2_EPS: f32 = 1e-6;

/// A step's rows through a delta net, every sequence's side by side.
pub(super) struct DeltaRows<'a> {
    /// Queries, keys and values before the convolution: `conv_width` a row.
    pub mixed: &'a [f32],
    /// Each value head's `β` and `α` where [`DeltaNet::gate_widths`] and
    /// [`DeltaNet::gate_index`] put them.
    pub beta: &'a [f32],
    pub alpha: &'a [f32],
    /// The output gate `z` in, the gated output out: `value_width` a row.
    pub gate_out: &'a mut [f32],
    /// The gated norm's epsilon (the model's RMS epsilon).
    pub eps: f32,
}

/// What a delta net or a state space reuses from step to step.
#[derive(Debug, Default)]
pub(super) struct RecurrentScratch {
    /// The convolution's inputs: the state's, then the step's.
    pub window: Vec<f32>,
    /// A sequence's rows after the convolution (a delta net's queries,
    /// keys and values; a state space's `x`, `B` and `C`).
    pub rows: Vec<f32>,
    /// Each head's outputs, head after head.
    pub outs: Vec<f32>,
}

/// The delta net of every sequence of the step, each from and into its
/// recurrent state.
pub(super) fn delta_net(
    net: &DeltaNet,
    rows: DeltaRows<'_>,
    (seqs, seq_states, positions): (&[SeqAttention<'_>], &[StateRow], &[u32]),
    (states, scratch): (&mut RecurrentStates, &mut RecurrentScratch),
    team: &mut Team,
) -> Result<(), ModelError> {
    let DeltaRows {
        mixed,
        beta,
        alpha,
        gate_out,
        eps,
    } = rows;
    let (taps, width, heads) = (
        net.taps as usize,
        net.conv_width(),
        net.value_heads as usize,
    );
    let (kd, vd, vw) = (
        net.key_dim as usize,
        net.value_dim as usize,
        net.value_width(),
    );
    let (beta_width, alpha_width) = net.gate_widths();
    let consistent = taps > 0
        && net.key_heads > 0
        && net.value_heads.is_multiple_of(net.key_heads)
        && net.conv.len() == taps * width
        && [&net.dt_bias, &net.decay].iter().all(|v| v.len() == heads)
        && net.norm.len() == vd
        && vd <= MAX_VALUE_DIM;
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
        let (Some(mixed), Some(beta), Some(alpha), Some(gate_out), Some(&position)) = (
            mixed.get(start * width..end * width),
            beta.get(start * beta_width..end * beta_width),
            alpha.get(start * alpha_width..end * alpha_width),
            gate_out.get_mut(start * vw..end * vw),
            positions.get(start),
        ) else {
            return Err(ModelError::Span);
        };
        let state = states.continue_at(
            state_row,
            net.state,
            net.state_len(),
            position,
            seq.query_len,
        )?;
        let (conv_state, head_states) = state.split_at_mut(kept);
        window.clear();
        window.extend_from_slice(conv_state);
        window.extend_from_slice(mixed);
        conv_rows.resize(len * width, 0.0);
        for (t, row) in conv_rows.chunks_exact_mut(width).enumerate() {
            convolve(net, window, t, row);
        }
        // The state the next step reads: the window's last inputs.
        conv_state.copy_from_slice(&window[len * width..]);
        // Each value head through the sequence's tokens, the heads shared
        // out to the team: `outs` holds head after head, token after token.
        outs.resize(heads * len * vd, 0.0);
        // One pair of slices a head (a small list a sequence and layer,
        // against the megabytes of state the heads then read).
        let mut work: Vec<(&mut [f32], &mut [f32])> = head_states
            .chunks_exact_mut(kd * vd)
            .zip(outs.chunks_exact_mut(len * vd))
            .collect();
        let (rows, shared) = (&conv_rows[..], (beta, alpha));
        team.for_each_chunk(&mut work, 1, &|h, piece| {
            for (s, out) in piece.iter_mut() {
                run_head(net, h, (rows, shared), s, out);
            }
        })
        .map_err(|e| ModelError::Kernel(QMatError::Team(e)))?;
        for (t, gates) in gate_out.chunks_exact_mut(vw).enumerate() {
            for (h, gates) in gates.chunks_exact_mut(vd).enumerate() {
                let out = &outs[(h * len + t) * vd..(h * len + t + 1) * vd];
                gated_norm(out, &net.norm, gates, eps);
            }
        }
    }
    Ok(())
}

impl Run<'_> {
    /// The delta net `net` of the step's rows: [`Buf::Conv`],
    /// [`Buf::Beta`] and [`Buf::Alpha`] in, [`Buf::OutGate`] in and out.
    pub(super) fn delta_net(
        &mut self,
        net: &DeltaNet,
        input: &StepInput<'_>,
    ) -> Result<(), ModelError> {
        let t = self.t;
        let act = &mut *self.act;
        let [mixed, beta, alpha] =
            [Buf::Conv, Buf::Beta, Buf::Alpha].map(|b| std::mem::take(&mut act.bufs[index(b)]));
        let (width, (beta_width, alpha_width)) = (net.conv_width(), net.gate_widths());
        let result = match (
            mixed.get(..t * width),
            beta.get(..t * beta_width),
            alpha.get(..t * alpha_width),
            act.bufs[index(Buf::OutGate)].get_mut(..t * net.value_width()),
        ) {
            (Some(mixed), Some(beta), Some(alpha), Some(gate_out)) => {
                let rows = DeltaRows {
                    mixed,
                    beta,
                    alpha,
                    gate_out,
                    eps: self.c.rms_eps,
                };
                let seqs = (input.seqs, input.states, input.positions);
                let store = (&mut act.states, &mut act.delta);
                delta_net(net, rows, seqs, store, self.team)
            }
            _ => Err(ModelError::Span),
        };
        for (b, v) in [(Buf::Conv, mixed), (Buf::Beta, beta), (Buf::Alpha, alpha)] {
            act.bufs[index(b)] = v;
        }
        result
    }
}

/// Row `t` of the window through the convolution and SiLU, each query and
/// key head L2-normed, the queries scaled by `1 / sqrt(key_dim)`.
fn convolve(net: &DeltaNet, window: &[f32], t: usize, row: &mut [f32]) {
    let (kd, kw) = (net.key_dim as usize, net.key_width());
    convolve_row(&net.conv, net.taps as usize, row.len(), window, t, row);
    row.iter_mut().for_each(|v| *v *= sigmoid(*v));
    for head in row[..2 * kw].chunks_exact_mut(kd) {
        l2_normalize(head);
    }
    let query_scale = 1.0 / (kd as f32).sqrt();
    row[..kw].iter_mut().for_each(|q| *q *= query_scale);
}

/// Value head `h` through every token of a sequence: its convolved `rows`
/// and its `(beta, alpha)` rows in, its state `s` carried, one output row
/// of `value_dim` a token into `out`.
fn run_head(
    net: &DeltaNet,
    h: usize,
    (rows, (beta, alpha)): (&[f32], (&[f32], &[f32])),
    s: &mut [f32],
    out: &mut [f32],
) {
    let (kd, vd, kw) = (
        net.key_dim as usize,
        net.value_dim as usize,
        net.key_width(),
    );
    let width = net.conv_width();
    let key_head = net.key_head(h);
    let (dt_bias, decay) = (net.dt_bias[h], net.decay[h]);
    // `α` beside `β` where the layout fuses them.
    let (beta_width, alpha_width) = net.gate_widths();
    let (alpha, alpha_width) = if alpha_width == 0 {
        (beta, beta_width)
    } else {
        (alpha, alpha_width)
    };
    let (b, a) = net.gate_index(h);
    for (t, (row, out)) in rows
        .chunks_exact(width)
        .zip(out.chunks_exact_mut(vd))
        .enumerate()
    {
        let q = &row[key_head * kd..(key_head + 1) * kd];
        let k = &row[kw + key_head * kd..kw + (key_head + 1) * kd];
        let v = &row[2 * kw + h * vd..2 * kw + (h + 1) * vd];
        let g = (decay * softplus(alpha[t * alpha_width + a] + dt_bias)).exp();
        let strength = sigmoid(beta[t * beta_width + b]);
        update_head(s, (q, k, v), (g, strength), out);
    }
}

/// The widest value head [`update_head`] takes (the loader's bound).
const MAX_VALUE_DIM: usize = 256;

/// One token through one head's state `s` (`key_dim` rows of `value_dim`):
/// `s ← g·s + k ⊗ δ` with the correction `δ = strength·(v − g·sᵀk)`, and
/// `out = sᵀq` of the new state, `g·(sᵀq) + δ·(k·q)` of the old: one pass
/// reads `sᵀk` and `sᵀq`, one writes the state.
fn update_head(
    s: &mut [f32],
    (q, k, v): (&[f32], &[f32], &[f32]),
    (g, strength): (f32, f32),
    out: &mut [f32],
) {
    let vd = v.len();
    let mut delta = [0.0f32; MAX_VALUE_DIM];
    let delta = &mut delta[..vd];
    out.fill(0.0);
    for ((s_row, &ki), &qi) in s.chunks_exact(vd).zip(k).zip(q) {
        for ((d, o), &sv) in delta.iter_mut().zip(out.iter_mut()).zip(s_row) {
            *d += sv * ki;
            *o += sv * qi;
        }
    }
    let kq: f32 = k.iter().zip(q).map(|(a, b)| a * b).sum();
    for ((d, o), &vj) in delta.iter_mut().zip(out.iter_mut()).zip(v) {
        *d = strength * (vj - g * *d);
        *o = g * *o + *d * kq;
    }
    for (s_row, &ki) in s.chunks_exact_mut(vd).zip(k) {
        for (sv, &d) in s_row.iter_mut().zip(delta.iter()) {
            *sv = g * *sv + ki * d;
        }
    }
}

/// `gates = rms(out) × gain × silu(gates)`, in place of the gates.
fn gated_norm(out: &[f32], gain: &[f32], gates: &mut [f32], eps: f32) {
    let mean = out.iter().map(|v| v * v).sum::<f32>() / out.len().max(1) as f32;
    let inv = 1.0 / (mean + eps).sqrt();
    for ((z, o), g) in gates.iter_mut().zip(out).zip(gain) {
        *z = o * inv * g * (*z * sigmoid(*z));
    }
}

fn l2_normalize(head: &mut [f32]) {
    let inv = 1.0 / (head.iter().map(|v| v * v).sum::<f32>() + L2_EPS).sqrt();
    head.iter_mut().for_each(|v| *v *= inv);
}

pub(super) fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// `ln(1 + eˣ)`, as torch's (linear past 20).
pub(super) fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        x.exp().ln_1p()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(rng: &mut fastrand::Rng, layout: DeltaLayout) -> DeltaNet {
        let mut v = |n: usize, scale: f32| -> Vec<f32> {
            (0..n).map(|_| (rng.f32() * 2.0 - 1.0) * scale).collect()
        };
        let (taps, key_heads, value_heads, key_dim, value_dim) = (3, 2, 4, 3, 5);
        let width = 2 * key_heads * key_dim + value_heads * value_dim;
        DeltaNet {
            taps: taps as u32,
            conv: v(width * taps, 0.8),
            key_heads: key_heads as u32,
            value_heads: value_heads as u32,
            key_dim: key_dim as u32,
            value_dim: value_dim as u32,
            dt_bias: v(value_heads, 1.0),
            decay: v(value_heads, 1.0).iter().map(|x| -1.5 - x).collect(),
            norm: v(value_dim, 0.3).iter().map(|x| 1.0 + x).collect(),
            state: 2,
            layout,
        }
    }

    /// A sequence's rows: `mixed`, `beta`, `alpha` and `z` of each token.
    struct Seq {
        mixed: Vec<f32>,
        beta: Vec<f32>,
        alpha: Vec<f32>,
        z: Vec<f32>,
    }

    /// The whole sequence from its definition, in f64: each channel's
    /// convolution over the inputs before it (zero before the first), then
    /// each value head's state from zero, token by token.
    fn plain(net: &DeltaNet, seq: &Seq, len: usize) -> Vec<f64> {
        let (taps, width) = (net.taps as usize, net.conv_width());
        let (kh, vh) = (net.key_heads as usize, net.value_heads as usize);
        let per = vh / kh;
        // Each value head's key head, and where its beta and alpha sit (a
        // row of each, or one row of every group's betas then alphas).
        let grouped = net.layout == DeltaLayout::Grouped;
        let key_of = |h: usize| if grouped { h / per } else { h % kh };
        let gates = |t: usize, h: usize| -> (f32, f32) {
            if grouped {
                let (g, j) = (h / per, h % per);
                let row = &seq.beta[t * 2 * vh..(t + 1) * 2 * vh];
                (row[g * 2 * per + j], row[g * 2 * per + per + j])
            } else {
                (seq.beta[t * vh + h], seq.alpha[t * vh + h])
            }
        };
        let (kd, vd) = (net.key_dim as usize, net.value_dim as usize);
        let mut states = vec![vec![vec![0.0f64; vd]; kd]; vh];
        let mut out = Vec::new();
        let silu = |x: f64| x / (1.0 + (-x).exp());
        for t in 0..len {
            let conv: Vec<f64> = (0..width)
                .map(|ch| {
                    let mut sum = 0.0;
                    for k in 0..taps {
                        if let Some(s) = (t + k).checked_sub(taps - 1) {
                            sum += f64::from(net.conv[ch * taps + k])
                                * f64::from(seq.mixed[s * width + ch]);
                        }
                    }
                    silu(sum)
                })
                .collect();
            let head = |base: usize, i: usize, scale: f64| -> Vec<f64> {
                let h = &conv[base + i * kd..base + (i + 1) * kd];
                let norm = (h.iter().map(|x| x * x).sum::<f64>() + 1e-6).sqrt();
                h.iter().map(|x| x / norm * scale).collect()
            };
            for (h, s) in states.iter_mut().enumerate() {
                let q = head(0, key_of(h), 1.0 / (kd as f64).sqrt());
                let k = head(kh * kd, key_of(h), 1.0);
                let v = &conv[2 * kh * kd + h * vd..2 * kh * kd + (h + 1) * vd];
                let (b, a) = gates(t, h);
                let a = f64::from(a + net.dt_bias[h]);
                let g = (f64::from(net.decay[h]) * (1.0 + a.exp()).ln()).exp();
                let beta = 1.0 / (1.0 + (-f64::from(b)).exp());
                for row in s.iter_mut() {
                    row.iter_mut().for_each(|x| *x *= g);
                }
                let sk: Vec<f64> = (0..vd)
                    .map(|j| (0..kd).map(|i| s[i][j] * k[i]).sum())
                    .collect();
                for i in 0..kd {
                    for j in 0..vd {
                        s[i][j] += k[i] * beta * (v[j] - sk[j]);
                    }
                }
                let o: Vec<f64> = (0..vd)
                    .map(|j| (0..kd).map(|i| s[i][j] * q[i]).sum())
                    .collect();
                let rms = (o.iter().map(|x| x * x).sum::<f64>() / vd as f64 + 1e-5).sqrt();
                for (j, oj) in o.iter().enumerate() {
                    let z = f64::from(seq.z[t * vh * vd + h * vd + j]);
                    out.push(oj / rms * f64::from(net.norm[j]) * silu(z));
                }
            }
        }
        out
    }

    /// Two sequences, each cut into random chunks, interleaved in steps as
    /// an engine batches them: every row as the whole sequence computes it.
    #[test]
    fn chunked_steps_of_two_sequences_match_the_whole_sequence() {
        for layout in [DeltaLayout::Tiled, DeltaLayout::Grouped] {
            chunked_steps_match(layout);
        }
    }

    fn chunked_steps_match(layout: DeltaLayout) {
        let mut rng = fastrand::Rng::with_seed(11);
        let net = net(&mut rng, layout);
        let (beta_width, alpha_width) = net.gate_widths();
        let (width, vw) = (net.conv_width(), net.value_width());
        let lens = [19usize, 11];
        let seqs: Vec<Seq> = lens
            .iter()
            .map(|&n| {
                let mut v =
                    |k: usize| -> Vec<f32> { (0..k).map(|_| rng.f32() * 4.0 - 2.0).collect() };
                Seq {
                    mixed: v(n * width),
                    beta: v(n * beta_width),
                    alpha: v(n * alpha_width),
                    z: v(n * vw),
                }
            })
            .collect();
        let rows = [StateRow { row: 1, owner: 5 }, StateRow { row: 4, owner: 6 }];
        let mut got: Vec<Vec<f32>> = lens.iter().map(|&n| vec![0.0; n * vw]).collect();
        let (mut states, mut scratch) = (RecurrentStates::default(), RecurrentScratch::default());
        // Two workers: the value heads are shared out.
        let mut team = Team::new(2).unwrap();
        let mut done = [0usize; 2];
        while done != lens {
            let (mut mixed, mut beta, mut alpha, mut z) = (vec![], vec![], vec![], vec![]);
            let (mut positions, mut spans) = (Vec::new(), Vec::new());
            for s in [1, 0] {
                let n = (1 + rng.usize(..6)).min(lens[s] - done[s]);
                if n > 0 {
                    let (from, to) = (done[s], done[s] + n);
                    spans.push((s, positions.len(), n));
                    mixed.extend_from_slice(&seqs[s].mixed[from * width..to * width]);
                    beta.extend_from_slice(&seqs[s].beta[from * beta_width..to * beta_width]);
                    alpha.extend_from_slice(&seqs[s].alpha[from * alpha_width..to * alpha_width]);
                    z.extend_from_slice(&seqs[s].z[from * vw..to * vw]);
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
            let step = DeltaRows {
                mixed: &mixed,
                beta: &beta,
                alpha: &alpha,
                gate_out: &mut z,
                eps: 1e-5,
            };
            let seqs_in = (&attention[..], &seq_rows[..], &positions[..]);
            delta_net(&net, step, seqs_in, (&mut states, &mut scratch), &mut team).unwrap();
            for &(s, start, n) in &spans {
                got[s][done[s] * vw..(done[s] + n) * vw]
                    .copy_from_slice(&z[start * vw..(start + n) * vw]);
                done[s] += n;
            }
        }
        for (s, seq) in seqs.iter().enumerate() {
            let want = plain(&net, seq, lens[s]);
            for (g, w) in got[s].iter().zip(&want) {
                assert!(
                    (f64::from(*g) - w).abs() <= 1e-4 * (1.0 + w.abs()),
                    "{layout:?}: {g} vs {w}"
                );
            }
        }
    }

    #[test]
    fn an_inconsistent_net_or_a_missing_state_row_is_refused() {
        let mut rng = fastrand::Rng::with_seed(2);
        let good = net(&mut rng, DeltaLayout::Tiled);
        let seqs = [SeqAttention {
            pages: &[],
            context_len: 1,
            query_start: 0,
            query_len: 1,
        }];
        let (width, vh, vw) = (
            good.conv_width(),
            good.value_heads as usize,
            good.value_width(),
        );
        let (mixed, beta, alpha) = (vec![0.5; width], vec![0.0; vh], vec![0.0; vh]);
        let run = |net: &DeltaNet, rows: &[StateRow]| {
            let mut z = vec![1.0; vw];
            let step = DeltaRows {
                mixed: &mixed,
                beta: &beta,
                alpha: &alpha,
                gate_out: &mut z,
                eps: 1e-5,
            };
            let (mut states, mut scratch) =
                (RecurrentStates::default(), RecurrentScratch::default());
            let store = (&mut states, &mut scratch);
            delta_net(net, step, (&seqs, rows, &[0]), store, &mut Team::single())
        };
        let row = [StateRow { row: 0, owner: 1 }];
        assert_eq!(run(&good, &row), Ok(()));
        assert_eq!(
            run(&good, &[]),
            Err(ModelError::StateRows { rows: 0, seqs: 1 })
        );
        let uneven = DeltaNet {
            key_heads: 3,
            ..good.clone()
        };
        assert_eq!(run(&uneven, &row), Err(ModelError::Span));
        let short = DeltaNet {
            norm: vec![1.0; 2],
            ..good
        };
        assert_eq!(run(&short, &row), Err(ModelError::Span));
    }
}
