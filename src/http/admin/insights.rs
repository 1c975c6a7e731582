//! What the console reads besides records and releases (console/API.md §3): the metrics history
//! behind its charts, per-release figures, data health, this replica's recent requests, and the
//! schemas records are checked against. All read-only (the viewer role may call them) and all
//! inside the request's tenant.

use super::AdminContext;
use crate::clock::now_ms;
use crate::console::{HistoryParams, RecentRequests, Window, data_health, history, schemas};
use crate::error::ApiError;
use crate::state::AppState;
use axum::Json;
use axum::extract::{Path, RawQuery, State};
use serde_json::Value;

/// `GET /admin/v1/metrics/history?window=1h|24h[&release=]`.
pub async fn metrics_history(
    State(state): State<AppState>,
    ctx: AdminContext,
    RawQuery(query): RawQuery,
) -> Result<Json<history::History>, ApiError> {
    let params = HistoryParams::parse(query.as_deref(), true, Window::Hour)?;
    include_unwritten(&state).await;
    let answer =
        history::history(state.store(), &ctx.tenant, &params, &release_names(&state), now_ms()).await?;
    Ok(Json(answer))
}

/// `GET /admin/v1/metrics/releases?window=1h|24h`.
pub async fn metrics_releases(
    State(state): State<AppState>,
    ctx: AdminContext,
    RawQuery(query): RawQuery,
) -> Result<Json<history::ReleasesAnswer>, ApiError> {
    let params = HistoryParams::parse(query.as_deref(), false, Window::Day)?;
    include_unwritten(&state).await;
    let answer =
        history::releases(state.store(), &ctx.tenant, params.window, &release_names(&state), now_ms())
            .await?;
    Ok(Json(answer))
}

/// `GET /admin/v1/health/data`: read from the database, which has what the index does not —
/// paused and archived records, and how often each record was injected (by every replica).
pub async fn data_health(
    State(state): State<AppState>,
    ctx: AdminContext,
) -> Result<Json<data_health::DataHealth>, ApiError> {
    let answer =
        data_health::data_health_from_store(state.store(), &ctx.tenant, state.memories().schemas(), now_ms())
            .await?;
    Ok(Json(answer))
}

/// `GET /admin/v1/requests/recent?limit=`: this replica's recent Messages requests, newest first.
pub async fn recent_requests(
    State(state): State<AppState>,
    ctx: AdminContext,
    RawQuery(query): RawQuery,
) -> Result<Json<Value>, ApiError> {
    let limit = RecentRequests::parse_limit(query.as_deref())?;
    Ok(Json(state.recent_requests().list(&ctx.tenant, limit, now_ms())))
}

/// `GET /admin/v1/schemas`.
pub async fn schema_list(State(state): State<AppState>) -> Json<Value> {
    Json(schemas::list(state.memories().schemas()))
}

/// `GET /admin/v1/schemas/{version}/{type}`.
pub async fn schema_document(
    State(state): State<AppState>,
    Path((version, record_type)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    schemas::document(state.memories().schemas(), &version, &record_type).map(Json)
}

/// Writes what this replica recorded since its last minute flush, so a chart includes the current
/// minute as far as it is known (console/API.md §3.1) and moves within one refresh of the console
/// instead of once a minute. Figures are added, so an extra flush counts nothing twice; one that
/// fails keeps its figures for the next, and the answer is then as of the last flush.
async fn include_unwritten(state: &AppState) {
    if let Err(err) = state.console_recorder().flush(state.store()).await {
        tracing::warn!(error = %err, "could not write the console's metrics history before reading it");
    }
}

fn release_names(state: &AppState) -> Vec<String> {
    state.rollout().names()
}
