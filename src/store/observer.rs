//! Observation's tables (migrations/…_observer.sql): the exchanges waiting for extraction, the
//! gates' outcomes, and each tenant's daily usage.
//!
//! An exchange's life: `observer_insert` (idempotent on its id) → `observer_claim` (a worker
//! leases due rows: `attempts + 1`, `locked_until = now + lease`, `lease_owner` = the claim's
//! token) → `observer_finish` (processed: the row is deleted, words and answer with it),
//! `observer_retry` (the upstream was busy or down: waiting again until `next_at`) or
//! `observer_give_up`, each only by the lease's owner. A worker that dies mid-extraction finishes
//! nothing: its lease runs out and the exchange is due again for whoever claims next, and the
//! outcomes already written (keyed by exchange and position) make the second run write nothing
//! twice. Claiming is one statement, with `FOR UPDATE SKIP LOCKED` on PostgreSQL, as the trigger
//! outbox's (`outbox`).
//!
//! Fairness: a claim takes tenants in turn, not the oldest rows of the whole queue, so one
//! tenant's backlog of thousands does not hold everyone else's exchanges behind it. Each tenant's
//! own exchanges go oldest first; among tenants, the one served longest ago goes first
//! (`observer_turns` keeps the number of the claim that last took one of its exchanges), then the
//! one whose oldest exchange has waited longest. Ranking the due rows costs a sort of the due
//! queue per claim (a window over it): small beside an extraction call.
//!
//! The fence: a worker writes what an exchange yields only while the exchange is still its
//! (`Claim::hold`, inside the same transaction as the record or outcome it writes). `forget` of a
//! scope deletes the scope's exchanges first, so an extraction that was in flight then writes
//! nothing after it, on any replica: the hold is an `UPDATE` of the exchange's row, which waits
//! for a forget deleting that row (and then finds it gone), or makes the forget wait until the
//! write has committed, and the forget then erases the records that write left.

use super::{Store, StoreError};
use sqlx::Row;
use sqlx::any::AnyRow;
use std::collections::BTreeMap;

const COLUMNS: &str = "id, tenant, subject, scope, release_name, mode, min_confidence, schema_version, request_id, person_text, \
    answer_text, system_text, injected_json, state, attempts, next_at, last_error, created_at";

/// A finished exchange, as it is queued.
#[derive(Debug, Clone, PartialEq)]
pub struct NewExchange {
    pub id: String,
    pub tenant: String,
    pub subject: String,
    /// Where its records go: the caller's own write scope (`Caller::own_scope`) when it was
    /// queued.
    pub scope: String,
    pub release: String,
    /// `propose` or `write`.
    pub mode: String,
    pub min_confidence: f64,
    /// The schema version its records are written in (the release's first).
    pub schema_version: String,
    pub request_id: String,
    /// The person's words of the newest turn.
    pub person_text: String,
    /// The final answer's text.
    pub answer_text: String,
    /// The client's system prompt, bounded (for the echo gate).
    pub system_text: String,
    /// The records memgate injected into the request (for the echo gate).
    pub injected_ids: Vec<String>,
}

/// A claimed exchange.
#[derive(Debug, Clone, PartialEq)]
pub struct Exchange {
    pub new: NewExchange,
    pub state: String,
    /// Attempts started (this claim counts one).
    pub attempts: i64,
    pub next_at_ms: i64,
    pub last_error: Option<String>,
    pub created_at_ms: i64,
}

/// What the gates decided about one candidate.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub exchange_id: String,
    pub position: i64,
    pub tenant: String,
    pub subject: String,
    /// The exchange's scope (`NewExchange::scope`).
    pub scope: String,
    pub request_id: String,
    pub record_type: String,
    /// `written`, `refreshed`, `superseded` or `dropped`.
    pub verdict: String,
    /// The gate that decided: `schema`, `secret`, `echo`, `attribution`, `confidence`, `dedup`,
    /// `supersede`, or `kept`.
    pub gate: String,
    /// Why, in words that never quote a secret.
    pub reason: String,
    pub record_id: Option<String>,
    pub at_ms: i64,
}

/// A claimed exchange's right to write what it yields: its id and the claim's lease owner. It
/// holds while the row is there and leased to that owner; `forget` of its scope (which deletes
/// it) or another claim after the lease ran out ends it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub exchange_id: String,
    pub owner: String,
}

