//! Console sessions as stored (`console_sessions`): one row per session, keyed by the SHA-256 of
//! its cookie value, never the value. When a session is live, and which token it is bound to, is
//! `console::session`'s to decide; these are its queries.

use super::{Store, StoreError};
use sqlx::Row;

/// A session's row, as written at login and read at every request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRow {
    /// `admin` or `viewer`.
    pub role: String,
    pub actor: String,
    pub created_at_ms: i64,
    pub expires_at_ms: i64,
    pub last_seen_at_ms: i64,
    /// The fingerprint of the token that opened the session.
    pub token_fingerprint: String,
}

impl Store {
    /// Stores a new session under `token_hash`.
    pub async fn insert_session(&self, token_hash: &str, row: &SessionRow) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO console_sessions \
             (token_hash, role, actor, created_at, expires_at, last_seen_at, token_fingerprint) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(token_hash)
        .bind(&row.role)
        .bind(&row.actor)
        .bind(row.created_at_ms)
        .bind(row.expires_at_ms)
        .bind(row.last_seen_at_ms)
        .bind(&row.token_fingerprint)
        .execute(self.pool())
        .await?;
        Ok(())
    }

    /// The session stored under `token_hash`, live or not.
    pub async fn session(&self, token_hash: &str) -> Result<Option<SessionRow>, StoreError> {
        let row = sqlx::query(
            "SELECT role, actor, created_at, expires_at, last_seen_at, token_fingerprint \
             FROM console_sessions WHERE token_hash = $1",
        )
        .bind(token_hash)
        .fetch_optional(self.pool())
        .await?;
        let Some(row) = row else { return Ok(None) };
        Ok(Some(SessionRow {
            role: row.try_get("role")?,
            actor: row.try_get("actor")?,
            created_at_ms: row.try_get("created_at")?,
            expires_at_ms: row.try_get("expires_at")?,
            last_seen_at_ms: row.try_get("last_seen_at")?,
            token_fingerprint: row.try_get("token_fingerprint")?,
        }))
    }

    /// Moves the session's `last_seen_at` to `now_ms`, never back.
    pub async fn touch_session(&self, token_hash: &str, now_ms: i64) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE console_sessions SET last_seen_at = $1 WHERE token_hash = $2 AND last_seen_at < $1",
        )
        .bind(now_ms)
        .bind(token_hash)
        .execute(self.pool())
        .await?;
        Ok(())
    }

    /// Deletes the session stored under `token_hash`. Nothing to delete is fine.
    pub async fn delete_session(&self, token_hash: &str) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM console_sessions WHERE token_hash = $1")
            .bind(token_hash)
            .execute(self.pool())
            .await?;
        Ok(())
    }

    /// Deletes every session but the admin sessions bound to `admin_fingerprint` and the viewer
    /// sessions bound to `viewer_fingerprint` (`None`: no session of that role is kept). Returns
    /// how many.
    pub async fn delete_sessions_bound_elsewhere(
        &self,
        admin_fingerprint: Option<&str>,
        viewer_fingerprint: Option<&str>,
    ) -> Result<u64, StoreError> {
        // A fingerprint is 64 hex digits; "-" matches no row (not even the '' of rows older than
        // fingerprints), where a NULL would make the condition unknown and keep every row.
        let done = sqlx::query(
            "DELETE FROM console_sessions WHERE NOT ( \
                 (role = 'admin' AND token_fingerprint = $1) OR (role = 'viewer' AND token_fingerprint = $2))",
        )
        .bind(admin_fingerprint.unwrap_or("-"))
        .bind(viewer_fingerprint.unwrap_or("-"))
        .execute(self.pool())
        .await?;
        Ok(done.rows_affected())
    }

    /// Deletes every session. Returns how many there were.
    pub async fn delete_all_sessions(&self) -> Result<u64, StoreError> {
        let done = sqlx::query("DELETE FROM console_sessions").execute(self.pool()).await?;
        Ok(done.rows_affected())
    }

    /// Deletes the sessions past their end at `now_ms`, or last seen at `idle_since_ms` or before.
    /// Returns how many.
    pub async fn delete_ended_sessions(&self, now_ms: i64, idle_since_ms: i64) -> Result<u64, StoreError> {
        let done = sqlx::query("DELETE FROM console_sessions WHERE expires_at <= $1 OR last_seen_at <= $2")
            .bind(now_ms)
            .bind(idle_since_ms)
            .execute(self.pool())
            .await?;
        Ok(done.rows_affected())
    }
}
