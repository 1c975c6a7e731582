//! Triggers: memory that acts. A record whose content carries `trigger_conditions` and `actions`
//! (an `internal_sop` such as "customer complaint escalation") is injected as usual and, when a
//! request meets one of its conditions, starts business work through signed webhooks — after
//! the answer, never delaying it. docs/triggers.md is the operator's and record writer's guide.
//!
//! The path of one firing, in order, with what each step adds:
//!
//! 1. write time — `check_conditions` (called by the memory service beside the schema check)
//!    parses conditions and actions, so a bad regex or an action naming a URL is a 422 by path;
//! 2. recall — for the records that survived the scope and temporal layers (a caller can only
//!    fire what it may see), `Triggers::evaluate` matches each record's compiled conditions
//!    (`conditions`, cached per record revision) against the person's words and the client's
//!    values (`TriggerInput`), giving the `Fired` records and the condition that matched;
//! 3. the same step — `Triggers::decide` turns each fired record's actions into `Decision`s with
//!    an idempotency id (`actions::event_id`), except a record cooling down for the same subject
//!    (`limits`), and `Triggers::enqueue` renders their bodies from the endpoints' templates
//!    (`body`) and writes them to the outbox (`crate::store::outbox`) on a background task, so
//!    the answer waits for neither; the write takes each firing's cooldown and refuses what
//!    another replica's cooldown covers or the tenant's cap has no room for
//!    (`crate::store::trigger_limits`);
//! 4. delivery — the worker (`delivery::Delivery`), one per replica, claims due actions under a
//!    lease, keeps each endpoint to its pace (the rest waits, queued), POSTs them signed as
//!    Standard Webhooks (`signing`) to addresses checked by `safety`, and records delivered,
//!    retrying (backoff with jitter, `Retry-After`) or dead, with errors that name the endpoint,
//!    never its URL (`redact`).

pub mod actions;
pub mod body;
pub mod conditions;
pub mod delivery;
pub mod input;
pub mod limits;
pub mod metrics;
pub mod redact;
pub mod safety;
pub mod signing;
pub mod text;

pub use crate::config::triggers::{EndpointConfig, TriggersConfig, TriggersConfigError};
pub use actions::{ActionSpec, Decision, event_id};
pub use conditions::{ConditionProblem, Conditions, Matched};
pub use delivery::Delivery;
pub use input::{TriggerInput, parse_values};
pub use metrics::TriggerMetrics;

use crate::clock::{format_ms, now_ms};
use crate::record::Record;
use crate::store::outbox::{NewOutboxAction, OutboxAction, OutboxFilter, Replay};
use crate::store::trigger_limits::{NewCooldown, NewFiring, Outcome, Written};
use crate::store::{Store, StoreError};
use body::{ActionView, BodyContext, BodyTemplates, RecordView};
use serde::Serialize;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// A record's triggers, compiled: its conditions, its actions, and its own cooldown if it sets one.
#[derive(Debug, Clone)]
pub struct RecordTriggers {
    pub conditions: Conditions,
    pub actions: Vec<ActionSpec>,
    /// `trigger_cooldown_seconds`: how long the record stays quiet for a subject once it fired
    /// for them (`None`: `[triggers] cooldown_seconds`).
    pub cooldown_seconds: Option<u64>,
}

/// Where a record sets its own cooldown, beside its conditions and actions.
pub const COOLDOWN_FIELD: &str = "trigger_cooldown_seconds";

