//! End-to-end tests of `pagoda run`: clean errors for files that are not
//! models (no model needed), and on SmolLM2 (skipped with one line without
//! it outside CI): the JSON output's fields, the chat template's framing, a
//! stop string cutting the text exactly where the unstopped text has it,
//! and many prompts in one batch.

use std::path::PathBuf;
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

fn temp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pagoda-run-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The model's path as text, or `None` (skip) after saying how to fetch it.
fn model(test: &str) -> Option<String> {
    env::require_model(test).map(|p| p.to_string_lossy().into_owned())
}

/// Runs `pagoda run --json` and parses its one line per prompt.
fn run_json(args: &[&str]) -> Vec<Value> {
    let mut all = vec!["run", "--json"];
    all.extend_from_slice(args);
    let out = pagoda(&all);
    assert!(
        out.status.success(),
        "pagoda {all:?} failed: {}",
        stderr(&out)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect()
}

fn ids(v: &Value, key: &str) -> Vec<u64> {
    v[key]
        .as_array()
        .unwrap_or_else(|| panic!("{key} is an array"))
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect()
}

#[test]
fn files_that_are_not_models_are_refused_by_name() {
    let text = temp("not-a-model.gguf");
    std::fs::write(&text, "hello, I am text").unwrap();
    let out = pagoda(&["run", "--model", text.to_str().unwrap(), "--prompt", "hi"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("not a GGUF file"), "{}", stderr(&out));

    let missing = temp("missing.gguf");
    let out = pagoda(&[
        "run",
        "--model",
        missing.to_str().unwrap(),
        "--prompt",
        "hi",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("cannot load") && stderr(&out).contains("missing.gguf"),
        "{}",
        stderr(&out)
    );

    // A real header cut short: truncated, said so, exit 2.
    if let Some(path) = model("files_that_are_not_models_are_refused_by_name") {
        let bytes = std::fs::read(path).unwrap();
        let cut = temp("cut.gguf");
        std::fs::write(&cut, &bytes[..100_000]).unwrap();
        let out = pagoda(&["run", "--model", cut.to_str().unwrap(), "--prompt", "hi"]);
        assert_eq!(out.status.code(), Some(2));
        assert!(stderr(&out).contains("cannot load"), "{}", stderr(&out));
    }
}

#[test]
fn json_output_and_chat_framing() {
    let Some(m) = model("json_output_and_chat_framing") else {
        return;
    };
    let raw = run_json(&[
        "--model",
        &m,
        "--prompt",
        "The capital of France is",
        "--max-tokens",
        "6",
    ]);
    assert_eq!(raw.len(), 1);
    let r = &raw[0];
    let output = ids(r, "output_ids");
    assert!(!output.is_empty() && output.len() <= 6);
    assert!(!ids(r, "prompt_ids").is_empty());
    assert!(r["text"].as_str().is_some_and(|t| !t.is_empty()));
    for key in [
        "load_s",
        "prefill_tokens_per_s",
        "decode_tokens_per_s",
        "time_to_first_token_s",
    ] {
        assert!(
            r["timings"][key].as_f64().is_some_and(|x| x >= 0.0),
            "{key}"
        );
    }

    let chat = run_json(&[
        "--model",
        &m,
        "--chat",
        "--prompt",
        "What is the capital of France?",
        "--max-tokens",
        "24",
        // The answer's first token is a near tie in SmolLM2 ("The" 0.09
        // above "L'"), which the default 8-bit activations flip; the
        // framing is what this checks, so it takes the exact path.
        "--activations",
        "f32",
    ]);
    let c = &chat[0];
    let prompt = ids(c, "prompt_ids");
    // ChatML: <|im_start|> (1) opens the first turn; the prompt ends by
    // opening the assistant's turn ("assistant\n" after <|im_start|>).
    assert_eq!(prompt.first(), Some(&1));
    let last_open = prompt.iter().rposition(|&t| t == 1).unwrap();
    assert!(
        prompt.len() - last_open <= 4,
        "the assistant turn opens at the end"
    );
    assert!(
        c["text"].as_str().unwrap().contains("Paris"),
        "{}",
        c["text"]
    );
    // The model ends its turn with <|im_end|> (2) well before 24 tokens.
    assert_eq!(c["stop"], "end_of_generation");
    assert!(!c["text"].as_str().unwrap().contains("<|im_end|>"));
}

#[test]
fn a_stop_string_cuts_the_text_where_it_first_appears() {
    let Some(m) = model("a_stop_string_cuts_the_text_where_it_first_appears") else {
        return;
    };
    let prompt = "Write a list of five fruits:\n1.";
    let free = run_json(&["--model", &m, "--prompt", prompt, "--max-tokens", "40"]);
    let text = free[0]["text"].as_str().unwrap().to_string();
    // A stop string from the middle of the unstopped text.
    let stop = "3.";
    let Some(at) = text.find(stop) else {
        panic!("the greedy continuation has no {stop:?}: {text:?}");
    };
    let stopped = run_json(&[
        "--model",
        &m,
        "--prompt",
        prompt,
        "--max-tokens",
        "40",
        "--stop",
        stop,
    ]);
    assert_eq!(stopped[0]["text"].as_str().unwrap(), &text[..at]);
    assert_eq!(stopped[0]["stop"], "stop_string");
}

#[test]
fn many_prompts_run_together_in_file_order() {
    let Some(m) = model("many_prompts_run_together_in_file_order") else {
        return;
    };
    let prompts = [
        "The capital of Italy is",
        "def fibonacci(n):",
        "1, 2, 3, 4,",
    ];
    let file = temp("prompts.txt");
    std::fs::write(&file, prompts.join("\n\n")).unwrap();
    let batch = run_json(&[
        "--model",
        &m,
        "--prompts",
        file.to_str().unwrap(),
        "--max-tokens",
        "8",
    ]);
    assert_eq!(batch.len(), prompts.len());
    for (p, r) in prompts.iter().zip(&batch) {
        assert_eq!(r["prompt"].as_str(), Some(*p));
        let alone = run_json(&["--model", &m, "--prompt", p, "--max-tokens", "1"]);
        assert_eq!(ids(r, "prompt_ids"), ids(&alone[0], "prompt_ids"));
        assert!(!ids(r, "output_ids").is_empty());
    }
}

#[test]
fn bench_tokenizes_trace_text_with_the_models_tokenizer() {
    let Some(m) = model("bench_tokenizes_trace_text_with_the_models_tokenizer") else {
        return;
    };
    let prompts = [
        "Translate to French: good morning",
        "Once upon a time, in a land far away,",
    ];
    let trace = temp("trace.jsonl");
    let lines: Vec<String> = prompts
        .iter()
        .map(|p| serde_json::json!({ "prompt": p, "max_tokens": 3 }).to_string())
        .collect();
    std::fs::write(&trace, lines.join("\n")).unwrap();
    let json = temp("bench-model.json");
    let out = pagoda(&[
        "bench",
        "--quiet",
        "--model",
        &m,
        "--trace",
        trace.to_str().unwrap(),
        "--kv-pages",
        "64",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    for policy in report["policies"].as_array().unwrap() {
        assert_eq!(policy["finished"], 2, "{}", policy["policy"]);
        assert_eq!(policy["leak_free"], true);
        // Each request's prompt is the tokenizer's ids, as `run` encodes it.
        for record in policy["per_request"].as_array().unwrap() {
            let i = record["index"].as_u64().unwrap() as usize;
            let alone = run_json(&["--model", &m, "--prompt", prompts[i], "--max-tokens", "1"]);
            let expected = ids(&alone[0], "prompt_ids").len() as u64;
            assert_eq!(record["prompt_tokens"].as_u64(), Some(expected));
        }
    }
}

#[test]
fn quantized_weights_stay_in_the_map() {
    let Some(m) = model("quantized_weights_stay_in_the_map") else {
        return;
    };
    let args = [
        "--model",
        &m,
        "--prompt",
        "The capital of France is",
        "--max-tokens",
        "4",
    ];
    // Quantized weights are the default; `--weights dense` dequantizes.
    let quantized = run_json(&args);
    let mut dense_args = args.to_vec();
    dense_args.extend(["--weights", "dense"]);
    let dense = run_json(&dense_args);
    assert_eq!(
        ids(&dense[0], "prompt_ids"),
        ids(&quantized[0], "prompt_ids")
    );
    assert!(!ids(&quantized[0], "output_ids").is_empty());
    // Dequantized f32 weights are ~4 bytes a parameter on top of the map;
    // quantized ones are the map itself.
    let rss = |v: &Value| v["memory"]["peak_resident_bytes"].as_u64().unwrap();
    let file = quantized[0]["memory"]["model_file_bytes"].as_u64().unwrap();
    assert!(
        rss(&quantized[0]) + 2 * file < rss(&dense[0]),
        "{} vs {}",
        rss(&quantized[0]),
        rss(&dense[0])
    );
}

/// `--repack-cache`: the first run writes the file (in the background,
/// reported once written), the second maps it and generates the same
/// tokens; a file of an earlier version of the model at the same path is
/// gone once the new one is written.
#[test]
fn the_repack_cache_is_written_then_read() {
    let Some(m) = model("the_repack_cache_is_written_then_read") else {
        return;
    };
    let dir = temp("repack-cache");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let cache = dir.to_string_lossy().into_owned();
    let args = [
        "--model",
        &m,
        "--prompt",
        "The capital of France is",
        "--max-tokens",
        "6",
        "--repack-cache",
        &cache,
    ];
    let first = run_json(&args);
    assert_eq!(first[0]["repack_cache"]["use"], "written", "{}", first[0]);
    let path = first[0]["repack_cache"]["path"]
        .as_str()
        .unwrap()
        .to_string();
    // An earlier version's file at the same place: its name differs only
    // in the identity.
    let (head, _) = path
        .strip_suffix(".repack")
        .unwrap()
        .rsplit_once('.')
        .unwrap();
    let earlier = format!("{head}.0000000000000000.repack");
    std::fs::write(&earlier, b"an earlier version").unwrap();
    std::fs::remove_file(&path).unwrap();
    let rewritten = run_json(&args);
    assert_eq!(rewritten[0]["repack_cache"]["use"], "written");
    assert!(!PathBuf::from(&earlier).exists(), "{earlier} is deleted");
    let second = run_json(&args);
    assert_eq!(second[0]["repack_cache"]["use"], "read", "{}", second[0]);
    assert_eq!(second[0]["repack_cache"]["path"].as_str(), Some(&*path));
    assert_eq!(ids(&second[0], "output_ids"), ids(&first[0], "output_ids"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `pagoda serve` that loads the model, starts writing its repack cache,
/// then cannot listen (the port is taken) exits with an error, but only
/// once the cache file is whole: no temporary file is left behind. On
/// Gemma 3 270M, whose cache takes longer to write than the server takes
/// to fail (SmolLM2's was written before that, and passed without the
/// wait; Gemma left its temporary file).
#[test]
fn a_serve_that_cannot_listen_still_finishes_its_repack_cache() {
    let Some(m) = env::require_gemma("a_serve_that_cannot_listen_still_finishes_its_repack_cache")
    else {
        return;
    };
    let m = m.to_string_lossy().into_owned();
    let dir = temp("repack-cache-serve");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let cache = dir.to_string_lossy().into_owned();
    let out = pagoda(&[
        "serve",
        "--model",
        &m,
        "--host",
        "127.0.0.1",
        "--port",
        &port,
        "--repack-cache",
        &cache,
    ]);
    assert!(!out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("listen"), "{}", stderr(&out));
    let names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names.len() == 1 && names[0].ends_with(".repack"),
        "one whole cache file, no temporary one: {names:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--chat-template FILE` gives Gemma 3 270M (a base model with no
/// template) a chat template: `--chat` then encodes exactly what the
/// template renders by hand (the raw prompt `Q: hi\nA:`, BOS included),
/// and generates the same greedy text. Without it, `--chat` is refused
/// naming the flag; a missing or broken template file is refused by name.
#[test]
fn a_chat_template_file_gives_a_base_model_chat() {
    let test = "a_chat_template_file_gives_a_base_model_chat";
    let Some(m) = env::require_gemma(test) else {
        return;
    };
    let m = m.to_string_lossy().into_owned();
    let template = temp("qa.jinja");
    std::fs::write(
        &template,
        "{{ bos_token }}{% for m in messages %}Q: {{ m.content }}\n{% endfor %}\
         {% if add_generation_prompt %}A:{% endif %}",
    )
    .unwrap();
    let template = template.to_str().unwrap();
    let common = ["--model", &m, "--max-tokens", "5"];
    let chat = run_json(
        &[
            &common[..],
            &["--chat", "--chat-template", template, "--prompt", "hi"],
        ]
        .concat(),
    );
    let raw = run_json(&[&common[..], &["--prompt", "Q: hi\nA:"]].concat());
    assert_eq!(ids(&chat[0], "prompt_ids"), ids(&raw[0], "prompt_ids"));
    assert_eq!(ids(&chat[0], "prompt_ids")[0], 2, "Gemma's <bos>");
    assert_eq!(chat[0]["text"], raw[0]["text"]);

    // `pagoda run --chat` with these options: refused (exit 2); its stderr.
    let refused = |extra: &[&str]| {
        let out = pagoda(&[&["run", "--model", &m, "--chat", "--prompt", "hi"], extra].concat());
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {}", stderr(&out));
        stderr(&out)
    };
    let err = refused(&[]);
    assert!(err.contains("--chat-template FILE"), "{err}");
    // A template without --chat would be ignored: refused, before loading.
    let out = pagoda(&[
        "run",
        "--model",
        &m,
        "--chat-template",
        "x.jinja",
        "--prompt",
        "hi",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("give --chat too"), "{}", stderr(&out));
    let missing = temp("missing.jinja");
    let err = refused(&["--chat-template", missing.to_str().unwrap()]);
    assert!(err.contains("cannot read the chat template"), "{err}");
    let broken = temp("broken.jinja");
    std::fs::write(&broken, "{% for m in messages %}{{ m.content }").unwrap();
    let err = refused(&["--chat-template", broken.to_str().unwrap()]);
    assert!(
        err.contains("the chat template") && err.contains("broken.jinja"),
        "{err}"
    );
}

/// A model file whose own template does not compile (SmolLM2 with one
/// `%}` of its template blanked, the file otherwise the same byte for
/// byte) still loads and completes text; `--chat` is refused saying why
/// and naming `--chat-template`, and with it the model chats with the
/// given template, encoding what that template renders.
#[test]
fn a_chat_template_file_mends_a_broken_one() {
    let Some(m) = model("a_chat_template_file_mends_a_broken_one") else {
        return;
    };
    let mut bytes = std::fs::read(&m).unwrap();
    let key = b"tokenizer.chat_template";
    let at = bytes
        .windows(key.len())
        .position(|w| w == key)
        .expect("SmolLM2 has a template");
    let close = at + bytes[at..].windows(2).position(|w| w == b"%}").unwrap();
    bytes[close..close + 2].copy_from_slice(b"  ");
    let broken = temp("broken-template.gguf");
    std::fs::write(&broken, &bytes).unwrap();
    drop(bytes);
    let broken = broken.to_str().unwrap();
    let out = pagoda(&["run", "--model", broken, "--chat", "--prompt", "hi"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("chat template does not compile") && err.contains("--chat-template FILE"),
        "{err}"
    );

    let template = temp("qa-smollm2.jinja");
    std::fs::write(
        &template,
        "{% for m in messages %}Q: {{ m.content }}\n{% endfor %}A:",
    )
    .unwrap();
    let common = ["--model", broken, "--max-tokens", "4"];
    let chat = run_json(
        &[
            &common[..],
            &[
                "--chat",
                "--chat-template",
                template.to_str().unwrap(),
                "--prompt",
                "hi",
            ],
        ]
        .concat(),
    );
    let raw = run_json(&[&common[..], &["--prompt", "Q: hi\nA:"]].concat());
    assert_eq!(ids(&chat[0], "prompt_ids"), ids(&raw[0], "prompt_ids"));
}
