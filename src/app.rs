//! The application: shared state and the route table.
//!
//! A request's path through memgate, outermost first:
//! 1. `observability::middleware::observe` — request id, metrics, one log line.
//! 2. routing — `/v1/messages` and `count_tokens` to the checked proxy, other `/v1/*` to the
//!    streaming passthrough, health and metrics, a 404 in Anthropic's shape for the rest.
//! 3. `identity` — who is calling and which credential goes upstream.
//! 4. `proxy::request_body` — size limit, read deadline, JSON and shape checks (Messages only).
//! 5. `proxy::upstream` — pooled client, timeouts; the answer relayed chunk by chunk.
//!
//! `/admin/v1/…` goes through `admin::require_admin` (bearer token) to handlers that call
//! `memory::MemoryService`, which checks records (`memory::envelope`, `records::schemas`,
//! `records::secrets`) and writes them through `store`.

use crate::client_addr::ClientAddrs;
use crate::config::{Config, Limits, MemoryConfig};
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
use crate::proxy::budget::BodyBudget;
use crate::proxy::upstream::Upstream;
use crate::rollout::Rollout;
use crate::rollout::release::load_releases;
use crate::store::Store;
use crate::{admin, health, observability, proxy};
use axum::Router;
use axum::extract::{ConnectInfo, DefaultBodyLimit};
use axum::routing::{any, get, post};
use secrecy::SecretString;
use std::net::SocketAddr;
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
    /// Messages bodies in flight, by count and bytes (`proxy::budget`).
    body_budget: BodyBudget,
    client_addrs: ClientAddrs,
    /// Failed admin authentications per client address.
    admin_strikes: Strikes,
    /// An index older than this is stale (its store unreachable): answers say so.
    stale_after: std::time::Duration,
    /// Shadow runs in flight (`proxy::shadow`).
    shadow_slots: Arc<tokio::sync::Semaphore>,
    identity: Authenticator,
    upstream: Upstream,
    metrics: Arc<Metrics>,
    draining: AtomicBool,
    memories: MemoryService,
    admin_token: Option<SecretString>,
    max_import_bytes: u64,
    templates: Templates,
    memory_config: MemoryConfig,
    rollout: Rollout,
}

