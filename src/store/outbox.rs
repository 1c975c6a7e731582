//! The trigger outbox (migrations/…_trigger_outbox.sql): actions decided by firing records, kept
//! until delivered or dead, shared by every replica on the database.
//!
//! Lifecycle of a row: `insert` (idempotent on the id) → `claim` (a worker leases due rows:
//! `attempts + 1`, `locked_until = now + lease`, `lease_owner` = the claim's token) → one of
//! `mark_delivered`, `mark_retry` (back to waiting, with `next_at`), `mark_dead` or `defer` (not
//! attempted: its endpoint is at its pace; waiting again, the attempt given back), each only by
//! the lease's owner. A worker that dies mid-delivery marks nothing: its lease runs out and the
//! row is due again for whoever claims next, so an action decided and then interrupted is still
//! delivered (at least once; the `webhook-id` lets receivers drop a repeat). `replay` sends a
//! dead or delivered action again with a fresh count of attempts.
//!
//! Claiming is one statement. On PostgreSQL its inner SELECT takes `FOR UPDATE SKIP LOCKED`, so
//! replicas claiming at once take disjoint rows without waiting on each other; on SQLite the
//! database has one writer at a time, which serializes claims by itself.

use super::{Backend, Store, StoreError};
use serde::Serialize;
use serde_json::Value;
use sqlx::Row;
use sqlx::any::AnyRow;
use std::collections::BTreeMap;

const COLUMNS: &str = "id, tenant, request_id, record_id, record_revision, action_index, endpoint, method, \
    subject, matched_json, body, state, attempts, next_at, locked_until, lease_owner, last_status, \
    last_error, last_response, replays, created_at, updated_at, delivered_at";

/// The longest error or response excerpt kept, in bytes.
pub const MAX_EXCERPT_BYTES: usize = 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OutboxState {
    /// Not tried yet.
    Pending,
    /// Tried and failed; waiting for `next_at`.
    Retrying,
    Delivered,
    /// Given up on: the schedule ran out or the endpoint refused for good. Replayable.
    Dead,
}

impl OutboxState {
    pub const ALL: [OutboxState; 4] =
        [OutboxState::Pending, OutboxState::Retrying, OutboxState::Delivered, OutboxState::Dead];

    pub fn as_str(self) -> &'static str {
        match self {
            OutboxState::Pending => "pending",
            OutboxState::Retrying => "retrying",
            OutboxState::Delivered => "delivered",
            OutboxState::Dead => "dead",
        }
    }

    pub fn parse(text: &str) -> Option<OutboxState> {
        OutboxState::ALL.into_iter().find(|state| state.as_str() == text)
    }
}

/// A decided action, as it goes into the outbox.
#[derive(Debug, Clone, PartialEq)]
pub struct NewOutboxAction {
    /// The idempotency id (`crate::triggers::event_id`).
    pub id: String,
    pub tenant: String,
    pub request_id: String,
    pub record_id: String,
    pub record_revision: i64,
    pub action_index: i64,
    pub endpoint: String,
    pub method: String,
    pub subject: Option<String>,
    /// The matched condition, as JSON.
    pub matched: Value,
    /// The rendered webhook body, sent as it is by every attempt.
    pub body: String,
    /// Set when the action cannot be delivered as decided (its endpoint is not configured, its
    /// body did not render): it goes in dead with this reason, visible and replayable.
    pub dead_reason: Option<String>,
}

/// An outbox row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OutboxAction {
    pub id: String,
    pub tenant: String,
    pub request_id: String,
    pub record_id: String,
    pub record_revision: i64,
    pub action_index: i64,
    pub endpoint: String,
    pub method: String,
    pub subject: Option<String>,
    pub matched: Value,
    #[serde(skip)]
    pub body: String,
    pub state: OutboxState,
    /// Attempts started (a claim counts one, even if its replica died before it finished).
    pub attempts: i64,
    pub next_at_ms: i64,
    pub locked_until_ms: Option<i64>,
    #[serde(skip)]
    pub lease_owner: Option<String>,
    pub last_status: Option<i64>,
    pub last_error: Option<String>,
    pub last_response: Option<String>,
    pub replays: i64,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    pub delivered_at_ms: Option<i64>,
}

