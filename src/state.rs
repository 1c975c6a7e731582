//! The shared state every handler works with: built once at start (store, model, releases,
//! upstream client), cheap to clone into each request. Routes live apart, in `routes`.

use crate::body::budget::BodyBudget;
use crate::client_addr::ClientAddrs;
use crate::config::{AuthMode, Config, Limits};
use crate::console::{
    AdminTokens, ConsoleAuth, HistoryRetention, MetricsRecorder, RecentRequests, SessionPolicy,
};
use crate::embed::Embedder;
use crate::embed::shared::SharedVectors;
use crate::error::StartupError;
use crate::fanout::Fanout;
use crate::identity::Authenticator;
use crate::identity::rate_limit::Strikes;
use crate::index::MemoryIndex;
use crate::inject::{DEFAULT_RELEASE, Templates};
use crate::memory::MemoryService;
use crate::memory::checks::schemas::SchemaSet;
use crate::observability::metrics::Metrics;
use crate::observer::Observer;
use crate::observer::metrics::ObserverMetrics;
use crate::recall::Recaller;
use crate::rollout::Rollout;
use crate::rollout::release::load_releases;
use crate::store::Store;
use crate::tools::MemoryTools;
use crate::triggers::{TriggerMetrics, Triggers};
use crate::turn::Turns;
use crate::upstream::Upstream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Everything a handler needs, cheap to clone.
#[derive(Clone)]
pub struct AppState {
    inner: Arc<Inner>,
}

struct Inner {
    /// Change fan-out between replicas (a no-op without Redis).
    fanout: Fanout,
    limits: Limits,
    /// Messages bodies in flight, by count and bytes (`body::budget`).
    body_budget: BodyBudget,
    client_addrs: ClientAddrs,
    /// Failed admin authentications per client address.
    admin_strikes: Strikes,
    /// An index older than this is stale (its store unreachable): answers say so.
    stale_after: std::time::Duration,
    identity: Arc<Authenticator>,
    upstream: Arc<Upstream>,
    metrics: Arc<Metrics>,
    draining: AtomicBool,
    /// The memory step of a request: records, model, templates (`recall`).
    recaller: Recaller,
    max_import_bytes: u64,
    rollout: Arc<Rollout>,
    /// Records that start business work: evaluation, the outbox and its delivery worker.
    triggers: Triggers,
    /// The console's logins and sessions, its metrics history (flushed by the server's ticker)
    /// and the recent requests its explain picker lists.
    console_auth: ConsoleAuth,
    recorder: Arc<MetricsRecorder>,
    recent: Arc<RecentRequests>,
    /// One Messages turn, begun and settled (`turn`).
    turns: Turns,
    /// memgate's memory tools, for the surfaces that offer them outside a turn (`POST /mcp`); the
    /// same executor the turns' rounds run.
    tools: MemoryTools,
    /// Learning from finished exchanges: the queue's writer and its extraction worker.
    observer: Observer,
}

