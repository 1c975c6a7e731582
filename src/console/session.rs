//! Console sessions: `POST /console/session` trades the admin (or viewer) token for a cookie,
//! `GET` says who is logged in, `DELETE` logs out (`console/API.md` §2).
//!
//! The cookie carries 32 random bytes (base64url, 43 characters); the store keeps only their
//! SHA-256 (`console_sessions`), never the value, so a copy of the database opens no session, and
//! every replica behind a load balancer accepts the same cookie and sees a logout at once. A
//! session ends `lifetime` after login (12 h) or `idle_timeout` after its last request (1 h),
//! whichever comes first. `last_seen_at` is written at most once per `touch_after` (60 s) per
//! session, not on every request, so a console polling charts costs one read per call and one
//! write a minute; the idle timeout is exact to within that minute.
//!
//! A session is bound to the token that opened it: its row keeps that token's fingerprint
//! (`AdminTokens::fingerprint`, an HMAC under the deployment's session key), and `find` takes it
//! as live only while it is the fingerprint of the token configured now for the session's role;
//! any other is deleted on sight. So a rotated admin token, or a viewer token removed, ends the
//! sessions it opened on every replica that runs with the new configuration, and `memgate serve`
//! deletes them all at start (`end_unbound`). `end_all` (`memgate console logout-all`) ends every
//! session at once.

use super::ConsoleHost;
use super::auth::{self, AdminTokens, ConsoleAuth, Refusal, Role, SESSION_COOKIE};
use crate::clock::{format_ms, now_ms};
use crate::error::{ApiError, Code, ErrorKind};
use crate::http::console::assets::security_headers;
use crate::store::{Store, StoreError};
use axum::extract::{Request, State};
use axum::http::header::{CACHE_CONTROL, SET_COOKIE};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use serde_json::{Value, json};
use sqlx::Row;
use std::time::Duration;
use subtle::ConstantTimeEq;

/// The largest login body read: a token and an actor name.
const MAX_LOGIN_BODY_BYTES: u64 = 16 * 1024;

/// How long sessions last.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionPolicy {
    /// From login to the end, whatever happens (`Max-Age` of the cookie).
    pub lifetime: Duration,
    /// Without a request for this long, the session ends.
    pub idle_timeout: Duration,
    /// `last_seen_at` is written when it is at least this old.
    pub touch_after: Duration,
}

impl Default for SessionPolicy {
    fn default() -> Self {
        SessionPolicy {
            lifetime: Duration::from_secs(12 * 3600),
            idle_timeout: Duration::from_secs(3600),
            touch_after: Duration::from_secs(60),
        }
    }
}

fn ms(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// A live session as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    pub role: Role,
    /// `console:<actor>` or `console`: the actor of every change made through the session.
    pub actor: String,
    pub created_at_ms: i64,
    pub expires_at_ms: i64,
    pub last_seen_at_ms: i64,
}

/// Whether `value` has the shape of a cookie value this module makes: 43 base64url characters.
pub fn is_cookie_value(value: &str) -> bool {
    value.len() == 43 && value.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// 32 bytes from the operating system's generator, base64url without padding.
pub fn new_cookie_value() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
}

/// What the store keys a session by: the SHA-256 of the cookie value, hex.
pub fn cookie_hash(value: &str) -> String {
    super::sha256_hex(value.as_bytes())
}

