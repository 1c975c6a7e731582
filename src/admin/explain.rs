//! `POST /admin/v1/explain`: for a Messages body and a caller, the funnel trace and the rendered
//! block — exactly what a real request would get — without calling the upstream.
//!
//! Body: `{"request": <Messages body>, "caller": {"scopes": [...], "subject": "u-789"},
//! "release": "v1", "values": {"satisfaction": 1}}`; the tenant is the admin request's
//! (`X-Memory-Tenant`). The answer also lists the trigger actions that would fire, unsent.

use super::{AdminContext, AdminJson};
use crate::error::{ApiError, Code};
use crate::funnel::trace::Detail;
use crate::identity::{Caller, is_valid_subject};
use crate::recall::Wish;
use crate::record::is_valid_scope;
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use bytes::Bytes;
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::BTreeSet;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExplainBody {
    request: Value,
    #[serde(default)]
    caller: ExplainCaller,
    release: Option<String>,
    /// What a client would send as `X-Memory-Values`, for trigger comparisons.
    #[serde(default)]
    values: std::collections::BTreeMap<String, Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExplainCaller {
    #[serde(default)]
    scopes: Vec<String>,
    subject: Option<String>,
}

pub async fn explain(
    State(state): State<AppState>,
    ctx: AdminContext,
    AdminJson(input): AdminJson,
) -> Result<Json<Value>, ApiError> {
    let input: ExplainBody = serde_json::from_value(input).map_err(|err| {
        ApiError::invalid_request(format!(
            "explain takes {{\"request\": <a Messages body>, \"caller\": {{\"scopes\": [...], \"subject\": ...}}, \"release\": ...}}: {err}"
        ))
    })?;
    let mut scopes = BTreeSet::from(["public".to_owned()]);
    for scope in input.caller.scopes {
        if !is_valid_scope(&scope) {
            return Err(ApiError::invalid_request(format!(
                "caller.scopes: `{scope}` is not `public` or `kind:value`"
            )));
        }
        scopes.insert(scope);
    }
    if let Some(subject) = &input.caller.subject {
        if !is_valid_subject(subject) {
            return Err(ApiError::invalid_request(
                "caller.subject must be 1 to 128 printable characters without spaces",
            ));
        }
        scopes.insert(format!("user:{subject}"));
    }
    let mut caller = Caller::new(&ctx.tenant, scopes);
    caller.subject = input.caller.subject;
    let release = match &input.release {
        Some(name) => state
            .rollout()
            .release(name)
            .ok_or_else(|| ApiError::coded(Code::UnknownRelease, format!("unknown release `{name}`")))?,
        None => state.rollout().active(),
    };
    let body = serde_json::to_vec(&input.request).map_err(ApiError::internal)?;
    crate::body::check_messages_request(&body)?;
    let recalled = state
        .recaller()
        .recall(
            &caller,
            &release,
            Bytes::from(body),
            &Wish {
                off: false,
                trace: Detail::Full,
                budget: Some(std::time::Duration::from_secs(10)),
                shadow: true,
                triggers: true,
                values: input.values,
            },
        )
        .await?;
    let request: Value = serde_json::from_slice(&recalled.body).map_err(ApiError::internal)?;
    // What would fire, without deciding or sending anything.
    let triggers = state.recaller().triggers().would_fire(&recalled.fired);
    Ok(Json(json!({
        "release": release.name,
        "query": recalled.query,
        "status": recalled.status.as_str(),
        "degraded_reason": recalled.degraded_reason,
        "injected": recalled.injected_ids,
        "stubs": recalled.stub_ids,
        "tokens": recalled.tokens,
        "placed_in": recalled.placed_in,
        "block": recalled.block,
        "trace": recalled.trace,
        "triggers": triggers,
        "visible_tokens": recalled.visible_tokens,
        "request": request,
    })))
}
