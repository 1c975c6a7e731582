//! The console's HTTP side: its embedded files (`assets`) and the `/console` routes, which serve
//! them and the session endpoints (`crate::console::session`).

pub mod assets;

pub use assets::ConsoleAssets;

use crate::console::{ConsoleAuth, ConsoleHost, session};
use crate::http::client::RequestOrigin;
use crate::identity::rate_limit::Strikes;
use crate::state::AppState;
use crate::store::Store;
use axum::Router;
use axum::http::request::Parts;
use axum::routing::get;

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

    fn body_read_timeout(&self) -> std::time::Duration {
        self.limits().body_read_timeout
    }

    fn is_https(&self, parts: &Parts) -> bool {
        RequestOrigin::is_https(self, parts)
    }
}
