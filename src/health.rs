//! `/healthz` (the process is alive) and `/readyz` (send it traffic).

use crate::app::AppState;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
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
