//! Records and their changelog in SQL. Every write runs in one transaction that changes the record
//! row, its scope rows and appends to the changelog together, so history never disagrees with the
//! record. Optimistic concurrency: an update names the revision it read (`If-Match`), and the
//! `UPDATE … WHERE revision = $n` lets exactly one of two racing writers through.

use super::{Store, StoreError};
use crate::record::{Envelope, Provenance, Record, Status, content_hash};
use serde_json::{Map, Value};
use sqlx::any::AnyRow;
use sqlx::{Any, AnyConnection, Row, Transaction};

pub(super) const COLUMNS: &str = "tenant, id, record_type, schema_version, scope_json, valid_from, valid_until, \
    priority, topic_key, aliases_json, content_json, metadata_json, revision, status, created_at, \
    updated_at, last_accessed_at, access_count, change_seq, author, provenance_json";

/// Who did a change, and what kind of change it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Create,
    Update,
    Supersede,
    Pause,
    Archive,
    Activate,
    /// Back to review (`proposed`).
    Propose,
    /// Unused for its type's dormancy period (`dormant`).
    Dormant,
    Delete,
    Import,
    UndoImport,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Create => "create",
            Action::Update => "update",
            Action::Supersede => "supersede",
            Action::Pause => "pause",
            Action::Archive => "archive",
            Action::Activate => "activate",
            Action::Propose => "propose",
            Action::Dormant => "dormant",
            Action::Delete => "delete",
            Action::Import => "import",
            Action::UndoImport => "undo_import",
        }
    }
}

/// Who a write is by, as the store keeps it: the history's `actor`, and for a new record (or a
/// supersede) its `author`; `provenance` is kept with the record.
#[derive(Debug, Clone, Copy)]
pub struct By<'a> {
    pub actor: &'a str,
    pub author: Option<&'a str>,
    pub provenance: Option<&'a Provenance>,
    /// An observer's write: made only while its exchange's claim holds, checked in the write's
    /// transaction (`observer::Claim::hold`; a forget of the scope ends the claim).
    pub claim: Option<&'a super::observer::Claim>,
}

/// What a create did.
#[derive(Debug, Clone, PartialEq)]
pub enum Created {
    /// A new record.
    New(Record),
    /// The same tenant, key and scope existed: it was replaced in place (revision + 1).
    Superseded(Record),
    /// The same type, scope and content existed already: nothing was written.
    ExactRepeat(Record),
    /// A live record of the same type and scope nearly repeated this content (embedding
    /// similarity at or above the threshold): it was updated instead of adding a twin.
    Deduplicated { record: Record, similarity: f32 },
}

/// One entry of a record's changelog.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    pub memory_id: String,
    pub revision: i64,
    pub action: String,
    pub actor: String,
    pub at_ms: i64,
    pub before: Option<Value>,
    pub after: Option<Value>,
}

/// Filters for listing; all optional, combined with AND.
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    pub scope: Option<String>,
    pub record_type: Option<String>,
    pub status: Option<Status>,
    /// Case-insensitive substring of the key, aliases or content.
    pub q: Option<String>,
    /// The record's topic key, exactly.
    pub key: Option<String>,
    /// Who wrote the record's live version, exactly (`agent:<key id>`, `observer`, …).
    pub author: Option<String>,
    /// Valid at, before or after a moment (`Validity`).
    pub valid: Option<(Validity, i64)>,
}

/// Where a record's validity window lies against a moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Validity {
    /// `valid_from <= at < valid_until`.
    Now,
    /// `valid_until <= at`.
    Expired,
    /// `valid_from > at`.
    Future,
}

impl Validity {
    pub fn parse(text: &str) -> Option<Validity> {
        match text {
            "now" => Some(Validity::Now),
            "expired" => Some(Validity::Expired),
            "future" => Some(Validity::Future),
            _ => None,
        }
    }
}

/// How an import line relates to what is stored.
#[derive(Debug, Clone, PartialEq)]
pub enum ImportMatch {
    New,
    /// A record with this id, or the same content, or the same topic already exists.
    Existing(String),
}

impl Store {
    pub async fn get_record(&self, tenant: &str, id: &str) -> Result<Record, StoreError> {
        let mut conn = self.pool().acquire().await?;
        fetch_record(&mut conn, tenant, id).await?.ok_or(StoreError::NotFound)
    }

    /// The stored records of `tenant` among `ids`, in no particular order; ids not stored are
    /// left out. One statement per 500 ids.
    pub async fn get_records(&self, tenant: &str, ids: &[&str]) -> Result<Vec<Record>, StoreError> {
        let mut conn = self.pool().acquire().await?;
        let mut records = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(500) {
            let placeholders: Vec<String> = (2..chunk.len() + 2).map(|n| format!("${n}")).collect();
            let sql = format!(
                "SELECT {COLUMNS} FROM memories WHERE tenant = $1 AND id IN ({})",
                placeholders.join(", ")
            );
            let mut query = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(tenant);
            for id in chunk {
                query = query.bind(*id);
            }
            for row in query.fetch_all(&mut *conn).await? {
                records.push(record_from_row(&row)?);
            }
        }
        Ok(records)
    }

