//! The API key (every route but `/health` and `/metrics` needs it; those
//! too when asked; 401 in OpenAI's error shape otherwise) and `/tokenize`,
//! `/detokenize` against the byte tokenizer's definition (one id per UTF-8
//! byte; any id reads as `id % 256`).

mod support;

use pagoda_server::Access;
use serde_json::json;
use support::{config, post, request, request_with, start, start_with_access};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_keeps_strangers_out_of_every_route_but_health_and_metrics() {
    let access = Access {
        api_key: Some("sk-test-1234".into()),
        protect_all: false,
    };
    let server = start_with_access(config(4, 16, 16), access).await;
    let body = json!({"prompt": "Hi", "max_tokens": 2, "temperature": 0}).to_string();
    let routes = [
        ("POST", "/v1/completions", body.as_str()),
        ("GET", "/v1/models", ""),
        ("POST", "/tokenize", r#"{"prompt": "Hi"}"#),
        (
            "POST",
            "/generate",
            r#"{"text": "Hi", "sampling_params": {"max_new_tokens": 2}}"#,
        ),
        ("GET", "/get_load", ""),
    ];
    for (method, path, body) in routes {
        for headers in [
            &[][..],
            &["Authorization: Bearer wrong"],
            &["Authorization: sk-test-1234"],
            &["Authorization: Bearer sk-test-123"],
        ] {
            let r = request_with(server.addr, method, path, body, headers).await;
            assert_eq!(r.status, 401, "{method} {path} {headers:?}: {}", r.body);
            let v = r.json();
            assert_eq!(v["error"]["code"], "invalid_api_key");
            assert_eq!(v["error"]["type"], "invalid_request_error");
            assert_eq!(r.header("www-authenticate"), Some("Bearer"));
        }
        let ok = request_with(
            server.addr,
            method,
            path,
            body,
            &["Authorization: Bearer sk-test-1234"],
        )
        .await;
        assert_eq!(ok.status, 200, "{method} {path}: {}", ok.body);
    }
    for path in ["/health", "/metrics"] {
        assert_eq!(request(server.addr, "GET", path, "").await.status, 200);
    }
    let audit = server.shutdown().await;
    assert!(audit.is_clean(), "{audit:?}");

    let all = Access {
        api_key: Some("k".into()),
        protect_all: true,
    };
    let server = start_with_access(config(4, 16, 16), all).await;
    for path in ["/health", "/metrics"] {
        assert_eq!(request(server.addr, "GET", path, "").await.status, 401);
        let ok = request_with(server.addr, "GET", path, "", &["authorization: bearer k"]).await;
        assert_eq!(ok.status, 200, "{path}");
    }
    assert!(server.shutdown().await.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokenize_and_detokenize_round_trip_in_both_servers_shapes() {
    let server = start(config(4, 16, 16), 1 << 20).await;
    let text = "héllo, wörld";
    for body in [
        json!({"prompt": text}),
        json!({"content": text, "add_special": false}),
    ] {
        let r = post(server.addr, "/tokenize", &body.to_string()).await;
        assert_eq!(r.status, 200, "{}", r.body);
        let v = r.json();
        let want: Vec<u32> = text.bytes().map(u32::from).collect();
        assert_eq!(v["tokens"], json!(want));
        assert_eq!(v["count"], want.len());
        assert!(v["max_model_len"].as_u64().unwrap() > 0);
        let back = post(
            server.addr,
            "/detokenize",
            &json!({"tokens": v["tokens"]}).to_string(),
        )
        .await;
        assert_eq!(back.status, 200);
        assert_eq!(back.json()["prompt"], text);
        assert_eq!(back.json()["content"], text);
    }
    // Ids past a byte read as `id % 256`, as generation decodes them.
    let r = post(server.addr, "/detokenize", r#"{"tokens": [328, 105]}"#).await;
    assert_eq!(r.json()["prompt"], "Hi");
    // Bad bodies: a 400 naming the field.
    for (path, body, param) in [
        ("/tokenize", r#"{}"#, "prompt"),
        ("/tokenize", r#"{"prompt": 5}"#, "prompt"),
        (
            "/tokenize",
            r#"{"prompt": "x", "add_special_tokens": "yes"}"#,
            "add_special_tokens",
        ),
        ("/tokenize", r#"{"messages": []}"#, "messages"),
        (
            "/tokenize",
            r#"{"messages": [{"role": "user", "content": "hi"}]}"#,
            "messages",
        ),
        ("/detokenize", r#"{"tokens": "abc"}"#, "tokens"),
        ("/detokenize", r#"{"tokens": [-1]}"#, "tokens"),
        ("/detokenize", r#"{}"#, "tokens"),
    ] {
        let r = post(server.addr, path, body).await;
        assert_eq!(r.status, 400, "{path} {body}: {}", r.body);
        assert_eq!(r.json()["error"]["param"], param, "{path} {body}");
    }
    assert!(server.shutdown().await.is_clean());
}
