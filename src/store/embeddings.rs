//! Record embeddings in SQL, keyed by tenant and record id, tagged with the model that made them.

use super::{Store, StoreError};
use sqlx::Row;
use std::collections::HashMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

impl Store {
    /// Stores one record's embedding (`put_embeddings` of one).
    pub async fn put_embedding(
        &self,
        tenant: &str,
        id: &str,
        model_id: &str,
        vector: &[f32],
    ) -> Result<(), StoreError> {
        self.put_embeddings(model_id, &[(tenant, id, vector)]).await
    }

    /// Stores many records' embeddings in one transaction (a backfill's batch): one commit and a
    /// few multi-row statements, not two statements per record. `(tenant, id, vector)`; a record
    /// deleted meanwhile keeps no embedding.
    pub async fn put_embeddings(
        &self,
        model_id: &str,
        items: &[(&str, &str, &[f32])],
    ) -> Result<(), StoreError> {
        if items.is_empty() {
            return Ok(());
        }
        let mut tx = self.begin_write().await?;
        let mut by_tenant: Vec<(&str, Vec<IdVector<'_>>)> = Vec::new();
        for (tenant, id, vector) in items {
            match by_tenant.iter_mut().find(|(t, _)| t == tenant) {
                Some((_, rows)) => rows.push((id, vector)),
                None => by_tenant.push((tenant, vec![(id, vector)])),
            }
        }
        for (tenant, rows) in &by_tenant {
            for part in rows.chunks(500) {
                let ids = (2..part.len() + 2).map(|i| format!("${i}")).collect::<Vec<_>>().join(", ");
                let sql = format!("DELETE FROM memory_embeddings WHERE tenant = $1 AND memory_id IN ({ids})");
                let mut query = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(*tenant);
                for (id, _) in part {
                    query = query.bind(*id);
                }
                query.execute(&mut *tx).await?;

                let values = (0..part.len())
                    .map(|r| format!("(${}, ${}, ${}, ${})", 4 * r + 1, 4 * r + 2, 4 * r + 3, 4 * r + 4))
                    .collect::<Vec<_>>()
                    .join(", ");
                let sql = format!(
                    "INSERT INTO memory_embeddings (tenant, memory_id, model_id, vector) VALUES {values}"
                );
                let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
                for (id, vector) in part {
                    query = query.bind(*tenant).bind(*id).bind(model_id).bind(encode(vector));
                }
                query.execute(&mut *tx).await?;

                // Records deleted while they were being embedded keep no embedding.
                let sql = format!(
                    "DELETE FROM memory_embeddings WHERE tenant = $1 AND memory_id IN ({ids}) AND NOT EXISTS \
                     (SELECT 1 FROM memories m WHERE m.tenant = memory_embeddings.tenant AND m.id = memory_embeddings.memory_id)"
                );
                let mut query = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(*tenant);
                for (id, _) in part {
                    query = query.bind(*id);
                }
                query.execute(&mut *tx).await?;
            }
        }
        tx.commit().await?;
        Ok(())
    }

    /// How far an import's records are embedded by `model_id`: (active records it added that are
    /// still there, of them embedded). Paused and archived records are never recalled, so they are
    /// embedded only once activated.
    pub async fn import_embedded(
        &self,
        tenant: &str,
        import_id: &str,
        model_id: &str,
    ) -> Result<(i64, i64), StoreError> {
        let row = sqlx::query(
            "SELECT COUNT(*) AS total, COUNT(e.memory_id) AS embedded FROM memories m \
             LEFT JOIN memory_embeddings e ON e.tenant = m.tenant AND e.memory_id = m.id AND e.model_id = $3 \
             WHERE m.tenant = $1 AND m.import_id = $2 AND m.status = 'active'",
        )
        .bind(tenant)
        .bind(import_id)
        .bind(model_id)
        .fetch_one(self.pool())
        .await?;
        Ok((row.try_get("total")?, row.try_get("embedded")?))
    }

    /// Every embedding made by `model_id`, by (tenant, record id).
    pub async fn embeddings_of_model(
        &self,
        model_id: &str,
    ) -> Result<HashMap<(String, String), Vec<f32>>, StoreError> {
        let rows = sqlx::query("SELECT tenant, memory_id, vector FROM memory_embeddings WHERE model_id = $1")
            .bind(model_id)
            .fetch_all(self.pool())
            .await?;
        let mut out = HashMap::with_capacity(rows.len());
        for row in rows {
            let text: String = row.try_get("vector")?;
            let vector = decode(&text)
                .ok_or_else(|| StoreError::Corrupt("an embedding is not valid base64 f32".into()))?;
            out.insert((row.try_get("tenant")?, row.try_get("memory_id")?), vector);
        }
        Ok(out)
    }

    /// Up to `limit` records after `after` in (tenant, id) order, each with its embedding by
    /// `model_id` if one is stored and its `line_tokens` if kept: the startup load reads the
    /// store page by page with this, so neither the database nor the replica holds every row
    /// (and every vector's text) at once, and the index is built from stored vectors and counts
    /// without embedding or counting anything.
    pub async fn records_page(
        &self,
        model_id: &str,
        after: (&str, &str),
        limit: i64,
    ) -> Result<Vec<(crate::record::Record, Option<Vec<f32>>, Option<u32>)>, StoreError> {
        let sql = format!(
            "SELECT c.*, e.vector AS embedding FROM (SELECT {}, line_tokens FROM memories \
             WHERE tenant > $2 OR (tenant = $2 AND id > $3) ORDER BY tenant, id LIMIT $4) c \
             LEFT JOIN memory_embeddings e ON e.tenant = c.tenant AND e.memory_id = c.id AND e.model_id = $1 \
             ORDER BY c.tenant, c.id",
            super::memories::COLUMNS
        );
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(model_id)
            .bind(after.0)
            .bind(after.1)
            .bind(limit)
            .fetch_all(self.pool())
            .await?;
        let mut out = Vec::with_capacity(rows.len());
        for row in &rows {
            let record = super::memories::record_from_row(row)?;
            let text: Option<String> = row.try_get("embedding")?;
            let vector = match text {
                None => None,
                Some(text) => Some(
                    decode(&text)
                        .ok_or_else(|| StoreError::Corrupt("an embedding is not valid base64 f32".into()))?,
                ),
            };
            let tokens: Option<i64> = row.try_get("line_tokens")?;
            out.push((record, vector, tokens.and_then(|t| u32::try_from(t).ok())));
        }
        Ok(out)
    }

    /// One record's embedding by `model_id`, if stored.
    pub async fn embedding(
        &self,
        tenant: &str,
        id: &str,
        model_id: &str,
    ) -> Result<Option<Vec<f32>>, StoreError> {
        let row = sqlx::query(
            "SELECT vector FROM memory_embeddings WHERE tenant = $1 AND memory_id = $2 AND model_id = $3",
        )
        .bind(tenant)
        .bind(id)
        .bind(model_id)
        .fetch_optional(self.pool())
        .await?;
        match row {
            None => Ok(None),
            Some(row) => {
                let text: String = row.try_get("vector")?;
                decode(&text)
                    .map(Some)
                    .ok_or_else(|| StoreError::Corrupt("an embedding is not valid base64 f32".into()))
            }
        }
    }

    /// The stored embeddings of `ids` as (model id, base64 of little-endian f32) by record id, as
    /// stored: an export carries them without decoding (byte-identical through a round trip).
    pub async fn stored_embeddings(
        &self,
        tenant: &str,
        ids: &[&str],
    ) -> Result<HashMap<String, (String, String)>, StoreError> {
        let mut out = HashMap::with_capacity(ids.len());
        for chunk in ids.chunks(500) {
            let list = (2..chunk.len() + 2).map(|i| format!("${i}")).collect::<Vec<_>>().join(", ");
            let sql = format!(
                "SELECT memory_id, model_id, vector FROM memory_embeddings WHERE tenant = $1 AND memory_id IN ({list})"
            );
            let mut query = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(tenant);
            for id in chunk {
                query = query.bind(*id);
            }
            for row in query.fetch_all(self.pool()).await? {
                out.insert(row.try_get("memory_id")?, (row.try_get("model_id")?, row.try_get("vector")?));
            }
        }
        Ok(out)
    }

    /// Drops embeddings whose record is gone (deleted, forgotten, undone imports).
    pub async fn prune_embeddings(&self) -> Result<u64, StoreError> {
        let done = sqlx::query(
            "DELETE FROM memory_embeddings WHERE NOT EXISTS (SELECT 1 FROM memories m \
             WHERE m.tenant = memory_embeddings.tenant AND m.id = memory_embeddings.memory_id)",
        )
        .execute(self.pool())
        .await?;
        Ok(done.rows_affected())
    }
}

/// One record's id and vector, of a tenant's share of a batch.
type IdVector<'a> = (&'a str, &'a [f32]);

/// Little-endian f32 bytes as base64: how a vector is stored, and how an export carries it.
pub fn encode(vector: &[f32]) -> String {
    let bytes: Vec<u8> = vector.iter().flat_map(|x| x.to_le_bytes()).collect();
    STANDARD.encode(bytes)
}

fn decode(text: &str) -> Option<Vec<f32>> {
    let bytes = STANDARD.decode(text).ok()?;
    if bytes.len() % 4 != 0 {
        return None;
    }
    Some(bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect())
}

#[cfg(test)]
mod tests {
    #[test]
    fn vectors_round_trip_through_base64() {
        for len in [0, 1, 2, 3, 384] {
            let v: Vec<f32> = (0..len).map(|i| i as f32 * -0.37 + 0.001).collect();
            assert_eq!(super::decode(&super::encode(&v)).unwrap(), v);
        }
        assert!(super::decode("!!!!").is_none());
    }
}
