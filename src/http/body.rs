//! Reading a request body: a size limit (413 `request_too_large`, by the declared
//! `content-length` at once, otherwise as soon as the limit is passed) and deadlines against
//! clients that stall (408 `timeout_error`: the whole body within `limits.body_read_timeout_ms`,
//! and no silence between two chunks longer than `limits.body_idle_timeout_ms`). A Messages body's
//! bytes are held against the body budget (`crate::body::budget`) as they arrive.
//!
//! A body refused for want of budget (529) is read to its end and thrown away before the answer
//! goes out, within the body's own limit and deadlines: a client still sending would otherwise
//! meet a closed connection (a broken pipe) instead of the 529 its SDK retries.

use crate::body::budget::{BodyBudget, BudgetPermit, Holder};
use crate::config::Limits;
use crate::error::{ApiError, ErrorKind};
use crate::http::client::RequestOrigin;
use crate::http::headers;
use crate::identity::Caller;
use crate::state::AppState;
use axum::body::Body;
use axum::http::HeaderMap;
use axum::http::request::Parts;
use bytes::{Bytes, BytesMut};
use futures_util::{Stream, StreamExt};
use std::net::IpAddr;
use std::time::Duration;
use tokio::time::Instant;

/// How long a body may take: in all, and between two of its chunks.
#[derive(Debug, Clone, Copy)]
struct Deadlines {
    whole: Duration,
    idle: Duration,
}

/// Reads the whole body, refusing one over `limit` bytes (by its `content-length` when declared,
/// otherwise as soon as the limit is passed) or one that does not arrive within `deadline`.
pub async fn read_limited(
    headers: &HeaderMap,
    body: Body,
    limit: u64,
    deadline: Duration,
) -> Result<Bytes, ApiError> {
    read(headers, body, limit, Deadlines { whole: deadline, idle: deadline }, None).await
}

/// A Messages body, read within `limits` (`max_body_bytes`, `body_read_timeout_ms`,
/// `body_idle_timeout_ms`), its bytes held against `budget` as `holder`'s as they arrive. The
/// permit covers the body (and as much again for the copy with memory injected) until dropped.
pub async fn read_budgeted(
    headers: &HeaderMap,
    body: Body,
    limits: &Limits,
    budget: &BodyBudget,
    holder: Holder,
) -> Result<(Bytes, BudgetPermit), ApiError> {
    let deadlines = Deadlines { whole: limits.body_read_timeout, idle: limits.body_idle_timeout };
    let mut permit = budget.permit(holder);
    let bytes = read(headers, body, limits.max_body_bytes, deadlines, Some((budget, &mut permit))).await?;
    Ok((bytes, permit))
}

async fn read(
    headers: &HeaderMap,
    body: Body,
    limit: u64,
    deadlines: Deadlines,
    mut budget: Option<(&BodyBudget, &mut BudgetPermit)>,
) -> Result<Bytes, ApiError> {
    let too_large = || {
        ApiError::new(
            ErrorKind::RequestTooLarge,
            format!("the request body is larger than {limit} bytes (limits.max_body_bytes)"),
        )
    };
    let declared =
        headers.get("content-length").and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > limit) {
        return Err(too_large());
    }
    let ends = Instant::now() + deadlines.whole;
    let mut stream = body.into_data_stream();
    let mut buffer = BytesMut::new();
    while let Some(chunk) = next_chunk(&mut stream, ends, deadlines).await? {
        let len = (buffer.len() + chunk.len()) as u64;
        if len > limit {
            return Err(too_large());
        }
        if let Some((budget, permit)) = budget.as_mut() {
            let until = ends.min(Instant::now() + budget.wait());
            if let Err(refused) = budget.grow(permit, len, until).await {
                // Free the share before the client's remaining bytes are read and dropped.
                drop(std::mem::replace(*permit, BudgetPermit::none()));
                drop(buffer);
                let left = declared.unwrap_or(limit).saturating_sub(len);
                discard(&mut stream, left, ends, deadlines).await;
                return Err(refused);
            }
        }
        if buffer.is_empty() {
            // Sized once the body has started to arrive, never for a body that only declares it.
            buffer.reserve(usize::try_from(declared.unwrap_or(0).min(limit)).unwrap_or(0));
        }
        buffer.extend_from_slice(&chunk);
    }
    if let Some((budget, permit)) = budget {
        // An empty body still takes its request's slot.
        let until = ends.min(Instant::now() + budget.wait());
        budget.grow(permit, buffer.len() as u64, until).await?;
    }
    Ok(buffer.freeze())
}

/// The next chunk of the body, `None` at its end; a 408 when it does not come in time.
async fn next_chunk(
    stream: &mut (impl Stream<Item = Result<Bytes, axum::Error>> + Unpin),
    ends: Instant,
    deadlines: Deadlines,
) -> Result<Option<Bytes>, ApiError> {
    let until = ends.min(Instant::now() + deadlines.idle);
    match tokio::time::timeout_at(until, stream.next()).await {
        Ok(None) => Ok(None),
        Ok(Some(Ok(chunk))) => Ok(Some(chunk)),
        Ok(Some(Err(_))) => Err(ApiError::invalid_request(
            "the request body could not be read to its end (truncated or malformed)",
        )),
        Err(_) if until >= ends => Err(ApiError::new(
            ErrorKind::RequestTimeout,
            format!(
                "the request body did not arrive within {} (limits.body_read_timeout_ms)",
                seconds(deadlines.whole)
            ),
        )),
        Err(_) => Err(ApiError::new(
            ErrorKind::RequestTimeout,
            format!(
                "the request body stalled: nothing of it arrived for {} (limits.body_idle_timeout_ms)",
                seconds(deadlines.idle)
            ),
        )),
    }
}

/// Reads and drops up to `left` more bytes of a refused body, within its deadlines.
async fn discard(
    stream: &mut (impl Stream<Item = Result<Bytes, axum::Error>> + Unpin),
    mut left: u64,
    ends: Instant,
    deadlines: Deadlines,
) {
    while left > 0 {
        match next_chunk(stream, ends, deadlines).await {
            Ok(Some(chunk)) => left = left.saturating_sub(chunk.len() as u64),
            Ok(None) | Err(_) => return,
        }
    }
}

fn seconds(duration: Duration) -> String {
    match duration.as_millis() {
        ms if ms % 1000 == 0 => format!("{} s", ms / 1000),
        ms => format!("{ms} ms"),
    }
}

/// A request's caller and its whole body: the credentials checked first (an unknown caller
/// sends nothing further), then the body read within the limits and held against the budget as
/// the caller's. Shared by every endpoint that reads a caller's body whole (the proxy, `/mcp`).
pub async fn read_as_caller(
    state: &AppState,
    parts: &Parts,
    body: Body,
) -> Result<(Caller, Option<IpAddr>, Bytes, BudgetPermit), ApiError> {
    let client = state.client_addr(parts);
    let mut caller = state
        .identity()
        .authenticate(headers::credentials(&parts.headers), &state.client_limit_key(parts))
        .await?;
    caller.request_id = parts.extensions.get::<super::observe::RequestId>().map(|id| id.0.clone());
    let holder = Holder::new(client, &caller.rate_key);
    let (bytes, permit) =
        read_budgeted(&parts.headers, body, state.limits(), state.body_budget(), holder).await?;
    Ok((caller, client, bytes, permit))
}
