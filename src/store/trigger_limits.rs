//! The limits on triggers that every replica must see alike, kept where the outbox is
//! (migrations/…_trigger_limits.sql): a firing's cooldown, the tenant's cap on waiting actions,
//! and the pace of deliveries to each endpoint. In memory they would be per replica, and N
//! replicas would fire N times and deliver N times the rate.
//!
//! `outbox_insert_firings` writes a request's firings in one transaction, each firing (one
//! record's actions) whole or not at all, in this order: already written (a retried turn) →
//! nothing to do; its tenant would pass `max_waiting` waiting actions → refused; another turn's
//! cooldown for the same record and subject still runs → cooled down; else its cooldown is taken
//! (`INSERT … ON CONFLICT DO UPDATE … WHERE the old one ran out`, atomic on both databases: a
//! second writer waits for the first's row and then finds it cooling) and its actions written.
//! Firings are taken in one order (tenant, record, subject) so two writers never wait on each
//! other's rows. The tenant's count is read once per transaction, not locked: writers at the same
//! moment may pass the cap by what they write together, a few actions, never a flood.
//!
//! `trigger_pace_take` is a generic cell rate algorithm in one row per endpoint: `tat` (the
//! theoretical arrival time) moves by `interval` per delivery, and a delivery may go while `tat`
//! is at most `burst` ahead of now; so `60000 / interval` per minute, in bursts of up to
//! `burst / interval + 1`.

use super::outbox::{NewOutboxAction, insert_action};
use super::{Store, StoreError};
use sqlx::Row;
use std::collections::HashMap;

/// One firing record's actions for one request, written together or not at all.
#[derive(Debug, Clone, PartialEq)]
pub struct NewFiring {
    pub tenant: String,
    pub record_id: String,
    /// The turn that fired it (`crate::triggers::turn_id`).
    pub request_id: String,
    /// The cooldown it starts, if the record has one.
    pub cooldown: Option<NewCooldown>,
    pub actions: Vec<NewOutboxAction>,
}

/// Who a cooldown is for and until when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewCooldown {
    /// A hash of the subject, or of the caller's key (`crate::triggers::cooled_for`).
    pub cooled_for: String,
    pub until_ms: i64,
}

/// What became of one firing in `outbox_insert_firings`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Written: this many actions were new.
    Added(u64),
    /// Written already (a retried turn): nothing done.
    Repeated,
    /// Inside another turn's cooldown: nothing written.
    Cooled,
    /// Refused, this many actions: the tenant had its cap of waiting actions.
    Refused(u64),
}

/// The outcomes of a write, counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Written {
    /// Actions written.
    pub added: u64,
    /// Firings found written already (a retried turn): nothing done.
    pub repeated: u64,
    /// Firings inside another turn's cooldown: nothing written.
    pub cooled: u64,
    /// Actions refused: their tenant had its cap of waiting actions.
    pub refused: u64,
}

impl Written {
    pub fn of(outcomes: &[Outcome]) -> Written {
        let mut written = Written::default();
        for outcome in outcomes {
            match outcome {
                Outcome::Added(n) => written.added += n,
                Outcome::Repeated => written.repeated += 1,
                Outcome::Cooled => written.cooled += 1,
                Outcome::Refused(n) => written.refused += n,
            }
        }
        written
    }
}

/// What `trigger_pace_take` found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pace {
    /// A delivery may go now; it is counted.
    Taken,
    /// Not before this time.
    Full { allowed_at_ms: i64 },
}

impl Store {
    /// Writes `firings` as the module comment says; what became of each, in their order.
    /// `max_waiting` is the most pending and retrying actions a tenant may have.
    pub async fn outbox_insert_firings(
        &self,
        firings: &[NewFiring],
        now_ms: i64,
        max_waiting: u64,
    ) -> Result<Vec<Outcome>, StoreError> {
        let mut outcomes = vec![Outcome::Added(0); firings.len()];
        let mut order: Vec<(usize, &NewFiring)> =
            firings.iter().enumerate().filter(|(_, f)| !f.actions.is_empty()).collect();
        if order.is_empty() {
            return Ok(outcomes);
        }
        order.sort_by(|(_, a), (_, b)| lock_key(a).cmp(&lock_key(b)));
        let mut waiting: HashMap<&str, u64> = HashMap::new();
        let mut tx = self.begin_write().await?;
        for (at, firing) in order {
            // A firing's actions are written together, so the first one tells.
            let seen = sqlx::query("SELECT 1 FROM trigger_outbox WHERE id = $1")
                .bind(&firing.actions[0].id)
                .fetch_optional(&mut *tx)
                .await?;
            if seen.is_some() {
                outcomes[at] = Outcome::Repeated;
                continue;
            }
            // Actions that go in dead (no such endpoint) wait for nobody.
            let wants = firing.actions.iter().filter(|a| a.dead_reason.is_none()).count() as u64;
            if wants > 0 {
                let count = match waiting.get(firing.tenant.as_str()) {
                    Some(count) => *count,
                    None => count_waiting(&mut tx, &firing.tenant, max_waiting).await?,
                };
                waiting.insert(&firing.tenant, count);
                if count + wants > max_waiting {
                    outcomes[at] = Outcome::Refused(firing.actions.len() as u64);
                    continue;
                }
            }
            if let Some(cooldown) = &firing.cooldown {
                let taken = sqlx::query(
                    "INSERT INTO trigger_cooldowns (tenant, record_id, cooled_for, request_id, until_at) \
                     VALUES ($1, $2, $3, $4, $5) \
                     ON CONFLICT (tenant, record_id, cooled_for) DO UPDATE SET \
                     until_at = CASE WHEN trigger_cooldowns.request_id = excluded.request_id \
                         THEN trigger_cooldowns.until_at ELSE excluded.until_at END, \
                     request_id = excluded.request_id \
                     WHERE trigger_cooldowns.until_at <= $6 OR trigger_cooldowns.request_id = excluded.request_id",
                )
                .bind(&firing.tenant)
                .bind(&firing.record_id)
                .bind(&cooldown.cooled_for)
                .bind(&firing.request_id)
                .bind(cooldown.until_ms)
                .bind(now_ms)
                .execute(&mut *tx)
                .await?;
                if taken.rows_affected() == 0 {
                    outcomes[at] = Outcome::Cooled;
                    continue;
                }
            }
            let mut added = 0;
            for action in &firing.actions {
                added += insert_action(&mut tx, action, now_ms).await?;
            }
            outcomes[at] = Outcome::Added(added);
            *waiting.entry(&firing.tenant).or_default() += wants;
        }
        tx.commit().await?;
        Ok(outcomes)
    }

