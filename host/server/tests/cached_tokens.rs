//! `usage.prompt_tokens_details.cached_tokens` as OpenAI defines it: the
//! prompt tokens served from the prefix cache. With the byte tokenizer (one
//! token per byte) the expected count follows from the prompt alone: a first
//! prompt finds nothing; the same prompt again finds its whole 16-token
//! pages, short of the last token (which is computed to sample from).

mod support;

use serde_json::json;
use support::{config, post, start};

const LIMIT: usize = 1 << 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_prompt_reports_its_cached_pages() {
    let server = start(config(8, 64, 64), LIMIT).await;
    // 51 bytes: 3 whole pages before the last token.
    let prompt = "The same fifty-byte prompt, sent twice in a row....";
    assert_eq!(prompt.len(), 51);
    let want = (prompt.len() - 1) / 16 * 16;
    let body = json!({"prompt": prompt, "max_tokens": 3, "temperature": 0});
    let mut got = Vec::new();
    for _ in 0..2 {
        let r = post(server.addr, "/v1/completions", &body.to_string()).await;
        assert_eq!(r.status, 200, "{}", r.body);
        got.push(r.json()["usage"]["prompt_tokens_details"]["cached_tokens"].clone());
    }
    assert_eq!(got, [json!(0), json!(want)]);

    // Streamed with a usage chunk: the same count.
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    streamed["stream_options"] = json!({"include_usage": true});
    let s = post(server.addr, "/v1/completions", &streamed.to_string()).await;
    assert_eq!(s.status, 200);
    let usage = s
        .body
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<serde_json::Value>(d).ok())
        .find(|v| v.get("usage").is_some_and(|u| !u.is_null()))
        .expect("a usage chunk");
    assert_eq!(
        usage["usage"]["prompt_tokens_details"]["cached_tokens"],
        want
    );

    // SGLang's /flush_cache empties the cache: the prompt is computed again.
    let flushed = post(server.addr, "/flush_cache", "").await;
    assert_eq!(flushed.status, 200, "{}", flushed.body);
    assert!(!flushed.body.contains(" 0 pages"), "{}", flushed.body);
    let again = post(server.addr, "/v1/completions", &body.to_string()).await;
    assert_eq!(
        again.json()["usage"]["prompt_tokens_details"]["cached_tokens"],
        0
    );
    assert!(server.shutdown().await.is_clean());
}
