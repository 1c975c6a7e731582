//! The records a dormancy rule reaches (`memory::dormancy`): active records of one type, not
//! pinned (priority 5), neither written nor used (injected or read by a tool, `last_accessed_at`)
//! since a moment. Read a bounded page at a time, in a stable order, so a sweep over a large
//! store never holds it all.

use super::memories::{COLUMNS, record_from_row};
use super::{Store, StoreError};
use crate::record::Record;

/// Priority of a pinned record: dormancy never touches it.
pub const PINNED_PRIORITY: i64 = 5;

impl Store {
    /// Up to `limit` active, unpinned records of `record_type` untouched since `idle_since_ms`,
    /// in one tenant or (`None`) in all, ordered by tenant and id after `after` (a page cursor).
    pub async fn dormancy_candidates(
        &self,
        tenant: Option<&str>,
        record_type: &str,
        idle_since_ms: i64,
        after: Option<(&str, &str)>,
        limit: u32,
    ) -> Result<Vec<Record>, StoreError> {
        let (after_tenant, after_id) = after.unwrap_or(("", ""));
        // `$1 = ''` turns the tenant condition off without building the statement from pieces.
        let sql = format!(
            "SELECT {COLUMNS} FROM memories WHERE status = 'active' AND record_type = $1 \
             AND priority < {PINNED_PRIORITY} AND updated_at < $2 \
             AND (last_accessed_at IS NULL OR last_accessed_at < $2) \
             AND ($3 = '' OR tenant = $3) AND (tenant > $4 OR (tenant = $4 AND id > $5)) \
             ORDER BY tenant, id LIMIT {}",
            limit.clamp(1, 1000)
        );
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(record_type)
            .bind(idle_since_ms)
            .bind(tenant.unwrap_or(""))
            .bind(after_tenant)
            .bind(after_id)
            .fetch_all(self.pool())
            .await?;
        rows.iter().map(record_from_row).collect()
    }
}
