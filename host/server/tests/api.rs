//! The OpenAI API over a live server on an ephemeral port (embedded model,
//! byte tokenizer). References: OpenAI's documented shapes, the byte
//! tokenizer's definition (one token per byte), and the API's own
//! contracts (a stream concatenates to the non-streamed text; choice `i` of
//! `n` samples as a single request with seed `seed + i`).

mod support;

use serde_json::{json, Value};
use support::{config, post, request, start};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const LIMIT: usize = 1 << 20;

fn text_of(v: &Value, i: usize) -> String {
    v["choices"][i]["text"].as_str().expect("text").to_string()
}

/// Concatenates a stream's choice texts by index; returns them, the JSON
/// events and whether it ended with `[DONE]`.
fn collect(events: &[String], n: usize) -> (Vec<String>, Vec<Value>, bool) {
    let done = events.last().is_some_and(|e| e == "[DONE]");
    let values: Vec<Value> = events
        .iter()
        .filter(|e| *e != "[DONE]")
        .map(|e| serde_json::from_str(e).expect("chunk json"))
        .collect();
    let mut texts = vec![String::new(); n];
    for v in &values {
        for c in v["choices"].as_array().expect("choices") {
            let i = c["index"].as_u64().expect("index") as usize;
            texts[i].push_str(c["text"].as_str().unwrap_or(""));
        }
    }
    (texts, values, done)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_matches_non_stream_and_usage_counts_bytes() {
    let server = start(config(8, 64, 64), LIMIT).await;
    let prompt = "Hello, world";
    let body = json!({"prompt": prompt, "max_tokens": 12, "temperature": 0});
    let plain = post(server.addr, "/v1/completions", &body.to_string()).await;
    assert_eq!(plain.status, 200, "{}", plain.body);
    let v = plain.json();
    assert_eq!(v["object"], "text_completion");
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    // The byte tokenizer: one prompt token per byte.
    assert_eq!(v["usage"]["prompt_tokens"], prompt.len());
    assert_eq!(v["usage"]["completion_tokens"], 12);
    assert_eq!(v["usage"]["total_tokens"], prompt.len() + 12);
    assert_eq!(v["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    let want = text_of(&v, 0);
    assert!(!want.is_empty());

    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let s = post(server.addr, "/v1/completions", &streamed.to_string()).await;
    assert_eq!(s.status, 200);
    assert!(s
        .header("content-type")
        .unwrap_or("")
        .starts_with("text/event-stream"));
    let (texts, values, done) = collect(&s.events(), 1);
    assert!(done, "ends with [DONE]");
    assert_eq!(
        texts[0], want,
        "chunks concatenate to the non-streamed text"
    );
    assert!(
        values.iter().all(|v| v.get("usage").is_none()),
        "no usage unless asked"
    );
    assert_eq!(
        values.last().expect("chunk")["choices"][0]["finish_reason"],
        "length"
    );

    streamed["stream_options"] = json!({"include_usage": true});
    let s = post(server.addr, "/v1/completions", &streamed.to_string()).await;
    let (texts, values, done) = collect(&s.events(), 1);
    assert!(done);
    assert_eq!(texts[0], want);
    let last = values.last().expect("usage chunk");
    assert_eq!(last["choices"], json!([]));
    assert_eq!(last["usage"]["completion_tokens"], 12);
    assert_eq!(last["usage"]["prompt_tokens"], prompt.len());
    assert_eq!(
        values.iter().filter(|v| v.get("usage").is_some()).count(),
        1
    );

    // Metrics agree with the three requests.
    let m = request(server.addr, "GET", "/metrics", "").await;
    assert_eq!(m.status, 200);
    for name in [
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:prefix_cache_queries_total",
        "vllm:prefix_cache_hits_total",
        "vllm:num_preemptions_total",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:request_success_total",
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:inter_token_latency_seconds_bucket",
        "vllm:e2e_request_latency_seconds_bucket",
        "vllm:request_queue_time_seconds_bucket",
        "vllm:cache_config_info",
    ] {
        assert!(m.body.contains(name), "{name} missing");
    }
    let value = |line: &str| -> f64 {
        m.body
            .lines()
            .find(|l| l.starts_with(line))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{line} missing"))
    };
    let label = "{model_name=\"embedded\"}";
    assert_eq!(value(&format!("vllm:generation_tokens_total{label}")), 36.0);
    assert_eq!(
        value(&format!("vllm:prompt_tokens_total{label}")),
        3.0 * prompt.len() as f64
    );
    assert_eq!(
        value("vllm:request_success_total{model_name=\"embedded\",finished_reason=\"length\"}"),
        3.0
    );
    assert_eq!(value(&format!("vllm:num_requests_running{label}")), 0.0);
    assert_eq!(
        value(&format!("vllm:e2e_request_latency_seconds_count{label}")),
        3.0
    );
    assert_eq!(
        value(&format!("vllm:time_to_first_token_seconds_count{label}")),
        3.0
    );
    assert_eq!(
        value(&format!("vllm:inter_token_latency_seconds_count{label}")),
        33.0
    );
    assert!(m.body.contains("vllm:cache_config_info{model_name=\"embedded\",block_size=\"16\",num_gpu_blocks=\"512\"} 1"));

    let h = request(server.addr, "GET", "/health", "").await;
    assert_eq!(h.status, 200);
    let models = request(server.addr, "GET", "/v1/models", "").await.json();
    assert_eq!(models["object"], "list");
    assert_eq!(models["data"][0]["id"], "embedded");
    let one = request(server.addr, "GET", "/v1/models/embedded", "").await;
    assert_eq!(one.status, 200);
    assert_eq!(one.json(), models["data"][0]);
    let other = request(server.addr, "GET", "/v1/models/gpt-4", "").await;
    assert_eq!(other.status, 404);
    assert_eq!(other.json()["error"]["code"], "model_not_found");
    assert!(server.shutdown().await.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn n_choices_sample_with_seeds_seed_plus_i() {
    let server = start(config(8, 64, 64), LIMIT).await;
    let body = json!({"prompt": "abc", "max_tokens": 6, "temperature": 1.0, "seed": 40, "n": 3});
    let v = post(server.addr, "/v1/completions", &body.to_string())
        .await
        .json();
    assert_eq!(v["choices"].as_array().expect("choices").len(), 3);
    assert_eq!(v["usage"]["completion_tokens"], 18);
    assert_eq!(v["usage"]["prompt_tokens"], 3);
    for i in 0..3 {
        assert_eq!(v["choices"][i]["index"], i);
        let single = json!({"prompt": "abc", "max_tokens": 6, "temperature": 1.0, "seed": 40 + i});
        let one = post(server.addr, "/v1/completions", &single.to_string())
            .await
            .json();
        assert_eq!(text_of(&v, i), text_of(&one, 0), "choice {i}");
    }
    // Streamed, the same choices.
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let s = post(server.addr, "/v1/completions", &streamed.to_string()).await;
    let (texts, _, done) = collect(&s.events(), 3);
    assert!(done);
    for (i, t) in texts.iter().enumerate() {
        assert_eq!(*t, text_of(&v, i));
    }
    assert!(server.shutdown().await.is_clean());
}

/// A list of prompts (OpenAI's batch shape): choice `p * n + i` is the
/// request of prompt `p` alone with seed `seed + i`; usage sums the
/// prompts; `echo` puts each choice's own prompt first; the stream
/// carries the same choices; more than 128 choices are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_of_prompts_is_each_prompt_asked_alone() {
    let server = start(config(8, 64, 64), LIMIT).await;
    let c = "/v1/completions";
    let prompts = [json!("abc"), json!([104, 105]), json!("xyz!")];
    let lens = [3, 2, 4];
    let body = json!({"prompt": prompts, "max_tokens": 5, "temperature": 1.0, "seed": 9, "n": 2, "echo": true});
    let v = post(server.addr, c, &body.to_string()).await.json();
    assert_eq!(v["choices"].as_array().expect("choices").len(), 6);
    assert_eq!(v["usage"]["prompt_tokens"], 9);
    assert_eq!(v["usage"]["completion_tokens"], 30);
    for (p, prompt) in prompts.iter().enumerate() {
        for i in 0..2 {
            let index = p * 2 + i;
            let single = json!({"prompt": prompt, "max_tokens": 5, "temperature": 1.0, "seed": 9 + i, "echo": true});
            let one = post(server.addr, c, &single.to_string()).await.json();
            assert_eq!(v["choices"][index]["index"], index);
            assert_eq!(
                text_of(&v, index),
                text_of(&one, 0),
                "prompt {p} sample {i}"
            );
            assert_eq!(one["usage"]["prompt_tokens"], lens[p]);
        }
    }
    // The byte tokenizer echoes each prompt's own bytes first.
    assert!(text_of(&v, 0).starts_with("abc") && text_of(&v, 3).starts_with("hi"));
    assert!(text_of(&v, 5).starts_with("xyz!"));
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let s = post(server.addr, c, &streamed.to_string()).await;
    let (texts, _, done) = collect(&s.events(), 6);
    assert!(done);
    for (i, t) in texts.iter().enumerate() {
        assert_eq!(*t, text_of(&v, i), "streamed choice {i}");
    }
    // 65 prompts of 2 choices each are over 128 choices.
    let many = json!({"prompt": vec!["a"; 65], "n": 2, "max_tokens": 1});
    assert_error(
        &post(server.addr, c, &many.to_string()).await,
        400,
        Some("prompt"),
    );
    // One bad prompt refuses the whole request, naming it.
    let empty = json!({"prompt": ["abc", []], "max_tokens": 1});
    let r = post(server.addr, c, &empty.to_string()).await;
    assert_error(&r, 400, Some("prompt"));
    assert!(r.body.contains("prompt 1"), "{}", r.body);
    assert!(server.shutdown().await.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_string_ends_the_text_before_it() {
    let server = start(config(8, 64, 64), LIMIT).await;
    let base = json!({"prompt": "The quick", "max_tokens": 24, "temperature": 0});
    let full = text_of(
        &post(server.addr, "/v1/completions", &base.to_string())
            .await
            .json(),
        0,
    );
    let chars: Vec<char> = full.chars().collect();
    assert!(chars.len() > 8, "{full:?}");
    let stop: String = chars[6..8].iter().collect();
    let expected = &full[..full.find(&stop).expect("stop in text")];
    for stops in [json!(stop), json!(["\u{1}never", stop])] {
        let mut body = base.clone();
        body["stop"] = stops;
        let v = post(server.addr, "/v1/completions", &body.to_string())
            .await
            .json();
        assert_eq!(text_of(&v, 0), expected);
        assert_eq!(v["choices"][0]["finish_reason"], "stop");
        body["stream"] = json!(true);
        let s = post(server.addr, "/v1/completions", &body.to_string()).await;
        let (texts, values, done) = collect(&s.events(), 1);
        assert!(done);
        assert_eq!(texts[0], expected);
        assert_eq!(
            values.last().expect("chunk")["choices"][0]["finish_reason"],
            "stop"
        );
    }
    assert!(
        server.wait_idle().await,
        "the stopped requests were cancelled"
    );
    assert!(server.shutdown().await.is_clean());
}

fn assert_error(r: &support::Response, status: u16, param: Option<&str>) {
    assert_eq!(r.status, status, "{}", r.body);
    let v = r.json();
    let e = v["error"].as_object().expect("error object");
    let mut keys: Vec<&str> = e.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["code", "message", "param", "type"]);
    assert!(e["message"].as_str().is_some_and(|m| !m.is_empty()));
    assert!(e["type"].is_string());
    assert_eq!(e["param"].as_str(), param, "{}", r.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_have_openai_shape_and_name_the_field() {
    let server = start(config(8, 64, 64), 16384).await;
    let c = "/v1/completions";
    assert_error(&post(server.addr, c, "{not json").await, 400, None);
    assert_error(&post(server.addr, c, "[1, 2]").await, 400, None);
    for (body, param) in [
        (json!({}), "prompt"),
        (json!({"prompt": 5}), "prompt"),
        (json!({"prompt": "a", "temperature": "hot"}), "temperature"),
        (json!({"prompt": "a", "temperature": 9}), "temperature"),
        (json!({"prompt": "a", "top_p": 0}), "top_p"),
        (json!({"prompt": "a", "top_k": -3}), "top_k"),
        (json!({"prompt": "a", "n": 0}), "n"),
        (json!({"prompt": "a", "max_tokens": 0}), "max_tokens"),
        (json!({"prompt": "a", "stop": 3}), "stop"),
        (json!({"prompt": "a", "stream": "yes"}), "stream"),
        (json!({"prompt": "a", "priority": "urgent"}), "priority"),
        (json!({"prompt": "a", "ignore_eos": "yes"}), "ignore_eos"),
        (
            json!({"prompt": "a", "stream_options": {"include_usage": 1}}),
            "stream_options.include_usage",
        ),
        (json!({"prompt": [1, -2]}), "prompt"),
        (json!({"prompt": [9999]}), "prompt"),
        (
            json!({"prompt": "a", "presence_penalty": 3}),
            "presence_penalty",
        ),
        (
            json!({"prompt": "a", "frequency_penalty": "x"}),
            "frequency_penalty",
        ),
        (
            json!({"prompt": "a", "repetition_penalty": 0}),
            "repetition_penalty",
        ),
        (json!({"prompt": "a", "min_p": 1.5}), "min_p"),
        (json!({"prompt": "a", "logit_bias": {"x": 1}}), "logit_bias"),
        (
            json!({"prompt": "a", "logit_bias": {"5": 101}}),
            "logit_bias",
        ),
        (json!({"prompt": "a", "logit_bias": [1]}), "logit_bias"),
        (
            json!({"prompt": "a", "stop_token_ids": [-1]}),
            "stop_token_ids",
        ),
        (json!({"prompt": "a", "min_tokens": -1}), "min_tokens"),
        (
            json!({"prompt": "a", "min_tokens": 5, "max_tokens": 4}),
            "min_tokens",
        ),
    ] {
        assert_error(
            &post(server.addr, c, &body.to_string()).await,
            400,
            Some(param),
        );
    }
    // Longer than the embedded model's 2048-token context.
    let long = json!({"prompt": vec![1u32; 2048]});
    assert_error(
        &post(server.addr, c, &long.to_string()).await,
        400,
        Some("prompt"),
    );
    // Over the 16 KiB body limit.
    let big = json!({"prompt": "x".repeat(20_000)});
    assert_error(&post(server.addr, c, &big.to_string()).await, 413, None);
    // The embedded model has no chat template.
    let chat = json!({"messages": [{"role": "user", "content": "hi"}]});
    assert_error(
        &post(server.addr, "/v1/chat/completions", &chat.to_string()).await,
        400,
        Some("messages"),
    );
    assert_error(
        &post(server.addr, "/v1/chat/completions", "{\"messages\": []}").await,
        400,
        Some("messages"),
    );
    // The Responses API names its own fields.
    let r = "/v1/responses";
    assert_error(
        &post(server.addr, r, r#"{"input": "hi"}"#).await,
        400,
        Some("input"),
    );
    assert_error(&post(server.addr, r, "{}").await, 400, Some("input"));
    let stored = r#"{"input": "hi", "previous_response_id": "resp_1"}"#;
    assert_error(
        &post(server.addr, r, stored).await,
        400,
        Some("previous_response_id"),
    );
    assert!(server.shutdown().await.is_clean());
}

/// The sampling controls through the API, where their effect is certain:
/// a bias of 100 makes one token win every greedy step; a stop token id
/// ends the choice at it; `min_tokens` holds the stop token off until then;
/// penalties and min-p are accepted and change nothing for a greedy choice
/// without repeats to punish (checked against the same request without).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sampling_controls_shape_the_choice() {
    let server = start(config(8, 64, 64), LIMIT).await;
    let c = "/v1/completions";
    let ask = |extra: Value| {
        let mut body = json!({"prompt": "Hello", "max_tokens": 8, "temperature": 0});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        body.to_string()
    };
    // Token 65 is "A" in the byte vocabulary.
    let r = post(server.addr, c, &ask(json!({"logit_bias": {"65": 100}}))).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(text_of(&r.json(), 0), "AAAAAAAA");
    // The forced token is a stop token: one token, finish "stop".
    let r = post(
        server.addr,
        c,
        &ask(json!({"logit_bias": {"66": 100}, "stop_token_ids": [66]})),
    )
    .await;
    let v = r.json();
    assert_eq!(v["choices"][0]["finish_reason"], "stop", "{v}");
    assert_eq!(v["usage"]["completion_tokens"], 1);
    // ...not before the third token with min_tokens 3: two others first.
    let r = post(
        server.addr,
        c,
        &ask(json!({"logit_bias": {"66": 100}, "stop_token_ids": [66], "min_tokens": 3})),
    )
    .await;
    let v = r.json();
    assert_eq!(v["choices"][0]["finish_reason"], "stop", "{v}");
    assert_eq!(v["usage"]["completion_tokens"], 4, "{v}");
    let text = text_of(&v, 0);
    assert!(
        text.ends_with('B') && !text[..text.len() - 1].contains('B'),
        "{text:?}"
    );
    // A strong repetition penalty changes a greedy choice that repeats.
    let long = |extra: Value| {
        let mut body = json!({"prompt": "Hello", "max_tokens": 48, "temperature": 0});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        body.to_string()
    };
    let plain = post(server.addr, c, &long(json!({}))).await.json();
    let penalised = post(server.addr, c, &long(json!({"repetition_penalty": 5.0})))
        .await
        .json();
    let min_p = post(server.addr, c, &long(json!({"min_p": 0.5})))
        .await
        .json();
    // Min-p does not touch a greedy choice.
    assert_eq!(text_of(&min_p, 0), text_of(&plain, 0));
    let (a, b) = (text_of(&plain, 0), text_of(&penalised, 0));
    let repeats = |s: &str| s.len() - s.chars().collect::<std::collections::BTreeSet<_>>().len();
    assert!(repeats(&a) > 0, "the plain choice has no repeats: {a:?}");
    assert_ne!(a, b, "a repetition penalty of 5 changed nothing");
    assert!(server.shutdown().await.is_clean());
}

/// Opens a streaming request and reads until its headers (and, when
/// `first_chunk`, its first event) have arrived.
async fn open_stream(
    addr: std::net::SocketAddr,
    body: &Value,
    first_chunk: bool,
) -> (tokio::net::TcpStream, String) {
    let mut socket = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let raw = support::raw_request("POST", "/v1/completions", body.to_string().as_bytes());
    socket.write_all(&raw).await.expect("write");
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = socket.read(&mut buf).await.expect("read");
        assert!(n > 0, "closed early: {}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&seen);
        if let Some(end) = text.find("\r\n\r\n") {
            if !first_chunk || !text.starts_with("HTTP/1.1 200") || text[end..].contains("data: ") {
                return (socket, text.into_owned());
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_stream_cancels_its_request() {
    let server = start(config(8, 64, 64), LIMIT).await;
    let body = json!({"prompt": "long", "max_tokens": 1500, "temperature": 0, "stream": true});
    let (socket, seen) = open_stream(server.addr, &body, true).await;
    assert!(seen.starts_with("HTTP/1.1 200"), "{seen}");
    drop(socket);
    assert!(server.wait_idle().await, "the request was cancelled");
    // A non-streaming request whose client goes away is cancelled too.
    let mut socket = tokio::net::TcpStream::connect(server.addr)
        .await
        .expect("connect");
    let plain = json!({"prompt": "long", "max_tokens": 1500, "temperature": 0});
    socket
        .write_all(&support::raw_request(
            "POST",
            "/v1/completions",
            plain.to_string().as_bytes(),
        ))
        .await
        .expect("write");
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    drop(socket);
    assert!(server.wait_idle().await, "the request was cancelled");
    let audit = server.shutdown().await;
    assert!(audit.is_clean(), "{audit:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_queue_answers_429_with_retry_after() {
    // One running request, one queued; the next is refused.
    let server = start(config(1, 1, 1), LIMIT).await;
    let body = json!({"prompt": "busy", "max_tokens": 1500, "temperature": 0, "stream": true});
    let mut held = Vec::new();
    let mut refused = None;
    for _ in 0..4 {
        let (socket, seen) = open_stream(server.addr, &body, false).await;
        if seen.starts_with("HTTP/1.1 429") {
            refused = Some(seen);
            break;
        }
        assert!(seen.starts_with("HTTP/1.1 200"), "{seen}");
        held.push(socket);
        if held.len() == 1 {
            // Accepted means queued: let the engine take it into its one
            // running slot first, or the next would find the queue full.
            assert!(server.wait_running(1).await);
        }
    }
    let refused = refused.expect("a 429 once the queue is full");
    assert_eq!(held.len(), 2, "one running and one queued are taken");
    assert!(
        refused.to_ascii_lowercase().contains("retry-after: 1"),
        "{refused}"
    );
    assert!(
        refused.contains("\"type\":\"rate_limit_error\""),
        "{refused}"
    );
    drop(held);
    assert!(server.wait_idle().await);
    assert!(server.shutdown().await.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_past_its_deadline_cancels_and_ends_streams() {
    let deadline = std::time::Duration::from_millis(200);
    let server = support::start_with_deadline(config(8, 64, 64), LIMIT, deadline).await;
    let body = json!({"prompt": "long", "max_tokens": 1900, "temperature": 0, "stream": true});
    let (mut socket, seen) = open_stream(server.addr, &body, true).await;
    assert!(seen.starts_with("HTTP/1.1 200"), "{seen}");
    assert_eq!(request(server.addr, "GET", "/health", "").await.status, 200);
    server.state.start_draining();
    assert_eq!(request(server.addr, "GET", "/health", "").await.status, 503);
    let audit = server.shutdown().await;
    assert!(audit.is_clean(), "{audit:?}");
    // The stream ends (the request was cancelled) instead of hanging.
    let mut rest = Vec::new();
    let read = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        socket.read_to_end(&mut rest),
    )
    .await;
    assert!(read.is_ok(), "the stream ended");
    let text = String::from_utf8_lossy(&rest);
    assert!(
        text.contains("\"error\""),
        "the stream reports the cancellation: {text}"
    );
}

/// Completions' `logprobs: N` in OpenAI's legacy shape, streamed and not:
/// one entry per generated token, each at most 0, the greedy token the
/// most likely of its alternatives, offsets following the token texts;
/// the stream's entries, concatenated, are the non-streamed ones. A
/// logit bias does not move them (they are the model's own).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logprobs_come_with_every_token_streamed_or_not() {
    let server = start(config(8, 64, 64), LIMIT).await;
    let c = "/v1/completions";
    let body = json!({"prompt": "Hello", "max_tokens": 10, "temperature": 0, "logprobs": 3});
    let v = post(server.addr, c, &body.to_string()).await.json();
    let lp = &v["choices"][0]["logprobs"];
    let tokens = lp["tokens"].as_array().expect("tokens");
    assert_eq!(tokens.len(), 10, "{v}");
    let token_logprobs: Vec<f64> = lp["token_logprobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    let tops = lp["top_logprobs"].as_array().unwrap();
    let offsets: Vec<u64> = lp["text_offset"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect();
    let mut offset = 0;
    for i in 0..10 {
        assert!(token_logprobs[i] <= 0.0, "{v}");
        let top = tops[i].as_object().unwrap();
        assert!(!top.is_empty() && top.len() <= 3, "{v}");
        let best = top
            .values()
            .map(|x| x.as_f64().unwrap())
            .fold(f64::MIN, f64::max);
        assert!(
            (token_logprobs[i] - best).abs() < 1e-5,
            "greedy picks the top: {v}"
        );
        assert_eq!(offsets[i], offset);
        offset += tokens[i].as_str().unwrap().chars().count() as u64;
    }

    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let s = post(server.addr, c, &streamed.to_string()).await;
    let (mut got_tokens, mut got_logprobs, mut got_offsets) = (Vec::new(), Vec::new(), Vec::new());
    for e in s.events().iter().filter(|e| *e != "[DONE]") {
        let chunk: Value = serde_json::from_str(e).unwrap();
        let lp = &chunk["choices"][0]["logprobs"];
        got_tokens.extend(lp["tokens"].as_array().unwrap().iter().cloned());
        got_logprobs.extend(lp["token_logprobs"].as_array().unwrap().iter().cloned());
        got_offsets.extend(lp["text_offset"].as_array().unwrap().iter().cloned());
    }
    assert_eq!(&got_tokens, tokens);
    assert_eq!(json!(got_logprobs), lp["token_logprobs"]);
    assert_eq!(json!(got_offsets), lp["text_offset"]);

    // The model's own log probabilities, whatever the bias made it pick:
    // the first token is "A" here, with the probability it had unbiased.
    let forced = json!({"prompt": "Hello", "max_tokens": 1, "temperature": 0,
                        "logprobs": 20, "logit_bias": {"65": 100}});
    let f = post(server.addr, c, &forced.to_string()).await.json();
    let flp = &f["choices"][0]["logprobs"];
    assert_eq!(flp["tokens"][0], "A", "{f}");
    let first_top = tops[0].as_object().unwrap();
    let forced_top = flp["top_logprobs"][0].as_object().unwrap();
    for (token, p) in first_top {
        assert_eq!(
            forced_top.get(token),
            Some(p),
            "the alternatives moved: {f}"
        );
    }
    assert!(flp["token_logprobs"][0].as_f64().unwrap() < 0.0);

    for (body, param) in [
        (json!({"prompt": "a", "logprobs": 21}), "logprobs"),
        (json!({"prompt": "a", "logprobs": -1}), "logprobs"),
        (json!({"prompt": "a", "max_tokens": 0}), "max_tokens"),
        (
            json!({"prompt": "a", "logprobs_mode": "raw"}),
            "logprobs_mode",
        ),
    ] {
        assert_error(
            &post(server.addr, c, &body.to_string()).await,
            400,
            Some(param),
        );
    }
    // `echo` is the completions API's: chat refuses it by name.
    let chat = json!({"messages": [{"role": "user", "content": "a"}], "echo": true});
    let r = post(server.addr, "/v1/chat/completions", &chat.to_string()).await;
    assert_error(&r, 400, Some("echo"));

    // `echo` with `max_tokens: 0` scores the prompt: its text, its tokens
    // (the first unscored), nothing generated; streamed, the same scores.
    let scored = json!({"prompt": "Hello there", "max_tokens": 0, "echo": true, "logprobs": 2});
    let v = post(server.addr, c, &scored.to_string()).await.json();
    let lp = &v["choices"][0]["logprobs"];
    assert_eq!(text_of(&v, 0), "Hello there", "{v}");
    assert_eq!(v["usage"]["completion_tokens"], 0, "{v}");
    let n = lp["tokens"].as_array().unwrap().len();
    assert_eq!(
        n as u64,
        v["usage"]["prompt_tokens"].as_u64().unwrap(),
        "{v}"
    );
    assert!(
        lp["token_logprobs"][0].is_null() && lp["top_logprobs"][0].is_null(),
        "{v}"
    );
    for i in 1..n {
        assert!(lp["token_logprobs"][i].as_f64().unwrap() <= 0.0, "{v}");
        assert!(lp["top_logprobs"][i].as_object().unwrap().len() <= 2, "{v}");
    }
    let mut streamed = scored.clone();
    streamed["stream"] = json!(true);
    streamed["max_tokens"] = json!(3);
    let s = post(server.addr, c, &streamed.to_string()).await;
    let (texts, values, done) = collect(&s.events(), 1);
    assert!(done && texts[0].starts_with("Hello there"), "{texts:?}");
    assert_eq!(
        values[0]["choices"][0]["logprobs"]["token_logprobs"],
        lp["token_logprobs"]
    );
    assert!(server.shutdown().await.is_clean());
}

/// Structured outputs through the API, on the embedded random model (so
/// every valid output is the mask's doing): a choice, a regular
/// expression and a JSON schema at temperature 1 over several seeds, each
/// output checked against its definition; invalid ones and two at once
/// are a 400 naming the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn structured_outputs_hold_whatever_the_model_samples() {
    let server = start(config(8, 64, 64), LIMIT).await;
    let c = "/v1/completions";
    let ask = |extra: Value| {
        let mut body =
            json!({"prompt": "Answer:", "max_tokens": 40, "temperature": 1.0, "n": 4, "seed": 3});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        body.to_string()
    };
    let v = post(
        server.addr,
        c,
        &ask(json!({"guided_choice": ["yes", "no", "maybe"]})),
    )
    .await
    .json();
    for i in 0..4 {
        let text = text_of(&v, i);
        assert!(["yes", "no", "maybe"].contains(&text.as_str()), "{v}");
        assert_eq!(v["choices"][i]["finish_reason"], "stop", "{v}");
    }
    let v = post(
        server.addr,
        c,
        &ask(json!({"guided_regex": "[0-9]{3}-[a-z]{2}"})),
    )
    .await
    .json();
    for i in 0..4 {
        let t = text_of(&v, i);
        let b = t.as_bytes();
        let ok = b.len() == 6
            && b[..3].iter().all(u8::is_ascii_digit)
            && b[3] == b'-'
            && b[4..].iter().all(u8::is_ascii_lowercase);
        assert!(ok, "{t:?} does not match: {v}");
    }
    let schema = json!({
        "type": "object",
        "properties": {"ok": {"type": "boolean"}, "pick": {"enum": ["red", "blue"]}},
        "required": ["ok", "pick"],
        "additionalProperties": false,
    });
    let format =
        json!({"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}});
    let v = post(server.addr, c, &ask(json!({"response_format": format})))
        .await
        .json();
    for i in 0..4 {
        let t = text_of(&v, i);
        let parsed: Value = serde_json::from_str(&t).unwrap_or_else(|e| panic!("{t:?}: {e}"));
        assert!(parsed["ok"].is_boolean(), "{t}");
        assert!(parsed["pick"] == "red" || parsed["pick"] == "blue", "{t}");
        assert_eq!(parsed.as_object().unwrap().len(), 2, "{t}");
    }
    // Any JSON object: its start at least (a random model may not close it
    // within the limit).
    let v = post(
        server.addr,
        c,
        &ask(json!({"response_format": {"type": "json_object"}, "max_tokens": 3})),
    )
    .await
    .json();
    assert!(text_of(&v, 0).starts_with('{'), "{v}");

    for (body, param) in [
        (
            json!({"prompt": "a", "response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "foo"}}}}),
            "response_format",
        ),
        (
            json!({"prompt": "a", "response_format": {"type": "xml"}}),
            "response_format",
        ),
        (json!({"prompt": "a", "guided_regex": "("}), "guided_regex"),
        (
            json!({"prompt": "a", "guided_choice": "yes"}),
            "guided_choice",
        ),
        (
            json!({"prompt": "a", "guided_choice": ["a"], "guided_regex": "b"}),
            "guided_choice",
        ),
        (
            json!({"prompt": "a", "guided_json": "{not json"}),
            "guided_json",
        ),
    ] {
        assert_error(
            &post(server.addr, c, &body.to_string()).await,
            400,
            Some(param),
        );
    }
    assert!(server.shutdown().await.is_clean());
}