    /// Creates a record, or supersedes the live one with the same key and scope, or — for an exact
    /// repeat of existing content — returns that record unchanged.
    pub async fn create_record(
        &self,
        tenant: &str,
        envelope: &Envelope,
        new_id: &str,
        actor: &str,
        now_ms: i64,
    ) -> Result<Created, StoreError> {
        let by = By { actor, author: None, provenance: None, claim: None };
        self.create_record_by(tenant, envelope, new_id, &by, &|_: &Record| true, now_ms).await
    }

    /// `create_record`, naming the record's `author` and `provenance` (which a supersede takes
    /// over too). The live record holding the same key and scope is superseded only if
    /// `may_supersede` says so, read in the same transaction as the write (else `TopicTaken`):
    /// a writer cannot replace what it may not change by racing its check.
    pub async fn create_record_by(
        &self,
        tenant: &str,
        envelope: &Envelope,
        new_id: &str,
        by: &By<'_>,
        may_supersede: &(dyn Fn(&Record) -> bool + Sync),
        now_ms: i64,
    ) -> Result<Created, StoreError> {
        let (actor, author) = (by.actor, by.author);
        let (mut tx, seq) = self.begin_record_write().await?;
        if let Some(claim) = by.claim {
            claim.hold(&mut tx, now_ms).await?;
        }
        if let Some(existing) = find_exact_repeat(&mut tx, tenant, envelope).await? {
            return Ok(Created::ExactRepeat(existing));
        }
        if let Some(key) = &envelope.key {
            if let Some(current) = find_by_topic(&mut tx, tenant, key, &envelope.scope).await? {
                if !may_supersede(&current) {
                    return Err(StoreError::TopicTaken);
                }
                let mut next = apply(&current, envelope, now_ms, seq);
                next.author = author.map(str::to_owned);
                next.provenance = by.provenance.cloned();
                write_update(&mut tx, &current, &next, Action::Supersede, actor, now_ms).await?;
                tx.commit().await?;
                return Ok(Created::Superseded(next));
            }
        }
        let id = envelope.id.clone().unwrap_or_else(|| new_id.to_owned());
        if fetch_record(&mut tx, tenant, &id).await?.is_some() {
            return Err(StoreError::IdTaken(id));
        }
        let mut record = new_record(tenant, &id, envelope, now_ms, seq);
        record.author = author.map(str::to_owned);
        record.provenance = by.provenance.cloned();
        insert(&mut tx, &record, None).await?;
        log_change(
            &mut tx,
            &record.id,
            record.revision,
            Action::Create,
            actor,
            now_ms,
            None,
            Some(&record),
            tenant,
        )
        .await?;
        tx.commit().await?;
        Ok(Created::New(record))
    }

    /// Replaces a record's envelope. `expected_revision`, when given, must match the stored one.
    /// The record keeps its author; `by.provenance`, when given, becomes its provenance (the
    /// live version is now that writer's words).
    pub async fn update_record(
        &self,
        tenant: &str,
        id: &str,
        envelope: &Envelope,
        expected_revision: Option<i64>,
        by: &By<'_>,
        now_ms: i64,
    ) -> Result<Record, StoreError> {
        let actor = by.actor;
        let (mut tx, seq) = self.begin_record_write().await?;
        if let Some(claim) = by.claim {
            claim.hold(&mut tx, now_ms).await?;
        }
        let current = fetch_record(&mut tx, tenant, id).await?.ok_or(StoreError::NotFound)?;
        check_revision(&current, expected_revision)?;
        let mut next = apply(&current, envelope, now_ms, seq);
        if let Some(provenance) = by.provenance {
            next.provenance = Some(provenance.clone());
        }
        write_update(&mut tx, &current, &next, Action::Update, actor, now_ms).await?;
        tx.commit().await?;
        Ok(next)
    }

    /// Pauses, archives, activates or makes dormant a record whose status is one of `from`:
    /// compare and set, in the write's transaction (record writes take the sequence row first,
    /// so none slips in between), so a change decided on an older read (a dormancy sweep's list,
    /// a tool's read that found the record dormant) cannot undo one made since (an operator's
    /// pause). Already at `status`: nothing is written. Any other status: `StatusConflict`.
    pub async fn set_record_status(
        &self,
        tenant: &str,
        id: &str,
        from: &[Status],
        status: Status,
        actor: &str,
        now_ms: i64,
    ) -> Result<Record, StoreError> {
        let (mut tx, seq) = self.begin_record_write().await?;
        let current = fetch_record(&mut tx, tenant, id).await?.ok_or(StoreError::NotFound)?;
        if current.status == status {
            return Ok(current);
        }
        if !from.contains(&current.status) {
            return Err(StoreError::StatusConflict { actual: current.status });
        }
        let mut next = current.clone();
        next.status = status;
        next.revision += 1;
        next.updated_at_ms = now_ms;
        next.change_seq = seq;
        let action = match status {
            Status::Active => Action::Activate,
            Status::Paused => Action::Pause,
            Status::Archived => Action::Archive,
            Status::Proposed => Action::Propose,
            Status::Dormant => Action::Dormant,
        };
        write_update(&mut tx, &current, &next, action, actor, now_ms).await?;
        tx.commit().await?;
        Ok(next)
    }

