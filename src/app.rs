//! The application: shared state and the route table.
//!
//! A request's path through memgate, outermost first:
//! 1. `observability::middleware::observe` — request id, metrics, one log line.
//! 2. routing — `/v1/messages` and `count_tokens` to the checked proxy, other `/v1/*` to the
//!    streaming passthrough, health and metrics, a 404 in Anthropic's shape for the rest.
//! 3. `identity` — who is calling and which credential goes upstream.
//! 4. `proxy::request_body` — size limit, read deadline, JSON and shape checks (Messages only).
//! 5. `proxy::upstream` — pooled client, timeouts; the answer relayed chunk by chunk.

use crate::config::{Config, Limits};
use crate::error::StartupError;
use crate::identity::Identity;
use crate::observability::metrics::Metrics;
use crate::proxy::upstream::Upstream;
use crate::{health, observability, proxy};
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{any, get, post};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Everything a handler needs, cheap to clone.
#[derive(Clone)]
pub struct AppState {
    inner: Arc<Inner>,
}

struct Inner {
    limits: Limits,
    identity: Identity,
    upstream: Upstream,
    metrics: Metrics,
    draining: AtomicBool,
}

impl AppState {
    pub fn new(config: &Config) -> Result<AppState, StartupError> {
        let inner = Inner {
            limits: config.limits.clone(),
            identity: Identity::new(config.auth_mode, config.upstream.api_key.clone()),
            upstream: Upstream::new(&config.upstream)?,
            metrics: Metrics::new(),
            draining: AtomicBool::new(false),
        };
        Ok(AppState {
            inner: Arc::new(inner),
        })
    }

    pub fn limits(&self) -> &Limits {
        &self.inner.limits
    }

    pub fn identity(&self) -> &Identity {
        &self.inner.identity
    }

    pub fn upstream(&self) -> &Upstream {
        &self.inner.upstream
    }

    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// Marks the process as shutting down: `/readyz` turns 503 so load balancers stop sending.
    pub fn begin_draining(&self) {
        self.inner.draining.store(true, Ordering::SeqCst);
    }

    pub fn is_draining(&self) -> bool {
        self.inner.draining.load(Ordering::SeqCst)
    }
}

/// The route table: path → handler, nothing else.
pub fn build_app(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(observability::metrics_handler))
        .route(
            "/v1/messages",
            post(proxy::messages).fallback(proxy::passthrough),
        )
        .route(
            "/v1/messages/count_tokens",
            post(proxy::count_tokens).fallback(proxy::passthrough),
        )
        .route("/v1/{*rest}", any(proxy::passthrough))
        .fallback(proxy::not_found)
        // Body limits are enforced by the handlers, which answer in Anthropic's error shape.
        .layer(DefaultBodyLimit::disable())
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            observability::middleware::observe,
        ))
        .with_state(state)
}
