//! Reading and checking a Messages request body before anything is sent upstream: a size limit
//! (413 `request_too_large`), a read deadline against clients that stall mid-body, valid JSON
//! (serde_json also refuses bad UTF-8 and nesting deeper than 128 levels), and the minimal shape
//! memgate relies on. Every other field is the upstream's to judge and is forwarded untouched.

use crate::error::{ApiError, ErrorKind};
use axum::body::Body;
use axum::http::HeaderMap;
use bytes::Bytes;
use serde_json::{Map, Value};
use std::time::Duration;

/// Reads the whole body, refusing one over `limit` bytes (by its `content-length` when declared,
/// otherwise as soon as the limit is passed) or one that does not arrive within `deadline`.
pub async fn read_limited(
    headers: &HeaderMap,
    body: Body,
    limit: u64,
    deadline: Duration,
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
    let limit_usize = usize::try_from(limit).unwrap_or(usize::MAX);
    match tokio::time::timeout(deadline, axum::body::to_bytes(body, limit_usize)).await {
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(err)) => {
            let over_limit = std::error::Error::source(&err)
                .is_some_and(|source| source.is::<http_body_util::LengthLimitError>());
            if over_limit {
                Err(too_large())
            } else {
                Err(ApiError::invalid_request(
                    "the request body could not be read to its end (truncated or malformed)",
                ))
            }
        }
        Err(_) => Err(ApiError::new(
            ErrorKind::RequestTimeout,
            format!("the request body did not arrive within {} s", deadline.as_secs()),
        )),
    }
}

/// Parses a Messages (or count_tokens) request: a JSON object with a string `model` and an array
/// `messages`. The error says what is wrong and where.
pub fn parse_messages_request(bytes: &[u8]) -> Result<Map<String, Value>, ApiError> {
    let value: Value = serde_json::from_slice(bytes)
        .map_err(|err| ApiError::invalid_request(format!("the request body is not valid JSON: {err}")))?;
    let Value::Object(object) = value else {
        return Err(ApiError::invalid_request("the request body must be a JSON object (a Messages request)"));
    };
    match object.get("model") {
        Some(Value::String(_)) => {}
        Some(_) => return Err(ApiError::invalid_request("model: must be a string")),
        None => return Err(ApiError::invalid_request("model: field required")),
    }
    match object.get("messages") {
        Some(Value::Array(_)) => {}
        Some(_) => return Err(ApiError::invalid_request("messages: must be an array")),
        None => return Err(ApiError::invalid_request("messages: field required")),
    }
    Ok(object)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_a_messages_request_with_unknown_fields() {
        let body = br#"{"model":"m","max_tokens":5,"messages":[],"some_future_field":{"a":1}}"#;
        let object = parse_messages_request(body).unwrap();
        assert_eq!(object["some_future_field"]["a"], 1);
    }

    #[test]
    fn refuses_what_is_not_a_messages_request() {
        let cases: [(&[u8], &str); 7] = [
            (b"{", "not valid JSON"),
            (b"[1,2]", "JSON object"),
            (b"{\"messages\":[]}", "model: field required"),
            (b"{\"model\":1,\"messages\":[]}", "model: must be a string"),
            (b"{\"model\":\"m\"}", "messages: field required"),
            (b"{\"model\":\"m\",\"messages\":{}}", "messages: must be an array"),
            (b"{\"model\":\"\xff\xfe\",\"messages\":[]}", "not valid JSON"),
        ];
        for (body, expected) in cases {
            let err = parse_messages_request(body).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidRequest);
            assert!(err.message().contains(expected), "{} vs {expected}", err.message());
        }
    }

    #[test]
    fn refuses_deep_nesting_without_overflowing_the_stack() {
        let depth = 100_000;
        let body = format!("{{\"model\":\"m\",\"messages\":{}{}}}", "[".repeat(depth), "]".repeat(depth));
        let err = parse_messages_request(body.as_bytes()).unwrap_err();
        assert!(err.message().contains("recursion limit"), "{}", err.message());
    }
}
