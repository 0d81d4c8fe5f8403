//! Benchmark traffic: synthetic workloads with the prefix structure of real
//! traffic, and recorded traces in JSON Lines.
//!
//! A trace is a list of [`TraceEntry`]s (arrival time, prompt tokens, output
//! limit, priority). Synthetic workloads draw one from a seed, so the same
//! seed gives the same trace on every machine; `--trace FILE.jsonl` reads
//! one, and `--save-trace` writes the synthetic one out for replay (both in
//! `trace.rs`).

use std::fmt;
use std::str::FromStr;

use pagoda_engine::Priority;
use serde::Serialize;

/// One request of a trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceEntry {
    /// Microseconds after the start of the run.
    pub arrival_us: u64,
    /// Prompt token ids.
    pub prompt: Vec<u32>,
    /// Most tokens to generate.
    pub max_tokens: u32,
    /// Priority class.
    pub priority: Priority,
}

/// The prefix structure of a synthetic workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum WorkloadKind {
    /// Groups of requests share a long instruction prefix (few-shot
    /// examples), each with its own question.
    FewShot,
    /// Conversations: each turn's prompt is the whole conversation so far
    /// plus a new user message.
    MultiTurn,
    /// Branches off a shared trunk, two levels deep (each branch then
    /// branches again).
    TreeOfThought,
    /// Every prompt is unique.
    NoSharing,
    /// Retrieval-augmented generation: a shared instruction, then 1 to 3
    /// documents in canonical order from `groups` documents of which a few
    /// are popular (Zipf-like), then a question.
    Rag,
    /// Agents: after a common system prompt, each of `groups` agents grows
    /// a scratchpad; each step's prompt is the previous one plus a tool
    /// output and a new thought.
    Agent,
    /// A hot prefix shared by half the requests among cold one-off prompts.
    HotPrefix,
}

impl fmt::Display for WorkloadKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::FewShot => "few-shot",
            Self::MultiTurn => "multi-turn",
            Self::TreeOfThought => "tree-of-thought",
            Self::NoSharing => "no-sharing",
            Self::Rag => "rag",
            Self::Agent => "agent",
            Self::HotPrefix => "hot-prefix",
        })
    }
}

/// A distribution of lengths in tokens, parsed from `N` (fixed),
/// `uniform:MIN:MAX` or `lognormal:MEDIAN:SIGMA` (clamped to `1..=8 ×
/// MEDIAN`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub enum LengthDist {
    /// Always `n`.
    Fixed(u32),
    /// Uniform in `min..=max`.
    Uniform(u32, u32),
    /// Log-normal around a median with a spread `sigma`.
    LogNormal(u32, f64),
}

impl LengthDist {
    /// Draws one length (at least 1).
    pub fn sample(&self, rng: &mut fastrand::Rng) -> u32 {
        match *self {
            Self::Fixed(n) => n.max(1),
            Self::Uniform(lo, hi) => rng.u32(lo..=hi).max(1),
            Self::LogNormal(median, sigma) => {
                // Box-Muller: one standard normal from two uniforms.
                let u1 = 1.0 - rng.f64();
                let u2 = rng.f64();
                let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
                let v = f64::from(median) * (sigma * z).exp();
                v.round().clamp(1.0, f64::from(median) * 8.0) as u32
            }
        }
    }
}

impl fmt::Display for LengthDist {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Fixed(n) => write!(f, "{n}"),
            Self::Uniform(lo, hi) => write!(f, "uniform:{lo}:{hi}"),
            Self::LogNormal(m, s) => write!(f, "lognormal:{m}:{s}"),
        }
    }
}

impl FromStr for LengthDist {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        const VALID: &str = "valid: N, uniform:MIN:MAX, lognormal:MEDIAN:SIGMA";
        let count = |v: &str| -> Result<u32, String> {
            match v.trim().parse::<u32>() {
                Ok(n) if n > 0 => Ok(n),
                _ => Err(format!("'{v}' is not a positive token count ({VALID})")),
            }
        };
        let parts: Vec<&str> = s.split(':').collect();
        match parts.as_slice() {
            [n] => Ok(Self::Fixed(count(n)?)),
            ["uniform", lo, hi] => {
                let (lo, hi) = (count(lo)?, count(hi)?);
                if lo > hi {
                    return Err(format!("uniform:{lo}:{hi} has MIN above MAX"));
                }
                Ok(Self::Uniform(lo, hi))
            }
            ["lognormal", median, sigma] => {
                let median = count(median)?;
                match sigma.trim().parse::<f64>() {
                    Ok(s) if (0.0..=4.0).contains(&s) => Ok(Self::LogNormal(median, s)),
                    _ => Err(format!("lognormal SIGMA '{sigma}' must be in 0..=4")),
                }
            }
            _ => Err(format!("'{s}' is not a length distribution ({VALID})")),
        }
    }
}