impl RecordTriggers {
    /// The triggers in a record's `content`: `None` when it has neither `trigger_conditions` nor
    /// `actions`; every problem (by path under `$.content`) when they are wrong or one is missing.
    pub fn from_content(content: &Value) -> Result<Option<RecordTriggers>, Vec<ConditionProblem>> {
        let conditions = content.get("trigger_conditions");
        let actions = content.get("actions");
        let cooldown = match content.get(COOLDOWN_FIELD) {
            None => Ok(None),
            Some(value) => {
                match value.as_u64().filter(|s| *s <= crate::config::triggers::MAX_COOLDOWN_SECONDS) {
                    Some(seconds) if conditions.is_some() => Ok(Some(seconds)),
                    Some(_) => Err(ConditionProblem::new(
                        format!("$.content.{COOLDOWN_FIELD}"),
                        "a cooldown belongs to a record that fires: add trigger_conditions and actions",
                    )),
                    None => Err(ConditionProblem::new(
                        format!("$.content.{COOLDOWN_FIELD}"),
                        format!(
                            "a whole number of seconds, 0 (none) to {} (a week)",
                            crate::config::triggers::MAX_COOLDOWN_SECONDS
                        ),
                    )),
                }
            }
        };
        let (conditions, actions) = match (conditions, actions) {
            (None, None) => return cooldown.map(|_| None).map_err(|problem| vec![problem]),
            (Some(_), None) => {
                return Err(vec![ConditionProblem::new(
                    "$.content.actions",
                    "trigger_conditions need actions: what should happen when one matches",
                )]);
            }
            (None, Some(_)) => {
                return Err(vec![ConditionProblem::new(
                    "$.content.trigger_conditions",
                    "actions need trigger_conditions: when they should happen",
                )]);
            }
            (Some(c), Some(a)) => (c, a),
        };
        let conditions = Conditions::parse(conditions, "$.content.trigger_conditions");
        let actions = actions::parse_actions(actions, "$.content.actions");
        match (conditions, actions, cooldown) {
            (Ok(conditions), Ok(actions), Ok(cooldown_seconds)) => {
                Ok(Some(RecordTriggers { conditions, actions, cooldown_seconds }))
            }
            (conditions, actions, cooldown) => {
                let mut problems = conditions.err().unwrap_or_default();
                problems.extend(actions.err().unwrap_or_default());
                problems.extend(cooldown.err());
                Err(problems)
            }
        }
    }
}

/// What is wrong with the triggers in a record's `content` (empty when nothing is, or it has
/// none). For the memory service's write checks: each problem is `{path, kind, message}` with
/// `kind = "invalid_trigger"`, paths under `$.content`.
pub fn check_conditions(content: &Value) -> Vec<ConditionProblem> {
    RecordTriggers::from_content(content).err().unwrap_or_default()
}

/// A record whose condition matched a request.
#[derive(Debug, Clone, Serialize)]
pub struct Fired {
    pub record_id: String,
    pub record_revision: i64,
    pub record_type: String,
    #[serde(skip)]
    pub schema_version: String,
    #[serde(skip)]
    pub key: Option<String>,
    #[serde(skip)]
    pub content: Value,
    pub matched: Matched,
    pub actions: Vec<ActionSpec>,
    /// The record's own `trigger_cooldown_seconds`, if it sets one.
    #[serde(skip)]
    pub cooldown_seconds: Option<u64>,
}

/// One action of a fired record as `explain` shows it: what would be sent where, without
/// sending. `configured` is false when no endpoint has the action's service name;
/// `cooldown_seconds` is how long the record would then stay quiet for the same subject (explain
/// neither starts nor reads a cooldown).
#[derive(Debug, Clone, Serialize)]
pub struct WouldFire {
    pub record_id: String,
    pub matched: Matched,
    pub action_index: usize,
    pub service: String,
    pub method: String,
    pub configured: bool,
    pub cooldown_seconds: u64,
}

/// Compiled triggers by (tenant, record id): the revision they were compiled from, and the
/// result (`None` for a record without triggers or whose triggers do not parse).
type Cache = HashMap<(String, String), (i64, Option<Arc<RecordTriggers>>)>;

/// Records compiled at most; past it the cache starts over (it refills from the records at hand).
const CACHE_ENTRIES: usize = 10_000;

/// Inserting decisions: tries and the first wait (doubling), for a database that blinks.
const ENQUEUE_TRIES: u32 = 5;
const ENQUEUE_FIRST_WAIT_MS: u64 = 200;

