//! The rule on its own, without a store: what each kind of writer may write, by generated cases.
//! The same rule through the real write surfaces (tools, the memory tool, the observer) on a real
//! store is tested in tests/integration/trusted_writes.rs.

use super::*;
use crate::record::{OPEN_END_MS, Provenance, Record, Status, WriterKind};
use proptest::prelude::*;
use serde_json::{Map, json};

fn envelope(
    record_type: &str,
    scope: &str,
    priority: u8,
    content: Value,
    status: Option<Status>,
) -> Envelope {
    Envelope {
        id: None,
        record_type: record_type.to_owned(),
        schema_version: "v1".to_owned(),
        scope: vec![scope.to_owned()],
        valid_from_ms: 0,
        valid_until_ms: OPEN_END_MS,
        priority,
        key: None,
        aliases: Vec::new(),
        content,
        metadata: Map::new(),
        status,
    }
}

fn agent<'a>(types: &'a [String], write_any: bool) -> Writer<'a> {
    Writer {
        actor: "agent:k1",
        author: Some("agent:k1"),
        provenance: Provenance::new(WriterKind::Agent, Some("key:k1".into())),
        write_any,
        bounds: Some(Bounds { scope: "user:alice", types }),
        claim: None,
    }
}

fn types() -> Vec<String> {
    AGENT_TYPES.map(str::to_owned).to_vec()
}

fn record(author: Option<&str>, record_type: &str, status: Status, content: Value) -> Record {
    let mut record = Record::test_fact("r1", content);
    record.scope = vec!["user:alice".into()];
    record.author = author.map(str::to_owned);
    record.record_type = record_type.to_owned();
    record.status = status;
    record
}

fn paths(result: Result<(), Vec<Problem>>) -> Vec<String> {
    result.err().unwrap_or_default().into_iter().map(|p| p.path).collect()
}

#[test]
fn an_agent_writes_its_types_into_its_scope_and_nothing_that_acts() {
    let types = types();
    let writer = agent(&types, false);
    let fact = json!({"statement": "likes tea"});
    assert_eq!(admit(&writer, &envelope("fact", "user:alice", 4, fact.clone(), None), None), Ok(()));
    assert_eq!(
        paths(admit(&writer, &envelope("internal_sop", "user:alice", 3, fact.clone(), None), None)),
        ["$.type"]
    );
    assert_eq!(
        paths(admit(&writer, &envelope("fact", "user:bob", 3, fact.clone(), None), None)),
        ["$.scope"]
    );
    assert_eq!(
        paths(admit(&writer, &envelope("fact", "user:alice", 5, fact.clone(), None), None)),
        ["$.priority"]
    );
    let acting =
        json!({"statement": "x", "trigger_conditions": [], "actions": [], "trigger_cooldown_seconds": 0});
    assert_eq!(
        paths(admit(&writer, &envelope("fact", "user:alice", 3, acting, None), None)),
        ["$.content.trigger_conditions", "$.content.actions", "$.content.trigger_cooldown_seconds"]
    );
    assert_eq!(
        paths(admit(&writer, &envelope("fact", "user:alice", 3, fact, Some(Status::Archived)), None)),
        ["$.status"]
    );
}

#[test]
fn an_operator_is_bounded_by_the_content_checks_alone() {
    let operator = Writer::operator("ops", Some("admin:ops"), WriterKind::Operator);
    let acting = json!({"title": "refunds", "trigger_conditions": [], "actions": []});
    assert_eq!(admit(&operator, &envelope("internal_sop", "public", 5, acting, None), None), Ok(()));
    let current = record(Some("agent:k1"), "fact", Status::Archived, json!({"statement": "x"}));
    let next = envelope("fact", "user:alice", 3, json!({"statement": "y"}), Some(Status::Active));
    assert_eq!(admit(&operator, &next, Some(&current)), Ok(()));
}

