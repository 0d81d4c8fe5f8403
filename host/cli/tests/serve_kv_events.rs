//! `pagoda serve --kv-events` as a process, checked by an independent
//! subscriber written against vLLM's wire format
//! (tests/reference/kv_events_subscriber.py, pyzmq + msgpack): with a small
//! pool, a prefix-sharing workload evicts, and the subscriber's mirror of
//! the cached block hashes (live, and replayed from seq 0) must equal the
//! server's `GET /debug/kv_blocks`; per-request cached tokens are checked
//! on the way. Skipped with one line outside CI without pyzmq and msgpack.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

#[path = "../../../tests/support/env.rs"]
mod env;

/// A port free a moment ago (the server binds it right after).
fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("an ephemeral port");
    listener.local_addr().expect("its address").port()
}

fn python_with_zmq(test: &str) -> Option<std::path::PathBuf> {
    let python = env::require_python(test)?;
    let has = Command::new(&python)
        .args(["-c", "import zmq, msgpack"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has {
        assert!(
            !env::in_ci(),
            "{test}: the venv lacks pyzmq or msgpack (tests/reference/requirements.txt)"
        );
        eprintln!("skipping {test}: the venv lacks pyzmq or msgpack; pip install -r tests/reference/requirements.txt");
        return None;
    }
    Some(python)
}

#[test]
fn subscriber_mirror_equals_the_cache_after_evictions() {
    let test = "subscriber_mirror_equals_the_cache_after_evictions";
    let Some(python) = python_with_zmq(test) else {
        return;
    };
    let (publish, replay) = (free_port(), free_port());
    let publish = format!("tcp://127.0.0.1:{publish}");
    let replay = format!("tcp://127.0.0.1:{replay}");
    let mut child = Command::new(env!("CARGO_BIN_EXE_pagoda"))
        .args(["serve", "--port", "0", "--threads", "1", "--kv-pages", "24"])
        .args(["--kv-events", &publish, "--kv-events-replay", &replay])
        .stderr(Stdio::piped())
        .spawn()
        .expect("pagoda serve starts");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, lines) = mpsc::channel();
    let (addr_tx, addr_rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(url) = line.split("listening on ").nth(1) {
                let _ = addr_tx.send(url.to_string());
            }
            let _ = tx.send(line);
        }
    });
    let Ok(http) = addr_rx.recv_timeout(Duration::from_secs(120)) else {
        let _ = child.kill();
        let lines: Vec<String> = lines.try_iter().collect();
        panic!("the server did not start: {lines:?}");
    };
    let script = env::repo_root().join("tests/reference/kv_events_subscriber.py");
    let out = Command::new(&python)
        .arg(script)
        .args(["--http", &http, "--pub", &publish, "--replay", &replay])
        .output()
        .expect("python runs");
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    let status = child.wait().expect("wait");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "kv_events_subscriber.py failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for check in ["ok cached tokens", "ok live mirror", "ok replay from seq 0"] {
        assert!(stdout.contains(check), "{stdout}");
    }
    assert!(killed.success());
    let lines: Vec<String> = lines.try_iter().collect();
    assert!(status.success(), "exit {status:?}: {lines:?}");
}
