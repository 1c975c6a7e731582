//! Errors, in two layers: `StartupError` stops `memgate serve` before it listens; `ApiError` is
//! what a request gets back. `ApiError` maps through one table (`ErrorKind::status_and_type`) to an
//! HTTP status and Anthropic's error type, so SDKs raise the same exception class they would for
//! Anthropic itself. Internal details go to the log, never into a client's answer.

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use std::net::SocketAddr;
use std::path::PathBuf;

/// Why `memgate` could not start. Each message names the key, file or address to fix.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error("cannot read config file {path}: {source}")]
    ConfigRead { path: PathBuf, source: std::io::Error },
    #[error("config file {path}: {message}")]
    ConfigParse { path: PathBuf, message: String },
    #[error("configuration key `{key}`: {message}")]
    ConfigInvalid { key: String, message: String },
    #[error(
        "cannot listen on {addr}: {source} (is another process using it? set MEMGATE_LISTEN or --listen)"
    )]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error("database {url}: {message}")]
    Store { url: String, message: String },
    #[error("embedding model: {0}")]
    Embedder(String),
    #[error("cannot build the upstream HTTP client: {0}")]
    UpstreamClient(String),
    #[error("server stopped with an I/O error: {0}")]
    Serve(#[from] std::io::Error),
}

/// The kinds of failure a request can meet; each has exactly one status and Anthropic type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    InvalidRequest,
    Authentication,
    Permission,
    NotFound,
    /// The write lost a race or names an id that exists (admin API).
    Conflict,
    /// The body parsed but its content is refused (admin API); `details` names every problem.
    Unprocessable,
    RequestTooLarge,
    /// The client did not send its request body in time.
    RequestTimeout,
    RateLimited,
    /// memgate itself failed; a bug or a broken dependency.
    Internal,
    /// The upstream could not be reached or broke the connection.
    UpstreamUnreachable,
    /// The upstream did not answer in time.
    UpstreamTimeout,
    Overloaded,
    /// A dependency memgate needs for this call (the database) is unreachable; retry later.
    Unavailable,
}

impl ErrorKind {
    /// The one table from error kind to HTTP status and Anthropic error type.
    pub fn status_and_type(self) -> (StatusCode, &'static str) {
        match self {
            ErrorKind::InvalidRequest => (StatusCode::BAD_REQUEST, "invalid_request_error"),
            ErrorKind::Authentication => (StatusCode::UNAUTHORIZED, "authentication_error"),
            ErrorKind::Permission => (StatusCode::FORBIDDEN, "permission_error"),
            ErrorKind::NotFound => (StatusCode::NOT_FOUND, "not_found_error"),
            ErrorKind::Conflict => (StatusCode::CONFLICT, "invalid_request_error"),
            ErrorKind::Unprocessable => (StatusCode::UNPROCESSABLE_ENTITY, "invalid_request_error"),
            ErrorKind::RequestTooLarge => (StatusCode::PAYLOAD_TOO_LARGE, "request_too_large"),
            ErrorKind::RequestTimeout => (StatusCode::REQUEST_TIMEOUT, "timeout_error"),
            ErrorKind::RateLimited => (StatusCode::TOO_MANY_REQUESTS, "rate_limit_error"),
            ErrorKind::Internal => (StatusCode::INTERNAL_SERVER_ERROR, "api_error"),
            ErrorKind::UpstreamUnreachable => (StatusCode::BAD_GATEWAY, "api_error"),
            ErrorKind::UpstreamTimeout => (StatusCode::GATEWAY_TIMEOUT, "timeout_error"),
            ErrorKind::Overloaded => {
                (StatusCode::from_u16(529).unwrap_or(StatusCode::SERVICE_UNAVAILABLE), "overloaded_error")
            }
            ErrorKind::Unavailable => (StatusCode::SERVICE_UNAVAILABLE, "api_error"),
        }
    }

