//! The extraction worker: takes queued exchanges, makes one extraction call for each, passes the
//! candidates through the gates and writes what is left.
//!
//! Lifecycle. One worker per replica, started with the server on its `TaskTracker` and stopped by
//! its `CancellationToken`. Its loop: wait for a free slot (`concurrency` of them), claim as many
//! due exchanges as there are free slots (a lease of `lease_ms` each), run one task per exchange;
//! when nothing is due, sleep until the earliest `next_at`, a local queueing (`wake`), the poll
//! interval or the stop. On stop it claims no more and waits for the extractions in flight (each
//! bounded by `timeout_ms`). A replica killed mid-extraction leaves leases that run out: the
//! exchanges are due again for any replica, and what the first run wrote is found, not written
//! again (`write::record_id`, the outcomes by position).
//!
//! One exchange: its tenant's daily budget is taken (calls and tokens, shared by every replica;
//! a spent budget puts the exchange off to the next UTC day, its attempt given back); the
//! extraction call goes to the upstream with the extraction credential only; 429, 529, 5xx and an
//! unreachable upstream put it off with a backoff (full jitter, `retry-after` honoured) until
//! `max_attempts`; any other refusal gives it up (kept, dead, until the age purge). The call's
//! tokens are added to the tenant's usage. Each candidate gets one outcome row; the exchange is
//! then deleted.
//!
//! Every record and outcome an exchange yields is written under its claim (`Claim`), checked in
//! the write's own transaction: once the exchange is gone (`forget` of its scope deleted it
//! during the extraction) or another replica holds it, the worker writes nothing more for it and
//! counts it as fenced.

use super::Shared;
use super::extract::{self, Extracted};
use super::gates::{self, Candidate, Exchange as Compared};
use super::write::{self, Failed};
use crate::clock::{format_ms, now_ms};
use crate::store::StoreError;
use crate::store::observer::{Claim, Exchange, Outcome};
use crate::upstream::UpstreamRequest;
use crate::upstream::wire::{HeaderMap, HeaderValue, Method, to_bytes};
use secrecy::ExposeSecret;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// How often a worker purges old exchanges, outcomes and usage.
const PRUNE_EVERY_MS: i64 = 60 * 60 * 1000;
const DAY_MS: i64 = 86_400_000;
/// The largest extraction answer read.
const MAX_ANSWER_BYTES: usize = 1024 * 1024;

/// What one extraction call came to.
enum Call {
    Answer(Extracted),
    /// Worth trying again later.
    Busy {
        outcome: &'static str,
        error: String,
        wait_ms: Option<u64>,
    },
    /// Not worth trying again.
    Refused {
        outcome: &'static str,
        error: String,
    },
}

pub(super) async fn run(shared: Arc<Shared>, stop: CancellationToken) {
    let config = &shared.config;
    let slots = Arc::new(Semaphore::new(config.concurrency));
    let in_flight = TaskTracker::new();
    let mut last_prune = 0;
    loop {
        let first = tokio::select! {
            _ = stop.cancelled() => break,
            permit = slots.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
        };
        let now = now_ms();
        if now - last_prune >= PRUNE_EVERY_MS {
            last_prune = now;
            prune(&shared, now).await;
        }
        let free = (1 + slots.available_permits()).min(config.batch_size as usize);
        let owner = format!("lease_{}", uuid::Uuid::new_v4().simple());
        let lease = i64::try_from(config.lease_ms).unwrap_or(i64::MAX / 2);
        let claimed = match shared.store.observer_claim(&owner, now, lease, free as u32).await {
            Ok(claimed) => claimed,
            Err(err) => {
                tracing::warn!(error = %err, "claiming queued exchanges failed; trying again shortly");
                drop(first);
                idle(&shared, &stop, None).await;
                continue;
            }
        };
        if claimed.is_empty() {
            drop(first);
            let next = shared.store.observer_next_due(now_ms()).await.ok().flatten();
            idle(&shared, &stop, next).await;
            continue;
        }
        let mut first = Some(first);
        for exchange in claimed {
            let permit = match first.take() {
                Some(permit) => permit,
                None => match slots.clone().acquire_owned().await {
                    Ok(permit) => permit,
                    Err(_) => break,
                },
            };
            let shared = shared.clone();
            let owner = owner.clone();
            in_flight.spawn(async move {
                process(&shared, exchange, &owner).await;
                drop(permit);
            });
        }
    }
    in_flight.close();
    in_flight.wait().await;
}

