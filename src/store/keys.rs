//! Gateway keys in SQL. Lookups go by the key's public id; the secret is compared by its hash.

use super::{Store, StoreError};
use serde_json::Value;
use sqlx::Row;
use sqlx::any::AnyRow;

/// A stored key: everything but the secret.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyRecord {
    pub tenant: String,
    pub id: String,
    pub name: String,
    pub secret_sha256: String,
    pub scopes: Vec<String>,
    pub permissions: Vec<String>,
    pub rate_limit_per_minute: Option<u32>,
    pub created_at_ms: i64,
    pub revoked_at_ms: Option<i64>,
}

const COLUMNS: &str = "tenant, id, name, secret_sha256, scopes_json, permissions_json, rate_limit_per_minute, created_at, revoked_at";

impl Store {
    pub async fn insert_key(&self, key: &KeyRecord) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO gateway_keys (tenant, id, name, secret_sha256, scopes_json, permissions_json, \
             rate_limit_per_minute, created_at, revoked_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, NULL)",
        )
        .bind(&key.tenant)
        .bind(&key.id)
        .bind(&key.name)
        .bind(&key.secret_sha256)
        .bind(Value::from(key.scopes.clone()).to_string())
        .bind(Value::from(key.permissions.clone()).to_string())
        .bind(key.rate_limit_per_minute.map(i64::from))
        .bind(key.created_at_ms)
        .execute(self.pool())
        .await?;
        Ok(())
    }

    /// The key with this public id, revoked or not, in any tenant (the id is global).
    pub async fn find_key(&self, id: &str) -> Result<Option<KeyRecord>, StoreError> {
        let row =
            sqlx::query(sqlx::AssertSqlSafe(format!("SELECT {COLUMNS} FROM gateway_keys WHERE id = $1")))
                .bind(id)
                .fetch_optional(self.pool())
                .await?;
        row.as_ref().map(key_from_row).transpose()
    }

    pub async fn list_keys(&self, tenant: &str) -> Result<Vec<KeyRecord>, StoreError> {
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {COLUMNS} FROM gateway_keys WHERE tenant = $1 ORDER BY created_at, id"
        )))
        .bind(tenant)
        .fetch_all(self.pool())
        .await?;
        rows.iter().map(key_from_row).collect()
    }

    /// Revokes a key of this tenant; `NotFound` if the tenant has no such key.
    pub async fn revoke_key(&self, tenant: &str, id: &str, now_ms: i64) -> Result<(), StoreError> {
        let done = sqlx::query(
            "UPDATE gateway_keys SET revoked_at = COALESCE(revoked_at, $3) WHERE tenant = $1 AND id = $2",
        )
        .bind(tenant)
        .bind(id)
        .bind(now_ms)
        .execute(self.pool())
        .await?;
        if done.rows_affected() == 0 { Err(StoreError::NotFound) } else { Ok(()) }
    }
}

fn key_from_row(row: &AnyRow) -> Result<KeyRecord, StoreError> {
    let list = |col: &str| -> Result<Vec<String>, StoreError> {
        let text: String = row.try_get(col)?;
        serde_json::from_str(&text).map_err(|err| StoreError::Corrupt(format!("{col}: {err}")))
    };
    let limit: Option<i64> = row.try_get("rate_limit_per_minute")?;
    Ok(KeyRecord {
        tenant: row.try_get("tenant")?,
        id: row.try_get("id")?,
        name: row.try_get("name")?,
        secret_sha256: row.try_get("secret_sha256")?,
        scopes: list("scopes_json")?,
        permissions: list("permissions_json")?,
        rate_limit_per_minute: limit.and_then(|l| u32::try_from(l).ok()),
        created_at_ms: row.try_get("created_at")?,
        revoked_at_ms: row.try_get("revoked_at")?,
    })
}
