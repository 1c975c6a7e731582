//! The review of proposed records: `GET /memories?status=proposed` is the queue (`memories::list`
//! with its filters); here are the decisions. `POST /memories/{id}/activate` approves, with an
//! optional body of edits applied in the same write (edit then approve); `POST
//! /memories/activate` and `POST /memories/reject` take `{"ids": [...]}` and answer each id.

use super::{AdminContext, AdminJson};
use crate::error::ApiError;
use crate::memory::review::{Decision, MAX_BULK};
use crate::state::AppState;
use axum::Json;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use serde_json::{Value, json};

/// Approves (activates) one record; a non-empty JSON body is a partial envelope applied first, in
/// the same write, through every write check (`If-Match` guards it as it guards a PATCH).
pub async fn activate(
    State(state): State<AppState>,
    ctx: AdminContext,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<Value>, ApiError> {
    let edits = super::optional_json_body(&state, &headers, body).await?;
    let if_match = super::memories::if_match(&headers)?;
    let record = state.memories().approve(&ctx.tenant, &id, edits.as_ref(), if_match, &ctx.actor).await?;
    Ok(Json(record.to_json()))
}

pub async fn activate_many(
    state: State<AppState>,
    ctx: AdminContext,
    body: AdminJson,
) -> Result<Json<Value>, ApiError> {
    decide(state, ctx, body, Decision::Approve).await
}

pub async fn reject_many(
    state: State<AppState>,
    ctx: AdminContext,
    body: AdminJson,
) -> Result<Json<Value>, ApiError> {
    decide(state, ctx, body, Decision::Reject).await
}

async fn decide(
    State(state): State<AppState>,
    ctx: AdminContext,
    AdminJson(input): AdminJson,
    decision: Decision,
) -> Result<Json<Value>, ApiError> {
    let ids = ids_of(&input)?;
    let results = state.memories().review(&ctx.tenant, &ids, decision, &ctx.actor).await;
    let done = results.iter().filter(|(_, r)| r.is_ok()).count();
    let data: Vec<Value> = results
        .into_iter()
        .map(|(id, result)| match result {
            Ok(record) if decision == Decision::Approve => {
                json!({"id": id, "ok": true, "status": record.status.as_str(), "revision": record.revision})
            }
            Ok(_) => json!({"id": id, "ok": true, "deleted": true}),
            Err(err) => json!({"id": id, "ok": false, "error": ApiError::from(err).error_object()}),
        })
        .collect();
    let failed = data.len() - done;
    Ok(Json(json!({"data": data, "done": done, "failed": failed})))
}

/// `{"ids": ["mem-…", …]}`: 1 to `MAX_BULK` ids, each a non-empty string, no repeats.
fn ids_of(input: &Value) -> Result<Vec<String>, ApiError> {
    let usage = || format!("the body is {{\"ids\": [\"mem-…\", …]}} with 1 to {MAX_BULK} record ids");
    let list =
        input.get("ids").and_then(Value::as_array).ok_or_else(|| ApiError::invalid_request(usage()))?;
    if list.is_empty() || list.len() > MAX_BULK {
        return Err(ApiError::invalid_request(format!("{} (got {})", usage(), list.len())));
    }
    let mut ids: Vec<String> = Vec::with_capacity(list.len());
    for item in list {
        let id = item
            .as_str()
            .filter(|id| !id.is_empty() && id.len() <= 256)
            .ok_or_else(|| ApiError::invalid_request("every id is a string of 1 to 256 characters"))?;
        if !ids.iter().any(|seen| seen == id) {
            ids.push(id.to_owned());
        }
    }
    Ok(ids)
}
