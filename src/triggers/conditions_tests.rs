//! Conditions in the languages memgate's users write, the limits on regexes, comparisons, and the
//! problems a bad condition gets at write time.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use serde_json::json;
use std::collections::BTreeMap;

fn conditions(list: Value) -> Conditions {
    match Conditions::parse(&list, "$.content.trigger_conditions") {
        Ok(c) => c,
        Err(problems) => panic!("{list} should parse: {problems:?}"),
    }
}

fn problems(list: Value) -> Vec<ConditionProblem> {
    match Conditions::parse(&list, "$.content.trigger_conditions") {
        Ok(_) => panic!("{list} should be refused"),
        Err(problems) => problems,
    }
}

fn fires(list: &Conditions, text: &str) -> Option<Matched> {
    list.evaluate(&TriggerInput::new(text, &BTreeMap::new()))
}

fn fires_with(list: &Conditions, text: &str, values: Value) -> Option<Matched> {
    let values: BTreeMap<String, Value> = serde_json::from_value(values).unwrap();
    list.evaluate(&TriggerInput::new(text, &values))
}

/// The seed's escalation SOP, as written.
fn seed() -> Conditions {
    conditions(json!(["satisfaction_score < 2", "mentions lawyer or sue"]))
}

#[test]
fn the_seed_conditions_fire_on_a_threat_not_on_a_question() {
    let seed = seed();
    let hit = fires(&seed, "I'm going to talk to my lawyer").unwrap();
    assert_eq!((hit.index, hit.kind, hit.hit.as_str()), (1, "keywords", "lawyer"));
    assert_eq!(hit.condition, json!("mentions lawyer or sue"));
    assert_eq!(hit.excerpt.as_deref(), Some("lawyer"));
    assert_eq!(fires(&seed, "If this is not fixed I will SUE you.").unwrap().hit, "sue");
    assert!(fires(&seed, "what is your refund policy").is_none());
    assert!(fires(&seed, "I will pursue a refund").is_none(), "sue inside pursue");

    let low = fires_with(&seed, "what is your refund policy", json!({"satisfaction_score": 1})).unwrap();
    assert_eq!((low.index, low.kind, low.hit.as_str()), (0, "compare", "satisfaction_score = 1"));
    assert_eq!(low.excerpt, None, "a comparison quotes no words");
    assert!(fires_with(&seed, "hello", json!({"satisfaction_score": 4})).is_none());
    assert!(fires_with(&seed, "hello", json!({"satisfaction_score": "1.5"})).is_some(), "a header's text");
    assert!(fires_with(&seed, "hello", json!({"satisfaction_score": "low"})).is_none());
    assert!(fires_with(&seed, "hello", json!({"other": 1})).is_none());
}

#[test]
fn keywords_in_chinese_russian_and_fullwidth() {
    let list = conditions(json!([
        {"keywords": ["律师", "起诉"], "name": "legal threat (zh)"},
        {"keywords": ["адвокат*", "суд"]},
        {"keywords": ["lawyer"]},
    ]));
    let zh = fires(&list, "你们再不处理，我就去找律师了").unwrap();
    assert_eq!((zh.index, zh.hit.as_str(), zh.name.as_deref()), (0, "律师", Some("legal threat (zh)")));
    assert_eq!(fires(&list, "我要起诉你们").unwrap().hit, "起诉");
    let ru = fires(&list, "Я поговорю со своим адвокатом").unwrap();
    assert_eq!((ru.index, ru.hit.as_str(), ru.excerpt.as_deref()), (1, "адвокат*", Some("адвокатом")));
    assert_eq!(fires(&list, "Подам в СУД").unwrap().hit, "суд");
    assert!(fires(&list, "поиск по суду").is_none(), "суду is another word; суд has no star");
    assert_eq!(fires(&list, "ＭＹ ＬＡＷＹＥＲ ＷＩＬＬ ＣＡＬＬ").unwrap().hit, "lawyer");
    assert!(fires(&list, "退款政策是什么").is_none());
    assert!(fires(&list, "Какая у вас политика возврата?").is_none());
}

#[test]
fn mentions_lists_split_in_several_languages() {
    let list = conditions(json!([
        "mentions \"talk to a lawyer\", court or small claims",
        "提到 律师或起诉",
        "упоминает адвокат или суд",
    ]));
    assert_eq!(fires(&list, "I'll take you to small claims").unwrap().hit, "small claims");
    assert_eq!(fires(&list, "I want to TALK TO A LAWYER").unwrap().hit, "talk to a lawyer");
    assert_eq!(fires(&list, "我要起诉").unwrap().index, 1);
    assert_eq!(fires(&list, "иду в суд").unwrap().index, 2);
    assert!(fires(&list, "a lawyer").is_none(), "the phrase is whole");
}

