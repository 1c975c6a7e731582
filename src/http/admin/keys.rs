//! `/admin/v1/keys`: issue (the secret is shown once), list (never the secret) and revoke.

use super::{AdminContext, AdminJson};
use crate::clock::format_ms;
use crate::error::ApiError;
use crate::fanout::Topic;
use crate::identity::keys::NewKey;
use crate::state::AppState;
use crate::store::StoreError;
use crate::store::keys::KeyRecord;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateKey {
    name: String,
    #[serde(default)]
    scopes: Vec<String>,
    #[serde(default)]
    permissions: Vec<String>,
    rate_limit_per_minute: Option<u32>,
}

pub async fn create(
    State(state): State<AppState>,
    ctx: AdminContext,
    AdminJson(input): AdminJson,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let input: CreateKey = serde_json::from_value(input).map_err(|err| {
        ApiError::invalid_request(format!(
            "a key is {{\"name\", \"scopes\": [], \"permissions\": [], \"rate_limit_per_minute\"}}: {err}"
        ))
    })?;
    let new = NewKey {
        tenant: ctx.tenant,
        name: input.name,
        scopes: input.scopes,
        permissions: input.permissions,
        rate_limit_per_minute: input.rate_limit_per_minute,
    };
    let (record, secret) = state.identity().keys().issue(&new).await?;
    let mut answer = key_json(&record);
    answer["key"] = json!(secret);
    Ok((StatusCode::CREATED, Json(answer)))
}

pub async fn list(State(state): State<AppState>, ctx: AdminContext) -> Result<Json<Value>, ApiError> {
    let keys = state.store().list_keys(&ctx.tenant).await?;
    Ok(Json(json!({"data": keys.iter().map(key_json).collect::<Vec<_>>()})))
}

pub async fn revoke(
    State(state): State<AppState>,
    ctx: AdminContext,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    match state.identity().keys().revoke(&ctx.tenant, &id).await {
        Ok(()) => {
            // Other replicas drop their cached keys at once (without Redis: within the cache TTL).
            state.fanout().publish(Topic::Keys).await;
            Ok(Json(json!({"id": id, "revoked": true})))
        }
        Err(StoreError::NotFound) => Err(ApiError::not_found(format!("no key `{id}` in this tenant"))),
        Err(err) => Err(ApiError::from(err)),
    }
}

fn key_json(key: &KeyRecord) -> Value {
    json!({
        "id": key.id,
        "tenant": key.tenant,
        "name": key.name,
        "prefix": format!("mgk_{}_", key.id),
        "scopes": key.scopes,
        "permissions": key.permissions,
        "rate_limit_per_minute": key.rate_limit_per_minute,
        "created_at": format_ms(key.created_at_ms),
        "revoked_at": key.revoked_at_ms.map(format_ms),
    })
}
