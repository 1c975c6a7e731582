//! The tenant index's lookups against a model: whatever sequence of writes and removals, each
//! id finds its record's slot, each scope and exact term lists exactly the live records that have
//! it, and the shared names are exactly those the live records hold.

use super::{IndexedRecord, TenantIndex};
use crate::record::Record;
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

#[derive(Debug, Clone)]
enum Op {
    Write { id: u8, scope: u8, key: Option<u8>, record_type: u8 },
    Remove { id: u8 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u8..24, 0u8..4, proptest::option::of(0u8..6), 0u8..3)
            .prop_map(|(id, scope, key, record_type)| Op::Write { id, scope, key, record_type }),
        1 => (0u8..24).prop_map(|id| Op::Remove { id }),
    ]
}

/// What the model keeps of a written record: its scope, key and type.
type Model = BTreeMap<String, (String, Option<String>, String)>;

fn record(id: &str, scope: &str, key: Option<&str>, record_type: &str) -> Record {
    let mut record = Record::test_fact(id, serde_json::json!({"statement": format!("record {id}")}));
    record.scope = vec![scope.to_owned()];
    record.key = key.map(str::to_owned);
    record.record_type = record_type.to_owned();
    record
}

fn check(index: &TenantIndex, model: &Model) {
    assert_eq!(index.len(), model.len());
    for (id, (scope, key, record_type)) in model {
        let slot = index.slot_of(id).unwrap_or_else(|| panic!("{id} is not found"));
        let item = index.slots[slot as usize].as_ref().unwrap_or_else(|| panic!("{id}'s slot is empty"));
        assert_eq!(item.head.id(), id.as_str());
        assert!(item.head.has_scopes(std::slice::from_ref(scope)), "{id}'s scopes");
        assert_eq!(item.head.key(), key.as_deref());
        assert_eq!(item.head.record_type(), record_type);
    }
    for id in (0u8..24).map(|i| format!("r{i}")).filter(|id| !model.contains_key(id)) {
        assert!(index.get(&id).is_none(), "{id} was removed but is still found");
    }
    let listed = |slots: Option<super::lists::Listed>| -> BTreeSet<String> {
        slots
            .into_iter()
            .flatten()
            .map(|slot| {
                index.slots[*slot as usize].as_ref().map(|i| i.head.id().to_string()).unwrap_or_default()
            })
            .collect()
    };
    for scope in (0u8..4).map(|s| format!("user:{s}")) {
        let expected: BTreeSet<String> =
            model.iter().filter(|(_, (s, _, _))| *s == scope).map(|(id, _)| id.clone()).collect();
        assert_eq!(listed(index.by_scope.get(scope.as_str())), expected, "scope {scope}");
        assert_eq!(index.by_scope.get(scope.as_str()).is_some(), !expected.is_empty());
    }
    for key in (0u8..6).map(|k| format!("key-{k}")) {
        let expected: BTreeSet<String> = model
            .iter()
            .filter(|(_, (_, k, _))| k.as_deref() == Some(&key))
            .map(|(id, _)| id.clone())
            .collect();
        assert_eq!(listed(index.by_term.get(key.as_str())), expected, "term {key}");
    }
    let keys: BTreeSet<&String> = model.values().filter_map(|(_, k, _)| k.as_ref()).collect();
    assert_eq!(index.by_term.len(), keys.len(), "one term a key a live record holds");
    // Every record here is of tenant `t`, schema `v1` and no author: one set of names a type.
    let held: BTreeSet<(String, String, String)> =
        model.values().map(|(_, _, t)| ("t".to_owned(), t.clone(), "v1".to_owned())).collect();
    let names: BTreeSet<(String, String, String)> = index
        .names
        .iter()
        .map(|n| (n.tenant.to_string(), n.record_type.to_string(), n.schema_version.to_string()))
        .collect();
    assert_eq!(names, held, "the shared names are those of the live records");
    assert!(index.names.iter().all(|n| n.author.is_none()));
}

proptest! {
    #[test]
    fn lookups_follow_every_write_and_removal(ops in proptest::collection::vec(op(), 1..80)) {
        let mut index = TenantIndex::default();
        let mut model = Model::new();
        for op in ops {
            match op {
                Op::Write { id, scope, key, record_type } => {
                    let (id, scope) = (format!("r{id}"), format!("user:{scope}"));
                    let key = key.map(|k| format!("key-{k}"));
                    let record_type = format!("type-{record_type}");
                    let item = IndexedRecord::new(record(&id, &scope, key.as_deref(), &record_type), None);
                    index.upsert(item);
                    model.insert(id, (scope, key, record_type));
                }
                Op::Remove { id } => {
                    let id = format!("r{id}");
                    index.remove(&id);
                    model.remove(&id);
                }
            }
            check(&index, &model);
        }
    }
}

