//! Trigger conditions in linear time: evaluating a record's conditions against a caller's words
//! of any size and shape (folding, keywords with word boundaries, a record's regex, the entity
//! finders, the excerpt and the webhook's copy of the words), reading `X-Memory-Values`, and
//! parsing the conditions and actions a record writes.
//!
//! The words conditions read are cut to `text::MAX_INPUT_CHARS` before anything else looks at
//! them, so past that their cost stays flat; the shapes below are the ones that would cost more
//! than linear in a matcher that did not cut (a near miss at every position, a boundary that
//! fails at every occurrence, runs that normalization reorders or expands).

use super::{assert_linear, repeat_to};
use crate::support::TestDb;
use memgate::record::{Record, Status};
use memgate::store::Store;
use memgate::triggers::{
    RecordTriggers, TriggerInput, TriggerMetrics, Triggers, TriggersConfig, parse_values, turn_id,
};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use tokio_util::task::TaskTracker;

/// A named shape and how to make it at a size.
type Shapes<T> = Vec<(&'static str, fn(usize) -> T)>;

/// Every kind of condition, at its limits where a limit makes matching dearer: 50 keywords (one
/// long near miss, prefixes, unspaced scripts), a regex, the three entities, a group, values.
fn heavy_conditions() -> Value {
    let mut keywords: Vec<String> = (0..44).map(|i| format!("keyword{i}")).collect();
    keywords.extend(["a".repeat(99) + "b", "sue*".into(), "адвокат*".into(), "律师".into()]);
    keywords.extend(["talk to my lawyer now".into(), "ＬＡＷＹＥＲ".into()]);
    json!([
        {"keywords": keywords},
        "mentions refund or chargeback or \"money back\"",
        "cancel my subscription today",
        {"regex": "(cancel|terminate).{0,40}(contract|subscription)"},
        {"regex": "[a-z]{1,50}@[a-z]{1,50}x"},
        {"entity": "email"},
        {"entity": "phone"},
        {"entity": "order_number"},
        {"all": [{"keywords": ["a"]}, {"regex": "a{20}b"}, "satisfaction_score < 2"]},
        {"field": "tier", "op": "==", "value": "gold"},
    ])
}

fn record(content: Value) -> Record {
    Record {
        tenant: "t".into(),
        id: "sop-heavy".into(),
        record_type: "internal_sop".into(),
        schema_version: "v1".into(),
        scope: vec!["team:support".into()],
        valid_from_ms: 0,
        valid_until_ms: memgate::record::OPEN_END_MS,
        priority: 4,
        key: None,
        aliases: vec![],
        content,
        metadata: Map::new(),
        revision: 1,
        status: Status::Active,
        created_at_ms: 0,
        updated_at_ms: 0,
        last_accessed_at_ms: None,
        access_count: 0,
        change_seq: 0,
        author: None,
        provenance: None,
    }
}

/// The words of a request, in the shapes that are hardest on each matcher.
fn word_shapes() -> Shapes<String> {
    vec![
        ("one letter, a near miss of the long keyword everywhere", |n| "a".repeat(n)),
        ("short words, each glued to the next boundary", |n| repeat_to("ab a ", n)),
        ("whitespace runs", |n| repeat_to(" \t\r\n\u{3000}", n)),
        ("a letter and a run of combining marks", |n| format!("a{}", repeat_to("\u{301}\u{323}", n))),
        ("characters NFKC expands eighteenfold", |n| repeat_to("\u{fdfa}", n)),
        ("fullwidth letters", |n| repeat_to("ＬＡＷＹＥＲ", n)),
        ("almost an email at every position", |n| repeat_to("a.a@a", n)),
        ("almost a phone number", |n| repeat_to("+1 (2", n)),
        ("digit runs and dates", |n| repeat_to("2024-06-15 1234567 ", n)),
        ("almost an order number", |n| repeat_to("ORD-1-", n)),
        ("an unspaced script", |n| repeat_to("我要找律", n)),
        ("control characters and escapes", |n| repeat_to("\u{1b}[31m\u{0}\u{85}", n)),
        ("a threat at the very end", |n| format!("{}I'm going to talk to my lawyer", "x ".repeat(n / 2))),
    ]
}

#[test]
fn conditions_evaluate_in_linear_time_on_words_of_any_shape() {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let db = TestDb::sqlite();
    let store = runtime.block_on(async {
        let store = Store::connect(&db.url).await.unwrap();
        store.migrate().await.unwrap();
        store
    });
    let config: TriggersConfig = toml::from_str(
        "[endpoints.ticketing]\nurl = \"https://tickets.example.com/h\"\n\
         secrets = [\"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"]\ninclude_conversation = true\n",
    )
    .unwrap();
    let triggers = runtime.block_on(async {
        Triggers::new(config, store, TaskTracker::new(), TriggerMetrics::default()).unwrap()
    });
    let content = json!({"title": "t", "steps": "s", "trigger_conditions": heavy_conditions(),
        "actions": [{"service": "ticketing", "method": "create_ticket"}]});
    let sop = record(content.clone());
    let compiled = RecordTriggers::from_content(&content).unwrap().unwrap();
    let values: BTreeMap<String, Value> = [("tier".to_owned(), json!("silver"))].into();
    for (shape, make) in word_shapes() {
        assert_linear(shape, make, |words: &String| {
            let input = TriggerInput::new(words, &values);
            let _ = compiled.conditions.evaluate(&input);
            let fired = triggers.evaluate(&input, [&sop]);
            let turn = turn_id("t", Some("u-1"), 3, words);
            let _ = triggers.decide("t", &turn, Some("u-1"), "key:k1", &input, &fired);
        });
    }
}

