//! A release: a named version of the memory rules — the schema versions it reads, its template and
//! contract (`templates/<name>/`), and its funnel settings. Built-in `v1` and `v2` are the defaults;
//! `[releases.<name>]` in the config overrides or adds.

use crate::config::Config;
use crate::config::releases::{PlacementSetting, QueryConfig, ReleaseConfig, RetrievalSetting};
use crate::funnel::semantic::DEFAULT_PROBES;
use crate::funnel::{FunnelSettings, Retrieval};
use crate::inject::{Placement, Templates};
use crate::query::QueryRule;
use std::collections::BTreeMap;

#[derive(Debug, Clone)]
pub struct Release {
    pub name: String,
    pub funnel: FunnelSettings,
    pub placement: Placement,
    /// Inject an empty block when nothing survives (some teams want the contract every time).
    pub empty_block: bool,
    /// How the person's words are found in a request (`query`).
    pub query: QueryRule,
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
                name,
                placement,
                empty_block: r.empty_block.unwrap_or(false),
            },
        );
    }
    Ok(releases)
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
