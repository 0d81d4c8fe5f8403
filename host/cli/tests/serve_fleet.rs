//! `pagoda serve` under load and behind SGLang's router, driven by Python
//! clients (tests/reference/load_test.py and router_test.py): independent
//! HTTP clients that check every response's shape, count and usage against
//! what they asked for, and read the server's own `/metrics`. Skipped with
//! one line outside CI when the venv lacks the package a test needs.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

#[path = "../../../tests/support/env.rs"]
mod env;

/// The venv's Python when it can `import module`; `None` (skip) outside CI.
fn python_with(test: &str, module: &str) -> Option<PathBuf> {
    let python = env::require_python(test)?;
    let has = Command::new(&python)
        .args(["-c", &format!("import {module}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has {
        assert!(
            !env::in_ci(),
            "{test}: the venv lacks `{module}` (tests/reference/requirements.txt)"
        );
        eprintln!("skipping {test}: the venv lacks `{module}`; pip install -r tests/reference/requirements.txt");
        return None;
    }
    Some(python)
}

struct Server {
    child: Child,
    url: String,
    lines: mpsc::Receiver<String>,
}

fn start(extra: &[&str]) -> Server {
    let mut child = Command::new(env!("CARGO_BIN_EXE_pagoda"))
        .args(["serve", "--port", "0", "--threads", "1"])
        .args(extra)
        .stderr(Stdio::piped())
        .spawn()
        .expect("pagoda serve starts");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, lines) = mpsc::channel();
    let (url_tx, url_rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(url) = line.split("listening on ").nth(1) {
                let _ = url_tx.send(url.to_string());
            }
            let _ = tx.send(line);
        }
    });
    let url = url_rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the server prints its address");
    Server { child, url, lines }
}

/// SIGTERM: the server must drain and exit 0, which it does only with a
/// clean audit (every page free or cached, no request left).
fn stop(mut server: Server) {
    let pid = server.child.id().to_string();
    let killed = Command::new("kill").args(["-TERM", &pid]).status();
    assert!(killed.is_ok_and(|s| s.success()));
    let status = server.child.wait().expect("wait");
    // Every line, to the end of stderr (the reader thread ends there).
    let lines: Vec<String> = server.lines.iter().collect();
    assert!(status.success(), "exit {status:?}: {lines:?}");
    assert!(
        lines.iter().any(|l| l.contains("stopped; audit")),
        "{lines:?}"
    );
}

fn script(name: &str) -> PathBuf {
    env::repo_root().join("tests/reference").join(name)
}

fn json_lines(stdout: &[u8]) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[test]
fn concurrent_clients_each_get_one_complete_response() {
    let test = "concurrent_clients_each_get_one_complete_response";
    let Some(python) = python_with(test, "httpx2") else {
        return;
    };
    let server = start(&["--kv-pages", "512", "--max-batch", "16"]);
    let pid = server.child.id().to_string();
    let out = Command::new(&python)
        .arg(script("load_test.py"))
        .args(["--base-url", &server.url, "--pid", &pid])
        .args(["--clients", "16", "--requests", "4"])
        .args(["--disconnect-fraction", "0.3", "--rss-limit-mib", "512"])
        .output()
        .expect("python runs");
    let report = json_lines(&out.stdout);
    assert!(
        out.status.success(),
        "load_test.py failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let report = report.last().expect("a JSON report");
    // Every request has exactly one outcome and some of each kind happened.
    let count = |k: &str| report[k].as_u64().unwrap_or(0);
    assert_eq!(count("requests"), 64, "{report}");
    assert_eq!(count("completed") + count("disconnected"), 64, "{report}");
    assert!(
        count("disconnected") > 0 && count("streamed") > 0,
        "{report}"
    );
    assert!(count("completed") > count("streamed"), "{report}");
    // Events reach handlers asynchronously: no thread per request in
    // flight (16 at a time here), only the runtime's and the engine's.
    let threads = |k: &str| report["threads"][k].as_u64().expect("thread counts");
    assert!(threads("peak_sampled") < threads("before") + 8, "{report}");
    assert_eq!(report["metrics_after"]["running"], 0.0, "{report}");
    assert_eq!(report["metrics_after"]["waiting"], 0.0, "{report}");
    stop(server);
}

#[test]
fn sglang_router_cache_aware_beats_round_robin_on_shared_prefixes() {
    let test = "sglang_router_cache_aware_beats_round_robin_on_shared_prefixes";
    let Some(python) = python_with(test, "sglang_router") else {
        return;
    };
    let out = Command::new(&python)
        .arg(script("router_test.py"))
        .args(["--pagoda", env!("CARGO_BIN_EXE_pagoda")])
        .arg("--python")
        .arg(&python)
        .output()
        .expect("python runs");
    let results = json_lines(&out.stdout);
    assert!(
        out.status.success(),
        "router_test.py failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let rate = |policy: &str| {
        results
            .iter()
            .find(|r| r["policy"] == policy)
            .and_then(|r| r["hit_rate"].as_f64())
            .unwrap_or_else(|| panic!("no {policy} result: {results:?}"))
    };
    for r in &results {
        assert_eq!(r["answered"], r["requests"], "{r}");
        let per: Vec<f64> = r["per_replica"]
            .as_array()
            .map(|a| a.iter().filter_map(|v| v.as_f64()).collect())
            .unwrap_or_default();
        assert!(per.len() == 2 && per.iter().all(|&n| n > 0.0), "{r}");
    }
    // The workload is built so the gap is wide (measured: about 0.8 against
    // 0.45); a tenth is far outside run-to-run noise.
    assert!(
        rate("cache_aware") >= rate("round_robin") + 0.1,
        "{results:?}"
    );
}