#[test]
fn a_head_fits_its_size_class() {
    // An `Arc`'s two counts, then the record: mimalloc's size classes are 112, 128, 160 bytes.
    assert!(2 * size_of::<usize>() + size_of::<IndexedRecord>() <= 128, "{}", size_of::<IndexedRecord>());
}

#[test]
fn a_head_gives_back_the_id_key_and_scopes_it_keeps_together() {
    let scopes: [&[&str]; 4] =
        [&[], &["user:7"], &["public", "team:sales"], &["user:клиент", "agent:k-1", "role:x"]];
    for key in [None, Some(""), Some("customer:u-7:profile"), Some("клиент:7")] {
        for scope in scopes {
            let mut record = record("mem-é7", "user:7", key, "customer_profile");
            record.scope = scope.iter().map(|s| (*s).to_owned()).collect();
            let head = super::RecordHead::of(&record);
            assert_eq!((head.id(), head.key()), ("mem-é7", key));
            assert_eq!(head.scopes().collect::<Vec<_>>(), scope);
            assert!(head.has_scopes(&record.scope));
            assert!(head.admits(&record), "{key:?} {scope:?}");
        }
    }
}

#[test]
fn a_scope_that_could_split_in_two_is_left_out_not_widened() {
    // `record::is_valid_scope` refuses it on every write; were one ever to reach the index, it
    // must not read as two scopes (`user:7` and `public`).
    let mut record = record("r", "user:7\npublic", None, "customer_profile");
    record.scope.push("team:a".to_owned());
    let head = super::RecordHead::of(&record);
    assert_eq!(head.scopes().collect::<Vec<_>>(), ["team:a"]);
    assert!(!head.admits(&record), "a head that is not the record's scopes never stands for it");
    let mut index = TenantIndex::default();
    index.upsert(IndexedRecord::new(record, None));
    assert!(index.by_scope.get("public").is_none());
    assert!(index.by_scope.get("user:7").is_none());
}

#[test]
fn records_share_one_allocation_of_each_name_and_term() {
    let mut index = TenantIndex::default();
    for (id, scope) in [("a", "user:1"), ("b", "user:2")] {
        let mut record = record(id, scope, Some("ORD-1"), "customer_profile");
        record.author = Some(format!("admin:{}", "import"));
        index.upsert(IndexedRecord::new(record, None));
    }
    let head = |id: &str| index.get(id).map(|item| Arc::clone(item)).unwrap_or_else(|| panic!("{id}"));
    let (a, b) = (head("a"), head("b"));
    assert!(Arc::ptr_eq(&a.head.names, &b.head.names));
    assert_eq!(
        (a.head.tenant(), a.head.record_type(), a.head.schema_version()),
        ("t", "customer_profile", "v1")
    );
    assert_eq!(a.head.author(), Some("admin:import"));
    // The term is listed once, under one id both records keep.
    assert_eq!(index.by_term.len(), 1);
    assert_eq!(a.terms, b.terms);
    let listed: BTreeSet<u32> = index.by_term.get("ord-1").into_iter().flatten().copied().collect();
    assert_eq!(listed, BTreeSet::from([index.slot_of("a").expect("a"), index.slot_of("b").expect("b")]));
}

#[test]
fn a_large_scope_keeps_a_bitset_of_exactly_its_records() {
    let mut index = TenantIndex::default();
    let check = |index: &TenantIndex, wanted: bool| {
        let listed: BTreeSet<u32> = index.by_scope.get("public").into_iter().flatten().copied().collect();
        let set = index.scope_set("public").map(|set| set.iter().collect::<BTreeSet<u32>>());
        assert_eq!(set.is_some(), wanted, "{} records listed", listed.len());
        if let Some(set) = set {
            assert_eq!(set, listed);
        }
        assert!(index.scope_set("user:1").is_none(), "a small scope keeps its list alone");
    };
    let upsert = |index: &mut TenantIndex, id: &str, scope: &str| {
        index.upsert(IndexedRecord::new(record(id, scope, None, "fact"), None));
    };
    // `public` grows past the threshold among others' records, loses most of them (slots
    // freed and reused by other scopes), moves records out by rewriting them, and grows again.
    for i in 0..1500 {
        upsert(&mut index, &format!("p{i}"), "public");
        upsert(&mut index, &format!("u{i}"), &format!("user:{}", i % 50));
    }
    check(&index, true);
    for i in (0..1500).filter(|i| i % 5 != 0) {
        if i % 3 == 0 {
            upsert(&mut index, &format!("p{i}"), "team:a");
        } else {
            index.remove(&format!("p{i}"));
        }
        upsert(&mut index, &format!("n{i}"), &format!("user:{}", i % 50));
        if i % 50 == 1 {
            check(&index, index.scope_set("public").is_some());
        }
    }
    // 300 records left, below half the threshold: the bitset went with them.
    check(&index, false);
    for i in 0..2000 {
        upsert(&mut index, &format!("q{i}"), "public");
    }
    check(&index, true);
}

