//! The admin API (`/admin/v1/…`): the bearer token or a console session
//! (`http::console::authorize`; without a configured admin token the whole API is off), the tenant
//! from `X-Memory-Tenant`, and the handlers per resource. Every handler works inside one tenant:
//! nothing here can read or change another's records.

pub mod actions;
pub mod dormancy;
pub mod explain;
pub mod insights;
pub mod keys;
pub mod memories;
pub mod observer;
pub mod releases;
pub mod review;
pub mod transfer;

use crate::clock::now_ms;
use crate::error::{ApiError, Code};
use crate::http::client::RequestOrigin;
use crate::http::console::auth::too_many_failures;
use crate::identity::DEFAULT_TENANT;
use crate::record::WriterKind;
use crate::state::AppState;
use axum::extract::{FromRequest, FromRequestParts, OriginalUri, Request, State};
use axum::http::HeaderMap;
use axum::http::request::Parts;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::Value;

/// The largest JSON body a single-record admin call accepts.
const MAX_ADMIN_BODY_BYTES: u64 = 1024 * 1024;

/// Refuses any admin request without the admin token or a console session
/// (`http::console::authorize`: the bearer token, else the session cookie with the CSRF rule, then
/// the viewer's read-only limits). Failed attempts count per client address (`admin.rate_limit_per_minute`): a wrong
/// bearer token, or a cookie that opens no live session; a request with no credential at all is
/// refused without counting (any site can make a browser send those). Past the limit the address
/// is refused for a while before any token is compared, so guessing is slow; a live session goes
/// on through such a block (its cookie is nothing one could guess), and an admin who keeps sending
/// the right token is never counted at all.
pub async fn require_admin(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let (mut parts, body) = request.into_parts();
    let client = state.client_limit_key(&parts);
    let presents_token = parts.headers.contains_key(axum::http::header::AUTHORIZATION);
    if presents_token && let Err(wait) = state.admin_strikes().check(&client) {
        return too_many_failures(wait).into_response();
    }
    let https = state.is_https(&parts);
    let auth = state.console_auth();
    // Nested under `/admin/v1`, this layer sees the path without its prefix; the viewer's rules
    // name the full path.
    let uri =
        parts.extensions.get::<OriginalUri>().map_or_else(|| parts.uri.clone(), |OriginalUri(u)| u.clone());
    match crate::http::console::authorize(
        &parts.headers,
        &parts.method,
        &uri,
        https,
        state.store(),
        auth,
        now_ms(),
    )
    .await
    {
        Ok(principal) => {
            parts.extensions.insert(principal);
            next.run(Request::from_parts(parts, body)).await
        }
        Err(refusal) => {
            if refusal.is_strike()
                && let Err(wait) = state.admin_strikes().fail(&client)
            {
                return too_many_failures(wait).into_response();
            }
            refusal.into_response()
        }
    }
}

/// The tenant and actor of an admin request.
pub struct AdminContext {
    pub tenant: String,
    pub actor: String,
    /// memgate's id of the request, kept in the provenance of what it writes.
    pub request_id: Option<String>,
}

impl AdminContext {
    /// The operator as a writer, with `author` on what it writes.
    pub fn writer<'a>(&'a self, author: &'a str) -> crate::memory::Writer<'a> {
        let mut writer = crate::memory::Writer::operator(&self.actor, Some(author), WriterKind::Operator);
        writer.provenance.request_id = self.request_id.clone();
        writer
    }
}

impl<S: Send + Sync> FromRequestParts<S> for AdminContext {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let tenant =
            header_token(&parts.headers, "x-memory-tenant")?.unwrap_or_else(|| DEFAULT_TENANT.to_owned());
        // A console session names who is logged in; the history says so, whatever the header says.
        let session_actor = parts
            .extensions
            .get::<crate::http::console::Principal>()
            .and_then(|principal| principal.actor.clone());
        let actor = match session_actor {
            Some(actor) => actor,
            None => header_token(&parts.headers, "x-memory-actor")?.unwrap_or_else(|| "admin".to_owned()),
        };
        let request_id = parts.extensions.get::<crate::http::observe::RequestId>().map(|id| id.0.clone());
        Ok(AdminContext { tenant, actor, request_id })
    }
}

/// A header value that names something: 1 to 64 characters of A-Z a-z 0-9 . _ : -
fn header_token(headers: &HeaderMap, name: &str) -> Result<Option<String>, ApiError> {
    let Some(value) = headers.get(name) else { return Ok(None) };
    let text = value.to_str().unwrap_or("");
    let ok = !text.is_empty()
        && text.len() <= 64
        && text.bytes().all(|b| b.is_ascii_alphanumeric() || b"._:-".contains(&b));
    if ok {
        Ok(Some(text.to_owned()))
    } else {
        Err(ApiError::coded(
            Code::InvalidHeader,
            format!("{name} must be 1 to 64 characters of A-Z, a-z, 0-9, '.', '_', ':' or '-'"),
        ))
    }
}

/// Reads a JSON body of at most `MAX_ADMIN_BODY_BYTES`, with errors in the API's shape.
pub async fn json_body(
    state: &AppState,
    headers: &HeaderMap,
    body: axum::body::Body,
) -> Result<Value, ApiError> {
    let bytes = crate::http::body::read_limited(
        headers,
        body,
        MAX_ADMIN_BODY_BYTES,
        state.limits().body_read_timeout,
    )
    .await?;
    serde_json::from_slice(&bytes)
        .map_err(|err| ApiError::coded(Code::InvalidJson, format!("the body is not valid JSON: {err}")))
}

/// A JSON body that may be absent: `None` for an empty body, else as `json_body` reads it.
pub async fn optional_json_body(
    state: &AppState,
    headers: &HeaderMap,
    body: axum::body::Body,
) -> Result<Option<Value>, ApiError> {
    let bytes = crate::http::body::read_limited(
        headers,
        body,
        MAX_ADMIN_BODY_BYTES,
        state.limits().body_read_timeout,
    )
    .await?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|err| ApiError::coded(Code::InvalidJson, format!("the body is not valid JSON: {err}")))
}

/// A handler's JSON body, read by `json_body`'s rules (size, deadline, errors in the API's shape).
pub struct AdminJson(pub Value);

impl FromRequest<AppState> for AdminJson {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let (parts, body) = request.into_parts();
        json_body(state, &parts.headers, body).await.map(AdminJson)
    }
}
