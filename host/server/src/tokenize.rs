//! `POST /tokenize` and `POST /detokenize`, as vLLM and llama.cpp's server
//! offer them: text (or a chat, through the model's template) to the ids
//! the model would see, and ids back to text.
//!
//! Both servers' field names are read (`prompt` or llama.cpp's `content`;
//! `add_special_tokens` or `add_special`), and the answers carry both
//! shapes: vLLM's `{"count", "max_model_len", "tokens"}` (llama.cpp's
//! clients read `tokens`), and `{"prompt"}` with llama.cpp's `content`
//! beside it.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};

use crate::error::ApiError;
use crate::handlers::read_object;
use crate::openai;
use crate::state::{AppState, Vocab};

/// The first of `keys` the body sets (vLLM's name, then llama.cpp's).
fn flag(map: &Map<String, Value>, keys: &[&str], default: bool) -> Result<bool, ApiError> {
    for key in keys {
        if let Some(b) = openai::boolean(map, key)? {
            return Ok(b);
        }
    }
    Ok(default)
}

/// The ids of `prompt` / `content` (special tokens parsed; BOS as the model
/// wants unless `add_special_tokens` is false), or of `messages` rendered
/// by the chat template (with the assistant's opening unless
/// `add_generation_prompt` is false).
pub(crate) async fn tokenize(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let result = async {
        let map = read_object(&state, &headers, body).await?;
        let ids = if map.get("messages").is_some_and(|m| !m.is_null()) {
            let openai::Prompt::Chat(messages) = openai::chat_messages(&map)? else {
                return Err(ApiError::invalid("messages", "`messages` is required"));
            };
            let Vocab::Model {
                chat: Some(template),
                ..
            } = &state.vocab
            else {
                return Err(ApiError {
                    code: Some("no_chat_template"),
                    ..ApiError::invalid(
                        "messages",
                        "this model has no chat template (serve it with --chat-template FILE)",
                    )
                });
            };
            // A history with calls, as chat renders it for a template
            // that knows no tools.
            let messages = match crate::tools::ToolFormat::of(template.source()) {
                crate::tools::ToolFormat::Generic => crate::tools::generic_history(messages),
                crate::tools::ToolFormat::Harmony => crate::tools::harmony_history(messages),
                crate::tools::ToolFormat::Glm => crate::tools::object_arguments(messages),
                _ => messages,
            };
            let opening = flag(&map, &["add_generation_prompt"], true)?;
            let text = template
                .render_with_kwargs(&messages, None, opening, openai::template_kwargs(&map)?)
                .map_err(|e| {
                    ApiError::invalid("messages", format!("the chat template failed: {e}"))
                })?;
            // The rendered template holds its own BOS.
            let add = flag(&map, &["add_special_tokens", "add_special"], false)?;
            state.vocab.encode(&text, add)
        } else {
            let key = ["prompt", "content"]
                .into_iter()
                .find(|k| map.get(*k).is_some_and(|v| !v.is_null()))
                .ok_or_else(|| {
                    ApiError::invalid("prompt", "`prompt` (or `content`) is required")
                })?;
            let Some(Value::String(text)) = map.get(key) else {
                return Err(ApiError::invalid(key, format!("`{key}` must be a string")));
            };
            let add = flag(&map, &["add_special_tokens", "add_special"], true)?;
            state.vocab.encode(text, add)
        };
        Ok(Json(json!({
            "count": ids.len(),
            "max_model_len": state.limits.max_context,
            "tokens": ids,
        })))
    }
    .await;
    result.map_or_else(IntoResponse::into_response, IntoResponse::into_response)
}

/// The text of `tokens` (ids the vocabulary holds).
pub(crate) async fn detokenize(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let result = async {
        let map = read_object(&state, &headers, body).await?;
        let bad = || ApiError::invalid("tokens", "`tokens` must be a list of token ids");
        let Some(Value::Array(items)) = map.get("tokens") else {
            return Err(bad());
        };
        let ids = items
            .iter()
            .map(|v| v.as_u64().and_then(|t| u32::try_from(t).ok()))
            .collect::<Option<Vec<u32>>>()
            .ok_or_else(bad)?;
        if let Some(size) = state.vocab.size() {
            if let Some(id) = ids.iter().find(|&&id| id >= size) {
                return Err(ApiError::invalid(
                    "tokens",
                    format!("token {id} is not below the vocabulary's {size}"),
                ));
            }
        }
        let text = state.vocab.decode(&ids);
        Ok(Json(json!({"prompt": text, "content": text})))
    }
    .await;
    result.map_or_else(IntoResponse::into_response, IntoResponse::into_response)
}
