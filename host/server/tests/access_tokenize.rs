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
        ..Access::default()
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
        ..Access::default()
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

/// CORS: off by default (no `Access-Control-Allow-Origin` for any page);
/// with an allowed origin, its preflight is answered without the key, its
/// requests and their 401s carry the header, and another origin's do not;
/// `*` lets any origin in.
fn refs(h: &[String]) -> Vec<&str> {
    h.iter().map(String::as_str).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browsers_are_let_in_from_the_allowed_origins_only() {
    let allow = "access-control-allow-origin";
    let body = r#"{"prompt": "hi", "max_tokens": 1}"#;
    let from = |origin: &str| format!("Origin: {origin}");
    let preflight = |origin: &str| {
        vec![
            from(origin),
            "Access-Control-Request-Method: POST".to_string(),
            // The OpenAI JS SDK's own headers come with every request.
            "Access-Control-Request-Headers: authorization, content-type, x-stainless-os"
                .to_string(),
        ]
    };

    let closed = start_with_access(config(4, 16, 16), Access::default()).await;
    let h = [from("http://app.example")];
    let r = request_with(closed.addr, "POST", "/v1/completions", body, &refs(&h)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header(allow), None);
    let p = preflight("http://app.example");
    let r = request_with(closed.addr, "OPTIONS", "/v1/completions", "", &refs(&p)).await;
    assert_eq!(r.header(allow), None, "{}", r.status);
    assert!(closed.shutdown().await.is_clean());

    let access = Access {
        api_key: Some("k3y".into()),
        allowed_origins: vec!["http://app.example".into()],
        ..Access::default()
    };
    let server = start_with_access(config(4, 16, 16), access).await;
    let p = preflight("http://app.example");
    let r = request_with(server.addr, "OPTIONS", "/v1/completions", "", &refs(&p)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header(allow), Some("http://app.example"));
    let headers = r
        .header("access-control-allow-headers")
        .unwrap_or_default()
        .to_ascii_lowercase();
    assert!(
        headers.contains("authorization")
            && headers.contains("content-type")
            && headers.contains("x-stainless-os"),
        "{headers}"
    );
    assert!(r
        .header("access-control-allow-methods")
        .is_some_and(|m| m.contains("POST")));
    let keyed = [
        from("http://app.example"),
        "Authorization: Bearer k3y".into(),
    ];
    let r = request_with(server.addr, "POST", "/v1/completions", body, &refs(&keyed)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header(allow), Some("http://app.example"));
    let r = request_with(server.addr, "POST", "/v1/completions", body, &refs(&h)).await;
    assert_eq!(r.status, 401);
    assert_eq!(
        r.header(allow),
        Some("http://app.example"),
        "a 401 the page can read"
    );
    let other = [
        from("http://evil.example"),
        "Authorization: Bearer k3y".into(),
    ];
    let r = request_with(server.addr, "POST", "/v1/completions", body, &refs(&other)).await;
    assert_eq!(r.header(allow), None);
    let p = preflight("http://evil.example");
    let r = request_with(server.addr, "OPTIONS", "/v1/completions", "", &refs(&p)).await;
    assert_eq!(r.header(allow), None);
    assert!(server.shutdown().await.is_clean());

    let any = Access {
        allowed_origins: vec!["*".into()],
        ..Access::default()
    };
    let server = start_with_access(config(4, 16, 16), any).await;
    let h = [from("http://anywhere.example")];
    let r = request_with(server.addr, "POST", "/v1/completions", body, &refs(&h)).await;
    assert_eq!((r.status, r.header(allow)), (200, Some("*")));
    assert!(server.shutdown().await.is_clean());
}
