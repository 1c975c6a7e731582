//! The console (issue 16): a web app for the people who own memgate's memory and releases,
//! served by memgate itself at `/console/`, and what the server keeps for it. The contract with
//! the front end is `console/API.md`; how it is wired and secured is `docs/console.md`.
//!
//! - `assets`: the built front end (`console/dist/`), embedded at compile time, served with the
//!   cache rules and the CSP of API.md §1.
//! - `session` and `auth`: login with the admin or viewer token → an HttpOnly, SameSite=Strict
//!   cookie whose hash the store keeps; `auth::authorize` is the admin API's check (bearer token
//!   or session, the CSRF rule for the cookie, the viewer's read-only limits).
//! - `recorder` and `history`: each replica adds every answered Messages request to an
//!   in-memory per-minute accumulator (well under a microsecond) and writes it to
//!   `metric_buckets` once a minute; the charts' queries sum the replicas' rows.
//! - `health`, `recent`, `schemas`: the other read-only endpoints of API.md §3.
//!
//! Nothing here is wired into the router or the request path yet: `routes` mounts the `/console`
//! paths for a state that implements `ConsoleHost`, and the rest are functions over explicit
//! parameters for the admin handlers and the proxy to call (docs/console.md, "Hooks").

pub mod auth;
pub mod health;
pub mod history;
pub mod recent;
pub mod recorder;
pub mod schemas;
pub mod session;

pub use auth::{AdminTokens, ConsoleAuth, Principal, Refusal, Role, Via, authorize};
pub use history::{HistoryParams, HistoryRetention, Window};
pub use recent::{RecentCaller, RecentRequest, RecentRequests};
pub use recorder::{CallError, CallOutcome, MemoryOutcome, MetricsRecorder};
pub use session::SessionPolicy;

use crate::identity::rate_limit::Strikes;
use crate::store::Store;
use axum::http::request::Parts;
use sha2::{Digest, Sha256};
use std::time::Duration;

/// What the session handlers need from the application's state. `AppState` implements it by
/// handing out what it holds already (docs/console.md, "Hooks").
pub trait ConsoleHost: Clone + Send + Sync + 'static {
    /// The tokens and session rules.
    fn console_auth(&self) -> &ConsoleAuth;
    /// The store the sessions live in.
    fn console_store(&self) -> &Store;
    /// The admin API's failed-authentication counter: a wrong token at login counts in it.
    fn admin_strikes(&self) -> &Strikes;
    /// What the client's failures count under in the strikes: its address (behind trusted
    /// proxies, the one they name), an IPv6 one by its network (`client_ip.ipv6_limit_prefix`).
    fn strike_key(&self, parts: &Parts) -> String;
    /// How long a client may take to send a login body (`limits.body_read_timeout_ms`).
    fn body_read_timeout(&self) -> Duration;
    /// Whether the request came over HTTPS: TLS here, or a trusted proxy's
    /// `X-Forwarded-Proto: https` (`auth::forwarded_https`). Decides the cookie's `Secure` and
    /// the scheme of the request's own origin in the CSRF rule.
    fn is_https(&self, parts: &Parts) -> bool;
}

/// The SHA-256 of `bytes`, hex.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}
