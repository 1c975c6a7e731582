//! A release: a named version of the memory rules — the schema versions it reads, its template and
//! contract (`templates/<name>/`), and its funnel settings. Built in: `v1` and `v2` (each reads its
//! own schema version); `v3`, which reads the `v1` records, renders each as a compact line and
//! stops where the scores fall off (`funnel::cut`); and `v4`, the default: v3's lines, records
//! passing when they stand out from what the caller may see (`funnel::background`), the caller's
//! own records boosted, neighbours in a thread lifting each other (`funnel::neighbours`), and a
//! budget chosen from the measured curve (docs/benchmarks.md, "Retrieval"). `[releases.<name>]`
//! in the config overrides or adds.

use crate::config::Config;
use crate::config::releases::{
    AgentWritesSetting, ObserveSetting, PlacementSetting, QueryConfig, ReleaseConfig, RetrievalSetting,
    ToolsSetting,
};
use crate::funnel::background::Standout;
use crate::funnel::cut::Cut;
use crate::funnel::semantic::DEFAULT_PROBES;
use crate::funnel::{FunnelSettings, Retrieval};
use crate::inject::{Placement, Templates};
use crate::query::QueryRule;
use crate::record::Status;
use std::collections::BTreeMap;
use std::time::Duration;

/// Which of memgate's memory tools (`tools`) a caller gets, ordered: `Off < Read < Write`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum Level {
    #[default]
    Off,
    Read,
    Write,
}

impl Level {
    pub fn parse(text: &str) -> Option<Level> {
        match text {
            "off" => Some(Level::Off),
            "read" => Some(Level::Read),
            "write" => Some(Level::Write),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Level::Off => "off",
            Level::Read => "read",
            Level::Write => "write",
        }
    }
}

/// A release's tool settings (`[releases.<name>]`).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSettings {
    /// `memory_tools`: the most this release's callers get (default `write`).
    pub level: Level,
    /// `agent_writes`: what the write tools' records start as (`Active`, or `Proposed`).
    pub agent_writes: Status,
    /// `agent_types`: the record types agents, the memory tool and the observer may write
    /// (default `record::AGENT_TYPES`; a release may only narrow it).
    pub agent_types: Vec<String>,
    /// `max_tool_rounds`: how many times in one request memgate answers the model's tool calls.
    pub max_rounds: u32,
    /// `tool_time_budget_ms`: how long those rounds may take in all.
    pub time_budget: Duration,
}

impl Default for ToolSettings {
    fn default() -> Self {
        ToolSettings {
            level: Level::Write,
            agent_writes: Status::Active,
            agent_types: crate::record::AGENT_TYPES.map(str::to_owned).to_vec(),
            max_rounds: 4,
            time_budget: Duration::from_secs(60),
        }
    }
}

/// What a release does with its callers' finished exchanges (`observe`), ordered:
/// `Off < Propose < Write`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum ObserveMode {
    #[default]
    Off,
    /// Extracted records are `proposed`: never injected until an operator approves them.
    Propose,
    /// Extracted records are `active` at once.
    Write,
}

impl ObserveMode {
    pub fn as_str(self) -> &'static str {
        match self {
            ObserveMode::Off => "off",
            ObserveMode::Propose => "propose",
            ObserveMode::Write => "write",
        }
    }

    pub fn parse(text: &str) -> Option<ObserveMode> {
        [ObserveMode::Off, ObserveMode::Propose, ObserveMode::Write].into_iter().find(|m| m.as_str() == text)
    }
}

/// A release's observation settings (`[releases.<name>]`).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ObserveSettings {
    pub mode: ObserveMode,
    /// `observe_min_confidence`; `None`: `[observer] min_confidence`.
    pub min_confidence: Option<f64>,
}

#[derive(Debug, Clone)]
pub struct Release {
    pub name: String,
    pub funnel: FunnelSettings,
    pub placement: Placement,
    /// Inject an empty block when nothing survives (some teams want the contract every time).
    pub empty_block: bool,
    /// Mark the lines of records that agents, the memory tool or the observer wrote
    /// (`"written_by"`), so the model reads them as what someone said, not operator policy.
    pub frame_writers: bool,
    /// How the person's words are found in a request (`query`).
    pub query: QueryRule,
    /// memgate's memory tools: what this release's callers may get and how they run.
    pub tools: ToolSettings,
    /// Learning from the conversations this release serves.
    pub observe: ObserveSettings,
}