/// Stores a new session of `role`, bound to the token configured now for it, and returns the
/// cookie value that opens it. The caller has checked that the presented token is that one.
pub async fn create(
    store: &Store,
    auth: &ConsoleAuth,
    role: Role,
    actor: &str,
    now_ms: i64,
) -> Result<(String, Session), StoreError> {
    let Some(fingerprint) = auth.tokens.fingerprint(role) else {
        return Err(StoreError::Corrupt(format!("no {} token to bind a session to", role.as_str())));
    };
    let value = new_cookie_value()
        .map_err(|err| StoreError::Corrupt(format!("no random bytes for a session: {err}")))?;
    let session = Session {
        role,
        actor: actor.to_owned(),
        created_at_ms: now_ms,
        expires_at_ms: now_ms.saturating_add(ms(auth.policy.lifetime)),
        last_seen_at_ms: now_ms,
    };
    sqlx::query(
        "INSERT INTO console_sessions \
         (token_hash, role, actor, created_at, expires_at, last_seen_at, token_fingerprint) \
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(cookie_hash(&value))
    .bind(role.as_str())
    .bind(&session.actor)
    .bind(session.created_at_ms)
    .bind(session.expires_at_ms)
    .bind(session.last_seen_at_ms)
    .bind(fingerprint)
    .execute(store.pool())
    .await?;
    Ok((value, session))
}

/// The live session `cookie` opens at `now_ms`, if any: not past its end, not idle too long, and
/// opened by the token configured now for its role. A session of another token (rotated, or a
/// viewer token since removed) is deleted.
pub async fn find(
    store: &Store,
    cookie: &str,
    auth: &ConsoleAuth,
    now_ms: i64,
) -> Result<Option<Session>, StoreError> {
    let row = sqlx::query(
        "SELECT role, actor, created_at, expires_at, last_seen_at, token_fingerprint \
         FROM console_sessions WHERE token_hash = $1",
    )
    .bind(cookie_hash(cookie))
    .fetch_optional(store.pool())
    .await?;
    let Some(row) = row else { return Ok(None) };
    let role: String = row.try_get("role")?;
    let Some(role) = Role::parse(&role) else { return Ok(None) };
    let stored: String = row.try_get("token_fingerprint")?;
    let bound = auth
        .tokens
        .fingerprint(role)
        .is_some_and(|current| bool::from(current.as_bytes().ct_eq(stored.as_bytes())));
    if !bound {
        end(store, cookie).await?;
        return Ok(None);
    }
    let session = Session {
        role,
        actor: row.try_get("actor")?,
        created_at_ms: row.try_get("created_at")?,
        expires_at_ms: row.try_get("expires_at")?,
        last_seen_at_ms: row.try_get("last_seen_at")?,
    };
    let idle_until = session.last_seen_at_ms.saturating_add(ms(auth.policy.idle_timeout));
    Ok((now_ms < session.expires_at_ms && now_ms < idle_until).then_some(session))
}

/// Notes activity on `session` (found by `find` just now), if its `last_seen_at` is older than
/// `touch_after`.
pub async fn touch(
    store: &Store,
    cookie: &str,
    session: &Session,
    policy: &SessionPolicy,
    now_ms: i64,
) -> Result<(), StoreError> {
    if now_ms.saturating_sub(session.last_seen_at_ms) < ms(policy.touch_after) {
        return Ok(());
    }
    sqlx::query("UPDATE console_sessions SET last_seen_at = $1 WHERE token_hash = $2 AND last_seen_at < $1")
        .bind(now_ms)
        .bind(cookie_hash(cookie))
        .execute(store.pool())
        .await?;
    Ok(())
}

/// Deletes the session `cookie` opens (logout). Nothing to delete is fine.
pub async fn end(store: &Store, cookie: &str) -> Result<(), StoreError> {
    sqlx::query("DELETE FROM console_sessions WHERE token_hash = $1")
        .bind(cookie_hash(cookie))
        .execute(store.pool())
        .await?;
    Ok(())
}

/// Deletes every session not opened by the token configured now for its role (and, with the
/// admin API off, every session): `memgate serve` does at start, so that a rotated token's
/// sessions are gone before the first request. Returns how many.
pub async fn end_unbound(store: &Store, tokens: &AdminTokens) -> Result<u64, StoreError> {
    // A fingerprint is 64 hex digits; "-" matches no row (not even the '' of rows older than
    // fingerprints), where a NULL would make the condition unknown and keep every row.
    let done = sqlx::query(
        "DELETE FROM console_sessions WHERE NOT ( \
             (role = 'admin' AND token_fingerprint = $1) OR (role = 'viewer' AND token_fingerprint = $2))",
    )
    .bind(tokens.fingerprint(Role::Admin).unwrap_or("-"))
    .bind(tokens.fingerprint(Role::Viewer).unwrap_or("-"))
    .execute(store.pool())
    .await?;
    Ok(done.rows_affected())
}

/// Deletes every session (`memgate console logout-all`): every console is logged out at its next
/// request, on every replica. Returns how many there were.
pub async fn end_all(store: &Store) -> Result<u64, StoreError> {
    let done = sqlx::query("DELETE FROM console_sessions").execute(store.pool()).await?;
    Ok(done.rows_affected())
}

/// Deletes sessions that have ended (past their end, or idle too long). Every login does.
pub async fn prune(store: &Store, policy: &SessionPolicy, now_ms: i64) -> Result<u64, StoreError> {
    let idle_since = now_ms.saturating_sub(ms(policy.idle_timeout));
    let done = sqlx::query("DELETE FROM console_sessions WHERE expires_at <= $1 OR last_seen_at <= $2")
        .bind(now_ms)
        .bind(idle_since)
        .execute(store.pool())
        .await?;
    Ok(done.rows_affected())
}

/// The tenants that hold records or keys, sorted, `default` always among them: the console's
/// tenant picker. Records are walked by their primary key's first column one tenant at a time
/// (a recursive query: one index seek per tenant), so a store of a million records answers as fast
/// as one of ten.
pub async fn tenants(store: &Store) -> Result<Vec<String>, StoreError> {
    let rows = sqlx::query(
        "WITH RECURSIVE t(tenant) AS ( \
             SELECT MIN(tenant) FROM memories \
             UNION ALL \
             SELECT (SELECT MIN(m.tenant) FROM memories m WHERE m.tenant > t.tenant) FROM t WHERE t.tenant IS NOT NULL \
         ) \
         SELECT tenant FROM t WHERE tenant IS NOT NULL \
         UNION SELECT DISTINCT tenant FROM gateway_keys",
    )
    .fetch_all(store.pool())
    .await?;
    let mut tenants = vec![crate::identity::DEFAULT_TENANT.to_owned()];
    for row in rows {
        tenants.push(row.try_get(0)?);
    }
    tenants.sort();
    tenants.dedup();
    Ok(tenants)
}

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

fn too_many_failures(wait: u64) -> ApiError {
    ApiError::coded(
        Code::TooManyFailures,
        format!("too many failed admin authentications from this address; retry in {wait} s"),
    )
    .with_retry_after(wait)
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
    if let Err(err) = prune(store, &console.policy, now).await {
        tracing::warn!(error = %err, "could not delete ended console sessions");
    }
    let (cookie, session) = create(store, console, role, &actor, now).await?;
    let tenants = tenants(store).await?;
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
    let Some(session) = find(store, cookie, console, now).await? else { return Ok(logged_out()) };
    auth::check_csrf(&parts.headers, &parts.uri, host.is_https(&parts))?;
    touch(store, cookie, &session, &console.policy, now).await?;
    let tenants = tenants(store).await?;
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
        end(host.console_store(), cookie).await?;
    }
    Ok(with_cookie(StatusCode::NO_CONTENT.into_response(), &clear_cookie(https)))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn cookie_values_are_43_base64url_characters_and_differ() {
        let a = new_cookie_value().unwrap();
        let b = new_cookie_value().unwrap();
        assert!(is_cookie_value(&a) && is_cookie_value(&b), "{a} {b}");
        assert_ne!(a, b);
        assert_eq!(cookie_hash(&a).len(), 64);
        assert!(!is_cookie_value(&format!("{}=", &a[..42])));
    }

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
