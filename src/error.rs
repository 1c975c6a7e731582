//! Errors, in two layers: `StartupError` stops `memgate serve` before it listens; `ApiError` is
//! what a request gets back. `ApiError` maps through one table (`ErrorKind::status_and_type`) to an
//! HTTP status and Anthropic's error type, so SDKs raise the same exception class they would for
//! Anthropic itself. Internal details go to the log, never into a client's answer.
//!
//! Every answer also carries a stable `error.code` (`Code`): the case in a word, for programs to
//! branch on while the message stays free to improve. docs/admin-api.md lists them; a test keeps
//! that list and `Code::ALL` equal.

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

/// The stable `error.code` of an answer. The general codes (one per `ErrorKind`) cover any case
/// without a code of its own; a code, once published, keeps its name and meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    InvalidRequest,
    /// The body is not JSON, or not the JSON object the endpoint takes.
    InvalidJson,
    /// A memgate header (`X-Memory-*`, `If-Match`) has a value it does not take.
    InvalidHeader,
    /// `X-Memory-Version` (or `explain`'s `release`) names no release, or a retired one.
    UnknownRelease,
    /// A `/v1/*` path with empty, `.` or `..` segments or encoded separators.
    AmbiguousPath,
    /// A method the route does not take (status 405).
    MethodNotAllowed,
    AuthenticationFailed,
    /// The admin API's bearer token is missing or wrong.
    AdminTokenInvalid,
    /// A console session that has ended (expired, idle, or logged out).
    SessionEnded,
    PermissionDenied,
    /// A console request that is not from the console itself (the CSRF rule).
    CsrfRefused,
    /// The viewer role may only read.
    ReadOnlyRole,
    /// The `Host` header names a host memgate does not answer for (`allowed_hosts`).
    HostNotAllowed,
    /// A managed caller without the permission a `/v1/*` path needs (`batches`, `files`, …).
    PathNotAllowed,
    NotFound,
    /// No such route.
    NoRoute,
    /// The admin API is off (no admin token configured).
    AdminApiOff,
    Conflict,
    /// `If-Match` names an older revision than the record's.
    RevisionConflict,
    /// A create names an id the tenant already has.
    IdTaken,
    /// A create names a topic key the tenant already has.
    TopicTaken,
    /// A replay of a trigger action that is still waiting to be delivered.
    ActionQueued,
    Unprocessable,
    /// A record was refused; `error.problems` lists every problem with its JSON path.
    ValidationFailed,
    /// An import has invalid lines; nothing was imported (`error.report`).
    ImportInvalid,
    RequestTooLarge,
    /// The client did not send its body in time.
    BodyTimeout,
    RateLimited,
    /// Too many failed authentications from one address.
    TooManyFailures,
    Internal,
    UpstreamUnreachable,
    UpstreamTimeout,
    /// Too many request bodies in flight; the SDKs retry.
    Overloaded,
    /// Memory failed and the gateway is set to fail closed (`memory.fail_closed`).
    MemoryUnavailable,
    /// The database is unreachable; nothing was changed.
    StoreUnavailable,
}

