//! Imports in bulk. A chunk of import lines is classified with three queries (ids, content
//! hashes, topics) and written with multi-row inserts (records, scopes, changelog, embeddings),
//! so a restore of a million records costs thousands of statements, not millions of round trips.
//! Everything an import adds is written in one transaction: all of it, or nothing.

use super::memories::{
    Action, COLUMNS, ImportMatch, bind_record_columns, json_text, new_record, record_from_row, search_text,
};
use super::{Store, StoreError};
use crate::record::{Envelope, Record, content_hash};
use sqlx::{Any, Row, Transaction};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// Rows per multi-row statement: at the widest row (a record, 23 columns) 9,200 parameters,
/// under both databases' limits (SQLite 32,766, PostgreSQL 65,535).
const ROWS: usize = 400;

/// One line an import adds: its id, what it holds, and the embedding of the running model it
/// carried, if any (stored as is instead of being embedded again).
pub struct NewImport {
    pub id: String,
    pub envelope: Envelope,
    pub vector: Option<Arc<[f32]>>,
    /// The record's `line_tokens`, if the caller counted them (an import does, on every core);
    /// counted here otherwise.
    pub line_tokens: Option<u32>,
}

/// `($first, …), (…)`: `rows` groups of `cols` numbered parameters.
fn values(rows: usize, cols: usize, first: usize) -> String {
    let mut sql = String::with_capacity(rows * cols * 5);
    for row in 0..rows {
        if row > 0 {
            sql.push_str(", ");
        }
        sql.push('(');
        for col in 0..cols {
            if col > 0 {
                sql.push_str(", ");
            }
            sql.push('$');
            sql.push_str(&(first + row * cols + col).to_string());
        }
        sql.push(')');
    }
    sql
}

/// `$first, …`: a list of `n` parameters for `IN (…)`.
fn list(n: usize, first: usize) -> String {
    (first..first + n).map(|i| format!("${i}")).collect::<Vec<_>>().join(", ")
}

impl Store {
    /// How each import line relates to what is stored (as `import_match` says for one), for many
    /// lines with three queries per chunk instead of up to three per line.
    pub async fn import_matches(
        &self,
        tenant: &str,
        envelopes: &[&Envelope],
    ) -> Result<Vec<ImportMatch>, StoreError> {
        let mut out = Vec::with_capacity(envelopes.len());
        let mut conn = self.pool().acquire().await?;
        for chunk in envelopes.chunks(ROWS) {
            let ids: Vec<&str> = chunk.iter().filter_map(|e| e.id.as_deref()).collect();
            let mut taken = HashSet::new();
            if !ids.is_empty() {
                let sql =
                    format!("SELECT id FROM memories WHERE tenant = $1 AND id IN ({})", list(ids.len(), 2));
                let mut query = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(tenant);
                for id in &ids {
                    query = query.bind(*id);
                }
                for row in query.fetch_all(&mut *conn).await? {
                    taken.insert(row.try_get::<String, _>("id")?);
                }
            }

            let hashes: Vec<String> =
                chunk.iter().map(|e| content_hash(&e.record_type, &e.scope, &e.content)).collect();
            let mut unique: Vec<&str> = hashes.iter().map(String::as_str).collect();
            unique.sort_unstable();
            unique.dedup();
            let sql = format!(
                "SELECT {COLUMNS}, content_hash FROM memories WHERE tenant = $1 AND content_hash IN ({})",
                list(unique.len(), 2)
            );
            let mut query = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(tenant);
            for hash in &unique {
                query = query.bind(*hash);
            }
            let mut by_hash: HashMap<String, Vec<Record>> = HashMap::new();
            for row in query.fetch_all(&mut *conn).await? {
                by_hash.entry(row.try_get("content_hash")?).or_default().push(record_from_row(&row)?);
            }

            let keys: Vec<&str> = chunk.iter().filter_map(|e| e.key.as_deref()).collect();
            let mut topics: HashMap<(String, String), String> = HashMap::new();
            if !keys.is_empty() {
                let sql = format!(
                    "SELECT id, topic_key, scope_json FROM memories WHERE tenant = $1 AND topic_key IN ({})",
                    list(keys.len(), 2)
                );
                let mut query = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(tenant);
                for key in &keys {
                    query = query.bind(*key);
                }
                for row in query.fetch_all(&mut *conn).await? {
                    topics
                        .insert((row.try_get("topic_key")?, row.try_get("scope_json")?), row.try_get("id")?);
                }
            }

            for (envelope, hash) in chunk.iter().zip(&hashes) {
                // The same order as `import_match`: the id, then the same content, then the topic.
                let found = if let Some(id) = envelope.id.as_ref().filter(|id| taken.contains(*id)) {
                    Some(id.clone())
                } else if let Some(record) = by_hash.get(hash).and_then(|records| {
                    records.iter().find(|record| {
                        record.record_type == envelope.record_type
                            && record.scope == envelope.scope
                            && record.content == envelope.content
                            && envelope.key.as_ref().is_none_or(|key| record.key.as_ref() == Some(key))
                    })
                }) {
                    Some(record.id.clone())
                } else {
                    envelope
                        .key
                        .as_ref()
                        .and_then(|key| topics.get(&(key.clone(), json_text(&envelope.scope))).cloned())
                };
                out.push(found.map_or(ImportMatch::New, ImportMatch::Existing));
            }
        }
        Ok(out)
    }