impl AppState {
    /// Connects the store (migrating it), compiles the schemas and builds the upstream client.
    pub async fn new(config: &Config) -> Result<AppState, StartupError> {
        let store = Store::connect(&config.database_url).await.map_err(|err| StartupError::Store {
            url: crate::store::redact_url(&config.database_url),
            message: err.to_string(),
        })?;
        store.migrate().await.map_err(|err| StartupError::Store {
            url: crate::store::redact_url(&config.database_url),
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
        let fanout = match &config.redis {
            Some(redis) => {
                let fanout = Fanout::start(redis)
                    .map_err(|message| StartupError::ConfigInvalid { key: "redis.url".into(), message })?;
                if let Some(connection) = fanout.connection() {
                    let secret =
                        store.shared_secret("query_cache").await.map_err(|err| StartupError::Store {
                            url: crate::store::redact_url(&config.database_url),
                            message: format!("reading the deployment's secrets: {err}"),
                        })?;
                    embedder.share_queries_through(SharedVectors::new(
                        connection.clone(),
                        &redis.key_prefix,
                        &secret,
                    ));
                    identity.share_limits_through(connection, &redis.key_prefix);
                }
                fanout
            }
            None => Fanout::disabled(),
        };
        let memories = MemoryService::new(
            store,
            Arc::new(schemas),
            config.records.max_content_bytes,
            embedder,
            config.embedding.dedupe_threshold,
        )
        .with_fanout(fanout.clone());
        let records = memories.load_index().await.map_err(|err| StartupError::Store {
            url: crate::store::redact_url(&config.database_url),
            message: format!("loading records: {err}"),
        })?;
        tracing::info!(records, releases = ?releases.keys().collect::<Vec<_>>(), "memory index loaded");
        let metrics = Arc::new(Metrics::new());
        let rollout = Rollout::load(memories.store().clone(), releases, DEFAULT_RELEASE, metrics.clone())
            .await
            .map_err(|err| StartupError::Store {
                url: crate::store::redact_url(&config.database_url),
                message: format!("loading rollout state: {err}"),
            })?
            .with_fanout(fanout.clone());
        let inner = Inner {
            fanout,
            rollout,
            templates,
            memory_config: config.memory.clone(),
            memories,
            admin_token: config.admin.token.clone(),
            max_import_bytes: config.admin.max_import_bytes,
            limits: config.limits.clone(),
            body_budget: BodyBudget::new(
                config.limits.max_inflight_body_bytes,
                config.limits.max_inflight_requests,
                config.limits.inflight_wait,
            ),
            client_addrs: config.client_addrs.clone(),
            admin_strikes: Strikes::new(config.admin.rate_limit_per_minute),
            stale_after: (config.poll_interval * 3).max(std::time::Duration::from_secs(3)),
            shadow_slots: Arc::new(tokio::sync::Semaphore::new(crate::rollout::shadow::MAX_RUNNING)),
            identity,
            upstream: Upstream::new(&config.upstream)?,
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

    /// The client's address (`client_addr`): the peer, or whom a trusted proxy names.
    pub fn client_addr(&self, parts: &axum::http::request::Parts) -> Option<std::net::IpAddr> {
        let peer = parts.extensions.get::<ConnectInfo<SocketAddr>>().map(|ConnectInfo(addr)| addr.ip());
        self.inner.client_addrs.resolve(peer, &parts.headers)
    }

    /// How stale the in-memory index is, when its store has been unreachable for a while.
    pub fn index_staleness(&self) -> Option<std::time::Duration> {
        let age = self.memories().index_age();
        (age > self.inner.stale_after).then_some(age)
    }

    pub fn shadow_slots(&self) -> &Arc<tokio::sync::Semaphore> {
        &self.inner.shadow_slots
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

    pub fn memories(&self) -> &MemoryService {
        &self.inner.memories
    }

    pub fn store(&self) -> &Store {
        self.inner.memories.store()
    }

    pub fn index(&self) -> &MemoryIndex {
        self.inner.memories.index()
    }

    pub fn embedder(&self) -> &Embedder {
        self.inner.memories.embedder()
    }

    pub fn templates(&self) -> &Templates {
        &self.inner.templates
    }

    pub fn memory_config(&self) -> &MemoryConfig {
        &self.inner.memory_config
    }

    pub fn rollout(&self) -> &Rollout {
        &self.inner.rollout
    }

    pub fn admin_token(&self) -> Option<&SecretString> {
        self.inner.admin_token.as_ref()
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

/// The route table: path → handler, nothing else. Everything on one listener.
pub fn build_app(state: AppState) -> Router {
    finish(public_routes().merge(operator_routes(&state)), state)
}

/// The public listener when `/admin` and `/metrics` have a listener of their own
/// (`admin.listen`): the proxy and health only.
pub fn build_public_app(state: AppState) -> Router {
    finish(public_routes(), state)
}

/// The operators' listener (`admin.listen`): the admin API, metrics and health.
pub fn build_admin_app(state: AppState) -> Router {
    let health = Router::new().route("/healthz", get(health::healthz)).route("/readyz", get(health::readyz));
    finish(operator_routes(&state).merge(health), state)
}

fn public_routes() -> Router<AppState> {
    Router::new()
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/v1/messages", post(proxy::messages).fallback(proxy::passthrough))
        .route("/v1/messages/count_tokens", post(proxy::count_tokens).fallback(proxy::passthrough))
        .route("/v1/{*rest}", any(proxy::passthrough))
}

fn operator_routes(state: &AppState) -> Router<AppState> {
    use admin::{memories, transfer};
    let admin = Router::new()
        .route("/memories", post(memories::create).get(memories::list))
        .route("/memories/forget", post(memories::forget))
        .route("/memories/{id}", get(memories::get).patch(memories::update).delete(memories::delete))
        .route("/memories/{id}/history", get(memories::history))
        .route("/memories/{id}/pause", post(memories::pause))
        .route("/memories/{id}/archive", post(memories::archive))
        .route("/memories/{id}/activate", post(memories::activate))
        .route("/export", get(transfer::export))
        .route("/import", post(transfer::import))
        .route("/imports/{id}", get(transfer::progress))
        .route("/imports/{id}/undo", post(transfer::undo))
        .route("/keys", post(admin::keys::create).get(admin::keys::list))
        .route("/explain", post(admin::explain::explain))
        .route("/releases", get(admin::releases::list))
        .route("/releases/{name}", get(admin::releases::get).patch(admin::releases::patch))
        .route("/releases/{name}/promote", post(admin::releases::promote))
        .route("/releases/{name}/rollback", post(admin::releases::rollback))
        .route("/releases/{name}/stats", get(admin::releases::stats))
        .route("/releases/{name}/history", get(admin::releases::history))
        .route("/keys/{id}", axum::routing::delete(admin::keys::revoke))
        .fallback(proxy::not_found)
        .method_not_allowed_fallback(proxy::method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(state.clone(), admin::require_admin));
    Router::new().nest("/admin/v1", admin).route("/metrics", get(observability::metrics_handler))
}

fn finish(routes: Router<AppState>, state: AppState) -> Router {
    routes
        .fallback(proxy::not_found)
        .method_not_allowed_fallback(proxy::method_not_allowed)
        // Body limits are enforced by the handlers, which answer in Anthropic's error shape.
        .layer(DefaultBodyLimit::disable())
        .layer(axum::middleware::from_fn_with_state(state.clone(), observability::middleware::observe))
        .with_state(state)
}