    /// Deletes a record; its history stays (and says who deleted it). Returns the record as it
    /// was, and the sequence number of its removal.
    pub async fn delete_record(
        &self,
        tenant: &str,
        id: &str,
        actor: &str,
        now_ms: i64,
    ) -> Result<(Record, i64), StoreError> {
        let (mut tx, seq) = self.begin_record_write().await?;
        let current = fetch_record(&mut tx, tenant, id).await?.ok_or(StoreError::NotFound)?;
        remove(&mut tx, tenant, id, seq).await?;
        log_change(
            &mut tx,
            id,
            current.revision,
            Action::Delete,
            actor,
            now_ms,
            Some(&current),
            None,
            tenant,
        )
        .await?;
        tx.commit().await?;
        Ok((current, seq))
    }

    /// Adds injections to records' `access_count` and moves `last_accessed_at` forward (never
    /// back), in one transaction. Touches no revision, `updated_at` or history: these are
    /// statistics (`memory::access`). Records deleted meanwhile are skipped.
    pub async fn add_accesses(&self, accesses: &[crate::record::Access]) -> Result<(), StoreError> {
        if accesses.is_empty() {
            return Ok(());
        }
        let mut tx = self.begin_write().await?;
        for access in accesses {
            sqlx::query(
                "UPDATE memories SET access_count = access_count + $1, \
                 last_accessed_at = CASE WHEN last_accessed_at IS NULL OR last_accessed_at < $2 \
                 THEN $2 ELSE last_accessed_at END WHERE tenant = $3 AND id = $4",
            )
            .bind(access.count)
            .bind(access.last_ms)
            .bind(&access.tenant)
            .bind(&access.id)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Keeps records' `line_tokens` where the store has none (rows written before it kept
    /// them), each only while the record is still at the revision it was counted for: a write
    /// in between kept its own count. `(tenant, id, revision, tokens)`, in one transaction.
    /// Touches nothing else: the count is fixed by the content already stored.
    pub async fn keep_line_tokens(&self, counts: &[(String, String, i64, u32)]) -> Result<(), StoreError> {
        if counts.is_empty() {
            return Ok(());
        }
        let mut tx = self.begin_write().await?;
        for (tenant, id, revision, tokens) in counts {
            sqlx::query(
                "UPDATE memories SET line_tokens = $1 \
                 WHERE tenant = $2 AND id = $3 AND revision = $4 AND line_tokens IS NULL",
            )
            .bind(i64::from(*tokens))
            .bind(tenant)
            .bind(id)
            .bind(*revision)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    pub async fn record_history(&self, tenant: &str, id: &str) -> Result<Vec<Change>, StoreError> {
        let rows = sqlx::query(
            "SELECT memory_id, revision, action, actor, at, before_json, after_json FROM memory_changes \
             WHERE tenant = $1 AND memory_id = $2 ORDER BY seq",
        )
        .bind(tenant)
        .bind(id)
        .fetch_all(self.pool())
        .await?;
        rows.iter().map(change_from_row).collect()
    }

    /// Erases every record that names `scope`, and every changelog entry that ever named it: no
    /// trace is left. Returns the erased ids, how many changes went, and the sequence number of
    /// the removals.
    pub async fn forget_scope(
        &self,
        tenant: &str,
        scope: &str,
    ) -> Result<(Vec<String>, u64, i64), StoreError> {
        let (mut tx, seq) = self.begin_record_write().await?;
        let ids: Vec<String> =
            sqlx::query("SELECT memory_id FROM memory_scopes WHERE tenant = $1 AND scope = $2")
                .bind(tenant)
                .bind(scope)
                .fetch_all(&mut *tx)
                .await?
                .iter()
                .map(|row| row.try_get::<String, _>(0))
                .collect::<Result<_, _>>()?;
        for id in &ids {
            remove(&mut tx, tenant, id, seq).await?;
        }
        // Changes of the erased records, and any change whose before or after named the scope.
        let mut changes = 0;
        for id in &ids {
            sqlx::query(
                "DELETE FROM memory_change_scopes WHERE tenant = $1 AND change_id IN \
                 (SELECT change_id FROM memory_changes WHERE tenant = $1 AND memory_id = $2)",
            )
            .bind(tenant)
            .bind(id)
            .execute(&mut *tx)
            .await?;
            changes += sqlx::query("DELETE FROM memory_changes WHERE tenant = $1 AND memory_id = $2")
                .bind(tenant)
                .bind(id)
                .execute(&mut *tx)
                .await?
                .rows_affected();
        }
        changes += sqlx::query(
            "DELETE FROM memory_changes WHERE tenant = $1 AND change_id IN \
             (SELECT change_id FROM memory_change_scopes WHERE tenant = $1 AND scope = $2)",
        )
        .bind(tenant)
        .bind(scope)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        sqlx::query(
            "DELETE FROM memory_change_scopes WHERE tenant = $1 AND change_id NOT IN \
             (SELECT change_id FROM memory_changes WHERE tenant = $1)",
        )
        .bind(tenant)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok((ids, changes, seq))
    }

    /// A page of records in id order, starting after `after_id`.
    pub async fn list_records(
        &self,
        tenant: &str,
        filter: &ListFilter,
        after_id: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Record>, StoreError> {
        // Built from fixed fragments only; every value is a bound parameter.
        let mut sql = format!("SELECT {COLUMNS} FROM memories WHERE tenant = $1");
        let mut binds: Vec<String> = vec![tenant.to_owned()];
        let mut param = |sql: &mut String, fragment: &str, value: String| {
            binds.push(value);
            sql.push_str(&fragment.replace("$?", &format!("${}", binds.len())));
        };
        if let Some(scope) = &filter.scope {
            param(
                &mut sql,
                " AND id IN (SELECT memory_id FROM memory_scopes WHERE tenant = $1 AND scope = $?)",
                scope.clone(),
            );
        }
        if let Some(record_type) = &filter.record_type {
            param(&mut sql, " AND record_type = $?", record_type.clone());
        }
        if let Some(status) = filter.status {
            param(&mut sql, " AND status = $?", status.as_str().to_owned());
        }
        if let Some(q) = &filter.q {
            param(
                &mut sql,
                " AND search_text LIKE $? ESCAPE '\\'",
                format!("%{}%", escape_like(&q.to_lowercase())),
            );
        }
        if let Some(key) = &filter.key {
            param(&mut sql, " AND topic_key = $?", key.clone());
        }
        if let Some(author) = &filter.author {
            param(&mut sql, " AND author = $?", author.clone());
        }
        if let Some((validity, at)) = filter.valid {
            // A number of our own clock, not the caller's text: written into the statement, since
            // the other parameters are bound as text.
            sql.push_str(&match validity {
                Validity::Now => format!(" AND valid_from <= {at} AND valid_until > {at}"),
                Validity::Expired => format!(" AND valid_until <= {at}"),
                Validity::Future => format!(" AND valid_from > {at}"),
            });
        }
        if let Some(after) = after_id {
            param(&mut sql, " AND id > $?", after.to_owned());
        }
        sql.push_str(&format!(" ORDER BY id LIMIT {}", limit.clamp(1, 1000)));
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
        for value in binds {
            query = query.bind(value);
        }
        let rows = query.fetch_all(self.pool()).await?;
        rows.iter().map(record_from_row).collect()
    }

    /// What other replicas changed after sequence number `after`: records written (created,
    /// changed) and records removed (tenant, id, sequence number), up to and including the
    /// returned cursor. `None` when tombstones above `after` were pruned already, so removals may
    /// have been missed: the caller reloads everything instead.
    pub async fn changed_since(&self, after: i64) -> Result<Option<Changes>, StoreError> {
        let mut conn = self.pool().acquire().await?;
        // Read the counter first: every change up to it has committed (see the migration), so
        // the rows read next are complete up to it, whatever commits meanwhile.
        let upto = sequence_value(&mut conn, "memories").await?;
        if sequence_value(&mut conn, "tombstones_pruned").await? > after {
            return Ok(None);
        }
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {COLUMNS} FROM memories WHERE change_seq > $1 AND change_seq <= $2 ORDER BY change_seq"
        )))
        .bind(after)
        .bind(upto)
        .fetch_all(&mut *conn)
        .await?;
        let records = rows.iter().map(record_from_row).collect::<Result<_, _>>()?;
        let rows = sqlx::query(
            "SELECT tenant, memory_id, change_seq FROM memory_tombstones WHERE change_seq > $1 AND change_seq <= $2",
        )
        .bind(after)
        .bind(upto)
        .fetch_all(&mut *conn)
        .await?;
        let mut removed = Vec::with_capacity(rows.len());
        for row in rows {
            removed.push((row.try_get("tenant")?, row.try_get("memory_id")?, row.try_get("change_seq")?));
        }
        Ok(Some(Changes { records, removed, upto }))
    }

    /// The sequence number every change so far is at or below: where a replica that loads
    /// everything now starts its sync.
    pub async fn sync_cursor(&self) -> Result<i64, StoreError> {
        let mut conn = self.pool().acquire().await?;
        sequence_value(&mut conn, "memories").await
    }

    /// Deletes tombstones older than `before_ms` (they carry the ids of deleted and forgotten
    /// records), and notes the highest sequence number deleted so that a replica that fell
    /// further behind reloads rather than miss a removal.
    pub async fn prune_tombstones(&self, before_ms: i64) -> Result<u64, StoreError> {
        let mut tx = self.begin_write().await?;
        let row = sqlx::query("SELECT MAX(change_seq) FROM memory_tombstones WHERE at < $1")
            .bind(before_ms)
            .fetch_one(&mut *tx)
            .await?;
        let Some(highest) = row.try_get::<Option<i64>, _>(0)? else { return Ok(0) };
        let pruned = sqlx::query("DELETE FROM memory_tombstones WHERE change_seq <= $1")
            .bind(highest)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        sqlx::query("UPDATE sync_sequence SET value = $1 WHERE name = 'tombstones_pruned' AND value < $1")
            .bind(highest)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(pruned)
    }

    /// Every record of every tenant, for loading the in-memory index at startup.
    pub async fn all_records(&self) -> Result<Vec<Record>, StoreError> {
        let rows =
            sqlx::query(sqlx::AssertSqlSafe(format!("SELECT {COLUMNS} FROM memories ORDER BY tenant, id")))
                .fetch_all(self.pool())
                .await?;
        rows.iter().map(record_from_row).collect()
    }

    /// A stored record with the same type, scope and canonical content, if any.
    pub async fn exact_repeat(
        &self,
        tenant: &str,
        envelope: &Envelope,
    ) -> Result<Option<Record>, StoreError> {
        let mut conn = self.pool().acquire().await?;
        find_exact_repeat(&mut conn, tenant, envelope).await
    }

    /// Whether an import line would add a record, or matches one already stored.
    pub async fn import_match(&self, tenant: &str, envelope: &Envelope) -> Result<ImportMatch, StoreError> {
        let mut conn = self.pool().acquire().await?;
        if let Some(id) = &envelope.id {
            if fetch_record(&mut conn, tenant, id).await?.is_some() {
                return Ok(ImportMatch::Existing(id.clone()));
            }
        }
        if let Some(existing) = find_exact_repeat(&mut conn, tenant, envelope).await? {
            return Ok(ImportMatch::Existing(existing.id));
        }
        if let Some(key) = &envelope.key {
            if let Some(existing) = find_by_topic(&mut conn, tenant, key, &envelope.scope).await? {
                return Ok(ImportMatch::Existing(existing.id));
            }
        }
        Ok(ImportMatch::New)
    }

    /// An import's row: (records it added, when, when undone).
    pub async fn import_info(
        &self,
        tenant: &str,
        import_id: &str,
    ) -> Result<Option<(i64, i64, Option<i64>)>, StoreError> {
        let row = sqlx::query(
            "SELECT added, created_at, undone_at FROM memory_imports WHERE tenant = $1 AND id = $2",
        )
        .bind(tenant)
        .bind(import_id)
        .fetch_optional(self.pool())
        .await?;
        match row {
            None => Ok(None),
            Some(row) => {
                Ok(Some((row.try_get("added")?, row.try_get("created_at")?, row.try_get("undone_at")?)))
            }
        }
    }

    /// Removes exactly the records an import added (those still there), once; returns them and
    /// the sequence number of their removal.
    pub async fn undo_import(
        &self,
        tenant: &str,
        import_id: &str,
        actor: &str,
        now_ms: i64,
    ) -> Result<(Vec<Record>, i64), StoreError> {
        let (mut tx, seq) = self.begin_record_write().await?;
        let row = sqlx::query("SELECT undone_at FROM memory_imports WHERE tenant = $1 AND id = $2")
            .bind(tenant)
            .bind(import_id)
            .fetch_optional(&mut *tx)
            .await?
            .ok_or(StoreError::NotFound)?;
        if row.try_get::<Option<i64>, _>(0)?.is_some() {
            return Ok((Vec::new(), seq));
        }
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {COLUMNS} FROM memories WHERE tenant = $1 AND import_id = $2 ORDER BY id"
        )))
        .bind(tenant)
        .bind(import_id)
        .fetch_all(&mut *tx)
        .await?;
        let removed: Vec<Record> = rows.iter().map(record_from_row).collect::<Result<_, _>>()?;
        for record in &removed {
            remove(&mut tx, tenant, &record.id, seq).await?;
            log_change(
                &mut tx,
                &record.id,
                record.revision,
                Action::UndoImport,
                actor,
                now_ms,
                Some(record),
                None,
                tenant,
            )
            .await?;
        }
        sqlx::query("UPDATE memory_imports SET undone_at = $3 WHERE tenant = $1 AND id = $2")
            .bind(tenant)
            .bind(import_id)
            .bind(now_ms)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok((removed, seq))
    }
}

