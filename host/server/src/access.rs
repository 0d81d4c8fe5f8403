//! Access control: with an API key set, every route but `/health` and
//! `/metrics` (those too when asked) needs `Authorization: Bearer KEY`, and
//! answers 401 in OpenAI's error shape otherwise, as vLLM's and llama.cpp's
//! `--api-key` do. Browsers may call from the origins allowed (CORS, off
//! unless asked: a server on loopback that any page could drive would be
//! any page's).
//!
//! The key is compared in constant time (`subtle`), so the time a refusal
//! takes says nothing about how much of a guess was right.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;
use tower_http::cors::{AllowHeaders, AllowOrigin, CorsLayer};

use crate::error::ApiError;
use crate::state::AppState;

/// Who may call the server.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Access {
    /// The key requests must bear; `None`: every request is let in.
    pub api_key: Option<String>,
    /// Also require the key on `/health` and `/metrics`.
    pub protect_all: bool,
    /// Origins a browser page may call from (`*`: any); empty: no CORS
    /// headers, so browsers keep other origins' pages out.
    pub allowed_origins: Vec<String>,
}

impl Access {
    /// Whether a request for `path` with `authorization` (the header's
    /// value, if any) is let in.
    pub fn allows(&self, path: &str, authorization: Option<&[u8]>) -> bool {
        let Some(key) = &self.api_key else {
            return true;
        };
        if !self.protect_all && matches!(path, "/health" | "/metrics") {
            return true;
        }
        let Some(value) = authorization else {
            return false;
        };
        // "Bearer" is case-insensitive (RFC 6750 follows RFC 7235's
        // schemes); the key is not.
        let Some((scheme, token)) = value.split_at_checked(7) else {
            return false;
        };
        scheme.eq_ignore_ascii_case(b"bearer ") && bool::from(token.ct_eq(key.as_bytes()))
    }
}

/// The CORS layer for `origins` (`None` when none is allowed): preflights
/// answered before the key is asked for (a browser sends none with them),
/// every response marked for the allowed origins, the headers a preflight
/// asks for allowed, `Retry-After` readable, a preflight cached for an hour.
pub fn cors(origins: &[String]) -> Result<Option<CorsLayer>, String> {
    if origins.is_empty() {
        return Ok(None);
    }
    let allow = if origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else {
        let values = origins
            .iter()
            .map(|o| {
                HeaderValue::from_str(o.trim_end_matches('/'))
                    .map_err(|_| format!("the origin {o:?} is not a header value"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        AllowOrigin::list(values)
    };
    Ok(Some(
        CorsLayer::new()
            .allow_origin(allow)
            .allow_methods([Method::GET, Method::POST])
            // Whatever the page's client sends (the OpenAI SDKs add their
            // own `x-stainless-*` headers to every request).
            .allow_headers(AllowHeaders::mirror_request())
            .expose_headers([header::RETRY_AFTER])
            .max_age(Duration::from_secs(3600)),
    ))
}

/// The middleware: lets allowed requests through, answers 401 otherwise.
pub(crate) async fn check(
    State(state): State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Response {
    let authorization = request
        .headers()
        .get(header::AUTHORIZATION)
        .map(|v| v.as_bytes());
    if state.access.allows(request.uri().path(), authorization) {
        return next.run(request).await;
    }
    let mut response = ApiError::new(
        StatusCode::UNAUTHORIZED,
        "invalid_api_key",
        "a missing or incorrect API key: send it as `Authorization: Bearer KEY`",
    )
    .into_response();
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        header::HeaderValue::from_static("Bearer"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_bearer_of_the_key_gets_in() {
        let open = Access::default();
        assert!(open.allows("/v1/completions", None));
        let keyed = Access {
            api_key: Some("s3cret".into()),
            ..Access::default()
        };
        assert!(keyed.allows("/v1/completions", Some(b"Bearer s3cret")));
        assert!(keyed.allows("/v1/models", Some(b"bearer s3cret")));
        for bad in [
            None,
            Some(&b"Bearer s3cre"[..]),
            Some(b"Bearer s3cret "),
            Some(b"Basic s3cret"),
            Some(b"s3cret"),
            Some(b"Bearer"),
            Some(b""),
        ] {
            assert!(!keyed.allows("/v1/completions", bad), "{bad:?}");
            assert!(!keyed.allows("/generate", bad), "{bad:?}");
            assert!(!keyed.allows("/tokenize", bad), "{bad:?}");
        }
        assert!(keyed.allows("/health", None) && keyed.allows("/metrics", None));
        let all = Access {
            protect_all: true,
            ..keyed
        };
        assert!(!all.allows("/health", None) && !all.allows("/metrics", None));
        assert!(all.allows("/metrics", Some(b"Bearer s3cret")));
    }
}
