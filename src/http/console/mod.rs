//! The console's HTTP side: its embedded files (`assets`), the admin API's check with the CSRF
//! rule and the session cookie (`auth`), and `/console/session` (`session`). What the console
//! keeps and computes is `crate::console`'s.

pub mod assets;
pub mod auth;
pub mod session;

pub use assets::ConsoleAssets;
pub use auth::{Principal, Refusal, Via, authorize};

use crate::console::ConsoleAuth;
use crate::http::client::RequestOrigin;
use crate::identity::rate_limit::Strikes;
use crate::state::AppState;
use crate::store::Store;
use axum::Router;
use axum::http::request::Parts;
use axum::routing::get;
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
    /// `X-Forwarded-Proto: https` (`http::client::forwarded_https`). Decides the cookie's `Secure` and
    /// the scheme of the request's own origin in the CSRF rule.
    fn is_https(&self, parts: &Parts) -> bool;
}

impl ConsoleHost for AppState {
    fn console_auth(&self) -> &ConsoleAuth {
        AppState::console_auth(self)
    }

    fn console_store(&self) -> &Store {
        self.store()
    }

    fn admin_strikes(&self) -> &Strikes {
        AppState::admin_strikes(self)
    }

    fn strike_key(&self, parts: &Parts) -> String {
        self.client_limit_key(parts)
    }

    fn body_read_timeout(&self) -> Duration {
        self.limits().body_read_timeout
    }

    fn is_https(&self, parts: &Parts) -> bool {
        RequestOrigin::is_https(self, parts)
    }
}

/// Every `/console` route: the embedded files (`GET /console` → 308, `/console/`,
/// `/console/index.html`, `/console/assets/{file}`, 404 for any other path) and
/// `GET`/`POST`/`DELETE /console/session`, each answer with the console's security headers. The
/// application mounts it with one line: `.merge(http::console::routes::<AppState>())`.
pub fn routes<H: ConsoleHost>() -> Router<H> {
    let sessions = Router::new()
        .route(
            "/console/session",
            get(session::status::<H>).post(session::login::<H>).delete(session::logout::<H>),
        )
        .layer(axum::middleware::map_response(assets::with_security_headers));
    ConsoleAssets::embedded().routes::<H>().merge(sessions)
}
