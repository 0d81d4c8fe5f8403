//! The gated delta net of Qwen3.5's linear-attention layers
//! ([`DeltaNet`]): a causal convolution and SiLU over each row's queries,
//! keys and values, then per value head a `key_dim × value_dim` state that
//! decays, takes the delta rule's correction and is read by the query,
//! then the gated norm. Token by token (the recurrence is sequential), as
//! HF's `torch_recurrent_gated_delta_rule` writes it; each token reads and
//! writes every head's state twice, `4 × key_dim × value_dim` multiply-adds
//! a head: at Qwen3.5-9B's 32 heads of 128 × 128, 2 M a layer, against the
//! 100 M of the layer's products, so it runs on the calling thread.

use pagoda_core::backend::SeqAttention;

use super::super::config::ModelError;
use super::super::input::StepInput;
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
    /// `value_heads` a row each.
    pub beta: &'a [f32],
    pub alpha: &'a [f32],
    /// The output gate `z` in, the gated output out: `value_width` a row.
    pub gate_out: &'a mut [f32],
    /// The gated norm's epsilon (the model's RMS epsilon).
    pub eps: f32,
}

/// What a delta net reuses from step to step.
#[derive(Debug, Default)]
pub(super) struct DeltaScratch {
    /// The convolution's inputs: the state's, then the step's.
    window: Vec<f32>,
    /// One row after the convolution: queries, keys, values.
    row: Vec<f32>,
    /// One head's correction `β(v − Sᵀk)`, and its output.
    delta: Vec<f32>,
    out: Vec<f32>,
}

