//! The proxy: what SDKs call. `/v1/messages` and `/v1/messages/count_tokens` are read whole and
//! checked (they are where memory will be injected); every other `/v1/*` path and method streams
//! through untouched. Either way the upstream's answer comes back as it is.

pub mod headers;
pub mod request_body;
pub mod upstream;

use crate::app::AppState;
use crate::error::ApiError;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::request::Parts;
use axum::response::Response;
use headers::upstream_request_headers;
use http_body::Body as _;
use upstream::UpstreamRequest;

/// `POST /v1/messages`, streaming or not.
pub async fn messages(State(state): State<AppState>, request: Request) -> Result<Response, ApiError> {
    forward_messages_request(&state, request).await
}

/// `POST /v1/messages/count_tokens`.
pub async fn count_tokens(State(state): State<AppState>, request: Request) -> Result<Response, ApiError> {
    forward_messages_request(&state, request).await
}

/// Any other `/v1/*` path and method: body streamed through, nothing read.
pub async fn passthrough(State(state): State<AppState>, request: Request) -> Result<Response, ApiError> {
    let (parts, body) = request.into_parts();
    let caller = state.identity().authenticate(&parts.headers).await?;
    // A request without a body (GET /v1/models) must not grow a chunked empty one on the way.
    let body =
        (body.size_hint().exact() != Some(0)).then(|| reqwest::Body::wrap_stream(body.into_data_stream()));
    let headers = upstream_request_headers(&parts.headers, &caller.upstream_credential);
    state.upstream().send(upstream_request(&parts, headers, body)).await
}

async fn forward_messages_request(state: &AppState, request: Request) -> Result<Response, ApiError> {
    let (parts, body) = request.into_parts();
    let caller = state.identity().authenticate(&parts.headers).await?;
    let limits = state.limits();
    let bytes =
        request_body::read_limited(&parts.headers, body, limits.max_body_bytes, limits.body_read_timeout)
            .await?;
    request_body::parse_messages_request(&bytes)?;
    let headers = upstream_request_headers(&parts.headers, &caller.upstream_credential);
    // The caller's bytes go up as they came: no re-serialization, so field order, number
    // formatting and unknown fields are exactly the client's.
    state.upstream().send(upstream_request(&parts, headers, Some(reqwest::Body::from(bytes)))).await
}

fn upstream_request(
    parts: &Parts,
    headers: axum::http::HeaderMap,
    body: Option<reqwest::Body>,
) -> UpstreamRequest {
    let path_and_query =
        parts.uri.path_and_query().map_or_else(|| parts.uri.path().to_owned(), |pq| pq.as_str().to_owned());
    UpstreamRequest { method: parts.method.clone(), path_and_query, headers, body }
}

/// For anything outside `/v1` and the operational endpoints.
pub async fn not_found(request: Request<Body>) -> ApiError {
    ApiError::not_found(format!(
        "memgate has no route {} {}; the Anthropic API lives under /v1/",
        request.method(),
        request.uri().path()
    ))
}
