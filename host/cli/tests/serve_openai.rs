//! `pagoda serve` as a process, driven by the official OpenAI Python client
//! (tests/reference/openai_client.py): the embedded model (no chat
//! template: chat is refused), then SmolLM2 with its chat template when the
//! model is there. Then SIGTERM: the server drains and exits 0 with a clean
//! audit. Skipped with one line outside CI without the venv's `openai`.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;

#[path = "../../../tests/support/env.rs"]
mod env;

struct Server {
    child: Child,
    base: String,
    rest: mpsc::Receiver<String>,
}

/// A test that fails midway leaves no server behind.
impl Drop for Server {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn start(extra: &[&str]) -> Server {
    start_with_env(extra, &[])
}

fn start_with_env(extra: &[&str], vars: &[(&str, &str)]) -> Server {
    let mut child = Command::new(env!("CARGO_BIN_EXE_pagoda"))
        .args(["serve", "--port", "0", "--threads", "1"])
        .args(extra)
        .envs(vars.iter().copied())
        .stderr(Stdio::piped())
        .spawn()
        .expect("pagoda serve starts");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rest) = mpsc::channel();
    let (addr_tx, addr_rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(url) = line.split("listening on ").nth(1) {
                let _ = addr_tx.send(url.to_string());
            }
            let _ = tx.send(line);
        }
    });
    let url = addr_rx
        .recv_timeout(std::time::Duration::from_secs(120))
        .expect("the server prints its address");
    Server {
        child,
        base: format!("{url}/v1"),
        rest,
    }
}

