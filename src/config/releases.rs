//! `[releases.<name>]`: releases defined or overridden in the file. Every key is optional: an
//! absent one keeps the built-in release's value (`rollout::release` lays these over the built-in
//! `v1` and `v2` and checks them against the templates), so the settled `ReleaseConfig` keeps
//! its options, with each value present checked and typed.

use super::{cosine, invalid};
use crate::error::StartupError;
use crate::record::is_valid_tenant;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::time::Duration;

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRelease {
    pub schema_versions: Option<Vec<String>>,
    pub similarity_threshold: Option<f32>,
    pub budget_tokens: Option<usize>,
    pub max_items: Option<usize>,
    pub max_stubs: Option<usize>,
    /// `auto`, `system` or `last_user_turn`.
    pub placement: Option<String>,
    pub empty_block: Option<bool>,
    /// `hybrid` (meaning and words fused) or `dense` (meaning alone).
    pub retrieval: Option<String>,
    pub lexical_weight: Option<f32>,
    pub min_lexical: Option<f32>,
    /// Stop adding records below this share of the best one's score (0: no relative cut).
    pub cut_relative: Option<f32>,
    /// Stop adding records this far below the best one's score (0: no gap cut).
    pub cut_gap: Option<f32>,
    /// Stop at a record scoring this much below the one before it (0: no step cut).
    pub cut_drop: Option<f32>,
    /// Let records pass on meaning only this many standard deviations above the mean similarity
    /// of what the caller may see (0: the threshold alone).
    pub cut_standout: Option<f32>,
    /// The least similarity that may pass by standing out (default: the release's threshold).
    pub standout_floor: Option<f32>,
    /// Added to the similarity of the caller's own subject's records (0: none).
    pub subject_boost: Option<f32>,
    /// How much a record's neighbours in its conversation or document lift it (0: off).
    pub neighbour_weight: Option<f32>,
    /// How the person's words are found (`query`); absent keys keep the defaults.
    pub query: Option<RawQuery>,
    /// memgate's memory tools for this release's callers: `off`, `read` or `write` (the default;
    /// a caller still needs the key permission).
    pub memory_tools: Option<String>,
    /// What the write tools' records start as: `active` (the default) or `proposed`.
    pub agent_writes: Option<String>,
    /// The record types agents, the memory tool and the observer may write: some of `fact`,
    /// `preference`, `decision`, `task` (the default: all four).
    pub agent_types: Option<Vec<String>>,
    /// Whose records this release injects: some of `operator`, `import`, `agent`, `memory_tool`,
    /// `observer` (the default: all).
    pub inject_writers: Option<Vec<String>>,
    /// Whether the block marks each record that an agent, the memory tool or the observer wrote
    /// (`"written_by"` on its line; the default: true).
    pub frame_writers: Option<bool>,
    /// Upstream rounds of one request whose tool calls memgate answers (default 4).
    pub max_tool_rounds: Option<u32>,
    /// The time memgate's tool rounds may take in all, in ms (default 60000).
    pub tool_time_budget_ms: Option<u64>,
    /// Learning from this release's conversations: `off` (the default), `propose` or `write`
    /// (a caller still needs the `observe` permission).
    pub observe: Option<String>,
    /// The confidence an observed candidate needs (default `[observer] min_confidence`).
    pub observe_min_confidence: Option<f64>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawQuery {
    pub harness_tags: Option<Vec<String>>,
    pub unwrap_tags: Option<Vec<String>>,
    pub follow_up_words: Option<usize>,
}

/// A release as the file defines it, checked; `None` keeps the built-in value.
#[derive(Debug, Default, Clone)]
pub struct ReleaseConfig {
    pub schema_versions: Option<Vec<String>>,
    pub similarity_threshold: Option<f32>,
    pub budget_tokens: Option<usize>,
    pub max_items: Option<usize>,
    pub max_stubs: Option<usize>,
    pub placement: Option<PlacementSetting>,
    pub empty_block: Option<bool>,
    pub retrieval: Option<RetrievalSetting>,
    pub lexical_weight: Option<f32>,
    pub min_lexical: Option<f32>,
    /// 0 to 1; 0 turns the relative cut off.
    pub cut_relative: Option<f32>,
    /// 0 to 10; 0 turns the gap cut off.
    pub cut_gap: Option<f32>,
    /// 0 to 10; 0 turns the step cut off.
    pub cut_drop: Option<f32>,
    /// 0 to 10; 0 turns the standout rule off.
    pub cut_standout: Option<f32>,
    /// A similarity (-1 to 1).
    pub standout_floor: Option<f32>,
    /// 0 to 1.
    pub subject_boost: Option<f32>,
    /// 0 to 2; 0 turns neighbours off.
    pub neighbour_weight: Option<f32>,
    pub query: Option<QueryConfig>,
    pub memory_tools: Option<ToolsSetting>,
    pub agent_writes: Option<AgentWritesSetting>,
    /// A non-empty subset of `record::AGENT_TYPES`.
    pub agent_types: Option<Vec<String>>,
    pub inject_writers: Option<crate::record::WriterSet>,
    pub frame_writers: Option<bool>,
    /// 1 to 32.
    pub max_tool_rounds: Option<u32>,
    /// At least 1 ms.
    pub tool_time_budget: Option<Duration>,
    pub observe: Option<ObserveSetting>,
    /// 0 to 1.
    pub observe_min_confidence: Option<f64>,
}

/// `[releases.<name>.query]`, checked; `None` keeps the default.
#[derive(Debug, Default, Clone)]
pub struct QueryConfig {
    pub harness_tags: Option<Vec<String>>,
    pub unwrap_tags: Option<Vec<String>>,
    pub follow_up_words: Option<usize>,
}

/// Where a release's memory block goes (`inject::Placement`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlacementSetting {
    Auto,
    System,
    LastUserTurn,
}

