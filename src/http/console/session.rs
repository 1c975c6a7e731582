//! `/console/session` (`console/API.md` §2): `POST` trades the admin (or viewer) token for a
//! cookie, `GET` says who is logged in, `DELETE` logs out. What a session is, and when it is live,
//! is `console::session`'s; this reads the request, applies the CSRF rule and the strikes, and
//! writes the cookie.

use super::ConsoleHost;
use super::assets::security_headers;
use super::auth::{self, Refusal, SESSION_COOKIE, too_many_failures};
use crate::clock::{format_ms, now_ms};
use crate::console::session::{self, ConsoleAuth, Session, SessionPolicy};
use crate::error::{ApiError, Code, ErrorKind};
use crate::store::StoreError;
use axum::extract::{Request, State};
use axum::http::header::{CACHE_CONTROL, SET_COOKIE};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// The largest login body read: a token and an actor name.
const MAX_LOGIN_BODY_BYTES: u64 = 16 * 1024;

/// The `Set-Cookie` of a new session.
pub fn set_cookie(value: &str, policy: &SessionPolicy, secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    format!(
        "{SESSION_COOKIE}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{secure}",
        policy.lifetime.as_secs()
    )
}

/// The `Set-Cookie` that removes the session cookie.
pub fn clear_cookie(secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    format!("{SESSION_COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0{secure}")
}

/// The answer of a login and of `GET /console/session` for a live session.
fn session_answer(session: &Session, tenants: &[String], policy: &SessionPolicy) -> Value {
    json!({
        "authenticated": true,
        "role": session.role,
        "actor": session.actor,
        "tenants": tenants,
        "expires_at": format_ms(session.expires_at_ms),
        "idle_timeout_secs": policy.idle_timeout.as_secs(),
    })
}

/// A refused `/console/session` call, answered as it is.
struct Failure(Response);

impl From<ApiError> for Failure {
    fn from(err: ApiError) -> Failure {
        Failure(err.into_response())
    }
}

impl From<Refusal> for Failure {
    fn from(refusal: Refusal) -> Failure {
        Failure(refusal.into_response())
    }
}

impl From<StoreError> for Failure {
    fn from(err: StoreError) -> Failure {
        Failure(ApiError::from(err).into_response())
    }
}

