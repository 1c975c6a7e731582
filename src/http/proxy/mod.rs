//! The proxy: what SDKs call. `/v1/messages` and `/v1/messages/count_tokens` are read whole and
//! checked (they are where memory will be injected); every other `/v1/*` path and method streams
//! through untouched. Either way the upstream's answer comes back as it is.

pub mod paths;
pub mod verify;

use crate::error::{ApiError, Code};
use crate::http::client::RequestOrigin;
use crate::http::headers;
use crate::observability::UpstreamLatency;
use crate::state::AppState;
use crate::turn::{Answer, Endpoint, Purpose, TurnRequest};
use crate::upstream::UpstreamRequest;
use crate::upstream::headers::upstream_request_headers;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use http_body::Body as _;
use std::time::Instant;

/// `POST /v1/messages`, streaming or not.
pub async fn messages(State(state): State<AppState>, request: Request) -> Result<Response, ApiError> {
    forward_messages_request(&state, request, Endpoint::Messages).await
}

/// `POST /v1/messages/count_tokens`.
pub async fn count_tokens(State(state): State<AppState>, request: Request) -> Result<Response, ApiError> {
    forward_messages_request(&state, request, Endpoint::CountTokens).await
}

/// Any other `/v1/*` path and method: body streamed through, nothing read.
pub async fn passthrough(State(state): State<AppState>, request: Request) -> Result<Response, ApiError> {
    let (parts, body) = request.into_parts();
    let caller = state
        .identity()
        .authenticate(headers::credentials(&parts.headers), &state.client_limit_key(&parts))
        .await?;
    paths::check_upstream_path(&caller, parts.uri.path())?;
    // A request without a body (GET /v1/models) must not grow a chunked empty one on the way.
    let body =
        (body.size_hint().exact() != Some(0)).then(|| reqwest::Body::wrap_stream(body.into_data_stream()));
    let headers = upstream_request_headers(&parts.headers, &caller.upstream_credential);
    let response = state.upstream().send(upstream_request(&parts, headers, body)).await?;
    state.identity().upstream_answered(&caller, response.status().as_u16());
    Ok(response)
}

/// Reads and checks the request, begins its turn, sends the turn's body upstream and renders
/// the settled turn's report as headers on the upstream's answer. Every decision about the turn
/// is `turn`'s.
async fn forward_messages_request(
    state: &AppState,
    request: Request,
    endpoint: Endpoint,
) -> Result<Response, ApiError> {
    let started = Instant::now();
    let (parts, body) = request.into_parts();
    // The body's share of the budget is held until the request has left for the upstream (with
    // memgate's tools: until the last round is known).
    let (caller, client, bytes, budget_permit) =
        crate::http::body::read_as_caller(state, &parts, body).await?;
    let checked = bytes.clone();
    let facts = crate::cpu::run(bytes.len(), move || crate::body::check_messages_request(&checked)).await?;
    let ask = headers::ask(&parts.headers)?;
    let key_probe = verify::key_probe(&parts.headers, &caller);
    let turn = state
        .turns()
        .begin(TurnRequest {
            caller,
            ask,
            client,
            endpoint,
            body: bytes,
            facts,
            key_probe,
            started,
            purpose: Purpose::Serve,
        })
        .await?;
    let upstream_headers = upstream_request_headers(&parts.headers, &turn.caller().upstream_credential);
    // Without injection the caller's bytes go up as they came: no re-serialization, so field
    // order, number formatting and unknown fields are exactly the client's. With injection only
    // the block is added (see `inject::placement`), with memgate's tools their definitions
    // (`turn::rounds`).
    // The body's share goes with the turn: its tool rounds grow it as they build bodies.
    let hold = crate::body::budget::Hold::new(state.body_budget(), budget_permit);
    let mut response =
        match state.turns().converse(&turn, upstream_request(&parts, upstream_headers, None), hold).await {
            Ok(response) => response,
            Err(err) => err.into_response(),
        };
    let answer = Answer {
        status: response.status().as_u16(),
        upstream_time: response.extensions().get::<UpstreamLatency>().map(|l| l.0),
        request_id: response.headers().get("request-id").and_then(|v| v.to_str().ok()).map(str::to_owned),
    };
    let report = state.turns().settle(turn, &answer, response.body_mut());
    headers::write_report(response.headers_mut(), &report);
    Ok(response)
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
    ApiError::coded(
        Code::NoRoute,
        format!(
            "memgate has no route {} {}; the Anthropic API lives under /v1/",
            request.method(),
            request.uri().path()
        ),
    )
}

/// A known path with a method it does not take.
pub async fn method_not_allowed(request: Request<Body>) -> ApiError {
    ApiError::coded(
        Code::MethodNotAllowed,
        format!("{} is not allowed on {}", request.method(), request.uri().path()),
    )
}