fn check_revision(current: &Record, expected: Option<i64>) -> Result<(), StoreError> {
    match expected {
        Some(expected) if expected != current.revision => {
            Err(StoreError::RevisionConflict { expected, actual: current.revision })
        }
        _ => Ok(()),
    }
}

pub(super) fn new_record(tenant: &str, id: &str, envelope: &Envelope, now_ms: i64, seq: i64) -> Record {
    Record {
        tenant: tenant.to_owned(),
        id: id.to_owned(),
        record_type: envelope.record_type.clone(),
        schema_version: envelope.schema_version.clone(),
        scope: envelope.scope.clone(),
        valid_from_ms: envelope.valid_from_ms,
        valid_until_ms: envelope.valid_until_ms,
        priority: envelope.priority,
        key: envelope.key.clone(),
        aliases: envelope.aliases.clone(),
        content: envelope.content.clone(),
        metadata: envelope.metadata.clone(),
        revision: 1,
        status: envelope.status.unwrap_or(Status::Active),
        created_at_ms: now_ms,
        updated_at_ms: now_ms,
        last_accessed_at_ms: None,
        access_count: 0,
        change_seq: seq,
        author: None,
        provenance: None,
    }
}

/// The record after writing `envelope` over `current`: revision + 1, server fields kept.
fn apply(current: &Record, envelope: &Envelope, now_ms: i64, seq: i64) -> Record {
    let mut next = new_record(&current.tenant, &current.id, envelope, now_ms, seq);
    next.revision = current.revision + 1;
    next.created_at_ms = current.created_at_ms;
    next.status = envelope.status.unwrap_or(current.status);
    next.last_accessed_at_ms = current.last_accessed_at_ms;
    next.access_count = current.access_count;
    next.author = current.author.clone();
    next.provenance = current.provenance.clone();
    next
}

