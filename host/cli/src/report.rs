//! The bench's report: a side-by-side table for the terminal, JSON with
//! every figure, and an SVG plot (latency distributions and hit rates per
//! policy).
//!
//! The plot is a few dozen SVG elements (polylines, rectangles, text); a
//! plotting crate would need a font stack to lay out the same text, so it is
//! written directly.

use std::fmt::Write as _;

use serde::Serialize;

use crate::measure::{Latency, PolicyReport};

/// The whole run: what was run and each policy's figures.
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    /// One line describing the run (workload, model, backend).
    pub title: String,
    /// The run's settings, as given.
    pub settings: serde_json::Value,
    /// The trace's offline bound on the hit rate (every distinct full-page
    /// prefix computed once, in the best order), the ceiling for each
    /// policy's hit rate.
    pub hit_rate_bound_pct: f64,
    /// Per policy, in the order run.
    pub policies: Vec<PolicyReport>,
}

/// The decode-first budget a policy ran with, in words.
fn prefill_budget(p: &PolicyReport) -> String {
    match (p.prefill_cap_tokens, p.prefill_share) {
        (Some(cap), Some(share)) => format!("{cap} tok ({share} of budget)"),
        _ => "off".into(),
    }
}

impl BenchReport {
    /// Fills each policy's hit-rate gain over the FCFS run, if there was
    /// one.
    pub fn compare_to_fcfs(&mut self) {
        let fcfs = self
            .policies
            .iter()
            .find(|p| p.policy == "fcfs")
            .map(|p| p.cache_hit_rate_pct);
        for p in &mut self.policies {
            p.hit_rate_gain_over_fcfs_pp = fcfs.map(|f| p.cache_hit_rate_pct - f);
        }
    }

