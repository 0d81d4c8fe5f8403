//! Where the real model and the Python reference are, as in
//! `core/tests/gguf_support/env.rs`: outside CI a missing one skips the test
//! with one line; with `CI=true` it fails the test.

#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

pub const MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `PAGODA_MODEL`, else the cache `scripts/fetch-model.sh` fills.
pub fn model_path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("PAGODA_MODEL") {
        return Some(PathBuf::from(p)).filter(|p| p.is_file());
    }
    let dir = match std::env::var_os("PAGODA_MODEL_DIR") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(std::env::var_os("HOME")?).join(".cache/pagoda/models"),
    };
    Some(dir.join(MODEL_FILE)).filter(|p| p.is_file())
}

fn missing(test: &str, what: &str, how: &str) {
    if in_ci() {
        panic!("{test}: {what} is missing and CI=true requires it ({how})");
    }
    let _ = writeln!(std::io::stderr(), "skipping {test}: no {what}; {how}");
}

pub fn require_model(test: &str) -> Option<PathBuf> {
    let p = model_path();
    if p.is_none() {
        missing(
            test,
            "SmolLM2 model",
            "fetch it with scripts/fetch-model.sh or set PAGODA_MODEL",
        );
    }
    p
}

/// `PAGODA_PYTHON`, else the repository's `.venv-ref`.
pub fn python_path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("PAGODA_PYTHON") {
        return Some(PathBuf::from(p)).filter(|p| p.exists());
    }
    Some(repo_root().join(".venv-ref/bin/python")).filter(|p| p.exists())
}

pub fn require_python(test: &str) -> Option<PathBuf> {
    let p = python_path();
    if p.is_none() {
        missing(
            test,
            "Python reference venv",
            "create it: python3 -m venv .venv-ref && .venv-ref/bin/pip install -r tests/reference/requirements.txt (or set PAGODA_PYTHON)",
        );
    }
    p
}

/// Runs `tests/reference/<script>` with `args`, failing the test on error.
pub fn run_reference(python: &Path, script: &str, args: &[&Path]) {
    let script = repo_root().join("tests/reference").join(script);
    let out = Command::new(python)
        .arg(&script)
        .args(args)
        .output()
        .expect("start the Python reference");
    assert!(
        out.status.success(),
        "{} failed: {}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A fresh scratch directory under the target dir.
pub fn scratch_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