async fn fetch_record(
    conn: &mut AnyConnection,
    tenant: &str,
    id: &str,
) -> Result<Option<Record>, StoreError> {
    let row = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT {COLUMNS} FROM memories WHERE tenant = $1 AND id = $2"
    )))
    .bind(tenant)
    .bind(id)
    .fetch_optional(&mut *conn)
    .await?;
    row.as_ref().map(record_from_row).transpose()
}

async fn find_exact_repeat(
    conn: &mut AnyConnection,
    tenant: &str,
    envelope: &Envelope,
) -> Result<Option<Record>, StoreError> {
    let hash = content_hash(&envelope.record_type, &envelope.scope, &envelope.content);
    let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT {COLUMNS} FROM memories WHERE tenant = $1 AND content_hash = $2"
    )))
    .bind(tenant)
    .bind(&hash)
    .fetch_all(&mut *conn)
    .await?;
    for row in &rows {
        let record = record_from_row(row)?;
        let same = record.record_type == envelope.record_type
            && record.scope == envelope.scope
            && record.content == envelope.content
            && envelope.key.as_ref().is_none_or(|key| record.key.as_ref() == Some(key));
        if same {
            return Ok(Some(record));
        }
    }
    Ok(None)
}

async fn find_by_topic(
    conn: &mut AnyConnection,
    tenant: &str,
    key: &str,
    scope: &[String],
) -> Result<Option<Record>, StoreError> {
    let row = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT {COLUMNS} FROM memories WHERE tenant = $1 AND topic_key = $2 AND scope_json = $3"
    )))
    .bind(tenant)
    .bind(key)
    .bind(json_text(scope))
    .fetch_optional(&mut *conn)
    .await?;
    row.as_ref().map(record_from_row).transpose()
}