#[test]
fn names_left_behind_by_cloned_heads_are_swept() {
    let mut index = TenantIndex::default();
    let mut kept = Vec::new();
    for i in 0..1000 {
        let id = format!("r{i}");
        index.upsert(IndexedRecord::new(record(&id, "public", None, &format!("type-{i}")), None));
        // A head cloned out (a tool's answer in flight) while its record goes.
        kept.push(index.get(&id).map(|item| item.head.clone()));
        index.remove(&id);
        if kept.len() > 10 {
            kept.remove(0);
        }
    }
    assert!(index.names.len() < 200, "{} names kept for 0 live records", index.names.len());
}

#[test]
fn the_token_count_is_of_the_line_a_json_object_of_the_record_makes() {
    let contents = [
        serde_json::json!({"statement": "Refunds take 5 days", "zeta": [1, 2.5, null], "alpha": {"b": true, "a": "x"}}),
        serde_json::json!({"name": "Клиент «Ромашка»", "note": "下周发货 \"quoted\" \n tab\t", "emoji": "🚚"}),
        serde_json::json!("a bare string"),
        serde_json::json!({}),
    ];
    for (i, content) in contents.into_iter().enumerate() {
        let mut record = record(&format!("r-{i}\u{e9}"), "public", None, "customer_profile");
        record.content = content;
        let expected =
            serde_json::json!({"id": record.id, "type": record.record_type, "content": record.content})
                .to_string();
        let counted = tiktoken_rs::cl100k_base_singleton().encode_ordinary(&expected).len();
        assert_eq!(record.line_tokens() as usize, counted, "{expected}");
        assert!(counted > 0);
    }
}

/// A key or alias is an exact route past the semantic layer only when an operator wrote it (or
/// the record predates authors), and an alias only when it names something: an agent's or the
/// observer's names are its words, and a stop-word alias stored before aliases were checked is
/// no route for anyone. Identifiers in the content route for every writer.
#[test]
fn only_an_operators_specific_names_are_exact_terms() {
    let mut index = TenantIndex::default();
    for (id, author) in
        [("op", Some("admin:ops")), ("old", None), ("agent", Some("agent:k-1")), ("obs", Some("observer"))]
    {
        let mut record =
            Record::test_fact(id, serde_json::json!({"statement": format!("Order ORD-{id}-77 shipped.")}));
        record.key = Some(format!("topic {id}"));
        record.aliases = vec![format!("bluebird {id}"), "the".to_owned(), "what is".to_owned()];
        record.author = author.map(str::to_owned);
        index.upsert(IndexedRecord::new(record, None));
    }
    let routed = |term: &str| -> BTreeSet<String> {
        let slots = index.by_term.get(term).into_iter().flatten();
        slots
            .filter_map(|slot| index.slots[*slot as usize].as_ref().map(|i| i.head.id().to_owned()))
            .collect()
    };
    for id in ["op", "old"] {
        assert_eq!(routed(&format!("topic {id}")), BTreeSet::from([id.to_owned()]), "{id}'s key");
        assert_eq!(routed(&format!("bluebird {id}")), BTreeSet::from([id.to_owned()]), "{id}'s alias");
    }
    for id in ["agent", "obs"] {
        assert!(routed(&format!("topic {id}")).is_empty(), "{id}'s key routes");
        assert!(routed(&format!("bluebird {id}")).is_empty(), "{id}'s alias routes");
        // Still its words: a search by them finds it.
        let slot = index.slot_of(id).unwrap();
        let query = crate::lexical::LexicalQuery::new(crate::lexical::analyzer(), &format!("bluebird {id}"));
        let mut candidates = crate::slots::SlotSet::new(index.slots.len());
        candidates.insert(slot);
        assert_eq!(index.lexical.search(&query, &candidates, 1).first().map(|h| h.slot), Some(slot), "{id}");
    }
    assert!(routed("the").is_empty() && routed("what is").is_empty(), "a stop-word alias routes");
    for id in ["op", "old", "agent", "obs"] {
        assert_eq!(routed(&format!("ord-{id}-77")), BTreeSet::from([id.to_owned()]), "{id}'s identifier");
    }
}