/// Which of memgate's memory tools a release offers its callers (`tools::Level`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolsSetting {
    Off,
    Read,
    Write,
}

/// What a release does with its conversations (`rollout::ObserveMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObserveSetting {
    Off,
    Propose,
    Write,
}

/// What an agent's writes start as (`record::Status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentWritesSetting {
    Active,
    Proposed,
}

/// How a release finds records (`funnel::Retrieval`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetrievalSetting {
    Hybrid,
    Dense,
}

/// Every release of the file, each checked and named by its key.
pub fn settle(raw: BTreeMap<String, RawRelease>) -> Result<BTreeMap<String, ReleaseConfig>, StartupError> {
    raw.into_iter().map(|(name, release)| Ok((name.clone(), release.settle(&name)?))).collect()
}

impl RawRelease {
    fn settle(self, name: &str) -> Result<ReleaseConfig, StartupError> {
        let key = |field: &str| format!("releases.{name}.{field}");
        if !is_valid_tenant(name) {
            return Err(invalid(
                &format!("releases.{name}"),
                "a release name is 1 to 64 characters of A-Z a-z 0-9 . _ : -",
            ));
        }
        if let Some(t) = self.similarity_threshold {
            cosine(&key("similarity_threshold"), t)?;
        }
        let retrieval = match self.retrieval.as_deref() {
            None => None,
            Some("hybrid") => Some(RetrievalSetting::Hybrid),
            Some("dense") => Some(RetrievalSetting::Dense),
            Some(other) => return Err(invalid(&key("retrieval"), format!("`{other}`: use hybrid or dense"))),
        };
        for (field, value) in [("lexical_weight", self.lexical_weight), ("min_lexical", self.min_lexical)] {
            if value.is_some_and(|v| !(0.0..=10.0).contains(&v)) {
                return Err(invalid(&key(field), "use a number between 0 and 10"));
            }
        }
        if self.cut_relative.is_some_and(|v| !(0.0..=1.0).contains(&v)) {
            return Err(invalid(&key("cut_relative"), "use a share of the best score between 0 (off) and 1"));
        }
        for (field, value) in [("cut_gap", self.cut_gap), ("cut_drop", self.cut_drop)] {
            if value.is_some_and(|v| !(0.0..=10.0).contains(&v)) {
                return Err(invalid(&key(field), "use a score difference between 0 (off) and 10"));
            }
        }
        if self.cut_standout.is_some_and(|v| !(0.0..=10.0).contains(&v)) {
            return Err(invalid(
                &key("cut_standout"),
                "use a number of standard deviations between 0 (off) and 10",
            ));
        }
        if let Some(floor) = self.standout_floor {
            cosine(&key("standout_floor"), floor)?;
        }
        if self.subject_boost.is_some_and(|v| !(0.0..=1.0).contains(&v)) {
            return Err(invalid(&key("subject_boost"), "use a similarity between 0 (none) and 1"));
        }
        if self.neighbour_weight.is_some_and(|v| !(0.0..=2.0).contains(&v)) {
            return Err(invalid(&key("neighbour_weight"), "use a weight between 0 (off) and 2"));
        }
        let placement = match self.placement.as_deref() {
            None => None,
            Some("auto") => Some(PlacementSetting::Auto),
            Some("system") => Some(PlacementSetting::System),
            Some("last_user_turn") => Some(PlacementSetting::LastUserTurn),
            Some(other) => {
                return Err(invalid(
                    &key("placement"),
                    format!("`{other}`: use auto, system or last_user_turn"),
                ));
            }
        };
        let memory_tools = match self.memory_tools.as_deref() {
            None => None,
            Some("off") => Some(ToolsSetting::Off),
            Some("read") => Some(ToolsSetting::Read),
            Some("write") => Some(ToolsSetting::Write),
            Some(other) => {
                return Err(invalid(&key("memory_tools"), format!("`{other}`: use off, read or write")));
            }
        };
        let agent_writes = match self.agent_writes.as_deref() {
            None => None,
            Some("active") => Some(AgentWritesSetting::Active),
            Some("proposed") => Some(AgentWritesSetting::Proposed),
            Some(other) => {
                return Err(invalid(&key("agent_writes"), format!("`{other}`: use active or proposed")));
            }
        };
        let observe = match self.observe.as_deref() {
            None => None,
            Some("off") => Some(ObserveSetting::Off),
            Some("propose") => Some(ObserveSetting::Propose),
            Some("write") => Some(ObserveSetting::Write),
            Some(other) => {
                return Err(invalid(&key("observe"), format!("`{other}`: use off, propose or write")));
            }
        };
        if self.observe_min_confidence.is_some_and(|c| !(0.0..=1.0).contains(&c)) {
            return Err(invalid(&key("observe_min_confidence"), "use a number between 0 and 1"));
        }
        if let Some(types) = &self.agent_types {
            let outside = types.iter().find(|t| !crate::record::AGENT_TYPES.contains(&t.as_str()));
            if let Some(outside) = outside {
                return Err(invalid(
                    &key("agent_types"),
                    format!(
                        "`{outside}` is not a type agents may write; use some of {}",
                        crate::record::AGENT_TYPES.join(", ")
                    ),
                ));
            }
            if types.is_empty() {
                return Err(invalid(
                    &key("agent_types"),
                    "name at least one type, or set memory_tools = \"read\"",
                ));
            }
        }
        let inject_writers = match &self.inject_writers {
            None => None,
            Some(names) => {
                let mut kinds = Vec::new();
                for name in names {
                    let kind = crate::record::WriterKind::parse(name).ok_or_else(|| {
                        invalid(
                            &key("inject_writers"),
                            format!("`{name}` is not a writer; use some of operator, import, agent, memory_tool, observer"),
                        )
                    })?;
                    kinds.push(kind);
                }
                Some(crate::record::WriterSet::of(kinds))
            }
        };
        if self.max_tool_rounds.is_some_and(|n| !(1..=32).contains(&n)) {
            return Err(invalid(&key("max_tool_rounds"), "use a number from 1 to 32"));
        }
        if self.tool_time_budget_ms == Some(0) {
            return Err(invalid(&key("tool_time_budget_ms"), "use at least 1"));
        }
        Ok(ReleaseConfig {
            schema_versions: self.schema_versions,
            similarity_threshold: self.similarity_threshold,
            budget_tokens: self.budget_tokens,
            max_items: self.max_items,
            max_stubs: self.max_stubs,
            placement,
            empty_block: self.empty_block,
            retrieval,
            lexical_weight: self.lexical_weight,
            min_lexical: self.min_lexical,
            cut_relative: self.cut_relative,
            cut_gap: self.cut_gap,
            cut_drop: self.cut_drop,
            cut_standout: self.cut_standout,
            standout_floor: self.standout_floor,
            subject_boost: self.subject_boost,
            neighbour_weight: self.neighbour_weight,
            query: self.query.map(|q| QueryConfig {
                harness_tags: q.harness_tags,
                unwrap_tags: q.unwrap_tags,
                follow_up_words: q.follow_up_words,
            }),
            memory_tools,
            agent_writes,
            agent_types: self.agent_types,
            inject_writers,
            frame_writers: self.frame_writers,
            max_tool_rounds: self.max_tool_rounds,
            tool_time_budget: self.tool_time_budget_ms.map(Duration::from_millis),
            observe,
            observe_min_confidence: self.observe_min_confidence,
        })
    }
}