impl Claim {
    /// Holds the claim inside a write's transaction `conn`, or `StoreError::Fenced`. An
    /// `UPDATE` rather than a read: on PostgreSQL its row lock orders it against a concurrent
    /// forget's `DELETE` of the row (see the module comment); SQLite serializes writers.
    pub(crate) async fn hold(&self, conn: &mut sqlx::AnyConnection, now_ms: i64) -> Result<(), StoreError> {
        let held =
            sqlx::query("UPDATE observer_exchanges SET updated_at = $3 WHERE id = $1 AND lease_owner = $2")
                .bind(&self.exchange_id)
                .bind(&self.owner)
                .bind(now_ms)
                .execute(&mut *conn)
                .await?
                .rows_affected();
        if held == 1 { Ok(()) } else { Err(StoreError::Fenced) }
    }
}

/// A tenant's extraction usage on one UTC day.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub calls: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
}

impl Store {
    /// Queues an exchange unless one with its id is there already; true when it was new.
    pub async fn observer_insert(&self, exchange: &NewExchange, now_ms: i64) -> Result<bool, StoreError> {
        let result = sqlx::query(
            "INSERT INTO observer_exchanges (id, tenant, subject, release_name, mode, min_confidence, \
             schema_version, request_id, person_text, answer_text, system_text, injected_json, state, attempts, \
             next_at, created_at, updated_at, scope) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, 'pending', 0, $13, $13, $13, $14) \
             ON CONFLICT (id) DO NOTHING",
        )
        .bind(&exchange.id)
        .bind(&exchange.tenant)
        .bind(&exchange.subject)
        .bind(&exchange.release)
        .bind(&exchange.mode)
        .bind(exchange.min_confidence.to_string())
        .bind(&exchange.schema_version)
        .bind(&exchange.request_id)
        .bind(&exchange.person_text)
        .bind(&exchange.answer_text)
        .bind(&exchange.system_text)
        .bind(serde_json::Value::from(exchange.injected_ids.clone()).to_string())
        .bind(now_ms)
        .bind(&exchange.scope)
        .execute(self.pool())
        .await?;
        Ok(result.rows_affected() == 1)
    }

    /// How many exchanges `tenant` has queued (any state).
    pub async fn observer_queued(&self, tenant: &str) -> Result<i64, StoreError> {
        let row = sqlx::query("SELECT COUNT(*) FROM observer_exchanges WHERE tenant = $1")
            .bind(tenant)
            .fetch_one(self.pool())
            .await?;
        Ok(row.try_get(0)?)
    }

    /// Leases up to `limit` due exchanges to `owner` until `now + lease_ms`, counting an attempt
    /// for each, tenants in turn (the module comment). Concurrent claimers get disjoint rows.
    /// Returned in the order they were ranked: tenants interleaved.
    pub async fn observer_claim(
        &self,
        owner: &str,
        now_ms: i64,
        lease_ms: i64,
        limit: u32,
    ) -> Result<Vec<Exchange>, StoreError> {
        let query = sqlx::query(sqlx::AssertSqlSafe(claim_sql(self.backend())))
            .bind(now_ms + lease_ms)
            .bind(owner)
            .bind(now_ms)
            .bind(i64::from(limit.clamp(1, 1000)));
        let mut tx = self.relaxed().await?;
        let rows = query.fetch_all(&mut *tx).await?;
        let claimed = rows.iter().map(exchange_from_row).collect::<Result<Vec<_>, _>>()?;
        let tenants: std::collections::BTreeSet<&str> =
            claimed.iter().map(|e| e.new.tenant.as_str()).collect();
        let mut served = BTreeMap::new();
        if !tenants.is_empty() {
            for row in sqlx::query("SELECT tenant, turn FROM observer_turns").fetch_all(&mut *tx).await? {
                served.insert(row.try_get::<String, _>(0)?, row.try_get::<i64, _>(1)?);
            }
            // Two claims at once may take the same number: a tie, broken by waiting time. The
            // rows are written in the tenants' order, so two claims never wait on each other
            // crosswise.
            let turn = served.values().max().copied().unwrap_or(0) + 1;
            for tenant in tenants {
                sqlx::query(
                    "INSERT INTO observer_turns (tenant, turn) VALUES ($1, $2) \
                     ON CONFLICT (tenant) DO UPDATE SET turn = excluded.turn",
                )
                .bind(tenant)
                .bind(turn)
                .execute(&mut *tx)
                .await?;
            }
        }
        tx.commit().await?;
        Ok(in_turns(claimed, &served))
    }

