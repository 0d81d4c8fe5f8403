//! Shared by the tokenizer tests: where the model and Python are (the
//! repository's shared `tests/support/env.rs`), the reference's output
//! files, and a tokenizer-only GGUF writer.
#![allow(dead_code)]

use std::path::Path;

#[path = "../../../../tests/support/env.rs"]
mod env;
#[allow(unused_imports)] // not every test uses every one
pub use env::{in_ci, repo_root, require_gemma, require_model, require_python, scratch_dir};

/// Runs `tests/reference/tokenizer_ref.py` with `args`, failing on error.
pub fn run_reference(python: &Path, args: &[&str]) {
    env::run_reference(python, "tokenizer_ref.py", args);
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