    /// Erasure: the cooldowns of `record_ids`, and those kept for `cooled_for` (a subject's hash)
    /// when given. Returns how many went.
    pub async fn trigger_cooldowns_forget(
        &self,
        tenant: &str,
        record_ids: &[String],
        cooled_for: Option<&str>,
    ) -> Result<u64, StoreError> {
        let mut tx = self.begin_write().await?;
        let mut removed = 0;
        for id in record_ids {
            let result = sqlx::query("DELETE FROM trigger_cooldowns WHERE tenant = $1 AND record_id = $2")
                .bind(tenant)
                .bind(id)
                .execute(&mut *tx)
                .await?;
            removed += result.rows_affected();
        }
        if let Some(cooled_for) = cooled_for {
            let result = sqlx::query("DELETE FROM trigger_cooldowns WHERE tenant = $1 AND cooled_for = $2")
                .bind(tenant)
                .bind(cooled_for)
                .execute(&mut *tx)
                .await?;
            removed += result.rows_affected();
        }
        tx.commit().await?;
        Ok(removed)
    }

    /// Deletes the cooldowns that ran out by `now_ms`. Returns how many went.
    pub async fn trigger_cooldowns_prune(&self, now_ms: i64) -> Result<u64, StoreError> {
        let result = sqlx::query("DELETE FROM trigger_cooldowns WHERE until_at <= $1")
            .bind(now_ms)
            .execute(self.pool())
            .await?;
        Ok(result.rows_affected())
    }

    /// Takes one delivery of `endpoint`'s pace at `now_ms`, or says when one will be free: the
    /// generic cell rate algorithm of the module comment, shared by every replica.
    pub async fn trigger_pace_take(
        &self,
        endpoint: &str,
        now_ms: i64,
        interval_ms: i64,
        burst_ms: i64,
    ) -> Result<Pace, StoreError> {
        let mut tx = self.relaxed().await?;
        let taken = sqlx::query(
            "INSERT INTO trigger_endpoint_pace (endpoint, tat) VALUES ($1, $2) \
             ON CONFLICT (endpoint) DO UPDATE SET tat = CASE WHEN trigger_endpoint_pace.tat > $3 \
                 THEN trigger_endpoint_pace.tat ELSE $3 END + $4 \
             WHERE trigger_endpoint_pace.tat - $3 <= $5",
        )
        .bind(endpoint)
        .bind(now_ms + interval_ms)
        .bind(now_ms)
        .bind(interval_ms)
        .bind(burst_ms)
        .execute(&mut *tx)
        .await?;
        let pace = if taken.rows_affected() == 1 {
            Pace::Taken
        } else {
            let row = sqlx::query("SELECT tat FROM trigger_endpoint_pace WHERE endpoint = $1")
                .bind(endpoint)
                .fetch_one(&mut *tx)
                .await?;
            let tat: i64 = row.try_get(0)?;
            Pace::Full { allowed_at_ms: tat - burst_ms }
        };
        tx.commit().await?;
        Ok(pace)
    }
}

fn lock_key(firing: &NewFiring) -> (&str, &str, &str) {
    let cooled_for = firing.cooldown.as_ref().map_or("", |c| c.cooled_for.as_str());
    (&firing.tenant, &firing.record_id, cooled_for)
}

/// A tenant's pending and retrying actions, counted up to `limit` (past it the number is moot).
async fn count_waiting(
    tx: &mut sqlx::Transaction<'static, sqlx::Any>,
    tenant: &str,
    limit: u64,
) -> Result<u64, StoreError> {
    let row = sqlx::query(
        "SELECT COUNT(*) FROM (SELECT 1 FROM trigger_outbox \
         WHERE tenant = $1 AND state IN ('pending', 'retrying') LIMIT $2) AS waiting",
    )
    .bind(tenant)
    .bind(i64::try_from(limit.saturating_add(1)).unwrap_or(i64::MAX))
    .fetch_one(&mut **tx)
    .await?;
    let count: i64 = row.try_get(0)?;
    Ok(u64::try_from(count).unwrap_or(0))
}
