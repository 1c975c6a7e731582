//! The delivery worker: takes due actions from the outbox and POSTs them, signed, to their
//! endpoints.
//!
//! Lifecycle. One worker per replica, started with the server (`spawn`, on the server's
//! `TaskTracker`) and stopped by its `CancellationToken`. Its loop: wait for a free delivery slot
//! (`concurrency` of them), claim as many due actions as there are free slots (a lease of
//! `lease_ms` each), and start one task per action; when nothing is due, sleep until the earliest
//! `next_at`, a local decision (`wake`), the poll interval, or the stop. On stop it claims no more
//! and waits for the deliveries in flight (each bounded by its endpoint's timeout). A replica
//! killed mid-delivery leaves leases that run out: the actions are due again for any replica.
//!
//! Pace. Before an attempt the endpoint's pace is taken (`Store::trigger_pace_take`, shared by
//! every replica: `max_per_minute` attempts a minute, in bursts of up to as many). An endpoint at
//! its pace gets nothing: the action goes back to waiting, its attempt given back, due at the
//! next free slot (`limits::Paces` spreads a backlog one per slot), and is counted as deferred.
//!
//! One attempt: resolve the endpoint's host (checked by `safety`), POST the stored body with the
//! Standard Webhooks headers (a fresh timestamp and signature per attempt, the same `webhook-id`),
//! follow no redirect, read at most 1 KiB of the answer. A 2xx is delivered. `410 Gone` and a
//! refused address are dead at once. Anything else is retried after an exponential backoff with
//! full jitter (`backoff_ms`), or after `Retry-After` (seconds or an HTTP date) on a 429 or 503,
//! until `max_attempts`; then the action is dead, replayable from the admin API. What an attempt
//! records (`last_error`, `last_response`) and logs names the endpoint, never its URL, and quotes
//! the receiver's answer cleaned of control characters (`redact`).