async fn insert(
    tx: &mut Transaction<'_, Any>,
    record: &Record,
    import_id: Option<&str>,
) -> Result<(), StoreError> {
    let query = sqlx::query(
        "INSERT INTO memories (tenant, id, record_type, schema_version, scope_json, valid_from, valid_until, \
         priority, topic_key, aliases_json, content_json, metadata_json, content_hash, revision, status, \
         created_at, updated_at, last_accessed_at, access_count, import_id, search_text, change_seq, author, \
         line_tokens, provenance_json) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24, $25)",
    );
    bind_record_columns(query.bind(&record.tenant).bind(&record.id), record)
        .bind(record.created_at_ms)
        .bind(record.updated_at_ms)
        .bind(record.last_accessed_at_ms)
        .bind(record.access_count)
        .bind(import_id.map(str::to_owned))
        .bind(search_text(record))
        .bind(record.change_seq)
        .bind(record.author.clone())
        .bind(i64::from(record.line_tokens()))
        .bind(record.provenance.as_ref().map(Provenance::to_text))
        .execute(&mut **tx)
        .await
        .map_err(super::topic_conflict)?;
    insert_scopes(tx, record).await
}

/// Binds the columns an insert and an update both write, in their order in both statements:
/// record_type, schema_version, scope_json, valid_from, valid_until, priority, topic_key,
/// aliases_json, content_json, metadata_json, content_hash, revision, status.
pub(super) fn bind_record_columns<'q>(
    query: sqlx::query::Query<'q, Any, sqlx::any::AnyArguments>,
    record: &'q Record,
) -> sqlx::query::Query<'q, Any, sqlx::any::AnyArguments> {
    query
        .bind(&record.record_type)
        .bind(&record.schema_version)
        .bind(json_text(&record.scope))
        .bind(record.valid_from_ms)
        .bind(record.valid_until_ms)
        .bind(i64::from(record.priority))
        .bind(record.key.clone())
        .bind(json_text(&record.aliases))
        .bind(record.content.to_string())
        .bind(Value::Object(record.metadata.clone()).to_string())
        .bind(content_hash(&record.record_type, &record.scope, &record.content))
        .bind(record.revision)
        .bind(record.status.as_str())
}

