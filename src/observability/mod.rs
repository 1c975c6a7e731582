//! Request ids, metrics and logs.

pub mod logging;
pub mod metrics;
pub mod middleware;

use crate::app::AppState;
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use std::time::Duration;

/// How long the upstream took to answer with headers; attached to the answer as an extension so
/// the observing middleware can tell upstream time from memgate's own.
#[derive(Debug, Clone, Copy)]
pub struct UpstreamLatency(pub Duration);

/// `GET /metrics`: Prometheus (OpenMetrics text).
pub async fn metrics_handler(State(state): State<AppState>) -> Response {
    state.metrics().sync_embedding(state.memories().embedder().stats());
    state.metrics().sync_fleet(state.identity().fleet_stats());
    state.metrics().set_index_age(state.memories().index_age());
    match state.metrics().render() {
        Ok(text) => ([(CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], text)
            .into_response(),
        Err(err) => crate::error::ApiError::internal(format!("rendering metrics: {err}")).into_response(),
    }
}
