//! `/admin/v1/dormancy`: what `[records.dormancy]` makes dormant now, in this tenant. `GET` (and
//! `POST /dormancy/run?dry_run=true`) lists it and changes nothing; `POST /dormancy/run` applies
//! it. A dormant record comes back with `POST /memories/{id}/activate`.

use super::AdminContext;
use crate::clock::format_ms;
use crate::error::ApiError;
use crate::memory::dormancy::Report;
use crate::state::AppState;
use axum::Json;
use axum::extract::{Request, State};
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunQuery {
    dry_run: Option<bool>,
}

pub async fn report(State(state): State<AppState>, ctx: AdminContext) -> Result<Json<Value>, ApiError> {
    let report = state.memories().sweep_dormant(Some(&ctx.tenant), true).await?;
    Ok(Json(answer(&state, &report, true)))
}

pub async fn run(
    State(state): State<AppState>,
    ctx: AdminContext,
    request: Request,
) -> Result<Json<Value>, ApiError> {
    let query: RunQuery = super::memories::parse_query(&request)?;
    let dry_run = query.dry_run.unwrap_or(false);
    let report = state.memories().sweep_dormant(Some(&ctx.tenant), dry_run).await?;
    Ok(Json(answer(&state, &report, dry_run)))
}

fn answer(state: &AppState, report: &Report, dry_run: bool) -> Value {
    let rules: serde_json::Map<String, Value> = state
        .memories()
        .dormancy_rules()
        .iter()
        .map(|(record_type, period)| (record_type.clone(), json!(period.as_secs() / 86_400)))
        .collect();
    let data: Vec<Value> = report
        .records
        .iter()
        .map(|idle| {
            let r = &idle.record;
            json!({"id": r.id, "type": r.record_type, "scope": r.scope, "priority": r.priority,
                "status": r.status.as_str(), "author": r.author,
                "last_accessed_at": r.last_accessed_at_ms.map(format_ms),
                "idle_since": format_ms(idle.idle_since_ms), "after_days": idle.after_days})
        })
        .collect();
    json!({"enabled": !rules.is_empty(), "rules_days": rules, "dry_run": dry_run,
        "count": data.len(), "applied": report.applied, "truncated": report.truncated, "data": data})
}