/// Every release the config and the templates define, checked against each other.
pub fn load_releases(config: &Config, templates: &Templates) -> Result<BTreeMap<String, Release>, String> {
    let mut raw: BTreeMap<String, ReleaseConfig> = BTreeMap::new();
    for builtin in ["v1", "v2"] {
        raw.insert(
            builtin.into(),
            ReleaseConfig { schema_versions: Some(vec![builtin.into()]), ..ReleaseConfig::default() },
        );
    }
    raw.insert("v3".into(), v3(config.embedding.model.language_centering));
    raw.insert("v4".into(), v4(config.embedding.model.language_centering));
    for (name, release) in &config.releases {
        let base = raw.remove(name).unwrap_or_default();
        raw.insert(name.clone(), base.overlaid_with(release.clone()));
    }
    let mut releases = BTreeMap::new();
    for (name, r) in raw {
        if !templates.contains(&name) {
            return Err(format!(
                "release `{name}` has no templates: add a folder {name}/ with memory.j2 and contract.txt to {}",
                config.memory.templates_dir.as_ref().map_or_else(
                    || "a templates folder set as memory.templates_dir".to_owned(),
                    |d| d.display().to_string()
                )
            ));
        }
        let tools = tool_settings(&r);
        let placement = match r.placement {
            None | Some(PlacementSetting::Auto) => Placement::Auto,
            Some(PlacementSetting::System) => Placement::System,
            Some(PlacementSetting::LastUserTurn) => Placement::LastUserTurn,
        };
        releases.insert(
            name.clone(),
            Release {
                funnel: FunnelSettings {
                    schema_versions: r.schema_versions.unwrap_or_else(|| vec![name.clone()]),
                    threshold: r.similarity_threshold.unwrap_or(config.embedding.similarity_threshold),
                    budget_tokens: r.budget_tokens.unwrap_or(3000),
                    max_items: r.max_items.unwrap_or(5),
                    max_stubs: r.max_stubs.unwrap_or(3),
                    probes: DEFAULT_PROBES,
                    cut: Cut {
                        relative: r.cut_relative.filter(|v| *v > 0.0),
                        gap: r.cut_gap.filter(|v| *v > 0.0),
                        drop: r.cut_drop.filter(|v| *v > 0.0),
                    },
                    standout: r.cut_standout.filter(|v| *v > 0.0).map(|z| Standout {
                        z,
                        floor: r
                            .standout_floor
                            .or(r.similarity_threshold)
                            .unwrap_or(config.embedding.similarity_threshold),
                    }),
                    subject_boost: r.subject_boost.unwrap_or(0.0),
                    neighbour_weight: r.neighbour_weight.unwrap_or(0.0),
                    inject_writers: r.inject_writers.unwrap_or(crate::record::WriterSet::ALL),
                    retrieval: match r.retrieval {
                        Some(RetrievalSetting::Dense) => Retrieval::Dense,
                        _ => match Retrieval::HYBRID {
                            Retrieval::Hybrid { lexical_weight, min_lexical } => Retrieval::Hybrid {
                                lexical_weight: r.lexical_weight.unwrap_or(lexical_weight),
                                min_lexical: r.min_lexical.unwrap_or(min_lexical),
                            },
                            dense => dense,
                        },
                    },
                },
                query: query_rule(r.query.unwrap_or_default()),
                tools,
                observe: ObserveSettings {
                    mode: match r.observe {
                        None | Some(ObserveSetting::Off) => ObserveMode::Off,
                        Some(ObserveSetting::Propose) => ObserveMode::Propose,
                        Some(ObserveSetting::Write) => ObserveMode::Write,
                    },
                    min_confidence: r.observe_min_confidence,
                },
                name,
                placement,
                empty_block: r.empty_block.unwrap_or(false),
                frame_writers: r.frame_writers.unwrap_or(true),
            },
        );
    }
    Ok(releases)
}

/// The built-in `v3`: the records `v1` reads, in compact lines (its template), with the cut.
/// Measured on LoCoMo's tuning conversations and the multilingual support set (docs/benchmarks.md,
/// "Retrieval"): the budget holds a ~1,000-token block, the cap only bounds a pathological
/// question, and the cut keeps a clear answer alone. The cut is calibrated on the default
/// model's centered scores; raw cosines (`language_centering = false`) sit in a narrow band
/// near 0.8 where that share means nothing, so there v3 has no cut until one is set.
fn v3(centered: bool) -> ReleaseConfig {
    ReleaseConfig {
        schema_versions: Some(vec!["v1".into()]),
        budget_tokens: Some(V3_BUDGET_TOKENS),
        max_items: Some(V3_MAX_ITEMS),
        cut_relative: centered.then_some(V3_CUT_RELATIVE),
        ..ReleaseConfig::default()
    }
}