    /// The terminal table: one column per policy.
    pub fn table(&self) -> String {
        let mut rows: Vec<(String, Vec<String>)> = Vec::new();
        rows.push((
            "prefill cap while decoding".into(),
            self.policies.iter().map(prefill_budget).collect(),
        ));
        let mut row = |name: &str, f: &dyn Fn(&PolicyReport) -> String| {
            rows.push((name.to_string(), self.policies.iter().map(f).collect()));
        };
        let lat = |l: &Latency| format!("{:.1} / {:.1} / {:.1}", l.p50, l.p95, l.p99);
        row("requests done / cancelled / rejected", &|p| {
            format!("{} / {} / {}", p.finished, p.cancelled, p.rejected)
        });
        row("duration (s)", &|p| format!("{:.2}", p.duration_s));
        row("throughput (req/s)", &|p| {
            format!("{:.1}", p.requests_per_s)
        });
        row("prefill (tok/s computed)", &|p| {
            format!("{:.0}", p.prefill_tokens_per_s)
        });
        row("decode (tok/s)", &|p| {
            format!("{:.0}", p.decode_tokens_per_s)
        });
        row("TTFT p50/p95/p99 (ms)", &|p| lat(&p.ttft_ms));
        row("TPOT p50/p95/p99 (ms)", &|p| lat(&p.tpot_ms));
        row("end-to-end p50/p95/p99 (ms)", &|p| lat(&p.e2e_ms));
        row("queue wait mean / max (ms)", &|p| {
            format!("{:.1} / {:.1}", p.queue_wait_ms.mean, p.queue_wait_ms.max)
        });
        row("cache hit rate (%)", &|p| {
            format!("{:.1}", p.cache_hit_rate_pct)
        });
        row("  offline bound (%)", &|p| {
            format!("{:.1}", p.hit_rate_bound_pct)
        });
        row("  gain over FCFS (points)", &|p| {
            p.hit_rate_gain_over_fcfs_pp
                .map_or("-".into(), |g| format!("{g:+.1}"))
        });
        row("pool use mean / peak (%)", &|p| {
            format!(
                "{:.1} / {:.1}",
                p.pool_utilization_pct, p.pool_peak_utilization_pct
            )
        });
        row("fragmentation (% of slots)", &|p| {
            format!("{:.1}", p.fragmentation_pct)
        });
        row("pages allocated / freed per s", &|p| {
            format!(
                "{:.0} / {:.0}",
                p.pages_allocated_per_s, p.pages_freed_per_s
            )
        });
        row("evictions (pages)", &|p| {
            format!("{} ({})", p.evictions, p.pages_evicted)
        });
        row("preemptions", &|p| p.preemptions.to_string());
        row("steps / mean batch / peak", &|p| {
            format!("{} / {:.1} / {}", p.steps, p.mean_batch, p.peak_running)
        });
        row("scheduling + cache share (%)", &|p| {
            format!("{:.2}", p.bookkeeping_pct)
        });
        row("  at full batch (%)", &|p| {
            p.bookkeeping_pct_at_mark.map_or("-".into(), |s| {
                format!("{s:.2} (≥{} running)", p.concurrency_mark)
            })
        });
        row("model compute share (%)", &|p| {
            format!("{:.2}", p.compute_pct)
        });
        row("leak-free", &|p| {
            if p.leak_free {
                "yes".into()
            } else {
                format!("NO: {:?}", p.audit)
            }
        });

        let name_width = rows.iter().map(|r| r.0.chars().count()).max().unwrap_or(0);
        let col_width = rows
            .iter()
            .flat_map(|r| r.1.iter().map(|c| c.chars().count()))
            .chain(self.policies.iter().map(|p| p.policy.len()))
            .max()
            .unwrap_or(0);
        let mut out = String::new();
        let _ = write!(out, "{:name_width$}", "");
        for p in &self.policies {
            let _ = write!(out, "  {:>col_width$}", p.policy);
        }
        out.push('\n');
        for (name, cells) in &rows {
            let _ = write!(out, "{name:name_width$}");
            for c in cells {
                let _ = write!(out, "  {c:>col_width$}");
            }
            out.push('\n');
        }
        // Why requests were refused, once per distinct reason.
        for p in &self.policies {
            let mut reasons: Vec<(&str, usize)> = Vec::new();
            for r in &p.per_request {
                if let Some(reason) = r.reason.as_deref() {
                    match reasons.iter_mut().find(|(x, _)| *x == reason) {
                        Some((_, n)) => *n += 1,
                        None => reasons.push((reason, 1)),
                    }
                }
            }
            const SHOWN: usize = 3;
            for (reason, n) in reasons.iter().take(SHOWN) {
                let _ = writeln!(out, "{}: {n} rejected: {reason}", p.policy);
            }
            if reasons.len() > SHOWN {
                let rest: usize = reasons[SHOWN..].iter().map(|r| r.1).sum();
                let _ = writeln!(
                    out,
                    "{}: {rest} more rejected (reasons in --json)",
                    p.policy
                );
            }
        }
        out
    }