/// Sleeps until `next_due` (at most the poll interval), a wake-up, or the stop.
async fn idle(shared: &Shared, stop: &CancellationToken, next_due: Option<i64>) {
    let poll = shared.config.poll_interval_ms;
    let until = next_due.map(|at| u64::try_from(at - now_ms()).unwrap_or(0));
    let wait = until.map_or(poll, |ms| ms.clamp(1, poll));
    tokio::select! {
        _ = stop.cancelled() => {}
        _ = shared.wake.notified() => {}
        _ = tokio::time::sleep(Duration::from_millis(wait)) => {}
    }
}

async fn prune(shared: &Shared, now: i64) {
    let max_age = i64::try_from(shared.config.max_age.as_millis()).unwrap_or(i64::MAX / 2);
    let outcomes = i64::try_from(shared.config.outcomes_retention.as_millis()).unwrap_or(i64::MAX / 2);
    let usage_from = day_of(now - 40 * DAY_MS);
    match shared.store.observer_prune(now - max_age, now - outcomes, &usage_from).await {
        Ok(0) => {}
        Ok(removed) => tracing::info!(removed, "purged queued exchanges older than observer.max_age_hours"),
        Err(err) => tracing::warn!(error = %err, "purging old observation data failed"),
    }
}

/// `YYYY-MM-DD` (UTC) of a moment.
pub(super) fn day_of(ms: i64) -> String {
    format_ms(ms).chars().take(10).collect()
}

/// Claims up to `limit` due exchanges and processes them, waiting for each: for tests and the
/// CLI. Returns how many were claimed.
pub(super) async fn process_due(shared: &Shared, limit: u32) -> Result<usize, crate::store::StoreError> {
    let owner = format!("lease_{}", uuid::Uuid::new_v4().simple());
    let lease = i64::try_from(shared.config.lease_ms).unwrap_or(i64::MAX / 2);
    let claimed = shared.store.observer_claim(&owner, now_ms(), lease, limit).await?;
    let count = claimed.len();
    for exchange in claimed {
        process(shared, exchange, &owner).await;
    }
    Ok(count)
}

