//! `[redis]`: where replicas meet (`fanout`). Absent or empty `url`: no Redis, replicas run on
//! the database poll alone.

use super::{invalid, millis};
use crate::error::StartupError;
use serde::Deserialize;
use std::time::Duration;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRedis {
    pub url: Option<String>,
    /// Default `memgate`.
    pub key_prefix: Option<String>,
    /// Default 10 ms.
    pub shared_read_timeout_ms: Option<u64>,
}

#[derive(Debug, Clone)]
pub struct RedisConfig {
    /// `redis://[user:password@]host:port[/db]` or `rediss://…`.
    pub url: String,
    /// Put in front of every Redis key and channel, so deployments can share one Redis.
    pub key_prefix: String,
    /// The longest a replica waits for another's query vector before running the model itself.
    pub shared_read_timeout: Duration,
}

const DEFAULT_KEY_PREFIX: &str = "memgate";
const DEFAULT_SHARED_READ_TIMEOUT: Duration = Duration::from_millis(10);

impl RawRedis {
    pub fn settle(self) -> Result<Option<RedisConfig>, StartupError> {
        let Some(url) = self.url.filter(|u| !u.is_empty()) else { return Ok(None) };
        if !url.starts_with("redis://") && !url.starts_with("rediss://") {
            return Err(invalid(
                "redis.url",
                "use redis://HOST:PORT or rediss://HOST:PORT (MEMGATE_REDIS_URL)",
            ));
        }
        // Parsing only: nothing connects until the fan-out starts.
        if let Err(err) = ::redis::Client::open(url.as_str()) {
            return Err(invalid("redis.url", format!("{err} (use redis://HOST:PORT or rediss://HOST:PORT)")));
        }
        let key_prefix = self.key_prefix.unwrap_or_else(|| DEFAULT_KEY_PREFIX.to_owned());
        if key_prefix.is_empty() || key_prefix.chars().any(|c| c.is_whitespace()) {
            return Err(invalid("redis.key_prefix", "use a non-empty prefix without spaces"));
        }
        let shared_read_timeout =
            millis("redis.shared_read_timeout_ms", self.shared_read_timeout_ms, DEFAULT_SHARED_READ_TIMEOUT)?;
        Ok(Some(RedisConfig { url, key_prefix, shared_read_timeout }))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_malformed_url_is_refused_while_reading_the_config() {
        let raw = RawRedis { url: Some("redis://[::1".into()), ..RawRedis::default() };
        match raw.settle() {
            Err(StartupError::ConfigInvalid { key, .. }) => assert_eq!(key, "redis.url"),
            other => panic!("expected redis.url refused, got {other:?}"),
        }
        assert!(RawRedis::default().settle().unwrap().is_none());
    }
}