    /// Whether an SDK should retry; sent as `x-should-retry`, which the official SDKs honour.
    fn should_retry(self) -> bool {
        matches!(
            self,
            ErrorKind::UpstreamUnreachable
                | ErrorKind::UpstreamTimeout
                | ErrorKind::Overloaded
                | ErrorKind::Unavailable
                | ErrorKind::RateLimited
        )
    }
}

/// An error answered to a client, in Anthropic's shape:
/// `{"type":"error","error":{"type":…,"message":…}}`.
#[derive(Debug, Clone)]
pub struct ApiError {
    kind: ErrorKind,
    message: String,
    retry_after_secs: Option<u64>,
    /// Extra fields of the `error` object, e.g. `problems` of a refused record.
    details: Option<serde_json::Map<String, serde_json::Value>>,
}

impl ApiError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        ApiError { kind, message: message.into(), retry_after_secs: None, details: None }
    }

    pub fn invalid_request(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidRequest, message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotFound, message)
    }

    /// An internal failure: the detail is logged, the client sees only a generic message.
    pub fn internal(detail: impl std::fmt::Display) -> Self {
        tracing::error!(error = %detail, "internal error");
        Self::new(ErrorKind::Internal, "memgate hit an internal error; see its log for details")
    }

    pub fn with_retry_after(mut self, secs: u64) -> Self {
        self.retry_after_secs = Some(secs);
        self
    }

    /// Adds a field to the `error` object (never `type` or `message`).
    pub fn with_detail(mut self, name: &str, value: serde_json::Value) -> Self {
        self.details.get_or_insert_with(serde_json::Map::new).insert(name.to_owned(), value);
        self
    }

    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    pub fn message(&self) -> &str {
        &self.message
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.kind.status_and_type().1, self.message)
    }
}

impl std::error::Error for ApiError {}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, error_type) = self.kind.status_and_type();
        let mut error = serde_json::Map::new();
        error.insert("type".into(), error_type.into());
        error.insert("message".into(), self.message.into());
        for (name, value) in self.details.into_iter().flatten() {
            error.entry(name).or_insert(value);
        }
        let body = serde_json::json!({"type": "error", "error": error});
        let mut response = (status, axum::Json(body)).into_response();
        let headers = response.headers_mut();
        if self.kind.should_retry() {
            headers.insert("x-should-retry", HeaderValue::from_static("true"));
        }
        if let Some(secs) = self.retry_after_secs {
            headers.insert("retry-after", HeaderValue::from(secs));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_a_status_that_matches_anthropics_table() {
        let expected = [
            (ErrorKind::InvalidRequest, 400, "invalid_request_error"),
            (ErrorKind::Authentication, 401, "authentication_error"),
            (ErrorKind::Permission, 403, "permission_error"),
            (ErrorKind::NotFound, 404, "not_found_error"),
            (ErrorKind::Conflict, 409, "invalid_request_error"),
            (ErrorKind::Unprocessable, 422, "invalid_request_error"),
            (ErrorKind::RequestTooLarge, 413, "request_too_large"),
            (ErrorKind::RequestTimeout, 408, "timeout_error"),
            (ErrorKind::RateLimited, 429, "rate_limit_error"),
            (ErrorKind::Internal, 500, "api_error"),
            (ErrorKind::UpstreamUnreachable, 502, "api_error"),
            (ErrorKind::UpstreamTimeout, 504, "timeout_error"),
            (ErrorKind::Overloaded, 529, "overloaded_error"),
            (ErrorKind::Unavailable, 503, "api_error"),
        ];
        for (kind, status, error_type) in expected {
            assert_eq!(kind.status_and_type(), (StatusCode::from_u16(status).unwrap(), error_type));
        }
    }

    #[test]
    fn internal_errors_never_reach_the_client() {
        let err = ApiError::internal("password=hunter2 at db.rs:10");
        assert!(!err.message().contains("hunter2"));
    }
}
