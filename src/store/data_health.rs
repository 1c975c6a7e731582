//! What the console's data health reads of one tenant's records (`console::data_health`): counts
//! the database sums itself, per type and status, and the content of the live records alone, a
//! page at a time, for the two figures only a JSON Schema can judge. No call holds the tenant's
//! records.

use super::{Backend, Store, StoreError};
use crate::record::Status;
use serde_json::Value;
use sqlx::Row;

/// The records of one type and status, counted at a moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeStatusCounts {
    pub record_type: String,
    pub status: Status,
    pub count: u64,
    /// `valid_until` after the moment.
    pub unexpired: u64,
    /// `valid_from` after the moment.
    pub not_yet_valid: u64,
    /// `access_count` 0.
    pub never_injected: u64,
}

/// What a live record's content is checked with.
#[derive(Debug, Clone, PartialEq)]
pub struct LiveContent {
    pub id: String,
    pub record_type: String,
    pub schema_version: String,
    pub content: Value,
}

fn count(row: &sqlx::any::AnyRow, column: &str) -> Result<u64, StoreError> {
    // SUM over no rows is NULL; a group has at least one row, but say what zero is anyway.
    let value: Option<i64> = row.try_get(column)?;
    u64::try_from(value.unwrap_or(0)).map_err(|_| StoreError::Corrupt(format!("{column} below zero")))
}

impl Store {
    /// The tenant's records counted by type and status at `now_ms`, in one aggregate query.
    pub async fn record_counts(
        &self,
        tenant: &str,
        now_ms: i64,
    ) -> Result<Vec<TypeStatusCounts>, StoreError> {
        let rows = sqlx::query(
            "SELECT record_type, status, COUNT(*) AS records, \
                 SUM(CASE WHEN valid_until > $2 THEN 1 ELSE 0 END) AS unexpired, \
                 SUM(CASE WHEN valid_from > $2 THEN 1 ELSE 0 END) AS not_yet_valid, \
                 SUM(CASE WHEN access_count = 0 THEN 1 ELSE 0 END) AS never_injected \
             FROM memories WHERE tenant = $1 GROUP BY record_type, status",
        )
        .bind(tenant)
        .bind(now_ms)
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|row| {
                let status: String = row.try_get("status")?;
                Ok(TypeStatusCounts {
                    record_type: row.try_get("record_type")?,
                    status: Status::parse(&status)
                        .ok_or_else(|| StoreError::Corrupt(format!("status {status}")))?,
                    count: count(row, "records")?,
                    unexpired: count(row, "unexpired")?,
                    not_yet_valid: count(row, "not_yet_valid")?,
                    never_injected: count(row, "never_injected")?,
                })
            })
            .collect()
    }

    /// The first `limit` ids, in byte order, of the tenant's live records never injected.
    pub async fn never_injected_ids(&self, tenant: &str, limit: u32) -> Result<Vec<String>, StoreError> {
        // Byte order, as Rust sorts strings: SQLite's default; PostgreSQL's default collation
        // sorts by language rules instead, so it is asked for "C".
        let sql = match self.backend() {
            Backend::Sqlite => {
                "SELECT id FROM memories WHERE tenant = $1 AND status = 'active' AND access_count = 0 \
                 ORDER BY id LIMIT $2"
            }
            Backend::Postgres => {
                "SELECT id FROM memories WHERE tenant = $1 AND status = 'active' AND access_count = 0 \
                 ORDER BY id COLLATE \"C\" LIMIT $2"
            }
        };
        let rows = sqlx::query(sql).bind(tenant).bind(i64::from(limit)).fetch_all(self.pool()).await?;
        rows.iter().map(|row| Ok(row.try_get("id")?)).collect()
    }

    /// One page of the tenant's live records' contents, after `after_id` in the database's own
    /// order of ids (the primary key's: each page is one index range), at most `limit`.
    pub async fn live_contents(
        &self,
        tenant: &str,
        after_id: Option<&str>,
        limit: u32,
    ) -> Result<Vec<LiveContent>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, record_type, schema_version, content_json FROM memories \
             WHERE tenant = $1 AND status = 'active' AND id > $2 ORDER BY id LIMIT $3",
        )
        .bind(tenant)
        // Ids are never empty: '' is before every one of them.
        .bind(after_id.unwrap_or(""))
        .bind(i64::from(limit.clamp(1, 1000)))
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|row| {
                let text: String = row.try_get("content_json")?;
                Ok(LiveContent {
                    id: row.try_get("id")?,
                    record_type: row.try_get("record_type")?,
                    schema_version: row.try_get("schema_version")?,
                    content: serde_json::from_str(&text)
                        .map_err(|err| StoreError::Corrupt(format!("content_json: {err}")))?,
                })
            })
            .collect()
    }
}