impl AppState {
    /// Connects the store (migrating it), compiles the schemas and builds the upstream client.
    pub async fn new(config: &Config) -> Result<AppState, StartupError> {
        let store = Store::connect(&config.database.url).await.map_err(|err| StartupError::Store {
            url: crate::store::redact_url(&config.database.url),
            message: err.to_string(),
        })?;
        store.migrate().await.map_err(|err| StartupError::Store {
            url: crate::store::redact_url(&config.database.url),
            message: format!("migrating: {err}"),
        })?;
        let schemas = SchemaSet::load(config.records.schemas_dir.as_deref()).map_err(|err| {
            StartupError::ConfigInvalid { key: "records.schemas_dir".into(), message: err.to_string() }
        })?;
        let identity = Authenticator::new(config.identity.clone(), store.clone())
            .map_err(|message| StartupError::ConfigInvalid { key: "auth.jwt".into(), message })?;
        let model = config.embedding.model.clone();
        let local_model_missing = model.model_name.is_none() && !model.model_dir.join("model.onnx").is_file();
        let embedder = tokio::task::spawn_blocking(move || Embedder::load(&model))
            .await
            .map_err(|err| StartupError::Embedder(err.to_string()))?
            .map_err(|err| match local_model_missing {
                // Say where it was looked for and what fetches it, not only which file is missing.
                true => StartupError::Embedder(format!("{err}; {}", crate::assets::not_found_help())),
                false => StartupError::Embedder(err.to_string()),
            })?;
        let templates = Templates::builtin_with(config.memory.templates_dir.as_deref()).map_err(|err| {
            StartupError::ConfigInvalid { key: "memory.templates_dir".into(), message: err.to_string() }
        })?;
        let releases = load_releases(config, &templates)
            .map_err(|message| StartupError::ConfigInvalid { key: "releases".into(), message })?;
        let default_release = config.memory.default_release.as_deref().unwrap_or(DEFAULT_RELEASE);
        if !releases.contains_key(default_release) {
            return Err(StartupError::ConfigInvalid {
                key: "memory.default_release".into(),
                message: format!(
                    "unknown release `{default_release}` (known: {})",
                    releases.keys().cloned().collect::<Vec<_>>().join(", ")
                ),
            });
        }
        let fanout = match &config.redis {
            Some(redis) => {
                let fanout = Fanout::start(redis)
                    .map_err(|message| StartupError::ConfigInvalid { key: "redis.url".into(), message })?;
                if let Some(connection) = fanout.connection() {
                    let secret =
                        store.shared_secret("query_cache").await.map_err(|err| StartupError::Store {
                            url: crate::store::redact_url(&config.database.url),
                            message: format!("reading the deployment's secrets: {err}"),
                        })?;
                    embedder.share_queries_through(SharedVectors::new(
                        connection.clone(),
                        &redis.key_prefix,
                        &secret,
                        redis.shared_read_timeout,
                    ));
                    identity.share_limits_through(connection, &redis.key_prefix);
                }
                fanout
            }
            None => Fanout::disabled(),
        };
        // What console sessions are bound to their token under: the configured secret, else one
        // the store makes once and every replica on the database reads (`console::session`).
        let mut tokens = AdminTokens::new(config.admin.token.clone(), config.admin.viewer_token.clone());
        if tokens.admin_api_on() {
            let key = match &config.admin.session_secret {
                Some(secret) => secrecy::ExposeSecret::expose_secret(secret).to_owned(),
                None => store.shared_secret("console_sessions").await.map_err(|err| StartupError::Store {
                    url: crate::store::redact_url(&config.database.url),
                    message: format!("reading the deployment's secrets: {err}"),
                })?,
            };
            tokens = tokens.with_session_key(key.as_bytes());
        }
        let memories = MemoryService::new(
            store,
            Arc::new(schemas),
            config.records.max_content_bytes,
            embedder,
            config.embedding.dedupe_threshold,
        )
        .with_body_cache(config.memory.body_cache_bytes)
        .with_fanout(fanout.clone())
        .with_dormancy(config.records.dormancy.clone())
        .map_err(|message| StartupError::ConfigInvalid { key: "records.dormancy".into(), message })?;
        let records = memories.load_index().await.map_err(|err| StartupError::Store {
            url: crate::store::redact_url(&config.database.url),
            message: format!("loading records: {err}"),
        })?;
        tracing::info!(records, releases = ?releases.keys().collect::<Vec<_>>(), "memory index loaded");
        let trigger_metrics = TriggerMetrics::default();
        let observer_metrics = ObserverMetrics::default();
        let mut metrics = Metrics::new();
        trigger_metrics.register(metrics.registry_mut());
        observer_metrics.register(metrics.registry_mut());
        let metrics = Arc::new(metrics);
        // Background inserts and deliveries run on the tracker shutdown waits for.
        let triggers = Triggers::new(
            config.triggers.clone(),
            memories.store().clone(),
            memories.tasks().clone(),
            trigger_metrics,
        )
        .map_err(|errors| {
            let first = errors.into_iter().next();
            StartupError::ConfigInvalid {
                key: first.as_ref().map_or_else(|| "triggers".into(), |e| e.key.clone()),
                message: first.map_or_else(String::new, |e| e.message),
            }
        })?;
        let replica = config.console.replica.clone().unwrap_or_else(replica_name);
        let retention =
            HistoryRetention::new(config.console.history_retention_days, config.console.minute_history_hours);
        let rollout = Rollout::load(memories.store().clone(), releases, default_release, metrics.clone())
            .await
            .map_err(|err| StartupError::Store {
                url: crate::store::redact_url(&config.database.url),
                message: format!("loading rollout state: {err}"),
            })?
            .with_fanout(fanout.clone());
        let rollout = Arc::new(rollout);
        let recaller =
            Recaller::new(memories, templates, metrics.clone(), config.memory.clone(), triggers.clone());
        let identity = Arc::new(identity);
        let upstream = Arc::new(Upstream::new(&config.upstream)?);
        let recorder = Arc::new(MetricsRecorder::new(replica.clone(), retention));
        let recent = Arc::new(RecentRequests::new(
            replica,
            config.console.recent_requests,
            config.console.recent_request_ttl,
        ));
        let stale_after = (config.database.poll_interval * 3).max(std::time::Duration::from_secs(3));
        let tools = MemoryTools::new(recaller.memories().clone(), metrics.clone());
        // Extraction never uses a caller's key: in passthrough mode only the operator's
        // extraction key, in managed mode that or memgate's own upstream key.
        let extraction_key = match config.identity.mode {
            AuthMode::Passthrough => config.observer.extraction_key.clone(),
            AuthMode::Managed => {
                config.observer.extraction_key.clone().or_else(|| config.identity.upstream_key.clone())
            }
        };
        let observer = Observer::new(
            config.observer.clone(),
            recaller.memories().clone(),
            upstream.clone(),
            extraction_key,
            observer_metrics,
            recaller.memories().tasks().clone(),
        );
        let turns = Turns::new(
            recaller.clone(),
            rollout.clone(),
            identity.clone(),
            upstream.clone(),
            recorder.clone(),
            recent.clone(),
            tools.clone(),
            metrics.clone(),
            observer.clone(),
            stale_after,
        );
        let inner = Inner {
            fanout,
            rollout,
            recaller,
            triggers,
            console_auth: ConsoleAuth { tokens, policy: SessionPolicy::default() },
            recorder,
            recent,
            turns,
            tools,
            observer,
            max_import_bytes: config.admin.max_import_bytes,
            limits: config.limits.clone(),
            body_budget: BodyBudget::new(
                crate::body::budget::Caps {
                    total: config.limits.max_inflight_body_bytes,
                    per_address: config.limits.max_inflight_body_bytes_per_address,
                    per_caller: config.limits.max_inflight_body_bytes_per_caller,
                },
                config.limits.max_inflight_requests,
                config.limits.inflight_wait,
            ),
            client_addrs: config.client_addrs.clone(),
            admin_strikes: Strikes::new(config.admin.rate_limit_per_minute),
            stale_after,
            identity,
            upstream,
            metrics,
            draining: AtomicBool::new(false),
        };
        Ok(AppState { inner: Arc::new(inner) })
    }