use super::limits::Paces;
use super::metrics::TriggerMetrics;
use super::redact::{MAX_QUOTED_REPLY_CHARS, clean_reply, without_url};
use super::safety::{CheckedResolver, check_literal, refusal_in};
use super::signing;
use crate::clock::{format_ms, now_ms};
use crate::config::triggers::{EndpointConfig, TriggersConfig};
use crate::store::outbox::{MAX_EXCERPT_BYTES, OutboxAction};
use crate::store::trigger_limits::Pace;
use crate::store::{Store, StoreError};
use reqwest::header::{CONTENT_TYPE, HeaderMap, RETRY_AFTER, USER_AGENT};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio::sync::{Notify, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// How often a worker prunes old delivered and dead actions.
const PRUNE_EVERY_MS: i64 = 60 * 60 * 1000;

/// What one attempt came to.
#[derive(Debug, Clone, PartialEq)]
pub enum Attempt {
    Delivered {
        status: u16,
        response: String,
    },
    /// Worth trying again (after `retry_after_ms` when the receiver said so).
    Failed {
        status: Option<u16>,
        error: String,
        retry_after_ms: Option<u64>,
    },
    /// Not worth trying again: a refused address, `410 Gone`, no such endpoint.
    Refused {
        status: Option<u16>,
        error: String,
    },
}

/// The worker's shared state.
pub struct Delivery {
    store: Store,
    config: Arc<TriggersConfig>,
    metrics: TriggerMetrics,
    wake: Arc<Notify>,
    /// One HTTP client per endpoint, made on first use: its own timeout, resolver and pool.
    clients: Mutex<HashMap<String, reqwest::Client>>,
    paces: Paces,
}

impl Delivery {
    /// `wake` is notified by whoever inserts actions on this replica (`Triggers::enqueue`).
    pub fn new(
        store: Store,
        config: Arc<TriggersConfig>,
        metrics: TriggerMetrics,
        wake: Arc<Notify>,
    ) -> Delivery {
        Delivery {
            store,
            config,
            metrics,
            wake,
            clients: Mutex::new(HashMap::new()),
            paces: Paces::default(),
        }
    }

    /// Starts the worker on `tasks`; it runs until `stop` is cancelled, then finishes the
    /// deliveries in flight.
    pub fn spawn(
        self: Arc<Self>,
        tasks: &TaskTracker,
        stop: CancellationToken,
    ) -> tokio::task::JoinHandle<()> {
        tasks.spawn(async move {
            tracing::info!(endpoints = self.config.endpoints.len(), "trigger delivery worker started");
            self.run(stop).await;
            tracing::info!("trigger delivery worker stopped");
        })
    }

    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        let slots = Arc::new(Semaphore::new(self.config.concurrency.max(1)));
        let in_flight = TaskTracker::new();
        let mut last_prune = 0;
        let mut look_first = false;
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
                self.prune(now).await;
            }
            // After a quiet poll, a read says whether anything is due before a claim (a write)
            // is tried: an idle replica then writes nothing.
            if look_first {
                match self.store.outbox_next_due(now).await {
                    Ok(Some(at)) if at <= now => {}
                    Ok(next) => {
                        drop(first);
                        look_first = self.idle(&stop, next).await;
                        continue;
                    }
                    Err(_) => {}
                }
            }
            let free = (1 + slots.available_permits()).min(self.config.batch_size.max(1) as usize);
            let owner = format!("lease_{}", uuid::Uuid::new_v4().simple());
            let lease = i64::try_from(self.config.lease_ms).unwrap_or(i64::MAX / 2);
            let claimed = match self.store.outbox_claim(&owner, now, lease, free as u32).await {
                Ok(claimed) => claimed,
                Err(err) => {
                    tracing::warn!(error = %err, "claiming trigger actions failed; trying again shortly");
                    drop(first);
                    look_first = self.idle(&stop, None).await;
                    continue;
                }
            };
            if claimed.is_empty() {
                drop(first);
                let next = self.store.outbox_next_due(now_ms()).await.ok().flatten();
                look_first = self.idle(&stop, next).await;
                continue;
            }
            look_first = false;
            let mut first = Some(first);
            for action in claimed {
                let permit = match first.take() {
                    Some(permit) => permit,
                    None => match slots.clone().acquire_owned().await {
                        Ok(permit) => permit,
                        Err(_) => break,
                    },
                };
                let this = Arc::clone(&self);
                let owner = owner.clone();
                in_flight.spawn(async move {
                    this.deliver(action, &owner).await;
                    drop(permit);
                });
            }
        }
        in_flight.close();
        in_flight.wait().await;
    }

    /// Sleeps until `next_due` (at most the poll interval), a wake-up, or the stop. True when the
    /// poll interval ran out with nothing known to be due: the caller looks before it claims.
    async fn idle(&self, stop: &CancellationToken, next_due: Option<i64>) -> bool {
        let poll = self.config.poll_interval_ms.max(1);
        // Milliseconds until the next known due time (0 when it has passed).
        let until = next_due.map(|at| u64::try_from(at - now_ms()).unwrap_or(0));
        let wait = until.map_or(poll, |ms| ms.clamp(1, poll));
        let known = until.is_some_and(|ms| ms <= poll);
        tokio::select! {
            _ = stop.cancelled() => false,
            _ = self.wake.notified() => false,
            _ = tokio::time::sleep(Duration::from_millis(wait)) => !known,
        }
    }

    async fn prune(&self, now: i64) {
        let hour = 60 * 60 * 1000;
        let delivered = now - i64::try_from(self.config.delivered_retention_hours).unwrap_or(0) * hour;
        let dead = now - i64::try_from(self.config.dead_retention_hours).unwrap_or(0) * hour;
        match self.store.outbox_prune(delivered, dead).await {
            Ok(0) => {}
            Ok(removed) => tracing::info!(removed, "pruned old trigger actions"),
            Err(err) => tracing::warn!(error = %err, "pruning trigger actions failed"),
        }
        if let Err(err) = self.store.trigger_cooldowns_prune(now).await {
            tracing::warn!(error = %err, "pruning trigger cooldowns failed");
        }
    }

    /// Claims up to `limit` due actions and delivers them, waiting for every one: for the CLI and
    /// tests. Returns how many were claimed.
    pub async fn deliver_due(&self, limit: u32) -> Result<usize, StoreError> {
        let owner = format!("lease_{}", uuid::Uuid::new_v4().simple());
        let lease = i64::try_from(self.config.lease_ms).unwrap_or(i64::MAX / 2);
        let claimed = self.store.outbox_claim(&owner, now_ms(), lease, limit).await?;
        let count = claimed.len();
        futures_util::future::join_all(claimed.into_iter().map(|action| self.deliver(action, &owner))).await;
        Ok(count)
    }

    /// One claimed action: attempt it and record the outcome, unless its endpoint is at its pace
    /// (then it waits again, unattempted).
    async fn deliver(&self, action: OutboxAction, owner: &str) {
        let max = i64::from(self.config.max_attempts);
        if action.attempts <= max
            && let Some(endpoint) = self.config.endpoints.get(&action.endpoint)
            && let Some(at) = self.paced(&action.endpoint, endpoint).await
        {
            self.defer(&action, owner, at).await;
            return;
        }
        let outcome = if action.attempts > max {
            // The claim that made the last allowed attempt never finished (its replica stopped).
            Attempt::Refused {
                status: None,
                error: format!("gave up after {max} attempts; the last one did not finish"),
            }
        } else {
            match self.config.endpoints.get(&action.endpoint) {
                Some(endpoint) => {
                    let started = std::time::Instant::now();
                    let attempt = self.attempt(&action, endpoint).await;
                    self.metrics.attempt_latency.observe(started.elapsed().as_secs_f64());
                    attempt
                }
                None => Attempt::Refused {
                    status: None,
                    error: format!(
                        "no endpoint named `{}` is configured ([triggers.endpoints.{}]); configure it and replay",
                        action.endpoint, action.endpoint
                    ),
                },
            }
        };
        let now = now_ms();
        let marked = match outcome {
            Attempt::Delivered { status, response } => {
                self.metrics.delivered.inc();
                // From the decision; a replay's wait for an operator is no delivery latency.
                if action.replays == 0 {
                    let latency = (now - action.created_at_ms).max(0) as f64 / 1000.0;
                    self.metrics.delivery_latency.observe(latency);
                }
                tracing::debug!(id = %action.id, endpoint = %action.endpoint, status, "trigger action delivered");
                self.store.outbox_mark_delivered(&action.id, owner, now, status, &response).await
            }
            Attempt::Failed { status, error, retry_after_ms } if action.attempts < max => {
                self.metrics.failed.inc();
                let delay = match retry_after_ms {
                    Some(wait) => wait.min(self.config.backoff_max_ms),
                    None => backoff_ms(action.attempts, &self.config, random_u64()),
                };
                let next = now + i64::try_from(delay).unwrap_or(i64::MAX / 4);
                tracing::info!(id = %action.id, endpoint = %action.endpoint, attempt = action.attempts, delay_ms = delay, %error, "trigger delivery failed; will retry");
                self.store.outbox_mark_retry(&action.id, owner, now, next, status, &error).await
            }
            Attempt::Failed { status, error, .. } => {
                self.metrics.dead.inc();
                let error = format!("gave up after {} attempts; the last: {error}", action.attempts);
                tracing::warn!(id = %action.id, endpoint = %action.endpoint, %error, "trigger action is dead");
                self.store.outbox_mark_dead(&action.id, owner, now, status, &error).await
            }
            Attempt::Refused { status, error } => {
                self.metrics.dead.inc();
                tracing::warn!(id = %action.id, endpoint = %action.endpoint, %error, "trigger action is dead");
                self.store.outbox_mark_dead(&action.id, owner, now, status, &error).await
            }
        };
        match marked {
            Ok(true) => {}
            Ok(false) => {
                tracing::warn!(id = %action.id, "a trigger action's lease ran out before its outcome was recorded; another replica may send it again")
            }
            Err(err) => {
                tracing::warn!(id = %action.id, error = %err, "recording a trigger delivery failed; the lease will run out and it will be sent again")
            }
        }
    }

    /// `None` when a delivery to `name` may go now (one is counted); else when it may.
    async fn paced(&self, name: &str, endpoint: &EndpointConfig) -> Option<i64> {
        let per_minute = endpoint.max_per_minute.max(1);
        let interval = (60_000 / i64::from(per_minute)).max(1);
        let burst = 60_000 - interval;
        let now = now_ms();
        if let Some(slot) = self.paces.known_full(name, now, interval) {
            return Some(slot);
        }
        match self.store.trigger_pace_take(name, now, interval, burst).await {
            Ok(Pace::Taken) => None,
            Ok(Pace::Full { allowed_at_ms }) => {
                let (slot, newly) = self.paces.full(name, now, allowed_at_ms, interval);
                if newly {
                    tracing::info!(endpoint = %name, max_per_minute = per_minute, until = %format_ms(allowed_at_ms), "a trigger endpoint is at its pace; its deliveries wait in the outbox");
                }
                Some(slot)
            }
            Err(err) => {
                // Availability over the pace: the database that failed here is likely to fail
                // the outcome too, and the lease then brings the action back anyway.
                tracing::warn!(endpoint = %name, error = %err, "reading a trigger endpoint's pace failed; delivering without it");
                None
            }
        }
    }

    /// Puts a claimed action back, unattempted, due at `next_at_ms`.
    async fn defer(&self, action: &OutboxAction, owner: &str, next_at_ms: i64) {
        self.metrics.deferred.inc();
        tracing::debug!(id = %action.id, endpoint = %action.endpoint, next_at = %format_ms(next_at_ms), "trigger delivery deferred: its endpoint is at its pace");
        match self.store.outbox_defer(&action.id, owner, now_ms(), next_at_ms).await {
            Ok(true) => {}
            Ok(false) => {
                tracing::warn!(id = %action.id, "a deferred trigger action's lease ran out first; it is due again")
            }
            Err(err) => {
                tracing::warn!(id = %action.id, error = %err, "deferring a trigger action failed; its lease will run out and it will be due again")
            }
        }
    }

    /// One HTTP attempt. Every error names the endpoint by `action.endpoint` and never carries
    /// the URL; a receiver's answer is quoted cleaned and cut.
    pub async fn attempt(&self, action: &OutboxAction, endpoint: &EndpointConfig) -> Attempt {
        let url = endpoint.url().clone();
        match self.attempt_at(action, endpoint, &url).await {
            Attempt::Failed { status, error, retry_after_ms } => {
                Attempt::Failed { status, error: without_url(&error, &url), retry_after_ms }
            }
            Attempt::Refused { status, error } => {
                Attempt::Refused { status, error: without_url(&error, &url) }
            }
            Attempt::Delivered { status, response } => {
                Attempt::Delivered { status, response: without_url(&response, &url) }
            }
        }
    }

    async fn attempt_at(&self, action: &OutboxAction, endpoint: &EndpointConfig, url: &url::Url) -> Attempt {
        let name = &action.endpoint;
        if let Err(refused) = check_literal(url, endpoint.allow_private) {
            return Attempt::Refused {
                status: None,
                error: format!("refused to call endpoint `{name}`: {refused}"),
            };
        }
        let client = match self.client(name, endpoint) {
            Ok(client) => client,
            Err(error) => {
                let error = format!("endpoint `{name}`: {error}");
                return Attempt::Failed { status: None, error, retry_after_ms: None };
            }
        };
        let timestamp = now_ms().div_euclid(1000);
        let signature =
            signing::signature_header(&endpoint.secrets, &action.id, timestamp, action.body.as_bytes());
        let sent = client
            .post(url.clone())
            .header(CONTENT_TYPE, "application/json")
            .header(USER_AGENT, concat!("memgate/", env!("CARGO_PKG_VERSION")))
            .header(signing::HEADER_ID, &action.id)
            .header(signing::HEADER_TIMESTAMP, timestamp.to_string())
            .header(signing::HEADER_SIGNATURE, signature)
            .body(action.body.clone())
            .send()
            .await;
        let mut response = match sent {
            Ok(response) => response,
            Err(err) => {
                if let Some(refused) = refusal_in(&err) {
                    let error = format!("refused to call endpoint `{name}`: {refused}");
                    return Attempt::Refused { status: None, error };
                }
                let error = if err.is_timeout() {
                    format!("endpoint `{name}` gave no answer within {} ms", endpoint.timeout_ms)
                } else if err.is_connect() {
                    format!("could not connect to endpoint `{name}`: {}", chain(&err.without_url()))
                } else {
                    format!("the request to endpoint `{name}` failed: {}", chain(&err.without_url()))
                };
                return Attempt::Failed { status: None, error, retry_after_ms: None };
            }
        };
        let status = response.status().as_u16();
        let retry_after = retry_after_ms(status, response.headers(), SystemTime::now());
        let text = read_excerpt(&mut response).await;
        match status {
            200..=299 => Attempt::Delivered { status, response: clean_reply(&text, MAX_EXCERPT_BYTES) },
            410 => Attempt::Refused {
                status: Some(status),
                error: format!("endpoint `{name}` answered 410 Gone: it wants no more deliveries"),
            },
            _ => {
                let mut error = format!("endpoint `{name}` answered HTTP {status}");
                if (300..400).contains(&status) {
                    error.push_str(
                        " (redirects are not followed: set the endpoint's url to where it redirects)",
                    );
                }
                let quoted = clean_reply(&text, MAX_QUOTED_REPLY_CHARS);
                if !quoted.is_empty() {
                    error.push_str(": ");
                    error.push_str(&quoted);
                }
                Attempt::Failed { status: Some(status), error, retry_after_ms: retry_after }
            }
        }
    }

    fn client(&self, name: &str, endpoint: &EndpointConfig) -> Result<reqwest::Client, String> {
        let mut clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(client) = clients.get(name) {
            return Ok(client.clone());
        }
        let timeout = Duration::from_millis(endpoint.timeout_ms);
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            // A proxy would connect to addresses the resolver never checked.
            .no_proxy()
            .dns_resolver(CheckedResolver { allow_private: endpoint.allow_private })
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_secs(5)))
            .pool_idle_timeout(Duration::from_secs(30))
            .build()
            .map_err(|err| format!("could not build an HTTP client: {err}"))?;
        clients.insert(name.to_owned(), client.clone());
        Ok(client)
    }
}