async fn insert_scopes(tx: &mut Transaction<'_, Any>, record: &Record) -> Result<(), StoreError> {
    for scope in &record.scope {
        sqlx::query("INSERT INTO memory_scopes (tenant, memory_id, scope) VALUES ($1, $2, $3)")
            .bind(&record.tenant)
            .bind(&record.id)
            .bind(scope)
            .execute(&mut **tx)
            .await?;
    }
    Ok(())
}

/// Writes `next` over `current` if nobody changed it meanwhile, and logs the change.
async fn write_update(
    tx: &mut Transaction<'_, Any>,
    current: &Record,
    next: &Record,
    action: Action,
    actor: &str,
    now_ms: i64,
) -> Result<(), StoreError> {
    let query = sqlx::query(
        "UPDATE memories SET record_type = $3, schema_version = $4, scope_json = $5, valid_from = $6, \
         valid_until = $7, priority = $8, topic_key = $9, aliases_json = $10, content_json = $11, \
         metadata_json = $12, content_hash = $13, revision = $14, status = $15, updated_at = $16, \
         search_text = $17, change_seq = $19, author = $20, line_tokens = $21, provenance_json = $22 \
         WHERE tenant = $1 AND id = $2 AND revision = $18",
    );
    let updated = bind_record_columns(query.bind(&current.tenant).bind(&current.id), next)
        .bind(next.updated_at_ms)
        .bind(search_text(next))
        .bind(current.revision)
        .bind(next.change_seq)
        .bind(next.author.clone())
        .bind(i64::from(next.line_tokens()))
        .bind(next.provenance.as_ref().map(Provenance::to_text))
        .execute(&mut **tx)
        .await
        .map_err(super::topic_conflict)?;
    if updated.rows_affected() == 0 {
        // Someone else wrote between our read and this update.
        return Err(StoreError::RevisionConflict {
            expected: current.revision,
            actual: current.revision + 1,
        });
    }
    if next.scope != current.scope {
        sqlx::query("DELETE FROM memory_scopes WHERE tenant = $1 AND memory_id = $2")
            .bind(&current.tenant)
            .bind(&current.id)
            .execute(&mut **tx)
            .await?;
        insert_scopes(tx, next).await?;
    }
    log_change(tx, &next.id, next.revision, action, actor, now_ms, Some(current), Some(next), &current.tenant)
        .await
}

