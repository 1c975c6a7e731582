//! `/healthz` (the process is alive), `/readyz` (send it traffic) and `/metrics`.

use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

pub async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// 503 while draining for shutdown, so a load balancer moves new traffic elsewhere first. An
/// unreachable database does not make a replica unready: it goes on proxying with the memory it
/// holds (answers carry `X-Memory-Stale`), and says so here.
pub async fn readyz(State(state): State<AppState>) -> (StatusCode, Json<Value>) {
    if state.is_draining() {
        return (StatusCode::SERVICE_UNAVAILABLE, Json(json!({"status": "draining"})));
    }
    match state.index_staleness() {
        Some(age) => (
            StatusCode::OK,
            Json(json!({"status": "ready", "store": "unreachable", "memory_stale_secs": age.as_secs()})),
        ),
        None => (StatusCode::OK, Json(json!({"status": "ready", "store": "ok"}))),
    }
}

/// `GET /metrics`: Prometheus (OpenMetrics text).
pub async fn metrics(State(state): State<AppState>) -> Response {
    state.metrics().sync_embedding(state.memories().embedder().stats());
    state.metrics().sync_fleet(state.identity().fleet_stats());
    state.metrics().set_index_age(state.memories().index_age());
    state.metrics().set_body_budget(state.body_budget().usage());
    match state.metrics().render() {
        Ok(text) => ([(CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], text)
            .into_response(),
        Err(err) => crate::error::ApiError::internal(format!("rendering metrics: {err}")).into_response(),
    }
}
