//! The routes: completions, chat completions, models, tokenize and
//! detokenize, health and metrics, behind the API key where one is set.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::generate::Generation;
use crate::openai::{self, Params, Prompt};
use crate::reasoning::ThinkTags;
use crate::state::{AppState, Vocab};
use crate::stream;
use crate::tools::{self, CallReader, ToolFormat};

/// Tokens in a KV page (`vllm:cache_config_info`'s `block_size`).
pub(crate) const PAGE_SIZE: u32 = 16;

/// The server's routes over `state` (behind CORS when origins are allowed:
/// outermost, so a preflight is answered before the key is asked for).
pub fn router(state: Arc<AppState>) -> Router {
    // Origins that are not header values are refused before this (the CLI
    // checks them with `access::cors`).
    let cors = crate::access::cors(&state.access.allowed_origins)
        .ok()
        .flatten();
    let routes = Router::new()
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/responses", post(crate::responses::responses))
        .route("/v1/models", get(models))
        // An id may hold slashes (`--served-model-name org/model`).
        .route("/v1/models/{*id}", get(model))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .route("/debug/kv_blocks", get(crate::kv_events::debug_blocks))
        .route("/tokenize", post(crate::tokenize::tokenize))
        .route("/detokenize", post(crate::tokenize::detokenize))
        .with_state(Arc::clone(&state))
        .merge(crate::sglang::routes(Arc::clone(&state)))
        .layer(axum::middleware::from_fn_with_state(
            state,
            crate::access::check,
        ));
    match cors {
        Some(layer) => routes.layer(layer),
        None => routes,
    }
}

/// What every response of one request repeats.
pub struct Reply {
    /// Chat (`chat.completion`) or text (`text_completion`).
    pub chat: bool,
    id: String,
    created: u64,
    model: String,
}

impl Reply {
    /// The response object around `choices`.
    pub fn envelope(&self, chunk: bool, choices: Vec<Value>) -> Value {
        let object = match (self.chat, chunk) {
            (true, true) => "chat.completion.chunk",
            (true, false) => "chat.completion",
            (false, _) => "text_completion",
        };
        json!({"id": self.id, "object": object, "created": self.created, "model": self.model, "choices": choices})
    }
}

/// The `usage` object; `cached` prompt tokens came from the prefix cache.
pub fn usage(prompt: u32, completion: u32, cached: u32) -> Value {
    json!({
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": u64::from(prompt) + u64::from(completion),
        "prompt_tokens_details": {"cached_tokens": cached},
    })
}

