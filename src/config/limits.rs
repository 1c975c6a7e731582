//! `[limits]`: what a client may send, and what memgate holds of it at once.

use super::{invalid, millis};
use crate::error::StartupError;
use serde::Deserialize;
use std::time::Duration;

/// Anthropic's own limit for a Messages request body.
pub const DEFAULT_MAX_BODY_BYTES: u64 = 32 * 1024 * 1024;
/// Messages bodies held at once: four of the largest with their injected copies.
pub const DEFAULT_INFLIGHT_BODY_BYTES: u64 = 8 * DEFAULT_MAX_BODY_BYTES;
/// What one client address, or one caller, may hold of that: two of the largest bodies, half of
/// the whole.
pub const DEFAULT_INFLIGHT_BODY_BYTES_PER_HOLDER: u64 = 4 * DEFAULT_MAX_BODY_BYTES;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLimits {
    pub max_body_bytes: Option<u64>,
    pub body_read_timeout_ms: Option<u64>,
    pub max_inflight_body_bytes: Option<u64>,
    pub max_inflight_requests: Option<usize>,
    pub inflight_wait_ms: Option<u64>,
    pub body_idle_timeout_ms: Option<u64>,
    pub max_inflight_body_bytes_per_address: Option<u64>,
    pub max_inflight_body_bytes_per_caller: Option<u64>,
    pub header_read_timeout_ms: Option<u64>,
    pub connection_idle_timeout_ms: Option<u64>,
}

/// Bounds on what a client may send.
#[derive(Debug, Clone)]
pub struct Limits {
    pub max_body_bytes: u64,
    /// How long a client may take to send a Messages body it has started.
    pub body_read_timeout: Duration,
    /// Bytes of Messages bodies held at once, across requests (each counts twice: see
    /// `body::budget`).
    pub max_inflight_body_bytes: u64,
    /// Messages requests being read, recalled and sent at once.
    pub max_inflight_requests: usize,
    /// How long a request waits for its share before a 529.
    pub inflight_wait: Duration,
    /// The longest silence allowed between two chunks of a Messages body.
    pub body_idle_timeout: Duration,
    /// What one client address, and one caller, may hold of `max_inflight_body_bytes`.
    pub max_inflight_body_bytes_per_address: u64,
    pub max_inflight_body_bytes_per_caller: u64,
    /// From a request's first byte to the end of its headers (HTTP/1), on a connection.
    pub header_read_timeout: Duration,
    /// How long a connection with nothing in flight is kept open for a next request.
    pub connection_idle_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            body_read_timeout: Duration::from_millis(60_000),
            max_inflight_body_bytes: DEFAULT_INFLIGHT_BODY_BYTES,
            max_inflight_requests: 1024,
            inflight_wait: Duration::from_millis(5_000),
            body_idle_timeout: Duration::from_millis(10_000),
            max_inflight_body_bytes_per_address: DEFAULT_INFLIGHT_BODY_BYTES_PER_HOLDER,
            max_inflight_body_bytes_per_caller: DEFAULT_INFLIGHT_BODY_BYTES_PER_HOLDER,
            header_read_timeout: Duration::from_millis(30_000),
            connection_idle_timeout: Duration::from_millis(75_000),
        }
    }
}

impl RawLimits {
    pub fn settle(self) -> Result<Limits, StartupError> {
        let default = Limits::default();
        let max_body_bytes = self.max_body_bytes.unwrap_or(default.max_body_bytes);
        if max_body_bytes < 1024 {
            return Err(invalid(
                "limits.max_body_bytes",
                format!("{max_body_bytes} is too small for any Messages request; use at least 1024"),
            ));
        }
        let limits = Limits {
            max_body_bytes,
            body_read_timeout: millis(
                "limits.body_read_timeout_ms",
                self.body_read_timeout_ms,
                default.body_read_timeout,
            )?,
            max_inflight_body_bytes: self.max_inflight_body_bytes.unwrap_or(default.max_inflight_body_bytes),
            max_inflight_requests: self.max_inflight_requests.unwrap_or(default.max_inflight_requests),
            inflight_wait: millis("limits.inflight_wait_ms", self.inflight_wait_ms, default.inflight_wait)?,
            body_idle_timeout: millis(
                "limits.body_idle_timeout_ms",
                self.body_idle_timeout_ms,
                default.body_idle_timeout,
            )?,
            max_inflight_body_bytes_per_address: self
                .max_inflight_body_bytes_per_address
                .unwrap_or(default.max_inflight_body_bytes_per_address),
            max_inflight_body_bytes_per_caller: self
                .max_inflight_body_bytes_per_caller
                .unwrap_or(default.max_inflight_body_bytes_per_caller),
            header_read_timeout: millis(
                "limits.header_read_timeout_ms",
                self.header_read_timeout_ms,
                default.header_read_timeout,
            )?,
            connection_idle_timeout: millis(
                "limits.connection_idle_timeout_ms",
                self.connection_idle_timeout_ms,
                default.connection_idle_timeout,
            )?,
        };
        // Every holder must fit one request of the largest size and its injected copy.
        for (key, value) in [
            ("limits.max_inflight_body_bytes", limits.max_inflight_body_bytes),
            ("limits.max_inflight_body_bytes_per_address", limits.max_inflight_body_bytes_per_address),
            ("limits.max_inflight_body_bytes_per_caller", limits.max_inflight_body_bytes_per_caller),
        ] {
            if value < 2 * max_body_bytes {
                return Err(invalid(
                    key,
                    format!(
                        "{value} cannot hold one request of limits.max_body_bytes ({max_body_bytes}) and its copy; \
                         use at least twice that"
                    ),
                ));
            }
        }
        if limits.max_inflight_requests == 0 {
            return Err(invalid("limits.max_inflight_requests", "use at least 1"));
        }
        Ok(limits)
    }
}