#[test]
fn a_plain_string_is_one_phrase() {
    let list = conditions(json!(["cancel my subscription", "退订"]));
    assert_eq!(fires(&list, "Please CANCEL my  subscription now").unwrap().kind, "phrase");
    assert!(fires(&list, "cancel the subscription").is_none());
    assert_eq!(fires(&list, "我想退订").unwrap().index, 1);
}

#[test]
fn regexes_match_normalized_words_case_insensitively() {
    let list = conditions(json!([{"regex": r"refund.{0,20}\b(now|today)\b"}]));
    assert!(fires(&list, "I want a REFUND right now").is_some());
    assert!(fires(&list, "ｒｅｆｕｎｄ ｔｏｄａｙ").is_some(), "fullwidth folds by NFKC");
    assert!(fires(&list, "refund policy").is_none());
    let exact = conditions(json!([{"regex": "(?-i)URGENT"}]));
    assert!(fires(&exact, "this is URGENT").is_some());
    assert!(fires(&exact, "this is urgent").is_none());
}

#[test]
fn regexes_are_bounded() {
    let message = |pattern: &str| {
        let found = problems(json!([{"regex": pattern}]));
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].path, "$.content.trigger_conditions[0].regex");
        found[0].message.clone()
    };
    assert!(message(&"a".repeat(MAX_PATTERN_CHARS + 1)).contains("1 to 512 characters"));
    // Look-around and back-references are not RE2.
    let lookahead = message("(?=lawyer)");
    assert!(lookahead.contains("RE2"), "{lookahead}");
    assert!(!lookahead.contains("(?="), "the pattern is not quoted back: {lookahead}");
    assert!(message(r"(a)\1").contains("RE2"));
    // A pattern that compiles to a huge program: \w is all of Unicode's word characters.
    assert!(message(r"\w{500}\w{500}").contains("too large"), "size limit");
    assert!(message("a*").contains("empty text"), "would fire on everything");
    assert!(message(&format!("{}a{}", "(".repeat(40), ")".repeat(40))).contains("does not compile"));
    // Long input is cut, not refused: the match runs in linear time on at most MAX_INPUT_CHARS.
    let list = conditions(json!([{"regex": "(x+x+)+y"}]));
    let long = "x".repeat(100_000);
    let started = std::time::Instant::now();
    assert!(fires(&list, &long).is_none());
    assert!(started.elapsed() < std::time::Duration::from_secs(1), "no catastrophic backtracking");
}

#[test]
fn entities() {
    let list = conditions(json!([{"entity": "order_number"}, {"entity": "email"}, {"entity": "phone"}]));
    let order = fires(&list, "Where is ORD-2024-0615?").unwrap();
    assert_eq!(
        (order.index, order.hit.as_str(), order.excerpt.as_deref()),
        (0, "order_number", Some("ORD-2024-0615"))
    );
    assert_eq!(fires(&list, "我的邮箱是 li.wei@example.com").unwrap().hit, "email");
    assert_eq!(fires(&list, "звоните +7 912 345-67-89").unwrap().hit, "phone");
    assert!(fires(&list, "nothing to see here, 2024-06-15").is_none());
}

#[test]
fn comparisons_cover_every_operator() {
    let cases = [
        ("score < 2", 1.0, true),
        ("score < 2", 2.0, false),
        ("score <= 2", 2.0, true),
        ("score > 2", 2.5, true),
        ("score >= 2", 1.9, false),
        ("score == 2", 2.0, true),
        ("score = 2", 2.0, true),
        ("score != 2", 2.0, false),
        ("score != 2", 3.0, true),
        ("score < -1.5", -2.0, true),
    ];
    for (written, value, expected) in cases {
        let list = conditions(json!([written]));
        assert_eq!(
            fires_with(&list, "", json!({"score": value})).is_some(),
            expected,
            "{written} with {value}"
        );
    }
    let objects = conditions(json!([{"field": "satisfaction", "op": "<", "value": 2}]));
    assert!(fires_with(&objects, "", json!({"satisfaction": 1})).is_some());
    let text = conditions(json!(["tier == premium", {"field": "channel", "op": "!=", "value": "Email"}]));
    assert_eq!(fires_with(&text, "", json!({"tier": "PREMIUM", "channel": "email"})).unwrap().index, 0);
    assert_eq!(fires_with(&text, "", json!({"tier": "free", "channel": "chat"})).unwrap().index, 1);
    assert!(fires_with(&text, "", json!({"tier": "free", "channel": "ＥＭＡＩＬ"})).is_none());
    assert!(problems(json!(["score < high"]))[0].message.contains("compare numbers"));
    assert_eq!(
        problems(json!([{"field": "s", "op": ">", "value": "x"}]))[0].path,
        "$.content.trigger_conditions[0].value"
    );
}

