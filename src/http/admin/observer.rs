//! `GET /admin/v1/observer`: observation in the request's tenant (docs/observation.md) — the
//! queue by state, the gates' counts, the extraction calls and tokens of the last 30 days against
//! the daily budget, and the newest outcomes (`?subject=` narrows them to one end user,
//! `?limit=`, default 50). Outcomes name the gate and the reason, never a record's words.

use super::AdminContext;
use crate::error::ApiError;
use crate::state::AppState;
use axum::Json;
use axum::extract::{Request, State};
use serde::Deserialize;
use serde_json::Value;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Query {
    subject: Option<String>,
    limit: Option<u32>,
}

pub async fn status(
    State(state): State<AppState>,
    ctx: AdminContext,
    request: Request,
) -> Result<Json<Value>, ApiError> {
    let query: Query = super::memories::parse_query(&request)?;
    let limit = query.limit.unwrap_or(50).clamp(1, 500);
    let answer = state.observer().status(&ctx.tenant, query.subject.as_deref(), limit).await?;
    Ok(Json(answer))
}
