//! The secret scanner in linear time on the shapes that are dearest to it: a value with a finding
//! per element, many secret keys that share one redacted path, a credential's name followed by
//! long runs of blanks, quotes and assignments that open a value again and again, `*_token` names
//! one after another, deep nesting, and near misses of every vendor prefix. At `SMALL_SIZES`:
//! a debug build scans about a megabyte a second.

use super::{SMALL_SIZES, assert_linear_at, repeat_to};
use memgate::memory::checks::secrets;
use serde_json::{Map, Value, json};

/// A named shape and how to make it at a size.
type Shapes = Vec<(&'static str, fn(usize) -> Value)>;

fn run(shapes: Shapes) {
    for (shape, make) in shapes {
        assert_linear_at(&SMALL_SIZES, shape, make, |value: &Value| {
            let _ = secrets::scan(value, "$.content");
        });
    }
}

/// `depth` arrays inside one another around `leaf`.
fn nested(depth: usize, leaf: Value) -> Value {
    (0..depth).fold(leaf, |inner, _| json!([inner]))
}

#[test]
fn the_scanner_is_linear_on_many_findings() {
    run(vec![
        ("a finding per element under a credential key", |n| json!({"pwd": vec![0; n / 2]})),
        ("a finding per string", |n| json!(vec!["password: hunter22"; n / 21])),
        ("many secret keys, one redacted path", |n| {
            let keys: Map<String, Value> = (0..n / 60)
                .map(|i| (format!("sk-ant-api03-{i:012}Qx7mN2pL9vR4tK8wZ3bH6j"), json!(1)))
                .collect();
            Value::Object(keys)
        }),
        ("many credential keys", |n| {
            let keys: Map<String, Value> =
                (0..n / 24).map(|i| (format!("k{i:09}_token"), json!(1))).collect();
            Value::Object(keys)
        }),
    ]);
}

#[test]
fn the_scanner_is_linear_on_long_runs_of_blanks() {
    run(vec![
        ("a credential's name, one long run of blanks, its value", |n| {
            json!(format!("password{}is Summer2024", " ".repeat(n)))
        }),
        ("names and runs of blanks, again and again", |n| {
            json!(repeat_to(&format!("password{}", " ".repeat(600)), n))
        }),
        ("runs of mixed Unicode blanks", |n| {
            json!(format!("password:{}hunter22", repeat_to("\t \u{a0}\u{3000}", n)))
        }),
    ]);
}

#[test]
fn the_scanner_is_linear_on_quotes_opened_again_and_again() {
    run(vec![
        ("a quote opened again and again", |n| json!(repeat_to("password=\"", n))),
        ("single quotes and colons", |n| json!(repeat_to("'secret': '", n))),
        ("token names inside JSON text", |n| json!(repeat_to("{\"bot_token\": \"", n))),
    ]);
}

#[test]
fn the_scanner_is_linear_on_token_names_one_after_another() {
    run(vec![
        ("dotted token names", |n| json!(repeat_to(".token", n))),
        ("camel-case token names", |n| json!(repeat_to("aToken=", n))),
        ("assignments without values", |n| json!(repeat_to("pwd: : = := => ", n))),
    ]);
}

#[test]
fn the_scanner_is_linear_on_deep_nesting() {
    run(vec![
        ("deep nesting, again and again", |n| json!(vec![nested(100, json!("pwd=x")); n / 310])),
        ("deep objects with credential keys", |n| {
            let one = (0..60).fold(json!(1), |inner, _| json!({"password": inner}));
            json!(vec![one; n / 800])
        }),
    ]);
}

#[test]
fn the_scanner_is_linear_on_near_misses_of_vendor_prefixes() {
    run(vec![
        ("JWT headers", |n| json!(repeat_to("eyJ", n))),
        ("Anthropic key prefixes", |n| json!(repeat_to("sk-ant-", n))),
        ("AWS key prefixes", |n| json!(repeat_to("AKIA", n))),
    ]);
}

#[test]
fn the_scanner_is_linear_on_near_misses_of_keys_urls_and_names() {
    run(vec![
        ("PEM headers", |n| json!(repeat_to("-----BEGIN PRIVATE KEY-----", n))),
        ("URL schemes", |n| json!(repeat_to("a://b", n))),
        ("Chinese credential names", |n| json!(repeat_to("密码：", n))),
        ("a long base64 run after an AWS secret's name", |n| {
            json!(format!("aws_secret_access_key={}", "A".repeat(n)))
        }),
    ]);
}
