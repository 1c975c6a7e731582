//! Release rollout state and its history in SQL.

use super::{Store, StoreError};
use serde_json::Value;
use sqlx::Row;

/// One entry of the rollout history.
#[derive(Debug, Clone)]
pub struct RolloutChange {
    pub name: String,
    pub action: String,
    pub actor: String,
    pub reason: String,
    pub at_ms: i64,
    pub before: Option<Value>,
    pub after: Option<Value>,
}

impl Store {
    /// Every release's stored state, and the highest version (0 when nothing is stored).
    pub async fn rollout_states(&self) -> Result<(Vec<(String, Value)>, i64), StoreError> {
        let rows = sqlx::query("SELECT name, state_json, version FROM release_rollout ORDER BY name")
            .fetch_all(self.pool())
            .await?;
        let mut version = 0;
        let mut states = Vec::with_capacity(rows.len());
        for row in rows {
            let text: String = row.try_get("state_json")?;
            let state = serde_json::from_str(&text)
                .map_err(|e| StoreError::Corrupt(format!("release state: {e}")))?;
            version = version.max(row.try_get::<i64, _>("version")?);
            states.push((row.try_get("name")?, state));
        }
        Ok((states, version))
    }

    /// The highest rollout version: replicas poll this to notice a change.
    pub async fn rollout_version(&self) -> Result<i64, StoreError> {
        let row = sqlx::query("SELECT COALESCE(MAX(version), 0) FROM release_rollout")
            .fetch_one(self.pool())
            .await?;
        Ok(row.try_get(0)?)
    }

    /// Writes new states for some releases and one history entry per change, in one transaction.
    pub async fn write_rollout(
        &self,
        changes: &[(String, Value)],
        history: &[RolloutChange],
    ) -> Result<i64, StoreError> {
        let mut tx = self.begin_write().await?;
        let version: i64 = sqlx::query("SELECT COALESCE(MAX(version), 0) + 1 FROM release_rollout")
            .fetch_one(&mut *tx)
            .await?
            .try_get(0)?;
        for (name, state) in changes {
            sqlx::query("DELETE FROM release_rollout WHERE name = $1").bind(name).execute(&mut *tx).await?;
            sqlx::query(
                "INSERT INTO release_rollout (name, state_json, version, updated_at) VALUES ($1, $2, $3, $4)",
            )
            .bind(name)
            .bind(state.to_string())
            .bind(version)
            .bind(crate::clock::now_ms())
            .execute(&mut *tx)
            .await?;
        }
        for change in history {
            sqlx::query(
                "INSERT INTO release_history (id, name, action, actor, reason, at, before_json, after_json) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            )
            .bind(uuid::Uuid::new_v4().simple().to_string())
            .bind(&change.name)
            .bind(&change.action)
            .bind(&change.actor)
            .bind(&change.reason)
            .bind(change.at_ms)
            .bind(change.before.as_ref().map(Value::to_string))
            .bind(change.after.as_ref().map(Value::to_string))
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(version)
    }

    pub async fn rollout_history(&self, name: &str) -> Result<Vec<RolloutChange>, StoreError> {
        let rows = sqlx::query(
            "SELECT name, action, actor, reason, at, before_json, after_json FROM release_history \
             WHERE name = $1 ORDER BY at, id",
        )
        .bind(name)
        .fetch_all(self.pool())
        .await?;
        let json = |text: Option<String>| text.and_then(|t| serde_json::from_str(&t).ok());
        rows.iter()
            .map(|row| {
                Ok(RolloutChange {
                    name: row.try_get("name")?,
                    action: row.try_get("action")?,
                    actor: row.try_get("actor")?,
                    reason: row.try_get("reason")?,
                    at_ms: row.try_get("at")?,
                    before: json(row.try_get("before_json")?),
                    after: json(row.try_get("after_json")?),
                })
            })
            .collect()
    }
}
