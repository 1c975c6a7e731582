//! Observation: memory that learns from the conversations memgate relays, opt-in and gated.
//! docs/observation.md is the operator's guide.
//!
//! The path of one exchange, in order:
//!
//! 1. the turn (`turn::Turns::begin`) asks `Observer::watch` whether this request is observed:
//!    the caller holds `observe`, has a subject and a write scope of its own (`Caller::own_scope`,
//!    where memgate's write tools write: the end user's `user:<subject>` when the caller may
//!    read it), its release's `observe` is `propose` or `write`, memory is on for the request, and
//!    an extraction credential exists. Nothing else is kept or changed for any other request;
//! 2. once the upstream's status is known (`Turns::settle`), a 2xx answer's body is tapped
//!    (`capture`): relayed unchanged while its text is read beside it, and only an answer that
//!    arrived whole (a stream's `message_stop`) is queued;
//! 3. queueing runs on a background task, off the request's path: the person's words of the
//!    newest turn (`query::newest_words`: no harness text, tool results, attachments; memgate's
//!    block is not in the client's body), the answer's text, a bounded copy of the system prompt
//!    and the injected records' ids go into `observer_exchanges` (`crate::store::observer`),
//!    idempotent by the exchange's id;
//! 4. the worker (`worker`) claims exchanges under a lease, makes one extraction call for each
//!    (`extract`) within the tenant's daily budget, and passes each candidate through the gates
//!    (`gates`) before the writer (`write`) puts it into the exchange's scope, `proposed` or
//!    `active`; every candidate's outcome is kept (no record text), counted, and shown by the
//!    admin API.
//!
//! Erasure: `forget` of a scope removes the exchanges queued for it and their outcomes
//! (`forget_scope`) before the scope's records, which fences the extractions in flight for it:
//! whatever they yield is written only while their exchange is still there
//! (`store::observer::Claim`), so nothing lands after the forget. Exchanges are deleted once
//! processed and purged unprocessed after `observer.max_age_hours`.

pub mod capture;
pub mod extract;
pub mod gates;
pub mod metrics;
mod worker;
pub mod write;

use crate::clock::now_ms;
use crate::config::ObserverConfig;
use crate::identity::Caller;
use crate::inject::scan::top_fields;
use crate::memory::MemoryService;
use crate::query::QueryRule;
use crate::rollout::{ObserveMode, Release};
use crate::store::observer::NewExchange;
use crate::store::{Store, StoreError};
use crate::upstream::Upstream;
use crate::upstream::wire::Body;
use bytes::Bytes;
use metrics::ObserverMetrics;
use secrecy::SecretString;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The system prompt's copy an exchange keeps, in characters.
pub const SYSTEM_CHARS: usize = 4096;

/// Exchanges being queued at once on this replica; past it a finished exchange is not queued
/// (counted as `backlog`), so a stalled database cannot pile up tasks.
const MAX_QUEUEING: usize = 256;

/// Observation for this replica: decides which turns are observed, queues them, runs the worker.
/// Cheap to clone.
#[derive(Clone)]
pub struct Observer {
    shared: Arc<Shared>,
}

pub(crate) struct Shared {
    config: ObserverConfig,
    store: Store,
    memories: MemoryService,
    upstream: Arc<Upstream>,
    /// The extraction credential: `None` leaves observation off (nothing is queued).
    credential: Option<SecretString>,
    metrics: ObserverMetrics,
    wake: Notify,
    tasks: TaskTracker,
    queueing: AtomicUsize,
}

/// A turn that is observed: what its exchange needs besides the answer.
pub struct Watch {
    shared: Arc<Shared>,
    tenant: String,
    subject: String,
    /// Where its records go: the caller's own write scope.
    scope: String,
    release: String,
    mode: ObserveMode,
    min_confidence: f64,
    schema_version: String,
    rule: QueryRule,
    /// The client's body, as it sent it (memgate's block is not in it).
    body: Bytes,
    stream: bool,
    /// The records memgate injected.
    pub injected_ids: Vec<String>,
}

impl Observer {
    /// `credential` is the extraction key: `[observer] extraction_key`, else in managed mode
    /// memgate's upstream key; in passthrough mode nothing else (a caller's key is never used).
    /// `tasks` is the server's tracker: the queueing tasks and the worker run on it.
    pub fn new(
        config: ObserverConfig,
        memories: MemoryService,
        upstream: Arc<Upstream>,
        credential: Option<SecretString>,
        metrics: ObserverMetrics,
        tasks: TaskTracker,
    ) -> Observer {
        Observer {
            shared: Arc::new(Shared {
                config,
                store: memories.store().clone(),
                memories,
                upstream,
                credential,
                metrics,
                wake: Notify::new(),
                tasks,
                queueing: AtomicUsize::new(0),
            }),
        }
    }

