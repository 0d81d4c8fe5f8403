//! A mixture of experts on the CPU: the router's scores, each row routed
//! to its best experts ([`Routing`]), the rows grouped by expert, and each
//! chosen expert's gated MLP over its own rows only (then a shared expert
//! over every row), summed into the rows' outputs.

use pagoda_cpu::{Isa, QuantizedActivations, Team};

use super::super::config::{ModelConfig, ModelError};
use super::super::precision::ActPrecision;
use super::super::program::{Expert, ExpertGroups, Experts, Gating, Scoring};
use super::{add_rows, gate, grow, project, Activations, Feed};

/// A mixture of experts' working space (grown to the largest step, never
/// shrunk): the router's scores, then each expert's rows of the step
/// grouped by expert, their inputs gathered and their outputs.
#[derive(Debug, Default)]
pub(super) struct Routing {
    /// `rows × experts` router scores, then probabilities.
    scores: Vec<f32>,
    /// Each row's chosen experts and weights, `rows × used`.
    chosen: Vec<(u32, f32)>,
    /// Where each expert's rows start in `rows` (`experts + 1` entries).
    starts: Vec<usize>,
    /// Where the counting sort puts each expert's next row.
    next: Vec<usize>,
    /// The experts a row has taken so far.
    taken: Vec<bool>,
    /// The step's rows grouped by expert, each with its weight.
    rows: Vec<(u32, f32)>,
    /// One expert's input rows, gathered.
    input: Vec<f32>,
    gate: Vec<f32>,
    up: Vec<f32>,
    out: Vec<f32>,
}

/// How [`Routing::route`] picks and weighs a row's experts: an
/// [`Experts`] op's scoring, selection bias, renormalization and scale.
#[derive(Debug, Clone, Copy)]
struct Rule<'a> {
    scoring: Scoring,
    selection_bias: Option<&'a [f32]>,
    groups: Option<ExpertGroups>,
    normalize: bool,
    scale: f32,
}

impl<'a> Rule<'a> {
    fn of(m: &'a Experts) -> Self {
        Self {
            scoring: m.scoring,
            selection_bias: m.selection_bias.as_deref(),
            groups: m.groups,
            normalize: m.normalize,
            scale: m.weight_scale,
        }
    }
}

impl Routing {
    /// Routes each of `t` rows of scores (`n` experts a row) to its `k`
    /// most probable experts: the probabilities (softmax or sigmoids; a
    /// NaN score counts as -∞), the `k` best by probability plus the
    /// rule's selection bias (ties to the lower index), among the experts
    /// of the row's best groups where the rule has groups, their
    /// probabilities as weights (renormalized where the rule says, then
    /// scaled), then the rows grouped by expert. `k` is at most `n`.
    fn route(&mut self, t: usize, n: usize, k: usize, rule: Rule<'_>) {
        let k = k.min(n);
        self.chosen.clear();
        self.taken.clear();
        self.taken.resize(n, false);
        let bias = |e: usize| rule.selection_bias.and_then(|b| b.get(e)).copied();
        // Groups that split the experts evenly and hold `k` of them (the
        // loader refuses others; here they would route nothing).
        let groups = rule.groups.filter(|g| {
            let (count, used) = (g.count as usize, g.used as usize);
            (2..=MAX_GROUPS).contains(&count)
                && n.is_multiple_of(count)
                && used <= count
                && used * (n / count) >= k
        });
        for row in self.scores[..t * n].chunks_exact_mut(n.max(1)).take(t) {
            match rule.scoring {
                Scoring::Softmax => softmax(row),
                Scoring::Sigmoid => sigmoid(row),
            }
            let key = |row: &[f32], e: usize| row[e] + bias(e).unwrap_or(0.0);
            if let Some(g) = groups {
                // The experts outside the row's best groups count as taken.
                let pairs = rule.selection_bias.is_some();
                exclude_groups(row, g, pairs, &key, &mut self.taken);
            }
            let first = self.chosen.len();
            for _ in 0..k {
                let mut best: Option<usize> = None;
                for e in 0..row.len() {
                    if !self.taken[e] && best.is_none_or(|b| key(row, e) > key(row, b)) {
                        best = Some(e);
                    }
                }
                if let Some(e) = best {
                    self.taken[e] = true;
                    self.chosen.push((e as u32, row[e]));
                }
            }
            if groups.is_some() {
                self.taken.fill(false);
            }
            for &(e, _) in &self.chosen[first..] {
                self.taken[e as usize] = false;
            }
            let sum: f32 = self.chosen[first..].iter().map(|&(_, w)| w).sum();
            let scale = if rule.normalize && sum > 0.0 {
                rule.scale / sum
            } else {
                rule.scale
            };
            if scale != 1.0 {
                self.chosen[first..]
                    .iter_mut()
                    .for_each(|(_, w)| *w *= scale);
            }
        }
        // Counting sort by expert: each expert's rows in step order.
        self.starts.clear();
        self.starts.resize(n + 1, 0);
        for &(e, _) in &self.chosen {
            self.starts[e as usize + 1] += 1;
        }
        for e in 0..n {
            self.starts[e + 1] += self.starts[e];
        }
        self.rows.clear();
        self.rows.resize(self.chosen.len(), (0, 0.0));
        self.next.clear();
        self.next.extend_from_slice(&self.starts);
        for (i, &(e, w)) in self.chosen.iter().enumerate() {
            let row = (i / k.max(1)) as u32;
            self.rows[self.next[e as usize]] = (row, w);
            self.next[e as usize] += 1;
        }
    }
}

