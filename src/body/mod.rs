//! Checking a Messages request body before anything is sent upstream: valid JSON (no bad UTF-8,
//! nesting at most 128 levels deep) and the minimal shape memgate relies on. Every other field is
//! the upstream's to judge and is forwarded untouched. Reading a body (its size limit and
//! deadlines) is the edge's: `http::body`.
//!
//! Memory: a body is held once, as the client's bytes. The checks borrow from those bytes and
//! never build a `serde_json::Value` of the whole request: a 32 MB body holding a long array of
//! small numbers once cost ~0.5–1 GB as a `Value` (32 bytes per element). What bodies may hold
//! in memory at all, across concurrent requests, is bounded by `budget::BodyBudget`, as their
//! bytes arrive.

pub mod budget;

use crate::error::{ApiError, Code};
use serde::Deserialize;
use serde_json::value::RawValue;

/// The deepest nesting a request may have, as serde_json's own recursion limit.
const MAX_DEPTH: usize = 128;

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
    use crate::error::ErrorKind;

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