    pub fn config(&self) -> &ObserverConfig {
        &self.shared.config
    }

    /// Whether extraction can run at all (a credential exists).
    pub fn available(&self) -> bool {
        self.shared.credential.is_some()
    }

    /// Whether this request is observed, and what its exchange will need: see the module
    /// comment. `body` is the client's own.
    pub fn watch(&self, caller: &Caller, release: &Release, body: &Bytes, stream: bool) -> Option<Watch> {
        let mode = release.observe.mode;
        if mode == ObserveMode::Off || !caller.permissions.observe || !self.available() {
            return None;
        }
        let subject = caller.subject.clone()?;
        // Where the write tools would write for this caller, and nowhere else: a subject whose
        // `user:` scope the caller may not read (a JWT mapping `sub` to `employee:<sub>`) is
        // another population's person, and is not observed.
        let scope = caller.own_scope()?;
        Some(Watch {
            shared: self.shared.clone(),
            tenant: caller.tenant.clone(),
            subject,
            scope,
            release: release.name.clone(),
            mode,
            min_confidence: release.observe.min_confidence.unwrap_or(self.shared.config.min_confidence),
            schema_version: release
                .funnel
                .schema_versions
                .first()
                .cloned()
                .unwrap_or_else(|| "v1".to_owned()),
            rule: release.query.clone(),
            body: body.clone(),
            stream,
            injected_ids: Vec::new(),
        })
    }

    /// Starts the worker on the server's tracker (none without a credential).
    pub fn spawn_worker(&self, stop: CancellationToken) -> Option<tokio::task::JoinHandle<()>> {
        if !self.available() {
            return None;
        }
        let shared = self.shared.clone();
        Some(self.shared.tasks.spawn(async move {
            tracing::info!(model = %shared.config.model, "observation worker started");
            worker::run(shared, stop).await;
            tracing::info!("observation worker stopped");
        }))
    }

    /// Claims up to `limit` due exchanges and processes them now (for the CLI and tests).
    pub async fn process_due(&self, limit: u32) -> Result<usize, StoreError> {
        worker::process_due(&self.shared, limit).await
    }

    /// Erasure of a scope: the exchanges queued for it (claimed ones too, which fences their
    /// extractions) and every outcome about it. Run before the scope's records are erased.
    pub async fn forget_scope(&self, tenant: &str, scope: &str) -> Result<(u64, u64), StoreError> {
        self.shared.store.observer_forget_scope(tenant, scope).await
    }

    /// What `GET /admin/v1/observer` shows of a tenant: the queue, the gates' counts, the
    /// usage and budget of the last days, and the newest outcomes (of one subject, when given).
    pub async fn status(&self, tenant: &str, subject: Option<&str>, limit: u32) -> Result<Value, StoreError> {
        let store = &self.shared.store;
        let config = &self.shared.config;
        let queue = store.observer_queue_counts(Some(tenant)).await?;
        let gates = store.observer_gate_counts(tenant).await?;
        let since = worker::day_of(now_ms() - 29 * 86_400_000);
        let usage: Vec<Value> = store
            .observer_usage(tenant, &since)
            .await?
            .into_iter()
            .map(|(day, u)| json!({"day": day, "calls": u.calls, "input_tokens": u.input_tokens, "output_tokens": u.output_tokens}))
            .collect();
        let outcomes: Vec<Value> = store
            .observer_outcomes(tenant, subject, limit)
            .await?
            .into_iter()
            .map(|o| {
                json!({"exchange_id": o.exchange_id, "position": o.position, "subject": o.subject,
                    "request_id": o.request_id, "type": o.record_type, "verdict": o.verdict, "gate": o.gate,
                    "reason": o.reason, "record_id": o.record_id, "at": crate::clock::format_ms(o.at_ms)})
            })
            .collect();
        Ok(json!({
            "available": self.available(),
            "model": config.model,
            "budget": {"calls_per_day": config.daily_calls_per_tenant, "tokens_per_day": config.daily_tokens_per_tenant},
            "queue": queue,
            "gates": gates,
            "usage": usage,
            "outcomes": outcomes,
        }))
    }
}

impl Watch {
    /// The answer's body, relayed unchanged; once it has arrived whole its exchange is queued.
    /// `request_id` is the upstream's `request-id`.
    pub fn tap(self, body: Body, request_id: Option<String>) -> Body {
        let reader = capture::Reader::new(self.stream, self.shared.config.max_text_chars);
        capture::tap(body, reader, move |answer| self.queue(answer, request_id))
    }