/// Most expert groups a rule may have: the chosen ones are a 64-bit mask
/// (DeepSeek-V3 has 8).
pub(crate) const MAX_GROUPS: usize = 64;

/// Marks in `taken` the experts of every group but the row's `g.used`
/// best: each group of `n / g.count` consecutive experts scored by the sum
/// of its two best selection keys where the rule has a selection bias
/// (DeepSeek-V3's) and by its best key where it has none (DeepSeek-V2's
/// group-limited greedy routing), as DeepSeek's reference gate scores them;
/// the best taken first, ties to the lower group. A key that is not a
/// number counts as -∞.
fn exclude_groups(
    row: &[f32],
    g: ExpertGroups,
    pairs: bool,
    key: &dyn Fn(&[f32], usize) -> f32,
    taken: &mut [bool],
) {
    let size = row.len() / g.count as usize;
    let score = |group: usize| {
        let (mut first, mut second) = (f32::NEG_INFINITY, f32::NEG_INFINITY);
        for e in group * size..(group + 1) * size {
            let v = key(row, e);
            if v > first {
                second = first;
                first = v;
            } else if v > second {
                second = v;
            }
        }
        if size == 1 || !pairs {
            first
        } else {
            first + second
        }
    };
    taken.fill(true);
    let mut chosen = 0u64;
    for _ in 0..g.used {
        let mut best: Option<(usize, f32)> = None;
        for group in (0..g.count as usize).filter(|&i| chosen & (1 << i) == 0) {
            let s = score(group);
            if best.is_none_or(|(_, b)| s > b) {
                best = Some((group, s));
            }
        }
        if let Some((group, _)) = best {
            chosen |= 1 << group;
            taken[group * size..(group + 1) * size].fill(false);
        }
    }
}

