//! The endpoints SGLang's own workers expose that `sglang-router` (SGLang's
//! Rust router, PyPI `sglang-router`) calls on a worker, so a fleet of
//! `pagoda serve` replicas can sit behind it unchanged.
//!
//! When a worker is added, the router (0.3.2) asks `GET /health`, then
//! `GET /server_info` and `GET /model_info` (older routers ask
//! `/get_server_info` and `/get_model_info`; both spellings answer), and
//! takes the worker's model id from `model_path`. It then forwards
//! `/v1/completions` and `/v1/chat/completions` bodies as they came (plus
//! SGLang's own fields, which the OpenAI parser ignores), and SGLang's
//! native `POST /generate`, answered here. `/get_load` serves the
//! `power_of_two` policy's load probe; `/health_generate` the deep health
//! check; `/flush_cache` empties the prefix cache of every page no running
//! request holds.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Map, Value};

use crate::error::ApiError;
use crate::generate::Generation;
use crate::handlers::{read_object, PAGE_SIZE};
use crate::openai::{self, Prompt};
use crate::state::AppState;

/// `max_new_tokens` when a `/generate` body gives none (SGLang's default).
const DEFAULT_MAX_NEW_TOKENS: u64 = 128;

/// SGLang's worker endpoints over `state`.
pub fn routes(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/model_info", get(model_info))
        .route("/get_model_info", get(model_info))
        .route("/server_info", get(server_info))
        .route("/get_server_info", get(server_info))
        .route("/get_load", get(load))
        .route("/health_generate", get(health_generate))
        .route("/generate", post(generate))
        .route("/flush_cache", get(flush_cache).post(flush_cache))
        .with_state(state)
}

async fn model_info(State(state): State<Arc<AppState>>) -> Json<Value> {
    Json(json!({
        "model_path": state.model_name,
        "tokenizer_path": state.model_name,
        "is_generation": true,
        "preferred_sampling_params": null,
        "weight_version": "default",
        "has_image_understanding": false,
        "has_audio_understanding": false,
    }))
}

async fn server_info(State(state): State<Arc<AppState>>) -> Json<Value> {
    let (running, waiting) = load_now(&state).await;
    Json(json!({
        "model_path": state.model_name,
        "served_model_name": state.model_name,
        "tokenizer_path": state.model_name,
        "tp_size": 1,
        "dp_size": 1,
        "page_size": PAGE_SIZE,
        "context_length": state.limits.max_context,
        "max_total_num_tokens": u64::from(state.limits.kv_pages) * u64::from(PAGE_SIZE),
        "version": concat!("pagoda-", env!("CARGO_PKG_VERSION")),
        "internal_states": [{"num_running_reqs": running, "num_waiting_reqs": waiting}],
    }))
}

async fn load(State(state): State<Arc<AppState>>) -> Json<Value> {
    let (running, waiting) = load_now(&state).await;
    Json(json!([{
        "dp_rank": 0,
        "num_reqs": running + waiting,
        "num_waiting_reqs": waiting,
        "num_tokens": 0,
    }]))
}

/// Running and waiting requests (zero once the engine has stopped).
async fn load_now(state: &Arc<AppState>) -> (u32, u32) {
    let client = state.client.clone();
    tokio::task::spawn_blocking(move || client.stats())
        .await
        .ok()
        .flatten()
        .map_or((0, 0), |s| (s.running, s.waiting))
}

/// `/flush_cache` (GET or POST, as SGLang's worker takes it; the router's
/// own `/flush_cache` calls it on every worker): evicts every cached page
/// no running request holds. 200 with the pages freed; 503 once the engine
/// has stopped.
async fn flush_cache(State(state): State<Arc<AppState>>) -> Response {
    let client = state.client.clone();
    match tokio::task::spawn_blocking(move || client.flush_cache())
        .await
        .ok()
        .flatten()
    {
        Some(pages) => (
            StatusCode::OK,
            format!("Cache flushed: {pages} pages freed.\n"),
        )
            .into_response(),
        None => (StatusCode::SERVICE_UNAVAILABLE, "the engine has stopped\n").into_response(),
    }
}