#[test]
fn memory_values_parse_in_linear_time() {
    let shapes: Shapes<String> = vec![
        ("one name, again and again", |n| repeat_to("a=1;", n)),
        ("one quoted value, again and again", |n| repeat_to("a=\"x; y\";", n)),
        ("a long value", |n| format!("a={}", "x".repeat(n))),
        ("a quote never closed", |n| format!("a=\"{}", "x".repeat(n))),
        ("a long name", |n| format!("{}=1", "a".repeat(n))),
        ("no equals sign", |n| "a".repeat(n)),
        ("separators only", |n| format!("a=1{}", ";".repeat(n))),
        ("spaces around everything", |n| format!("a{}={}1", " ".repeat(n / 2), " ".repeat(n / 2))),
        ("spaces and separators", |n| repeat_to(" ; ", n)),
    ];
    for (shape, make) in shapes {
        assert_linear(shape, make, |header: &String| {
            let _ = parse_values(header);
        });
    }
}

/// Record contents of about `n` bytes whose `trigger_conditions` or `actions` are as large as the
/// JSON can make them.
fn definition_shapes() -> Shapes<Value> {
    vec![
        (
            "one long condition string",
            |n| json!({"trigger_conditions": ["mentions ".to_owned() + &repeat_to("lawyer or ", n)], "actions": [{"service": "t", "method": "m"}]}),
        ),
        (
            "a long comparison",
            |n| json!({"trigger_conditions": [format!("score < {}", "1".repeat(n))], "actions": [{"service": "t", "method": "m"}]}),
        ),
        ("fifty long keywords", |n| {
            let keywords: Vec<String> = (0..50).map(|_| "k".repeat(n / 50)).collect();
            json!({"trigger_conditions": [{"keywords": keywords}], "actions": [{"service": "t", "method": "m"}]})
        }),
        (
            "a long regex",
            |n| json!({"trigger_conditions": [{"regex": repeat_to("(a|b)", n)}], "actions": [{"service": "t", "method": "m"}]}),
        ),
        ("many conditions", |n| {
            let pad = "or sue ".repeat(40);
            let list: Vec<Value> = (0..n / 300).map(|i| json!(format!("mentions lawyer{i} {pad}"))).collect();
            json!({"trigger_conditions": list, "actions": [{"service": "t", "method": "m"}]})
        }),
        ("many regex conditions near the compiled-size limit", |n| {
            let name = "n".repeat(99);
            let list: Vec<Value> =
                (0..n / 140).map(|_| json!({"name": name, "regex": "\\w{1,80}x\\w{1,80}y"})).collect();
            json!({"trigger_conditions": list, "actions": [{"service": "t", "method": "m"}]})
        }),
        ("many keywords lists", |n| {
            let list: Vec<Value> = (0..n / 600).map(|_| json!({"keywords": vec!["lawyer"; 50]})).collect();
            json!({"trigger_conditions": list, "actions": [{"service": "t", "method": "m"}]})
        }),
        ("many unknown fields", |n| {
            let fields: Map<String, Value> =
                (0..n / 64).map(|i| (format!("f{i:012}{}", "x".repeat(47)), json!(1))).collect();
            json!({"trigger_conditions": [Value::Object(fields)], "actions": [{"service": "t", "method": "m"}]})
        }),
        ("one long unknown field", |n| {
            let mut fields = Map::new();
            fields.insert("\"".repeat(n), json!(1));
            json!({"trigger_conditions": [Value::Object(fields)], "actions": [{"service": "t", "method": "m"}]})
        }),
        (
            "a long name",
            |n| json!({"trigger_conditions": [{"name": "n".repeat(n), "keywords": ["x"]}], "actions": [{"service": "t", "method": "m"}]}),
        ),
        ("a long group", |n| {
            let parts: Vec<Value> = (0..n / 20).map(|_| json!("mentions a")).collect();
            json!({"trigger_conditions": [{"all": parts}], "actions": [{"service": "t", "method": "m"}]})
        }),
        ("many actions", |n| {
            let pad = "x".repeat(200);
            let list: Vec<Value> = (0..n / 260)
                .map(|i| json!({"service": "ticketing", "method": format!("m{i}"), "params": {"p": pad}}))
                .collect();
            json!({"trigger_conditions": ["lawyer"], "actions": list})
        }),
        (
            // Passed on as they are, so copied: many small strings cost the most per byte (one
            // long string is a single copy, bound by memory bandwidth rather than the parser).
            "an action's params of many small strings",
            |n| {
                let strings = vec!["x".repeat(60); n / 64];
                json!({"trigger_conditions": ["lawyer"], "actions": [{"service": "t", "method": "m", "params": {"p": strings}}]})
            },
        ),
        ("an action's many unknown fields", |n| {
            let mut action: Map<String, Value> =
                (0..n / 64).map(|i| (format!("u{i:012}{}", "x".repeat(47)), json!(1))).collect();
            action.insert("service".into(), json!("t"));
            action.insert("method".into(), json!("m"));
            json!({"trigger_conditions": ["lawyer"], "actions": [Value::Object(action)]})
        }),
    ]
}

#[test]
fn condition_definitions_parse_in_linear_time() {
    for (shape, make) in definition_shapes() {
        assert_linear(shape, make, |content: &Value| {
            let _ = RecordTriggers::from_content(content);
        });
    }
}
