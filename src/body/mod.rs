//! Reading and checking a Messages request body before anything is sent upstream: a size limit
//! (413 `request_too_large`), deadlines against clients that stall (408 `timeout_error`: the
//! whole body within `limits.body_read_timeout_ms`, and no silence between two chunks longer than
//! `limits.body_idle_timeout_ms`), valid JSON (no bad UTF-8, nesting at most 128 levels deep),
//! and the minimal shape memgate relies on. Every other field is the upstream's to judge and is
//! forwarded untouched.
//!
//! Memory: a body is held once, as the client's bytes. The checks borrow from those bytes and
//! never build a `serde_json::Value` of the whole request: a 32 MB body holding a long array of
//! small numbers once cost ~0.5–1 GB as a `Value` (32 bytes per element). What bodies may hold
//! in memory at all, across concurrent requests, is bounded by `budget::BodyBudget`, as their
//! bytes arrive.
//!
//! A body refused for want of budget (529) is read to its end and thrown away before the answer
//! goes out, within the body's own limit and deadlines: a client still sending would otherwise
//! meet a closed connection (a broken pipe) instead of the 529 its SDK retries.

pub mod budget;

use crate::config::Limits;
use crate::error::{ApiError, Code, ErrorKind};
use axum::body::Body;
use axum::http::HeaderMap;
use budget::{BodyBudget, BudgetPermit, Holder};
use bytes::{Bytes, BytesMut};
use futures_util::{Stream, StreamExt};
use serde::Deserialize;
use serde_json::value::RawValue;
use std::time::Duration;
use tokio::time::Instant;

/// The deepest nesting a request may have, as serde_json's own recursion limit.
const MAX_DEPTH: usize = 128;

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

/// What a checked Messages request says about itself (for the console's recent requests).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessagesFacts {
    /// The model asked for, cut to 100 characters.
    pub model: String,
    pub stream: bool,
}

/// Checks a Messages (or count_tokens) request: a JSON object with a string `model` and an array
/// `messages`. The error says what is wrong and where. Nothing of the body is copied: unknown
/// fields are skipped, `model` and `messages` are looked at where they lie in the client's bytes.
pub fn check_messages_request(bytes: &[u8]) -> Result<MessagesFacts, ApiError> {
    #[derive(Deserialize)]
    struct Shape<'a> {
        #[serde(borrow)]
        model: Option<&'a RawValue>,
        #[serde(borrow)]
        messages: Option<&'a RawValue>,
        #[serde(borrow)]
        stream: Option<&'a RawValue>,
    }
    if let Err(err) = std::str::from_utf8(bytes) {
        return Err(ApiError::coded(Code::InvalidJson, format!("the request body is not valid JSON: {err}")));
    }
    if nesting_depth(bytes) > MAX_DEPTH {
        return Err(ApiError::coded(
            Code::InvalidJson,
            format!(
                "the request body is not valid JSON: recursion limit exceeded (nesting deeper than {MAX_DEPTH} levels)"
            ),
        ));
    }
    let first = bytes.iter().copied().find(|b| !b.is_ascii_whitespace());
    if first != Some(b'{') {
        // Anything else that is valid JSON is the wrong shape; what is not valid JSON says so.
        return match serde_json::from_slice::<serde::de::IgnoredAny>(bytes) {
            Ok(_) => Err(ApiError::coded(
                Code::InvalidJson,
                "the request body must be a JSON object (a Messages request)",
            )),
            Err(err) => {
                Err(ApiError::coded(Code::InvalidJson, format!("the request body is not valid JSON: {err}")))
            }
        };
    }
    let shape: Shape = serde_json::from_slice(bytes).map_err(|err| {
        ApiError::coded(Code::InvalidJson, format!("the request body is not valid JSON: {err}"))
    })?;
    let model = match shape.model.map(RawValue::get) {
        Some(raw) if raw.starts_with('"') => serde_json::from_str::<String>(raw).unwrap_or_default(),
        Some(_) => return Err(ApiError::invalid_request("model: must be a string")),
        None => return Err(ApiError::invalid_request("model: field required")),
    };
    match shape.messages.map(RawValue::get) {
        Some(raw) if raw.starts_with('[') => {}
        Some(_) => return Err(ApiError::invalid_request("messages: must be an array")),
        None => return Err(ApiError::invalid_request("messages: field required")),
    }
    Ok(MessagesFacts {
        model: model.chars().take(100).collect(),
        stream: shape.stream.is_some_and(|raw| raw.get() == "true"),
    })
}

/// How deeply arrays and objects nest, counted in one pass over the bytes (brackets inside
/// strings do not count). serde_json's borrowed and skipped values are read without its
/// recursion limit, so the limit the API promises is kept here.
fn nesting_depth(bytes: &[u8]) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for &b in bytes {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_a_messages_request_with_unknown_fields() {
        let body = br#"{"model":"m","max_tokens":5,"messages":[],"some_future_field":{"a":[1,{"b":"]"}]}}"#;
        check_messages_request(body).unwrap();
    }

    #[test]
    fn refuses_what_is_not_a_messages_request() {
        let cases: [(&[u8], &str); 9] = [
            (b"{", "not valid JSON"),
            (b"[1,2]", "JSON object"),
            (b"  \"text\"", "JSON object"),
            (b"{\"messages\":[]}", "model: field required"),
            (b"{\"model\":1,\"messages\":[]}", "model: must be a string"),
            (b"{\"model\":\"m\"}", "messages: field required"),
            (b"{\"model\":\"m\",\"messages\":{}}", "messages: must be an array"),
            (b"{\"model\":\"\xff\xfe\",\"messages\":[]}", "not valid JSON"),
            (b"{\"model\":\"m\",\"messages\":[]} trailing", "not valid JSON"),
        ];
        for (body, expected) in cases {
            let err = check_messages_request(body).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidRequest);
            assert!(err.message().contains(expected), "{} vs {expected}", err.message());
        }
    }

    #[test]
    fn refuses_deep_nesting_without_overflowing_the_stack() {
        let depth = 100_000;
        let body = format!("{{\"model\":\"m\",\"messages\":{}{}}}", "[".repeat(depth), "]".repeat(depth));
        let err = check_messages_request(body.as_bytes()).unwrap_err();
        assert!(err.message().contains("recursion limit"), "{}", err.message());
        // Brackets inside strings are text, not nesting.
        let body = format!("{{\"model\":\"m\",\"messages\":[],\"x\":\"{}\"}}", "[".repeat(depth));
        check_messages_request(body.as_bytes()).unwrap();
        let at_limit = format!("{{\"model\":\"m\",\"messages\":{}{}}}", "[".repeat(127), "]".repeat(127));
        check_messages_request(at_limit.as_bytes()).unwrap();
    }
}