/// [`Run::experts`] over `x`'s rows (`feed.rows` of `hidden`) into `sum`.
pub(super) fn mixture(
    team: &mut Team,
    act: &mut Activations,
    c: &ModelConfig,
    feed: Feed,
    m: &Experts,
    x: &[f32],
    sum: &mut [f32],
) -> Result<(), ModelError> {
    let (t, h) = (feed.rows, c.hidden as usize);
    let (isa, qx, moe) = (act.isa, &mut act.qx, &mut act.moe);
    sum[..t * h].fill(0.0);
    let router = Feed {
        precision: ActPrecision::F32,
        ..feed
    };
    project(team, isa, qx, router, x, h, &[&m.router], [&mut moe.scores])?;
    if let Some(bias) = &m.router_bias {
        add_rows(&mut moe.scores[..t * bias.len()], bias);
    }
    moe.route(t, m.experts.len(), m.used as usize, Rule::of(m));
    let Routing {
        rows: routed,
        starts,
        input,
        gate,
        up,
        out,
        ..
    } = moe;
    let mut bufs = ExpertBufs { gate, up, out };
    for (e, expert) in m.experts.iter().enumerate() {
        let rows = &routed[starts[e]..starts[e + 1]];
        if rows.is_empty() {
            continue;
        }
        grow(input, rows.len() * h);
        for (dst, &(r, _)) in input.chunks_exact_mut(h).zip(rows) {
            let r = r as usize;
            dst.copy_from_slice(&x[r * h..(r + 1) * h]);
        }
        let feed = Feed {
            rows: rows.len(),
            ..feed
        };
        let y = bufs.run(team, isa, qx, feed, expert, m.gating, input, h)?;
        for (y, &(r, w)) in y.chunks_exact(h).zip(rows) {
            let r = r as usize;
            for (s, v) in sum[r * h..(r + 1) * h].iter_mut().zip(y) {
                *s += w * v;
            }
        }
    }
    if let Some(shared) = &m.shared {
        let y = bufs.run(team, isa, qx, feed, &shared.expert, m.gating, x, h)?;
        let rows = sum
            .chunks_exact_mut(h)
            .zip(y.chunks_exact(h))
            .zip(x.chunks_exact(h));
        for ((s, y), x) in rows.take(t) {
            let scale = shared.gate.as_ref().map_or(1.0, |g| {
                let dot: f32 = x.iter().zip(g).map(|(a, b)| a * b).sum();
                1.0 / (1.0 + (-dot).exp())
            });
            for (s, v) in s.iter_mut().zip(y) {
                *s += scale * v;
            }
        }
    }
    Ok(())
}

/// The buffers one expert's products write.
struct ExpertBufs<'a> {
    gate: &'a mut Vec<f32>,
    up: &'a mut Vec<f32>,
    out: &'a mut Vec<f32>,
}

impl ExpertBufs<'_> {
    /// `expert`'s gated MLP over `feed.rows` rows of `input` (`hidden`
    /// wide): gate and up, gating, down; the output rows.
    #[allow(clippy::too_many_arguments)]
    fn run(
        &mut self,
        team: &mut Team,
        isa: Isa,
        qx: &mut [QuantizedActivations; 4],
        feed: Feed,
        expert: &Expert,
        gating: Gating,
        input: &[f32],
        hidden: usize,
    ) -> Result<&[f32], ModelError> {
        let width = expert.up.rows();
        // An ungated expert's up product takes the gate's buffer, which
        // its activation reads alone.
        match (&expert.gate, gating) {
            (Some(g), Gating::Silu | Gating::GeluTanh | Gating::SwigluOai) => project(
                team,
                isa,
                qx,
                feed,
                input,
                hidden,
                &[g, &expert.up],
                [&mut *self.gate, &mut *self.up],
            )?,
            (None, Gating::ReluSquared) => project(
                team,
                isa,
                qx,
                feed,
                input,
                hidden,
                &[&expert.up],
                [&mut *self.gate],
            )?,
            _ => return Err(ModelError::Span),
        }
        let len = feed.rows * width;
        if let Some(b) = &expert.biases {
            add_rows(&mut self.gate[..len], &b.gate);
            add_rows(&mut self.up[..len], &b.up);
        }
        let up = self.up.get(..len).unwrap_or_default();
        gate(team, isa, gating, &mut self.gate[..len], up)?;
        let down = [&expert.down];
        project(
            team,
            isa,
            qx,
            feed,
            self.gate,
            width,
            &down,
            [&mut *self.out],
        )?;
        let out = &mut self.out[..feed.rows * hidden];
        if let Some(b) = &expert.biases {
            add_rows(out, &b.down);
        }
        Ok(out)
    }
}

/// Each value's sigmoid, in place; a NaN counts as -∞ (probability 0).
fn sigmoid(row: &mut [f32]) {
    for v in row.iter_mut() {
        *v = if v.is_nan() {
            0.0
        } else {
            1.0 / (1.0 + (-*v).exp())
        };
    }
}

