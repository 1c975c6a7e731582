//! The console's HTTP side: its embedded files (`assets`) and the `/console` routes, which serve
//! them and the session endpoints (`crate::console::session`).

pub mod assets;

pub use assets::ConsoleAssets;

use crate::console::{ConsoleHost, session};
use axum::Router;
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
