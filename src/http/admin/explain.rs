//! `POST /admin/v1/explain`: for a Messages body and a caller, the funnel trace and the rendered
//! block — exactly what a real request would get — without calling the upstream.
//!
//! Body: `{"request": <Messages body>, "caller": {"scopes": [...], "subject": "u-789"},
//! "release": "v1", "values": {"satisfaction": 1}}`; the tenant is the admin request's
//! (`X-Memory-Tenant`). `caller.key_id` adds that live gateway key's scopes (console/API.md §4.1).
//! The answer also lists the trigger actions that would fire, unsent, and for the console the
//! caller as resolved, each layer's survivors (`kept`) and a summary of every record it names.

use super::{AdminContext, AdminJson};
use crate::error::{ApiError, Code};
use crate::identity::{Caller, Permissions, is_valid_subject};
use crate::record::is_valid_scope;
use crate::state::AppState;
use crate::tools::Level;
use crate::turn::{Ask, Endpoint, Purpose, TurnRequest};
use axum::Json;
use axum::extract::State;
use bytes::Bytes;
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::BTreeSet;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExplainBody {
    request: Option<Value>,
    /// Explain a recent request by its id: only if its body were kept, which it is not (see
    /// docs/console.md, recent requests), so always `request_not_kept`.
    request_id: Option<String>,
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
    key_id: Option<String>,
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
    if let Some(id) = &input.request_id {
        return Err(ApiError::coded(
            Code::NotFound,
            format!("request `{id}` is not kept on this replica any more; paste its body instead"),
        ));
    }
    let Some(request) = input.request else {
        return Err(ApiError::invalid_request("explain needs `request` (a Messages body)"));
    };
    let mut scopes = BTreeSet::from(["public".to_owned()]);
    // A key's permissions decide which of memgate's tools its caller would get.
    let mut permissions = Permissions::default();
    if let Some(key_id) = &input.caller.key_id {
        let key = state
            .store()
            .find_key(key_id)
            .await?
            .filter(|k| k.tenant == ctx.tenant && k.revoked_at_ms.is_none())
            .ok_or_else(|| {
                let shown: String = key_id.chars().take(80).collect();
                ApiError::invalid_request(format!("no live key `{shown}` in this tenant"))
            })?;
        permissions = Permissions::from_names(key.permissions.iter().map(String::as_str));
        scopes.extend(key.scopes);
    }
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
    let caller_json =
        json!({"subject": input.caller.subject, "scopes": scopes, "key_id": input.caller.key_id});
    let mut caller = Caller::new(&ctx.tenant, scopes);
    caller.subject = input.caller.subject;
    caller.permissions = permissions;
    let release = match &input.release {
        Some(name) => Some(
            state
                .rollout()
                .release(name)
                .ok_or_else(|| ApiError::coded(Code::UnknownRelease, format!("unknown release `{name}`")))?,
        ),
        None => None,
    };
    let body = serde_json::to_vec(&request).map_err(ApiError::internal)?;
    let facts = crate::body::check_messages_request(&body)?;
    // The same beginning as a client's turn, with this release and a full trace; never sent.
    let turn = state
        .turns()
        .begin(TurnRequest {
            caller,
            ask: Ask { values: input.values, ..Ask::default() },
            client: None,
            endpoint: Endpoint::Messages,
            body: Bytes::from(body),
            facts,
            key_probe: None,
            started: std::time::Instant::now(),
            purpose: Purpose::Explain { release },
        })
        .await?;
    let (release, recalled) = (turn.release(), turn.recalled());
    let request: Value = serde_json::from_slice(&recalled.body).map_err(ApiError::internal)?;
    // What would fire, without deciding or sending anything.
    let triggers = state.recaller().triggers().would_fire(&recalled.fired);
    let records = summaries(&state, &ctx.tenant, &recalled);
    // memgate's tools this caller would be offered under this release (before any header
    // narrows them), in the order they are appended.
    let tools = crate::tools::definitions::names(Level::for_request(turn.caller(), release, None));
    Ok(Json(json!({
        "release": release.name,
        "request_id": null,
        "caller": caller_json,
        "query": recalled.query,
        "status": recalled.status.as_str(),
        "degraded_reason": recalled.degraded_reason,
        "injected": recalled.injected_ids,
        "stubs": recalled.stub_ids,
        "tokens": recalled.tokens,
        "placed_in": recalled.placed_in,
        "block": recalled.block,
        "trace": recalled.trace,
        "records": records,
        "triggers": triggers,
        "tools": tools,
        "visible_tokens": recalled.visible_tokens,
        "request": request,
    })))
}

/// For every record the answer names (a layer's kept or removed, injected, stubs): what it is, so
/// the console need not fetch each one. Explain is an admin's view of the whole tenant.
fn summaries(state: &AppState, tenant: &str, recalled: &crate::recall::Recalled) -> Value {
    let mut ids: BTreeSet<&str> =
        recalled.injected_ids.iter().chain(&recalled.stub_ids).map(String::as_str).collect();
    if let Some(trace) = &recalled.trace {
        for layer in &trace.layers {
            ids.extend(layer.kept.iter().map(|k| k.id.as_str()));
            ids.extend(layer.removed.iter().map(|r| r.id.as_str()));
        }
    }
    let Some(index) = state.index().tenant(tenant) else { return json!({}) };
    let index = index.read().unwrap_or_else(|p| p.into_inner());
    let records: serde_json::Map<String, Value> = ids
        .into_iter()
        .filter_map(|id| index.get(id).map(|item| (id, item)))
        .map(|(id, item)| {
            let r = &item.head;
            (
                id.to_owned(),
                json!({"type": r.record_type(), "key": r.key(), "priority": r.priority, "scope": r.scopes().collect::<Vec<_>>(),
                    "tokens": item.tokens, "status": r.status.as_str(), "writer": r.writer().as_str(),
                    "author": r.author()}),
            )
        })
        .collect();
    Value::Object(records)
}
