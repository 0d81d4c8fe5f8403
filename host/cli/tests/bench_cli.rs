//! End-to-end tests of the `pagoda` binary: small `bench` runs whose JSON
//! report must hold its invariants (every request accounted for, no leaked
//! page, hit rates that match the workload's sharing, LPM at least FCFS on
//! shared prefixes), and clean errors for bad arguments and bad traces.
//!
//! An integration test of `pagoda-cli`, so Cargo builds the binary first and
//! hands its path over.

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

fn pagoda(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pagoda"))
        .args(args)
        .output()
        .expect("the pagoda binary runs")
}

fn temp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pagoda-e2e-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// A small, quick run: few requests, short prompts and outputs.
const SMALL: &[&str] = &[
    "bench",
    "--quiet",
    "--requests",
    "48",
    "--shared-len",
    "128",
    "--groups",
    "4",
    "--prompt-len",
    "uniform:8:40",
    "--output-len",
    "uniform:2:8",
    "--kv-pages",
    "512",
    "--fairness-ms",
    "0",
];

/// Runs `bench` with `SMALL` plus `extra`, returns the JSON report.
fn bench(name: &str, extra: &[&str]) -> Value {
    let json = temp(&format!("{name}.json"));
    let mut args: Vec<&str> = SMALL.to_vec();
    args.extend_from_slice(extra);
    let json_arg = json.to_str().unwrap().to_string();
    args.extend_from_slice(&["--json", &json_arg]);
    let out = pagoda(&args);
    assert!(
        out.status.success(),
        "pagoda {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("cache hit rate"),
        "no table on stdout:\n{table}"
    );
    serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap()
}

fn policy<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["policies"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["policy"] == name)
        .unwrap_or_else(|| panic!("no {name} in the report"))
}

fn num(v: &Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} missing in {v}"))
}

/// Every request accounted for exactly once and every page free or cached.
fn assert_accounted(p: &Value) {
    let requests = num(p, "requests");
    let accounted = num(p, "finished") + num(p, "cancelled") + num(p, "rejected");
    assert_eq!(requests, accounted, "{}", p["policy"]);
    assert_eq!(p["per_request"].as_array().unwrap().len() as f64, requests);
    assert_eq!(p["leak_free"], true, "{}: {}", p["policy"], p["audit"]);
    let audit = &p["audit"];
    assert_eq!(audit["referenced_pages"], 0);
    assert_eq!(audit["active_sequences"], 0);
    assert_eq!(
        num(audit, "free_pages") + num(audit, "cached_pages"),
        num(audit, "total_pages")
    );
}

