//! `/admin/v1/memories…`: create, read, update, delete, list and search, history, status changes
//! and forget.

use super::{AdminContext, AdminJson};
use crate::clock::format_ms;
use crate::error::{ApiError, Code};
use crate::record::Status;
use crate::state::AppState;
use crate::store::memories::{Created, ListFilter, Validity};
use axum::Json;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

pub async fn create(
    State(state): State<AppState>,
    ctx: AdminContext,
    AdminJson(input): AdminJson,
) -> Result<Response, ApiError> {
    let author = format!("admin:{}", ctx.actor);
    let writer = ctx.writer(&author);
    let created = state.memories().create_as(&ctx.tenant, &input, &writer).await?;
    let (status, record, flag) = match &created {
        Created::New(record) => (StatusCode::CREATED, record, None),
        Created::Superseded(record) => (StatusCode::OK, record, Some("superseded")),
        Created::ExactRepeat(record) => (StatusCode::OK, record, Some("exact_repeat")),
        Created::Deduplicated { record, .. } => (StatusCode::OK, record, Some("deduplicated")),
    };
    let mut answer = json!({"id": record.id, "revision": record.revision, "record": record.to_json()});
    if let (Some(flag), Value::Object(map)) = (flag, &mut answer) {
        map.insert(flag.into(), Value::Bool(true));
        if let Created::Deduplicated { similarity, .. } = &created {
            map.insert("similarity".into(), serde_json::json!(similarity));
        }
    }
    Ok((status, Json(answer)).into_response())
}

pub async fn get(
    State(state): State<AppState>,
    ctx: AdminContext,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(state.memories().get(&ctx.tenant, &id).await?.to_json()))
}

pub async fn update(
    State(state): State<AppState>,
    ctx: AdminContext,
    Path(id): Path<String>,
    headers: HeaderMap,
    AdminJson(patch): AdminJson,
) -> Result<Json<Value>, ApiError> {
    let author = format!("admin:{}", ctx.actor);
    let record = state
        .memories()
        .update_as(&ctx.tenant, &id, &patch, if_match(&headers)?, &ctx.writer(&author))
        .await?;
    Ok(Json(record.to_json()))
}

/// The revision an `If-Match` header names, if any.
pub fn if_match(headers: &HeaderMap) -> Result<Option<i64>, ApiError> {
    let Some(value) = headers.get("if-match") else { return Ok(None) };
    value
        .to_str()
        .ok()
        .map(|v| v.trim().trim_start_matches("W/").trim_matches('"'))
        .and_then(|v| v.parse::<i64>().ok())
        .map(Some)
        .ok_or_else(|| {
            ApiError::coded(Code::InvalidHeader, "If-Match must be a record revision, e.g. `If-Match: 3`")
        })
}

pub async fn delete(
    State(state): State<AppState>,
    ctx: AdminContext,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let record = state.memories().delete(&ctx.tenant, &id, &ctx.actor).await?;
    Ok(Json(json!({"id": record.id, "deleted": true})))
}

pub async fn pause(
    state: State<AppState>,
    ctx: AdminContext,
    id: Path<String>,
) -> Result<Json<Value>, ApiError> {
    set_status(state, ctx, id, Status::Paused).await
}

pub async fn archive(
    state: State<AppState>,
    ctx: AdminContext,
    id: Path<String>,
) -> Result<Json<Value>, ApiError> {
    set_status(state, ctx, id, Status::Archived).await
}

async fn set_status(
    State(state): State<AppState>,
    ctx: AdminContext,
    Path(id): Path<String>,
    status: Status,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(state.memories().set_status(&ctx.tenant, &id, status, &ctx.actor).await?.to_json()))
}

pub async fn history(
    State(state): State<AppState>,
    ctx: AdminContext,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let changes = state.memories().history(&ctx.tenant, &id).await?;
    let data: Vec<Value> = changes
        .into_iter()
        .map(|c| {
            json!({
                "revision": c.revision,
                "action": c.action,
                "actor": c.actor,
                "at": format_ms(c.at_ms),
                "before": c.before,
                "after": c.after,
            })
        })
        .collect();
    Ok(Json(json!({"id": id, "data": data})))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    scope: Option<String>,
    #[serde(rename = "type")]
    record_type: Option<String>,
    status: Option<String>,
    q: Option<String>,
    key: Option<String>,
    author: Option<String>,
    valid: Option<String>,
    limit: Option<u32>,
    cursor: Option<String>,
    /// Export only: each line with its stored embedding.
    embeddings: Option<bool>,
}