/// One claimed exchange, from budget to outcomes.
async fn process(shared: &Shared, exchange: Exchange, owner: &str) {
    let config = &shared.config;
    let max = i64::from(config.max_attempts);
    let id = exchange.new.id.clone();
    let tenant = exchange.new.tenant.clone();
    if exchange.attempts > max {
        give_up(shared, &id, owner, &format!("gave up after {max} attempts; the last one did not finish"))
            .await;
        return;
    }
    let now = now_ms();
    let day = day_of(now);
    match shared
        .store
        .observer_usage_take(&tenant, &day, config.daily_calls_per_tenant, config.daily_tokens_per_tenant)
        .await
    {
        Ok(true) => {}
        Ok(false) => {
            shared.metrics.call("budget");
            let midnight = (now / DAY_MS + 1) * DAY_MS;
            tracing::info!(%tenant, "a tenant's daily extraction budget is spent; its exchanges wait for the next day");
            retry(shared, &exchange, owner, midnight, "the tenant's daily extraction budget is spent", false)
                .await;
            return;
        }
        Err(err) => {
            retry(shared, &exchange, owner, now + 5_000, &format!("the store is unavailable: {err}"), false)
                .await;
            return;
        }
    }
    // The echo gate needs what was injected: without it an echo would pass, so the exchange waits.
    let injected = match injected_texts(shared, &exchange).await {
        Ok(injected) => injected,
        Err(err) => {
            retry(shared, &exchange, owner, now + 5_000, &format!("the store is unavailable: {err}"), false)
                .await;
            return;
        }
    };
    let extracted = match call(shared, &exchange, &injected).await {
        Call::Answer(extracted) => {
            shared.metrics.call("ok");
            extracted
        }
        Call::Busy { outcome, error, wait_ms } => {
            shared.metrics.call(outcome);
            if exchange.attempts >= max {
                give_up(
                    shared,
                    &id,
                    owner,
                    &format!("gave up after {} attempts; the last: {error}", exchange.attempts),
                )
                .await;
            } else {
                let delay = wait_ms.unwrap_or_else(|| {
                    backoff_ms(exchange.attempts, config.backoff_base_ms, config.backoff_max_ms)
                });
                tracing::info!(%id, attempt = exchange.attempts, delay_ms = delay, %error, "extraction failed; will retry");
                let next = now_ms() + i64::try_from(delay.min(config.backoff_max_ms)).unwrap_or(i64::MAX / 4);
                retry(shared, &exchange, owner, next, &error, true).await;
            }
            return;
        }
        Call::Refused { outcome, error } => {
            shared.metrics.call(outcome);
            give_up(shared, &id, owner, &error).await;
            return;
        }
    };
    if let Err(err) = shared
        .store
        .observer_usage_add_tokens(&tenant, &day, extracted.input_tokens, extracted.output_tokens)
        .await
    {
        tracing::warn!(error = %err, "recording extraction tokens failed");
    }
    shared.metrics.usage(&tenant, extracted.input_tokens, extracted.output_tokens);
    let claim = Claim { exchange_id: id.clone(), owner: owner.to_owned() };
    let done = match shared.store.observer_outcomes_of(&id).await {
        Ok(done) => done,
        Err(err) => {
            retry(
                shared,
                &exchange,
                owner,
                now_ms() + 5_000,
                &format!("the store is unavailable: {err}"),
                true,
            )
            .await;
            return;
        }
    };
    let compared = Compared {
        person: &exchange.new.person_text,
        answer: &exchange.new.answer_text,
        system: &exchange.new.system_text,
        injected: &injected,
    };
    for (position, raw) in extracted.candidates.iter().enumerate() {
        let position = position as i64;
        if done.iter().any(|o| o.position == position) {
            continue;
        }
        let record_type = gates::type_name(raw);
        let (verdict, gate, reason, record_id) =
            match decide(shared, &exchange, &compared, position, raw, &claim).await {
                Ok(Decided::Kept(kept)) => (kept.verdict, kept.gate, kept.reason, Some(kept.record_id)),
                Ok(Decided::Dropped(dropped)) => ("dropped", dropped.gate, dropped.reason, None),
                Err(Failed::Fenced) => {
                    fenced(shared, &id);
                    return;
                }
                Err(Failed::Unavailable(error)) => {
                    retry(shared, &exchange, owner, now_ms() + 5_000, &error, true).await;
                    return;
                }
                Err(Failed::Dropped(dropped)) => ("dropped", dropped.gate, dropped.reason, None),
            };
        shared.metrics.candidate(gate, verdict);
        tracing::info!(exchange = %id, position, gate, verdict, reason = %reason, "observed candidate decided");
        let outcome = Outcome {
            exchange_id: id.clone(),
            position,
            tenant: tenant.clone(),
            subject: exchange.new.subject.clone(),
            scope: exchange.new.scope.clone(),
            request_id: exchange.new.request_id.clone(),
            record_type: record_type.to_owned(),
            verdict: verdict.to_owned(),
            gate: gate.to_owned(),
            reason,
            record_id,
            at_ms: now_ms(),
        };
        if let Err(err) = shared.store.observer_outcome_insert(&outcome, &claim).await {
            if matches!(err, StoreError::Fenced) {
                fenced(shared, &id);
                return;
            }
            retry(
                shared,
                &exchange,
                owner,
                now_ms() + 5_000,
                &format!("the store is unavailable: {err}"),
                true,
            )
            .await;
            return;
        }
    }
    match shared.store.observer_finish(&id, owner).await {
        Ok(true) => {}
        Ok(false) => {
            tracing::warn!(%id, "an exchange's lease ran out before it was finished; another replica may extract it again (nothing is written twice)")
        }
        Err(err) => {
            tracing::warn!(%id, error = %err, "finishing an exchange failed; it will be extracted again (nothing is written twice)")
        }
    }
}

