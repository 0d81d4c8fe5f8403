//! Shared by the tokenizer tests: where the model and Python are (the
//! `core/tests/gguf_support/env.rs` logic, trimmed), the reference's output
//! files, and a tokenizer-only GGUF writer.
#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn missing(test: &str, what: &str, how: &str) {
    if in_ci() {
        panic!("{test}: {what} is missing and CI=true requires it ({how})");
    }
    let _ = writeln!(std::io::stderr(), "skipping {test}: no {what}; {how}");
}

/// `PAGODA_MODEL`, else the cache `scripts/fetch-model.sh` fills.
pub fn require_model(test: &str) -> Option<PathBuf> {
    let p = match std::env::var_os("PAGODA_MODEL") {
        Some(p) => Some(PathBuf::from(p)),
        None => std::env::var_os("PAGODA_MODEL_DIR")
            .map(PathBuf::from)
            .or_else(|| {
                std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/pagoda/models"))
            })
            .map(|d| d.join("SmolLM2-135M-Instruct.Q4_1.gguf")),
    }
    .filter(|p| p.is_file());
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
pub fn require_python(test: &str) -> Option<PathBuf> {
    let p = match std::env::var_os("PAGODA_PYTHON") {
        Some(p) => Some(PathBuf::from(p)),
        None => Some(repo_root().join(".venv-ref/bin/python")),
    }
    .filter(|p| p.exists());
    if p.is_none() {
        missing(
            test,
            "Python reference venv",
            "python3 -m venv .venv-ref && .venv-ref/bin/pip install -r tests/reference/requirements.txt (or set PAGODA_PYTHON)",
        );
    }
    p
}

/// Runs `tests/reference/tokenizer_ref.py` with `args`, failing on error.
pub fn run_reference(python: &Path, args: &[&str]) {
    let script = repo_root().join("tests/reference/tokenizer_ref.py");
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

fn lines(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines().map(str::to_owned).collect()
}

/// One string per line, written as hex UTF-8.
pub fn read_hex_lines(path: &Path) -> Vec<String> {
    lines(path)
        .iter()
        .map(|l| {
            let bytes: Vec<u8> = (0..l.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&l[i..i + 2], 16).unwrap())
                .collect();
            String::from_utf8(bytes).unwrap()
        })
        .collect()
}

/// One id list per line, space-separated.
pub fn read_id_lines(path: &Path) -> Vec<Vec<u32>> {
    lines(path)
        .iter()
        .map(|l| l.split_whitespace().map(|t| t.parse().unwrap()).collect())
        .collect()
}

/// A metadata value for [`gguf_bytes`].
#[derive(Clone, Debug)]
pub enum Meta {
    Str(String),
    U32(u32),
    Bool(bool),
    Strs(Vec<String>),
    I32s(Vec<i32>),
    F32s(Vec<f32>),
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend((s.len() as u64).to_le_bytes());
    out.extend(s.as_bytes());
}

/// A GGUF v3 file with these metadata keys and no tensors.
pub fn gguf_bytes(kvs: &[(&str, Meta)]) -> Vec<u8> {
    let mut out = b"GGUF".to_vec();
    out.extend(3u32.to_le_bytes());
    out.extend(0u64.to_le_bytes());
    out.extend((kvs.len() as u64).to_le_bytes());
    for (key, value) in kvs {
        put_str(&mut out, key);
        let arr = |out: &mut Vec<u8>, elem: u32, n: usize| {
            out.extend(9u32.to_le_bytes());
            out.extend(elem.to_le_bytes());
            out.extend((n as u64).to_le_bytes());
        };
        match value {
            Meta::Str(s) => {
                out.extend(8u32.to_le_bytes());
                put_str(&mut out, s);
            }
            Meta::U32(v) => {
                out.extend(4u32.to_le_bytes());
                out.extend(v.to_le_bytes());
            }
            Meta::Bool(v) => {
                out.extend(7u32.to_le_bytes());
                out.push(u8::from(*v));
            }
            Meta::Strs(v) => {
                arr(&mut out, 8, v.len());
                v.iter().for_each(|s| put_str(&mut out, s));
            }
            Meta::I32s(v) => {
                arr(&mut out, 5, v.len());
                v.iter().for_each(|x| out.extend(x.to_le_bytes()));
            }
            Meta::F32s(v) => {
                arr(&mut out, 6, v.len());
                v.iter().for_each(|x| out.extend(x.to_le_bytes()));
            }
        }
    }
    out
}