/// `row = softmax(row)`, in place; a NaN counts as -∞ (probability 0).
fn softmax(row: &mut [f32]) {
    for v in row.iter_mut().filter(|v| v.is_nan()) {
        *v = f32::NEG_INFINITY;
    }
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if max.is_infinite() {
        // Nothing to weigh (all -∞), or an infinite score: the best
        // scores share the weight.
        let best = row.iter().filter(|&&v| v == max).count().max(1) as f32;
        row.iter_mut()
            .for_each(|v| *v = if *v == max { 1.0 / best } else { 0.0 });
        return;
    }
    let mut sum = 0.0;
    for v in row.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    if sum > 0.0 {
        row.iter_mut().for_each(|v| *v /= sum);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`Routing::route`] against a plain model on random scores, under
    /// every rule (softmax or sigmoids, with and without a selection bias,
    /// with and without groups, renormalized or not, scaled or not): each row's `k` experts are the
    /// `k` best by probability plus bias (ties to the lower index), their
    /// weights the unbiased probabilities (summing to the scale when
    /// renormalized), and the grouped rows hold every choice once, expert
    /// by expert, rows in step order.
    #[test]
    fn routing_picks_the_most_probable_experts_and_groups_rows_by_expert() {
        let mut rng = fastrand::Rng::with_seed(11);
        let mut routing = Routing::default();
        for _ in 0..400 {
            let (t, n) = (rng.usize(1..20), rng.usize(1..12));
            let k = rng.usize(1..=n);
            let normalize = rng.bool();
            let scoring = if rng.bool() {
                Scoring::Softmax
            } else {
                Scoring::Sigmoid
            };
            let bias: Option<Vec<f32>> = rng.bool().then(|| {
                (0..n)
                    .map(|_| f32::from(rng.u8(0..4)) * 0.25 - 0.5)
                    .collect()
            });
            let scale = if rng.bool() { 1.0 } else { 2.5 };
            // Groups: a divisor of n above 1, enough of them used to hold k.
            let counts: Vec<usize> = (2..=n).filter(|c| n % c == 0).collect();
            let groups = (rng.bool() && !counts.is_empty())
                .then(|| counts[rng.usize(..counts.len())])
                .and_then(|count| {
                    let least = k.div_ceil(n / count);
                    (least <= count).then(|| ExpertGroups {
                        count: count as u32,
                        used: rng.usize(least..=count) as u32,
                    })
                });
            let rule = Rule {
                scoring,
                selection_bias: bias.as_deref(),
                groups,
                normalize,
                scale,
            };
            // Few distinct values, so that ties are common; with groups,
            // values of all sorts, so that no two groups' sums of
            // different keys tie (f32 and f64 could break such a tie
            // differently).
            let scores: Vec<f32> = (0..t * n)
                .map(|_| match groups {
                    None => rng.u8(0..6) as f32 * 0.5,
                    Some(_) => rng.f32() * 3.0,
                })
                .collect();
            routing.scores.clear();
            routing.scores.extend_from_slice(&scores);
            routing.route(t, n, k, rule);
            let mut want_rows: Vec<Vec<(u32, f32)>> = vec![Vec::new(); n];
            for (r, row) in scores.chunks_exact(n).enumerate() {
                let exps: Vec<f64> = row.iter().map(|&v| f64::from(v).exp()).collect();
                let total: f64 = exps.iter().sum();
                let probs: Vec<f64> = match scoring {
                    Scoring::Softmax => exps.iter().map(|e| e / total).collect(),
                    Scoring::Sigmoid => row
                        .iter()
                        .map(|&v| 1.0 / (1.0 + (-f64::from(v)).exp()))
                        .collect(),
                };
                let key = |e: usize| probs[e] + bias.as_ref().map_or(0.0, |b| f64::from(b[e]));
                // With groups: each scored by its two best keys with a
                // bias (one for groups of one), its best without, the best
                // `used` kept, ties to the lower.
                let allowed: Vec<bool> = match groups {
                    None => vec![true; n],
                    Some(g) => {
                        let size = n / g.count as usize;
                        let group_score = |i: usize| {
                            let mut keys: Vec<f64> = (i * size..(i + 1) * size).map(key).collect();
                            keys.sort_by(|a, b| b.total_cmp(a));
                            let best = if bias.is_some() { 2 } else { 1 };
                            keys.iter().take(best).sum::<f64>()
                        };
                        let mut order: Vec<usize> = (0..g.count as usize).collect();
                        order.sort_by(|&a, &b| {
                            group_score(b).total_cmp(&group_score(a)).then(a.cmp(&b))
                        });
                        let kept = &order[..g.used as usize];
                        (0..n).map(|e| kept.contains(&(e / size))).collect()
                    }
                };
                let mut order: Vec<usize> = (0..n).filter(|&e| allowed[e]).collect();
                order.sort_by(|&a, &b| key(b).total_cmp(&key(a)).then(a.cmp(&b)));
                let top = &order[..k];
                let chosen: f64 = top.iter().map(|&e| probs[e]).sum();
                for &e in top {
                    let p = probs[e];
                    let w = if normalize { p / chosen } else { p };
                    want_rows[e].push((r as u32, (w * f64::from(scale)) as f32));
                }
            }
            for (e, want) in want_rows.iter().enumerate() {
                let got = &routing.rows[routing.starts[e]..routing.starts[e + 1]];
                assert_eq!(
                    got.len(),
                    want.len(),
                    "expert {e} of {n}, top {k}, {rule:?}"
                );
                for (&(gr, gw), &(wr, ww)) in got.iter().zip(want) {
                    assert_eq!(gr, wr, "{rule:?}");
                    assert!((gw - ww).abs() < 1e-5, "{gw} vs {ww}, {rule:?}");
                }
            }
            assert_eq!(routing.starts[n], t * k);
        }
    }

    /// Scores that are not numbers never win a place, rows of nothing but
    /// NaN or -∞ still take `k` distinct experts with equal weights, an
    /// infinite score takes all the weight, and `k` past `n` takes every
    /// expert once.
    #[test]
    fn routing_survives_scores_that_are_not_finite() {
        let mut routing = Routing::default();
        let inf = f32::INFINITY;
        let rows = [
            [f32::NAN, 1.0, f32::NAN, 0.5],
            [f32::NAN; 4],
            [-inf; 4],
            [0.0, inf, 3.0, -inf],
        ];
        let rule = |scoring, normalize| Rule {
            scoring,
            selection_bias: None,
            groups: None,
            normalize,
            scale: 1.0,
        };
        routing.scores = rows.concat();
        routing.route(4, 4, 2, rule(Scoring::Softmax, true));
        // Row r's chosen experts and weights, expert by expert.
        fn picks(routing: &Routing, r: u32) -> Vec<(usize, f32)> {
            (0..routing.starts.len() - 1)
                .flat_map(|e| {
                    let rows = &routing.rows[routing.starts[e]..routing.starts[e + 1]];
                    rows.iter()
                        .filter(|&&(row, _)| row == r)
                        .map(move |&(_, w)| (e, w))
                })
                .collect()
        }
        let experts = |routing: &Routing, r| {
            let picks = picks(routing, r).into_iter();
            picks.map(|(e, _)| e).collect::<Vec<_>>()
        };
        assert_eq!(experts(&routing, 0), [1, 3]);
        assert_eq!(experts(&routing, 1), [0, 1]);
        assert_eq!(experts(&routing, 2), [0, 1]);
        assert!(picks(&routing, 1)
            .iter()
            .chain(&picks(&routing, 2))
            .all(|&(_, w)| (w - 0.5).abs() < 1e-6));
        let third = picks(&routing, 3);
        assert!(third.contains(&(1, 1.0)), "{third:?}");
        // Sigmoids: a NaN is probability 0, below every number.
        routing.scores = vec![f32::NAN, 1.0, -inf, 0.5];
        routing.route(1, 4, 2, rule(Scoring::Sigmoid, true));
        assert_eq!(experts(&routing, 0), [1, 3]);
        let sum: f32 = picks(&routing, 0).iter().map(|&(_, w)| w).sum();
        assert!((sum - 1.0).abs() < 1e-6, "{:?}", picks(&routing, 0));
        routing.scores = vec![0.3, 0.1, 0.2];
        routing.route(1, 3, 7, rule(Scoring::Softmax, false));
        assert_eq!(routing.starts, [0, 1, 2, 3]);
        assert!(routing
            .rows
            .iter()
            .all(|&(row, w)| row == 0 && w.is_finite()));
    }
}
