//! OpenAI's Responses API (`POST /v1/responses`), as the OpenAI Agents SDK
//! speaks it, without storage: the request's `input` items and
//! `instructions` become chat messages, its function tools and `text.format`
//! the chat fields they stand for, and the chat path renders, constrains and
//! runs it; the answer comes back as output items (a message of
//! `output_text`, and `function_call`s), or streamed as the API's typed
//! events (`response.created` … `response.completed`).
//!
//! Nothing is kept after the answer (`store` is always false), so
//! `previous_response_id` and item references are refused: the client sends
//! the whole conversation, as it does for chat completions.

mod output;
mod request;
mod stream;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;

use crate::error::ApiError;
use crate::generate::Generation;
use crate::handlers::{chat_request, read_object};
use crate::state::AppState;
use output::{output_items, status, Shell};

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// `POST /v1/responses`.
pub(crate) async fn responses(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let result: Result<Response, ApiError> = async {
        let request = read_object(&state, &headers, body).await?;
        let map = request::chat_fields(&request)?;
        let chat = chat_request(&state, &map).map_err(request_param)?;
        let n = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let shell = Shell::new(&request, &state.model_name, n);
        let mut generation = Generation::start(state.clone(), vec![chat.prompt], &chat.params)
            .await
            .map_err(request_param)?;
        if chat.params.stream {
            return Ok(stream::response(generation, shell, chat.tools, chat.think));
        }
        let (text, reason, logprobs) = generation.text_and_logprobs().await?;
        let logprobs = crate::logprobs::entries_of(generation.vocab(), &logprobs);
        let output = output_items(
            &shell,
            chat.tools.as_ref(),
            chat.think,
            &text,
            &logprobs,
            reason,
        );
        Ok(Json(shell.object(status(reason), output, Some(&generation))).into_response())
    }
    .await;
    result.unwrap_or_else(IntoResponse::into_response)
}

/// An error naming a chat field renamed to the Responses field it came from.
fn request_param(mut error: ApiError) -> ApiError {
    let renamed = match error.param.as_deref() {
        Some("messages") => "input",
        Some("max_tokens") => "max_output_tokens",
        Some("response_format") => "text.format",
        _ => return error,
    };
    error.param = Some(renamed.to_string());
    error
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chat_errors_name_the_responses_field() {
        let renamed = |p: &str| request_param(ApiError::invalid(p, "x")).param;
        assert_eq!(renamed("messages").as_deref(), Some("input"));
        assert_eq!(renamed("max_tokens").as_deref(), Some("max_output_tokens"));
        assert_eq!(renamed("response_format").as_deref(), Some("text.format"));
        assert_eq!(renamed("temperature").as_deref(), Some("temperature"));
    }
}