fn client(python: &std::path::Path, server: &Server, chat: bool, key: Option<&str>) {
    let script = env::repo_root().join("tests/reference/openai_client.py");
    let mut cmd = Command::new(python);
    cmd.arg(script).args(["--base-url", &server.base]);
    if chat {
        cmd.arg("--chat");
    }
    if let Some(key) = key {
        cmd.args(["--api-key", key]);
    }
    let out = cmd.output().expect("python runs");
    assert!(
        out.status.success(),
        "openai_client.py failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("ok stream closed early"), "{stdout}");
    assert!(stdout.contains("ok completions logprobs"), "{stdout}");
    assert!(stdout.contains("ok a list of prompts"), "{stdout}");
    assert!(stdout.contains("ok models.retrieve"), "{stdout}");
    if chat {
        assert!(stdout.contains("ok ignore_eos"), "{stdout}");
        assert!(stdout.contains("ok chat logprobs"), "{stdout}");
        assert!(stdout.contains("ok sampling controls accepted"), "{stdout}");
        assert!(stdout.contains("ok structured outputs"), "{stdout}");
        assert!(stdout.contains("ok tool calls"), "{stdout}");
        assert!(stdout.contains("ok chat content parts"), "{stdout}");
    }
    if key.is_some() {
        assert!(stdout.contains("ok strangers refused"), "{stdout}");
    }
}

/// SIGTERM, then the exit status and what the server printed.
fn stop(mut server: Server) {
    let pid = server.child.id().to_string();
    let killed = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    assert!(killed.success());
    let status = server.child.wait().expect("wait");
    // The reader thread ends at the pipe's end (the exit), so this waits for
    // every line the server wrote, the audit included.
    let lines: Vec<String> = server.rest.iter().collect();
    assert!(status.success(), "exit {status:?}: {lines:?}");
    assert!(
        lines.iter().any(|l| l.contains("stopped; audit")),
        "{lines:?}"
    );
}

fn python_with_openai(test: &str) -> Option<std::path::PathBuf> {
    let python = env::require_python(test)?;
    let has = Command::new(&python)
        .args(["-c", "import openai"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has {
        assert!(
            !env::in_ci(),
            "{test}: the venv lacks `openai` (tests/reference/requirements.txt)"
        );
        eprintln!("skipping {test}: the venv lacks `openai`; pip install -r tests/reference/requirements.txt");
        return None;
    }
    Some(python)
}

#[test]
fn openai_client_against_the_embedded_model() {
    let Some(python) = python_with_openai("openai_client_against_the_embedded_model") else {
        return;
    };
    // With an API key, from the environment as a deployment passes it.
    let server = start_with_env(&[], &[("PAGODA_API_KEY", "sk-pagoda-test")]);
    client(&python, &server, false, Some("sk-pagoda-test"));
    stop(server);
}

#[test]
fn openai_client_against_smollm2_chat() {
    let test = "openai_client_against_smollm2_chat";
    let Some(python) = python_with_openai(test) else {
        return;
    };
    let Some(model) = env::require_model(test) else {
        return;
    };
    let server = start(&["--model", &model.to_string_lossy(), "--kv-pages", "512"]);
    client(&python, &server, true, None);
    stop(server);
}

/// Runs `tests/reference/SCRIPT` against `server` with `args`; returns what
/// it printed, having checked it succeeded.
fn script(python: &std::path::Path, name: &str, server: &Server, args: &[&str]) -> String {
    let out = Command::new(python)
        .arg(env::repo_root().join("tests/reference").join(name))
        .args(["--base-url", &server.base])
        .args(args)
        .output()
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{name} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprint!("{stdout}");
    stdout
}

/// The venv's Python and SmolLM2's path, in a release build only: a debug
/// server decodes SmolLM2 at a few tokens a second, minutes of the test
/// command for nothing more checked (CI runs these with --release).
fn release_with_smollm2(test: &str) -> Option<(std::path::PathBuf, String)> {
    if cfg!(debug_assertions) {
        eprintln!("skipping {test} in a debug build: cargo test --release -p pagoda-cli --test serve_openai");
        return None;
    }
    let python = python_with_openai(test)?;
    let model = env::require_model(test)?;
    Some((python, model.to_string_lossy().into_owned()))
}

/// SmolLM2 with f32 activations against independent references: log
/// probabilities (echoed prompts and greedy tokens) against the NumPy
/// forward pass, penalties by their stated amount, 20 JSON schemas through
/// `jsonschema`; then OpenAI's Agents SDK running a tool loop over chat
/// completions and over the Responses API, and the OpenAI client's
/// Responses API against the chat completions of the same conversations.
#[test]
fn api_references_and_an_agent_library_against_smollm2() {
    let test = "api_references_and_an_agent_library_against_smollm2";
    let Some((python, model)) = release_with_smollm2(test) else {
        return;
    };
    let server = start(&[
        "--model",
        &model,
        "--kv-pages",
        "512",
        "--activations",
        "f32",
    ]);
    let out = script(&python, "api_reference.py", &server, &["--model", &model]);
    for check in [
        "ok echo:",
        "ok greedy log probabilities",
        "ok penalties",
        "ok 20 JSON schemas",
    ] {
        assert!(out.contains(check), "{check} missing: {out}");
    }
    let out = script(&python, "agent_loop.py", &server, &[]);
    assert!(out.contains("ok agent loop"), "{out}");
    assert!(out.contains("ok agent over the Responses API"), "{out}");
    let out = script(&python, "responses_client.py", &server, &[]);
    for check in [
        "ok responses: the chat completion's answer and usage",
        "ok responses streamed",
        "ok responses: logprobs as the chat completion's",
        "ok responses: text.format json_schema",
        "ok responses: a required function call, streamed and not",
        "ok responses: the call's output goes back in",
        "ok responses: previous_response_id refused by name",
    ] {
        assert!(out.contains(check), "{check} missing: {out}");
    }
    stop(server);
}

/// SmolLM2 under 600 random bodies on every route (valid and wrong
/// fields, streams dropped midway, four clients at once;
/// `tests/reference/random_bodies.py` states the contracts): never a 5xx,
/// errors in OpenAI's shape, finished constrained answers valid; then
/// SIGTERM, and the audit must be clean (no page leaked).
#[test]
fn random_bodies_against_smollm2_leave_nothing_behind() {
    let test = "random_bodies_against_smollm2_leave_nothing_behind";
    let Some((python, model)) = release_with_smollm2(test) else {
        return;
    };
    let server = start(&["--model", &model, "--kv-pages", "512"]);
    let out = script(&python, "random_bodies.py", &server, &["--count", "600"]);
    assert!(out.contains("ok random bodies"), "{out}");
    stop(server);
}

/// Gemma 3 270M, a base model without a chat template: completions, and
/// chat refused with a 400.
#[test]
fn openai_client_against_gemma3_completions() {
    let test = "openai_client_against_gemma3_completions";
    let Some(python) = python_with_openai(test) else {
        return;
    };
    let Some(model) = env::require_gemma(test) else {
        return;
    };
    let server = start(&["--model", &model.to_string_lossy(), "--kv-pages", "512"]);
    client(&python, &server, false, None);
    stop(server);
}

/// One HTTP/1.1 request on a plain socket: the status and the JSON body.
fn http(base: &str, method: &str, path: &str, body: &str) -> (u16, serde_json::Value) {
    use std::io::{Read, Write};
    let addr = base
        .trim_start_matches("http://")
        .trim_end_matches("/v1")
        .to_string();
    let mut socket = std::net::TcpStream::connect(&addr).expect("connect");
    write!(
        socket,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("write");
    let mut raw = String::new();
    socket.read_to_string(&mut raw).expect("read");
    let status = raw
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status");
    let json = raw.split("\r\n\r\n").nth(1).unwrap_or("");
    (
        status,
        serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {raw}")),
    )
}

/// Gemma 3 270M served with `--chat-template FILE` and
/// `--served-model-name`: chat answers, its messages render to exactly the
/// prompt the template gives by hand (`/tokenize` of both), and the models
/// list and responses carry the name.
#[test]
fn a_chat_template_file_serves_chat_for_a_base_model() {
    let test = "a_chat_template_file_serves_chat_for_a_base_model";
    let Some(model) = env::require_gemma(test) else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("pagoda-serve-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let template = dir.join("qa.jinja");
    std::fs::write(
        &template,
        "{{ bos_token }}{% for m in messages %}Q: {{ m.content }}\n{% endfor %}\
         {% if add_generation_prompt %}A:{% endif %}",
    )
    .unwrap();
    let server = start(&[
        "--model",
        &model.to_string_lossy(),
        "--kv-pages",
        "256",
        "--chat-template",
        &template.to_string_lossy(),
        "--served-model-name",
        "gemma-qa",
    ]);
    let messages = r#"{"messages": [{"role": "user", "content": "hi"}]}"#;
    let (status, rendered) = http(&server.base, "POST", "/tokenize", messages);
    assert_eq!(status, 200, "{rendered}");
    let (_, raw) = http(
        &server.base,
        "POST",
        "/tokenize",
        r#"{"prompt": "Q: hi\nA:"}"#,
    );
    let tokens = rendered["tokens"].as_array().expect("tokens");
    // <bos> "Q" ":" " hi" "\n" "A" ":" at least, as the raw prompt has them.
    assert!(tokens.len() >= 5 && tokens[0] == 2, "{rendered}");
    assert_eq!(rendered["tokens"], raw["tokens"]);
    let (status, v) = http(
        &server.base,
        "POST",
        "/v1/chat/completions",
        r#"{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "temperature": 0}"#,
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["model"], "gemma-qa");
    assert!(v["choices"][0]["message"]["content"].is_string(), "{v}");
    let (_, models) = http(&server.base, "GET", "/v1/models", "");
    assert_eq!(models["data"][0]["id"], "gemma-qa");
    stop(server);
}

/// SmolLM2 served with a template that opens `<think>` at the end of its
/// prompt (as DeepSeek-R1's does) unless `chat_template_kwargs` turns
/// thinking off: the answer is reasoning until `</think>`, so a short one
/// is all `reasoning_content`, the same text the raw prompt completes to,
/// streamed or not; with thinking off there is none, and the content is
/// the completion of the prompt the template closed.
#[test]
fn think_tags_split_reasoning_from_content_streamed_or_not() {
    let test = "think_tags_split_reasoning_from_content_streamed_or_not";
    let Some(model) = env::require_model(test) else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("pagoda-think-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let template = dir.join("think.jinja");
    std::fs::write(
        &template,
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}\
         <|im_start|>assistant\n{% if enable_thinking is defined and not enable_thinking %}\
         <think></think>\n{% else %}<think>\n{% endif %}",
    )
    .unwrap();
    let server = start(&[
        "--model",
        &model.to_string_lossy(),
        "--kv-pages",
        "256",
        "--chat-template",
        &template.to_string_lossy(),
    ]);
    let ask = |extra: &str| {
        format!(
            r#"{{"messages": [{{"role": "user", "content": "Why is the sky blue?"}}], "max_tokens": 12, "temperature": 0{extra}}}"#
        )
    };
    // The completion of exactly the tokens the chat request's messages
    // render to (`/tokenize` of them, with the same template variables).
    let complete = |extra: &str| {
        let (status, tokens) = http(&server.base, "POST", "/tokenize", &ask(extra));
        assert_eq!(status, 200, "{tokens}");
        let body =
            serde_json::json!({"prompt": tokens["tokens"], "max_tokens": 12, "temperature": 0});
        let (status, v) = http(&server.base, "POST", "/v1/completions", &body.to_string());
        assert_eq!(status, 200, "{v}");
        v["choices"][0]["text"].as_str().unwrap().to_string()
    };
    let raw = complete("");
    let (status, v) = http(&server.base, "POST", "/v1/chat/completions", &ask(""));
    assert_eq!(status, 200, "{v}");
    let message = &v["choices"][0]["message"];
    assert!(
        !raw.contains("</think>"),
        "the test needs an unclosed answer: {raw:?}"
    );
    assert_eq!(
        message["reasoning_content"].as_str(),
        Some(raw.trim()),
        "{v}"
    );
    assert_eq!(message["content"], "", "{v}");
    // Streamed: the reasoning deltas make the same text, and no content.
    let streamed = std::process::Command::new("curl")
        .args(["-sN", "-H", "Content-Type: application/json", "-d"])
        .arg(ask(r#", "stream": true"#))
        .arg(format!("{}/chat/completions", server.base))
        .output()
        .expect("curl runs");
    assert!(streamed.status.success(), "curl failed");
    {
        let out = streamed;
        let (mut reasoning, mut content) = (String::new(), String::new());
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let Some(chunk) = line.strip_prefix("data: ").filter(|c| *c != "[DONE]") else {
                continue;
            };
            let chunk: serde_json::Value = serde_json::from_str(chunk).unwrap();
            let delta = &chunk["choices"][0]["delta"];
            reasoning.push_str(delta["reasoning_content"].as_str().unwrap_or(""));
            content.push_str(delta["content"].as_str().unwrap_or(""));
        }
        assert_eq!(reasoning.trim(), raw.trim());
        assert_eq!(content, "");
    }
    // Thinking off: the template closes the tags, so all is content.
    let off = complete(r#", "chat_template_kwargs": {"enable_thinking": false}"#);
    let (status, v) = http(
        &server.base,
        "POST",
        "/v1/chat/completions",
        &ask(r#", "chat_template_kwargs": {"enable_thinking": false}"#),
    );
    assert_eq!(status, 200, "{v}");
    let message = &v["choices"][0]["message"];
    assert!(message.get("reasoning_content").is_none(), "{v}");
    assert_eq!(message["content"].as_str(), Some(off.as_str()), "{v}");
    let (status, v) = http(
        &server.base,
        "POST",
        "/v1/chat/completions",
        &ask(r#", "chat_template_kwargs": "off""#),
    );
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["error"]["param"], "chat_template_kwargs");
    // `separate_reasoning: false` (SGLang's): the reasoning stays in the
    // content as the model wrote it.
    let (status, v) = http(
        &server.base,
        "POST",
        "/v1/chat/completions",
        &ask(r#", "separate_reasoning": false"#),
    );
    assert_eq!(status, 200, "{v}");
    let message = &v["choices"][0]["message"];
    assert!(message.get("reasoning_content").is_none(), "{v}");
    assert_eq!(message["content"].as_str(), Some(raw.as_str()), "{v}");
    let (status, v) = http(
        &server.base,
        "POST",
        "/v1/chat/completions",
        &ask(r#", "separate_reasoning": "no""#),
    );
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["error"]["param"], "separate_reasoning");
    stop(server);
}