    /// Adds `records` (already known to be new) in one transaction, tagged with `import_id`.
    pub async fn apply_import(
        &self,
        tenant: &str,
        import_id: &str,
        records: &[(String, crate::record::Envelope)],
        actor: &str,
        now_ms: i64,
    ) -> Result<Vec<Record>, StoreError> {
        let lines: Vec<NewImport> = records
            .iter()
            .map(|(id, envelope)| NewImport {
                id: id.clone(),
                envelope: envelope.clone(),
                vector: None,
                line_tokens: None,
            })
            .collect();
        self.apply_import_with_vectors(tenant, import_id, &lines, "", actor, now_ms).await
    }

    /// `apply_import`, with the embeddings the lines carried (made by `model_id`) stored with
    /// them.
    pub async fn apply_import_with_vectors(
        &self,
        tenant: &str,
        import_id: &str,
        records: &[NewImport],
        model_id: &str,
        actor: &str,
        now_ms: i64,
    ) -> Result<Vec<Record>, StoreError> {
        let (mut tx, seq) = self.begin_record_write().await?;
        let mut added = Vec::with_capacity(records.len());
        for chunk in records.chunks(ROWS) {
            // An import is an operator's write: its records say so, and through whose hands
            // (the import's id is on every row already).
            let provenance =
                crate::record::Provenance::new(crate::record::WriterKind::Import, Some(actor.to_owned()));
            let rows: Vec<Record> = chunk
                .iter()
                .map(|line| {
                    let mut record = new_record(tenant, &line.id, &line.envelope, now_ms, seq);
                    record.provenance = Some(provenance.clone());
                    record
                })
                .collect();
            let tokens: Vec<u32> = chunk
                .iter()
                .zip(&rows)
                .map(|(line, record)| line.line_tokens.unwrap_or_else(|| record.line_tokens()))
                .collect();
            refuse_taken_ids(&mut tx, tenant, &rows).await?;
            insert_records(&mut tx, &rows, &tokens, import_id).await?;
            log_imports(&mut tx, tenant, &rows, actor, now_ms).await?;
            let vectors: Vec<(&str, &[f32])> = chunk
                .iter()
                .filter_map(|line| line.vector.as_deref().map(|v| (line.id.as_str(), v)))
                .collect();
            insert_embeddings(&mut tx, tenant, model_id, &vectors).await?;
            added.extend(rows);
        }
        sqlx::query("INSERT INTO memory_imports (tenant, id, actor, created_at, added, undone_at) VALUES ($1, $2, $3, $4, $5, NULL)")
            .bind(tenant)
            .bind(import_id)
            .bind(actor)
            .bind(now_ms)
            .bind(added.len() as i64)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        if let Err(err) = self.analyze_grown_tables(added.len() as i64).await {
            tracing::warn!(error = %err, "refreshing the planner's statistics after an import failed");
        }
        Ok(added)
    }