/// An error and its sources, on one line (reqwest's own message stops at "error sending request").
fn chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(inner) = source {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        source = inner.source();
    }
    text
}

/// At most `MAX_EXCERPT_BYTES` of the answer's body; the rest is never read.
async fn read_excerpt(response: &mut reqwest::Response) -> String {
    let mut bytes: Vec<u8> = Vec::new();
    while bytes.len() < MAX_EXCERPT_BYTES {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                let room = MAX_EXCERPT_BYTES - bytes.len();
                bytes.extend_from_slice(&chunk[..chunk.len().min(room)]);
            }
            Ok(None) | Err(_) => break,
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The wait a 429 or 503 asks for in `Retry-After`: delay-seconds or an HTTP date.
pub fn retry_after_ms(status: u16, headers: &HeaderMap, now: SystemTime) -> Option<u64> {
    if status != 429 && status != 503 {
        return None;
    }
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        return value.parse::<u64>().ok().map(|secs| secs.saturating_mul(1000));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).map_or(0, |wait| u64::try_from(wait.as_millis()).unwrap_or(u64::MAX)))
}

/// The wait before retrying after failed attempt number `attempt` (1 for the first): full jitter,
/// uniform in `[0, min(max, base × 2^(attempt−1))]`, so that many actions failing together do not
/// come back together.
pub fn backoff_ms(attempt: i64, config: &TriggersConfig, random: u64) -> u64 {
    let doublings = u32::try_from(attempt.saturating_sub(1).clamp(0, 40)).unwrap_or(40);
    let cap = config.backoff_base_ms.saturating_mul(1u64 << doublings).min(config.backoff_max_ms);
    random % cap.saturating_add(1)
}