#[test]
fn the_vulkan_backend_runs_the_engine_leak_free() {
    let json = temp("vulkan.json");
    let mut args: Vec<&str> = SMALL.to_vec();
    args.extend_from_slice(&["--backend", "vulkan", "--requests", "6", "--policy", "lpm"]);
    args.extend_from_slice(&["--json", json.to_str().unwrap()]);
    let out = pagoda(&args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Lavapipe in CI; elsewhere without a Vulkan device, one line and skip.
    let in_ci = std::env::var("CI").is_ok_and(|v| v == "true");
    if !out.status.success() && stderr.contains("--backend vulkan:") && !in_ci {
        eprintln!("skipping: {}", stderr.trim());
        return;
    }
    assert!(out.status.success(), "pagoda {args:?} failed:\n{stderr}");
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let lpm = policy(&report, "lpm");
    assert_accounted(lpm);
    assert_eq!(num(lpm, "finished"), 6.0);
    assert_eq!(report["settings"]["backend"], "vulkan");
}

#[test]
fn no_sharing_hits_nothing_and_accounts_for_everything() {
    let report = bench("no-sharing", &["--workload", "no-sharing"]);
    for name in ["fcfs", "lpm"] {
        let p = policy(&report, name);
        assert_accounted(p);
        assert_eq!(num(p, "finished"), 48.0);
        assert!(
            num(p, "cache_hit_rate_pct") < 2.0,
            "{name}: {}",
            p["cache_hit_rate_pct"]
        );
        assert!(num(p, "decode_tokens") >= 48.0 * 2.0);
        assert!(p["ttft_ms"]["p99"].as_f64().unwrap() > 0.0);
    }
}

#[test]
fn shared_prefixes_hit_and_lpm_hits_at_least_as_much_as_fcfs() {
    for workload in ["few-shot", "multi-turn", "tree-of-thought"] {
        let report = bench(workload, &["--workload", workload]);
        let fcfs = policy(&report, "fcfs");
        let lpm = policy(&report, "lpm");
        assert_accounted(fcfs);
        assert_accounted(lpm);
        let (f, l) = (
            num(fcfs, "cache_hit_rate_pct"),
            num(lpm, "cache_hit_rate_pct"),
        );
        assert!(l > 40.0, "{workload}: LPM hit rate {l}");
        assert!(l >= f, "{workload}: LPM {l} below FCFS {f}");
        assert!((num(lpm, "hit_rate_gain_over_fcfs_pp") - (l - f)).abs() < 1e-9);
    }
}

#[test]
fn workloads_stay_under_the_hit_rate_bound() {
    // Few-shot on the default pool preempts (readmitted prompts find their
    // own recomputed pages, which must not count as hits).
    for workload in ["few-shot", "rag", "agent", "hot-prefix"] {
        let report = bench(workload, &["--workload", workload]);
        let bound = num(&report, "hit_rate_bound_pct");
        assert!(bound > 20.0, "{workload}: bound {bound}");
        for p in report["policies"].as_array().unwrap() {
            assert_accounted(p);
            let hit = num(p, "cache_hit_rate_pct");
            // No run reuses more than every shared page once computed.
            let own = num(p, "hit_rate_bound_pct");
            assert!(own <= bound + 1e-9 || num(p, "rejected") > 0.0);
            assert!(hit <= own + 1e-9, "{workload}: {hit} above {own}");
            assert!(hit > 0.0, "{workload}: no hits");
        }
    }
}

#[test]
fn cancellations_are_accounted_for_and_free_their_pages() {
    let report = bench("cancel", &["--cancel-fraction", "0.5", "--policy", "lpm"]);
    let p = policy(&report, "lpm");
    assert_accounted(p);
    assert!(num(p, "cancelled") > 0.0);
    assert!(num(p, "finished") > 0.0);
}

#[test]
fn a_saved_trace_replays_with_the_same_tokens() {
    let trace = temp("saved.jsonl");
    let trace_arg = trace.to_str().unwrap();
    // One sequence at a time: the same batches every run, so the same
    // floating-point sums and the same greedy tokens.
    let one = ["--policy", "fcfs", "--max-batch", "1", "--requests", "12"];
    let mut first_args = one.to_vec();
    first_args.extend_from_slice(&["--save-trace", trace_arg]);
    let first = bench("replay-1", &first_args);
    let mut replay_args = one.to_vec();
    replay_args.extend_from_slice(&["--trace", trace_arg]);
    let second = bench("replay-2", &replay_args);
    let (a, b) = (policy(&first, "fcfs"), policy(&second, "fcfs"));
    assert_eq!(num(a, "requests"), 12.0);
    assert_eq!(a["output_digest"], b["output_digest"]);
    assert_eq!(num(a, "decode_tokens"), num(b, "decode_tokens"));
}

#[test]
fn the_plot_is_an_svg_with_a_line_per_policy() {
    let svg = temp("plot.svg");
    bench("plot", &["--plot", svg.to_str().unwrap()]);
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.starts_with("<svg"));
    assert!(text.trim_end().ends_with("</svg>"));
    // Two CDF panels × two policies.
    assert_eq!(text.matches("<polyline").count(), 4);
}

fn assert_clean_error(out: &Output, needles: &[&str]) {
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    for needle in needles {
        assert!(
            stderr.contains(needle),
            "stderr lacks {needle:?}:\n{stderr}"
        );
    }
    assert!(!stderr.contains("panicked"), "a panic:\n{stderr}");
    assert!(
        !stderr.contains("RUST_BACKTRACE"),
        "a backtrace hint:\n{stderr}"
    );
}

#[test]
fn bad_arguments_give_clear_errors_with_the_valid_choices() {
    assert_clean_error(
        &pagoda(&["bench", "--workload", "chat"]),
        &["few-shot", "multi-turn", "tree-of-thought", "no-sharing"],
    );
    assert_clean_error(
        &pagoda(&["bench", "--policy", "random"]),
        &["valid: fcfs", "lpm"],
    );
    assert_clean_error(
        &pagoda(&["bench", "--policy", "lpm:cache_weight=-1"]),
        &["cache_weight"],
    );
    assert_clean_error(
        &pagoda(&["bench", "--prompt-len", "uniform:9:4"]),
        &["MIN above MAX"],
    );
    assert_clean_error(
        &pagoda(&["bench", "--output-len", "many"]),
        &["valid: N, uniform:MIN:MAX, lognormal:MEDIAN:SIGMA"],
    );
    assert_clean_error(
        &pagoda(&["bench", "--backend", "metal"]),
        &["cpu", "vulkan"],
    );
    assert_clean_error(&pagoda(&["bench", "--max-batch", "0"]), &["max-batch"]);
    assert_clean_error(&pagoda(&["bench", "--top-p", "1.5"]), &["top-p"]);
    assert_clean_error(&pagoda(&["bench", "--rate=-3"]), &["rate"]);
    assert_clean_error(&pagoda(&["frobnicate"]), &["bench"]);
    assert_clean_error(
        &pagoda(&["bench", "--trace", "/nonexistent/trace.jsonl"]),
        &["cannot read trace"],
    );
}

