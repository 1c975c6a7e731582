//! The proxy: what SDKs call. `/v1/messages` and `/v1/messages/count_tokens` are read whole and
//! checked (they are where memory will be injected); every other `/v1/*` path and method streams
//! through untouched. Either way the upstream's answer comes back as it is.

pub mod headers;
pub mod request_body;
pub mod shadow;
pub mod upstream;

use crate::app::AppState;
use crate::error::ApiError;
use crate::recall::{self, Recalled};
use crate::rollout::Release;
use crate::rollout::stats::Outcome;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::extract::{Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use headers::upstream_request_headers;
use http_body::Body as _;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use upstream::UpstreamLatency;
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
    let started = Instant::now();
    let (parts, body) = request.into_parts();
    let caller = state.identity().authenticate(&parts.headers).await?;
    let limits = state.limits();
    let bytes =
        request_body::read_limited(&parts.headers, body, limits.max_body_bytes, limits.body_read_timeout)
            .await?;
    request_body::parse_messages_request(&bytes)?;
    let wish = recall::wish(&parts.headers, &caller)?;
    let client = parts.extensions.get::<ConnectInfo<SocketAddr>>().map(|ConnectInfo(addr)| addr.ip());
    // The request keeps this release to the end, whatever the rollout does meanwhile.
    let release = state.rollout().route(&caller, &parts.headers, client)?;
    // Memory turned off for this request: there is nothing to compare a candidate with.
    let shadows = if wish.off { Vec::new() } else { state.rollout().shadows_for(&release) };
    let original = (!shadows.is_empty()).then(|| bytes.clone());
    let recalled = recall::recall(state, &caller, &release, bytes, &wish).await?;
    // A degraded active run injected nothing for want of time or an embedder: comparing a
    // candidate with it would count a difference the candidate did not make.
    if let (Some(original), false) = (original, recalled.status == recall::MemoryStatus::Degraded) {
        shadow::spawn(state, &caller, &recalled, shadows, original);
    }
    let headers = upstream_request_headers(&parts.headers, &caller.upstream_credential);
    // Without injection the caller's bytes go up as they came: no re-serialization, so field
    // order, number formatting and unknown fields are exactly the client's. With injection only
    // the block is added (see `inject::placement`).
    let body = Some(reqwest::Body::from(recalled.body.clone()));
    let mut response = match state.upstream().send(upstream_request(&parts, headers, body)).await {
        Ok(response) => response,
        Err(err) => err.into_response(),
    };
    let upstream_time = response.extensions().get::<UpstreamLatency>().map_or(Duration::ZERO, |l| l.0);
    state.rollout().record(
        &release.name,
        &Outcome {
            upstream_error: response.status().is_server_error(),
            memory_error: recalled.status == recall::MemoryStatus::Degraded,
            injected_records: recalled.injected_ids.len(),
            injected_tokens: recalled.tokens,
            added_latency: started.elapsed().saturating_sub(upstream_time),
        },
    );
    // Records reached the model only when it answered a Messages request (count_tokens counts).
    if response.status().is_success() && parts.uri.path() == "/v1/messages" {
        state.memories().note_accesses(&caller.tenant, &recalled.injected_ids);
    }
    add_memory_headers(response.headers_mut(), &release, &recalled, wish.debug);
    Ok(response)
}

/// `X-Memory-Version`, `X-Memory-Injected`, `X-Memory-Status`, and the trace when asked for.
fn add_memory_headers(headers: &mut HeaderMap, release: &Release, recalled: &Recalled, debug: bool) {
    let mut set = |name: &'static str, value: String| {
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(name, value);
        }
    };
    set("x-memory-version", release.name.clone());
    set("x-memory-injected", recalled.injected_ids.len().to_string());
    set("x-memory-status", recalled.status.as_str().to_owned());
    if debug {
        set("x-memory-trace", recalled.trace_json().to_string());
    }
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

/// A known path with a method it does not take.
pub async fn method_not_allowed(request: Request<Body>) -> Response {
    let mut response =
        ApiError::invalid_request(format!("{} is not allowed on {}", request.method(), request.uri().path()))
            .into_response();
    *response.status_mut() = axum::http::StatusCode::METHOD_NOT_ALLOWED;
    response
}
