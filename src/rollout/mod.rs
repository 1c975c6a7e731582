//! Releases of the memory rules and which one a request gets.
//!
//! Routing, per request and in this order: an `X-Memory-Version` pin (callers with the
//! pin_release permission) > a canary's allow-lists (subjects, teams, client CIDRs) > a canary's
//! sticky percentage (a stable hash of the subject, so one user never flips) > the active release.
//!
//! The routing table is one immutable value behind an `ArcSwap`: a change (admin, CLI, guard, or
//! another replica's change noticed by `tick`) builds a new table and swaps it whole; a request in
//! flight keeps the `Arc<Release>` it was routed to. `tick` runs every second in a supervised task
//! (see `server`): it reloads the table when the store's rollout version moved — so every replica
//! sees a change within a second — and lets each canary's guard roll it back or promote it.

pub mod release;
pub mod state;
pub mod stats;

use crate::client_addr::Cidr;
use crate::clock::now_ms;
use crate::error::{ApiError, Code, ErrorCode, ErrorKind};
use crate::fanout::{Fanout, Topic};
use crate::identity::Caller;
use crate::observability::metrics::Metrics;
use crate::store::releases::RolloutChange;
use crate::store::{Store, StoreError};
use arc_swap::ArcSwap;
pub use release::{ObserveMode, ObserveSettings, Release};
use serde_json::{Value, json};
use state::{RolloutState, Stage};
use stats::{Outcome, ReleaseStats, ShadowDiff, Snapshot};
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

/// One consistent view of every release and its rollout state.
struct Table {
    releases: BTreeMap<String, Arc<Release>>,
    states: BTreeMap<String, RolloutState>,
    active: Arc<Release>,
    /// Canaries with their parsed CIDRs, in name order.
    canaries: Vec<(Arc<Release>, RolloutState, Vec<Cidr>)>,
    shadows: Vec<(Arc<Release>, f64)>,
}

pub struct Rollout {
    definitions: BTreeMap<String, Arc<Release>>,
    table: ArcSwap<Table>,
    store: Store,
    stats: ReleaseStats,
    metrics: Arc<Metrics>,
    version: AtomicI64,
    /// One change at a time on this replica (read–modify–write of the states).
    writing: tokio::sync::Mutex<()>,
    /// Tells other replicas about this one's changes (Redis), so they need not wait for the poll.
    fanout: Fanout,
}

impl Rollout {
    /// Loads the stored rollout state; with none stored, `default_active` is the active release.
    pub async fn load(
        store: Store,
        definitions: BTreeMap<String, Release>,
        default_active: &str,
        metrics: Arc<Metrics>,
    ) -> Result<Rollout, StoreError> {
        let definitions: BTreeMap<String, Arc<Release>> =
            definitions.into_iter().map(|(name, r)| (name, Arc::new(r))).collect();
        let (stored, version) = store.rollout_states().await?;
        let table = build_table(&definitions, &stored, default_active)?;
        Ok(Rollout {
            definitions,
            table: ArcSwap::from_pointee(table),
            store,
            stats: ReleaseStats::default(),
            metrics,
            version: AtomicI64::new(version),
            writing: tokio::sync::Mutex::new(()),
            fanout: Fanout::disabled(),
        })
    }

    /// Announces every committed change to the other replicas through `fanout`.
    pub fn with_fanout(mut self, fanout: Fanout) -> Rollout {
        self.fanout = fanout;
        self
    }

    pub fn active(&self) -> Arc<Release> {
        self.table.load().active.clone()
    }

    pub fn release(&self, name: &str) -> Option<Arc<Release>> {
        self.definitions.get(name).cloned()
    }

