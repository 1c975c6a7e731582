//! Time as memgate writes it: milliseconds since the epoch in the store, RFC 3339 in UTC on the
//! wire. A leaf: it uses no other module of the crate.

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

pub fn now_ms() -> i64 {
    (OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000_000) as i64
}

/// RFC 3339 in UTC (`2024-06-15T09:00:00Z`, with milliseconds only when there are some).
pub fn format_ms(ms: i64) -> String {
    let nanos = i128::from(ms) * 1_000_000;
    OffsetDateTime::from_unix_timestamp_nanos(nanos)
        .ok()
        .and_then(|t| t.format(&Rfc3339).ok())
        .unwrap_or_else(|| ms.to_string())
}

/// Parses an RFC 3339 date-time (any offset) into milliseconds since the epoch.
pub fn parse_rfc3339_ms(text: &str) -> Option<i64> {
    let t = OffsetDateTime::parse(text, &Rfc3339).ok()?;
    i64::try_from(t.unix_timestamp_nanos() / 1_000_000).ok()
}
