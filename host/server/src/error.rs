//! Errors in OpenAI's shape: `{"error": {"message", "type", "param", "code"}}`
//! with the HTTP status a client of the OpenAI API expects.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// An error a request gets back.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{status}: {message}")]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// What went wrong, for people.
    pub message: String,
    /// The request field at fault, when one is.
    pub param: Option<String>,
    /// A short machine-readable code.
    pub code: Option<&'static str>,
    /// Seconds to wait before retrying (429, 503).
    pub retry_after: Option<u32>,
}

impl ApiError {
    /// A 400 naming the field at fault.
    pub fn invalid(param: &str, message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            param: Some(param.to_string()),
            code: Some("invalid_value"),
            retry_after: None,
        }
    }

    /// An error with `status` and no field.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            param: None,
            code: Some(code),
            retry_after: None,
        }
    }

    /// The OpenAI `type` for this status.
    fn kind(&self) -> &'static str {
        match self.status {
            StatusCode::BAD_REQUEST | StatusCode::PAYLOAD_TOO_LARGE | StatusCode::UNAUTHORIZED => {
                "invalid_request_error"
            }
            StatusCode::NOT_FOUND => "not_found_error",
            StatusCode::TOO_MANY_REQUESTS => "rate_limit_error",
            StatusCode::SERVICE_UNAVAILABLE => "service_unavailable",
            _ => "server_error",
        }
    }

    /// The JSON body.
    pub fn body(&self) -> serde_json::Value {
        json!({"error": {
            "message": self.message,
            "type": self.kind(),
            "param": self.param,
            "code": self.code,
        }})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, axum::Json(self.body())).into_response();
        if let Some(secs) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}