#[test]
fn bad_trace_lines_are_reported_with_their_numbers() {
    let trace = temp("bad.jsonl");
    std::fs::write(
        &trace,
        "{\"arrival\": 0, \"prompt\": \"hello\", \"max_tokens\": 4}\n\
         {\"arrival\": 0.1, \"prompt\": \"world\"}\n\
         {\"arrival\": -1, \"prompt\": \"x\", \"max_tokens\": 2}\n\
         {\"prompt_tokens\": [1, 2, 99999], \"max_tokens\": 2}\n",
    )
    .unwrap();
    let path = trace.to_str().unwrap();
    let out = pagoda(&["bench", "--quiet", "--trace", path]);
    assert_clean_error(
        &out,
        &[
            "3 bad line(s)",
            &format!("{path}:2: missing max_tokens"),
            &format!("{path}:3: arrival"),
            &format!("{path}:4: prompt token 99999"),
        ],
    );
    // A good trace runs.
    std::fs::write(
        &trace,
        "{\"arrival\": 0, \"prompt\": \"hello there\", \"max_tokens\": 3, \"priority\": \"high\"}\n\
         {\"arrival\": 0.01, \"prompt_tokens\": [5, 6, 7], \"max_tokens\": 2}\n",
    )
    .unwrap();
    let out = pagoda(&["bench", "--quiet", "--trace", path]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("2 / 0 / 0"),
        "both trace requests finish:\n{table}"
    );
}

#[test]
fn refusals_are_counted_by_kind_in_the_json() {
    let trace = temp("refused.jsonl");
    // The second prompt fills the embedded model's 2048-token context.
    let long = "a".repeat(2048);
    std::fs::write(
        &trace,
        format!(
            "{{\"arrival\": 0, \"prompt\": \"hello\", \"max_tokens\": 2}}\n\
             {{\"arrival\": 0, \"prompt\": \"{long}\", \"max_tokens\": 2}}\n"
        ),
    )
    .unwrap();
    let report = bench(
        "refused",
        &["--trace", trace.to_str().unwrap(), "--policy", "fcfs"],
    );
    let p = policy(&report, "fcfs");
    assert_accounted(p);
    assert_eq!(num(p, "finished"), 1.0);
    assert_eq!(num(p, "rejected"), 1.0);
    let records = p["per_request"].as_array().unwrap();
    let refused = records.iter().find(|r| r["index"] == 1).unwrap();
    assert_eq!(refused["outcome"], "rejected");
    assert_eq!(refused["rejection"], "prompt_fills_context");
    assert!(refused["reason"].as_str().unwrap().contains("2048"));
    let done = records.iter().find(|r| r["index"] == 0).unwrap();
    assert_eq!(done["outcome"], "finished");
    assert!(done.get("rejection").is_none());
    assert_eq!(report["settings"]["requests"], 2);
    assert_eq!(report["settings"]["kv_dtype"], "F16");
}

#[test]
fn the_speed_suite_reports_every_figure_against_its_baseline() {
    let json = temp("speed.json");
    let out = pagoda(&[
        "bench",
        "--suite",
        "speed",
        "--quiet",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8_lossy(&out.stdout);
    for row in [
        "read bandwidth",
        "FMA peak",
        "decode, batch 1",
        "prefill, 512 tokens",
        "16 sequences",
    ] {
        assert!(table.contains(row), "no {row:?} row:\n{table}");
    }
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    for key in [
        "read_bandwidth_sum_gib_s",
        "read_bandwidth_xor_gib_s",
        "fma_peak_gflops",
        "prefill_512_tokens_per_s",
        "batch_16_tokens_per_s",
    ] {
        assert!(num(&r, key) > 0.0 && num(&r, key).is_finite(), "{key}");
    }
    let decode = r["decode"].as_array().unwrap();
    assert_eq!(decode.len(), 3);
    assert_eq!(decode[1]["context"], 512);
    // The embedded model's context (2,048) bounds the deep run.
    assert_eq!(decode[2]["context"], 2048 - 64);
    // Without sliding windows, every layer holds the whole context.
    for d in decode {
        assert_eq!(d["kv_held_bytes"], d["kv_full_bytes"]);
    }
    assert!(r["deep_decode_predicted_tokens_per_s"].is_null());
    for d in decode {
        // The share is the bytes read per second over the probe's figure.
        let share = num(d, "read_gib_s")
            / num(&r, "read_bandwidth_sum_gib_s").min(num(&r, "read_bandwidth_xor_gib_s"));
        assert!((num(d, "share_of_bandwidth") - share).abs() < 1e-9);
    }
}