enum Decided {
    Kept(write::Kept),
    Dropped(gates::Dropped),
}

/// The exchange's claim was gone when it wrote: its scope was forgotten during the extraction
/// (or another replica took it over). Nothing more is written for it; its row, if another
/// replica holds it, is that replica's to finish.
fn fenced(shared: &Shared, id: &str) {
    shared.metrics.fenced.inc();
    tracing::info!(%id, "an exchange's claim was gone when it wrote (its scope forgotten meanwhile); nothing more is written for it");
}

/// One candidate through the gates and, if it passes them all, the writer (`Failed::Dropped`
/// never comes back from here: a refused write is `Decided::Dropped`).
async fn decide(
    shared: &Shared,
    exchange: &Exchange,
    compared: &Compared<'_>,
    position: i64,
    raw: &serde_json::Value,
    claim: &Claim,
) -> Result<Decided, Failed> {
    let candidate: Candidate = match gates::shape(raw) {
        Ok(candidate) => candidate,
        Err(dropped) => return Ok(Decided::Dropped(dropped)),
    };
    if let Some(dropped) = gates::secret_in_evidence(&candidate) {
        return Ok(Decided::Dropped(dropped));
    }
    // Schema and secrets in the content: the checks every write passes.
    let envelope = write::envelope(
        &exchange.new,
        position,
        &candidate,
        &exchange.new.schema_version,
        &shared.config.model,
    );
    if let Err(crate::memory::MemoryError::Invalid(problems)) = shared.memories.check_write(&envelope) {
        return Ok(Decided::Dropped(gates::envelope_problems(&problems)));
    }
    if let Some(dropped) = gates::judge(&candidate, compared, exchange.new.min_confidence) {
        return Ok(Decided::Dropped(dropped));
    }
    let (schema_version, model) = (&exchange.new.schema_version, &shared.config.model);
    match write::write(&shared.memories, &exchange.new, position, &candidate, schema_version, model, claim)
        .await
    {
        Ok(kept) => Ok(Decided::Kept(kept)),
        Err(Failed::Dropped(dropped)) => Ok(Decided::Dropped(dropped)),
        Err(other) => Err(other),
    }
}

/// The injected records' text, for the echo gate: those this tenant's index still holds, their
/// bodies from its cache or the store (gone ones are left out).
async fn injected_texts(
    shared: &Shared,
    exchange: &Exchange,
) -> Result<Vec<String>, crate::store::StoreError> {
    let heads: Vec<crate::index::RecordHead> = {
        let Some(index) = shared.memories.index().tenant(&exchange.new.tenant) else { return Ok(Vec::new()) };
        let index = index.read().unwrap_or_else(|p| p.into_inner());
        exchange
            .new
            .injected_ids
            .iter()
            .filter_map(|id| index.get(id))
            .map(|item| item.head.clone())
            .collect()
    };
    let heads: Vec<&crate::index::RecordHead> = heads.iter().collect();
    let bodies = shared.memories.bodies(&heads).await?;
    Ok(bodies.into_iter().flatten().map(|record| crate::memory::passage_text(&record)).collect())
}