impl Code {
    /// Every code, in the order docs/admin-api.md lists them.
    pub const ALL: [Code; 35] = [
        Code::InvalidRequest,
        Code::InvalidJson,
        Code::InvalidHeader,
        Code::UnknownRelease,
        Code::AmbiguousPath,
        Code::MethodNotAllowed,
        Code::AuthenticationFailed,
        Code::AdminTokenInvalid,
        Code::SessionEnded,
        Code::PermissionDenied,
        Code::PathNotAllowed,
        Code::CsrfRefused,
        Code::ReadOnlyRole,
        Code::HostNotAllowed,
        Code::NotFound,
        Code::NoRoute,
        Code::AdminApiOff,
        Code::Conflict,
        Code::RevisionConflict,
        Code::IdTaken,
        Code::TopicTaken,
        Code::ActionQueued,
        Code::Unprocessable,
        Code::ValidationFailed,
        Code::ImportInvalid,
        Code::RequestTooLarge,
        Code::BodyTimeout,
        Code::RateLimited,
        Code::TooManyFailures,
        Code::Internal,
        Code::UpstreamUnreachable,
        Code::UpstreamTimeout,
        Code::Overloaded,
        Code::MemoryUnavailable,
        Code::StoreUnavailable,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Code::InvalidRequest => "invalid_request",
            Code::InvalidJson => "invalid_json",
            Code::InvalidHeader => "invalid_header",
            Code::UnknownRelease => "unknown_release",
            Code::AmbiguousPath => "ambiguous_path",
            Code::MethodNotAllowed => "method_not_allowed",
            Code::AuthenticationFailed => "authentication_failed",
            Code::AdminTokenInvalid => "admin_token_invalid",
            Code::SessionEnded => "no_session",
            Code::CsrfRefused => "csrf_refused",
            Code::ReadOnlyRole => "read_only_role",
            Code::HostNotAllowed => "host_not_allowed",
            Code::ActionQueued => "action_queued",
            Code::PermissionDenied => "permission_denied",
            Code::PathNotAllowed => "path_not_allowed",
            Code::NotFound => "not_found",
            Code::NoRoute => "no_route",
            Code::AdminApiOff => "admin_api_off",
            Code::Conflict => "conflict",
            Code::RevisionConflict => "revision_conflict",
            Code::IdTaken => "id_taken",
            Code::TopicTaken => "topic_taken",
            Code::Unprocessable => "unprocessable",
            Code::ValidationFailed => "validation_failed",
            Code::ImportInvalid => "import_invalid",
            Code::RequestTooLarge => "request_too_large",
            Code::BodyTimeout => "body_timeout",
            Code::RateLimited => "rate_limited",
            Code::TooManyFailures => "too_many_failures",
            Code::Internal => "internal",
            Code::UpstreamUnreachable => "upstream_unreachable",
            Code::UpstreamTimeout => "upstream_timeout",
            Code::Overloaded => "overloaded",
            Code::MemoryUnavailable => "memory_unavailable",
            Code::StoreUnavailable => "store_unavailable",
        }
    }

    /// The kind, hence the status and Anthropic type, every answer with this code has.
    pub fn kind(self) -> ErrorKind {
        match self {
            Code::InvalidRequest
            | Code::InvalidJson
            | Code::InvalidHeader
            | Code::UnknownRelease
            | Code::AmbiguousPath
            | Code::MethodNotAllowed => ErrorKind::InvalidRequest,
            Code::AuthenticationFailed | Code::AdminTokenInvalid | Code::SessionEnded => {
                ErrorKind::Authentication
            }
            Code::PermissionDenied
            | Code::PathNotAllowed
            | Code::CsrfRefused
            | Code::ReadOnlyRole
            | Code::HostNotAllowed => ErrorKind::Permission,
            Code::NotFound | Code::NoRoute | Code::AdminApiOff => ErrorKind::NotFound,
            Code::Conflict
            | Code::RevisionConflict
            | Code::IdTaken
            | Code::TopicTaken
            | Code::ActionQueued => ErrorKind::Conflict,
            Code::Unprocessable | Code::ValidationFailed | Code::ImportInvalid => ErrorKind::Unprocessable,
            Code::RequestTooLarge => ErrorKind::RequestTooLarge,
            Code::BodyTimeout => ErrorKind::RequestTimeout,
            Code::RateLimited | Code::TooManyFailures => ErrorKind::RateLimited,
            Code::Internal => ErrorKind::Internal,
            Code::UpstreamUnreachable => ErrorKind::UpstreamUnreachable,
            Code::UpstreamTimeout => ErrorKind::UpstreamTimeout,
            Code::Overloaded | Code::MemoryUnavailable => ErrorKind::Overloaded,
            Code::StoreUnavailable => ErrorKind::Unavailable,
        }
    }

    /// The general code of a kind, for answers without a code of their own.
    fn general(kind: ErrorKind) -> Code {
        match kind {
            ErrorKind::InvalidRequest => Code::InvalidRequest,
            ErrorKind::Authentication => Code::AuthenticationFailed,
            ErrorKind::Permission => Code::PermissionDenied,
            ErrorKind::NotFound => Code::NotFound,
            ErrorKind::Conflict => Code::Conflict,
            ErrorKind::Unprocessable => Code::Unprocessable,
            ErrorKind::RequestTooLarge => Code::RequestTooLarge,
            ErrorKind::RequestTimeout => Code::BodyTimeout,
            ErrorKind::RateLimited => Code::RateLimited,
            ErrorKind::Internal => Code::Internal,
            ErrorKind::UpstreamUnreachable => Code::UpstreamUnreachable,
            ErrorKind::UpstreamTimeout => Code::UpstreamTimeout,
            ErrorKind::Overloaded => Code::Overloaded,
            ErrorKind::Unavailable => Code::StoreUnavailable,
        }
    }
}

/// An error answered to a client, in Anthropic's shape:
/// `{"type":"error","error":{"type":…,"message":…,"code":…}}`.
#[derive(Debug, Clone)]
pub struct ApiError {
    kind: ErrorKind,
    code: Code,
    message: String,
    retry_after_secs: Option<u64>,
    /// Extra fields of the `error` object, e.g. `problems` of a refused record.
    details: Option<serde_json::Map<String, serde_json::Value>>,
}

impl ApiError {
    /// An error with its kind's general code.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        ApiError {
            kind,
            code: Code::general(kind),
            message: message.into(),
            retry_after_secs: None,
            details: None,
        }
    }

    /// An error with a code of its own (its kind follows from the code).
    pub fn coded(code: Code, message: impl Into<String>) -> Self {
        ApiError { code, ..Self::new(code.kind(), message) }
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

    pub fn code(&self) -> Code {
        self.code
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
        error.insert("code".into(), self.code.as_str().into());
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

    /// docs/admin-api.md's table of codes lists exactly `Code::ALL`, each with its status.
    #[test]
    fn the_documented_codes_are_the_codes() {
        let doc = include_str!("../docs/admin-api.md");
        let table = doc.split("## Error codes").nth(1).expect("docs/admin-api.md has `## Error codes`");
        let documented: Vec<(String, u16)> = table
            .lines()
            .filter_map(|line| {
                let cells: Vec<&str> = line.split('|').map(str::trim).collect();
                let code = cells.get(1)?.strip_prefix('`')?.strip_suffix('`')?;
                Some((code.to_owned(), cells.get(2)?.parse().ok()?))
            })
            .collect();
        let expected: Vec<(String, u16)> = Code::ALL
            .iter()
            .map(|code| {
                let status = match code {
                    Code::MethodNotAllowed => 405,
                    _ => code.kind().status_and_type().0.as_u16(),
                };
                (code.as_str().to_owned(), status)
            })
            .collect();
        assert_eq!(documented, expected);
    }

    #[test]
    fn every_answer_carries_its_code() {
        let answer = ApiError::coded(Code::RevisionConflict, "stale").into_response();
        assert_eq!(answer.status(), StatusCode::CONFLICT);
        let general = ApiError::invalid_request("bad");
        assert_eq!(general.code(), Code::InvalidRequest);
        for code in Code::ALL {
            assert_eq!(ApiError::coded(code, "x").kind(), code.kind());
        }
    }

    #[test]
    fn internal_errors_never_reach_the_client() {
        let err = ApiError::internal("password=hunter2 at db.rs:10");
        assert!(!err.message().contains("hunter2"));
    }
}
