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
//! Hosts are checked by memgate's own `allowed_hosts` layer, so `rmcp`'s is turned off. Browsers
//! cannot reach the tools from another origin: every call needs a credential header, which a
//! cross-origin page can only send after a CORS preflight that memgate never grants.

mod server;

use crate::error::ApiError;
use crate::http::headers;
use crate::state::AppState;
use axum::body::Body;
use axum::extract::{Request, State};
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
    // Stateless and JSON: the call has run by the time its answer is back, so the body's
    // share of the budget is held for exactly as long as the request works.
    let response = next.run(Request::from_parts(parts, Body::from(bytes))).await;
    drop(budget_permit);
    Ok(response)
}
