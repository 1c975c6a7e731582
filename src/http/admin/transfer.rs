//! `/admin/v1/export`, `/admin/v1/import`, `/admin/v1/imports/{id}` (progress) and
//! `/admin/v1/imports/{id}/undo`.

use super::AdminContext;
use super::memories::{ListQuery, parse_query};
use crate::error::{ApiError, Code};
use crate::state::AppState;
use axum::Json;
use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use futures_util::{StreamExt, TryStreamExt};
use serde::Deserialize;
use serde_json::{Value, json};

/// Streams the export a page at a time. The first page is read before the answer starts, so a
/// store that fails at once answers with an error status; one that fails later cuts the body
/// short (a reader sees an incomplete last line or a reset, never a silent short export).
pub async fn export(
    State(state): State<AppState>,
    ctx: AdminContext,
    request: Request,
) -> Result<Response, ApiError> {
    let query: ListQuery = parse_query(&request)?;
    let mut pages =
        Box::pin(state.memories().export_pages_with(&ctx.tenant, &query.filter()?, query.embeddings()));
    let first = pages.try_next().await?;
    let rest = pages
        .inspect_err(|err| tracing::warn!(error = %err, "an export failed part way; its body was cut short"));
    let body = futures_util::stream::iter(first.map(Ok)).chain(rest);
    Ok(([(CONTENT_TYPE, "application/x-ndjson")], Body::from_stream(body)).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ImportQuery {
    dry_run: Option<bool>,
}

pub async fn import(
    State(state): State<AppState>,
    ctx: AdminContext,
    request: Request,
) -> Result<Response, ApiError> {
    let query: ImportQuery = parse_query(&request)?;
    let (parts, body) = request.into_parts();
    let limits = state.limits();
    let bytes = crate::http::body::read_limited(
        &parts.headers,
        body,
        state.max_import_bytes(),
        limits.body_read_timeout,
    )
    .await?;
    let text = std::str::from_utf8(&bytes)
        .map_err(|err| ApiError::invalid_request(format!("the import body is not UTF-8 text: {err}")))?;
    let dry_run = query.dry_run.unwrap_or(false);
    let report = state.memories().import(&ctx.tenant, text, dry_run, &ctx.actor).await?;
    let status = match (dry_run, report.applied) {
        (true, _) => StatusCode::OK,
        (false, true) => StatusCode::CREATED,
        (false, false) => {
            let invalid = report.counts.invalid;
            return Err(ApiError::coded(
                Code::ImportInvalid,
                format!("{invalid} line(s) are invalid; nothing was imported. Fix them (see `report`) and import again"),
            )
            .with_detail("report", json!(report)));
        }
    };
    Ok((status, Json(json!(report))).into_response())
}

/// `GET /admin/v1/imports/{id}`: how far the import's records are from being findable by meaning.
pub async fn progress(
    State(state): State<AppState>,
    ctx: AdminContext,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let progress = state.memories().import_progress(&ctx.tenant, &id).await?;
    Ok(Json(json!(progress)))
}

pub async fn undo(
    State(state): State<AppState>,
    ctx: AdminContext,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let removed = state.memories().undo_import(&ctx.tenant, &id, &ctx.actor).await?;
    Ok(Json(json!({"import_id": id, "removed": removed.len(), "ids": removed})))
}