    /// Queues the exchange on a background task (`MAX_QUEUEING` at most at once).
    fn queue(self, answer: String, request_id: Option<String>) {
        let shared = self.shared.clone();
        if shared.queueing.fetch_add(1, Ordering::SeqCst) >= MAX_QUEUEING {
            shared.queueing.fetch_sub(1, Ordering::SeqCst);
            shared.metrics.not_queued("backlog");
            return;
        }
        shared.tasks.clone().spawn(async move {
            self.queue_now(answer, request_id).await;
            shared.queueing.fetch_sub(1, Ordering::SeqCst);
        });
    }

    async fn queue_now(self, answer: String, request_id: Option<String>) {
        let shared = &self.shared;
        let max = shared.config.max_text_chars;
        let (body, rule) = (self.body.clone(), self.rule.clone());
        let read = crate::cpu::run(body.len(), move || {
            (crate::query::newest_words(&body, &rule), system_text(&body))
        })
        .await;
        let (Some(person), system) = read else { return };
        let request_id = request_id
            .map(|id| id.chars().take(100).collect::<String>())
            .unwrap_or_else(|| format!("req_memgate_{}", uuid::Uuid::new_v4().simple()));
        let id = exchange_id(&self.tenant, &self.subject, &request_id);
        let exchange = NewExchange {
            id,
            tenant: self.tenant.clone(),
            subject: self.subject.clone(),
            scope: self.scope.clone(),
            release: self.release.clone(),
            mode: self.mode.as_str().to_owned(),
            min_confidence: self.min_confidence,
            schema_version: self.schema_version.clone(),
            request_id,
            person_text: person.chars().take(max).collect(),
            answer_text: answer,
            system_text: system,
            injected_ids: self.injected_ids.clone(),
        };
        match shared.store.observer_queued(&self.tenant).await {
            Ok(queued)
                if queued >= i64::try_from(shared.config.max_queued_per_tenant).unwrap_or(i64::MAX) =>
            {
                shared.metrics.not_queued("tenant_full");
                tracing::warn!(tenant = %self.tenant, queued, "a tenant's observation queue is full (observer.max_queued_per_tenant); an exchange was not queued");
                return;
            }
            Ok(_) => {}
            Err(err) => {
                shared.metrics.not_queued("store");
                tracing::warn!(error = %err, "queueing an exchange failed; it is not observed");
                return;
            }
        }
        match shared.store.observer_insert(&exchange, now_ms()).await {
            Ok(true) => {
                shared.metrics.queued.inc();
                shared.wake.notify_one();
            }
            Ok(false) => {}
            Err(err) => {
                shared.metrics.not_queued("store");
                tracing::warn!(error = %err, "queueing an exchange failed; it is not observed");
            }
        }
    }
}

/// An exchange's idempotency id: the same request queued twice is one exchange.
fn exchange_id(tenant: &str, subject: &str, request_id: &str) -> String {
    let digest = crate::hash::sha256_hex(format!("{tenant}\u{0}{subject}\u{0}{request_id}"));
    format!("obs_{}", &digest[..32])
}

/// The client's system prompt as text (a string, or its text blocks joined), at most
/// `SYSTEM_CHARS` characters.
fn system_text(body: &[u8]) -> String {
    let Ok([Some(system)]) = top_fields(body, ["system"]) else { return String::new() };
    let text = match serde_json::from_str::<Value>(system.get()) {
        Ok(Value::String(text)) => text,
        Ok(Value::Array(blocks)) => {
            blocks.iter().filter_map(|b| b.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join("\n")
        }
        _ => String::new(),
    };
    text.chars().take(SYSTEM_CHARS).collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_system_prompt_is_read_as_text_and_bounded() {
        assert_eq!(system_text(br#"{"system":"Be kind.","messages":[]}"#), "Be kind.");
        assert_eq!(
            system_text(br#"{"system":[{"type":"text","text":"A"},{"type":"text","text":"B","cache_control":{"type":"ephemeral"}}]}"#),
            "A\nB"
        );
        assert_eq!(system_text(br#"{"messages":[]}"#), "");
        let long = format!(r#"{{"system":"{}"}}"#, "x".repeat(SYSTEM_CHARS * 2));
        assert_eq!(system_text(long.as_bytes()).len(), SYSTEM_CHARS);
        assert_eq!(exchange_id("t", "s", "r"), exchange_id("t", "s", "r"));
        assert_ne!(exchange_id("t", "s", "r"), exchange_id("t", "s2", "r"));
    }
}