impl ListQuery {
    /// Whether an export should carry each record's embedding (`?embeddings=true`).
    pub fn embeddings(&self) -> bool {
        self.embeddings.unwrap_or(false)
    }

    pub fn filter(&self) -> Result<ListFilter, ApiError> {
        let status = match self.status.as_deref() {
            None | Some("") => None,
            Some(s) => Some(Status::parse(s).ok_or_else(|| {
                ApiError::invalid_request("status must be active, paused, archived, proposed or dormant")
            })?),
        };
        if self.q.as_ref().is_some_and(|q| q.chars().count() > 256) {
            return Err(ApiError::invalid_request("q is limited to 256 characters"));
        }
        let valid = match self.valid.as_deref() {
            None | Some("") => None,
            Some(text) => Some((
                Validity::parse(text)
                    .ok_or_else(|| ApiError::invalid_request("valid must be now, expired or future"))?,
                crate::clock::now_ms(),
            )),
        };
        if self.key.as_ref().is_some_and(|k| k.chars().count() > 256) {
            return Err(ApiError::invalid_request("key is limited to 256 characters"));
        }
        if self.author.as_ref().is_some_and(|a| a.chars().count() > 256) {
            return Err(ApiError::invalid_request("author is limited to 256 characters"));
        }
        let non_empty = |v: &Option<String>| v.clone().filter(|s| !s.is_empty());
        Ok(ListFilter {
            scope: non_empty(&self.scope),
            record_type: non_empty(&self.record_type),
            status,
            q: non_empty(&self.q),
            key: non_empty(&self.key),
            author: non_empty(&self.author),
            valid,
        })
    }
}

/// Parses the query string ourselves so a bad one is answered in the API's error shape.
pub fn parse_query<T: serde::de::DeserializeOwned>(request: &Request) -> Result<T, ApiError> {
    Query::<T>::try_from_uri(request.uri())
        .map(|Query(q)| q)
        .map_err(|err| ApiError::invalid_request(format!("bad query string: {}", err.body_text())))
}

pub async fn list(
    State(state): State<AppState>,
    ctx: AdminContext,
    request: Request,
) -> Result<Json<Value>, ApiError> {
    let query: ListQuery = parse_query(&request)?;
    if query.embeddings.is_some() {
        return Err(ApiError::invalid_request("embeddings applies to GET /admin/v1/export only"));
    }
    let limit = query.limit.unwrap_or(50).clamp(1, 500);
    let filter = query.filter()?;
    let records = state.memories().list(&ctx.tenant, &filter, query.cursor.as_deref(), limit).await?;
    let next_cursor = (records.len() as u32 == limit).then(|| records.last().map(|r| r.id.clone())).flatten();
    let data: Vec<Value> = records.iter().map(|r| r.to_json()).collect();
    Ok(Json(json!({"data": data, "next_cursor": next_cursor})))
}

pub async fn forget(
    State(state): State<AppState>,
    ctx: AdminContext,
    AdminJson(input): AdminJson,
) -> Result<Json<Value>, ApiError> {
    let scope = input
        .get("scope")
        .and_then(Value::as_str)
        .ok_or_else(|| ApiError::invalid_request("forget takes {\"scope\": \"user:u-789\"}"))?;
    // The exchanges queued for observation into the scope go first, and what the gates decided
    // about them: an extraction in flight for the scope then writes nothing (its claim is gone),
    // and what it wrote before is among the records erased next.
    let (exchanges, outcomes) = state.observer().forget_scope(&ctx.tenant, scope).await?;
    let (ids, changes) = state.memories().forget(&ctx.tenant, scope).await?;
    // The outbox's actions about those records, and about that user, go with them.
    let subject = scope.strip_prefix("user:");
    let actions = state.triggers().forget(&ctx.tenant, &ids, subject).await?;
    Ok(Json(json!({"scope": scope, "records_erased": ids.len(), "changes_erased": changes,
        "actions_erased": actions, "exchanges_erased": exchanges, "outcomes_erased": outcomes})))
}
