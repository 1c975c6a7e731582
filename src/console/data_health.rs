//! `GET /admin/v1/health/data` (`console/API.md` §3.3): the state of a tenant's records, as the
//! seed's monitoring panel lists it — content filled in, not expired, still valid against the
//! schema now loaded (what a schema change broke), ever injected.
//!
//! Computed when asked. `data_health` takes the records in hand (a test's, or the in-memory
//! index's); `data_health_from_store`, what the endpoint answers, gives the same answer without
//! holding the tenant's records: the database counts by type and status in one aggregate query,
//! and lists the first never-injected ids itself; only the two figures that need a record's
//! content (non-empty, still valid against its schema) read it, for live records alone, a
//! thousand at a time, keeping no more than the 50 failures listed. The cost is one schema
//! validation per live record: at 100,000 records, a few hundred milliseconds of CPU, measured in
//! `console_bench`.

use crate::clock::format_ms;
use crate::memory::checks::schemas::{SchemaProblem, SchemaSet};
use crate::record::{Record, Status};
use crate::store::{Store, StoreError};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;

/// At most this many schema failures are listed (all are counted).
const MAX_FAILURES_LISTED: usize = 50;
/// At most this many never-injected ids are listed.
const MAX_NEVER_INJECTED_SAMPLE: usize = 20;
/// Live records' contents read at a time.
const CONTENT_PAGE: u32 = 1000;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct StatusCounts {
    pub total: u64,
    pub active: u64,
    pub paused: u64,
    pub archived: u64,
    /// Agents' writes awaiting review.
    pub proposed: u64,
    /// Unused for their type's dormancy period: not injected, still found by the tools.
    pub dormant: u64,
}

impl StatusCounts {
    fn add(&mut self, status: Status, count: u64) {
        self.total += count;
        match status {
            Status::Active => self.active += count,
            Status::Paused => self.paused += count,
            Status::Archived => self.archived += count,
            Status::Proposed => self.proposed += count,
            Status::Dormant => self.dormant += count,
        }
    }
}

/// What both ways of computing data health count, before it is put into its answer.
struct Tally {
    counts: StatusCounts,
    non_empty: u64,
    unexpired: u64,
    not_yet: u64,
    failure_count: u64,
    failures: Vec<SchemaFailure>,
    never_count: u64,
    /// The ids of live records never injected, at most `MAX_NEVER_INJECTED_SAMPLE` of them.
    never: Vec<String>,
    by_type: BTreeMap<String, TypeHealth>,
}

