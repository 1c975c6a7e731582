//! `/admin/v1/releases…`: the releases and their rollout, promotion, rollback, stats and history.

use super::{AdminContext, AdminJson, json_body};
use crate::clock::format_ms;
use crate::error::ApiError;
use crate::state::AppState;
use axum::Json;
use axum::extract::{Path, Request, State};
use serde_json::{Value, json};

pub async fn list(State(state): State<AppState>) -> Json<Value> {
    Json(json!({"data": state.rollout().list()}))
}

pub async fn get(State(state): State<AppState>, Path(name): Path<String>) -> Result<Json<Value>, ApiError> {
    state
        .rollout()
        .list()
        .into_iter()
        .find(|r| r["name"] == name.as_str())
        .map(Json)
        .ok_or_else(|| ApiError::not_found(format!("no release `{name}`")))
}

pub async fn patch(
    State(state): State<AppState>,
    ctx: AdminContext,
    Path(name): Path<String>,
    AdminJson(input): AdminJson,
) -> Result<Json<Value>, ApiError> {
    let rollout = state.rollout().patch(&name, &input, &ctx.actor).await?;
    Ok(Json(json!({"name": name, "rollout": rollout})))
}

/// Optional body: `{"reason": "…"}`.
async fn reason(state: &AppState, request: Request) -> Result<String, ApiError> {
    let (parts, body) = request.into_parts();
    let declared_empty = parts.headers.get("content-length").is_none_or(|v| v == "0");
    if declared_empty && parts.headers.get("transfer-encoding").is_none() {
        return Ok(String::new());
    }
    let input = json_body(state, &parts.headers, body).await?;
    Ok(input.get("reason").and_then(Value::as_str).unwrap_or("").chars().take(500).collect())
}

pub async fn promote(
    State(state): State<AppState>,
    ctx: AdminContext,
    Path(name): Path<String>,
    request: Request,
) -> Result<Json<Value>, ApiError> {
    let reason = reason(&state, request).await?;
    state.rollout().promote(&name, &ctx.actor, &reason).await?;
    Ok(Json(json!({"name": name, "active": true})))
}

pub async fn rollback(
    State(state): State<AppState>,
    ctx: AdminContext,
    Path(name): Path<String>,
    request: Request,
) -> Result<Json<Value>, ApiError> {
    let reason = reason(&state, request).await?;
    state.rollout().rollback(&name, &ctx.actor, &reason).await?;
    Ok(Json(json!({"name": name, "rolled_back": true})))
}

pub async fn stats(State(state): State<AppState>, Path(name): Path<String>) -> Result<Json<Value>, ApiError> {
    let snapshot =
        state.rollout().stats(&name).ok_or_else(|| ApiError::not_found(format!("no release `{name}`")))?;
    Ok(Json(json!({"name": name, "stats": snapshot, "scope": "this replica, since it started"})))
}

pub async fn history(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    state.rollout().release(&name).ok_or_else(|| ApiError::not_found(format!("no release `{name}`")))?;
    let changes = state.rollout().history(&name).await?;
    let data: Vec<Value> = changes
        .into_iter()
        .map(|c| {
            json!({
                "action": c.action,
                "actor": c.actor,
                "reason": c.reason,
                "at": format_ms(c.at_ms),
                "before": c.before,
                "after": c.after,
            })
        })
        .collect();
    Ok(Json(json!({"name": name, "data": data})))
}