    /// When the worker should look again: the earliest `next_at` of a waiting exchange not
    /// leased at `now`, or the earliest lease end.
    pub async fn observer_next_due(&self, now_ms: i64) -> Result<Option<i64>, StoreError> {
        let row = sqlx::query(
            "SELECT MIN(CASE WHEN locked_until IS NOT NULL AND locked_until > $1 THEN locked_until ELSE next_at END) \
             FROM observer_exchanges WHERE state IN ('pending', 'retrying')",
        )
        .bind(now_ms)
        .fetch_one(self.pool())
        .await?;
        Ok(row.try_get::<Option<i64>, _>(0)?)
    }

    /// Processed: the exchange goes, its words and answer with it. False when the lease was lost.
    pub async fn observer_finish(&self, id: &str, owner: &str) -> Result<bool, StoreError> {
        let result = sqlx::query("DELETE FROM observer_exchanges WHERE id = $1 AND lease_owner = $2")
            .bind(id)
            .bind(owner)
            .execute(self.pool())
            .await?;
        Ok(result.rows_affected() == 1)
    }

    /// Not extracted this time; waiting again until `next_at_ms`. `attempted` false gives the
    /// claim's attempt back (the budget was spent, nothing was tried). False when the lease was
    /// lost.
    pub async fn observer_retry(
        &self,
        id: &str,
        owner: &str,
        now_ms: i64,
        next_at_ms: i64,
        error: &str,
        attempted: bool,
    ) -> Result<bool, StoreError> {
        let query = sqlx::query(
            "UPDATE observer_exchanges SET state = 'retrying', next_at = $4, updated_at = $3, \
             last_error = $5, attempts = attempts - $6, locked_until = NULL, lease_owner = NULL \
             WHERE id = $1 AND lease_owner = $2",
        )
        .bind(id)
        .bind(owner)
        .bind(now_ms)
        .bind(next_at_ms)
        .bind(super::outbox::excerpt(error))
        .bind(if attempted { 0i64 } else { 1i64 });
        let mut tx = self.relaxed().await?;
        let result = query.execute(&mut *tx).await?;
        tx.commit().await?;
        Ok(result.rows_affected() == 1)
    }

    /// Given up on after its attempts: kept (`dead`, words and answer included) only until the
    /// age purge, for an operator to see why. False when the lease was lost.
    pub async fn observer_give_up(
        &self,
        id: &str,
        owner: &str,
        now_ms: i64,
        error: &str,
    ) -> Result<bool, StoreError> {
        let result = sqlx::query(
            "UPDATE observer_exchanges SET state = 'dead', updated_at = $3, last_error = $4, \
             locked_until = NULL, lease_owner = NULL WHERE id = $1 AND lease_owner = $2",
        )
        .bind(id)
        .bind(owner)
        .bind(now_ms)
        .bind(super::outbox::excerpt(error))
        .execute(self.pool())
        .await?;
        Ok(result.rows_affected() == 1)
    }

    /// The outcomes already recorded for an exchange (an earlier run that died before it
    /// finished), by position.
    pub async fn observer_outcomes_of(&self, exchange_id: &str) -> Result<Vec<Outcome>, StoreError> {
        let rows = sqlx::query(
            "SELECT exchange_id, position, tenant, subject, scope, request_id, record_type, verdict, gate, \
             reason, record_id, at FROM observer_outcomes WHERE exchange_id = $1 ORDER BY position",
        )
        .bind(exchange_id)
        .fetch_all(self.pool())
        .await?;
        rows.iter().map(outcome_from_row).collect()
    }