    /// Analyzes each table an import fills that changed by more than a tenth since PostgreSQL
    /// last analyzed it (autovacuum's own rule: 50 rows plus 10 %), counting the `added` records
    /// of the import just committed (the statistics' own count may not show them yet).
    /// PostgreSQL plans a lookup from the statistics a table had when last analyzed; after a
    /// large import into a table analyzed small or never, it takes `tenant = $1` for a selective
    /// condition and answers `topic_key IN (…)` by reading every row of the tenant, so each
    /// import request of a restore cost more than the one before (70,000 records in: 50 ms to
    /// 0.9 s a lookup, 210 records a second and falling). autoanalyze would catch up within its
    /// minute where it runs; this catches up at once, and where autovacuum is off. SQLite plans by
    /// the index that matches the most columns, which is the right one here without statistics.
    async fn analyze_grown_tables(&self, added: i64) -> Result<(), StoreError> {
        if self.backend() != super::Backend::Postgres {
            return Ok(());
        }
        let names = IMPORT_TABLES.iter().map(|t| format!("'{t}'")).collect::<Vec<_>>().join(", ");
        let sql = format!(
            "SELECT s.relname::text AS name, s.n_mod_since_analyze AS changed, \
             GREATEST(c.reltuples, 0)::bigint AS rows \
             FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid \
             WHERE s.relid IN (SELECT to_regclass(t) FROM unnest(ARRAY[{names}]) AS t)"
        );
        for row in sqlx::query(sqlx::AssertSqlSafe(sql)).fetch_all(self.pool()).await? {
            let (name, changed, rows): (String, i64, i64) =
                (row.try_get("name")?, row.try_get("changed")?, row.try_get("rows")?);
            // The statement names this crate's own constant, never what the database answered.
            let Some(table) = IMPORT_TABLES.iter().find(|t| **t == name) else { continue };
            if changed.max(added) > 50 + rows / 10 {
                sqlx::query(sqlx::AssertSqlSafe(format!("ANALYZE {table}"))).execute(self.pool()).await?;
            }
        }
        Ok(())
    }
}

/// The tables an import writes to (the names are this crate's own, never a caller's).
const IMPORT_TABLES: [&str; 5] =
    ["memories", "memory_scopes", "memory_changes", "memory_change_scopes", "memory_embeddings"];

async fn refuse_taken_ids(
    tx: &mut Transaction<'_, Any>,
    tenant: &str,
    rows: &[Record],
) -> Result<(), StoreError> {
    let sql =
        format!("SELECT id FROM memories WHERE tenant = $1 AND id IN ({}) ORDER BY id", list(rows.len(), 2));
    let mut query = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(tenant);
    for record in rows {
        query = query.bind(&record.id);
    }
    match query.fetch_optional(&mut **tx).await? {
        Some(row) => Err(StoreError::IdTaken(row.try_get("id")?)),
        None => Ok(()),
    }
}

async fn insert_records(
    tx: &mut Transaction<'_, Any>,
    rows: &[Record],
    line_tokens: &[u32],
    import_id: &str,
) -> Result<(), StoreError> {
    let sql = format!(
        "INSERT INTO memories (tenant, id, record_type, schema_version, scope_json, valid_from, valid_until, \
         priority, topic_key, aliases_json, content_json, metadata_json, content_hash, revision, status, \
         created_at, updated_at, last_accessed_at, access_count, import_id, search_text, change_seq, author, \
         line_tokens, provenance_json) \
         VALUES {}",
        values(rows.len(), 25, 1)
    );
    let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
    for (record, tokens) in rows.iter().zip(line_tokens) {
        query = bind_record_columns(query.bind(&record.tenant).bind(&record.id), record)
            .bind(record.created_at_ms)
            .bind(record.updated_at_ms)
            .bind(record.last_accessed_at_ms)
            .bind(record.access_count)
            .bind(import_id)
            .bind(search_text(record))
            .bind(record.change_seq)
            .bind(record.author.clone())
            .bind(i64::from(*tokens))
            .bind(record.provenance.as_ref().map(crate::record::Provenance::to_text));
    }
    query.execute(&mut **tx).await.map_err(super::topic_conflict)?;

    let scopes: Vec<(&Record, &String)> =
        rows.iter().flat_map(|r| r.scope.iter().map(move |s| (r, s))).collect();
    for part in scopes.chunks(ROWS) {
        let sql = format!(
            "INSERT INTO memory_scopes (tenant, memory_id, scope) VALUES {}",
            values(part.len(), 3, 1)
        );
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
        for (record, scope) in part {
            query = query.bind(&record.tenant).bind(&record.id).bind(*scope);
        }
        query.execute(&mut **tx).await?;
    }
    Ok(())
}

