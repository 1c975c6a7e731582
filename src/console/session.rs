//! Console sessions: what a login opens, and when a session is live (`console/API.md` §2). The
//! endpoint that trades a token for a cookie is the edge's (`http::console::session`); the rows are
//! the store's (`store::sessions`).
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

use super::tokens::{AdminTokens, Role};
use crate::store::sessions::SessionRow;
use crate::store::{Store, StoreError};
use base64::Engine as _;
use std::time::Duration;
use subtle::ConstantTimeEq;

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

/// The tokens and the session rules: what a session is opened and checked against.
pub struct ConsoleAuth {
    pub tokens: AdminTokens,
    pub policy: SessionPolicy,
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
    crate::hash::sha256_hex(value)
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
    let row = SessionRow {
        role: role.as_str().to_owned(),
        actor: session.actor.clone(),
        created_at_ms: session.created_at_ms,
        expires_at_ms: session.expires_at_ms,
        last_seen_at_ms: session.last_seen_at_ms,
        token_fingerprint: fingerprint.to_owned(),
    };
    store.insert_session(&cookie_hash(&value), &row).await?;
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
    let Some(row) = store.session(&cookie_hash(cookie)).await? else { return Ok(None) };
    let Some(role) = Role::parse(&row.role) else { return Ok(None) };
    let bound = auth
        .tokens
        .fingerprint(role)
        .is_some_and(|current| bool::from(current.as_bytes().ct_eq(row.token_fingerprint.as_bytes())));
    if !bound {
        end(store, cookie).await?;
        return Ok(None);
    }
    let session = Session {
        role,
        actor: row.actor,
        created_at_ms: row.created_at_ms,
        expires_at_ms: row.expires_at_ms,
        last_seen_at_ms: row.last_seen_at_ms,
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
    store.touch_session(&cookie_hash(cookie), now_ms).await
}

/// Deletes the session `cookie` opens (logout). Nothing to delete is fine.
pub async fn end(store: &Store, cookie: &str) -> Result<(), StoreError> {
    store.delete_session(&cookie_hash(cookie)).await
}

/// Deletes every session not opened by the token configured now for its role (and, with the
/// admin API off, every session): `memgate serve` does at start, so that a rotated token's
/// sessions are gone before the first request. Returns how many.
pub async fn end_unbound(store: &Store, tokens: &AdminTokens) -> Result<u64, StoreError> {
    store
        .delete_sessions_bound_elsewhere(tokens.fingerprint(Role::Admin), tokens.fingerprint(Role::Viewer))
        .await
}

/// Deletes every session (`memgate console logout-all`): every console is logged out at its next
/// request, on every replica. Returns how many there were.
pub async fn end_all(store: &Store) -> Result<u64, StoreError> {
    store.delete_all_sessions().await
}

/// Deletes sessions that have ended (past their end, or idle too long). Every login does.
pub async fn prune(store: &Store, policy: &SessionPolicy, now_ms: i64) -> Result<u64, StoreError> {
    store.delete_ended_sessions(now_ms, now_ms.saturating_sub(ms(policy.idle_timeout))).await
}

/// The tenants that hold records or keys, sorted, `default` always among them: the console's
/// tenant picker.
pub async fn tenants(store: &Store) -> Result<Vec<String>, StoreError> {
    let mut tenants = store.tenants().await?;
    tenants.push(crate::identity::DEFAULT_TENANT.to_owned());
    tenants.sort();
    tenants.dedup();
    Ok(tenants)
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
}
