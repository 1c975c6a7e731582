//! `[console]` and `[metrics]`: what the console keeps. They settle into one `ConsoleConfig`,
//! since `[metrics]` says how long the history behind the console's charts is kept.

use super::invalid;
use crate::error::StartupError;
use serde::Deserialize;
use std::time::Duration;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMetrics {
    pub history_retention_days: Option<u32>,
    pub minute_history_hours: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConsole {
    pub recent_requests: Option<usize>,
    pub recent_request_ttl_secs: Option<u64>,
    pub replica: Option<String>,
}

/// What the console keeps: the metrics history behind its charts and the recent requests its
/// explain picker lists (docs/console.md).
#[derive(Debug, Clone)]
pub struct ConsoleConfig {
    /// 5-minute rows (the 24 h view) are kept this many days.
    pub history_retention_days: u32,
    /// Minute rows (the 1 h view) are kept this many hours.
    pub minute_history_hours: u32,
    /// Requests kept per tenant for the explain picker; 0 keeps none.
    pub recent_requests: usize,
    pub recent_request_ttl: Duration,
    /// This replica's name in the history; `None`: `HOSTNAME`, else a random id per start.
    pub replica: Option<String>,
}

impl Default for ConsoleConfig {
    fn default() -> Self {
        ConsoleConfig {
            history_retention_days: 8,
            minute_history_hours: 48,
            recent_requests: 200,
            recent_request_ttl: Duration::from_secs(900),
            replica: None,
        }
    }
}

/// The settled `[metrics]` and `[console]`.
pub fn settle(metrics: RawMetrics, console: RawConsole) -> Result<ConsoleConfig, StartupError> {
    let default = ConsoleConfig::default();
    let history_retention_days = metrics.history_retention_days.unwrap_or(default.history_retention_days);
    let minute_history_hours = metrics.minute_history_hours.unwrap_or(default.minute_history_hours);
    if history_retention_days == 0 {
        return Err(invalid("metrics.history_retention_days", "keep at least 1 day"));
    }
    if minute_history_hours == 0 || u64::from(minute_history_hours) > u64::from(history_retention_days) * 24 {
        return Err(invalid(
            "metrics.minute_history_hours",
            "keep at least 1 hour, and at most metrics.history_retention_days",
        ));
    }
    let settled = ConsoleConfig {
        history_retention_days,
        minute_history_hours,
        recent_requests: console.recent_requests.unwrap_or(default.recent_requests),
        recent_request_ttl: console
            .recent_request_ttl_secs
            .map_or(default.recent_request_ttl, Duration::from_secs),
        replica: console.replica.filter(|r| !r.trim().is_empty()),
    };
    if settled.recent_requests > 10_000 {
        return Err(invalid("console.recent_requests", "keep at most 10000 requests per tenant"));
    }
    Ok(settled)
}
