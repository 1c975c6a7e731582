//! `[memory]`: how long recall may take, what happens past it, extra release templates
//! (compiled by `inject` when the state is built), and the release a new store starts with.

use super::millis;
use crate::error::StartupError;
use serde::Deserialize;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMemory {
    pub funnel_timeout_ms: Option<u64>,
    pub fail_closed: Option<bool>,
    pub templates_dir: Option<PathBuf>,
    pub default_release: Option<String>,
    pub body_cache_mb: Option<u64>,
}

#[derive(Debug, Clone)]
pub struct MemoryConfig {
    /// Time allowed for the query embedding and the funnel; past it the request goes on without
    /// memory (`degraded`), or fails when `fail_closed`.
    pub funnel_timeout: Duration,
    pub fail_closed: bool,
    /// Releases' templates added to or replacing the built-in ones; `None`: the built-ins only.
    pub templates_dir: Option<PathBuf>,
    /// The release that is active while the store names none (a new store, or one whose rollout
    /// was never changed); `None`: the built-in default (`inject::DEFAULT_RELEASE`). Checked
    /// against the releases when the state is built.
    pub default_release: Option<String>,
    /// Bound of the cache of record bodies beside the index, in bytes (`index::bodies`): the
    /// records a request injects are rendered from it, or read from the store.
    pub body_cache_bytes: u64,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        MemoryConfig {
            funnel_timeout: Duration::from_millis(50),
            fail_closed: false,
            templates_dir: None,
            default_release: None,
            body_cache_bytes: DEFAULT_BODY_CACHE_BYTES,
        }
    }
}

/// The body cache's default bound: every record of a deployment of tens of thousands of
/// records, and the hot part of a larger one.
pub const DEFAULT_BODY_CACHE_BYTES: u64 = 64 * 1024 * 1024;

/// 1 TB: past any machine's memory, so a typo of a few extra digits is refused.
const MAX_BODY_CACHE_MB: u64 = 1 << 20;

impl RawMemory {
    pub fn settle(self) -> Result<MemoryConfig, StartupError> {
        let default = MemoryConfig::default();
        Ok(MemoryConfig {
            funnel_timeout: millis(
                "memory.funnel_timeout_ms",
                self.funnel_timeout_ms,
                default.funnel_timeout,
            )?,
            fail_closed: self.fail_closed.unwrap_or(default.fail_closed),
            templates_dir: self.templates_dir,
            default_release: self.default_release,
            body_cache_bytes: match self.body_cache_mb {
                None => default.body_cache_bytes,
                Some(mb) if mb <= MAX_BODY_CACHE_MB => mb * 1024 * 1024,
                Some(_) => {
                    return Err(StartupError::ConfigInvalid {
                        key: "memory.body_cache_mb".into(),
                        message: format!("at most {MAX_BODY_CACHE_MB} (MB)"),
                    });
                }
            },
        })
    }
}