/// `v3`'s record budget in tokens (the records' compact lines; the block adds its contract).
pub const V3_BUDGET_TOKENS: usize = 900;
/// `v3`'s item cap.
pub const V3_MAX_ITEMS: usize = 40;
/// `v3`'s relative cut: records scoring below this share of the best are left out.
pub const V3_CUT_RELATIVE: f32 = 0.6;

/// The built-in `v4`, the default: v3's records and compact lines, ranked and cut by what the
/// measurements on LoCoMo's tuning conversations and the multilingual support set supported
/// (docs/benchmarks.md, "Retrieval"). A record passes on meaning when its similarity stands out
/// from what the caller may see (`cut_standout`) above a low floor (`standout_floor`; with too
/// few candidates to stand out from, the model's threshold decides), or on strong words; the caller's own records weigh a little more (`subject_boost`); records of
/// a conversation or document lift their neighbours (`neighbour_weight`); the budget is where
/// another 100 tokens stopped adding a point of recall, and no item cap or relative cut stops a
/// broad question short. The standout rule and the floor are calibrated on the default model's
/// centered scores; without language centering v4 keeps the model's own threshold and no
/// standout rule until they are set.
fn v4(centered: bool) -> ReleaseConfig {
    ReleaseConfig {
        schema_versions: Some(vec!["v1".into()]),
        standout_floor: centered.then_some(V4_FLOOR),
        budget_tokens: Some(V4_BUDGET_TOKENS),
        max_items: Some(V4_MAX_ITEMS),
        lexical_weight: Some(V4_LEXICAL_WEIGHT),
        cut_standout: centered.then_some(V4_STANDOUT),
        subject_boost: Some(V4_SUBJECT_BOOST),
        neighbour_weight: Some(V4_NEIGHBOUR_WEIGHT),
        ..ReleaseConfig::default()
    }
}

/// `v4`'s standout floor: no record passes on meaning below this similarity, however it stands
/// out.
pub const V4_FLOOR: f32 = 0.10;
/// `v4`'s standout rule: one standard deviation above the mean of the caller's candidates.
pub const V4_STANDOUT: f32 = 1.0;
/// `v4`'s boost of the caller's own records.
pub const V4_SUBJECT_BOOST: f32 = 0.1;
/// `v4`'s neighbour weight.
pub const V4_NEIGHBOUR_WEIGHT: f32 = 0.5;
/// `v4`'s lexical weight beside the similarity.
pub const V4_LEXICAL_WEIGHT: f32 = 1.5;
/// `v4`'s record budget in tokens: a 1,000-token block less its 81 of contract and tags, the
/// point of the tuning curve past which 100 more tokens add under a point of recall.
pub const V4_BUDGET_TOKENS: usize = 919;
/// `v4`'s item cap: bounds a block of very short records; the budget decides before it.
pub const V4_MAX_ITEMS: usize = 64;

/// A release's tool settings: the checked values the config holds, the defaults for the rest.
fn tool_settings(r: &ReleaseConfig) -> ToolSettings {
    let defaults = ToolSettings::default();
    ToolSettings {
        level: match r.memory_tools {
            None => defaults.level,
            Some(ToolsSetting::Off) => Level::Off,
            Some(ToolsSetting::Read) => Level::Read,
            Some(ToolsSetting::Write) => Level::Write,
        },
        agent_writes: match r.agent_writes {
            None | Some(AgentWritesSetting::Active) => Status::Active,
            Some(AgentWritesSetting::Proposed) => Status::Proposed,
        },
        agent_types: r.agent_types.clone().unwrap_or(defaults.agent_types),
        max_rounds: r.max_tool_rounds.unwrap_or(defaults.max_rounds),
        time_budget: r.tool_time_budget.unwrap_or(defaults.time_budget),
    }
}

fn query_rule(raw: QueryConfig) -> QueryRule {
    let defaults = QueryRule::default();
    QueryRule {
        harness_tags: raw.harness_tags.unwrap_or(defaults.harness_tags),
        unwrap_tags: raw.unwrap_tags.unwrap_or(defaults.unwrap_tags),
        follow_up_words: raw.follow_up_words.unwrap_or(defaults.follow_up_words),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ConfigFlags;

    /// The release tables memgate.example.toml spells out load to exactly the built-in releases.
    #[test]
    fn the_example_files_releases_are_the_built_in_ones() {
        let example = ConfigFlags {
            config: Some(concat!(env!("CARGO_MANIFEST_DIR"), "/memgate.example.toml").into()),
            ..ConfigFlags::default()
        };
        let templates = Templates::builtin_with(None).unwrap();
        let load = |flags: &ConfigFlags| {
            let config = Config::load(flags, |_| None).unwrap();
            format!("{:#?}", load_releases(&config, &templates).unwrap())
        };
        assert_eq!(load(&example), load(&ConfigFlags::default()));
    }
}
