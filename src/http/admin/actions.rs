//! `/admin/v1/actions`: the trigger actions of the tenant's outbox (docs/triggers.md): list them
//! newest first, filtered by state, time, endpoint or record; read one; replay a dead or delivered
//! one. An action is listed without its body or lease owner (`OutboxAction::to_json`).

use super::AdminContext;
use crate::error::{ApiError, Code};
use crate::state::AppState;
use crate::store::StoreError;
use crate::store::outbox::{OutboxFilter, OutboxState, Replay};
use axum::Json;
use axum::extract::{Path, RawQuery, State};
use serde_json::{Value, json};

const DEFAULT_LIMIT: u32 = 50;
const MAX_LIMIT: u32 = 500;

/// `GET /admin/v1/actions?state=&since=&endpoint=&record_id=&limit=&cursor=`.
pub async fn list(
    State(state): State<AppState>,
    ctx: AdminContext,
    RawQuery(query): RawQuery,
) -> Result<Json<Value>, ApiError> {
    let params = ListParams::parse(query.as_deref(), crate::clock::now_ms())?;
    let before = params.cursor.as_ref().map(|(ms, id)| (*ms, id.as_str()));
    let actions = state.triggers().list(&ctx.tenant, params.filter, before, params.limit).await?;
    let next_cursor = (actions.len() as u32 == params.limit)
        .then(|| actions.last().map(|a| format!("{}.{}", a.created_at_ms, a.id)))
        .flatten();
    let data: Vec<Value> = actions.iter().map(|a| a.to_json()).collect();
    Ok(Json(json!({"data": data, "next_cursor": next_cursor})))
}

/// `GET /admin/v1/actions/{id}`.
pub async fn get(
    State(state): State<AppState>,
    ctx: AdminContext,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let action = state.triggers().get(&ctx.tenant, &id).await.map_err(|err| not_found(err, &id))?;
    Ok(Json(action.to_json()))
}

/// `POST /admin/v1/actions/{id}/replay`: a dead or delivered action goes out again with the same
/// id and body (receivers drop repeats by `webhook-id`); one still waiting is left as it is (409).
pub async fn replay(
    State(state): State<AppState>,
    ctx: AdminContext,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    match state.triggers().replay(&ctx.tenant, &id).await.map_err(|err| not_found(err, &id))? {
        Replay::Replayed(action) => Ok(Json(action.to_json())),
        Replay::AlreadyQueued(action) => Err(ApiError::coded(
            Code::ActionQueued,
            format!(
                "action `{}` is still {}: it will be delivered without a replay",
                action.id,
                action.state.as_str()
            ),
        )),
    }
}

/// A missing action named in the answer; another tenant's is as missing as one that never was.
fn not_found(err: StoreError, id: &str) -> ApiError {
    match err {
        StoreError::NotFound => {
            let shown: String = id.chars().take(80).collect();
            ApiError::not_found(format!("no action `{shown}` in this tenant"))
        }
        other => ApiError::from(other),
    }
}

struct ListParams {
    filter: OutboxFilter,
    cursor: Option<(i64, String)>,
    limit: u32,
}

impl ListParams {
    fn parse(query: Option<&str>, now_ms: i64) -> Result<ListParams, ApiError> {
        let mut params = ListParams { filter: OutboxFilter::default(), cursor: None, limit: DEFAULT_LIMIT };
        for (name, value) in url::form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
            let value = value.into_owned();
            match name.as_ref() {
                "state" => {
                    let parsed = OutboxState::parse(&value).ok_or_else(|| {
                        let known: Vec<&str> = OutboxState::ALL.iter().map(|s| s.as_str()).collect();
                        ApiError::invalid_request(format!("`state` is one of {}", known.join(", ")))
                    })?;
                    params.filter.state = Some(parsed);
                }
                "since" => params.filter.since_ms = Some(parse_since(&value, now_ms)?),
                "endpoint" => params.filter.endpoint = Some(bounded("endpoint", value)?),
                "record_id" => params.filter.record_id = Some(bounded("record_id", value)?),
                "limit" => {
                    params.limit =
                        value.parse::<u32>().ok().filter(|n| (1..=MAX_LIMIT).contains(n)).ok_or_else(
                            || ApiError::invalid_request(format!("`limit` must be 1 to {MAX_LIMIT}")),
                        )?;
                }
                "cursor" => {
                    let cursor = value
                        .split_once('.')
                        .and_then(|(ms, id)| Some((ms.parse::<i64>().ok()?, id.to_owned())))
                        .filter(|(_, id)| !id.is_empty() && id.len() <= 128)
                        .ok_or_else(|| ApiError::invalid_request("`cursor` is a list's `next_cursor`"))?;
                    params.cursor = Some(cursor);
                }
                other => {
                    let shown: String = other.chars().take(40).collect();
                    return Err(ApiError::invalid_request(format!(
                        "unknown parameter `{shown}`; use state, since, endpoint, record_id, limit or cursor"
                    )));
                }
            }
        }
        Ok(params)
    }
}

fn bounded(name: &str, value: String) -> Result<String, ApiError> {
    if value.is_empty() || value.len() > 128 {
        return Err(ApiError::invalid_request(format!("`{name}` must be 1 to 128 characters")));
    }
    Ok(value)
}

/// `since`: a time (RFC 3339) or an age (`90s`, `30m`, `1h`, `7d`) counted back from now.
pub fn parse_since(text: &str, now_ms: i64) -> Result<i64, ApiError> {
    if let Some(ms) = crate::clock::parse_rfc3339_ms(text) {
        return Ok(ms);
    }
    let unit_ms = match text.chars().last() {
        Some('s') => 1_000,
        Some('m') => 60_000,
        Some('h') => 3_600_000,
        Some('d') => 86_400_000,
        _ => 0,
    };
    let amount = text.get(..text.len().saturating_sub(1)).and_then(|n| n.parse::<i64>().ok());
    match amount {
        Some(n) if unit_ms > 0 && (0..=3650 * 86_400).contains(&n) => Ok(now_ms - n * unit_ms),
        _ => Err(ApiError::invalid_request(
            "`since` is a time (2026-12-01T09:00:00Z) or an age such as 30m, 1h or 7d",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_takes_a_time_or_an_age() {
        let now = 10 * 86_400_000;
        assert_eq!(parse_since("1h", now).unwrap(), now - 3_600_000);
        assert_eq!(parse_since("7d", now).unwrap(), now - 7 * 86_400_000);
        assert_eq!(parse_since("1970-01-01T00:00:01Z", now).unwrap(), 1_000);
        for bad in ["", "h", "1y", "-1h", "99999999999d", "yesterday"] {
            assert!(parse_since(bad, now).is_err(), "{bad}");
        }
    }

    #[test]
    fn list_parameters_are_checked_and_named() {
        let params = ListParams::parse(Some("state=dead&limit=2&cursor=5.evt_a&record_id=sop-1"), 0).unwrap();
        assert_eq!(params.filter.state, Some(OutboxState::Dead));
        assert_eq!((params.limit, params.cursor), (2, Some((5, "evt_a".to_owned()))));
        assert_eq!(params.filter.record_id.as_deref(), Some("sop-1"));
        for bad in ["state=gone", "limit=0", "limit=501", "cursor=x", "tenant=other", "endpoint="] {
            assert!(ListParams::parse(Some(bad), 0).is_err(), "{bad}");
        }
    }
}
