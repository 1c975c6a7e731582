//! Envelope checks in linear time: a record's size is measured before anything else reads it,
//! and past the size limit nothing else does; within it (a limit raised to hold the largest
//! size here), fields, scopes, aliases, schemas, the secret scan and the redaction of secret
//! keys cost in proportion to the record, however many problems it holds (at `SMALL_SIZES`: the
//! scan runs at about a megabyte a second in a debug build).

use super::{MIB, SIZES, SMALL_SIZES, assert_linear_at, repeat_to};
use memgate::memory::checks::envelope::{Rules, check};
use memgate::memory::checks::schemas::SchemaSet;
use serde_json::{Map, Value, json};

/// A named shape and how to make it at a size.
type Shapes = Vec<(&'static str, fn(usize) -> Value)>;

fn fact(content: Value) -> Value {
    json!({"type": "fact", "scope": ["public"], "content": content})
}

fn keys(count: usize, name: impl Fn(usize) -> String) -> Map<String, Value> {
    (0..count).map(|i| (name(i), json!(1))).collect()
}

fn run(sizes: &[usize], max_content_bytes: usize, shapes: Shapes) {
    let schemas = SchemaSet::load(None).unwrap();
    let rules = Rules { schemas: &schemas, max_content_bytes, now_ms: 1_767_225_600_000 };
    for (shape, make) in shapes {
        assert_linear_at(sizes, shape, make, |record: &Value| {
            let _ = check(record, &rules);
        });
    }
}

#[test]
fn records_over_the_size_limit_cost_only_their_measuring() {
    run(
        &SIZES,
        64 * 1024,
        vec![
            ("content of a finding per element", |n| fact(json!({"pwd": vec![0; n / 2]}))),
            ("metadata of a finding per element", |n| {
                let mut record = fact(json!({"statement": "ok"}));
                record["metadata"] = json!({"pwd": vec![0; n / 2]});
                record
            }),
            ("content of many secret keys", |n| {
                fact(Value::Object(keys(n / 60, |i| format!("sk-ant-api03-{i:012}Qx7mN2pL9vR4tK8wZ3bH6j"))))
            }),
        ],
    );
}

#[test]
fn records_of_many_content_fields_and_findings_are_checked_in_linear_time() {
    run(
        &SMALL_SIZES,
        2 * MIB,
        vec![
            ("content of a finding per element", |n| fact(json!({"pwd": vec![0; n / 2]}))),
            ("content of many unknown fields", |n| {
                let mut content = keys(n / 16, |i| format!("field_{i:08}"));
                content.insert("statement".into(), json!("ok"));
                fact(Value::Object(content))
            }),
        ],
    );
}

#[test]
fn records_of_many_envelope_fields_and_secret_keys_are_checked_in_linear_time() {
    run(
        &SMALL_SIZES,
        2 * MIB,
        vec![
            ("many unknown envelope fields", |n| {
                let mut record = keys(n / 16, |i| format!("field_{i:08}"));
                record.extend(fact(json!({"statement": "ok"})).as_object().unwrap().clone());
                Value::Object(record)
            }),
            ("many secret keys among unknown fields", |n| {
                let mut record = keys(n / 80, |i| format!("sk-ant-api03-{i:012}Qx7mN2pL9vR4tK8wZ3bH6j"));
                record.extend(keys(n / 80, |i| format!("field_{i:08}")));
                record.extend(fact(json!({"statement": "ok"})).as_object().unwrap().clone());
                Value::Object(record)
            }),
        ],
    );
}

#[test]
fn records_of_long_lists_and_strings_are_checked_in_linear_time() {
    run(
        &SMALL_SIZES,
        2 * MIB,
        vec![
            ("many scopes", |n| {
                let scopes: Vec<String> = (0..n / 16).map(|i| format!("user:u-{i:08}")).collect();
                json!({"type": "fact", "scope": scopes, "content": {"statement": "ok"}})
            }),
            ("many aliases", |n| {
                let aliases: Vec<String> = (0..n / 16).map(|i| format!("alias {i:08}")).collect();
                let mut record = fact(json!({"statement": "ok"}));
                record["aliases"] = json!(aliases);
                record
            }),
            ("a long key of blanks after a credential's name", |n| {
                let mut record = fact(json!({"statement": "ok"}));
                record["key"] = json!(format!("password{}is Summer2024", " ".repeat(n)));
                record
            }),
            ("a long statement of credential names", |n| {
                fact(json!({"statement": repeat_to("\"bot_token\": ", n)}))
            }),
        ],
    );
}