impl OutboxAction {
    /// The action as the admin API and the CLI show it: times in RFC 3339, no body, no lease
    /// owner.
    pub fn to_json(&self) -> Value {
        let time = |ms: Option<i64>| ms.map_or(Value::Null, |ms| Value::String(crate::clock::format_ms(ms)));
        serde_json::json!({
            "id": self.id,
            "tenant": self.tenant,
            "request_id": self.request_id,
            "record_id": self.record_id,
            "record_revision": self.record_revision,
            "action_index": self.action_index,
            "endpoint": self.endpoint,
            "method": self.method,
            "subject": self.subject,
            "matched": self.matched,
            "state": self.state.as_str(),
            "attempts": self.attempts,
            "next_at": time(Some(self.next_at_ms).filter(|_| matches!(self.state, OutboxState::Pending | OutboxState::Retrying))),
            "in_flight_until": time(self.locked_until_ms),
            "last_status": self.last_status,
            "last_error": self.last_error,
            "last_response": self.last_response,
            "replays": self.replays,
            "created_at": time(Some(self.created_at_ms)),
            "updated_at": time(Some(self.updated_at_ms)),
            "delivered_at": time(self.delivered_at_ms),
        })
    }
}

/// Filters for `outbox_list`; all optional, combined with AND.
#[derive(Debug, Clone, Default)]
pub struct OutboxFilter {
    pub tenant: Option<String>,
    pub state: Option<OutboxState>,
    /// Decided at or after this time.
    pub since_ms: Option<i64>,
    pub endpoint: Option<String>,
    pub record_id: Option<String>,
}

/// What a replay did.
#[derive(Debug, Clone, PartialEq)]
pub enum Replay {
    /// Back to pending, due now, attempts from 0.
    Replayed(OutboxAction),
    /// Still waiting for delivery (pending, retrying or claimed): nothing to do.
    AlreadyQueued(OutboxAction),
}

/// The claim of a leased queue (the trigger outbox, the observer's exchanges: the same
/// state, next_at, locked_until, lease_owner and attempts columns): due, unleased rows in order,
/// up to `$4`, leased to `$2` until `$1` at time `$3`, returning `columns`. PostgreSQL skips rows
/// another claimer holds, so concurrent claimers get disjoint rows.
pub(super) fn claim_sql(backend: Backend, table: &str, columns: &str) -> String {
    let skip_locked = match backend {
        Backend::Sqlite => "",
        Backend::Postgres => " FOR UPDATE SKIP LOCKED",
    };
    format!(
        "UPDATE {table} \
         SET locked_until = $1, lease_owner = $2, attempts = attempts + 1, updated_at = $3 \
         WHERE id IN (SELECT id FROM {table} \
             WHERE state IN ('pending', 'retrying') AND next_at <= $3 \
               AND (locked_until IS NULL OR locked_until <= $3) \
             ORDER BY next_at, id LIMIT $4{skip_locked}) \
         RETURNING {columns}"
    )
}