/// The delta net of every sequence of the step, each from and into its
/// recurrent state.
pub(super) fn delta_net(
    net: &DeltaNet,
    rows: DeltaRows<'_>,
    (seqs, seq_states, positions): (&[SeqAttention<'_>], &[StateRow], &[u32]),
    states: &mut RecurrentStates,
    scratch: &mut DeltaScratch,
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
    let consistent = taps > 0
        && net.key_heads > 0
        && net.value_heads.is_multiple_of(net.key_heads)
        && net.conv.len() == taps * width
        && [&net.dt_bias, &net.decay].iter().all(|v| v.len() == heads)
        && net.norm.len() == vd;
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
    let query_scale = 1.0 / (kd as f32).sqrt();
    let DeltaScratch {
        window,
        row,
        delta,
        out,
    } = scratch;
    for (seq, &state_row) in seqs.iter().zip(seq_states) {
        let (start, len) = (seq.query_start as usize, seq.query_len as usize);
        let end = start.checked_add(len).ok_or(ModelError::Span)?;
        let (Some(mixed), Some(beta), Some(alpha), Some(gate_out), Some(&position)) = (
            mixed.get(start * width..end * width),
            beta.get(start * heads..end * heads),
            alpha.get(start * heads..end * heads),
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
        for t in 0..len {
            row.resize(width, 0.0);
            convolve_row(&net.conv, taps, width, window, t, row);
            row.iter_mut().for_each(|v| *v *= sigmoid(*v));
            let (qk, values) = row.split_at_mut(2 * net.key_width());
            for head in qk.chunks_exact_mut(kd) {
                l2_normalize(head);
            }
            qk[..net.key_width()]
                .iter_mut()
                .for_each(|q| *q *= query_scale);
            let (queries, keys) = qk.split_at(net.key_width());
            let gates = &mut gate_out[t * vw..(t + 1) * vw];
            for h in 0..heads {
                let key_head = h % net.key_heads as usize;
                let q = &queries[key_head * kd..(key_head + 1) * kd];
                let k = &keys[key_head * kd..(key_head + 1) * kd];
                let v = &values[h * vd..(h + 1) * vd];
                let decay = (net.decay[h] * softplus(alpha[t * heads + h] + net.dt_bias[h])).exp();
                let strength = sigmoid(beta[t * heads + h]);
                let s = &mut head_states[h * kd * vd..(h + 1) * kd * vd];
                update_head(s, (q, k, v), (decay, strength), delta, out);
                gated_norm(out, &net.norm, &mut gates[h * vd..(h + 1) * vd], eps);
            }
        }
        // The state the next step reads: the window's last inputs.
        conv_state.copy_from_slice(&window[len * width..]);
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
        let (width, heads) = (net.conv_width(), net.value_heads as usize);
        let result = match (
            mixed.get(..t * width),
            beta.get(..t * heads),
            alpha.get(..t * heads),
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
                delta_net(net, rows, seqs, &mut act.states, &mut act.delta)
            }
            _ => Err(ModelError::Span),
        };
        for (b, v) in [(Buf::Conv, mixed), (Buf::Beta, beta), (Buf::Alpha, alpha)] {
            act.bufs[index(b)] = v;
        }
        result
    }
}

/// One token through one head's state `s` (`key_dim` rows of `value_dim`):
/// `s ← decay·s`, then `s += k ⊗ strength·(v − sᵀk)`; `out = sᵀq`.
/// `delta` holds the correction.
fn update_head(
    s: &mut [f32],
    (q, k, v): (&[f32], &[f32], &[f32]),
    (decay, strength): (f32, f32),
    delta: &mut Vec<f32>,
    out: &mut Vec<f32>,
) {
    let vd = v.len();
    delta.clear();
    delta.resize(vd, 0.0);
    for (s_row, &ki) in s.chunks_exact_mut(vd).zip(k) {
        for (m, sv) in delta.iter_mut().zip(s_row.iter_mut()) {
            *sv *= decay;
            *m += *sv * ki;
        }
    }
    for (m, &vj) in delta.iter_mut().zip(v) {
        *m = strength * (vj - *m);
    }
    out.clear();
    out.resize(vd, 0.0);
    for ((s_row, &ki), &qi) in s.chunks_exact_mut(vd).zip(k).zip(q) {
        for ((o, sv), d) in out.iter_mut().zip(s_row.iter_mut()).zip(delta.iter()) {
            *sv += ki * d;
            *o += *sv * qi;
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

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// `ln(1 + eˣ)`, as torch's (linear past 20).
fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        x.exp().ln_1p()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(rng: &mut fastrand::Rng) -> DeltaNet {
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
                let q = head(0, h % kh, 1.0 / (kd as f64).sqrt());
                let k = head(kh * kd, h % kh, 1.0);
                let v = &conv[2 * kh * kd + h * vd..2 * kh * kd + (h + 1) * vd];
                let a = f64::from(seq.alpha[t * vh + h] + net.dt_bias[h]);
                let g = (f64::from(net.decay[h]) * (1.0 + a.exp()).ln()).exp();
                let beta = 1.0 / (1.0 + (-f64::from(seq.beta[t * vh + h])).exp());
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
                for j in 0..vd {
                    let z = f64::from(seq.z[t * vh * vd + h * vd + j]);
                    out.push(o[j] / rms * f64::from(net.norm[j]) * silu(z));
                }
            }
        }
        out
    }

    /// Two sequences, each cut into random chunks, interleaved in steps as
    /// an engine batches them: every row as the whole sequence computes it.
    #[test]
    fn chunked_steps_of_two_sequences_match_the_whole_sequence() {
        let mut rng = fastrand::Rng::with_seed(11);
        let net = net(&mut rng);
        let (width, vh, vw) = (
            net.conv_width(),
            net.value_heads as usize,
            net.value_width(),
        );
        let lens = [19usize, 11];
        let seqs: Vec<Seq> = lens
            .iter()
            .map(|&n| {
                let mut v =
                    |k: usize| -> Vec<f32> { (0..k).map(|_| rng.f32() * 4.0 - 2.0).collect() };
                Seq {
                    mixed: v(n * width),
                    beta: v(n * vh),
                    alpha: v(n * vh),
                    z: v(n * vw),
                }
            })
            .collect();
        let rows = [StateRow { row: 1, owner: 5 }, StateRow { row: 4, owner: 6 }];
        let mut got: Vec<Vec<f32>> = lens.iter().map(|&n| vec![0.0; n * vw]).collect();
        let (mut states, mut scratch) = (RecurrentStates::default(), DeltaScratch::default());
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
                    beta.extend_from_slice(&seqs[s].beta[from * vh..to * vh]);
                    alpha.extend_from_slice(&seqs[s].alpha[from * vh..to * vh]);
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
            delta_net(&net, step, seqs_in, &mut states, &mut scratch).unwrap();
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
                    "{g} vs {w}"
                );
            }
        }
    }

    #[test]
    fn an_inconsistent_net_or_a_missing_state_row_is_refused() {
        let mut rng = fastrand::Rng::with_seed(2);
        let good = net(&mut rng);
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
        let mut run = |net: &DeltaNet, rows: &[StateRow]| {
            let mut z = vec![1.0; vw];
            let step = DeltaRows {
                mixed: &mixed,
                beta: &beta,
                alpha: &alpha,
                gate_out: &mut z,
                eps: 1e-5,
            };
            let (mut states, mut scratch) = (RecurrentStates::default(), DeltaScratch::default());
            delta_net(net, step, (&seqs, rows, &[0]), &mut states, &mut scratch)
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
