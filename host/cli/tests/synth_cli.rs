//! `pagoda synth`: the files it writes are read back by the `gguf` Python
//! package (an independent parser; skipped with one line without the venv
//! outside CI) with the metadata, tokenizer, tensor names, shapes and block
//! types the shape asks for and sane dequantized values; and `pagoda run`
//! generates from them, dense and quantized.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

#[path = "../../../tests/support/env.rs"]
mod env;

fn pagoda(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pagoda"))
        .args(args)
        .output()
        .expect("the pagoda binary runs")
}

fn synth(dir: &Path, shape: &str, kind: &str) -> PathBuf {
    synth_with(dir, shape, kind, &[])
}

/// [`synth`] with more options (`--layers N`).
fn synth_with(dir: &Path, shape: &str, kind: &str, more: &[&str]) -> PathBuf {
    let path = dir.join(format!("{shape}-{kind}{}.gguf", more.join("")));
    let mut args = vec![
        "synth",
        "--shape",
        shape,
        "--type",
        kind,
        "--out",
        path.to_str().unwrap(),
    ];
    args.extend_from_slice(more);
    let out = pagoda(&args);
    assert!(
        out.status.success(),
        "pagoda synth failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    path
}

/// The reference's JSON summary of `file`.
fn summary(python: &Path, file: &Path, values: bool) -> Value {
    let mut cmd = Command::new(python);
    cmd.arg(env::repo_root().join("tests/reference/synth_check.py"))
        .arg(file);
    if !values {
        cmd.arg("--no-values");
    }
    let out = cmd.output().expect("start the Python reference");
    assert!(
        out.status.success(),
        "synth_check.py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("synth_check.py prints JSON")
}

/// The shapes' hyper-parameters, written out independently of the tool.
#[derive(Clone, Copy)]
struct Expect {
    arch: &'static str,
    hidden: u64,
    layers: u64,
    heads: u64,
    kv_heads: u64,
    ffn: u64,
    vocab: u64,
    tied: bool,
    /// A mixture of experts: count, used, width.
    experts: Option<(u64, u64, u64)>,
}

const TINY: Expect = Expect {
    arch: "llama",
    hidden: 256,
    layers: 2,
    heads: 4,
    kv_heads: 2,
    ffn: 768,
    vocab: 512,
    tied: false,
    experts: None,
};

/// `tiny` with Qwen3-MoE's layer: QK-norm, eight experts of 128, two used.
const TINY_MOE: Expect = Expect {
    arch: "qwen3moe",
    experts: Some((8, 2, 128)),
    ..TINY
};

const SMOLLM2: Expect = Expect {
    arch: "llama",
    experts: None,
    hidden: 576,
    layers: 30,
    heads: 9,
    kv_heads: 3,
    ffn: 1536,
    vocab: 49152,
    tied: true,
};

/// Every tensor the shape has: name, GGUF dims (row length first), and
/// whether it is f32 whatever the chosen type (norms, a router).
fn expected_tensors(e: &Expect) -> Vec<(String, Vec<u64>, bool)> {
    let kv = e.hidden / e.heads * e.kv_heads;
    let mut t = vec![(
        "token_embd.weight".to_string(),
        vec![e.hidden, e.vocab],
        false,
    )];
    for l in 0..e.layers {
        let n = |s: &str| format!("blk.{l}.{s}.weight");
        t.push((n("attn_norm"), vec![e.hidden], true));
        t.push((n("attn_q"), vec![e.hidden, e.hidden], false));
        t.push((n("attn_k"), vec![e.hidden, kv], false));
        t.push((n("attn_v"), vec![e.hidden, kv], false));
        t.push((n("attn_output"), vec![e.hidden, e.hidden], false));
        t.push((n("ffn_norm"), vec![e.hidden], true));
        match e.experts {
            None => {
                t.push((n("ffn_gate"), vec![e.hidden, e.ffn], false));
                t.push((n("ffn_up"), vec![e.hidden, e.ffn], false));
                t.push((n("ffn_down"), vec![e.ffn, e.hidden], false));
            }
            Some((count, _, width)) => {
                let head = e.hidden / e.heads;
                t.push((n("attn_q_norm"), vec![head], true));
                t.push((n("attn_k_norm"), vec![head], true));
                // The router stays f32, as llama.cpp's quantizer leaves it.
                t.push((n("ffn_gate_inp"), vec![e.hidden, count], true));
                t.push((n("ffn_gate_exps"), vec![e.hidden, width, count], false));
                t.push((n("ffn_up_exps"), vec![e.hidden, width, count], false));
                t.push((n("ffn_down_exps"), vec![width, e.hidden, count], false));
            }
        }
    }
    t.push(("output_norm.weight".to_string(), vec![e.hidden], true));
    if !e.tied {
        t.push(("output.weight".to_string(), vec![e.hidden, e.vocab], false));
    }
    t
}

/// The GGML type name a matrix of `row_len` gets: K-quants need rows of
/// 256 and fall back as llama.cpp does.
fn expected_type(kind: &str, row_len: u64) -> String {
    let upper = kind.to_uppercase();
    match upper.as_str() {
        "Q4_K" if !row_len.is_multiple_of(256) => "Q5_0".into(),
        "Q5_K" if !row_len.is_multiple_of(256) => "Q5_1".into(),
        "Q6_K" if !row_len.is_multiple_of(256) => "Q8_0".into(),
        "Q2_K" | "Q3_K" if !row_len.is_multiple_of(256) => "Q4_0".into(),
        "IQ4_XS" if !row_len.is_multiple_of(256) => "IQ4_NL".into(),
        _ => upper,
    }
}

/// The type llama.cpp's quantizer gives a tensor of a Q4_K_M (`base`
/// Q4_K) or Q5_K_M (Q5_K) file, from its documented rules: the output
/// (the embedding when tied) Q6_K, or Q8_0 on rows that are no multiple
/// of 256; `attn_v` and `ffn_down` Q6_K on the first and last eighth of the
/// layers and every third between; the base type elsewhere; then the
/// K-quant fallbacks. A Q3_K_M file (`base` Q3_K) instead gives `attn_v`
/// Q5_K on its first two layers, `ffn_down` Q5_K on the first sixteenth,
/// both Q4_K elsewhere, and `attn_output` Q4_K.
fn expected_mix(base: &str, name: &str, layers: u64, row_len: u64, tied: bool) -> String {
    let layer: Option<u64> = name
        .strip_prefix("blk.")
        .and_then(|rest| rest.split('.').next())
        .map(|l| l.parse().unwrap());
    let output = name == "output.weight" || (tied && name == "token_embd.weight");
    if output {
        return if row_len.is_multiple_of(256) {
            "Q6_K"
        } else {
            "Q8_0"
        }
        .into();
    }
    if base == "q3_k" {
        let l = layer.unwrap_or(0);
        let bumped = if name.contains("attn_v") {
            Some(if l < 2 { "q5_k" } else { "q4_k" })
        } else if name.contains("ffn_down") {
            Some(if l < layers / 16 { "q5_k" } else { "q4_k" })
        } else if name.contains("attn_output") {
            Some("q4_k")
        } else {
            None
        };
        return expected_type(bumped.unwrap_or(base), row_len);
    }
    let more_bits = |i: u64| {
        let n = layers;
        i < n / 8 || i >= 7 * n / 8 || (i as i64 - (n / 8) as i64) % 3 == 2
    };
    let bumped =
        (name.contains("attn_v") || name.contains("ffn_down")) && more_bits(layer.unwrap());
    expected_type(if bumped { "q6_k" } else { base }, row_len)
}

fn check(summary: &Value, e: &Expect, kind: &str, values: bool) {
    let meta = &summary["metadata"];
    let key = |k: &str| &meta[format!("{}.{k}", e.arch)];
    assert_eq!(meta["general.architecture"], e.arch);
    assert_eq!(*key("embedding_length"), e.hidden);
    assert_eq!(*key("block_count"), e.layers);
    assert_eq!(*key("feed_forward_length"), e.ffn);
    assert_eq!(*key("attention.head_count"), e.heads);
    assert_eq!(*key("attention.head_count_kv"), e.kv_heads);
    assert_eq!(*key("vocab_size"), e.vocab);
    match e.experts {
        Some((count, used, width)) => {
            assert_eq!(*key("expert_count"), count);
            assert_eq!(*key("expert_used_count"), used);
            assert_eq!(*key("expert_feed_forward_length"), width);
        }
        None => assert!(key("expert_count").is_null()),
    }
    assert_eq!(meta["tokenizer.ggml.model"], "gpt2");
    assert_eq!(meta["tokenizer.ggml.bos_token_id"], e.vocab - 2);
    assert_eq!(meta["tokenizer.ggml.eos_token_id"], e.vocab - 1);
    assert_eq!(summary["tokens"], e.vocab);
    // GPT-2's byte-level alphabet: printable ASCII stands for itself, the
    // space byte is 'Ġ' (U+0120), the newline 'Ċ' (U+010A).
    let bytes = &summary["byte_tokens"];
    assert_eq!(bytes[65], "A");
    assert_eq!(bytes[32], "\u{120}");
    assert_eq!(bytes[10], "\u{10a}");

    let tensors = summary["tensors"].as_object().unwrap();
    let expected = expected_tensors(e);
    assert_eq!(tensors.len(), expected.len(), "tensor count");
    for (name, dims, norm) in expected {
        let t = tensors
            .get(&name)
            .unwrap_or_else(|| panic!("{name} is missing"));
        let shape: Vec<u64> = t["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap())
            .collect();
        assert_eq!(shape, dims, "{name} shape");
        let want = if norm {
            "F32".to_string()
        } else if let Some(base) = kind.strip_suffix("_m") {
            expected_mix(base, &name, e.layers, dims[0], e.tied)
        } else {
            expected_type(kind, dims[0])
        };
        assert_eq!(t["type"], want.as_str(), "{name} type");
        if values {
            assert_eq!(t["finite"], true, "{name} has non-finite values");
            let mean = t["mean_abs"].as_f64().unwrap();
            let (low, high) = if name.ends_with("norm.weight") {
                (0.9, 1.1)
            } else {
                (1e-3, 0.5)
            };
            assert!(
                (low..high).contains(&mean),
                "{name}: mean |w| {mean} outside {low}..{high}"
            );
        }
    }
}

#[test]
fn synthetic_files_read_back_with_the_gguf_package() {
    let Some(python) = env::require_python("synthetic_files_read_back_with_the_gguf_package")
    else {
        return;
    };
    let dir = env::scratch_dir("synth-gguf");
    for kind in [
        "f16", "q4_0", "q4_1", "q5_1", "q8_0", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k", "iq4_nl",
        "iq4_xs",
    ] {
        let file = synth(&dir, "tiny", kind);
        check(&summary(&python, &file, true), &TINY, kind, true);
    }
    // SmolLM2's rows of 576 are no multiple of 256: the K-quant falls back
    // there and stays on ffn_down (rows of 1536); the output is tied.
    let file = synth(&dir, "smollm2-135m", "q4_k");
    check(&summary(&python, &file, false), &SMOLLM2, "q4_k", false);
    // llama.cpp's mixes, as users download them.
    for kind in ["q3_k_m", "q4_k_m", "q5_k_m"] {
        let file = synth(&dir, "tiny", kind);
        check(&summary(&python, &file, true), &TINY, kind, true);
        let file = synth(&dir, "smollm2-135m", kind);
        check(&summary(&python, &file, false), &SMOLLM2, kind, false);
    }
}

/// The mixture of experts' shape, whole and cut to its first layer, in a
/// uniform type and in llama.cpp's mix (its expert stacks typed as the
/// dense tensors they replace).
#[test]
fn a_mixture_of_experts_shape_reads_back_with_the_gguf_package() {
    let Some(python) = env::require_python("a_mixture_of_experts_shape_reads_back") else {
        return;
    };
    let dir = env::scratch_dir("synth-gguf-moe");
    for kind in ["q4_0", "q4_k_m"] {
        let file = synth(&dir, "tiny-moe", kind);
        check(&summary(&python, &file, true), &TINY_MOE, kind, true);
        let file = synth_with(&dir, "tiny-moe", kind, &["--layers", "1"]);
        let one = Expect {
            layers: 1,
            ..TINY_MOE
        };
        check(&summary(&python, &file, true), &one, kind, true);
    }
    let never = dir.join("never.gguf");
    let out = pagoda(&["synth", "--layers", "0", "--out", never.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "--layers 0 is refused");
    let out = pagoda(&[
        "synth",
        "--shape",
        "tiny-moe",
        "--layers",
        "3",
        "--out",
        never.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2), "more layers than the shape's");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("the tiny-moe shape has 2"), "{err}");
    assert!(!never.exists());
}

#[test]
fn synthetic_models_generate_dense_and_quantized() {
    let dir = env::scratch_dir("synth-run");
    let runs = [
        ("tiny", "q4_k", false),
        ("tiny", "q4_0", true),
        ("tiny", "q6_k", true),
        ("tiny-moe", "q4_0", true),
        ("tiny-moe", "q4_k_m", false),
    ];
    for (shape, kind, quantized) in runs {
        let file = synth(&dir, shape, kind);
        let mut args = vec![
            "run",
            "--json",
            "--model",
            file.to_str().unwrap(),
            "--prompt",
            "hello",
            "--max-tokens",
            "4",
        ];
        if !quantized {
            args.extend(["--weights", "dense"]);
        }
        let out = pagoda(&args);
        assert!(
            out.status.success(),
            "pagoda run on {kind}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
        // BOS, then one token per byte of "hello".
        let prompt: Vec<u64> = v["prompt_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap())
            .collect();
        assert_eq!(prompt, [510, 104, 101, 108, 108, 111]);
        let output = v["output_ids"].as_array().unwrap();
        assert_eq!(output.len(), 4, "{kind}: {v}");
        assert!(output.iter().all(|t| t.as_u64().unwrap() < 512));
    }
}

#[test]
fn an_unwritable_path_is_a_clean_error() {
    let out = pagoda(&["synth", "--out", "/nonexistent-dir/x.gguf"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot write /nonexistent-dir/x.gguf"),
        "{err}"
    );
}