/// Every answer of `/console/session`: the security headers and `Cache-Control: no-store`.
fn finish(result: Result<Response, Failure>) -> Response {
    let mut response = result.unwrap_or_else(|Failure(response)| response);
    security_headers(response.headers_mut());
    response.headers_mut().insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

fn with_cookie(mut response: Response, cookie: &str) -> Response {
    if let Ok(value) = HeaderValue::from_str(cookie) {
        response.headers_mut().append(SET_COOKIE, value);
    }
    response
}

/// `actor` of the login body: absent, null or empty → `console`; else 1 to 64 of
/// `A-Z a-z 0-9 . _ : -` → `console:<actor>` (the rule of `X-Memory-Actor`).
fn session_actor(body: &Value) -> Result<String, ApiError> {
    match body.get("actor") {
        None | Some(Value::Null) => Ok("console".to_owned()),
        Some(Value::String(actor)) if actor.is_empty() => Ok("console".to_owned()),
        Some(Value::String(actor))
            if actor.len() <= 64
                && actor.bytes().all(|b| b.is_ascii_alphanumeric() || b"._:-".contains(&b)) =>
        {
            Ok(format!("console:{actor}"))
        }
        Some(_) => Err(ApiError::invalid_request(
            "actor must be 1 to 64 characters of A-Z, a-z, 0-9, '.', '_', ':' or '-'",
        )),
    }
}

/// `POST /console/session` `{"token": "…", "actor": "alice"}`: log in.
pub async fn login<H: ConsoleHost>(State(host): State<H>, request: Request) -> Response {
    finish(login_inner(&host, request).await)
}

async fn login_inner<H: ConsoleHost>(host: &H, request: Request) -> Result<Response, Failure> {
    let (parts, body) = request.into_parts();
    let https = host.is_https(&parts);
    auth::check_csrf(&parts.headers, &parts.uri, https)?;
    let console: &ConsoleAuth = host.console_auth();
    if !console.tokens.admin_api_on() {
        return Err(Refusal::AdminOff.into());
    }
    let client = host.strike_key(&parts);
    host.admin_strikes().check(&client).map_err(too_many_failures)?;
    // Read under the deadline of every body memgate reads (`limits.body_read_timeout_ms`): a
    // client that starts a login and stalls gets a 408, not a connection held open.
    let bytes =
        crate::http::body::read_limited(&parts.headers, body, MAX_LOGIN_BODY_BYTES, host.body_read_timeout())
            .await
            .map_err(|err| match err.kind() {
                ErrorKind::RequestTooLarge => {
                    ApiError::new(ErrorKind::RequestTooLarge, "a login body is at most 16 KiB")
                }
                _ => err,
            })?;
    let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let Some(token) = body.get("token").and_then(Value::as_str) else {
        return Err(ApiError::coded(
            Code::InvalidJson,
            r#"log in with {"token": "<admin token>", "actor": "your-name"}"#,
        )
        .into());
    };
    let actor = session_actor(&body)?;
    let Some(role) = console.tokens.role_of(token) else {
        host.admin_strikes().fail(&client).map_err(too_many_failures)?;
        return Err(ApiError::coded(
            Code::AdminTokenInvalid,
            "that token is not this memgate's admin or viewer token",
        )
        .into());
    };
    let store = host.console_store();
    let now = now_ms();
    // Housekeeping: logins are rare, and the table holds only sessions that have not ended.
    if let Err(err) = session::prune(store, &console.policy, now).await {
        tracing::warn!(error = %err, "could not delete ended console sessions");
    }
    let (cookie, session) = session::create(store, console, role, &actor, now).await?;
    let tenants = session::tenants(store).await?;
    let response = axum::Json(session_answer(&session, &tenants, &console.policy)).into_response();
    Ok(with_cookie(response, &set_cookie(&cookie, &console.policy, https)))
}

/// `GET /console/session`: always 200, `{"authenticated": false}` without a live session.
pub async fn status<H: ConsoleHost>(State(host): State<H>, request: Request) -> Response {
    finish(status_inner(&host, request).await)
}

async fn status_inner<H: ConsoleHost>(host: &H, request: Request) -> Result<Response, Failure> {
    let (parts, _body) = request.into_parts();
    let console = host.console_auth();
    let logged_out = || axum::Json(json!({"authenticated": false})).into_response();
    if !console.tokens.admin_api_on() {
        return Ok(logged_out());
    }
    let Some(cookie) = auth::session_cookie(&parts.headers) else { return Ok(logged_out()) };
    let store = host.console_store();
    let now = now_ms();
    let Some(session) = session::find(store, cookie, console, now).await? else { return Ok(logged_out()) };
    auth::check_csrf(&parts.headers, &parts.uri, host.is_https(&parts))?;
    session::touch(store, cookie, &session, &console.policy, now).await?;
    let tenants = session::tenants(store).await?;
    Ok(axum::Json(session_answer(&session, &tenants, &console.policy)).into_response())
}

/// `DELETE /console/session`: log out; 204 with or without a session.
pub async fn logout<H: ConsoleHost>(State(host): State<H>, request: Request) -> Response {
    finish(logout_inner(&host, request).await)
}

async fn logout_inner<H: ConsoleHost>(host: &H, request: Request) -> Result<Response, Failure> {
    let (parts, _body) = request.into_parts();
    let https = host.is_https(&parts);
    auth::check_csrf(&parts.headers, &parts.uri, https)?;
    if let Some(cookie) = auth::session_cookie(&parts.headers) {
        session::end(host.console_store(), cookie).await?;
    }
    Ok(with_cookie(StatusCode::NO_CONTENT.into_response(), &clear_cookie(https)))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn the_cookie_says_what_api_md_says() {
        let policy = SessionPolicy::default();
        assert_eq!(
            set_cookie("v", &policy, false),
            "memgate_console=v; Path=/; HttpOnly; SameSite=Strict; Max-Age=43200"
        );
        assert!(set_cookie("v", &policy, true).ends_with("; Max-Age=43200; Secure"));
        assert_eq!(clear_cookie(false), "memgate_console=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0");
    }

    #[test]
    fn the_actor_follows_the_header_rule() {
        assert_eq!(session_actor(&json!({})).unwrap(), "console");
        assert_eq!(session_actor(&json!({"actor": ""})).unwrap(), "console");
        assert_eq!(session_actor(&json!({"actor": "alice.b-1"})).unwrap(), "console:alice.b-1");
        assert!(session_actor(&json!({"actor": "alice smith"})).is_err());
        assert!(session_actor(&json!({"actor": "a".repeat(65)})).is_err());
        assert!(session_actor(&json!({"actor": 7})).is_err());
    }
}