    pub fn fanout(&self) -> &Fanout {
        &self.inner.fanout
    }

    pub fn limits(&self) -> &Limits {
        &self.inner.limits
    }

    pub fn body_budget(&self) -> &BodyBudget {
        &self.inner.body_budget
    }

    /// Who the client is behind trusted proxies, and how its per-address limits count it.
    pub fn client_addrs(&self) -> &ClientAddrs {
        &self.inner.client_addrs
    }

    /// How stale the in-memory index is, when its store has been unreachable for a while.
    pub fn index_staleness(&self) -> Option<std::time::Duration> {
        let age = self.memories().index_age();
        (age > self.inner.stale_after).then_some(age)
    }

    pub fn admin_strikes(&self) -> &Strikes {
        &self.inner.admin_strikes
    }

    pub fn identity(&self) -> &Authenticator {
        &self.inner.identity
    }

    pub fn upstream(&self) -> &Upstream {
        &self.inner.upstream
    }

    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// Messages turns: begun and settled for the proxy, begun for `explain`.
    pub fn turns(&self) -> &Turns {
        &self.inner.turns
    }

    pub fn tools(&self) -> &MemoryTools {
        &self.inner.tools
    }

    pub fn recaller(&self) -> &Recaller {
        &self.inner.recaller
    }

    pub fn memories(&self) -> &MemoryService {
        self.inner.recaller.memories()
    }

    pub fn store(&self) -> &Store {
        self.memories().store()
    }

    pub fn index(&self) -> &MemoryIndex {
        self.memories().index()
    }

    pub fn embedder(&self) -> &Embedder {
        self.memories().embedder()
    }

    pub fn rollout(&self) -> &Arc<Rollout> {
        &self.inner.rollout
    }

    pub fn triggers(&self) -> &Triggers {
        &self.inner.triggers
    }

    pub fn observer(&self) -> &Observer {
        &self.inner.observer
    }

    /// The console's tokens and session rules.
    pub fn console_auth(&self) -> &ConsoleAuth {
        &self.inner.console_auth
    }

    pub fn console_recorder(&self) -> &MetricsRecorder {
        &self.inner.recorder
    }

    pub fn recent_requests(&self) -> &RecentRequests {
        &self.inner.recent
    }

    pub fn max_import_bytes(&self) -> u64 {
        self.inner.max_import_bytes
    }

    /// Marks the process as shutting down: `/readyz` turns 503 so load balancers stop sending.
    pub fn begin_draining(&self) {
        self.inner.draining.store(true, Ordering::SeqCst);
    }

    pub fn is_draining(&self) -> bool {
        self.inner.draining.load(Ordering::SeqCst)
    }
}

/// This replica's name in the console's history: the host's name (a pod's, in Kubernetes), else
/// a random id per start.
fn replica_name() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.trim().is_empty())
        .unwrap_or_else(|| format!("replica-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]))
}
