//! `/healthz` (the process is alive) and `/readyz` (send it traffic).

use crate::app::AppState;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde_json::{Value, json};

pub async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// 503 while draining for shutdown, so a load balancer moves new traffic elsewhere first.
pub async fn readyz(State(state): State<AppState>) -> (StatusCode, Json<Value>) {
    if state.is_draining() {
        (StatusCode::SERVICE_UNAVAILABLE, Json(json!({"status": "draining"})))
    } else {
        (StatusCode::OK, Json(json!({"status": "ready"})))
    }
}
