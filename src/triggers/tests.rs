//! The triggers service end to end without HTTP: records in, fired records, decisions and
//! outbox rows out, on a SQLite store.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use crate::store::outbox::OutboxState;
use serde_json::json;
use std::collections::BTreeMap;

/// The seed design's escalation SOP, as written.
pub(super) fn seed_sop() -> Value {
    json!({
        "process_name": "customer complaint escalation",
        "trigger_conditions": ["satisfaction_score < 2", "mentions lawyer or sue"],
        "actions": [
            {"service": "ticketing", "method": "create_ticket", "params": {"priority": "urgent", "queue": "escalations"}},
            {"service": "ops_chat", "method": "post_message", "params": {"channel": "#support-escalations"}},
        ],
    })
}

fn record(id: &str, content: Value) -> Record {
    Record {
        record_type: "internal_sop".into(),
        scope: vec!["team:support".into()],
        priority: 4,
        ..Record::test_fact(id, content)
    }
}

fn config() -> TriggersConfig {
    let text = r#"
        [endpoints.ticketing]
        url = "https://tickets.example.com/hooks/memgate"
        secrets = ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]
        include_conversation = true
    "#;
    toml::from_str(text).unwrap()
}

struct Scratch(std::path::PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

async fn service() -> (Triggers, Store, Scratch) {
    let dir = std::env::temp_dir().join(format!("memgate-triggers-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let store = Store::connect(&format!("sqlite://{}/t.db", dir.display())).await.unwrap();
    store.migrate().await.unwrap();
    let triggers =
        Triggers::new(config(), store.clone(), TaskTracker::new(), TriggerMetrics::default()).unwrap();
    (triggers, store, Scratch(dir))
}

#[test]
fn check_conditions_accepts_the_seed_and_names_what_is_wrong() {
    assert!(check_conditions(&seed_sop()).is_empty());
    assert!(check_conditions(&json!({"title": "Refunds", "steps": "1. …"})).is_empty(), "no triggers");
    let mut bad = seed_sop();
    bad["trigger_conditions"][1] = json!({"regex": "(?<=x)y"});
    bad["actions"][0]["url"] = json!("http://169.254.169.254/");
    let paths: Vec<String> = check_conditions(&bad).into_iter().map(|p| p.path).collect();
    assert_eq!(paths, ["$.content.trigger_conditions[1].regex", "$.content.actions[0].url"]);
    let only_conditions = json!({"title": "x", "steps": "y", "trigger_conditions": ["sue"]});
    assert_eq!(check_conditions(&only_conditions)[0].path, "$.content.actions");
}

#[tokio::test]
async fn fires_on_a_threat_not_on_a_question_and_decides_once_per_action() {
    let (triggers, store, _dir) = service().await;
    let sop = record("sop-escalation", seed_sop());
    let plain = record("sop-refunds", json!({"title": "Refunds", "steps": "1. Check the order."}));
    let values = BTreeMap::new();

    let question = TriggerInput::new("what is your refund policy", &values);
    assert!(triggers.evaluate(&question, [&sop, &plain]).is_empty());

    let threat = TriggerInput::new("I'm going to talk to my lawyer", &values);
    let fired = triggers.evaluate(&threat, [&plain, &sop]);
    assert_eq!(fired.len(), 1);
    assert_eq!((fired[0].record_id.as_str(), fired[0].matched.hit.as_str()), ("sop-escalation", "lawyer"));

    let would = triggers.would_fire(&fired);
    let shown: Vec<(&str, bool)> = would.iter().map(|w| (w.service.as_str(), w.configured)).collect();
    assert_eq!(shown, [("ticketing", true), ("ops_chat", false)]);

    let decisions = triggers.decide("t", "req-1", Some("u-789"), "key:k1", &threat, &fired);
    assert_eq!(decisions.len(), 2);
    assert_eq!(decisions[0].id, event_id("t", "req-1", "sop-escalation", 0));
    assert_eq!(decisions[0].undeliverable, None);
    let body: Value = serde_json::from_str(&triggers.render_body(&decisions[0]).unwrap()).unwrap();
    assert_eq!(body["data"]["subject"], "u-789");
    assert_eq!(body["data"]["params"]["priority"], "urgent");
    assert_eq!(body["data"]["conversation"], "I'm going to talk to my lawyer", "ticketing opted in");
    assert!(decisions[1].undeliverable.as_deref().unwrap().contains("ops_chat"));
    assert!(
        !triggers.render_body(&decisions[1]).unwrap().contains("talk to my lawyer"),
        "no opt-in, no words"
    );
    assert_eq!(decisions[1].body.conversation, None);
    assert_eq!(decisions[1].matched_condition.excerpt, None);
    assert_eq!(decisions[0].matched_condition.excerpt.as_deref(), Some("lawyer"));

    assert_eq!(triggers.enqueue_now(&decisions).await.unwrap(), 2);
    // The same request deciding again (a retried turn, a second replica) adds nothing.
    assert_eq!(triggers.enqueue_now(&decisions).await.unwrap(), 0);
    let counts = store.outbox_counts(Some("t")).await.unwrap();
    assert_eq!((counts["pending"], counts["dead"]), (1, 1));
    let dead = store.outbox_get("t", &decisions[1].id).await.unwrap();
    assert_eq!(dead.state, OutboxState::Dead);
    assert!(dead.last_error.unwrap().contains("[triggers.endpoints.ops_chat]"));
    assert_eq!(triggers.metrics().queued.get(), 2);
}

#[tokio::test]
async fn compiled_triggers_follow_the_records_revision() {
    let (triggers, _store, _dir) = service().await;
    let values = BTreeMap::new();
    let input = TriggerInput::new("please escalate", &values);
    let mut sop = record(
        "sop",
        json!({"title": "x", "steps": "y", "trigger_conditions": ["lawyer"], "actions": [{"service": "ticketing", "method": "m"}]}),
    );
    assert!(triggers.evaluate(&input, [&sop]).is_empty());
    sop.revision = 2;
    sop.content["trigger_conditions"] = json!(["escalate"]);
    assert_eq!(triggers.evaluate(&input, [&sop]).len(), 1);
    // A record whose triggers do not parse never fires (and does not break the others).
    let broken = record("broken", json!({"trigger_conditions": [{"regex": "("}], "actions": []}));
    assert_eq!(triggers.evaluate(&input, [&broken, &sop]).len(), 1);
}

#[tokio::test]
async fn off_means_nothing_fires() {
    let (_, store, _dir) = service().await;
    let mut off = config();
    off.enabled = false;
    let triggers = Triggers::new(off, store, TaskTracker::new(), TriggerMetrics::default()).unwrap();
    let values = BTreeMap::new();
    let sop = record("sop", seed_sop());
    assert!(triggers.evaluate(&TriggerInput::new("my lawyer", &values), [&sop]).is_empty());
    assert!(triggers.spawn_worker(CancellationToken::new()).is_none());
}

#[test]
fn turn_ids_are_stable_for_a_retried_turn() {
    let a = turn_id("t", Some("u-1"), 3, "I'm going to talk to my lawyer");
    assert_eq!(a, turn_id("t", Some("u-1"), 3, "I'm going to talk to my lawyer"));
    assert_ne!(a, turn_id("t", Some("u-1"), 5, "I'm going to talk to my lawyer"));
    assert_ne!(a, turn_id("t", Some("u-2"), 3, "I'm going to talk to my lawyer"));
    assert!(a.starts_with("turn_"));
}

#[tokio::test]
async fn a_record_cools_down_per_subject_for_its_own_time_or_the_default() {
    let (triggers, store, _dir) = service().await;
    let values = BTreeMap::new();
    let threat = TriggerInput::new("I'm going to talk to my lawyer", &values);
    let default = record("sop-default", seed_sop());
    let mut own = seed_sop();
    own[COOLDOWN_FIELD] = json!(3600);
    let own = record("sop-own", own);
    let mut never = seed_sop();
    never[COOLDOWN_FIELD] = json!(0);
    let never = record("sop-never", never);
    let fired = triggers.evaluate(&threat, [&default, &own, &never]);
    let would = triggers.would_fire(&fired);
    let shown: Vec<(&str, u64)> =
        would.iter().map(|w| (w.record_id.as_str(), w.cooldown_seconds)).step_by(2).collect();
    assert_eq!(shown, [("sop-default", 600), ("sop-own", 3600), ("sop-never", 0)]);

    let decided = |turn: &str, subject: &str| {
        let mut ids: Vec<String> = triggers
            .decide("t", turn, Some(subject), "key:k1", &threat, &fired)
            .into_iter()
            .map(|d| d.record_id)
            .collect();
        ids.dedup();
        ids
    };
    assert_eq!(decided("turn-1", "u-1"), ["sop-default", "sop-own", "sop-never"]);
    assert_eq!(decided("turn-1", "u-1"), ["sop-default", "sop-own", "sop-never"], "a retried turn");
    assert_eq!(decided("turn-2", "u-1"), ["sop-never"], "the others cool down for u-1");
    assert_eq!(decided("turn-2", "u-2"), ["sop-default", "sop-own", "sop-never"], "not for u-2");
    assert_eq!(triggers.metrics().cooled_down.get(), 2);
    drop(store);

    // A cooldown must be a whole number of seconds up to a week, and beside conditions.
    let mut bad = seed_sop();
    bad[COOLDOWN_FIELD] = json!(-1);
    assert_eq!(check_conditions(&bad)[0].path, "$.content.trigger_cooldown_seconds");
    bad[COOLDOWN_FIELD] = json!(crate::config::triggers::MAX_COOLDOWN_SECONDS + 1);
    assert_eq!(check_conditions(&bad).len(), 1);
    bad[COOLDOWN_FIELD] = json!("10m");
    assert_eq!(check_conditions(&bad).len(), 1);
    let alone = json!({"title": "x", "steps": "y", COOLDOWN_FIELD: 60});
    assert_eq!(check_conditions(&alone)[0].path, "$.content.trigger_cooldown_seconds");
}
