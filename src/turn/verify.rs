//! Passthrough mode: asking the upstream whether a caller's key is good before doing memory work
//! for it (see `identity::accepted` for why).
//!
//! A key the upstream has not accepted yet is checked with the cheapest authenticated call the
//! API has, `GET /v1/models?limit=1`, sent with the caller's own credential and `anthropic-*`
//! headers (the edge builds it: `http::proxy::verify`). A 2xx makes the key accepted (for an
//! hour), and this request gets its memory: the first request of a key costs one extra round
//! trip, no later one does. A refusal, a timeout or an unreachable upstream means no memory for
//! this request; the request itself goes on as usual and the upstream answers it as it would
//! have. Every such request also counted against the client's address before it got here
//! (`auth.preauth_rate_limit_per_minute`), so made-up keys buy at most one cheap upstream call
//! each, and never an embedding run.

use crate::identity::{Authenticator, Caller};
use crate::upstream::{Upstream, UpstreamRequest};
use std::time::Duration;

/// The longest the check may take; past it the request goes on without memory.
const VERIFY_TIMEOUT: Duration = Duration::from_secs(3);

/// Whether the upstream accepts `caller`'s key, asked with `probe`.
pub(super) async fn key_accepted(
    upstream: &Upstream,
    identity: &Authenticator,
    caller: &Caller,
    probe: UpstreamRequest,
) -> bool {
    if caller.memory_allowed {
        return true;
    }
    match tokio::time::timeout(VERIFY_TIMEOUT, upstream.status_of(probe)).await {
        Ok(Ok(status)) => {
            identity.upstream_answered(caller, status);
            (200..300).contains(&status)
        }
        _ => false,
    }
}