#[test]
fn no_agent_changes_an_operators_record_even_with_write_any() {
    let types = types();
    let trusted = agent(&types, true);
    let next = envelope("fact", "user:alice", 3, json!({"statement": "refunds are unlimited"}), None);
    for author in [None, Some("admin:ops"), Some("console:ana")] {
        let current = record(author, "fact", Status::Active, json!({"statement": "refunds within 30 days"}));
        assert_eq!(paths(admit(&trusted, &next, Some(&current))), ["$"], "{author:?}");
        assert!(may_delete(&trusted, &current).is_err(), "{author:?}");
    }
    // Another agent's record in the writer's own scope it may change, holding write_any.
    let current = record(Some("agent:k2"), "fact", Status::Active, json!({"statement": "x"}));
    assert_eq!(admit(&trusted, &next, Some(&current)), Ok(()));
    assert!(admit(&agent(&types, false), &next, Some(&current)).is_err());
    // Outside its scope, nothing.
    let mut elsewhere = current.clone();
    elsewhere.scope = vec!["public".into()];
    assert!(admit(&trusted, &next, Some(&elsewhere)).is_err());
    assert!(may_delete(&trusted, &elsewhere).is_err());
}

#[test]
fn a_narrowed_release_narrows_the_types() {
    let types = vec!["preference".to_owned()];
    let writer = agent(&types, false);
    let fact = envelope("fact", "user:alice", 3, json!({"statement": "x"}), None);
    assert_eq!(paths(admit(&writer, &fact, None)), ["$.type"]);
}

proptest! {
    /// Over generated writers, records and next versions: a bounded writer's write is admitted
    /// only when it stays in its scope and types, below priority 5, carries no action field, and
    /// lands on no record it may not change (another's without write_any, one that acts, one of
    /// another type, one an operator withdrew).
    #[test]
    fn a_bounded_writer_is_admitted_only_within_its_bounds(
        write_any in any::<bool>(),
        record_type in prop::sample::select(vec!["fact", "task", "internal_sop", "customer_profile"]),
        scope in prop::sample::select(vec!["user:alice", "user:bob", "public", "agent:k1"]),
        priority in 1u8..=5,
        action in prop::option::of(prop::sample::select(ACTION_FIELDS.to_vec())),
        status in prop::option::of(prop::sample::select(vec![Status::Active, Status::Proposed, Status::Paused, Status::Archived, Status::Dormant])),
        current in prop::option::of((
            prop::sample::select(vec![Some("agent:k1"), Some("agent:k2"), Some("admin:ops"), Some("observer"), None]),
            prop::sample::select(vec!["fact", "task", "internal_sop"]),
            prop::sample::select(vec![Status::Active, Status::Proposed, Status::Paused, Status::Archived, Status::Dormant]),
            any::<bool>(),
        )),
    ) {
        let types = types();
        let writer = agent(&types, write_any);
        let mut content = json!({"statement": "x"});
        if let Some(field) = action {
            content[field] = json!([]);
        }
        let next = envelope(record_type, scope, priority, content, status);
        let current = current.map(|(author, current_type, current_status, acts)| {
            let mut content = json!({"statement": "old"});
            if acts {
                content["actions"] = json!([]);
            }
            record(author, current_type, current_status, content)
        });
        let within = scope == "user:alice"
            && AGENT_TYPES.contains(&record_type)
            && priority <= AGENT_MAX_PRIORITY
            && action.is_none()
            && !matches!(status, Some(Status::Paused | Status::Archived))
            && (status != Some(Status::Dormant) || current.as_ref().is_some_and(|c| c.status == Status::Dormant));
        let may_take = current.as_ref().is_none_or(|c| {
            !matches!(c.author.as_deref(), None | Some("admin:ops"))
                && (write_any || c.author.as_deref() == Some("agent:k1"))
                && c.content.get("actions").is_none()
                && c.record_type == record_type
                && !matches!(c.status, Status::Paused | Status::Archived)
        });
        prop_assert_eq!(admit(&writer, &next, current.as_ref()).is_ok(), within && may_take);
    }
}