    /// The release this request uses; `pin` is the release its `X-Memory-Version` names.
    pub fn route(
        &self,
        caller: &Caller,
        pin: Option<&str>,
        client: Option<IpAddr>,
    ) -> Result<Arc<Release>, ApiError> {
        let table = self.table.load();
        if let Some(name) = pin {
            if !caller.permissions.pin_release {
                return Err(ApiError::new(
                    ErrorKind::Permission,
                    "this caller may not choose a release with X-Memory-Version; it needs the pin_release permission",
                ));
            }
            let usable = table.states.get(name).is_none_or(|s| s.stage != Stage::Retired);
            return match table.releases.get(name) {
                Some(release) if usable => Ok(release.clone()),
                Some(_) => Err(ApiError::coded(Code::UnknownRelease, format!("release `{name}` is retired"))),
                None => Err(ApiError::coded(
                    Code::UnknownRelease,
                    format!(
                        "unknown release `{name}` in X-Memory-Version; known: {}",
                        table.releases.keys().cloned().collect::<Vec<_>>().join(", ")
                    ),
                )),
            };
        }
        for (release, state, cidrs) in &table.canaries {
            let allow = &state.allow;
            let listed = caller.subject.as_ref().is_some_and(|s| allow.subjects.contains(s))
                || allow.teams.iter().any(|t| caller.scopes.contains(&format!("team:{t}")))
                || client.is_some_and(|ip| cidrs.iter().any(|c| c.contains(ip)));
            if listed {
                return Ok(release.clone());
            }
        }
        let bucket = sticky_bucket(caller.subject.as_deref().unwrap_or(&caller.rate_key));
        for (release, state, _) in &table.canaries {
            if f64::from(bucket) < state.canary_percent * 100.0 {
                return Ok(release.clone());
            }
        }
        Ok(table.active.clone())
    }

    /// Shadow releases to run beside `routed` for this request, if it is sampled.
    pub fn shadows_for(&self, routed: &Release) -> Vec<Arc<Release>> {
        let table = self.table.load();
        if routed.name != table.active.name {
            return Vec::new();
        }
        table
            .shadows
            .iter()
            .filter(|(_, percent)| {
                f64::from(uuid::Uuid::new_v4().as_u128() as u32 % 10_000) < percent * 100.0
            })
            .map(|(release, _)| release.clone())
            .collect()
    }

    pub fn record(&self, release: &str, outcome: &Outcome) {
        self.stats.record(release, now_secs(), outcome);
        self.metrics.record_release(
            release,
            outcome.upstream_error,
            outcome.memory_error,
            outcome.added_latency,
        );
    }

    pub fn record_shadow(&self, release: &str, diff: ShadowDiff) {
        self.stats.record_shadow(release, diff);
    }

    pub fn stats(&self, name: &str) -> Option<Snapshot> {
        let table = self.table.load();
        table.releases.get(name)?;
        let window = table.states.get(name).map_or(60, |s| s.guard.window_secs);
        Some(self.stats.snapshot(name, now_secs(), window))
    }

    /// The names of the releases `list` shows.
    pub fn names(&self) -> Vec<String> {
        self.table.load().releases.keys().cloned().collect()
    }

    /// Every release with its state, for `GET /admin/v1/releases`.
    pub fn list(&self) -> Vec<Value> {
        let table = self.table.load();
        table
            .releases
            .values()
            .map(|r| {
                let state = table.states.get(&r.name).cloned().unwrap_or_default();
                json!({
                    "name": r.name,
                    "active": r.name == table.active.name,
                    "rollout": state,
                    "schema_versions": r.funnel.schema_versions,
                    "similarity_threshold": r.funnel.threshold,
                    "budget_tokens": r.funnel.budget_tokens,
                    "max_items": r.funnel.max_items,
                    "cut_relative": r.funnel.cut.relative,
                    "cut_gap": r.funnel.cut.gap,
                    "cut_drop": r.funnel.cut.drop,
                    "cut_standout": r.funnel.standout.map(|s| s.z),
                    "standout_floor": r.funnel.standout.map(|s| s.floor),
                    "subject_boost": r.funnel.subject_boost,
                    "neighbour_weight": r.funnel.neighbour_weight,
                    "placement": r.placement.as_str(),
                    "memory_tools": r.tools.level.as_str(),
                    "agent_writes": r.tools.agent_writes.as_str(),
                    "observe": r.observe.mode.as_str(),
                })
            })
            .collect()
    }