fn random_u64() -> u64 {
    // A v4 UUID is 122 random bits from the operating system's generator.
    uuid::Uuid::new_v4().as_u64_pair().0
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use reqwest::header::HeaderValue;

    #[test]
    fn backoff_doubles_up_to_the_cap_with_full_jitter() {
        let config =
            TriggersConfig { backoff_base_ms: 1_000, backoff_max_ms: 10_000, ..TriggersConfig::default() };
        let top = |attempt| backoff_ms(attempt, &config, u64::MAX - 1);
        // With the largest random value the wait is close to the cap of each attempt.
        let caps: Vec<u64> = (1..=6)
            .map(|a| {
                let cap = (1_000u64 << (a - 1)).min(10_000);
                assert!(top(a) <= cap);
                cap
            })
            .collect();
        assert_eq!(caps, [1_000, 2_000, 4_000, 8_000, 10_000, 10_000]);
        assert_eq!(backoff_ms(1, &config, 0), 0, "full jitter starts at zero");
        assert_eq!(backoff_ms(3, &config, 4_000), 4_000);
        assert_eq!(backoff_ms(3, &config, 4_001), 0, "wraps within [0, cap]");
        assert_eq!(backoff_ms(1000, &config, 7), 7, "huge attempt counts do not overflow");
        let spread: std::collections::BTreeSet<u64> =
            (0..50).map(|_| backoff_ms(4, &config, random_u64()) / 1000).collect();
        assert!(spread.len() > 3, "jitter spreads retries: {spread:?}");
    }

    #[test]
    fn retry_after_in_seconds_or_as_a_date() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let headers = |value: &str| {
            let mut map = HeaderMap::new();
            map.insert(RETRY_AFTER, HeaderValue::from_str(value).unwrap());
            map
        };
        assert_eq!(retry_after_ms(429, &headers("3"), now), Some(3_000));
        assert_eq!(retry_after_ms(503, &headers(" 120 "), now), Some(120_000));
        let later = httpdate::fmt_http_date(now + Duration::from_secs(90));
        assert_eq!(retry_after_ms(503, &headers(&later), now), Some(90_000));
        let earlier = httpdate::fmt_http_date(now - Duration::from_secs(90));
        assert_eq!(retry_after_ms(429, &headers(&earlier), now), Some(0));
        assert_eq!(retry_after_ms(500, &headers("3"), now), None, "only 429 and 503");
        assert_eq!(retry_after_ms(429, &headers("soon"), now), None);
        assert_eq!(retry_after_ms(429, &HeaderMap::new(), now), None);
        assert_eq!(retry_after_ms(429, &headers("-1"), now), None);
    }
}
