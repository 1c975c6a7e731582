//! What every answer carries (request id, rate-limit headers) and the error answers, in
//! Anthropic's shape: `{"type":"error","error":{"type","message"},"request_id"}`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::response::{IntoResponse, Response};
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use serde_json::{Value, json};

const REQUESTS_LIMIT: u32 = 4000;
/// How far in the future the advertised rate-limit window resets.
const RESET_AFTER: Duration = Duration::from_secs(60);
/// The `retry-after` of `mock-429`, in seconds.
const RETRY_AFTER_SECS: u32 = 7;

/// The errors the mock answers with; `status` and `kind` are the table to Anthropic's wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum ApiError {
    InvalidRequest(String),
    Authentication,
    NotFound(String),
    TooLarge,
    RateLimited,
    Api(String),
    Overloaded,
}

impl ApiError {
    fn status(&self) -> StatusCode {
        match self {
            ApiError::InvalidRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Authentication => StatusCode::UNAUTHORIZED,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::RateLimited => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Api(_) => StatusCode::INTERNAL_SERVER_ERROR,
            ApiError::Overloaded => overloaded_status(),
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            ApiError::InvalidRequest(_) => "invalid_request_error",
            ApiError::Authentication => "authentication_error",
            ApiError::NotFound(_) => "not_found_error",
            ApiError::TooLarge => "request_too_large",
            ApiError::RateLimited => "rate_limit_error",
            ApiError::Api(_) => "api_error",
            ApiError::Overloaded => "overloaded_error",
        }
    }

    fn message(&self) -> &str {
        match self {
            ApiError::InvalidRequest(message) | ApiError::NotFound(message) | ApiError::Api(message) => {
                message
            }
            ApiError::TooLarge => "Request exceeds the maximum allowed number of bytes.",
            ApiError::Authentication => "invalid x-api-key",
            ApiError::RateLimited => "This request would exceed the rate limit (mock-upstream).",
            ApiError::Overloaded => "Overloaded",
        }
    }

    /// The `error` object, as it also appears in a mid-stream `error` event.
    pub(super) fn body(&self, seq: u64) -> Value {
        json!({
            "type": "error",
            "error": { "type": self.kind(), "message": self.message() },
            "request_id": request_id(seq),
        })
    }

    /// The complete error answer of the request numbered `seq`.
    pub(super) fn into_response_with(self, seq: u64) -> Response {
        let remaining = if self == ApiError::RateLimited { 0 } else { REQUESTS_LIMIT - 1 };
        let mut headers = api_headers(seq, remaining);
        match self {
            ApiError::RateLimited => {
                headers.insert(HeaderName::from_static("retry-after"), HeaderValue::from(RETRY_AFTER_SECS));
            }
            ApiError::Overloaded => {
                headers.insert(HeaderName::from_static("x-should-retry"), HeaderValue::from_static("true"));
            }
            _ => {}
        }
        json_response(self.status(), headers, &self.body(seq))
    }
}

/// A JSON answer written in wire order (see `wire_json`).
pub(super) fn json_response(status: StatusCode, mut headers: HeaderMap, body: &Value) -> Response {
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    (status, headers, wire_json(body)).into_response()
}

/// Compact JSON with each object's `"type"` first, as Anthropic writes it (serde_json's map
/// sorts keys, which would put it last); the other keys keep the map's order.
pub(super) fn wire_json(value: &Value) -> String {
    let mut out = String::new();
    write_wire(value, &mut out);
    out
}

fn write_wire(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            out.push('{');
            let typed = map.get_key_value("type").into_iter();
            let others = map.iter().filter(|(key, _)| *key != "type");
            for (i, (key, inner)) in typed.chain(others).enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_wire(inner, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_wire(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// 529 is not a registered status, but `StatusCode` accepts any three digits.
fn overloaded_status() -> StatusCode {
    StatusCode::from_u16(529).unwrap_or(StatusCode::SERVICE_UNAVAILABLE)
}

pub(super) fn request_id(seq: u64) -> String {
    format!("req_mock_{seq}")
}

/// `request-id` and the `anthropic-ratelimit-requests-*` headers of a successful answer.
pub(super) fn ok_headers(seq: u64) -> HeaderMap {
    api_headers(seq, REQUESTS_LIMIT - 1)
}

fn api_headers(seq: u64, remaining: u32) -> HeaderMap {
    let mut headers = HeaderMap::new();
    let pairs = [
        ("request-id", request_id(seq)),
        ("anthropic-ratelimit-requests-limit", REQUESTS_LIMIT.to_string()),
        ("anthropic-ratelimit-requests-remaining", remaining.to_string()),
        ("anthropic-ratelimit-requests-reset", reset_time()),
    ];
    for (name, value) in pairs {
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(HeaderName::from_static(name), value);
        }
    }
    headers
}

/// `RESET_AFTER` from now, in RFC 3339 (UTC, whole seconds) as Anthropic sends it.
fn reset_time() -> String {
    let at = SystemTime::now() + RESET_AFTER;
    let secs = at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    rfc3339(secs)
}

fn rfc3339(unix_secs: u64) -> String {
    let days = unix_secs / 86_400;
    let rem = unix_secs % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// Days since 1970-01-01 to (year, month, day), Howard Hinnant's `civil_from_days`.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::{rfc3339, wire_json};

    #[test]
    fn rfc3339_formats_known_instants() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_767_225_599), "2025-12-31T23:59:59Z");
    }

    #[test]
    fn wire_json_puts_type_first() {
        let value = serde_json::json!({"a": [{"z": 1, "type": "x"}], "type": "t", "b": "\"q\""});
        assert_eq!(wire_json(&value), r#"{"type":"t","a":[{"type":"x","z":1}],"b":"\"q\""}"#);
    }
}
