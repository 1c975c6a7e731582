//! The outermost layer every request passes: gives it a request id (`X-Memory-Request-Id` on the
//! answer), counts it, times memgate's own share against the upstream's, and logs one line —
//! method, path, status, timings; never a body, a query string or a credential.

use crate::observability::UpstreamLatency;
use crate::observability::metrics::Route;
use crate::state::AppState;
use axum::extract::{Request, State};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;
use std::time::Instant;

pub const REQUEST_ID_HEADER: &str = "x-memory-request-id";

/// memgate's id for one request, in the request's extensions for handlers that log.
#[derive(Debug, Clone)]
pub struct RequestId(pub String);

pub async fn observe(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    let started = Instant::now();
    let request_id = format!("mgr_{}", uuid::Uuid::new_v4().simple());
    let route = Route::from_path(request.uri().path());
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    request.extensions_mut().insert(RequestId(request_id.clone()));

    let mut response = next.run(request).await;

    let total = started.elapsed();
    let status = response.status().as_u16();
    let metrics = state.metrics();
    metrics.record_request(route, status);
    let upstream = response.extensions().get::<UpstreamLatency>().map(|l| l.0);
    if let Some(upstream) = upstream {
        metrics.record_upstream(route, upstream, total);
    }
    if let Ok(value) = HeaderValue::from_str(&request_id) {
        response.headers_mut().insert(REQUEST_ID_HEADER, value);
    }
    // Draining for shutdown: this connection is not to be reused (hyper closes an HTTP/1
    // connection after an answer that says so), so no idle connection is left to close later.
    if state.is_draining() {
        response.headers_mut().insert(axum::http::header::CONNECTION, HeaderValue::from_static("close"));
    }
    tracing::info!(
        request_id = %request_id,
        method = %method,
        path = %path,
        status,
        total_ms = total.as_secs_f64() * 1000.0,
        upstream_ms = upstream.map(|d| d.as_secs_f64() * 1000.0),
        "answered"
    );
    response
}