/// The triggers service: evaluation, decisions, the outbox's writer, and its delivery worker.
/// Cheap to clone.
#[derive(Clone)]
pub struct Triggers {
    config: Arc<TriggersConfig>,
    bodies: Arc<BodyTemplates>,
    store: Store,
    metrics: TriggerMetrics,
    wake: Arc<Notify>,
    tasks: TaskTracker,
    cache: Arc<Mutex<Cache>>,
    cooling: Arc<limits::Cooling>,
}

impl Triggers {
    /// Compiles the body templates of `config` (validated with the config). `tasks` is the server's tracker: the
    /// background inserts of `enqueue` and the worker run on it, and shutdown waits for them.
    pub fn new(
        config: TriggersConfig,
        store: Store,
        tasks: TaskTracker,
        metrics: TriggerMetrics,
    ) -> Result<Triggers, Vec<TriggersConfigError>> {
        let bodies = BodyTemplates::new(&config)?;
        Ok(Triggers {
            config: Arc::new(config),
            bodies: Arc::new(bodies),
            store,
            metrics,
            wake: Arc::new(Notify::new()),
            tasks,
            cache: Arc::new(Mutex::new(HashMap::new())),
            cooling: Arc::new(limits::Cooling::default()),
        })
    }

    pub fn config(&self) -> &TriggersConfig {
        &self.config
    }

    pub fn metrics(&self) -> &TriggerMetrics {
        &self.metrics
    }

