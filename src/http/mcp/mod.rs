//! `POST /mcp`: memgate's six memory tools for MCP clients (Claude Code, Cursor, Codex, …) over
//! the MCP Streamable HTTP transport, served by `rmcp`'s tower service under the route table.
//!
//! A request's path, in order:
//! 1. `admit` (this file) — the gateway's own checks, before `rmcp` sees anything: the caller
//!    from its gateway key (`x-api-key: mgk_…`) or JWT (`Authorization: Bearer`) with its rate
//!    limits charged, as on `/v1/messages` (a 401 in Anthropic's error shape otherwise); the
//!    body read within `limits` and held against the body budget; the release the caller is
//!    routed to (`X-Memory-Version` pins one where allowed) and the tools it gets
//!    (`server::Access`), which ride on the request's extensions.
//! 2. `rmcp`'s `StreamableHttpService` — JSON-RPC, protocol versions, the `Accept` checks. It
//!    runs stateless: every POST stands alone (no `Mcp-Session-Id`, nothing kept between
//!    requests), so any replica answers any request and a key revoked between two calls is
//!    refused on the second. Answers are plain JSON (no SSE stream): a tool call has nothing to
//!    send before its result.
//! 3. `server::MemoryServer` — `tools/list` and `tools/call`, mapped onto `tools::MemoryTools`:
//!    the same definitions and the same `execute` as the Messages tool loop, so the rules live
//!    once.
//!
//! What `rmcp` refuses before JSON-RPC starts (a body that is not JSON or not a JSON-RPC message,
//! another `Content-Type`, an `Accept` without both media types) it answers in plain text, a body
//! as a 415. MCP clients read a JSON-RPC error there, as the official SDKs' servers send it: so
//! each plain-text refusal of `rmcp`'s becomes one (`as_json_rpc`): for a body or type it could
//! not read, by what was wrong (`unreadable`: 400 with -32700 for what is not JSON, -32600 for
//! JSON that is not one JSON-RPC message, a batch included; 415 with -32000 for another media
//! type), any other (`Accept`: 406) with its status kept. A body `rmcp` takes is parsed once. Their `id` is `null`: the request's is unknown
//! (JSON-RPC 2.0, section 5). Identity errors stay in the gateway's shape, as on every route.
//!
//! Hosts are checked by memgate's own `allowed_hosts` layer, so `rmcp`'s is turned off. Browsers
//! cannot reach the tools from another origin: every call needs a credential header, which a
//! cross-origin page can only send after a CORS preflight that memgate never grants.

mod server;

use crate::error::ApiError;
use crate::http::headers;
use crate::state::AppState;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use axum::routing::MethodRouter;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use std::sync::Arc;

/// The `/mcp` route: `admit` in front of `rmcp`'s service, built once with the router. Other
/// methods answer the route table's 405.
pub fn endpoint(state: &AppState) -> MethodRouter<AppState> {
    let tools = state.tools().clone();
    // `admit` has read the body within `limits.max_body_bytes`; rmcp's own cap is the same.
    let max_body = usize::try_from(state.limits().max_body_bytes).unwrap_or(usize::MAX);
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        .disable_allowed_hosts()
        .with_max_request_body_bytes(max_body);
    let mcp = StreamableHttpService::new(
        move || Ok(server::MemoryServer::new(tools.clone())),
        Arc::new(NeverSessionManager::default()),
        config,
    );
    axum::routing::post_service(mcp).route_layer(axum::middleware::from_fn_with_state(state.clone(), admit))
}

