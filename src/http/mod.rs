//! The route table, and the layers every request passes.
//!
//! This module is the top layer of the map in `src/lib.rs`: the edge, the only place that
//! speaks HTTP. Its handlers read a request, hand it to the turn or an admin service, and render
//! what comes back; `scripts/check-layers` checks that every arrow points down from here (the
//! declared layer order, no cycle among modules or inside a folder, axum and hyper nowhere else).
//!
//! A request's path through memgate, outermost first:
//! 0. `server` — the connection: header-read and idle timeouts, the client's address, which
//!    hosts this listener answers for.
//! 1. `observe::observe` — request id, metrics, one log line.
//! 2. `allowed_hosts` — a `Host` the listener does not answer for is refused (DNS rebinding).
//! 3. routing — `/v1/messages` and `count_tokens` to the checked proxy, other `/v1/*` to the
//!    streaming passthrough, `/mcp` to the memory tools, health and metrics, a 404 in
//!    Anthropic's shape for the rest.
//! 4. `identity` — who is calling and which credential goes upstream.
//! 5. `body` — size limit, read deadlines, bytes held against the budget as they arrive, JSON
//!    and shape checks (Messages only).
//! 6. `recall` — the memory block for this caller and release, placed in the body; memgate's
//!    memory tools (`tools`) offered after the client's own, where the caller may have them.
//! 7. `upstream` — pooled client, timeouts; the answer relayed chunk by chunk. With the tools
//!    offered, the turn runs the upstream rounds their calls take (`turn::rounds`) and the client
//!    gets one answer.
//!
//! `POST /mcp` offers memgate's memory tools to MCP clients: the same identity and body steps,
//! then `rmcp`'s Streamable HTTP service and `tools` (see `mcp`).
//!
//! `/admin/v1/…` goes through `admin::require_admin` (bearer token or console session) to handlers
//! that call `memory::MemoryService`, which checks records (`memory::checks`) and writes them
//! through `store`. `/console/` serves the console's embedded files and its session endpoints.

use crate::state::AppState;
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{any, get, post};

pub mod admin;
pub mod allowed_hosts;
pub mod body;
pub mod client;
pub mod console;
pub mod error;
pub mod headers;
pub mod health;
pub mod mcp;
pub mod observe;
pub mod panic;
pub mod proxy;
pub mod server;

/// The route table: path → handler, nothing else. Everything on one listener.
pub fn build_app(state: AppState) -> Router {
    finish(public_routes(&state).merge(operator_routes(&state)), state)
}

/// The public listener when `/admin` and `/metrics` have a listener of their own
/// (`admin.listen`): the proxy, MCP and health only.
pub fn build_public_app(state: AppState) -> Router {
    finish(public_routes(&state), state)
}

/// The operators' listener (`admin.listen`): the admin API, metrics and health.
pub fn build_admin_app(state: AppState) -> Router {
    let health = Router::new().route("/healthz", get(health::healthz)).route("/readyz", get(health::readyz));
    finish(operator_routes(&state).merge(health), state)
}

fn public_routes(state: &AppState) -> Router<AppState> {
    Router::new()
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/v1/messages", post(proxy::messages).fallback(proxy::passthrough))
        .route("/v1/messages/count_tokens", post(proxy::count_tokens).fallback(proxy::passthrough))
        .route("/v1/{*rest}", any(proxy::passthrough))
        .route("/mcp", mcp::endpoint(state))
}

fn operator_routes(state: &AppState) -> Router<AppState> {
    use admin::{dormancy, insights, memories, review, transfer};
    let admin = Router::new()
        .route("/memories", post(memories::create).get(memories::list))
        .route("/memories/forget", post(memories::forget))
        .route("/memories/activate", post(review::activate_many))
        .route("/memories/reject", post(review::reject_many))
        .route("/memories/{id}", get(memories::get).patch(memories::update).delete(memories::delete))
        .route("/memories/{id}/history", get(memories::history))
        .route("/memories/{id}/pause", post(memories::pause))
        .route("/memories/{id}/archive", post(memories::archive))
        .route("/memories/{id}/activate", post(review::activate))
        .route("/dormancy", get(dormancy::report))
        .route("/dormancy/run", post(dormancy::run))
        .route("/export", get(transfer::export))
        .route("/import", post(transfer::import))
        .route("/imports/{id}", get(transfer::progress))
        .route("/imports/{id}/undo", post(transfer::undo))
        .route("/keys", post(admin::keys::create).get(admin::keys::list))
        .route("/explain", post(admin::explain::explain))
        .route("/releases", get(admin::releases::list))
        .route("/releases/{name}", get(admin::releases::get).patch(admin::releases::patch))
        .route("/releases/{name}/promote", post(admin::releases::promote))
        .route("/releases/{name}/rollback", post(admin::releases::rollback))
        .route("/releases/{name}/stats", get(admin::releases::stats))
        .route("/releases/{name}/history", get(admin::releases::history))
        .route("/keys/{id}", axum::routing::delete(admin::keys::revoke))
        .route("/actions", get(admin::actions::list))
        .route("/actions/{id}", get(admin::actions::get))
        .route("/actions/{id}/replay", post(admin::actions::replay))
        .route("/observer", get(admin::observer::status))
        .route("/metrics/history", get(insights::metrics_history))
        .route("/metrics/releases", get(insights::metrics_releases))
        .route("/health/data", get(insights::data_health))
        .route("/requests/recent", get(insights::recent_requests))
        .route("/schemas", get(insights::schema_list))
        .route("/schemas/{version}/{type}", get(insights::schema_document))
        .fallback(proxy::not_found)
        .method_not_allowed_fallback(proxy::method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(state.clone(), admin::require_admin))
        // The admin API's answers are a tenant's data: never kept by a browser or a proxy.
        .layer(axum::middleware::map_response(no_store));
    Router::new()
        .nest("/admin/v1", admin)
        .route("/metrics", get(health::metrics))
        // The console's files and its session endpoints, beside the admin API it calls.
        .merge(console::routes::<AppState>())
}

async fn no_store(mut response: axum::response::Response) -> axum::response::Response {
    response
        .headers_mut()
        .insert(axum::http::header::CACHE_CONTROL, axum::http::HeaderValue::from_static("no-store"));
    response
}

fn finish(routes: Router<AppState>, state: AppState) -> Router {
    let routes = if panic::test_route_enabled() {
        routes.route("/_test/panic", get(panic::panicking_handler))
    } else {
        routes
    };
    routes
        .fallback(proxy::not_found)
        .method_not_allowed_fallback(proxy::method_not_allowed)
        // Body limits are enforced by the handlers, which answer in Anthropic's error shape.
        .layer(DefaultBodyLimit::disable())
        // A handler that panics answers 500 in Anthropic's shape; `observe` still logs it.
        .layer(axum::middleware::from_fn(panic::catch_panics))
        // A request naming a host its listener does not answer for ends here (`allowed_hosts`).
        .layer(axum::middleware::from_fn(crate::http::allowed_hosts::refuse_other_hosts))
        .layer(axum::middleware::from_fn_with_state(state.clone(), observe::observe))
        .with_state(state)
}