    pub async fn history(&self, name: &str) -> Result<Vec<RolloutChange>, StoreError> {
        self.store.rollout_history(name).await
    }

    /// Starts a change to release `name`: one change at a time on this replica, on the newest
    /// stored state. The guard ends the change when dropped.
    async fn begin_change(
        &self,
        name: &str,
    ) -> Result<(tokio::sync::MutexGuard<'_, ()>, arc_swap::Guard<Arc<Table>>), RolloutError> {
        let writing = self.writing.lock().await;
        self.refresh().await?;
        let table = self.table.load();
        if !table.releases.contains_key(name) {
            return Err(RolloutError::Unknown(name.to_owned()));
        }
        Ok((writing, table))
    }

    /// Applies a partial state (`stage`, `canary_percent`, `allow`, `guard`,
    /// `shadow_sample_percent`) to one release.
    pub async fn patch(&self, name: &str, patch: &Value, actor: &str) -> Result<RolloutState, RolloutError> {
        let (_writing, table) = self.begin_change(name).await?;
        let before = table.states.get(name).cloned().unwrap_or_default();
        let Value::Object(fields) = patch else {
            return Err(RolloutError::Invalid("the body must be a JSON object of rollout fields".into()));
        };
        let mut merged = serde_json::to_value(&before).map_err(|e| RolloutError::Invalid(e.to_string()))?;
        for (key, value) in fields {
            if key == "stage" && value == "active" {
                return Err(RolloutError::Invalid("make a release active with POST …/promote".into()));
            }
            if key == "stage_since_ms" {
                return Err(RolloutError::Invalid(
                    "`stage_since_ms` is kept by memgate; leave it out".into(),
                ));
            }
            merge_patch(&mut merged[key], value);
        }
        let mut after: RolloutState = serde_json::from_value(merged)
            .map_err(|e| RolloutError::Invalid(format!("rollout fields: {e}")))?;
        validate(&after)?;
        if before.stage == Stage::Active && after.stage != Stage::Active {
            return Err(RolloutError::Invalid(
                "the active release cannot change stage; promote another release".into(),
            ));
        }
        if after.stage != before.stage {
            after.stage_since_ms = now_ms();
            self.stats.reset_window(name);
        }
        self.write(vec![(name.to_owned(), before, after.clone())], "patch", actor, "").await?;
        Ok(after)
    }

    /// Makes `name` the active release; the previous active one becomes available.
    pub async fn promote(&self, name: &str, actor: &str, reason: &str) -> Result<(), RolloutError> {
        let (_writing, table) = self.begin_change(name).await?;
        let previous = table.active.name.clone();
        if previous == name {
            return Ok(());
        }
        let now = now_ms();
        let before_new = table.states.get(name).cloned().unwrap_or_default();
        let after_new = RolloutState {
            stage: Stage::Active,
            canary_percent: 0.0,
            note: None,
            stage_since_ms: now,
            ..before_new.clone()
        };
        let before_old = table
            .states
            .get(&previous)
            .cloned()
            .unwrap_or_else(|| RolloutState { stage: Stage::Active, ..Default::default() });
        let after_old = RolloutState { stage: Stage::Available, stage_since_ms: now, ..before_old.clone() };
        self.write(
            vec![(name.to_owned(), before_new, after_new), (previous, before_old, after_old)],
            "promote",
            actor,
            reason,
        )
        .await?;
        self.stats.reset_window(name);
        Ok(())
    }

    /// Withdraws a canary (or shadow): it serves nobody until changed again.
    pub async fn rollback(&self, name: &str, actor: &str, reason: &str) -> Result<(), RolloutError> {
        let (_writing, table) = self.begin_change(name).await?;
        let before = table.states.get(name).cloned().unwrap_or_default();
        if before.stage == Stage::Active || table.active.name == name {
            return Err(RolloutError::Invalid(
                "the active release cannot be rolled back; promote another release".into(),
            ));
        }
        if before.stage == Stage::Retired {
            return Err(RolloutError::Invalid(format!(
                "release `{name}` is retired and serves nobody already; PATCH its stage to bring it back"
            )));
        }
        let after = RolloutState {
            stage: Stage::Available,
            canary_percent: 0.0,
            note: (!reason.is_empty()).then(|| reason.to_owned()),
            stage_since_ms: now_ms(),
            ..before.clone()
        };
        self.write(vec![(name.to_owned(), before, after)], "rollback", actor, reason).await?;
        self.stats.reset_window(name);
        self.metrics.record_rollback(name, actor == "guard");
        Ok(())
    }