/// The extraction call, within `timeout_ms`.
async fn call(shared: &Shared, exchange: &Exchange, injected: &[String]) -> Call {
    let config = &shared.config;
    let Some(credential) = &shared.credential else {
        return Call::Refused { outcome: "refused", error: "no extraction key is configured".to_owned() };
    };
    let body = extract::request_body(
        &config.model,
        config.max_tokens,
        &exchange.new.person_text,
        &exchange.new.answer_text,
        &exchange.new.system_text,
        injected,
    );
    let mut headers = HeaderMap::new();
    headers.insert("content-type", HeaderValue::from_static("application/json"));
    headers.insert("anthropic-version", HeaderValue::from_static("2023-06-01"));
    match HeaderValue::from_str(credential.expose_secret()) {
        Ok(mut value) => {
            value.set_sensitive(true);
            headers.insert("x-api-key", value);
        }
        Err(_) => {
            return Call::Refused {
                outcome: "refused",
                error: "the extraction key is not a valid header value".to_owned(),
            };
        }
    }
    let request = UpstreamRequest {
        method: Method::POST,
        path_and_query: "/v1/messages".to_owned(),
        headers,
        body: Some(reqwest::Body::from(body.to_string())),
    };
    let attempt = async {
        let response = match shared.upstream.send(request).await {
            Ok(response) => response,
            Err(err) => {
                return Call::Busy {
                    outcome: "unreachable",
                    error: format!("the upstream did not answer: {}", err.message()),
                    wait_ms: None,
                };
            }
        };
        let status = response.status().as_u16();
        let wait_ms = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(|secs| secs.saturating_mul(1000));
        let bytes = to_bytes(response.into_body(), MAX_ANSWER_BYTES).await;
        match (status, bytes) {
            (200..=299, Ok(bytes)) => {
                match serde_json::from_slice(&bytes)
                    .map_err(|e| e.to_string())
                    .and_then(|answer| extract::parse_answer(&answer, config.max_candidates))
                {
                    Ok(extracted) => Call::Answer(extracted),
                    Err(error) => Call::Refused { outcome: "unreadable", error },
                }
            }
            (200..=299, Err(_)) => Call::Busy {
                outcome: "upstream_error",
                error: "the extraction answer broke off".to_owned(),
                wait_ms: None,
            },
            (429, _) => Call::Busy {
                outcome: "rate_limited",
                error: "the upstream is rate limiting (429)".to_owned(),
                wait_ms,
            },
            (529, _) => Call::Busy {
                outcome: "overloaded",
                error: "the upstream is overloaded (529)".to_owned(),
                wait_ms,
            },
            (408 | 409 | 500..=599, _) => Call::Busy {
                outcome: "upstream_error",
                error: format!("the upstream answered {status}"),
                wait_ms,
            },
            _ => Call::Refused {
                outcome: "refused",
                error: format!("the upstream refused the extraction call ({status})"),
            },
        }
    };
    match tokio::time::timeout(config.timeout, attempt).await {
        Ok(call) => call,
        Err(_) => Call::Busy {
            outcome: "unreachable",
            error: "the extraction call timed out (observer.timeout_ms)".to_owned(),
            wait_ms: None,
        },
    }
}

async fn retry(
    shared: &Shared,
    exchange: &Exchange,
    owner: &str,
    next_at: i64,
    error: &str,
    attempted: bool,
) {
    match shared.store.observer_retry(&exchange.new.id, owner, now_ms(), next_at, error, attempted).await {
        Ok(true) => {}
        Ok(false) => {
            tracing::warn!(id = %exchange.new.id, "an exchange's lease ran out before its retry was recorded")
        }
        Err(err) => {
            tracing::warn!(id = %exchange.new.id, error = %err, "recording an exchange's retry failed; its lease will run out and it is tried again")
        }
    }
}

async fn give_up(shared: &Shared, id: &str, owner: &str, error: &str) {
    tracing::warn!(%id, %error, "an exchange is given up on");
    if let Err(err) = shared.store.observer_give_up(id, owner, now_ms(), error).await {
        tracing::warn!(%id, error = %err, "recording a given-up exchange failed");
    }
}

/// The wait after failed attempt number `attempt`: full jitter in `[0, min(max, base × 2^(n−1))]`.
fn backoff_ms(attempt: i64, base: u64, max: u64) -> u64 {
    let doublings = u32::try_from(attempt.saturating_sub(1).clamp(0, 40)).unwrap_or(40);
    let cap = base.saturating_mul(1u64 << doublings).min(max);
    uuid::Uuid::new_v4().as_u64_pair().0 % cap.saturating_add(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_stays_under_its_cap_and_days_are_utc_dates() {
        for attempt in 1..20 {
            assert!(backoff_ms(attempt, 1000, 30_000) <= 30_000);
        }
        assert!(backoff_ms(1, 1000, 30_000) <= 1000);
        assert_eq!(day_of(0), "1970-01-01");
        assert_eq!(day_of(DAY_MS - 1), "1970-01-01");
        assert_eq!(day_of(DAY_MS), "1970-01-02");
    }
}
