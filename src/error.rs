//! Errors, in two layers: `StartupError` stops `memgate serve` before it listens; `ApiError` is
//! what a request gets back.
//!
//! Every answer carries a stable `error.code` (`Code`): the case in a word, for programs to
//! branch on while the message stays free to improve. The codes live in one table
//! (`error_codes!` below), grouped by their `ErrorKind`, which gives the HTTP status and
//! Anthropic's error type, so SDKs raise the same exception class they would for Anthropic itself.
//! A code added to the table is in `Code::ALL`, and a test holds `Code::ALL` equal to the list in
//! docs/admin-api.md, so no code goes unpublished.
//!
//! Domain errors become answers through one trait, `ErrorCode`: each says its code and what a
//! client may read; `From<E: ErrorCode> for ApiError` does the rest. Internal details go to the
//! log, never into a client's answer. Nothing here knows the web framework: the edge
//! (`http::error`) turns an `ApiError` into a response.

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

/// Writes `ErrorKind` and `Code` from one table. Each kind has a status, an Anthropic type and
/// whether SDKs should retry (`x-should-retry`); its codes follow, the first being the kind's
/// general code, which any answer without a code of its own carries.
macro_rules! error_codes {
    ($(
        $(#[doc = $kind_doc:literal])*
        $kind:ident => $status:literal, $anthropic:literal, retry = $retry:literal {
            $(#[doc = $general_doc:literal])*
            $general:ident = $general_wire:literal
            $(, $(#[doc = $code_doc:literal])* $code:ident = $wire:literal)* $(,)?
        }
    )+) => {
        /// The kinds of failure a request can meet; each has exactly one status and Anthropic type.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum ErrorKind {
            $($(#[doc = $kind_doc])* $kind,)+
        }

        impl ErrorKind {
            /// Every kind, in the table's order.
            pub const ALL: &'static [ErrorKind] = &[$(ErrorKind::$kind),+];

            /// The HTTP status and Anthropic error type of every answer of this kind.
            pub fn status_and_type(self) -> (u16, &'static str) {
                match self {
                    $(ErrorKind::$kind => ($status, $anthropic),)+
                }
            }

            /// Whether an SDK should retry; sent as `x-should-retry`, which the official SDKs honour.
            pub fn should_retry(self) -> bool {
                match self {
                    $(ErrorKind::$kind => $retry,)+
                }
            }

            /// The general code of a kind, for answers without a code of their own.
            pub fn general(self) -> Code {
                match self {
                    $(ErrorKind::$kind => Code::$general,)+
                }
            }
        }

        /// The stable `error.code` of an answer. A code, once published, keeps its name and meaning.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum Code {
            $(
                $(#[doc = $general_doc])* $general,
                $($(#[doc = $code_doc])* $code,)*
            )+
        }

        impl Code {
            /// Every code, in the table's order, which is the order docs/admin-api.md lists them.
            pub const ALL: &'static [Code] = &[$(Code::$general, $(Code::$code,)*)+];

            /// The code's name on the wire.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(
                        Code::$general => $general_wire,
                        $(Code::$code => $wire,)*
                    )+
                }
            }

            /// The kind, hence the status and Anthropic type, every answer with this code has.
            pub fn kind(self) -> ErrorKind {
                match self {
                    $(Code::$general $(| Code::$code)* => ErrorKind::$kind,)+
                }
            }
        }
    };
}

error_codes! {
    InvalidRequest => 400, "invalid_request_error", retry = false {
        InvalidRequest = "invalid_request",
        /// The body is not JSON, or not the JSON object the endpoint takes.
        InvalidJson = "invalid_json",
        /// A memgate header (`X-Memory-*`, `If-Match`) has a value it does not take.
        InvalidHeader = "invalid_header",
        /// `X-Memory-Version` (or `explain`'s `release`) names no release, or a retired one.
        UnknownRelease = "unknown_release",
        /// A `/v1/*` path with empty, `.` or `..` segments or encoded separators.
        AmbiguousPath = "ambiguous_path",
    }
    /// A known path with a method it does not take.
    MethodNotAllowed => 405, "invalid_request_error", retry = false {
        MethodNotAllowed = "method_not_allowed",
    }
    Authentication => 401, "authentication_error", retry = false {
        AuthenticationFailed = "authentication_failed",
        /// The admin API's bearer token is missing or wrong.
        AdminTokenInvalid = "admin_token_invalid",
        /// A console session that has ended (expired, idle, or logged out).
        SessionEnded = "no_session",
    }
    Permission => 403, "permission_error", retry = false {
        PermissionDenied = "permission_denied",
        /// A managed caller without the permission a `/v1/*` path needs (`batches`, `files`, …).
        PathNotAllowed = "path_not_allowed",
        /// A console request that is not from the console itself (the CSRF rule).
        CsrfRefused = "csrf_refused",
        /// The viewer role may only read.
        ReadOnlyRole = "read_only_role",
        /// The `Host` header names a host memgate does not answer for (`allowed_hosts`).
        HostNotAllowed = "host_not_allowed",
    }
    NotFound => 404, "not_found_error", retry = false {
        NotFound = "not_found",
        /// No such route.
        NoRoute = "no_route",
        /// The admin API is off (no admin token configured).
        AdminApiOff = "admin_api_off",
    }
    /// The write lost a race or names an id that exists (admin API).
    Conflict => 409, "invalid_request_error", retry = false {
        Conflict = "conflict",
        /// `If-Match` names an older revision than the record's.
        RevisionConflict = "revision_conflict",
        /// A create names an id the tenant already has.
        IdTaken = "id_taken",
        /// A create names a topic key the tenant already has.
        TopicTaken = "topic_taken",
        /// A replay of a trigger action that is still waiting to be delivered.
        ActionQueued = "action_queued",
        /// A review's reject names a record that is not awaiting review (`proposed`).
        NotProposed = "not_proposed",
        /// A status change found the record in a status it does not take: bulk activation takes
        /// only `proposed` and `dormant` records.
        StatusConflict = "status_conflict",
    }
    /// The body parsed but its content is refused (admin API); `details` names every problem.
    Unprocessable => 422, "invalid_request_error", retry = false {
        Unprocessable = "unprocessable",
        /// A record was refused; `error.problems` lists every problem with its JSON path.
        ValidationFailed = "validation_failed",
        /// An import has invalid lines; nothing was imported (`error.report`).
        ImportInvalid = "import_invalid",
    }
    RequestTooLarge => 413, "request_too_large", retry = false {
        RequestTooLarge = "request_too_large",
    }
    /// The client did not send its request body in time.
    RequestTimeout => 408, "timeout_error", retry = false {
        /// The client did not send its body in time.
        BodyTimeout = "body_timeout",
    }
    RateLimited => 429, "rate_limit_error", retry = true {
        RateLimited = "rate_limited",
        /// Too many failed authentications from one address.
        TooManyFailures = "too_many_failures",
    }
    /// memgate itself failed; a bug or a broken dependency.
    Internal => 500, "api_error", retry = false {
        Internal = "internal",
    }
    /// The upstream could not be reached or broke the connection.
    UpstreamUnreachable => 502, "api_error", retry = true {
        UpstreamUnreachable = "upstream_unreachable",
    }
    /// The upstream did not answer in time.
    UpstreamTimeout => 504, "timeout_error", retry = true {
        UpstreamTimeout = "upstream_timeout",
    }
    Overloaded => 529, "overloaded_error", retry = true {
        /// Too many request bodies in flight; the SDKs retry.
        Overloaded = "overloaded",
        /// Memory failed and the gateway is set to fail closed (`memory.fail_closed`).
        MemoryUnavailable = "memory_unavailable",
    }
    /// A dependency memgate needs for this call (the database) is unreachable; retry later.
    Unavailable => 503, "api_error", retry = true {
        /// The database is unreachable; nothing was changed.
        StoreUnavailable = "store_unavailable",
    }
}

/// A domain error a client can be answered with: its code, and what of it the client may read.
/// `ApiError::from` turns any of them into an answer; an `Internal` code's text goes to the log
/// only, whatever `public_message` says.
pub trait ErrorCode: std::fmt::Display {
    /// The code this error is answered with; its kind gives the status.
    fn error_code(&self) -> Code;

    /// The answer's message; by default the error's own text.
    fn public_message(&self) -> String {
        self.to_string()
    }

    /// Seconds after which a retry may succeed (`retry-after`).
    fn retry_after_secs(&self) -> Option<u64> {
        None
    }

    /// Fields the answer's `error` object carries besides `type`, `message` and `code`.
    fn details(&self) -> Option<serde_json::Map<String, serde_json::Value>> {
        None
    }
}

impl<E: ErrorCode> From<E> for ApiError {
    fn from(err: E) -> ApiError {
        let code = err.error_code();
        match code.kind() {
            ErrorKind::Internal => return ApiError::internal(err),
            ErrorKind::Unavailable => {
                tracing::warn!(error = %err, code = code.as_str(), "a dependency is unreachable")
            }
            _ => {}
        }
        ApiError {
            code,
            message: err.public_message(),
            retry_after_secs: err.retry_after_secs(),
            details: err.details(),
        }
    }
}

/// An error answered to a client, in Anthropic's shape:
/// `{"type":"error","error":{"type":…,"message":…,"code":…}}`.
#[derive(Debug, Clone)]
pub struct ApiError {
    code: Code,
    message: String,
    retry_after_secs: Option<u64>,
    /// Extra fields of the `error` object, e.g. `problems` of a refused record.
    details: Option<serde_json::Map<String, serde_json::Value>>,
}

impl ApiError {
    /// An error with its kind's general code.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self::coded(kind.general(), message)
    }

    /// An error with a code of its own (its kind follows from the code).
    pub fn coded(code: Code, message: impl Into<String>) -> Self {
        ApiError { code, message: message.into(), retry_after_secs: None, details: None }
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
        self.code.kind()
    }

    pub fn code(&self) -> Code {
        self.code
    }

    pub fn message(&self) -> &str {
        &self.message
    }

    pub fn retry_after_secs(&self) -> Option<u64> {
        self.retry_after_secs
    }

    /// The `error` object of the answer: `type`, `message`, `code`, then the details (which
    /// never replace those three).
    pub fn error_object(&self) -> serde_json::Map<String, serde_json::Value> {
        let mut error = serde_json::Map::new();
        error.insert("type".into(), self.kind().status_and_type().1.into());
        error.insert("message".into(), self.message.clone().into());
        error.insert("code".into(), self.code.as_str().into());
        for (name, value) in self.details.iter().flatten() {
            error.entry(name.clone()).or_insert_with(|| value.clone());
        }
        error
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.kind().status_and_type().1, self.message)
    }
}

impl std::error::Error for ApiError {}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_a_status_that_matches_anthropics_table() {
        let expected = [
            (ErrorKind::InvalidRequest, 400, "invalid_request_error"),
            (ErrorKind::MethodNotAllowed, 405, "invalid_request_error"),
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
        assert_eq!(expected.len(), ErrorKind::ALL.len(), "a kind without a pinned status");
        for (kind, status, error_type) in expected {
            assert_eq!(kind.status_and_type(), (status, error_type));
        }
    }

    #[test]
    fn sdks_retry_what_may_pass() {
        let retried: Vec<ErrorKind> = ErrorKind::ALL.iter().copied().filter(|k| k.should_retry()).collect();
        assert_eq!(
            retried,
            [
                ErrorKind::RateLimited,
                ErrorKind::UpstreamUnreachable,
                ErrorKind::UpstreamTimeout,
                ErrorKind::Overloaded,
                ErrorKind::Unavailable,
            ]
        );
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
            .map(|code| (code.as_str().to_owned(), code.kind().status_and_type().0))
            .collect();
        assert_eq!(documented, expected);
    }

    #[test]
    fn every_answer_carries_its_code() {
        let answer = ApiError::coded(Code::RevisionConflict, "stale");
        assert_eq!(answer.kind().status_and_type().0, 409);
        assert_eq!(answer.error_object()["code"], "revision_conflict");
        let general = ApiError::invalid_request("bad");
        assert_eq!(general.code(), Code::InvalidRequest);
        for &code in Code::ALL {
            assert_eq!(ApiError::coded(code, "x").kind(), code.kind());
        }
        for &kind in ErrorKind::ALL {
            assert_eq!(kind.general().kind(), kind, "{kind:?}'s general code is of another kind");
        }
    }

    #[test]
    fn internal_errors_never_reach_the_client() {
        let err = ApiError::internal("password=hunter2 at db.rs:10");
        assert!(!err.message().contains("hunter2"));

        #[derive(Debug, thiserror::Error)]
        #[error("password=hunter2 at db.rs:10")]
        struct Leaky;
        impl ErrorCode for Leaky {
            fn error_code(&self) -> Code {
                Code::Internal
            }
        }
        let err = ApiError::from(Leaky);
        assert_eq!(err.code(), Code::Internal);
        assert!(!err.message().contains("hunter2"));
    }

    #[test]
    fn details_never_replace_the_three_fields() {
        let err = ApiError::coded(Code::ValidationFailed, "refused")
            .with_detail("problems", serde_json::json!([]))
            .with_detail("message", serde_json::json!("spoof"));
        let error = err.error_object();
        assert_eq!(error["message"], "refused");
        assert_eq!(error["problems"], serde_json::json!([]));
    }
}