    async fn write(
        &self,
        changes: Vec<(String, RolloutState, RolloutState)>,
        action: &str,
        actor: &str,
        reason: &str,
    ) -> Result<(), RolloutError> {
        let at = now_ms();
        let history: Vec<RolloutChange> = changes
            .iter()
            .map(|(name, before, after)| RolloutChange {
                name: name.clone(),
                action: action.to_owned(),
                actor: actor.to_owned(),
                reason: reason.to_owned(),
                at_ms: at,
                before: serde_json::to_value(before).ok(),
                after: serde_json::to_value(after).ok(),
            })
            .collect();
        let states: Vec<(String, Value)> = changes
            .iter()
            .map(|(name, _, after)| (name.clone(), serde_json::to_value(after).unwrap_or(Value::Null)))
            .collect();
        self.store.write_rollout(&states, &history).await?;
        self.fanout.notify(Topic::Releases);
        tracing::info!(action, actor, reason, releases = ?changes.iter().map(|c| &c.0).collect::<Vec<_>>(), "rollout changed");
        // Rebuild from the store so this replica and the others agree on the result.
        self.version.store(-1, Ordering::SeqCst);
        self.refresh().await?;
        Ok(())
    }

    /// Reloads the table if the stored rollout changed since the last load.
    pub async fn refresh(&self) -> Result<(), StoreError> {
        let version = self.store.rollout_version().await?;
        if version == self.version.load(Ordering::SeqCst) {
            return Ok(());
        }
        let (stored, version) = self.store.rollout_states().await?;
        let table = build_table(&self.definitions, &stored, &self.table.load().active.name)?;
        self.table.store(Arc::new(table));
        self.version.store(version, Ordering::SeqCst);
        Ok(())
    }