/// When requests arrive.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub enum Arrivals {
    /// All at once, at time zero.
    Offline,
    /// A Poisson process at this many requests per second.
    Poisson(f64),
}

/// A synthetic workload's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct WorkloadSpec {
    /// Prefix structure.
    pub kind: WorkloadKind,
    /// Requests in the trace.
    pub requests: u32,
    /// Length of the shared part: the few-shot prefix, the tree's trunk, the
    /// chat's system prompt, the RAG instruction, the agents' system prompt,
    /// the hot prefix; a RAG document is half of it.
    pub shared_len: u32,
    /// Sharing groups: few-shot prefixes, conversations, trees, RAG
    /// documents or agents (ignored for no sharing and hot prefix).
    pub groups: u32,
    /// Length of each request's own part: the question, the user turn, the
    /// branch, or the whole prompt without sharing.
    pub prompt_len: LengthDist,
    /// Output tokens per request.
    pub output_len: LengthDist,
    /// Arrival process.
    pub arrivals: Arrivals,
    /// Token ids are drawn from `0..vocab`.
    pub vocab: u32,
    /// Seed of everything random.
    pub seed: u64,
}

impl WorkloadSpec {
    /// Draws the trace.
    pub fn generate(&self) -> Vec<TraceEntry> {
        let mut rng = fastrand::Rng::with_seed(self.seed);
        let vocab = self.vocab.max(1);
        let tokens = |rng: &mut fastrand::Rng, n: u32| -> Vec<u32> {
            (0..n).map(|_| rng.u32(0..vocab)).collect()
        };
        let n = self.requests as usize;
        let groups = self.groups.max(1) as usize;
        let mut prompts: Vec<(Vec<u32>, u32)> = Vec::with_capacity(n);
        match self.kind {
            WorkloadKind::NoSharing => {
                for _ in 0..n {
                    let len = self.prompt_len.sample(&mut rng);
                    let out = self.output_len.sample(&mut rng);
                    prompts.push((tokens(&mut rng, len), out));
                }
            }
            WorkloadKind::FewShot => {
                let prefixes: Vec<Vec<u32>> = (0..groups)
                    .map(|_| tokens(&mut rng, self.shared_len))
                    .collect();
                for _ in 0..n {
                    let mut p = prefixes[rng.usize(0..groups)].clone();
                    let len = self.prompt_len.sample(&mut rng);
                    p.extend(tokens(&mut rng, len));
                    prompts.push((p, self.output_len.sample(&mut rng)));
                }
            }
            WorkloadKind::MultiTurn => {
                // Conversations advance in turns; a request is one turn, and
                // turns of one conversation keep their order in the trace.
                let mut convs: Vec<Vec<u32>> = (0..groups)
                    .map(|_| tokens(&mut rng, self.shared_len))
                    .collect();
                for _ in 0..n {
                    let c = rng.usize(0..groups);
                    let user = self.prompt_len.sample(&mut rng);
                    let user_tokens = tokens(&mut rng, user);
                    convs[c].extend(user_tokens);
                    let out = self.output_len.sample(&mut rng);
                    prompts.push((convs[c].clone(), out));
                    // The assistant's reply joins the conversation before
                    // the next turn.
                    let reply = tokens(&mut rng, out);
                    convs[c].extend(reply);
                }
            }
            WorkloadKind::TreeOfThought => {
                let trunks: Vec<Vec<u32>> = (0..groups)
                    .map(|_| tokens(&mut rng, self.shared_len))
                    .collect();
                // Each tree: branches off the trunk, then branches off those.
                let mut nodes: Vec<Vec<Vec<u32>>> = vec![Vec::new(); groups];
                for _ in 0..n {
                    let t = rng.usize(0..groups);
                    let fan = 4;
                    let base = if nodes[t].len() >= fan && rng.bool() {
                        nodes[t][rng.usize(0..fan)].clone()
                    } else {
                        trunks[t].clone()
                    };
                    let mut p = base;
                    let len = self.prompt_len.sample(&mut rng).div_ceil(2);
                    p.extend(tokens(&mut rng, len));
                    if nodes[t].len() < fan {
                        nodes[t].push(p.clone());
                    }
                    prompts.push((p, self.output_len.sample(&mut rng)));
                }
            }
            WorkloadKind::Rag => {
                let instruction = tokens(&mut rng, self.shared_len);
                // Documents of half the instruction's length, so three of
                // them after it fit the context with the default lengths.
                let doc_len = self.shared_len.div_ceil(2);
                let docs: Vec<Vec<u32>> = (0..groups).map(|_| tokens(&mut rng, doc_len)).collect();
                // Zipf weights 1/(rank+1): a few documents are popular.
                let weights: Vec<f64> = (0..groups).map(|r| 1.0 / (r as f64 + 1.0)).collect();
                let total: f64 = weights.iter().sum();
                let draw = |rng: &mut fastrand::Rng| -> usize {
                    let mut x = rng.f64() * total;
                    for (i, w) in weights.iter().enumerate() {
                        if x < *w {
                            return i;
                        }
                        x -= w;
                    }
                    groups - 1
                };
                for _ in 0..n {
                    let k = rng.usize(1..=3.min(groups));
                    let mut chosen: Vec<usize> = Vec::with_capacity(k);
                    while chosen.len() < k {
                        let d = draw(&mut rng);
                        if !chosen.contains(&d) {
                            chosen.push(d);
                        }
                    }
                    // Canonical order, so equal document sets share a prefix.
                    chosen.sort_unstable();
                    let mut p = instruction.clone();
                    for d in chosen {
                        p.extend_from_slice(&docs[d]);
                    }
                    let len = self.prompt_len.sample(&mut rng);
                    p.extend(tokens(&mut rng, len));
                    prompts.push((p, self.output_len.sample(&mut rng)));
                }
            }
            WorkloadKind::Agent => {
                let system = tokens(&mut rng, self.shared_len);
                let mut pads: Vec<Vec<u32>> = vec![system; groups];
                for _ in 0..n {
                    let a = rng.usize(0..groups);
                    // A tool output, then the agent's new thought.
                    let tool = self.prompt_len.sample(&mut rng);
                    let tool_tokens = tokens(&mut rng, tool);
                    pads[a].extend(tool_tokens);
                    let thought = self.prompt_len.sample(&mut rng).div_ceil(2);
                    let thought_tokens = tokens(&mut rng, thought);
                    pads[a].extend(thought_tokens);
                    prompts.push((pads[a].clone(), self.output_len.sample(&mut rng)));
                }
            }
            WorkloadKind::HotPrefix => {
                let hot = tokens(&mut rng, self.shared_len);
                for _ in 0..n {
                    let len = self.prompt_len.sample(&mut rng);
                    let p = if rng.bool() {
                        let mut p = hot.clone();
                        p.extend(tokens(&mut rng, len));
                        p
                    } else {
                        tokens(&mut rng, self.shared_len + len)
                    };
                    prompts.push((p, self.output_len.sample(&mut rng)));
                }
            }
        }
        let mut at = 0.0f64;
        prompts
            .into_iter()
            .map(|(prompt, max_tokens)| {
                if let Arrivals::Poisson(rate) = self.arrivals {
                    at += -(1.0 - rng.f64()).ln() / rate;
                }
                TraceEntry {
                    arrival_us: (at * 1e6) as u64,
                    prompt,
                    max_tokens,
                    priority: Priority::Normal,
                }
            })
            .collect()
    }
}

