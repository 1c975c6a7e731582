//! Passthrough mode: the request that asks the upstream whether a caller's key is good
//! (`turn::verify` decides when to send it and what its answer means).

use crate::identity::Caller;
use crate::upstream::UpstreamRequest;
use crate::upstream::headers::upstream_request_headers;
use axum::http::{HeaderMap, Method};

/// `GET /v1/models?limit=1` with the caller's own credential and `anthropic-*` headers: the
/// cheapest authenticated call the API has. `None` for a caller memory is allowed for already.
pub fn key_probe(headers: &HeaderMap, caller: &Caller) -> Option<UpstreamRequest> {
    if caller.memory_allowed {
        return None;
    }
    let mut check_headers = upstream_request_headers(headers, &caller.upstream_credential);
    for name in ["content-type", "accept-encoding"] {
        check_headers.remove(name);
    }
    Some(UpstreamRequest {
        method: Method::GET,
        path_and_query: "/v1/models?limit=1".to_owned(),
        headers: check_headers,
        body: None,
    })
}