    /// Every figure as pretty JSON.
    pub fn json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }

    /// An SVG with three panels: the distributions (CDFs) of time to first
    /// token and of end-to-end latency per policy, and the cache hit rate per
    /// policy.
    pub fn svg(&self) -> String {
        const W: f64 = 1080.0;
        const H: f64 = 420.0;
        const COLOURS: [&str; 6] = [
            "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf",
        ];
        let mut s = String::new();
        let _ = writeln!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(s, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
        let _ = writeln!(
            s,
            r#"<text x="{}" y="22" text-anchor="middle" font-size="14">{}</text>"#,
            W / 2.0,
            escape(&self.title)
        );
        let series = |f: fn(&crate::measure::RequestRecord) -> Option<f64>| -> Vec<Vec<f64>> {
            self.policies
                .iter()
                .map(|p| {
                    let mut v: Vec<f64> = p.per_request.iter().filter_map(f).collect();
                    v.sort_by(f64::total_cmp);
                    v
                })
                .collect()
        };
        cdf_panel(
            &mut s,
            20.0,
            "time to first token (ms)",
            &series(|r| r.ttft_ms),
            &COLOURS,
        );
        cdf_panel(
            &mut s,
            380.0,
            "end-to-end latency (ms)",
            &series(|r| r.e2e_ms),
            &COLOURS,
        );
        // Hit-rate bars.
        let (x0, y0, w, h) = (760.0, 60.0, 290.0, 300.0);
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle">prefix-cache hit rate (%)</text>"#,
            x0 + w / 2.0,
            y0 - 12.0
        );
        axes(&mut s, x0, y0, w, h);
        let n = self.policies.len().max(1) as f64;
        for (i, p) in self.policies.iter().enumerate() {
            let bw = w / n * 0.6;
            let bx = x0 + w / n * (i as f64 + 0.2);
            let bh = h * p.cache_hit_rate_pct.clamp(0.0, 100.0) / 100.0;
            let c = COLOURS[i % COLOURS.len()];
            let _ = writeln!(
                s,
                r#"<rect x="{bx:.1}" y="{:.1}" width="{bw:.1}" height="{bh:.1}" fill="{c}"/>"#,
                y0 + h - bh
            );
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{:.1}</text>"#,
                bx + bw / 2.0,
                y0 + h - bh - 4.0,
                p.cache_hit_rate_pct
            );
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                bx + bw / 2.0,
                y0 + h + 16.0,
                escape(&p.policy)
            );
        }
        // Legend.
        for (i, p) in self.policies.iter().enumerate() {
            let c = COLOURS[i % COLOURS.len()];
            let y = H - 18.0;
            let x = 40.0 + i as f64 * 120.0;
            let _ = writeln!(
                s,
                r#"<line x1="{x}" y1="{y}" x2="{}" y2="{y}" stroke="{c}" stroke-width="3"/><text x="{}" y="{}">{}</text>"#,
                x + 24.0,
                x + 30.0,
                y + 4.0,
                escape(&p.policy)
            );
        }
        s.push_str("</svg>\n");
        s
    }
}

fn axes(s: &mut String, x0: f64, y0: f64, w: f64, h: f64) {
    let _ = writeln!(
        s,
        r##"<path d="M{x0},{y0} V{} H{}" fill="none" stroke="#333"/>"##,
        y0 + h,
        x0 + w
    );
}

/// One panel of cumulative distributions (share of requests at or below a
/// latency), one line per policy, on a shared linear axis.
fn cdf_panel(s: &mut String, x0: f64, title: &str, series: &[Vec<f64>], colours: &[&str]) {
    let (y0, w, h) = (60.0, 320.0, 300.0);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">{title}: share of requests</text>"#,
        x0 + 30.0 + w / 2.0,
        y0 - 12.0
    );
    let x0 = x0 + 30.0;
    axes(s, x0, y0, w, h);
    let max = series
        .iter()
        .filter_map(|v| v.last().copied())
        .fold(0.0f64, f64::max)
        .max(1e-3);
    for tick in 0..=4 {
        let f = f64::from(tick) / 4.0;
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="10">{:.0}</text>"#,
            x0 + w * f,
            y0 + h + 14.0,
            max * f
        );
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end" font-size="10">{:.0}%</text>"#,
            x0 - 4.0,
            y0 + h - h * f + 3.0,
            100.0 * f
        );
    }
    for (i, values) in series.iter().enumerate() {
        if values.is_empty() {
            continue;
        }
        let n = values.len() as f64;
        let mut points = String::new();
        for (k, v) in values.iter().enumerate() {
            let _ = write!(
                points,
                "{:.1},{:.1} ",
                x0 + w * v / max,
                y0 + h - h * (k + 1) as f64 / n
            );
        }
        let _ = writeln!(
            s,
            r#"<polyline points="{points}" fill="none" stroke="{}" stroke-width="2"/>"#,
            colours[i % colours.len()]
        );
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
