//! The edge's half of `allowed_hosts` (see `crate::allowed_hosts` for why): refusing a request
//! whose `Host` its listener does not answer for.

use crate::allowed_hosts::AllowedHosts;
use crate::error::{ApiError, Code};
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// Refuses a request that names a host its listener does not answer for (403
/// `host_not_allowed`), before any handler. Requests with no `AllowedHosts` (a router driven
/// in-process) are not checked.
pub async fn refuse_other_hosts(request: Request, next: Next) -> Response {
    let Some(allowed) = request.extensions().get::<AllowedHosts>() else { return next.run(request).await };
    let path = request.uri().path();
    if path == "/healthz" || path == "/readyz" {
        return next.run(request).await;
    }
    let host = request
        .headers()
        .get(axum::http::header::HOST)
        .map(|value| value.to_str().unwrap_or("\u{fffd}"))
        .or_else(|| request.uri().authority().map(|authority| authority.as_str()));
    if allowed.allows(host) {
        return next.run(request).await;
    }
    let shown: String = host.unwrap_or_default().chars().take(100).collect();
    tracing::info!(host = ?shown, path, "refused a request for a host memgate does not answer for");
    ApiError::coded(
        Code::HostNotAllowed,
        format!(
            "memgate does not answer for the host `{shown}`; if it should, list the name in allowed_hosts (MEMGATE_ALLOWED_HOSTS)"
        ),
    )
    .into_response()
}
