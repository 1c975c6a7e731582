//! The rollout state of one release, as stored and as the admin API shows and changes it.

use serde::{Deserialize, Serialize};

/// Where a release stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// Defined, serving nobody unless pinned.
    #[default]
    Available,
    /// Serving its allow-lists and a sticky share of subjects.
    Canary,
    /// Its funnel runs beside the active release on a sample of requests; nothing is sent.
    Shadow,
    /// Serving everyone not routed elsewhere. Exactly one release is active.
    Active,
    /// Withdrawn: not even a pin reaches it.
    Retired,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AllowList {
    pub subjects: Vec<String>,
    pub teams: Vec<String>,
    /// `10.0.0.0/8`, `192.168.1.7/32`, `::1/128`.
    pub cidrs: Vec<String>,
}

/// When the guard steps in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Guard {
    pub enabled: bool,
    /// The sliding window the error rate is measured over.
    pub window_secs: u64,
    /// Fewer calls than this in the window: no verdict yet.
    pub min_calls: u64,
    /// Upstream or memory errors over calls, above which the canary is rolled back.
    pub max_error_rate: f64,
    /// Promote a canary that stayed healthy this long with enough calls; 0 = never by itself.
    pub promote_after_secs: u64,
}

impl Default for Guard {
    fn default() -> Self {
        Guard { enabled: true, window_secs: 60, min_calls: 20, max_error_rate: 0.2, promote_after_secs: 0 }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RolloutState {
    pub stage: Stage,
    /// Share of subjects (0–100, two decimals) a canary serves.
    pub canary_percent: f64,
    pub allow: AllowList,
    pub guard: Guard,
    /// Share of requests (0–100) on which a shadow release's funnel also runs.
    pub shadow_sample_percent: f64,
    /// Why the last automatic change happened, for people reading `GET /admin/v1/releases`.
    pub note: Option<String>,
    /// When the stage last changed (ms), for the guard's promotion clock.
    pub stage_since_ms: i64,
}

impl Default for RolloutState {
    fn default() -> Self {
        RolloutState {
            stage: Stage::Available,
            canary_percent: 0.0,
            allow: AllowList::default(),
            guard: Guard::default(),
            shadow_sample_percent: 0.0,
            note: None,
            stage_since_ms: 0,
        }
    }
}