async fn health_generate(State(state): State<Arc<AppState>>) -> StatusCode {
    if state.is_draining() {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    }
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// `POST /generate`: SGLang's native body (`text` or `input_ids`,
/// `sampling_params`, `stream`) mapped onto the OpenAI parser's fields, so
/// both APIs validate alike; one prompt per call.
async fn generate(State(state): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    let result = async {
        let native = read_object(&state, &headers, body).await?;
        let map = openai_fields(&native)?;
        let params = openai::params(&map, false).map_err(native_param)?;
        let prompt = match openai::completion_prompt(&map).map_err(native_param)? {
            Prompt::Text(text) => state.vocab.encode(&text, true),
            Prompt::Tokens(ids) => ids,
            Prompt::Batch(_) => {
                return Err(ApiError::invalid(
                    "input_ids",
                    "`input_ids` must be one list of ids: one prompt per call",
                ))
            }
            Prompt::Chat(_) => Vec::new(),
        };
        let id = format!("pagoda-{}", NEXT_ID.fetch_add(1, Ordering::Relaxed));
        let started = Instant::now();
        let generation = Generation::start(state, vec![prompt], &params).await?;
        if params.stream {
            return Ok(stream(generation, id, started));
        }
        let mut generation = generation;
        let (text, reason) = generation.text().await?;
        Ok(Json(result_object(&generation, &id, text, reason, started)).into_response())
    }
    .await;
    result.unwrap_or_else(|e: ApiError| e.into_response())
}

/// An error naming an OpenAI field renamed to the native field it came from.
fn native_param(mut error: ApiError) -> ApiError {
    let native = match error.param.as_deref() {
        Some("prompt") => "text",
        Some("max_tokens") => "sampling_params.max_new_tokens",
        Some("min_tokens") => "sampling_params.min_new_tokens",
        Some(
            p @ ("temperature" | "top_p" | "top_k" | "stop" | "seed" | "n" | "min_p"
            | "presence_penalty" | "frequency_penalty" | "repetition_penalty"
            | "stop_token_ids" | "ignore_eos"),
        ) => {
            error.param = Some(format!("sampling_params.{p}"));
            return error;
        }
        _ => return error,
    };
    error.param = Some(native.to_string());
    error
}

/// The OpenAI completion fields a native `/generate` body stands for.
fn openai_fields(native: &Map<String, Value>) -> Result<Map<String, Value>, ApiError> {
    let mut map = Map::new();
    match (native.get("text"), native.get("input_ids")) {
        (Some(Value::String(text)), _) => {
            map.insert("prompt".into(), Value::String(text.clone()));
        }
        (_, Some(ids @ Value::Array(items))) if items.iter().all(Value::is_number) => {
            map.insert("prompt".into(), ids.clone());
        }
        _ => {
            return Err(ApiError::invalid(
                "text",
                "`text` (one string) or `input_ids` (one list of ids) is required",
            ))
        }
    }
    let sampling = match native.get("sampling_params") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(s)) => s.clone(),
        Some(_) => {
            return Err(ApiError::invalid(
                "sampling_params",
                "`sampling_params` must be an object",
            ))
        }
    };
    let max = sampling
        .get("max_new_tokens")
        .cloned()
        .unwrap_or_else(|| Value::from(DEFAULT_MAX_NEW_TOKENS));
    map.insert("max_tokens".into(), max);
    for key in [
        "temperature",
        "top_p",
        "top_k",
        "stop",
        "seed",
        "n",
        "ignore_eos",
        "min_p",
        "presence_penalty",
        "frequency_penalty",
        "repetition_penalty",
        "stop_token_ids",
    ] {
        if let Some(v) = sampling.get(key) {
            map.insert(key.into(), v.clone());
        }
    }
    if let Some(v) = sampling.get("min_new_tokens") {
        map.insert("min_tokens".into(), v.clone());
    }
    for key in ["stream", "priority"] {
        if let Some(v) = native.get(key) {
            map.insert(key.into(), v.clone());
        }
    }
    Ok(map)
}

/// SGLang's result object: the text and `meta_info`.
fn result_object(
    generation: &Generation,
    id: &str,
    text: String,
    reason: Option<&'static str>,
    started: Instant,
) -> Value {
    let completion = generation.completion_tokens();
    let finish = match reason {
        Some("length") => json!({"type": "length", "length": completion}),
        Some(other) => json!({"type": other}),
        None => Value::Null,
    };
    json!({
        "text": text,
        "meta_info": {
            "id": id,
            "finish_reason": finish,
            "prompt_tokens": generation.prompt_tokens,
            "completion_tokens": completion,
            "cached_tokens": generation.cached_tokens(),
            "e2e_latency": started.elapsed().as_secs_f64(),
        },
    })
}

/// SGLang's stream: each event carries the whole text so far, then
/// `data: [DONE]`. Dropping the body (the client left) cancels.
fn stream(generation: Generation, id: String, started: Instant) -> Response {
    let events = futures_util::stream::unfold(Some((generation, String::new())), move |phase| {
        let id = id.clone();
        async move {
            let (mut generation, mut text) = phase?;
            let bytes = match generation.next().await {
                Some(Ok(delta)) => {
                    text.push_str(&delta.text);
                    let value =
                        result_object(&generation, &id, text.clone(), delta.finish_reason, started);
                    Bytes::from(format!("data: {value}\n\n"))
                }
                Some(Err(error)) => {
                    let done = format!("data: {}\n\ndata: [DONE]\n\n", error.body());
                    return Some((Ok::<_, std::convert::Infallible>(Bytes::from(done)), None));
                }
                None => {
                    return Some((Ok(Bytes::from_static(b"data: [DONE]\n\n")), None));
                }
            };
            Some((Ok(bytes), Some((generation, text))))
        }
    });
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(events),
    )
        .into_response()
}
