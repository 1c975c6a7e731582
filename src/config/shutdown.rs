//! `[shutdown]`: how a stopping replica lets load balancers notice, then finishes what it holds.

use serde::Deserialize;
use std::time::Duration;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawShutdown {
    pub grace_ms: Option<u64>,
    pub drain_delay_ms: Option<u64>,
}

#[derive(Debug, Clone)]
pub struct ShutdownConfig {
    /// How long requests in flight may take to finish once memgate stops accepting.
    pub grace: Duration,
    /// After SIGTERM, how long memgate goes on accepting (answering `/readyz` 503 and closing each
    /// connection after its answer) before it stops accepting: time for load balancers to notice.
    pub drain_delay: Duration,
}

impl Default for ShutdownConfig {
    fn default() -> Self {
        ShutdownConfig { grace: Duration::from_millis(30_000), drain_delay: Duration::from_millis(5_000) }
    }
}

impl RawShutdown {
    pub fn settle(self) -> ShutdownConfig {
        let default = ShutdownConfig::default();
        ShutdownConfig {
            grace: self.grace_ms.map_or(default.grace, Duration::from_millis),
            drain_delay: self.drain_delay_ms.map_or(default.drain_delay, Duration::from_millis),
        }
    }
}