    /// Records one outcome while `claim` holds (else `StoreError::Fenced`, nothing recorded: a
    /// forgotten scope gets no outcome back); a second one for the same exchange and position is
    /// ignored.
    pub async fn observer_outcome_insert(&self, outcome: &Outcome, claim: &Claim) -> Result<(), StoreError> {
        let mut tx = self.begin_write().await?;
        claim.hold(&mut tx, outcome.at_ms).await?;
        sqlx::query(
            "INSERT INTO observer_outcomes (exchange_id, position, tenant, subject, request_id, record_type, \
             verdict, gate, reason, record_id, at, scope) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) \
             ON CONFLICT (exchange_id, position) DO NOTHING",
        )
        .bind(&outcome.exchange_id)
        .bind(outcome.position)
        .bind(&outcome.tenant)
        .bind(&outcome.subject)
        .bind(&outcome.request_id)
        .bind(&outcome.record_type)
        .bind(&outcome.verdict)
        .bind(&outcome.gate)
        .bind(super::outbox::excerpt(&outcome.reason))
        .bind(outcome.record_id.as_deref())
        .bind(outcome.at_ms)
        .bind(&outcome.scope)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// A tenant's newest outcomes (of one subject, when given), newest first.
    pub async fn observer_outcomes(
        &self,
        tenant: &str,
        subject: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Outcome>, StoreError> {
        let limit = i64::from(limit.clamp(1, 1000));
        let head = "SELECT exchange_id, position, tenant, subject, scope, request_id, record_type, verdict, \
                    gate, reason, record_id, at FROM observer_outcomes WHERE tenant = $1";
        let rows = match subject {
            Some(subject) => {
                sqlx::query(sqlx::AssertSqlSafe(format!(
                    "{head} AND subject = $2 ORDER BY at DESC, exchange_id, position LIMIT $3"
                )))
                .bind(tenant)
                .bind(subject)
                .bind(limit)
                .fetch_all(self.pool())
                .await?
            }
            None => {
                sqlx::query(sqlx::AssertSqlSafe(format!(
                    "{head} ORDER BY at DESC, exchange_id, position LIMIT $2"
                )))
                .bind(tenant)
                .bind(limit)
                .fetch_all(self.pool())
                .await?
            }
        };
        rows.iter().map(outcome_from_row).collect()
    }

    /// How many outcomes each gate decided for `tenant` (kept ones under `kept`).
    pub async fn observer_gate_counts(&self, tenant: &str) -> Result<BTreeMap<String, i64>, StoreError> {
        let rows =
            sqlx::query("SELECT gate, COUNT(*) FROM observer_outcomes WHERE tenant = $1 GROUP BY gate")
                .bind(tenant)
                .fetch_all(self.pool())
                .await?;
        let mut counts = BTreeMap::new();
        for row in rows {
            counts.insert(row.try_get::<String, _>(0)?, row.try_get::<i64, _>(1)?);
        }
        Ok(counts)
    }

    /// Queued exchanges by state (`pending`, `retrying`, `dead`), one tenant's or everyone's.
    pub async fn observer_queue_counts(
        &self,
        tenant: Option<&str>,
    ) -> Result<BTreeMap<String, i64>, StoreError> {
        let rows = match tenant {
            Some(tenant) => {
                sqlx::query("SELECT state, COUNT(*) FROM observer_exchanges WHERE tenant = $1 GROUP BY state")
                    .bind(tenant)
                    .fetch_all(self.pool())
                    .await?
            }
            None => {
                sqlx::query("SELECT state, COUNT(*) FROM observer_exchanges GROUP BY state")
                    .fetch_all(self.pool())
                    .await?
            }
        };
        let mut counts: BTreeMap<String, i64> =
            ["pending", "retrying", "dead"].iter().map(|s| ((*s).to_owned(), 0)).collect();
        for row in rows {
            counts.insert(row.try_get::<String, _>(0)?, row.try_get::<i64, _>(1)?);
        }
        Ok(counts)
    }

    /// Takes one extraction call from `tenant`'s budget for `day` when the day's calls and tokens
    /// are both under their caps; false (nothing taken) when either is spent. Every replica shares
    /// the count.
    pub async fn observer_usage_take(
        &self,
        tenant: &str,
        day: &str,
        max_calls: u64,
        max_tokens: u64,
    ) -> Result<bool, StoreError> {
        let mut tx = self.begin_write().await?;
        sqlx::query(
            "INSERT INTO observer_usage (tenant, day, calls, input_tokens, output_tokens) \
             VALUES ($1, $2, 0, 0, 0) ON CONFLICT (tenant, day) DO NOTHING",
        )
        .bind(tenant)
        .bind(day)
        .execute(&mut *tx)
        .await?;
        let result = sqlx::query(
            "UPDATE observer_usage SET calls = calls + 1 WHERE tenant = $1 AND day = $2 \
             AND calls < $3 AND input_tokens + output_tokens < $4",
        )
        .bind(tenant)
        .bind(day)
        .bind(i64::try_from(max_calls).unwrap_or(i64::MAX))
        .bind(i64::try_from(max_tokens).unwrap_or(i64::MAX))
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(result.rows_affected() == 1)
    }

    /// Adds an extraction call's tokens to `tenant`'s `day`.
    pub async fn observer_usage_add_tokens(
        &self,
        tenant: &str,
        day: &str,
        input_tokens: u64,
        output_tokens: u64,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE observer_usage SET input_tokens = input_tokens + $3, output_tokens = output_tokens + $4 \
             WHERE tenant = $1 AND day = $2",
        )
        .bind(tenant)
        .bind(day)
        .bind(i64::try_from(input_tokens).unwrap_or(i64::MAX / 4))
        .bind(i64::try_from(output_tokens).unwrap_or(i64::MAX / 4))
        .execute(self.pool())
        .await?;
        Ok(())
    }

    /// `tenant`'s usage per day from `since_day` (`YYYY-MM-DD`) on, oldest first.
    pub async fn observer_usage(
        &self,
        tenant: &str,
        since_day: &str,
    ) -> Result<Vec<(String, Usage)>, StoreError> {
        let rows = sqlx::query(
            "SELECT day, calls, input_tokens, output_tokens FROM observer_usage \
             WHERE tenant = $1 AND day >= $2 ORDER BY day",
        )
        .bind(tenant)
        .bind(since_day)
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|row| {
                Ok((
                    row.try_get("day")?,
                    Usage {
                        calls: row.try_get("calls")?,
                        input_tokens: row.try_get("input_tokens")?,
                        output_tokens: row.try_get("output_tokens")?,
                    },
                ))
            })
            .collect()
    }