/// Deletes a record with its scope rows and its embedding (which encodes its content).
async fn remove(tx: &mut Transaction<'_, Any>, tenant: &str, id: &str, seq: i64) -> Result<(), StoreError> {
    // `at` only says when a tombstone may be pruned; replicas order removals by `change_seq`.
    sqlx::query("INSERT INTO memory_tombstones (tenant, memory_id, at, change_seq) VALUES ($1, $2, $3, $4)")
        .bind(tenant)
        .bind(id)
        .bind(crate::clock::now_ms())
        .bind(seq)
        .execute(&mut **tx)
        .await?;
    sqlx::query("DELETE FROM memory_embeddings WHERE tenant = $1 AND memory_id = $2")
        .bind(tenant)
        .bind(id)
        .execute(&mut **tx)
        .await?;
    sqlx::query("DELETE FROM memory_scopes WHERE tenant = $1 AND memory_id = $2")
        .bind(tenant)
        .bind(id)
        .execute(&mut **tx)
        .await?;
    sqlx::query("DELETE FROM memories WHERE tenant = $1 AND id = $2")
        .bind(tenant)
        .bind(id)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

#[allow(clippy::too_many_arguments)]
async fn log_change(
    tx: &mut Transaction<'_, Any>,
    memory_id: &str,
    revision: i64,
    action: Action,
    actor: &str,
    now_ms: i64,
    before: Option<&Record>,
    after: Option<&Record>,
    tenant: &str,
) -> Result<(), StoreError> {
    let change_id = uuid::Uuid::new_v4().simple().to_string();
    let seq: i64 = sqlx::query(
        "SELECT COALESCE(MAX(seq), 0) + 1 FROM memory_changes WHERE tenant = $1 AND memory_id = $2",
    )
    .bind(tenant)
    .bind(memory_id)
    .fetch_one(&mut **tx)
    .await?
    .try_get(0)?;
    sqlx::query(
        "INSERT INTO memory_changes (tenant, change_id, memory_id, revision, action, actor, at, seq, before_json, after_json) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
    )
    .bind(tenant)
    .bind(&change_id)
    .bind(memory_id)
    .bind(revision)
    .bind(action.as_str())
    .bind(actor)
    .bind(now_ms)
    .bind(seq)
    .bind(before.map(|r| r.to_json().to_string()))
    .bind(after.map(|r| r.to_json().to_string()))
    .execute(&mut **tx)
    .await?;
    let mut scopes: Vec<&String> = before.iter().chain(after.iter()).flat_map(|r| r.scope.iter()).collect();
    scopes.sort();
    scopes.dedup();
    for scope in scopes {
        sqlx::query("INSERT INTO memory_change_scopes (tenant, change_id, scope) VALUES ($1, $2, $3)")
            .bind(tenant)
            .bind(&change_id)
            .bind(scope)
            .execute(&mut **tx)
            .await?;
    }
    Ok(())
}

pub(super) fn json_text(items: &[String]) -> String {
    Value::from(items.to_vec()).to_string()
}

/// What `q` searches (lowercased; LIKE is case-sensitive on both backends).
pub(super) fn search_text(record: &Record) -> String {
    record.words().to_lowercase()
}

fn escape_like(text: &str) -> String {
    text.replace('\\', "\\\\").replace('%', "\\%").replace('_', "\\_")
}

pub(super) fn record_from_row(row: &AnyRow) -> Result<Record, StoreError> {
    let json = |col: &str| -> Result<Value, StoreError> {
        let text: String = row.try_get(col)?;
        serde_json::from_str(&text).map_err(|err| StoreError::Corrupt(format!("{col}: {err}")))
    };
    let strings = |col: &str| -> Result<Vec<String>, StoreError> {
        serde_json::from_value(json(col)?).map_err(|err| StoreError::Corrupt(format!("{col}: {err}")))
    };
    let metadata = match json("metadata_json")? {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    let status: String = row.try_get("status")?;
    let priority: i64 = row.try_get("priority")?;
    Ok(Record {
        tenant: row.try_get("tenant")?,
        id: row.try_get("id")?,
        record_type: row.try_get("record_type")?,
        schema_version: row.try_get("schema_version")?,
        scope: strings("scope_json")?,
        valid_from_ms: row.try_get("valid_from")?,
        valid_until_ms: row.try_get("valid_until")?,
        priority: u8::try_from(priority).map_err(|_| StoreError::Corrupt(format!("priority {priority}")))?,
        key: row.try_get("topic_key")?,
        aliases: strings("aliases_json")?,
        content: json("content_json")?,
        metadata,
        revision: row.try_get("revision")?,
        status: Status::parse(&status).ok_or_else(|| StoreError::Corrupt(format!("status {status}")))?,
        created_at_ms: row.try_get("created_at")?,
        updated_at_ms: row.try_get("updated_at")?,
        last_accessed_at_ms: row.try_get("last_accessed_at")?,
        access_count: row.try_get("access_count")?,
        change_seq: row.try_get("change_seq")?,
        author: row.try_get("author")?,
        provenance: row
            .try_get::<Option<String>, _>("provenance_json")?
            .as_deref()
            .and_then(Provenance::from_text),
    })
}

fn change_from_row(row: &AnyRow) -> Result<Change, StoreError> {
    let json = |col: &str| -> Result<Option<Value>, StoreError> {
        let text: Option<String> = row.try_get(col)?;
        text.map(|t| serde_json::from_str(&t).map_err(|err| StoreError::Corrupt(format!("{col}: {err}"))))
            .transpose()
    };
    Ok(Change {
        memory_id: row.try_get("memory_id")?,
        revision: row.try_get("revision")?,
        action: row.try_get("action")?,
        actor: row.try_get("actor")?,
        at_ms: row.try_get("at")?,
        before: json("before_json")?,
        after: json("after_json")?,
    })
}

/// What changed in the store after a replica's cursor (`Store::changed_since`).
pub struct Changes {
    pub records: Vec<Record>,
    /// (tenant, id, sequence number of the removal).
    pub removed: Vec<(String, String, i64)>,
    /// The new cursor: everything up to it is in `records` and `removed`.
    pub upto: i64,
}

async fn sequence_value(conn: &mut sqlx::AnyConnection, name: &str) -> Result<i64, StoreError> {
    let row = sqlx::query("SELECT value FROM sync_sequence WHERE name = $1")
        .bind(name)
        .fetch_one(&mut *conn)
        .await?;
    Ok(row.try_get(0)?)
}
