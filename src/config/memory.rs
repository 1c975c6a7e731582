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
}

impl Default for MemoryConfig {
    fn default() -> Self {
        MemoryConfig {
            funnel_timeout: Duration::from_millis(50),
            fail_closed: false,
            templates_dir: None,
            default_release: None,
        }
    }
}

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
        })
    }
}