    /// Erasure of a scope: the exchanges queued to write into it, claimed ones included (which
    /// fences their extractions: `Claim`), and every outcome about it. Returns (exchanges,
    /// outcomes) removed.
    pub async fn observer_forget_scope(&self, tenant: &str, scope: &str) -> Result<(u64, u64), StoreError> {
        let mut tx = self.begin_write().await?;
        let exchanges = sqlx::query("DELETE FROM observer_exchanges WHERE tenant = $1 AND scope = $2")
            .bind(tenant)
            .bind(scope)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        let outcomes = sqlx::query("DELETE FROM observer_outcomes WHERE tenant = $1 AND scope = $2")
            .bind(tenant)
            .bind(scope)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        tx.commit().await?;
        Ok((exchanges, outcomes))
    }

    /// Purges exchanges queued before `exchanges_before_ms` (never extracted: too old now) and
    /// outcomes older than `outcomes_before_ms`, and usage days before `usage_before_day`.
    /// Returns how many exchanges went.
    pub async fn observer_prune(
        &self,
        exchanges_before_ms: i64,
        outcomes_before_ms: i64,
        usage_before_day: &str,
    ) -> Result<u64, StoreError> {
        let exchanges = sqlx::query("DELETE FROM observer_exchanges WHERE created_at < $1")
            .bind(exchanges_before_ms)
            .execute(self.pool())
            .await?
            .rows_affected();
        sqlx::query("DELETE FROM observer_outcomes WHERE at < $1")
            .bind(outcomes_before_ms)
            .execute(self.pool())
            .await?;
        sqlx::query("DELETE FROM observer_usage WHERE day < $1")
            .bind(usage_before_day)
            .execute(self.pool())
            .await?;
        sqlx::query("DELETE FROM observer_turns WHERE tenant NOT IN (SELECT tenant FROM observer_exchanges)")
            .execute(self.pool())
            .await?;
        Ok(exchanges)
    }
}