impl ReleaseConfig {
    /// `top`'s values, and `self`'s where `top` has none.
    pub fn overlaid_with(self, top: ReleaseConfig) -> ReleaseConfig {
        ReleaseConfig {
            schema_versions: top.schema_versions.or(self.schema_versions),
            similarity_threshold: top.similarity_threshold.or(self.similarity_threshold),
            budget_tokens: top.budget_tokens.or(self.budget_tokens),
            max_items: top.max_items.or(self.max_items),
            max_stubs: top.max_stubs.or(self.max_stubs),
            placement: top.placement.or(self.placement),
            empty_block: top.empty_block.or(self.empty_block),
            retrieval: top.retrieval.or(self.retrieval),
            lexical_weight: top.lexical_weight.or(self.lexical_weight),
            min_lexical: top.min_lexical.or(self.min_lexical),
            cut_relative: top.cut_relative.or(self.cut_relative),
            cut_gap: top.cut_gap.or(self.cut_gap),
            cut_drop: top.cut_drop.or(self.cut_drop),
            cut_standout: top.cut_standout.or(self.cut_standout),
            standout_floor: top.standout_floor.or(self.standout_floor),
            subject_boost: top.subject_boost.or(self.subject_boost),
            neighbour_weight: top.neighbour_weight.or(self.neighbour_weight),
            query: top.query.or(self.query),
            memory_tools: top.memory_tools.or(self.memory_tools),
            agent_writes: top.agent_writes.or(self.agent_writes),
            agent_types: top.agent_types.or(self.agent_types),
            inject_writers: top.inject_writers.or(self.inject_writers),
            frame_writers: top.frame_writers.or(self.frame_writers),
            max_tool_rounds: top.max_tool_rounds.or(self.max_tool_rounds),
            tool_time_budget: top.tool_time_budget.or(self.tool_time_budget),
            observe: top.observe.or(self.observe),
            observe_min_confidence: top.observe_min_confidence.or(self.observe_min_confidence),
        }
    }
}