/// The changelog's `import` entries for `rows`, each numbered after any history its id already
/// has (an id imported, undone and imported again).
async fn log_imports(
    tx: &mut Transaction<'_, Any>,
    tenant: &str,
    rows: &[Record],
    actor: &str,
    now_ms: i64,
) -> Result<(), StoreError> {
    let sql = format!(
        "SELECT memory_id, MAX(seq) AS seq FROM memory_changes WHERE tenant = $1 AND memory_id IN ({}) GROUP BY memory_id",
        list(rows.len(), 2)
    );
    let mut query = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(tenant);
    for record in rows {
        query = query.bind(&record.id);
    }
    let mut last: HashMap<String, i64> = HashMap::new();
    for row in query.fetch_all(&mut **tx).await? {
        last.insert(row.try_get("memory_id")?, row.try_get("seq")?);
    }

    let changes: Vec<(String, &Record)> =
        rows.iter().map(|r| (uuid::Uuid::new_v4().simple().to_string(), r)).collect();
    let sql = format!(
        "INSERT INTO memory_changes (tenant, change_id, memory_id, revision, action, actor, at, seq, before_json, after_json) \
         VALUES {}",
        values(changes.len(), 10, 1)
    );
    let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
    for (change_id, record) in &changes {
        query = query
            .bind(tenant)
            .bind(change_id)
            .bind(&record.id)
            .bind(record.revision)
            .bind(Action::Import.as_str())
            .bind(actor)
            .bind(now_ms)
            .bind(last.get(&record.id).copied().unwrap_or(0) + 1)
            .bind(None::<String>)
            .bind(Some(record.to_json().to_string()));
    }
    query.execute(&mut **tx).await?;

    let scopes: Vec<(&String, &String)> = changes
        .iter()
        .flat_map(|(change_id, record)| {
            let mut scopes: Vec<&String> = record.scope.iter().collect();
            scopes.sort();
            scopes.dedup();
            scopes.into_iter().map(move |s| (change_id, s))
        })
        .collect();
    for part in scopes.chunks(ROWS) {
        let sql = format!(
            "INSERT INTO memory_change_scopes (tenant, change_id, scope) VALUES {}",
            values(part.len(), 3, 1)
        );
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
        for (change_id, scope) in part {
            query = query.bind(tenant).bind(*change_id).bind(*scope);
        }
        query.execute(&mut **tx).await?;
    }
    Ok(())
}

async fn insert_embeddings(
    tx: &mut Transaction<'_, Any>,
    tenant: &str,
    model_id: &str,
    vectors: &[(&str, &[f32])],
) -> Result<(), StoreError> {
    if vectors.is_empty() {
        return Ok(());
    }
    // An embedding left by a record of the same id that is gone (pruned later otherwise).
    let sql = format!(
        "DELETE FROM memory_embeddings WHERE tenant = $1 AND memory_id IN ({})",
        list(vectors.len(), 2)
    );
    let mut query = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(tenant);
    for (id, _) in vectors {
        query = query.bind(*id);
    }
    query.execute(&mut **tx).await?;
    let sql = format!(
        "INSERT INTO memory_embeddings (tenant, memory_id, model_id, vector) VALUES {}",
        values(vectors.len(), 4, 1)
    );
    let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
    for (id, vector) in vectors {
        query = query.bind(tenant).bind(*id).bind(model_id).bind(super::embeddings::encode(vector));
    }
    query.execute(&mut **tx).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn placeholders_number_every_row_and_column() {
        assert_eq!(super::values(2, 3, 1), "($1, $2, $3), ($4, $5, $6)");
        assert_eq!(super::list(3, 2), "$2, $3, $4");
    }
}