impl Store {
    /// A transaction for a write whose loss in a database crash costs only a repeat: a claim (the
    /// lease vanishes, the action is claimed again) or a delivery's outcome (the action is sent
    /// again; receivers dedupe by `webhook-id`). On PostgreSQL it commits without waiting for the
    /// WAL flush (`synchronous_commit = off`, this transaction only), which keeps the outbox's
    /// bookkeeping from queueing behind fsyncs. Decisions themselves are inserted durably.
    pub(super) async fn relaxed(&self) -> Result<sqlx::Transaction<'static, sqlx::Any>, StoreError> {
        let mut tx = self.begin_write().await?;
        if self.backend() == Backend::Postgres {
            sqlx::query("SET LOCAL synchronous_commit = off").execute(&mut *tx).await?;
        }
        Ok(tx)
    }

    /// Runs one update of an action guarded by its lease (`WHERE … AND lease_owner = $2`) in a
    /// relaxed transaction; false when it changed nothing, because the lease was lost.
    async fn lease_guarded(
        &self,
        query: sqlx::query::Query<'_, sqlx::Any, sqlx::any::AnyArguments>,
    ) -> Result<bool, StoreError> {
        let mut tx = self.relaxed().await?;
        let result = query.execute(&mut *tx).await?;
        tx.commit().await?;
        Ok(result.rows_affected() == 1)
    }

    /// Inserts decided actions in one transaction; a decision already there (same id) is left as
    /// it is. Returns how many were new. No limit applies: `outbox_insert_firings` is the writer
    /// of the request path, with the cooldowns and the tenant's cap.
    pub async fn outbox_insert(&self, actions: &[NewOutboxAction], now_ms: i64) -> Result<u64, StoreError> {
        if actions.is_empty() {
            return Ok(0);
        }
        let mut tx = self.begin_write().await?;
        let mut added = 0;
        for action in actions {
            added += insert_action(&mut tx, action, now_ms).await?;
        }
        tx.commit().await?;
        Ok(added)
    }

    /// Leases up to `limit` due actions (waiting, `next_at <= now`, no live lease) to `owner` until
    /// `now + lease_ms`, counting an attempt for each. Concurrent claimers get disjoint rows.
    pub async fn outbox_claim(
        &self,
        owner: &str,
        now_ms: i64,
        lease_ms: i64,
        limit: u32,
    ) -> Result<Vec<OutboxAction>, StoreError> {
        let query = sqlx::query(sqlx::AssertSqlSafe(claim_sql(self.backend(), "trigger_outbox", COLUMNS)))
            .bind(now_ms + lease_ms)
            .bind(owner)
            .bind(now_ms)
            .bind(i64::from(limit.clamp(1, 1000)));
        let mut tx = self.relaxed().await?;
        let rows = query.fetch_all(&mut *tx).await?;
        tx.commit().await?;
        let mut claimed = rows.iter().map(action_from_row).collect::<Result<Vec<_>, _>>()?;
        claimed.sort_by(|a, b| (a.next_at_ms, &a.id).cmp(&(b.next_at_ms, &b.id)));
        Ok(claimed)
    }

    /// The earliest `next_at` of a waiting action not leased at `now`, or the earliest lease end:
    /// when the worker should look again.
    pub async fn outbox_next_due(&self, now_ms: i64) -> Result<Option<i64>, StoreError> {
        let row = sqlx::query(
            "SELECT MIN(CASE WHEN locked_until IS NOT NULL AND locked_until > $1 THEN locked_until ELSE next_at END) \
             FROM trigger_outbox WHERE state IN ('pending', 'retrying')",
        )
        .bind(now_ms)
        .fetch_one(self.pool())
        .await?;
        Ok(row.try_get::<Option<i64>, _>(0)?)
    }

    /// Delivered (by `owner`, whose lease it must still hold). False when the lease was lost.
    pub async fn outbox_mark_delivered(
        &self,
        id: &str,
        owner: &str,
        now_ms: i64,
        status: u16,
        response: &str,
    ) -> Result<bool, StoreError> {
        let query = sqlx::query(
            "UPDATE trigger_outbox SET state = 'delivered', delivered_at = $3, updated_at = $3, \
             last_status = $4, last_error = NULL, last_response = $5, locked_until = NULL, lease_owner = NULL \
             WHERE id = $1 AND lease_owner = $2",
        )
        .bind(id)
        .bind(owner)
        .bind(now_ms)
        .bind(i64::from(status))
        .bind(excerpt(response));
        self.lease_guarded(query).await
    }

    /// Failed; try again at `next_at_ms`. False when the lease was lost.
    pub async fn outbox_mark_retry(
        &self,
        id: &str,
        owner: &str,
        now_ms: i64,
        next_at_ms: i64,
        status: Option<u16>,
        error: &str,
    ) -> Result<bool, StoreError> {
        let query = sqlx::query(
            "UPDATE trigger_outbox SET state = 'retrying', next_at = $4, updated_at = $3, last_status = $5, \
             last_error = $6, locked_until = NULL, lease_owner = NULL \
             WHERE id = $1 AND lease_owner = $2",
        )
        .bind(id)
        .bind(owner)
        .bind(now_ms)
        .bind(next_at_ms)
        .bind(status.map(i64::from))
        .bind(excerpt(error));
        self.lease_guarded(query).await
    }

    /// Given up on. False when the lease was lost.
    pub async fn outbox_mark_dead(
        &self,
        id: &str,
        owner: &str,
        now_ms: i64,
        status: Option<u16>,
        error: &str,
    ) -> Result<bool, StoreError> {
        let query = sqlx::query(
            "UPDATE trigger_outbox SET state = 'dead', updated_at = $3, last_status = $4, last_error = $5, \
             locked_until = NULL, lease_owner = NULL \
             WHERE id = $1 AND lease_owner = $2",
        )
        .bind(id)
        .bind(owner)
        .bind(now_ms)
        .bind(status.map(i64::from))
        .bind(excerpt(error));
        self.lease_guarded(query).await
    }

    /// Not attempted after all (its endpoint is at its pace): back to waiting as it was, due at
    /// `next_at_ms`, the claim's attempt given back. False when the lease was lost.
    pub async fn outbox_defer(
        &self,
        id: &str,
        owner: &str,
        now_ms: i64,
        next_at_ms: i64,
    ) -> Result<bool, StoreError> {
        let query = sqlx::query(
            "UPDATE trigger_outbox SET attempts = attempts - 1, next_at = $4, updated_at = $3, \
             locked_until = NULL, lease_owner = NULL \
             WHERE id = $1 AND lease_owner = $2",
        )
        .bind(id)
        .bind(owner)
        .bind(now_ms)
        .bind(next_at_ms);
        self.lease_guarded(query).await
    }

    pub async fn outbox_get(&self, tenant: &str, id: &str) -> Result<OutboxAction, StoreError> {
        let sql = format!("SELECT {COLUMNS} FROM trigger_outbox WHERE tenant = $1 AND id = $2");
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(tenant)
            .bind(id)
            .fetch_optional(self.pool())
            .await?
            .ok_or(StoreError::NotFound)?;
        action_from_row(&row)
    }

    /// Newest first; `before` is the `(created_at_ms, id)` of the last row of the previous page.
    pub async fn outbox_list(
        &self,
        filter: &OutboxFilter,
        before: Option<(i64, &str)>,
        limit: u32,
    ) -> Result<Vec<OutboxAction>, StoreError> {
        // Built from fixed fragments only; every value is a bound parameter.
        let mut sql = format!("SELECT {COLUMNS} FROM trigger_outbox WHERE 1 = 1");
        let mut texts: Vec<(usize, String)> = Vec::new();
        let mut numbers: Vec<(usize, i64)> = Vec::new();
        let mut next = 0;
        let mut slot = |sql: &mut String, fragment: &str| {
            next += 1;
            sql.push_str(&fragment.replace("$?", &format!("${next}")));
            next
        };
        if let Some(tenant) = &filter.tenant {
            texts.push((slot(&mut sql, " AND tenant = $?"), tenant.clone()));
        }
        if let Some(state) = filter.state {
            texts.push((slot(&mut sql, " AND state = $?"), state.as_str().to_owned()));
        }
        if let Some(since) = filter.since_ms {
            numbers.push((slot(&mut sql, " AND created_at >= $?"), since));
        }
        if let Some(endpoint) = &filter.endpoint {
            texts.push((slot(&mut sql, " AND endpoint = $?"), endpoint.clone()));
        }
        if let Some(record_id) = &filter.record_id {
            texts.push((slot(&mut sql, " AND record_id = $?"), record_id.clone()));
        }
        if let Some((at, id)) = before {
            let a = slot(&mut sql, " AND (created_at < $?");
            numbers.push((a, at));
            let b = slot(&mut sql, " OR (created_at = $?");
            numbers.push((b, at));
            texts.push((slot(&mut sql, " AND id < $?))"), id.to_owned()));
        }
        sql.push_str(&format!(" ORDER BY created_at DESC, id DESC LIMIT {}", limit.clamp(1, 1000)));
        // Bind in parameter order.
        enum Bind {
            Text(String),
            Number(i64),
        }
        let mut binds: Vec<(usize, Bind)> = texts.into_iter().map(|(i, t)| (i, Bind::Text(t))).collect();
        binds.extend(numbers.into_iter().map(|(i, n)| (i, Bind::Number(n))));
        binds.sort_by_key(|(i, _)| *i);
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
        for (_, bind) in binds {
            query = match bind {
                Bind::Text(text) => query.bind(text),
                Bind::Number(number) => query.bind(number),
            };
        }
        let rows = query.fetch_all(self.pool()).await?;
        rows.iter().map(action_from_row).collect()
    }

    /// Sends a dead or delivered action again: pending, due now, attempts from 0, lease and
    /// last error cleared, `replays + 1`. Same id and body: receivers see the same `webhook-id`.
    pub async fn outbox_replay(&self, tenant: &str, id: &str, now_ms: i64) -> Result<Replay, StoreError> {
        let mut tx = self.begin_write().await?;
        let result = sqlx::query(
            "UPDATE trigger_outbox SET state = 'pending', attempts = 0, next_at = $3, updated_at = $3, \
             locked_until = NULL, lease_owner = NULL, last_error = NULL, replays = replays + 1 \
             WHERE tenant = $1 AND id = $2 AND state IN ('dead', 'delivered')",
        )
        .bind(tenant)
        .bind(id)
        .bind(now_ms)
        .execute(&mut *tx)
        .await?;
        let sql = format!("SELECT {COLUMNS} FROM trigger_outbox WHERE tenant = $1 AND id = $2");
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(tenant)
            .bind(id)
            .fetch_optional(&mut *tx)
            .await?
            .ok_or(StoreError::NotFound)?;
        let action = action_from_row(&row)?;
        tx.commit().await?;
        Ok(if result.rows_affected() == 1 { Replay::Replayed(action) } else { Replay::AlreadyQueued(action) })
    }

    /// Deletes delivered actions delivered before `delivered_before_ms` and dead ones last
    /// touched before `dead_before_ms`. Returns how many went.
    pub async fn outbox_prune(
        &self,
        delivered_before_ms: i64,
        dead_before_ms: i64,
    ) -> Result<u64, StoreError> {
        let result = sqlx::query(
            "DELETE FROM trigger_outbox WHERE (state = 'delivered' AND delivered_at < $1) \
             OR (state = 'dead' AND updated_at < $2)",
        )
        .bind(delivered_before_ms)
        .bind(dead_before_ms)
        .execute(self.pool())
        .await?;
        Ok(result.rows_affected())
    }

    /// Erasure (`forget`): removes every action of the given records, whatever its state, since
    /// bodies may carry their content.
    pub async fn outbox_forget_records(
        &self,
        tenant: &str,
        record_ids: &[String],
    ) -> Result<u64, StoreError> {
        let mut tx = self.begin_write().await?;
        let mut removed = 0;
        for id in record_ids {
            let result = sqlx::query("DELETE FROM trigger_outbox WHERE tenant = $1 AND record_id = $2")
                .bind(tenant)
                .bind(id)
                .execute(&mut *tx)
                .await?;
            removed += result.rows_affected();
        }
        tx.commit().await?;
        Ok(removed)
    }

    /// Erasure of an end user: removes every action decided for requests about `subject`.
    pub async fn outbox_forget_subject(&self, tenant: &str, subject: &str) -> Result<u64, StoreError> {
        let result = sqlx::query("DELETE FROM trigger_outbox WHERE tenant = $1 AND subject = $2")
            .bind(tenant)
            .bind(subject)
            .execute(self.pool())
            .await?;
        Ok(result.rows_affected())
    }

    /// How many actions are in each state (every state listed, zeros included); one tenant's, or
    /// everyone's. For `/metrics` gauges and the CLI.
    pub async fn outbox_counts(
        &self,
        tenant: Option<&str>,
    ) -> Result<BTreeMap<&'static str, i64>, StoreError> {
        let rows = match tenant {
            Some(tenant) => {
                sqlx::query("SELECT state, COUNT(*) FROM trigger_outbox WHERE tenant = $1 GROUP BY state")
                    .bind(tenant)
                    .fetch_all(self.pool())
                    .await?
            }
            None => {
                sqlx::query("SELECT state, COUNT(*) FROM trigger_outbox GROUP BY state")
                    .fetch_all(self.pool())
                    .await?
            }
        };
        let mut counts: BTreeMap<&'static str, i64> =
            OutboxState::ALL.into_iter().map(|state| (state.as_str(), 0)).collect();
        for row in rows {
            let state: String = row.try_get(0)?;
            let count: i64 = row.try_get(1)?;
            if let Some(state) = OutboxState::parse(&state) {
                counts.insert(state.as_str(), count);
            }
        }
        Ok(counts)
    }
}