/// An upper bound on the prefix-cache hit rate any run of `trace` can
/// reach, in percent, whatever order a policy admits its prompts in and
/// however large the pool. Counted as the engine counts hits: a prompt
/// reuses whole pages of all its tokens but the last (which is computed to
/// sample the first output), out of all its tokens, each prompt once (a
/// preempted request readmitted is not counted again); only prompts are
/// cached (outputs of synthetic traces are never prompted again).
///
/// Every distinct page-aligned prefix must be computed once, by the first
/// prompt holding it to run; every later prompt that may reuse it can hit
/// it. So a prefix held by `a` prompts, `r` of which may reuse it, gives at
/// most `r - 1` hits, or `r` when some prompt holds it without being able
/// to reuse it (it ends exactly there) and computes it first. The sum is
/// reached by the best order on most traces (it ignores only that a
/// prompt's pages hit in order), and arrival order is one order, so no run
/// can land above it.
pub fn hit_rate_bound_pct<'a>(
    prompts: impl IntoIterator<Item = &'a [u32]>,
    page_size: usize,
) -> f64 {
    let page_size = page_size.max(1);
    // Per distinct prefix: prompts holding it, and those that may reuse it.
    let mut holders: std::collections::HashMap<&[u32], (u64, u64)> =
        std::collections::HashMap::new();
    let mut total = 0u64;
    for prompt in prompts {
        total += prompt.len() as u64;
        let reusable = prompt.len().saturating_sub(1) / page_size;
        for k in 1..=prompt.len() / page_size {
            let entry = holders.entry(&prompt[..k * page_size]).or_default();
            entry.0 += 1;
            entry.1 += u64::from(k <= reusable);
        }
    }
    let hits: u64 = holders
        .values()
        .map(|&(held, reusable)| {
            if reusable < held {
                reusable
            } else {
                reusable.saturating_sub(1)
            }
        })
        .sum::<u64>()
        * page_size as u64;
    if total == 0 {
        0.0
    } else {
        100.0 * hits as f64 / total as f64
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A small workload of `kind`, shared with the trace tests.
    pub(crate) fn spec(kind: WorkloadKind) -> WorkloadSpec {
        WorkloadSpec {
            kind,
            requests: 60,
            shared_len: 64,
            groups: 3,
            prompt_len: LengthDist::Uniform(8, 24),
            output_len: LengthDist::Fixed(4),
            arrivals: Arrivals::Poisson(100.0),
            vocab: 500,
            seed: 9,
        }
    }

    fn common_prefix(a: &[u32], b: &[u32]) -> usize {
        a.iter().zip(b).take_while(|(x, y)| x == y).count()
    }

    #[test]
    fn same_seed_same_trace() {
        for kind in [
            WorkloadKind::FewShot,
            WorkloadKind::MultiTurn,
            WorkloadKind::TreeOfThought,
            WorkloadKind::NoSharing,
            WorkloadKind::Rag,
            WorkloadKind::Agent,
            WorkloadKind::HotPrefix,
        ] {
            let a = spec(kind).generate();
            assert_eq!(a, spec(kind).generate());
            let mut other = spec(kind);
            other.seed = 10;
            assert_ne!(a, other.generate());
            assert_eq!(a.len(), 60);
            assert!(a.windows(2).all(|w| w[0].arrival_us <= w[1].arrival_us));
            assert!(a.iter().all(|e| e.prompt.iter().all(|&t| t < 500)));
        }
    }

    #[test]
    fn sharing_structure() {
        // Few-shot: every prompt starts with one of three prefixes.
        let t = spec(WorkloadKind::FewShot).generate();
        let mut prefixes: Vec<&[u32]> = t.iter().map(|e| &e.prompt[..64]).collect();
        prefixes.sort();
        prefixes.dedup();
        assert_eq!(prefixes.len(), 3);
        // Multi-turn: a later turn of a conversation extends an earlier one.
        let t = spec(WorkloadKind::MultiTurn).generate();
        let extended = t
            .iter()
            .enumerate()
            .filter(|(i, e)| {
                t[..*i]
                    .iter()
                    .any(|p| p.prompt.len() < e.prompt.len() && e.prompt.starts_with(&p.prompt))
            })
            .count();
        assert!(extended >= 50, "{extended} turns extend an earlier turn");
        // Tree of thought: some prompts share more than the trunk.
        let t = spec(WorkloadKind::TreeOfThought).generate();
        let deep = t
            .iter()
            .enumerate()
            .filter(|(i, e)| {
                t[..*i]
                    .iter()
                    .any(|p| common_prefix(&p.prompt, &e.prompt) > 64)
            })
            .count();
        assert!(deep > 10, "{deep} prompts share past the trunk");
        // No sharing: no two prompts share a page.
        let t = spec(WorkloadKind::NoSharing).generate();
        for (i, a) in t.iter().enumerate() {
            for b in &t[..i] {
                assert!(common_prefix(&a.prompt, &b.prompt) < 16);
            }
        }
    }

    #[test]
    fn rag_structure() {
        // 10 documents of 32 tokens after a 64-token instruction.
        let mut s = spec(WorkloadKind::Rag);
        s.groups = 10;
        s.requests = 400;
        let t = s.generate();
        let instr = &t[0].prompt[..64];
        // Every prompt: instruction + 1..=3 documents + a question of 8..=24.
        let mut doc_count = std::collections::HashMap::<Vec<u32>, usize>::new();
        for e in &t {
            assert_eq!(&e.prompt[..64], instr);
            let body = e.prompt.len() - 64;
            let docs = (body - 8) / 32;
            assert!(
                (1..=3).contains(&docs),
                "{} tokens after the instruction",
                body
            );
            assert!((8..=24).contains(&(body - docs * 32)));
            for d in 0..docs {
                let doc = e.prompt[64 + d * 32..96 + d * 32].to_vec();
                *doc_count.entry(doc).or_default() += 1;
            }
        }
        assert_eq!(doc_count.len(), 10, "all documents are drawn");
        let mut counts: Vec<usize> = doc_count.values().copied().collect();
        counts.sort_unstable_by(|a, b| b.cmp(a));
        // Zipf-like: the most popular document is drawn far more often
        // than the least popular one.
        assert!(counts[0] > 3 * counts[9], "{counts:?}");
        // Canonical order: the same set of documents gives the same prefix,
        // so many prompts share more than the instruction.
        let deep = t
            .iter()
            .enumerate()
            .filter(|(i, e)| {
                t[..*i]
                    .iter()
                    .any(|p| common_prefix(&p.prompt, &e.prompt) >= 96)
            })
            .count();
        assert!(
            deep > 300,
            "{deep} prompts share a document with an earlier one"
        );
    }

    #[test]
    fn agent_and_hot_prefix_structure() {
        // Agent: each step extends the same agent's previous step.
        let t = spec(WorkloadKind::Agent).generate();
        let system = &t[0].prompt[..64];
        assert!(t.iter().all(|e| e.prompt.starts_with(system)));
        let extended = t
            .iter()
            .enumerate()
            .filter(|(i, e)| {
                t[..*i]
                    .iter()
                    .any(|p| p.prompt.len() < e.prompt.len() && e.prompt.starts_with(&p.prompt))
            })
            .count();
        // All but each agent's first step (3 agents).
        assert_eq!(extended, 57);
        // Hot prefix: about half start with one hot prefix, the rest share
        // less than a page with anything.
        let mut s = spec(WorkloadKind::HotPrefix);
        s.requests = 200;
        let t = s.generate();
        let mut firsts: std::collections::HashMap<&[u32], usize> = Default::default();
        for e in &t {
            *firsts.entry(&e.prompt[..64]).or_default() += 1;
        }
        let hot = firsts.values().copied().max().unwrap_or(0);
        assert!((70..=130).contains(&hot), "{hot} hot prompts of 200");
        assert_eq!(firsts.len(), 200 - hot + 1, "cold prompts are one-offs");
    }

    /// The hit rate of running `prompts` in this order with an unbounded
    /// cache, as the engine counts it: leading pages already computed.
    fn hit_rate_in_order(prompts: &[&[u32]], page: usize) -> f64 {
        let mut seen = std::collections::HashSet::new();
        let (mut hits, mut total) = (0usize, 0usize);
        for p in prompts {
            total += p.len();
            let reusable = (p.len() - 1) / page;
            hits += page
                * (1..=reusable)
                    .take_while(|&k| seen.contains(&p[..k * page]))
                    .count();
            for k in 1..=p.len() / page {
                seen.insert(&p[..k * page]);
            }
        }
        100.0 * hits as f64 / total.max(1) as f64
    }

    /// Every order of `prompts`, by Heap's algorithm.
    fn best_order_rate(prompts: &mut [&[u32]], page: usize) -> f64 {
        fn visit(k: usize, p: &mut [&[u32]], page: usize, best: &mut f64) {
            if k <= 1 {
                *best = best.max(hit_rate_in_order(p, page));
                return;
            }
            for i in 0..k {
                visit(k - 1, p, page, best);
                let j = if k.is_multiple_of(2) { i } else { 0 };
                p.swap(j, k - 1);
            }
        }
        let mut best = 0.0;
        visit(prompts.len(), prompts, page, &mut best);
        best
    }

    #[test]
    fn hit_rate_bound_by_hand() {
        // Pages of 4. A: 9 tokens (2 full pages). B = A's first 8 tokens + 3
        // more (11). C = A's first 8 exactly (8 tokens): it holds both
        // pages but may reuse only the first. D: unrelated 6 tokens. E = B.
        // Run C first: it computes both pages, and A, B and E hit both (8
        // tokens each): 24 of 9 + 11 + 8 + 6 + 11 = 45 tokens. Arrival
        // order gets only 20 (C hits one page after A computed both).
        let a: Vec<u32> = (0..9).collect();
        let mut b: Vec<u32> = (0..8).collect();
        b.extend([100, 101, 102]);
        let c: Vec<u32> = (0..8).collect();
        let d: Vec<u32> = (200..206).collect();
        let mut prompts: Vec<&[u32]> = vec![&a, &b, &c, &d, &b];
        let got = hit_rate_bound_pct(prompts.iter().copied(), 4);
        assert!((got - 100.0 * 24.0 / 45.0).abs() < 1e-9, "{got}");
        assert!((hit_rate_in_order(&prompts, 4) - 100.0 * 20.0 / 45.0).abs() < 1e-9);
        assert!((best_order_rate(&mut prompts, 4) - got).abs() < 1e-9);
        assert_eq!(hit_rate_bound_pct(std::iter::empty(), 16), 0.0);
    }

    #[test]
    fn hit_rate_bound_is_above_every_order() {
        // Random small traces over a few shared stems: the bound is never
        // below the best of all admission orders, and equals it on most.
        let mut rng = fastrand::Rng::with_seed(7);
        let mut tight = 0;
        for _ in 0..200 {
            let stems: Vec<Vec<u32>> = (0..3)
                .map(|s| (0..12).map(|i| s * 100 + i).collect())
                .collect();
            let prompts: Vec<Vec<u32>> = (0..rng.usize(1..7))
                .map(|_| {
                    let stem = &stems[rng.usize(..stems.len())];
                    let mut p = stem[..rng.usize(1..=stem.len())].to_vec();
                    let own = rng.usize(0..5);
                    p.extend((0..own).map(|_| 1000 + rng.u32(..3)));
                    p
                })
                .collect();
            let mut refs: Vec<&[u32]> = prompts.iter().map(Vec::as_slice).collect();
            let bound = hit_rate_bound_pct(refs.iter().copied(), 4);
            let best = best_order_rate(&mut refs, 4);
            assert!(
                bound + 1e-9 >= best,
                "bound {bound} below order {best}: {prompts:?}"
            );
            tight += usize::from((bound - best).abs() < 1e-9);
        }
        assert!(tight > 150, "bound tight on only {tight} of 200 traces");
    }

    #[test]
    fn poisson_rate_is_respected() {
        let mut s = spec(WorkloadKind::NoSharing);
        s.requests = 4000;
        s.arrivals = Arrivals::Poisson(200.0);
        let t = s.generate();
        let span = t.last().map(|e| e.arrival_us).unwrap_or(0) as f64 / 1e6;
        let rate = 4000.0 / span;
        assert!((rate - 200.0).abs() < 20.0, "rate {rate}");
        s.arrivals = Arrivals::Offline;
        assert!(s.generate().iter().all(|e| e.arrival_us == 0));
    }

    #[test]
    fn lengths_parse_and_stay_in_range() {
        assert_eq!("32".parse(), Ok(LengthDist::Fixed(32)));
        assert_eq!("uniform:4:9".parse(), Ok(LengthDist::Uniform(4, 9)));
        assert!("uniform:9:4".parse::<LengthDist>().is_err());
        assert!("0".parse::<LengthDist>().is_err());
        assert!("gauss:3".parse::<LengthDist>().is_err());
        let d: LengthDist = "lognormal:100:0.5".parse().unwrap();
        let mut rng = fastrand::Rng::with_seed(1);
        let mut v: Vec<u32> = (0..2001).map(|_| d.sample(&mut rng)).collect();
        assert!(v.iter().all(|&x| (1..=800).contains(&x)));
        v.sort();
        assert!((85..=115).contains(&v[1000]), "median {}", v[1000]);
    }
}
