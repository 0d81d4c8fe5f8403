//! Where the real model and the Python reference are, for every crate's
//! tests (each includes this one file with `#[path]`): outside CI a missing
//! one skips the test with one line; with `CI=true` it fails the test.

#![allow(dead_code)]

use std::ffi::OsStr;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The real test model `scripts/fetch-model.sh` fetches.
pub const MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// Gemma 3 270M (Q4_K_M), which `scripts/fetch-model.sh gemma3` fetches.
pub const GEMMA_FILE: &str = "gemma-3-270m-q4_k_m.gguf";

/// Whether this is CI (`CI=true`), where nothing may be skipped.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// The repository: the first ancestor of the crate that holds
/// `tests/reference`.
pub fn repo_root() -> PathBuf {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    crate_dir
        .ancestors()
        .find(|dir| dir.join("tests/reference").is_dir())
        .unwrap_or(crate_dir)
        .to_path_buf()
}

/// `PAGODA_MODEL`, else the cache `scripts/fetch-model.sh` fills.
pub fn model_path() -> Option<PathBuf> {
    cached("PAGODA_MODEL", MODEL_FILE)
}

/// `PAGODA_GEMMA_MODEL`, else Gemma 3 270M in the same cache.
pub fn gemma_path() -> Option<PathBuf> {
    cached("PAGODA_GEMMA_MODEL", GEMMA_FILE)
}

/// The file `var` names, else `file` in the model cache.
fn cached(var: &str, file: &str) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(var) {
        return Some(PathBuf::from(p)).filter(|p| p.is_file());
    }
    let dir = match std::env::var_os("PAGODA_MODEL_DIR") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(std::env::var_os("HOME")?).join(".cache/pagoda/models"),
    };
    Some(dir.join(file)).filter(|p| p.is_file())
}

/// Gemma 3's path, or `None` after saying how to fetch it.
pub fn require_gemma(test: &str) -> Option<PathBuf> {
    let p = gemma_path();
    if p.is_none() {
        missing(
            test,
            "Gemma 3 270M model",
            "fetch it with `bash scripts/fetch-model.sh gemma3` or set PAGODA_GEMMA_MODEL",
        );
    }
    p
}

fn missing(test: &str, what: &str, how: &str) {
    if in_ci() {
        panic!("{test}: {what} is missing and CI=true requires it ({how})");
    }
    // Straight to stderr, past the test harness's capture, so the one line
    // shows in a normal `cargo test` run.
    let _ = writeln!(std::io::stderr(), "skipping {test}: no {what}; {how}");
}

/// The model's path, or `None` after saying how to fetch it.
pub fn require_model(test: &str) -> Option<PathBuf> {
    let p = model_path();
    if p.is_none() {
        missing(
            test,
            "SmolLM2 model",
            "fetch it with `bash scripts/fetch-model.sh` or set PAGODA_MODEL",
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

/// The reference's interpreter, or `None` after saying how to create it.
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
pub fn run_reference<S: AsRef<OsStr>>(python: &Path, script: &str, args: &[S]) {
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

/// Little-endian f32s from a file the reference wrote.
pub fn read_f32s(path: &Path) -> Vec<f32> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}