/// Inserts one decided action in `tx` unless its id is there already; 1 when it was new.
pub(super) async fn insert_action(
    tx: &mut sqlx::Transaction<'static, sqlx::Any>,
    action: &NewOutboxAction,
    now_ms: i64,
) -> Result<u64, StoreError> {
    let state = if action.dead_reason.is_some() { OutboxState::Dead } else { OutboxState::Pending };
    let result = sqlx::query(
        "INSERT INTO trigger_outbox (id, tenant, request_id, record_id, record_revision, action_index, \
         endpoint, method, subject, matched_json, body, state, attempts, next_at, last_error, replays, \
         created_at, updated_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, 0, $13, $14, 0, $13, $13) \
         ON CONFLICT (id) DO NOTHING",
    )
    .bind(&action.id)
    .bind(&action.tenant)
    .bind(&action.request_id)
    .bind(&action.record_id)
    .bind(action.record_revision)
    .bind(action.action_index)
    .bind(&action.endpoint)
    .bind(&action.method)
    .bind(action.subject.as_deref())
    .bind(action.matched.to_string())
    .bind(&action.body)
    .bind(state.as_str())
    .bind(now_ms)
    .bind(action.dead_reason.as_deref().map(excerpt))
    .execute(&mut **tx)
    .await?;
    Ok(result.rows_affected())
}