/// Who is calling, what it sent and what it may use, decided before `rmcp` runs.
async fn admit(State(state): State<AppState>, request: Request, next: Next) -> Result<Response, ApiError> {
    let (mut parts, body) = request.into_parts();
    let (caller, client, bytes, budget_permit) =
        crate::http::body::read_as_caller(&state, &parts, body).await?;
    let ask = headers::ask(&parts.headers)?;
    let release = state.rollout().route(&caller, ask.pin.as_deref(), client)?;
    parts.extensions.insert(server::Access::new(&caller, release, &ask));
    let content_type = parts.headers.get(CONTENT_TYPE).cloned();
    // Stateless and JSON: the call has run by the time its answer is back, so the body's
    // share of the budget is held for exactly as long as the request works (a refusal's reading
    // of it included).
    let response = next.run(Request::from_parts(parts, Body::from(bytes.clone()))).await;
    let response = as_json_rpc(response, content_type.as_ref(), &bytes).await;
    drop(budget_permit);
    Ok(response)
}

/// JSON-RPC's codes for a message that cannot be read, and the MCP SDKs' for a transport refusal.
const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const TRANSPORT_ERROR: i64 = -32000;

/// A JSON-RPC error answer at `status`, for a request whose id is unknown. Never repeats the body.
fn json_rpc_error(status: StatusCode, code: i64, message: &str) -> Response {
    let body = serde_json::json!({"jsonrpc": "2.0", "id": null, "error": {"code": code, "message": message}});
    let mut response = Response::new(Body::from(body.to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// The refusal of a body `rmcp` answered in plain text: not `application/json`, not JSON, or not
/// one JSON-RPC message of MCP (a batch is not: MCP's revisions since 2025-06-18 have none).
/// Read only once `rmcp` refused, so an accepted body is parsed once.
fn unreadable(content_type: Option<&HeaderValue>, body: &[u8]) -> Option<Response> {
    let json_type = content_type.and_then(|v| v.to_str().ok()).is_some_and(|value| {
        let essence = value.split_once(';').map_or(value, |(essence, _)| essence);
        essence.trim().eq_ignore_ascii_case("application/json")
    });
    if !json_type {
        let message = "Unsupported Media Type: Content-Type must be application/json";
        return Some(json_rpc_error(StatusCode::UNSUPPORTED_MEDIA_TYPE, TRANSPORT_ERROR, message));
    }
    // Read as `rmcp` reads it, so that what passes here is what it takes.
    if serde_json::from_slice::<rmcp::model::ClientJsonRpcMessage>(body).is_ok() {
        return None;
    }
    Some(match serde_json::from_slice::<serde::de::IgnoredAny>(body) {
        Err(err) => {
            let message = format!("Parse error: the body is not JSON ({err})");
            json_rpc_error(StatusCode::BAD_REQUEST, PARSE_ERROR, &message)
        }
        Ok(_) => {
            let message = "Invalid Request: the body must be one JSON-RPC request, notification or response of MCP (batches are not taken)";
            json_rpc_error(StatusCode::BAD_REQUEST, INVALID_REQUEST, message)
        }
    })
}

/// Bodies of `rmcp`'s plain-text refusals are a line or two; past this it is not one.
const PLAIN_REFUSAL_BYTES: usize = 4096;

/// `rmcp`'s plain-text refusals (a client error without a JSON body) in the JSON-RPC shape: a
/// body it could not read as `unreadable` says, any other (`Accept` lacking a media type) with
/// its status and words; every other answer as it is.
async fn as_json_rpc(response: Response, content_type: Option<&HeaderValue>, body: &[u8]) -> Response {
    let is_json = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|value| value.trim_start().to_ascii_lowercase().starts_with("application/json"));
    if !response.status().is_client_error() || is_json {
        return response;
    }
    if let Some(refused) = unreadable(content_type, body) {
        return refused;
    }
    let (parts, body) = response.into_parts();
    let text = match axum::body::to_bytes(body, PLAIN_REFUSAL_BYTES).await {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(_) => String::new(),
    };
    let message = if text.trim().is_empty() {
        parts.status.canonical_reason().unwrap_or("refused")
    } else {
        text.trim()
    };
    json_rpc_error(parts.status, TRANSPORT_ERROR, message)
}