/// The claim: due rows ranked by their place in their tenant's queue (oldest first), then by how
/// long ago their tenant was served, then by how long they waited. The middle `SELECT` repeats
/// the due conditions so that PostgreSQL re-checks them on a row another claim took meanwhile
/// (the window cannot sit beside `FOR UPDATE` in one query level).
fn claim_sql(backend: super::Backend) -> String {
    let skip_locked = match backend {
        super::Backend::Sqlite => "",
        super::Backend::Postgres => " FOR UPDATE SKIP LOCKED",
    };
    format!(
        "UPDATE observer_exchanges \
         SET locked_until = $1, lease_owner = $2, attempts = attempts + 1, updated_at = $3 \
         WHERE id IN (SELECT id FROM observer_exchanges \
             WHERE state IN ('pending', 'retrying') AND next_at <= $3 \
               AND (locked_until IS NULL OR locked_until <= $3) \
               AND id IN (SELECT id FROM ( \
                   SELECT e.id, e.next_at, COALESCE(t.turn, 0) AS served, \
                          ROW_NUMBER() OVER (PARTITION BY e.tenant ORDER BY e.next_at, e.id) AS place \
                   FROM observer_exchanges e LEFT JOIN observer_turns t ON t.tenant = e.tenant \
                   WHERE e.state IN ('pending', 'retrying') AND e.next_at <= $3 \
                     AND (e.locked_until IS NULL OR e.locked_until <= $3)) ranked \
                 WHERE place <= $4 ORDER BY place, served, next_at, id LIMIT $4){skip_locked}) \
         RETURNING {COLUMNS}"
    )
}

/// Claimed rows as the claim ranked them (`RETURNING` keeps no order), from the tenants' turns
/// before the claim (`served`): each tenant's oldest first, tenants in turn.
fn in_turns(mut claimed: Vec<Exchange>, served: &BTreeMap<String, i64>) -> Vec<Exchange> {
    claimed.sort_by(|a, b| {
        (&a.new.tenant, a.next_at_ms, &a.new.id).cmp(&(&b.new.tenant, b.next_at_ms, &b.new.id))
    });
    let mut places = Vec::with_capacity(claimed.len());
    let mut place = 0usize;
    for (i, exchange) in claimed.iter().enumerate() {
        place = if i > 0 && claimed[i - 1].new.tenant == exchange.new.tenant { place + 1 } else { 0 };
        places.push(place);
    }
    let turn = |e: &Exchange| served.get(&e.new.tenant).copied().unwrap_or(0);
    let mut ranked: Vec<(usize, Exchange)> = places.into_iter().zip(claimed).collect();
    ranked.sort_by(|(pa, a), (pb, b)| {
        (pa, turn(a), a.next_at_ms, &a.new.id).cmp(&(pb, turn(b), b.next_at_ms, &b.new.id))
    });
    ranked.into_iter().map(|(_, exchange)| exchange).collect()
}

fn exchange_from_row(row: &AnyRow) -> Result<Exchange, StoreError> {
    let injected: String = row.try_get("injected_json")?;
    let min_confidence: String = row.try_get("min_confidence")?;
    Ok(Exchange {
        new: NewExchange {
            id: row.try_get("id")?,
            tenant: row.try_get("tenant")?,
            subject: row.try_get("subject")?,
            scope: row.try_get("scope")?,
            release: row.try_get("release_name")?,
            mode: row.try_get("mode")?,
            min_confidence: min_confidence
                .parse()
                .map_err(|_| StoreError::Corrupt(format!("observer min_confidence `{min_confidence}`")))?,
            schema_version: row.try_get("schema_version")?,
            request_id: row.try_get("request_id")?,
            person_text: row.try_get("person_text")?,
            answer_text: row.try_get("answer_text")?,
            system_text: row.try_get("system_text")?,
            injected_ids: serde_json::from_str(&injected)
                .map_err(|err| StoreError::Corrupt(format!("observer injected_json: {err}")))?,
        },
        state: row.try_get("state")?,
        attempts: row.try_get("attempts")?,
        next_at_ms: row.try_get("next_at")?,
        last_error: row.try_get("last_error")?,
        created_at_ms: row.try_get("created_at")?,
    })
}

fn outcome_from_row(row: &AnyRow) -> Result<Outcome, StoreError> {
    Ok(Outcome {
        exchange_id: row.try_get("exchange_id")?,
        position: row.try_get("position")?,
        tenant: row.try_get("tenant")?,
        subject: row.try_get("subject")?,
        scope: row.try_get("scope")?,
        request_id: row.try_get("request_id")?,
        record_type: row.try_get("record_type")?,
        verdict: row.try_get("verdict")?,
        gate: row.try_get("gate")?,
        reason: row.try_get("reason")?,
        record_id: row.try_get("record_id")?,
        at_ms: row.try_get("at")?,
    })
}