/// At most `MAX_EXCERPT_BYTES` of `text`, cut at a character boundary.
pub fn excerpt(text: &str) -> String {
    if text.len() <= MAX_EXCERPT_BYTES {
        return text.to_owned();
    }
    let mut cut = MAX_EXCERPT_BYTES;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text[..cut].to_owned()
}

fn action_from_row(row: &AnyRow) -> Result<OutboxAction, StoreError> {
    let state: String = row.try_get("state")?;
    let matched: String = row.try_get("matched_json")?;
    Ok(OutboxAction {
        id: row.try_get("id")?,
        tenant: row.try_get("tenant")?,
        request_id: row.try_get("request_id")?,
        record_id: row.try_get("record_id")?,
        record_revision: row.try_get("record_revision")?,
        action_index: row.try_get("action_index")?,
        endpoint: row.try_get("endpoint")?,
        method: row.try_get("method")?,
        subject: row.try_get("subject")?,
        matched: serde_json::from_str(&matched)
            .map_err(|err| StoreError::Corrupt(format!("outbox matched_json: {err}")))?,
        body: row.try_get("body")?,
        state: OutboxState::parse(&state)
            .ok_or_else(|| StoreError::Corrupt(format!("outbox state `{state}`")))?,
        attempts: row.try_get("attempts")?,
        next_at_ms: row.try_get("next_at")?,
        locked_until_ms: row.try_get("locked_until")?,
        lease_owner: row.try_get("lease_owner")?,
        last_status: row.try_get("last_status")?,
        last_error: row.try_get("last_error")?,
        last_response: row.try_get("last_response")?,
        replays: row.try_get("replays")?,
        created_at_ms: row.try_get("created_at")?,
        updated_at_ms: row.try_get("updated_at")?,
        delivered_at_ms: row.try_get("delivered_at")?,
    })
}