    /// Once a second: pick up other replicas' changes, then let the guards judge the canaries.
    pub async fn tick(&self) {
        if let Err(err) = self.refresh().await {
            tracing::warn!(error = %err, "rollout refresh failed; keeping the current routing");
            return;
        }
        let table = self.table.load_full();
        let now = now_secs();
        for (release, state, _) in &table.canaries {
            let guard = &state.guard;
            if !guard.enabled {
                continue;
            }
            let (calls, errors) = self.stats.window(&release.name, now, guard.window_secs);
            if calls < guard.min_calls.max(1) {
                continue;
            }
            let rate = errors as f64 / calls as f64;
            if rate > guard.max_error_rate {
                let reason = format!(
                    "guard: error rate {:.1}% over {calls} calls in the last {} s is above {:.1}%",
                    rate * 100.0,
                    guard.window_secs,
                    guard.max_error_rate * 100.0
                );
                tracing::warn!(release = %release.name, %reason, "rolling back canary");
                if let Err(err) = self.rollback(&release.name, "guard", &reason).await {
                    tracing::error!(error = %err, release = %release.name, "guard rollback failed");
                }
            } else if guard.promote_after_secs > 0
                && now_ms() - state.stage_since_ms >= (guard.promote_after_secs as i64) * 1000
            {
                let reason = format!(
                    "guard: healthy for {} s ({:.1}% errors over {calls} calls)",
                    guard.promote_after_secs,
                    rate * 100.0
                );
                if let Err(err) = self.promote(&release.name, "guard", &reason).await {
                    tracing::error!(error = %err, release = %release.name, "guard promotion failed");
                }
            }
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RolloutError {
    #[error("no release `{0}`")]
    Unknown(String),
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl ErrorCode for RolloutError {
    fn error_code(&self) -> Code {
        match self {
            RolloutError::Unknown(_) => Code::NotFound,
            RolloutError::Invalid(_) => Code::InvalidRequest,
            RolloutError::Store(err) => err.error_code(),
        }
    }

    fn public_message(&self) -> String {
        match self {
            RolloutError::Store(err) => err.public_message(),
            other => other.to_string(),
        }
    }

    fn retry_after_secs(&self) -> Option<u64> {
        match self {
            RolloutError::Store(err) => err.retry_after_secs(),
            _ => None,
        }
    }
}

fn validate(state: &RolloutState) -> Result<(), RolloutError> {
    let invalid = |m: String| Err(RolloutError::Invalid(m));
    if !(0.0..=100.0).contains(&state.canary_percent) {
        return invalid("canary_percent must be between 0 and 100".into());
    }
    if !(0.0..=100.0).contains(&state.shadow_sample_percent) {
        return invalid("shadow_sample_percent must be between 0 and 100".into());
    }
    if !(0.0..=1.0).contains(&state.guard.max_error_rate) {
        return invalid("guard.max_error_rate must be between 0 and 1".into());
    }
    if state.guard.window_secs == 0 || state.guard.window_secs > 3600 {
        return invalid("guard.window_secs must be between 1 and 3600".into());
    }
    if let Some(bad) = state.allow.cidrs.iter().find(|c| Cidr::parse(c).is_none()) {
        return invalid(format!("allow.cidrs: `{bad}` is not a CIDR block like 10.0.0.0/8"));
    }
    Ok(())
}

fn build_table(
    definitions: &BTreeMap<String, Arc<Release>>,
    stored: &[(String, Value)],
    fallback_active: &str,
) -> Result<Table, StoreError> {
    let mut states: BTreeMap<String, RolloutState> = BTreeMap::new();
    for (name, value) in stored {
        if definitions.contains_key(name) {
            let state = serde_json::from_value(value.clone())
                .map_err(|e| StoreError::Corrupt(format!("release {name}: {e}")))?;
            states.insert(name.clone(), state);
        }
    }
    let active_name = states
        .iter()
        .find(|(_, s)| s.stage == Stage::Active)
        .map(|(n, _)| n.clone())
        .unwrap_or_else(|| fallback_active.to_owned());
    let active = definitions
        .get(&active_name)
        .or_else(|| definitions.values().next())
        .cloned()
        .ok_or_else(|| StoreError::Corrupt("no release is defined".into()))?;
    states
        .entry(active.name.clone())
        .or_insert_with(|| RolloutState { stage: Stage::Active, ..Default::default() })
        .stage = Stage::Active;
    let mut canaries = Vec::new();
    let mut shadows = Vec::new();
    for (name, state) in &states {
        let Some(release) = definitions.get(name) else { continue };
        match state.stage {
            Stage::Canary => {
                let cidrs = state.allow.cidrs.iter().filter_map(|c| Cidr::parse(c)).collect();
                canaries.push((release.clone(), state.clone(), cidrs));
            }
            Stage::Shadow if state.shadow_sample_percent > 0.0 => {
                shadows.push((release.clone(), state.shadow_sample_percent))
            }
            _ => {}
        }
    }
    Ok(Table { releases: definitions.clone(), states, active, canaries, shadows })
}

/// A stable bucket 0..10000 for a subject (FNV-1a 64): the same subject always lands in the same
/// bucket, on every replica and every version of memgate, so a canary share is sticky.
pub fn sticky_bucket(subject: &str) -> u32 {
    (crate::hash::fnv1a64(subject) % 10_000) as u32
}

fn now_secs() -> u64 {
    (now_ms() / 1000) as u64
}

/// JSON merge patch (RFC 7396): objects merge key by key, `null` removes, anything else replaces.
/// So `{"allow": {"subjects": ["u-1"]}}` changes the allow list's subjects and keeps its CIDRs.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(fields) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(serde_json::Map::new());
    }
    if let Value::Object(map) = target {
        for (key, value) in fields {
            if value.is_null() {
                map.remove(key);
            } else {
                merge_patch(map.entry(key.clone()).or_insert(Value::Null), value);
            }
        }
    }
}
