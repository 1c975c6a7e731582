//! Passthrough mode: asking the upstream whether a caller's key is good before doing memory work
//! for it (see `identity::accepted` for why).
//!
//! A key the upstream has not accepted yet is checked with the cheapest authenticated call the
//! API has, `GET /v1/models?limit=1`, sent with the caller's own credential and `anthropic-*`
//! headers. A 2xx makes the key accepted (for an hour), and this request gets its memory: the
//! first request of a key costs one extra round trip, no later one does. A refusal, a timeout or
//! an unreachable upstream means no memory for this request; the request itself goes on as usual
//! and the upstream answers it as it would have. Every such request also counted against the
//! client's address before it got here (`auth.preauth_rate_limit_per_minute`), so made-up keys
//! buy at most one cheap upstream call each, and never an embedding run.

use crate::identity::Caller;
use crate::state::AppState;
use crate::upstream::UpstreamRequest;
use crate::upstream::headers::upstream_request_headers;
use axum::http::{HeaderMap, Method};
use std::time::Duration;

/// The longest the check may take; past it the request goes on without memory.
const VERIFY_TIMEOUT: Duration = Duration::from_secs(3);

/// Whether the upstream accepts `caller`'s key (checking once per key; see the module comment).
pub async fn key_accepted(state: &AppState, headers: &HeaderMap, caller: &Caller) -> bool {
    if caller.memory_allowed {
        return true;
    }
    let mut check_headers = upstream_request_headers(headers, &caller.upstream_credential);
    for name in ["content-type", "accept-encoding"] {
        check_headers.remove(name);
    }
    let request = UpstreamRequest {
        method: Method::GET,
        path_and_query: "/v1/models?limit=1".to_owned(),
        headers: check_headers,
        body: None,
    };
    match tokio::time::timeout(VERIFY_TIMEOUT, state.upstream().send(request)).await {
        Ok(Ok(answer)) => {
            let status = answer.status().as_u16();
            state.identity().upstream_answered(caller, status);
            (200..300).contains(&status)
        }
        _ => false,
    }
}
