//! Built-in schemas against realistic content, the v1 → v2 changes, operator schema directories,
//! and the problems `validate` reports.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use serde_json::json;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

fn builtin() -> SchemaSet {
    match SchemaSet::load(None) {
        Ok(set) => set,
        Err(error) => panic!("built-in schemas must load: {error}"),
    }
}

/// A scratch directory under the system temp dir, removed when dropped.
struct ScratchDir(PathBuf);

impl ScratchDir {
    fn new() -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let path = std::env::temp_dir().join(format!(
            "memgate-schemas-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&path).unwrap();
        ScratchDir(path)
    }

    fn write(&self, relative: &str, text: &str) -> PathBuf {
        let path = self.0.join(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        path
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn problems(set: &SchemaSet, version: &str, record_type: &str, content: Value) -> Vec<SchemaProblem> {
    set.validate(version, record_type, &content, "$.content").err().unwrap_or_default()
}

fn paths(problems: &[SchemaProblem]) -> Vec<&str> {
    problems.iter().map(|p| p.path.as_str()).collect()
}

/// One realistic record per type that every version accepts, and a broken copy with the path
/// that must be blamed. customer_profile and internal_sop differ between versions; see below.
fn shared_examples() -> Vec<(&'static str, Value, Value, &'static str)> {
    vec![
        (
            "product_spec",
            json!({
                "sku": "RTR-AX3000-BLK",
                "name": "AX3000 Wi-Fi 6 Router",
                "category": "networking",
                "status": "active",
                "description": "Dual-band Wi-Fi 6 router with four gigabit LAN ports.",
                "price": {"amount": 129.99, "currency": "USD"},
                "warranty_months": 24,
                "attributes": {"wifi": "802.11ax", "lan_ports": 4, "mesh": true},
                "compatible_with": ["MESH-NODE-2"],
                "known_issues": ["5 GHz drops on firmware 1.0.3; update to 1.0.4"],
            }),
            json!({"sku": "RTR-AX3000-BLK", "name": "AX3000", "price": {"amount": 129.99, "currency": "usd"}}),
            "$.content.price.currency",
        ),
        (
            "conversation_summary",
            json!({
                "summary": "Customer asked to move delivery of ORD-2024-0615 to next week; agreed.",
                "conversation_id": "550e8400-e29b-41d4-a716-446655440000",
                "channel": "chat",
                "occurred_at": "2024-06-15T09:30:00Z",
                "topics": ["delivery", "下周发货"],
                "outcome": "resolved",
                "sentiment": "positive",
                "follow_up": "Confirm the new date by email on Monday.",
            }),
            json!({"summary": "Moved delivery.", "occurred_at": "yesterday"}),
            "$.content.occurred_at",
        ),
        (
            "fact",
            json!({
                "statement": "Acme GmbH is VAT-registered in Germany.",
                "subject": "customer:u-789",
                "source": "CRM_v4.2",
                "confidence": 0.9,
            }),
            json!({"statement": "Acme GmbH is VAT-registered in Germany.", "confidence": 1.5}),
            "$.content.confidence",
        ),
        (
            "preference",
            json!({
                "topic": "delivery",
                "preference": "Leave parcels at the front desk.",
                "strength": "prefer",
                "reason": "Works night shifts.",
            }),
            json!({"topic": "delivery", "preference": "front desk", "strength": "very"}),
            "$.content.strength",
        ),
        (
            "decision",
            json!({
                "title": "Free returns for premium tier",
                "decision": "Premium customers return any item within 60 days at no cost.",
                "rationale": "Churn among premium customers fell when returns were free in the pilot.",
                "alternatives_considered": ["45 days", "store credit only"],
                "decided_by": "support-leads",
                "decided_on": "2024-05-20",
                "status": "accepted",
            }),
            json!({"title": "Free returns", "decision": "Yes.", "approved": true}),
            "$.content.approved",
        ),
        (
            "task",
            json!({
                "title": "Call back about the replacement router",
                "status": "open",
                "assignee": "agent:li.na",
                "due_date": "2024-06-20",
                "reference": "ORD-2024-0615",
                "checklist": [{"item": "Confirm address", "done": true}, {"item": "Ship replacement"}],
            }),
            json!({"title": "Call back", "status": "open", "checklist": [{"item": "Confirm address"}, {"done": false}]}),
            "$.content.checklist[1].item",
        ),
    ]
}

fn customer_profile_v1() -> Value {
    json!({
        "name": "张伟",
        "preferred_language": "zh-CN",
        "timezone": "Asia/Shanghai",
        "customer_since": "2021-03-14",
        "preferred_channel": "chat",
        "special_requests": ["下周发货", "请用中文回复"],
    })
}

fn customer_profile_v2() -> Value {
    json!({
        "name": {"display_name": "张伟", "given_name": "伟", "family_name": "张"},
        "preferred_language": "zh-CN",
        "tier": "premium",
        "contact": {"email": "zhang.wei@example.com", "phone": "+8613800138000", "preferred_channel": "chat"},
        "special_requests": ["下周发货"],
    })
}

fn internal_sop_v1() -> Value {
    json!({
        "title": "Refund process",
        "purpose": "Refund orders that arrived damaged.",
        "steps": "1. Verify the order in the OMS.\n2. Ask for a photo of the damage.\n3. Refund to the original payment method.",
        "owner_team": "billing",
        "escalation_contact": "team:billing-leads",
        "effective_date": "2024-06-01",
    })
}

fn internal_sop_v2() -> Value {
    json!({
        "title": "Refund process",
        "applies_to": ["tier:premium", "region:EU"],
        "steps": [
            {"action": "Verify the order in the OMS.", "owner": "agent"},
            {"action": "Ask for a photo of the damage.", "owner": "agent", "max_minutes": 60},
            {"action": "Approve the refund.", "owner": "team:billing", "condition": "amount over 500 EUR"},
        ],
        "escalation_contact": "team:billing-leads",
    })
}

// ---------------------------------------------------------------------------------------------
// The built-in set.

#[test]
fn built_in_versions_and_types() {
    let set = builtin();
    assert_eq!(set.versions(), ["v1", "v2"]);
    let all = [
        "conversation_summary",
        "customer_profile",
        "decision",
        "fact",
        "internal_sop",
        "preference",
        "product_spec",
        "task",
    ];
    assert_eq!(set.types("v1"), all);
    assert_eq!(set.types("v2"), all);
    assert!(set.types("v9").is_empty());
    assert_eq!(set.origin("v1", "fact"), Some("built-in schemas/v1/fact.json"));
}

#[test]
fn every_built_in_schema_accepts_a_realistic_record_and_blames_the_right_path() {
    let set = builtin();
    for version in ["v1", "v2"] {
        for (record_type, good, bad, blamed) in shared_examples() {
            assert_eq!(
                set.validate(version, record_type, &good, "$.content"),
                Ok(()),
                "{version} {record_type}"
            );
            let found = problems(&set, version, record_type, bad);
            assert_eq!(paths(&found), [blamed], "{version} {record_type}: {found:?}");
            assert!(found.iter().all(|p| p.kind == "schema_violation"));
        }
    }
    assert_eq!(set.validate("v1", "customer_profile", &customer_profile_v1(), "$.content"), Ok(()));
    assert_eq!(set.validate("v2", "customer_profile", &customer_profile_v2(), "$.content"), Ok(()));
    assert_eq!(set.validate("v1", "internal_sop", &internal_sop_v1(), "$.content"), Ok(()));
    assert_eq!(set.validate("v2", "internal_sop", &internal_sop_v2(), "$.content"), Ok(()));

    let bad_language = json!({"name": "张伟", "preferred_language": "Chinese"});
    let found = problems(&set, "v1", "customer_profile", bad_language);
    assert_eq!(paths(&found), ["$.content.preferred_language"]);
    assert!(found[0].message.contains("does not match"), "{found:?}");
}

#[test]
fn messages_say_what_is_wrong() {
    let set = builtin();
    let content = json!({
        "preferred_language": 42,
        "preferred_langauge": "en",
        "special_requests": ["ok", ""],
        "notes": "x".repeat(2001),
    });
    let found = problems(&set, "v1", "customer_profile", content);
    let by_path: BTreeMap<&str, &str> = found.iter().map(|p| (p.path.as_str(), p.message.as_str())).collect();
    assert_eq!(by_path["$.content.name"], "required field `name` is missing");
    assert!(by_path["$.content.preferred_language"].contains(r#"not of type "string""#));
    assert!(by_path["$.content.preferred_langauge"].contains("not part of the customer_profile v1 schema"));
    assert!(by_path["$.content.special_requests[1]"].contains("shorter than 1 character"));
    assert!(by_path["$.content.notes"].contains("longer than 2000 characters"));
    assert_eq!(found.len(), 5, "{found:?}");
}

#[test]
fn messages_do_not_echo_content() {
    let set = builtin();
    let content = json!({"name": "Ana", "notes": format!("card 4111 1111 1111 1111 {}", "x".repeat(2000))});
    let found = problems(&set, "v1", "customer_profile", content);
    assert_eq!(paths(&found), ["$.content.notes"]);
    assert!(!found[0].message.contains("4111"));
}

#[test]
fn paths_follow_base_and_odd_keys() {
    let set = builtin();
    let content = json!({"name": "Ana", "名字": "x", "0": 1});
    let found = set.validate("v1", "customer_profile", &content, "$.records[3].content").err().unwrap();
    assert_eq!(paths(&found), [r#"$.records[3].content["0"]"#, r#"$.records[3].content["名字"]"#]);
}

// ---------------------------------------------------------------------------------------------
// v1 → v2, as docs/schemas.md describes it.

#[test]
fn customer_profile_v2_structures_the_name_and_adds_tier_and_contact() {
    let set = builtin();
    // A v1 profile is not a v2 profile: `name` is now an object, preferred_language required,
    // preferred_channel lives under contact.
    let found =
        problems(&set, "v2", "customer_profile", json!({"name": "张伟", "preferred_channel": "chat"}));
    assert_eq!(
        paths(&found),
        ["$.content.name", "$.content.preferred_channel", "$.content.preferred_language"],
        "{found:?}"
    );
    // And v2's new fields are unknown to v1.
    let found = problems(&set, "v1", "customer_profile", customer_profile_v2());
    assert_eq!(paths(&found), ["$.content.contact", "$.content.name", "$.content.tier"], "{found:?}");

    let mut bad = customer_profile_v2();
    bad["contact"]["email"] = json!("zhang.wei-at-example.com");
    bad["contact"]["phone"] = json!("138 0013 8000");
    bad["tier"] = json!("gold");
    bad["name"] = json!({"given_name": "伟"});
    let found = problems(&set, "v2", "customer_profile", bad);
    let mut got = paths(&found);
    got.sort();
    assert_eq!(
        got,
        [
            "$.content.contact.email",
            "$.content.contact.phone",
            "$.content.name.display_name",
            "$.content.tier",
        ],
        "{found:?}"
    );
    assert!(found.iter().any(|p| p.message.contains(r#"is not a "email""#)), "{found:?}");
}

#[test]
fn internal_sop_v2_orders_owned_steps_and_adds_applies_to() {
    let set = builtin();
    let found = problems(&set, "v2", "internal_sop", internal_sop_v1());
    let mut got = paths(&found);
    got.sort();
    assert_eq!(got, ["$.content.applies_to", "$.content.steps"], "{found:?}");

    let found = problems(&set, "v1", "internal_sop", internal_sop_v2());
    let mut got = paths(&found);
    got.sort();
    assert_eq!(got, ["$.content.applies_to", "$.content.steps"], "{found:?}");

    let mut bad = internal_sop_v2();
    bad["steps"][1] = json!({"action": "Ask for a photo."});
    bad["applies_to"] = json!(["premium customers"]);
    let found = problems(&set, "v2", "internal_sop", bad);
    let mut got = paths(&found);
    got.sort();
    assert_eq!(got, ["$.content.applies_to[0]", "$.content.steps[1].owner"], "{found:?}");

    let mut empty = internal_sop_v2();
    empty["steps"] = json!([]);
    empty["applies_to"] = json!(["all"]);
    assert_eq!(paths(&problems(&set, "v2", "internal_sop", empty)), ["$.content.steps"]);
}

#[test]
fn unchanged_types_read_the_same_in_both_versions() {
    let set = builtin();
    for (record_type, good, _, _) in shared_examples() {
        let v1 = set.validate("v1", record_type, &good, "$.content");
        assert_eq!(v1, set.validate("v2", record_type, &good, "$.content"), "{record_type}");
    }
}

// ---------------------------------------------------------------------------------------------
// Unknown versions and types.

#[test]
fn unknown_version_and_type_are_named_at_the_envelope() {
    let set = builtin();
    let found = problems(&set, "v9", "customer_profile", json!({}));
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].path, "$.schema_version");
    assert_eq!(found[0].kind, "unknown_schema_version");
    assert!(found[0].message.contains(r#""v9""#) && found[0].message.contains("v1, v2"), "{found:?}");

    let found = problems(&set, "v1", "order_note", json!({}));
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].path, "$.type");
    assert_eq!(found[0].kind, "unknown_type");
    assert!(found[0].message.contains(r#""order_note""#) && found[0].message.contains("customer_profile"));

    let nested = set.validate("v1", "nope", &json!({}), "$.items[2].content").err().unwrap();
    assert_eq!(nested[0].path, "$.items[2].type");
    let root = set.validate("v1", "nope", &json!({}), "$").err().unwrap();
    assert_eq!(root[0].path, "$");

    let long = "x".repeat(500);
    let found = problems(&set, &long, "fact", json!({}));
    assert!(found[0].message.len() < 200, "{}", found[0].message);
}

#[test]
fn problems_serialize_as_the_422_carries_them() {
    let problem = SchemaProblem::new("$.content.name".to_owned(), "schema_violation", "m".to_owned());
    assert_eq!(
        serde_json::to_value(&problem).unwrap(),
        json!({"path": "$.content.name", "kind": "schema_violation", "message": "m"})
    );
}

// ---------------------------------------------------------------------------------------------
// Operator schema directories.

const ORDER_NOTE: &str = r#"{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "required": ["order_id", "note"],
  "additionalProperties": false,
  "properties": {
    "order_id": {"type": "string", "pattern": "^ORD-[0-9]{4}-[0-9]{4}$"},
    "note": {"type": "string", "maxLength": 500}
  }
}"#;

#[test]
fn a_schema_dir_adds_types_and_versions() {
    let dir = ScratchDir::new();
    let file = dir.write("v1/order_note.json", ORDER_NOTE);
    dir.write("v3/order_note.json", ORDER_NOTE);
    dir.write("README.md", "not a schema");
    dir.write("v1/NOTES.txt", "not a schema");
    dir.write("v1/.order_note.json.swp", "{");
    let set = SchemaSet::load(Some(&dir.0)).unwrap();
    assert_eq!(set.versions(), ["v1", "v2", "v3"]);
    assert!(set.types("v1").contains(&"order_note".to_owned()));
    assert_eq!(set.types("v1").len(), 9);
    assert_eq!(set.types("v3"), ["order_note"]);
    assert_eq!(set.origin("v1", "order_note"), Some(file.display().to_string().as_str()));

    let good = json!({"order_id": "ORD-2024-0615", "note": "Customer asked for gift wrap."});
    assert_eq!(set.validate("v1", "order_note", &good, "$.content"), Ok(()));
    let bad = json!({"order_id": "2024-0615", "note": "gift wrap"});
    assert_eq!(paths(&problems(&set, "v1", "order_note", bad)), ["$.content.order_id"]);
    // Built-ins are still there.
    assert_eq!(set.validate("v1", "customer_profile", &customer_profile_v1(), "$.content"), Ok(()));
}

#[test]
fn a_schema_dir_file_overrides_the_built_in() {
    let dir = ScratchDir::new();
    let file = dir.write(
        "v1/fact.json",
        r#"{"type": "object", "required": ["statement", "source"], "properties": {"statement": {"type": "string"}, "source": {"type": "string"}}}"#,
    );
    let set = SchemaSet::load(Some(&dir.0)).unwrap();
    assert_eq!(set.origin("v1", "fact"), Some(file.display().to_string().as_str()));
    let found = problems(&set, "v1", "fact", json!({"statement": "Acme is in Berlin."}));
    assert_eq!(paths(&found), ["$.content.source"]);
    // Only that version's file was replaced.
    assert_eq!(set.validate("v2", "fact", &json!({"statement": "Acme is in Berlin."}), "$.content"), Ok(()));
}

#[test]
fn a_missing_schema_dir_adds_nothing() {
    let missing = std::env::temp_dir().join("memgate-schemas-does-not-exist-7f3a");
    let set = SchemaSet::load(Some(&missing)).unwrap();
    assert_eq!(set.versions(), ["v1", "v2"]);
    assert_eq!(set.types("v1").len(), 8);
}

fn load_error(relative: &str, text: &str) -> (String, String) {
    let dir = ScratchDir::new();
    let file = dir.write(relative, text);
    match SchemaSet::load(Some(&dir.0)) {
        Ok(_) => panic!("{relative} should not load"),
        Err(error) => (error.to_string(), file.display().to_string()),
    }
}

#[test]
fn a_broken_schema_fails_load_naming_the_file() {
    let cases = [
        ("v1/order_note.json", "{\"type\": \"object\",", "is not valid JSON"),
        ("v1/order_note.json", r#"{"type": "strin"}"#, "does not compile"),
        ("v1/order_note.json", r#"{"properties": {"n": {"maxLength": -1}}}"#, "does not compile"),
        ("v1/order_note.json", r#"{"properties": {"d": {"format": "dat"}}}"#, "dat"),
        (
            "v1/order_note.json",
            r#"{"$ref": "https://schemas.example.com/order_note.json"}"#,
            "does not compile",
        ),
        ("v1/order_note.json", r#"{"$ref": "common.json"}"#, "does not compile"),
        (
            "v1/order_note.json",
            r#"{"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"}"#,
            "draft 2020-12",
        ),
        ("v1/order_note.json", "[]", "one JSON object"),
        ("v1/Order-Note.json", "{}", "file name is the record type"),
        ("v1/fact.json", r#"{"required": "statement"}"#, "does not compile"),
    ];
    for (relative, text, expected) in cases {
        let (message, file) = load_error(relative, text);
        assert!(message.contains(&file), "{relative}: {message}");
        assert!(message.contains(expected), "{relative} {text}: {message}");
    }
}

#[test]
fn a_compile_error_says_where_in_the_schema() {
    let (message, _) = load_error("v1/order_note.json", r#"{"properties": {"note": {"type": "strin"}}}"#);
    assert!(message.contains("/properties/note/type"), "{message}");
}

#[test]
fn local_refs_within_a_file_work_offline() {
    let dir = ScratchDir::new();
    dir.write(
        "v1/address_book.json",
        r##"{
          "type": "object",
          "properties": {"home": {"$ref": "#/$defs/address"}, "work": {"$ref": "#/$defs/address"}},
          "$defs": {"address": {"type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}}}
        }"##,
    );
    let set = SchemaSet::load(Some(&dir.0)).unwrap();
    let found = problems(&set, "v1", "address_book", json!({"home": {"city": "Berlin"}, "work": {}}));
    assert_eq!(paths(&found), ["$.content.work.city"]);
}