#[test]
fn all_groups_need_every_part() {
    let list = conditions(
        json!([{"all": ["satisfaction_score < 3", {"keywords": ["refund"]}], "name": "unhappy refund"}]),
    );
    assert!(fires_with(&list, "I want a refund", json!({"satisfaction_score": 5})).is_none());
    assert!(fires_with(&list, "hello", json!({"satisfaction_score": 1})).is_none());
    let hit = fires_with(&list, "I want a refund", json!({"satisfaction_score": 1})).unwrap();
    assert_eq!((hit.kind, hit.hit.as_str()), ("all", "satisfaction_score = 1 and refund"));
    assert_eq!(hit.excerpt.as_deref(), Some("refund"));
}

#[test]
fn bad_conditions_are_named_by_path() {
    let found = problems(json!([
        "",
        42,
        {"keywords": []},
        {"keywords": ["ok", "*", 7]},
        {"regex": "x", "entity": "email"},
        {"entity": "passport"},
        {"field": "1bad", "op": "~", "value": [1]},
        {"all": [{"all": ["x"]}]},
        {"keywrods": ["typo"]},
        {"keywords": ["x"], "name": ""},
        {"keywords": ["x"], "op": "<"},
    ]));
    let paths: Vec<&str> = found.iter().map(|p| p.path.as_str()).collect();
    let base = "$.content.trigger_conditions";
    for expected in [
        format!("{base}[0]"),
        format!("{base}[1]"),
        format!("{base}[2].keywords"),
        format!("{base}[3].keywords[1]"),
        format!("{base}[3].keywords[2]"),
        format!("{base}[4]"),
        format!("{base}[5].entity"),
        format!("{base}[6].field"),
        format!("{base}[6].op"),
        format!("{base}[6].value"),
        format!("{base}[7].all[0].all"),
        format!("{base}[8].keywrods"),
        format!("{base}[8]"),
        format!("{base}[9].name"),
        format!("{base}[10].op"),
    ] {
        assert!(paths.contains(&expected.as_str()), "{expected} missing from {paths:?}");
    }
    assert!(found.iter().all(|p| p.kind == PROBLEM_KIND));
    assert_eq!(problems(json!([]))[0].path, base);
    assert_eq!(problems(json!("lawyer"))[0].path, base);
    assert_eq!(problems(json!(vec!["x"; MAX_CONDITIONS + 1]))[0].path, base);
}

#[test]
fn a_hostile_definition_gets_a_short_answer() {
    let base = "$.content.trigger_conditions";
    // Past the limit the list is refused, and what follows the limit is not even compiled.
    let many: Vec<Value> = (0..5_000).map(|_| json!({"regex": "("})).collect();
    let found = problems(Value::Array(many));
    assert_eq!(found[0].path, base);
    assert_eq!(found.len(), 1 + MAX_CONDITIONS, "the first {MAX_CONDITIONS} items are checked, no more");
    // Thousands of made-up fields: ten named, then a count.
    let fields: Map<String, Value> = (0..3_000).map(|i| (format!("f{i:04}"), json!(1))).collect();
    let mut item = fields.clone();
    item.insert("keywords".into(), json!(["x"]));
    let found = problems(json!([Value::Object(item)]));
    assert_eq!(found.len(), MAX_FIELD_PROBLEMS + 1, "{found:?}");
    assert_eq!(found[0].path, format!("{base}[0].f0000"));
    assert_eq!(found[MAX_FIELD_PROBLEMS].path, format!("{base}[0]"));
    assert!(found[MAX_FIELD_PROBLEMS].message.contains("2990 more"), "{found:?}");
    // A huge field name is cut in the path.
    let mut long = Map::new();
    long.insert("k".repeat(100_000), json!(1));
    long.insert("keywords".into(), json!(["x"]));
    let found = problems(json!([Value::Object(long)]));
    assert_eq!(found[0].path, format!("{base}[0].[\"{}…\"]", "k".repeat(MAX_PATH_KEY_CHARS)));
}
