//! `[database]`: the store, and how replicas take in each other's changes through it.

use super::invalid;
use crate::error::StartupError;
use serde::Deserialize;
use std::time::Duration;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDatabase {
    pub url: Option<String>,
    pub poll_interval_ms: Option<u64>,
    pub tombstone_retention_ms: Option<u64>,
}

#[derive(Debug, Clone)]
pub struct DatabaseConfig {
    /// `sqlite://FILE` or `postgres://…`.
    pub url: String,
    /// How often a replica looks in the store for other replicas' changes (records, releases),
    /// lets the canary guards judge, and writes access counts.
    pub poll_interval: Duration,
    /// How long the ids of removed records are kept for other replicas to take in; a replica
    /// that was away longer reloads every record.
    pub tombstone_retention: Duration,
}

impl Default for DatabaseConfig {
    fn default() -> Self {
        DatabaseConfig {
            url: "sqlite://memgate.db".to_owned(),
            poll_interval: Duration::from_millis(1000),
            tombstone_retention: Duration::from_millis(10 * 60 * 1000),
        }
    }
}

impl RawDatabase {
    pub fn settle(self) -> Result<DatabaseConfig, StartupError> {
        let default = DatabaseConfig::default();
        let url = self.url.unwrap_or(default.url);
        if !["sqlite:", "postgres:", "postgresql:"].iter().any(|p| url.starts_with(p)) {
            return Err(invalid(
                "database.url",
                "use sqlite://FILE or postgres://USER@HOST/DB (MEMGATE_DATABASE_URL)",
            ));
        }
        let poll_interval = self.poll_interval_ms.map_or(default.poll_interval, Duration::from_millis);
        if poll_interval < Duration::from_millis(100) {
            return Err(invalid("database.poll_interval_ms", "use at least 100 (ms)"));
        }
        let tombstone_retention =
            self.tombstone_retention_ms.map_or(default.tombstone_retention, Duration::from_millis);
        if tombstone_retention < Duration::from_secs(10) {
            return Err(invalid(
                "database.tombstone_retention_ms",
                "keep tombstones at least 10000 ms, so that replicas have time to take them in",
            ));
        }
        Ok(DatabaseConfig { url, poll_interval, tombstone_retention })
    }
}