impl Tally {
    /// The answer: the first failures by id, the shares of the live records.
    fn into_health(mut self, now_ms: i64) -> DataHealth {
        self.failures.sort_by(|a, b| a.id.cmp(&b.id));
        self.failures.truncate(MAX_FAILURES_LISTED);
        let live = self.counts.active;
        DataHealth {
            computed_at: format_ms(now_ms),
            records: self.counts,
            live,
            non_empty_content: Share { count: self.non_empty, share: share(self.non_empty, live) },
            future_valid_until: Share { count: self.unexpired, share: share(self.unexpired, live) },
            not_yet_valid: Count { count: self.not_yet },
            schema_failures: SchemaFailures { count: self.failure_count, items: self.failures },
            never_injected: NeverInjected {
                count: self.never_count,
                share: share(self.never_count, live),
                sample: self.never,
            },
            by_type: self.by_type.into_values().collect(),
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Share {
    pub count: u64,
    /// count / live; 0 without live records.
    pub share: f64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Count {
    pub count: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SchemaFailure {
    pub id: String,
    #[serde(rename = "type")]
    pub record_type: String,
    pub schema_version: String,
    pub problems: Vec<SchemaProblem>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SchemaFailures {
    pub count: u64,
    /// At most 50, by id.
    pub items: Vec<SchemaFailure>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct NeverInjected {
    pub count: u64,
    pub share: f64,
    /// At most 20 ids, sorted.
    pub sample: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TypeHealth {
    #[serde(rename = "type")]
    pub record_type: String,
    pub live: u64,
    pub never_injected: u64,
    pub schema_failures: u64,
}

/// The answer of `GET /admin/v1/health/data`. Every share is over `live` (records `active`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DataHealth {
    pub computed_at: String,
    pub records: StatusCounts,
    pub live: u64,
    /// Live records whose content has at least one non-empty value.
    pub non_empty_content: Share,
    /// Live records not expired (`valid_until` after now).
    pub future_valid_until: Share,
    /// Live records whose `valid_from` is still to come.
    pub not_yet_valid: Count,
    /// Live records whose content fails the schema now loaded for their version and type.
    pub schema_failures: SchemaFailures,
    /// Live records never injected (`access_count` 0).
    pub never_injected: NeverInjected,
    /// By type, sorted by type.
    pub by_type: Vec<TypeHealth>,
}

/// Whether a content value holds anything: a non-blank string, a number, a boolean, or an array or
/// object holding such. `{}`, `""`, `"  "`, `[]`, `null` and nestings of them are empty.
pub fn has_content(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(_) | Value::Number(_) => true,
        Value::String(text) => !text.trim().is_empty(),
        Value::Array(items) => items.iter().any(has_content),
        Value::Object(map) => map.values().any(has_content),
    }
}

fn share(count: u64, of: u64) -> f64 {
    if of == 0 { 0.0 } else { count as f64 / of as f64 }
}

/// The data health of `records` (one tenant's, any status) at `now_ms`, against `schemas`.
pub fn data_health<'a>(
    records: impl IntoIterator<Item = &'a Record>,
    schemas: &SchemaSet,
    now_ms: i64,
) -> DataHealth {
    let mut counts = StatusCounts::default();
    let (mut non_empty, mut unexpired, mut not_yet) = (0u64, 0u64, 0u64);
    let mut failures: Vec<SchemaFailure> = Vec::new();
    let mut failure_count = 0u64;
    let mut never: Vec<String> = Vec::new();
    let mut by_type: BTreeMap<String, TypeHealth> = BTreeMap::new();
    for record in records {
        counts.add(record.status, 1);
        if record.status != Status::Active {
            continue;
        }
        let of_type = by_type.entry(record.record_type.clone()).or_insert_with(|| TypeHealth {
            record_type: record.record_type.clone(),
            ..TypeHealth::default()
        });
        of_type.live += 1;
        non_empty += u64::from(has_content(&record.content));
        unexpired += u64::from(record.valid_until_ms > now_ms);
        not_yet += u64::from(record.valid_from_ms > now_ms);
        if let Err(problems) =
            schemas.validate(&record.schema_version, &record.record_type, &record.content, "$.content")
        {
            failure_count += 1;
            of_type.schema_failures += 1;
            failures.push(SchemaFailure {
                id: record.id.clone(),
                record_type: record.record_type.clone(),
                schema_version: record.schema_version.clone(),
                problems,
            });
        }
        if record.access_count == 0 {
            of_type.never_injected += 1;
            never.push(record.id.clone());
        }
    }
    let never_count = never.len() as u64;
    never.sort_unstable();
    never.truncate(MAX_NEVER_INJECTED_SAMPLE);
    Tally { counts, non_empty, unexpired, not_yet, failure_count, failures, never_count, never, by_type }
        .into_health(now_ms)
}

/// `data_health` of the tenant's records in the store: the same answer, from aggregates and a
/// paged read of the live records' contents (see the module comment).
pub async fn data_health_from_store(
    store: &Store,
    tenant: &str,
    schemas: &SchemaSet,
    now_ms: i64,
) -> Result<DataHealth, StoreError> {
    let mut counts = StatusCounts::default();
    let (mut unexpired, mut not_yet, mut never_count) = (0u64, 0u64, 0u64);
    let mut by_type: BTreeMap<String, TypeHealth> = BTreeMap::new();
    for group in store.record_counts(tenant, now_ms).await? {
        counts.add(group.status, group.count);
        if group.status != Status::Active {
            continue;
        }
        unexpired += group.unexpired;
        not_yet += group.not_yet_valid;
        never_count += group.never_injected;
        let of_type = by_type.entry(group.record_type.clone()).or_insert_with(|| TypeHealth {
            record_type: group.record_type.clone(),
            ..TypeHealth::default()
        });
        of_type.live += group.count;
        of_type.never_injected += group.never_injected;
    }
    let never = store.never_injected_ids(tenant, MAX_NEVER_INJECTED_SAMPLE as u32).await?;

    let (mut non_empty, mut failure_count) = (0u64, 0u64);
    let mut failures: Vec<SchemaFailure> = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = store.live_contents(tenant, after.as_deref(), CONTENT_PAGE).await?;
        for record in &page {
            non_empty += u64::from(has_content(&record.content));
            if let Err(problems) =
                schemas.validate(&record.schema_version, &record.record_type, &record.content, "$.content")
            {
                failure_count += 1;
                if let Some(of_type) = by_type.get_mut(&record.record_type) {
                    of_type.schema_failures += 1;
                }
                failures.push(SchemaFailure {
                    id: record.id.clone(),
                    record_type: record.record_type.clone(),
                    schema_version: record.schema_version.clone(),
                    problems,
                });
                // The first 50 by id are listed: keep those, not every failure of the tenant.
                if failures.len() >= 2 * MAX_FAILURES_LISTED {
                    failures.sort_by(|a, b| a.id.cmp(&b.id));
                    failures.truncate(MAX_FAILURES_LISTED);
                }
            }
        }
        if page.len() < CONTENT_PAGE as usize {
            break;
        }
        after = page.last().map(|record| record.id.clone());
    }
    Ok(Tally { counts, non_empty, unexpired, not_yet, failure_count, failures, never_count, never, by_type }
        .into_health(now_ms))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn record(id: &str, status: Status, content: Value, valid: (i64, i64), accesses: i64) -> Record {
        Record {
            valid_from_ms: valid.0,
            valid_until_ms: valid.1,
            status,
            access_count: accesses,
            ..Record::test_fact(id, content)
        }
    }

    #[test]
    fn empty_content_is_empty_however_nested() {
        assert!(!has_content(&json!({})));
        assert!(!has_content(&json!({"a": "", "b": [], "c": {"d": ["  ", null]}})));
        assert!(has_content(&json!({"a": 0})));
        assert!(has_content(&json!({"a": {"b": [false]}})));
        assert!(has_content(&json!({"statement": "x"})));
    }

    #[test]
    fn shares_are_over_live_records() {
        let schemas = SchemaSet::load(None).unwrap();
        let now = 1_000_000;
        let records = [
            record("a", Status::Active, json!({"statement": "fine"}), (0, i64::MAX), 3),
            record("b", Status::Active, json!({"statement": "expired"}), (0, now), 0),
            record("c", Status::Active, json!({"statement": "later"}), (now + 1, i64::MAX), 0),
            // Fails the v1 fact schema: no statement, an unknown field.
            record("d", Status::Active, json!({"tier": ""}), (0, i64::MAX), 1),
            record("e", Status::Paused, json!({}), (0, 1), 0),
            record("f", Status::Archived, json!({"statement": "old"}), (0, 1), 0),
        ];
        let health = data_health(&records, &schemas, now);
        assert_eq!(
            health.records,
            StatusCounts { total: 6, active: 4, paused: 1, archived: 1, proposed: 0, dormant: 0 }
        );
        assert_eq!(health.live, 4);
        assert_eq!(health.non_empty_content, Share { count: 3, share: 0.75 });
        assert_eq!(health.future_valid_until, Share { count: 3, share: 0.75 });
        assert_eq!(health.not_yet_valid.count, 1);
        assert_eq!(health.schema_failures.count, 1);
        assert_eq!(health.schema_failures.items[0].id, "d");
        assert!(!health.schema_failures.items[0].problems.is_empty());
        assert_eq!(health.never_injected.count, 2);
        assert_eq!(health.never_injected.sample, ["b", "c"]);
        assert_eq!(health.by_type.len(), 1);
        assert_eq!(
            health.by_type[0],
            TypeHealth { record_type: "fact".into(), live: 4, never_injected: 2, schema_failures: 1 }
        );
        let empty = data_health(&[], &schemas, now);
        assert_eq!(empty.non_empty_content.share, 0.0);
    }
}