/// The body (up to the limit) as a JSON object.
pub(crate) async fn read_object(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> Result<serde_json::Map<String, Value>, ApiError> {
    openai::parse_object(&read_body(state, headers, body).await?)
}

async fn read_body(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> Result<axum::body::Bytes, ApiError> {
    let limit = state.limits.max_body_bytes;
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            format!("the request body is over {limit} bytes"),
        )
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    axum::body::to_bytes(body, limit)
        .await
        .map_err(|_| too_large())
}

async fn completions(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let result = async {
        let map = read_object(&state, &headers, body).await?;
        let params = openai::params(&map, false)?;
        let prompts = match openai::completion_prompt(&map)? {
            Prompt::Batch(items) => {
                // Refused before any prompt is encoded.
                if items.len().saturating_mul(params.n as usize) > crate::generate::MAX_CHOICES {
                    return Err(crate::generate::too_many_choices(items.len(), params.n));
                }
                items.into_iter().map(|p| tokens(&state, p)).collect()
            }
            one => vec![tokens(&state, one)],
        };
        generate(state.clone(), prompts, params, false, None, None).await
    }
    .await;
    result.unwrap_or_else(IntoResponse::into_response)
}

/// A completion prompt's tokens: text encoded with the model's BOS, ids as
/// given.
fn tokens(state: &AppState, prompt: Prompt) -> Vec<u32> {
    match prompt {
        Prompt::Text(text) => state.vocab.encode(&text, true),
        Prompt::Tokens(ids) => ids,
        Prompt::Chat(_) | Prompt::Batch(_) => Vec::new(),
    }
}

async fn chat_completions(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let result = async {
        let map = read_object(&state, &headers, body).await?;
        let chat = chat_request(&state, &map)?;
        generate(
            state.clone(),
            vec![chat.prompt],
            chat.params,
            true,
            chat.tools,
            chat.think,
        )
        .await
    }
    .await;
    result.unwrap_or_else(IntoResponse::into_response)
}

/// A chat request made ready to run: its prompt (the template's rendering
/// of its messages and tools), its parameters (a call's grammar among them
/// where one is required), and the format to parse calls out of the answer
/// in when tools are offered.
pub(crate) struct ChatRequest {
    pub prompt: Vec<u32>,
    pub params: Params,
    pub tools: Option<CallReader>,
    /// Where the answer's reasoning is, for a template with think tags.
    pub think: Option<ThinkTags>,
}

/// Reads a chat completion's fields (`messages`, `tools` and the sampling
/// controls) and renders its prompt; the Responses API comes here too.
pub(crate) fn chat_request(
    state: &AppState,
    map: &serde_json::Map<String, Value>,
) -> Result<ChatRequest, ApiError> {
    let mut params = openai::params(map, true)?;
    let tools = tools::parse(map)?;
    let Prompt::Chat(messages) = openai::chat_messages(map)? else {
        return Err(ApiError::invalid("messages", "`messages` is required"));
    };
    let template = match &state.vocab {
        Vocab::Model { chat: Some(t), .. } => t,
        _ => {
            return Err(ApiError {
                code: Some("no_chat_template"),
                ..ApiError::invalid(
                    "messages",
                    "this model has no chat template: use /v1/completions, or serve it with --chat-template FILE",
                )
            })
        }
    };
    // Tools: handed to the template (or described in a system message for
    // one that knows none), a grammar where a call is required.
    let format = ToolFormat::of(template.source());
    let (messages, tool_list) = match &tools {
        Some(t) => t.prepare(format, messages),
        // No tools offered now, but maybe earlier calls in the history:
        // written as the format writes them.
        None => (format.history(messages), None),
    };
    let active = tools.as_ref().filter(|t| t.active());
    if let Some(t) = active {
        let model = tools::GrammarModel {
            control: &|text| state.vocab.control_id(text),
            template: template.source(),
        };
        if let Some(spec) = t.constraint(format, &model) {
            if params.output.is_some() {
                return Err(ApiError::invalid(
                    "tools",
                    "tools and a structured output cannot be asked together",
                ));
            }
            params.output = Some((spec, "tools"));
        }
    }
    let text = template
        .render_with_kwargs(
            &messages,
            tool_list.as_ref(),
            true,
            openai::template_kwargs(map)?,
        )
        .map_err(|e| ApiError::invalid("messages", format!("the chat template failed: {e}")))?;
    // A harmony answer is parsed for its channels whether or not tools
    // are offered, from its text with the special tokens written out.
    let harmony = format == ToolFormat::Harmony;
    // Mistral's `[TOOL_CALLS]` and `[ARGS]`, Cohere's blocks' markers and
    // Kimi's call tokens are control tokens: written out where calls are
    // read.
    let marked = matches!(
        format,
        ToolFormat::Mistral
            | ToolFormat::Cohere
            | ToolFormat::Kimi
            | ToolFormat::Glm
            | ToolFormat::DeepSeek
            | ToolFormat::MiniMax
            | ToolFormat::Nemotron
    );
    // SGLang's `separate_reasoning` (default true): false leaves the
    // reasoning in the content, as the model wrote it.
    let separate = openai::boolean(map, "separate_reasoning")?.unwrap_or(true);
    let think = ThinkTags::of(template.source(), &text).filter(|_| !harmony && separate);
    // So are Magistral's `[THINK]` tags, written out to be split off.
    let special_think = think.is_some_and(|t| t.tags.special);
    params.special_tokens = harmony || (marked && active.is_some()) || special_think;
    Ok(ChatRequest {
        think,
        prompt: state.vocab.encode(&text, false),
        params,
        tools: if harmony {
            Some(CallReader::new(format, tools.as_ref()))
        } else {
            active.map(|t| CallReader::new(format, Some(t)))
        },
    })
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Runs a request (`n` choices for each of `prompts`); with `tools`, each
/// choice's text is parsed for tool calls in that format.
async fn generate(
    state: Arc<AppState>,
    prompts: Vec<Vec<u32>>,
    params: Params,
    chat: bool,
    tools: Option<CallReader>,
    think: Option<ThinkTags>,
) -> Result<Response, ApiError> {
    let reply = Reply {
        chat,
        id: format!(
            "{}-{}",
            if chat { "chatcmpl" } else { "cmpl" },
            NEXT_ID.fetch_add(1, Ordering::Relaxed)
        ),
        created: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        model: params
            .model
            .clone()
            .unwrap_or_else(|| state.model_name.clone()),
    };
    // An echoed prompt comes before the answer: no reasoning to split.
    let think = think.filter(|_| !params.echo);
    let mut generation = Generation::start(state, prompts, &params).await?;
    let n = generation.choice_count();
    if params.stream {
        return Ok(stream::response(
            generation,
            reply,
            params.include_usage,
            params.logprobs.is_some(),
            params.echo,
            tools,
            think,
        ));
    }
    let mut texts = vec![String::new(); n];
    let mut reasons = vec![None; n];
    let mut logprobs = vec![Vec::new(); n];
    let mut prompt_scores = vec![Vec::new(); n];
    while let Some(delta) = generation.next().await {
        let delta = delta?;
        let i = delta.index as usize;
        if let (Some(text), Some(reason), Some(lp), Some(scores)) = (
            texts.get_mut(i),
            reasons.get_mut(i),
            logprobs.get_mut(i),
            prompt_scores.get_mut(i),
        ) {
            text.push_str(&delta.text);
            *reason = delta.finish_reason.or(*reason);
            lp.extend(delta.logprobs);
            if let Some(s) = delta.prompt_logprobs {
                *scores = s;
            }
        }
    }
    let vocab = generation.vocab();
    // `echo`: its prompt before each choice's text (and the prompt's
    // scores before the choice's log probabilities).
    let choices = texts
        .into_iter()
        .zip(reasons)
        .zip(logprobs.into_iter().zip(prompt_scores))
        .enumerate()
        .map(|(index, ((text, reason), (entries, scores)))| {
            let prompt = generation.prompt_of(index as u32);
            let text = if params.echo {
                format!("{}{text}", crate::logprobs::prompt_text(vocab, prompt))
            } else {
                text
            };
            let lp = match params.logprobs {
                None => Value::Null,
                Some(_) if chat => crate::logprobs::chat(vocab, &entries),
                Some(_) => {
                    let mut rows = if params.echo {
                        crate::logprobs::prompt_rows(prompt, &scores)
                    } else {
                        Vec::new()
                    };
                    rows.extend(entries.iter().map(|(id, lp)| (*id, Some(lp))));
                    crate::logprobs::completion_rows(vocab, &rows, &mut 0)
                }
            };
            let (reasoning, answer) = match think {
                Some(tags) => tags.split(&text),
                None => (None, text),
            };
            if let Some(reader) = &tools {
                let (content, calls) = reader.parse(&answer);
                let mut message = json!({"role": "assistant", "content": content});
                if let Some(r) = reasoning.or_else(|| tools::reasoning_of(reader.format, &answer)) {
                    message["reasoning_content"] = json!(r);
                }
                let reason = if calls.is_empty() {
                    reason
                } else {
                    message["tool_calls"] = tools::calls_json(&calls, false);
                    Some("tool_calls")
                };
                json!({"index": index, "message": message, "logprobs": lp, "finish_reason": reason})
            } else if chat {
                let mut message = json!({"role": "assistant", "content": answer});
                if let Some(r) = reasoning {
                    message["reasoning_content"] = json!(r);
                }
                json!({"index": index, "message": message, "logprobs": lp, "finish_reason": reason})
            } else {
                json!({"index": index, "text": answer, "logprobs": lp, "finish_reason": reason})
            }
        })
        .collect();
    let mut value = reply.envelope(false, choices);
    value["usage"] = usage(
        generation.prompt_tokens,
        generation.completion_tokens(),
        generation.cached_tokens(),
    );
    Ok(Json(value).into_response())
}

/// The served model as `/v1/models` lists it.
fn model_object(state: &AppState) -> Value {
    json!({
        "id": state.model_name,
        "object": "model",
        "created": state.created,
        "owned_by": "pagoda",
        "max_model_len": state.limits.max_context,
    })
}

async fn models(State(state): State<Arc<AppState>>) -> Json<Value> {
    Json(json!({"object": "list", "data": [model_object(&state)]}))
}

/// `GET /v1/models/{id}` (the OpenAI client's `models.retrieve`): the
/// served model, or a 404 for any other name.
async fn model(
    State(state): State<Arc<AppState>>,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> Response {
    if id == state.model_name {
        return Json(model_object(&state)).into_response();
    }
    ApiError {
        param: Some("model".into()),
        ..ApiError::new(
            StatusCode::NOT_FOUND,
            "model_not_found",
            format!(
                "the model {id:?} is not served here; this server serves {:?}",
                state.model_name
            ),
        )
    }
    .into_response()
}

async fn health(State(state): State<Arc<AppState>>) -> StatusCode {
    if state.is_draining() {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    }
}

async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    let client = state.client.clone();
    let stats = tokio::task::spawn_blocking(move || client.stats())
        .await
        .ok()
        .flatten();
    let text = state.metrics.render(
        &state.model_name,
        stats.as_ref(),
        PAGE_SIZE,
        state.limits.kv_pages,
    );
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}