    /// The records among `records` whose conditions `input` meets, in the order given, each with
    /// the first condition that matched. Pure and quick (no I/O; conditions compiled once per
    /// record revision). `records` must be what the caller may see and what is valid now: the
    /// survivors of the scope and temporal layers.
    pub fn evaluate<'r>(
        &self,
        input: &TriggerInput<'_>,
        records: impl IntoIterator<Item = &'r Record>,
    ) -> Vec<Fired> {
        if !self.config.enabled {
            return Vec::new();
        }
        let mut fired = Vec::new();
        for record in records {
            // Only an operator's record acts: conditions and actions in a record another writer
            // made (written before writers were bounded, or by any path that slipped) never fire.
            if record.content.get("trigger_conditions").is_none() || !record.may_fire() {
                continue;
            }
            let Some(triggers) = self.compiled(record) else { continue };
            if let Some(matched) = triggers.conditions.evaluate(input) {
                fired.push(Fired {
                    record_id: record.id.clone(),
                    record_revision: record.revision,
                    record_type: record.record_type.clone(),
                    schema_version: record.schema_version.clone(),
                    key: record.key.clone(),
                    content: record.content.clone(),
                    matched,
                    actions: triggers.actions.clone(),
                    cooldown_seconds: triggers.cooldown_seconds,
                });
            }
        }
        fired
    }

    fn compiled(&self, record: &Record) -> Option<Arc<RecordTriggers>> {
        let key = (record.tenant.clone(), record.id.clone());
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((revision, compiled)) = cache.get(&key)
            && *revision == record.revision
        {
            return compiled.clone();
        }
        let compiled = match RecordTriggers::from_content(&record.content) {
            Ok(compiled) => compiled.map(Arc::new),
            Err(problems) => {
                // Written before triggers were checked at write time, or by an older version.
                tracing::warn!(tenant = %record.tenant, id = %record.id, problems = problems.len(), "a record's triggers do not parse; it never fires");
                None
            }
        };
        if cache.len() >= CACHE_ENTRIES {
            cache.clear();
        }
        cache.insert(key, (record.revision, compiled.clone()));
        compiled
    }

    /// What `fired` would do, for `explain`: nothing is decided or sent.
    pub fn would_fire(&self, fired: &[Fired]) -> Vec<WouldFire> {
        fired
            .iter()
            .flat_map(|f| {
                f.actions.iter().enumerate().map(|(i, action)| WouldFire {
                    record_id: f.record_id.clone(),
                    matched: f.matched.clone(),
                    action_index: i,
                    service: action.service.clone(),
                    method: action.method.clone(),
                    configured: self.config.endpoints.contains_key(&action.service),
                    cooldown_seconds: self.cooldown_seconds(f),
                })
            })
            .collect()
    }

    /// How long `fired`'s record stays quiet for a subject once it fired for them.
    fn cooldown_seconds(&self, fired: &Fired) -> u64 {
        fired.cooldown_seconds.unwrap_or(self.config.cooldown_seconds)
    }

    /// The decisions of one request: one per action of each fired record, but none for a record
    /// whose cooldown for this subject (or, without a subject, this caller `key`) another turn
    /// started here (counted in `cooled_down`; the database holds the cooldowns of every replica
    /// and refuses the rest when they are written). Quick: the bodies are rendered later, off the
    /// request's path, when the decisions are written. An action whose endpoint is not
    /// configured is still decided: it goes into the outbox dead, with the reason, for an
    /// operator to see and replay (so is one whose body does not render).
    pub fn decide(
        &self,
        tenant: &str,
        request_id: &str,
        subject: Option<&str>,
        key: &str,
        input: &TriggerInput<'_>,
        fired: &[Fired],
    ) -> Vec<Decision> {
        let now = now_ms();
        let decided_at = format_ms(now);
        let cooled_for = limits::cooled_for(tenant, subject, key);
        let mut decisions = Vec::new();
        for f in fired {
            let seconds = self.cooldown_seconds(f);
            let cooldown = (seconds > 0).then(|| NewCooldown {
                cooled_for: cooled_for.clone(),
                until_ms: now.saturating_add(i64::try_from(seconds * 1000).unwrap_or(i64::MAX)),
            });
            if let Some(cooldown) = &cooldown
                && let Some(until) = self.cooling.check(
                    (tenant, &f.record_id, &cooled_for),
                    request_id,
                    now,
                    cooldown.until_ms,
                )
            {
                self.metrics.cooled_down.inc();
                tracing::debug!(tenant, record = %f.record_id, until = %format_ms(until), "a trigger is cooling down for this subject; not decided");
                continue;
            }
            for (index, action) in f.actions.iter().enumerate() {
                let id = event_id(tenant, request_id, &f.record_id, index);
                let endpoint = self.config.endpoints.get(&action.service);
                let include_conversation = endpoint.is_some_and(|e| e.include_conversation);
                let context = BodyContext {
                    event_id: id.clone(),
                    decided_at: decided_at.clone(),
                    tenant: tenant.to_owned(),
                    request_id: request_id.to_owned(),
                    subject: subject.map(str::to_owned),
                    record: RecordView {
                        id: f.record_id.clone(),
                        record_type: f.record_type.clone(),
                        schema_version: f.schema_version.clone(),
                        revision: f.record_revision,
                        key: f.key.clone(),
                        content: f.content.clone(),
                    },
                    action: ActionView {
                        index,
                        service: action.service.clone(),
                        method: action.method.clone(),
                        params: action.params.clone(),
                    },
                    matched: f.matched.clone(),
                    conversation: include_conversation
                        .then(|| input.text.chars().take(text::MAX_INPUT_CHARS).collect()),
                }
                .for_endpoint(include_conversation);
                let undeliverable = endpoint.is_none().then(|| {
                    format!(
                        "no endpoint named `{}` is configured ([triggers.endpoints.{}]); configure it and replay",
                        action.service, action.service
                    )
                });
                decisions.push(Decision {
                    id,
                    tenant: tenant.to_owned(),
                    request_id: request_id.to_owned(),
                    record_id: f.record_id.clone(),
                    record_revision: f.record_revision,
                    action_index: index,
                    endpoint: action.service.clone(),
                    method: action.method.clone(),
                    params: action.params.clone(),
                    matched_condition: context.matched.clone(),
                    subject: subject.map(str::to_owned),
                    undeliverable,
                    cooldown: cooldown.clone(),
                    body: Box::new(context),
                });
            }
        }
        decisions
    }

    /// The webhook body of `decision`, rendered from its endpoint's template (the default one for
    /// an endpoint that is not configured).
    pub fn render_body(&self, decision: &Decision) -> Result<String, String> {
        self.bodies.render(&decision.endpoint, &decision.body)
    }

    /// The outbox row of `decision`: its body rendered, or dead with the reason it cannot be.
    fn outbox_row(&self, decision: &Decision) -> NewOutboxAction {
        let (body, dead_reason) = match self.render_body(decision) {
            Ok(body) => (body, decision.undeliverable.clone()),
            Err(error) => (String::from("{}"), Some(error)),
        };
        NewOutboxAction {
            id: decision.id.clone(),
            tenant: decision.tenant.clone(),
            request_id: decision.request_id.clone(),
            record_id: decision.record_id.clone(),
            record_revision: decision.record_revision,
            action_index: i64::try_from(decision.action_index).unwrap_or(i64::MAX),
            endpoint: decision.endpoint.clone(),
            method: decision.method.clone(),
            subject: decision.subject.clone(),
            matched: serde_json::to_value(&decision.matched_condition).unwrap_or(Value::Null),
            body,
            dead_reason,
        }
    }

    /// Writes `decisions` to the outbox on a background task of the server's tracker and wakes
    /// the worker; returns at once. A database that fails is tried again a few times (about six
    /// seconds in all) before the decisions are given up, with an error in the log.
    pub fn enqueue(&self, decisions: Vec<Decision>) {
        if decisions.is_empty() {
            return;
        }
        let this = self.clone();
        self.tasks.spawn(async move {
            let mut wait = ENQUEUE_FIRST_WAIT_MS;
            for attempt in 1..=ENQUEUE_TRIES {
                match this.enqueue_now(&decisions).await {
                    Ok(_) => return,
                    Err(err) if attempt < ENQUEUE_TRIES => {
                        tracing::warn!(error = %err, attempt, "writing trigger actions failed; trying again");
                        tokio::time::sleep(Duration::from_millis(wait)).await;
                        wait *= 2;
                    }
                    Err(err) => {
                        let ids: Vec<&str> = decisions.iter().map(|d| d.id.as_str()).collect();
                        tracing::error!(error = %err, ?ids, "trigger actions were decided but could not be written; they are lost");
                    }
                }
            }
        });
    }

    /// Writes `decisions` to the outbox now, each firing record's together, and wakes the
    /// worker: idempotent (a decision already there is left as it is), and under the limits every
    /// replica shares (`crate::store::trigger_limits`): a firing inside another turn's cooldown is
    /// not written (`cooled_down`), nor one its tenant has no room for (`refused`, and a warning).
    /// Returns how many actions were new.
    pub async fn enqueue_now(&self, decisions: &[Decision]) -> Result<u64, StoreError> {
        let mut firings: Vec<NewFiring> = Vec::new();
        for decision in decisions {
            let row = self.outbox_row(decision);
            match firings.last_mut() {
                Some(last)
                    if last.tenant == decision.tenant
                        && last.request_id == decision.request_id
                        && last.record_id == decision.record_id =>
                {
                    last.actions.push(row)
                }
                _ => firings.push(NewFiring {
                    tenant: decision.tenant.clone(),
                    record_id: decision.record_id.clone(),
                    request_id: decision.request_id.clone(),
                    cooldown: decision.cooldown.clone(),
                    actions: vec![row],
                }),
            }
        }
        let max_waiting = self.config.max_waiting_per_tenant;
        let outcomes = self.store.outbox_insert_firings(&firings, now_ms(), max_waiting).await?;
        // A firing that was not written started no cooldown: this replica forgets the one it
        // noted when deciding, and asks the database again next time (which knows whether
        // another replica's cooldown still runs).
        for (firing, outcome) in firings.iter().zip(&outcomes) {
            if let (Outcome::Cooled | Outcome::Refused(_), Some(cooldown)) = (outcome, &firing.cooldown) {
                let key = (firing.tenant.as_str(), firing.record_id.as_str(), cooldown.cooled_for.as_str());
                self.cooling.release(key, &firing.request_id);
            }
        }
        let written = Written::of(&outcomes);
        self.count(&written, decisions);
        self.wake.notify_one();
        Ok(written.added)
    }

    fn count(&self, written: &Written, decisions: &[Decision]) {
        self.metrics.queued.inc_by(written.added);
        self.metrics.cooled_down.inc_by(written.cooled);
        self.metrics.refused.inc_by(written.refused);
        let tenant = decisions.first().map_or("", |d| d.tenant.as_str());
        if written.cooled > 0 {
            tracing::debug!(
                tenant,
                firings = written.cooled,
                "trigger firings found cooling down when written (another replica fired them)"
            );
        }
        if written.refused > 0 {
            tracing::warn!(
                tenant,
                refused = written.refused,
                max_waiting_per_tenant = self.config.max_waiting_per_tenant,
                "trigger actions refused: the tenant has its cap of waiting actions; they are not sent"
            );
        }
    }

    /// Wakes this replica's worker (after a replay, say).
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// One tenant's actions, newest first, for `GET /admin/v1/actions` and `memgate actions
    /// list`: `filter.tenant` is set to `tenant`; `before` is the last row's `(created_at_ms, id)`.
    pub async fn list(
        &self,
        tenant: &str,
        mut filter: OutboxFilter,
        before: Option<(i64, &str)>,
        limit: u32,
    ) -> Result<Vec<OutboxAction>, StoreError> {
        filter.tenant = Some(tenant.to_owned());
        self.store.outbox_list(&filter, before, limit).await
    }

    /// One action of a tenant (`StoreError::NotFound` when it has none with this id).
    pub async fn get(&self, tenant: &str, id: &str) -> Result<OutboxAction, StoreError> {
        self.store.outbox_get(tenant, id).await
    }

    /// Sends a dead or delivered action again (same id and body, attempts from 0) and wakes this
    /// replica's worker; an action still waiting is left as it is (`Replay::AlreadyQueued`).
    pub async fn replay(&self, tenant: &str, id: &str) -> Result<Replay, StoreError> {
        let replay = self.store.outbox_replay(tenant, id, now_ms()).await?;
        if matches!(replay, Replay::Replayed(_)) {
            self.wake.notify_one();
        }
        Ok(replay)
    }

    /// Erasure: removes the actions of `record_ids`, and those decided about `subject` when given
    /// (a `user:<id>` scope forgotten). Returns how many went.
    pub async fn forget(
        &self,
        tenant: &str,
        record_ids: &[String],
        subject: Option<&str>,
    ) -> Result<u64, StoreError> {
        let mut removed = self.store.outbox_forget_records(tenant, record_ids).await?;
        if let Some(subject) = subject {
            removed += self.store.outbox_forget_subject(tenant, subject).await?;
        }
        // Cooldowns keep only hashes, but what they say (this person fired this record) goes too.
        let cooled_for = subject.map(|s| limits::for_subject(tenant, s));
        self.store.trigger_cooldowns_forget(tenant, record_ids, cooled_for.as_deref()).await?;
        self.cooling.forget(tenant, record_ids, cooled_for.as_deref());
        Ok(removed)
    }

    /// The delivery worker of this replica (see `Delivery::spawn`).
    pub fn delivery(&self) -> Arc<Delivery> {
        Arc::new(Delivery::new(
            self.store.clone(),
            Arc::clone(&self.config),
            self.metrics.clone(),
            Arc::clone(&self.wake),
        ))
    }

    /// Starts the delivery worker on the server's tracker, unless triggers are off or no endpoint
    /// is configured (then nothing could be delivered; dead actions wait for a replay).
    pub fn spawn_worker(&self, stop: CancellationToken) -> Option<tokio::task::JoinHandle<()>> {
        if !self.config.enabled || self.config.endpoints.is_empty() {
            return None;
        }
        Some(self.delivery().spawn(&self.tasks, stop))
    }
}

/// A request id for triggers that stays the same when a client retries the same turn (SDKs
/// retry 429s, 5xxs and timeouts with a new HTTP request): tenant, subject, the index of the last
/// user message and the person's words. Passing it as `decide`'s `request_id` makes a retried
/// request decide the same ids, which the outbox keeps once.
pub fn turn_id(tenant: &str, subject: Option<&str>, turn_index: usize, words: &str) -> String {
    let subject = subject.unwrap_or("");
    let id = event_id(tenant, subject, words, turn_index);
    format!("turn_{}", id.trim_start_matches("evt_"))
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
