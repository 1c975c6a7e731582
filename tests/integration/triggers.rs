//! Triggers end to end below HTTP: the seed's records against the v1 schemas, and the delivery
//! worker against a real local HTTP receiver (an axum server on port 0) — retries after 500 and
//! 429 with `Retry-After`, signatures, refused private addresses, replay, two replicas on one
//! PostgreSQL, and an action delivered after the replica that decided it went away.
//!
//! `external_receiver` is run by tests/webhooks/run.sh, which points it at a receiver that
//! verifies every delivery with the `standardwebhooks` library from PyPI.

use crate::support::{TestDb, eventually};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use memgate::config::triggers::WebhookSecret;
use memgate::memory::checks::schemas::SchemaSet;
use memgate::record::{Record, Status};
use memgate::store::Store;
use memgate::store::outbox::{OutboxFilter, OutboxState, Replay};
use memgate::triggers::{TriggerInput, TriggerMetrics, Triggers, TriggersConfig, check_conditions, signing};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

const SECRET_OLD: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const SECRET_NEW: &str = "whsec_dGhpcyBpcyB0aGUgbmV3IHNlY3JldCwgMzIgYnl0ZXM=";

/// The seed design's customer profile, as written.
fn seed_profile() -> Value {
    json!({
        "name": "Li Wei",
        "contact_email": "li.wei@example.com",
        "preferred_language": "zh-CN",
        "last_order_date": "2024-06-10",
        "special_requests": ["deliver next week, not before Tuesday", "下周发货"],
    })
}

/// The seed design's escalation SOP, as written.
fn seed_sop() -> Value {
    json!({
        "process_name": "customer complaint escalation",
        "trigger_conditions": ["satisfaction_score < 2", "mentions lawyer or sue"],
        "actions": [
            {"service": "ticketing", "method": "create_ticket", "params": {"priority": "urgent", "queue": "escalations"}},
            {"service": "ops_chat", "method": "post_message", "params": {"channel": "#support-escalations"}},
        ],
    })
}

fn paths(set: &SchemaSet, record_type: &str, content: &Value) -> Vec<String> {
    set.validate("v1", record_type, content, "$.content")
        .err()
        .unwrap_or_default()
        .into_iter()
        .map(|p| p.path)
        .collect()
}

#[test]
fn the_seed_records_pass_the_v1_schemas_as_written() {
    let set = SchemaSet::load(None).unwrap();
    assert_eq!(set.validate("v1", "customer_profile", &seed_profile(), "$.content"), Ok(()));
    assert_eq!(set.validate("v1", "internal_sop", &seed_sop(), "$.content"), Ok(()));
    assert!(check_conditions(&seed_sop()).is_empty());
    // A date-time for the last order is fine too; the richer fields stay.
    let mut profile = seed_profile();
    profile["last_order_date"] = json!("2024-06-10T14:30:00Z");
    profile["timezone"] = json!("Asia/Shanghai");
    profile["preferred_channel"] = json!("chat");
    assert_eq!(set.validate("v1", "customer_profile", &profile, "$.content"), Ok(()));
    // The project's own SOP shape still passes, and may act too.
    let mut sop =
        json!({"title": "Refund process", "steps": "1. Verify the order.", "owner_team": "billing"});
    assert_eq!(set.validate("v1", "internal_sop", &sop, "$.content"), Ok(()));
    sop["trigger_conditions"] =
        json!([{"keywords": ["refund", "退款", "возврат*"]}, {"entity": "order_number"}]);
    sop["actions"] = json!([{"service": "ticketing", "method": "create_ticket"}]);
    assert_eq!(set.validate("v1", "internal_sop", &sop, "$.content"), Ok(()));
    // It may set its own cooldown, a whole number of seconds up to a week, beside its conditions.
    sop["trigger_cooldown_seconds"] = json!(3600);
    assert_eq!(set.validate("v1", "internal_sop", &sop, "$.content"), Ok(()));
    sop["trigger_cooldown_seconds"] = json!(604_801);
    assert!(set.validate("v1", "internal_sop", &sop, "$.content").is_err());
    let alone = json!({"title": "Refunds", "steps": "1. …", "trigger_cooldown_seconds": 60});
    assert!(set.validate("v1", "internal_sop", &alone, "$.content").is_err());
}

#[test]
fn misspelt_and_missing_fields_still_fail() {
    let set = SchemaSet::load(None).unwrap();
    let mut profile = seed_profile();
    profile["contact_emial"] = profile["contact_email"].take();
    profile.as_object_mut().unwrap().remove("contact_email");
    assert_eq!(paths(&set, "customer_profile", &profile), ["$.content.contact_emial"]);
    let mut profile = seed_profile();
    profile["contact_email"] = json!("li.wei-at-example.com");
    profile["last_order_date"] = json!("last Tuesday");
    assert_eq!(
        paths(&set, "customer_profile", &profile),
        ["$.content.contact_email", "$.content.last_order_date"]
    );

    let mut sop = seed_sop();
    sop["trigger_condition"] = sop["trigger_conditions"].take();
    sop.as_object_mut().unwrap().remove("trigger_conditions");
    let found = paths(&set, "internal_sop", &sop);
    assert!(found.contains(&"$.content.trigger_condition".to_owned()), "{found:?}");
    assert!(found.contains(&"$.content.trigger_conditions".to_owned()), "actions need conditions: {found:?}");
    // Neither a name nor steps or actions.
    assert_eq!(paths(&set, "internal_sop", &json!({"purpose": "x"})), ["$.content.steps", "$.content.title"]);
    // An action naming a URL, a condition of two kinds, an unknown entity.
    let mut sop = seed_sop();
    sop["actions"][0]["url"] = json!("http://10.0.0.1/");
    sop["trigger_conditions"] = json!([{"keywords": ["x"], "regex": "y"}, {"entity": "passport"}]);
    let found = paths(&set, "internal_sop", &sop);
    for expected in [
        "$.content.actions[0].url",
        "$.content.trigger_conditions[0]",
        "$.content.trigger_conditions[1].entity",
    ] {
        assert!(found.contains(&expected.to_owned()), "{expected} in {found:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// A receiver: answers from a script (then 200), records every request.

#[derive(Clone, Copy)]
enum Answer {
    Status(u16),
    RetryAfter(u16, u64),
}

struct Seen {
    at: Instant,
    headers: HeaderMap,
    body: Bytes,
}

#[derive(Clone, Default)]
struct Receiver {
    script: Arc<Mutex<VecDeque<Answer>>>,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Receiver {
    async fn start(script: &[Answer]) -> (Receiver, String) {
        let receiver = Receiver::default();
        receiver.script.lock().unwrap().extend(script.iter().copied());
        let app = axum::Router::new().route("/hook", axum::routing::post(hook)).with_state(receiver.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move { axum::serve(listener, app).await });
        (receiver, format!("http://127.0.0.1:{port}/hook"))
    }

    fn count(&self) -> usize {
        self.seen.lock().unwrap().len()
    }

    fn ids(&self) -> Vec<String> {
        self.seen.lock().unwrap().iter().map(|s| header(&s.headers, "webhook-id")).collect()
    }
}

async fn hook(State(receiver): State<Receiver>, headers: HeaderMap, body: Bytes) -> Response {
    receiver.seen.lock().unwrap().push(Seen { at: Instant::now(), headers, body });
    let answer = receiver.script.lock().unwrap().pop_front().unwrap_or(Answer::Status(200));
    match answer {
        Answer::Status(status) => (StatusCode::from_u16(status).unwrap(), "answered").into_response(),
        Answer::RetryAfter(status, secs) => {
            (StatusCode::from_u16(status).unwrap(), [("retry-after", secs.to_string())], "slow down")
                .into_response()
        }
    }
}

fn header(headers: &HeaderMap, name: &str) -> String {
    headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned()
}

// ---------------------------------------------------------------------------------------------
// Memgate's side.

fn sop_record(tenant: &str) -> Record {
    Record {
        tenant: tenant.into(),
        id: "sop-escalation".into(),
        record_type: "internal_sop".into(),
        schema_version: "v1".into(),
        scope: vec!["team:support".into()],
        valid_from_ms: 0,
        valid_until_ms: memgate::record::OPEN_END_MS,
        priority: 4,
        key: None,
        aliases: vec![],
        content: seed_sop(),
        metadata: Default::default(),
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

/// A `[triggers]` section with the one endpoint `ticketing` at `url`, quick to retry, without
/// cooldowns (these tests fire one record for one subject many times, on purpose).
fn config(url: &str, allow_private: bool) -> TriggersConfig {
    let text = format!(
        r#"
        cooldown_seconds = 0
        max_attempts = 4
        backoff_base_ms = 50
        backoff_max_ms = 2000
        poll_interval_ms = 25
        lease_ms = 8000
        [endpoints.ticketing]
        url = "{url}"
        secrets = ["{SECRET_OLD}", "{SECRET_NEW}"]
        timeout_ms = 2000
        allow_private = {allow_private}
        "#
    );
    toml::from_str(&text).unwrap()
}

async fn open(db: &TestDb) -> Store {
    let store = Store::connect(&db.url).await.unwrap();
    store.migrate().await.unwrap();
    store
}

fn triggers(config: TriggersConfig, store: &Store) -> Triggers {
    Triggers::new(config, store.clone(), TaskTracker::new(), TriggerMetrics::default()).unwrap()
}

/// Evaluates the seed SOP on `words` for `request_id` and writes its decisions; returns the id of
/// the `ticketing` action.
async fn decide(triggers: &Triggers, tenant: &str, request_id: &str, words: &str) -> String {
    let values = BTreeMap::new();
    let input = TriggerInput::new(words, &values);
    let record = sop_record(tenant);
    let fired = triggers.evaluate(&input, [&record]);
    assert_eq!(fired.len(), 1, "the SOP fires on {words:?}");
    let decisions = triggers.decide(tenant, request_id, Some("u-789"), "key:k1", &input, &fired);
    triggers.enqueue_now(&decisions).await.unwrap();
    decisions[0].id.clone()
}

async fn wait_for_state(store: &Store, tenant: &str, id: &str, state: OutboxState, limit: Duration) {
    eventually(limit, &format!("{id} to be {}", state.as_str()), || async move {
        (store.outbox_get(tenant, id).await.ok()?.state == state).then_some(())
    })
    .await;
}

#[tokio::test]
async fn retries_after_500_and_429_with_retry_after_then_delivers_signed() {
    let db = TestDb::sqlite();
    let store = open(&db).await;
    let (receiver, url) = Receiver::start(&[Answer::Status(500), Answer::RetryAfter(429, 1)]).await;
    let triggers = triggers(config(&url, true), &store);
    let stop = CancellationToken::new();
    let worker = triggers.delivery().spawn(&TaskTracker::new(), stop.clone());

    let id = decide(&triggers, "t", "req-1", "I'm going to talk to my lawyer").await;
    wait_for_state(&store, "t", &id, OutboxState::Delivered, Duration::from_secs(20)).await;
    stop.cancel();
    worker.await.unwrap();

    let seen = std::mem::take(&mut *receiver.seen.lock().unwrap());
    assert_eq!(seen.len(), 3, "500, then 429, then 200");
    let gap = seen[2].at - seen[1].at;
    assert!(gap >= Duration::from_millis(990), "Retry-After: 1 honoured (waited {gap:?})");
    assert!(seen[1].at - seen[0].at < Duration::from_millis(900), "the first retry backs off briefly");
    let secrets = [WebhookSecret::parse(SECRET_OLD).unwrap(), WebhookSecret::parse(SECRET_NEW).unwrap()];
    let now = memgate::clock::now_ms() / 1000;
    for attempt in seen.iter() {
        assert_eq!(header(&attempt.headers, "webhook-id"), id, "one id for every attempt");
        assert_eq!(header(&attempt.headers, "content-type"), "application/json");
        let timestamp = header(&attempt.headers, "webhook-timestamp");
        let signature = header(&attempt.headers, "webhook-signature");
        assert_eq!(signature.split(' ').count(), 2, "both secrets sign during the rotation");
        for secret in &secrets {
            signing::verify(secret, &id, &timestamp, &signature, &attempt.body, now, 60).unwrap();
        }
    }
    let body: Value = serde_json::from_slice(&seen[2].body).unwrap();
    assert_eq!(body["type"], "memgate.trigger.fired");
    assert_eq!(body["data"]["event_id"], id.as_str());
    assert_eq!(body["data"]["request_id"], "req-1");
    assert_eq!(body["data"]["record"]["id"], "sop-escalation");
    assert_eq!(body["data"]["matched"]["hit"], "lawyer");
    assert!(body["data"].get("conversation").is_none(), "no opt-in: the words stay out");
    assert!(body["data"]["matched"].get("excerpt").is_none());
    assert_eq!(seen[0].body, seen[2].body, "every attempt sends the same bytes");

    let row = store.outbox_get("t", &id).await.unwrap();
    assert_eq!((row.attempts, row.last_status), (3, Some(200)));
    assert_eq!(row.last_response.as_deref(), Some("answered"));
    let metrics = triggers.metrics();
    assert_eq!((metrics.queued.get(), metrics.delivered.get(), metrics.failed.get()), (2, 1, 2));
    // The second action names an endpoint nobody configured: dead at once, with the reason.
    let dead = store
        .outbox_list(&OutboxFilter { state: Some(OutboxState::Dead), ..Default::default() }, None, 10)
        .await
        .unwrap();
    assert_eq!(dead.len(), 1);
    assert!(dead[0].last_error.as_deref().unwrap().contains("ops_chat"));
}

#[tokio::test]
async fn a_schedule_that_runs_out_is_dead_and_can_be_replayed() {
    let db = TestDb::sqlite();
    let store = open(&db).await;
    let (receiver, url) = Receiver::start(&[Answer::Status(503); 4]).await;
    let triggers = triggers(config(&url, true), &store);
    let stop = CancellationToken::new();
    let worker = triggers.delivery().spawn(&TaskTracker::new(), stop.clone());
    let id = decide(&triggers, "t", "req-1", "we will sue").await;
    wait_for_state(&store, "t", &id, OutboxState::Dead, Duration::from_secs(20)).await;
    let dead = store.outbox_get("t", &id).await.unwrap();
    assert_eq!((dead.attempts, dead.last_status), (4, Some(503)));
    assert!(
        dead.last_error
            .unwrap()
            .starts_with("gave up after 4 attempts; the last: endpoint `ticketing` answered HTTP 503")
    );
    assert_eq!(receiver.count(), 4);

    // The receiver is back (its script is used up: 200 from now on); an operator replays.
    let listed =
        triggers.list("t", OutboxFilter { state: Some(OutboxState::Dead), ..Default::default() }, None, 10);
    assert_eq!(listed.await.unwrap().len(), 2, "this one and the action for the unconfigured ops_chat");
    assert!(matches!(triggers.replay("other-tenant", &id).await, Err(memgate::store::StoreError::NotFound)));
    assert!(
        matches!(triggers.replay("t", &id).await.unwrap(), Replay::Replayed(_)),
        "and the worker is woken"
    );
    wait_for_state(&store, "t", &id, OutboxState::Delivered, Duration::from_secs(20)).await;
    assert_eq!(receiver.ids(), vec![id.clone(); 5], "the same webhook-id after the replay");
    assert!(
        matches!(triggers.replay("t", &id).await.unwrap(), Replay::Replayed(_)),
        "a delivered one replays too"
    );
    assert_eq!(triggers.get("t", &id).await.unwrap().replays, 2);
    // Erasure removes the record's actions, whatever their state.
    assert_eq!(triggers.forget("t", &["sop-escalation".to_owned()], Some("u-789")).await.unwrap(), 2);
    assert!(triggers.list("t", OutboxFilter::default(), None, 10).await.unwrap().is_empty());
    stop.cancel();
    worker.await.unwrap();
}

#[tokio::test]
async fn private_addresses_are_refused_unless_allowed() {
    let db = TestDb::sqlite();
    let store = open(&db).await;
    let (receiver, url) = Receiver::start(&[]).await;
    let by_name = url.replace("127.0.0.1", "localhost");
    for (tenant, endpoint) in [("literal", url.as_str()), ("name", by_name.as_str())] {
        let refusing = triggers(config(endpoint, false), &store);
        let id = decide(&refusing, tenant, "req-1", "my lawyer will call").await;
        assert_eq!(refusing.delivery().deliver_due(10).await.unwrap(), 1);
        let dead = store.outbox_get(tenant, &id).await.unwrap();
        assert_eq!(dead.state, OutboxState::Dead, "{endpoint}: refused without retries");
        let error = dead.last_error.unwrap();
        assert!(error.contains("loopback") && error.contains("allow_private"), "{error}");
        assert_eq!(receiver.count(), 0, "nothing reached the receiver");

        // The operator allows it (a receiver on the same host) and replays.
        let allowing = triggers(config(endpoint, true), &store);
        store.outbox_replay(tenant, &id, memgate::clock::now_ms()).await.unwrap();
        assert_eq!(allowing.delivery().deliver_due(10).await.unwrap(), 1);
        assert_eq!(store.outbox_get(tenant, &id).await.unwrap().state, OutboxState::Delivered);
        receiver.seen.lock().unwrap().clear();
    }
}

#[tokio::test]
async fn gone_and_redirects_are_not_followed_or_retried_forever() {
    let db = TestDb::sqlite();
    let store = open(&db).await;
    let (receiver, url) = Receiver::start(&[Answer::Status(307), Answer::Status(410)]).await;
    let triggers = triggers(config(&url, true), &store);
    let id = decide(&triggers, "t", "req-1", "my lawyer").await;
    triggers.delivery().deliver_due(10).await.unwrap();
    let first = store.outbox_get("t", &id).await.unwrap();
    assert_eq!((first.state, first.last_status), (OutboxState::Retrying, Some(307)));
    assert!(first.last_error.unwrap().contains("redirects are not followed"));
    assert_eq!(receiver.count(), 1, "the redirect was not followed");
    // Due again within the first backoff (≤ 50 ms).
    let t = &triggers;
    eventually(Duration::from_secs(5), "the retry", || async move {
        (t.delivery().deliver_due(10).await.unwrap() == 1).then_some(())
    })
    .await;
    let gone = store.outbox_get("t", &id).await.unwrap();
    assert_eq!((gone.state, gone.last_status), (OutboxState::Dead, Some(410)));
}

#[tokio::test]
async fn decided_then_killed_is_delivered_by_whoever_runs_next() {
    let db = TestDb::sqlite();
    let store = open(&db).await;
    let (receiver, url) = Receiver::start(&[]).await;
    // Replica C decided an action, claimed it and died mid-delivery: its lease runs out.
    let c = triggers(config(&url, true), &store);
    let mid = decide(&c, "t", "req-2", "I will sue").await;
    let now = memgate::clock::now_ms();
    let claimed = store.outbox_claim("replica-c", now, 300, 10).await.unwrap();
    assert_eq!(claimed.len(), 1);
    drop(c);
    // Replica A decides, then dies before its worker ever ran.
    let before = {
        let a = triggers(config(&url, true), &store);
        decide(&a, "t", "req-1", "I'm going to talk to my lawyer").await
    };
    // Replica B starts later and delivers both, the second once C's lease has run out.
    let b = triggers(config(&url, true), &store);
    let stop = CancellationToken::new();
    let worker = b.delivery().spawn(&TaskTracker::new(), stop.clone());
    wait_for_state(&store, "t", &before, OutboxState::Delivered, Duration::from_secs(20)).await;
    wait_for_state(&store, "t", &mid, OutboxState::Delivered, Duration::from_secs(20)).await;
    stop.cancel();
    worker.await.unwrap();
    assert_eq!(store.outbox_get("t", &mid).await.unwrap().attempts, 2, "the interrupted attempt counts");
    let mut ids = receiver.ids();
    ids.sort();
    let mut want = vec![before, mid];
    want.sort();
    assert_eq!(ids, want);
}

#[tokio::test]
async fn two_replicas_on_one_postgresql_deliver_each_action_once() {
    let db = TestDb::postgres().await;
    let (receiver, url) = Receiver::start(&[]).await;
    let stores = [open(&db).await, open(&db).await];
    let replicas: Vec<Triggers> = stores.iter().map(|s| triggers(config(&url, true), s)).collect();
    // Both replicas see the same requests (a retried turn reaching either), 30 of them.
    let mut ids = Vec::new();
    for i in 0..30 {
        let request = format!("req-{i}");
        let first = decide(&replicas[0], "t", &request, "my lawyer").await;
        let second = decide(&replicas[1], "t", &request, "my lawyer").await;
        assert_eq!(first, second, "the same decision on both replicas");
        ids.push(first);
    }
    let stop = CancellationToken::new();
    let tracker = TaskTracker::new();
    let workers: Vec<_> = replicas.iter().map(|r| r.delivery().spawn(&tracker, stop.clone())).collect();
    let r = &receiver;
    eventually(Duration::from_secs(30), "30 deliveries", || async move { (r.count() >= 30).then_some(()) })
        .await;
    for id in &ids {
        wait_for_state(&stores[0], "t", id, OutboxState::Delivered, Duration::from_secs(10)).await;
    }
    stop.cancel();
    for worker in workers {
        worker.await.unwrap();
    }
    let mut per_id: HashMap<String, usize> = HashMap::new();
    for id in receiver.ids() {
        *per_id.entry(id).or_default() += 1;
    }
    assert_eq!(per_id.len(), 30);
    assert!(per_id.values().all(|n| *n == 1), "nothing delivered twice: {per_id:?}");
    let delivered: u64 = replicas.iter().map(|r| r.metrics().delivered.get()).sum();
    assert_eq!(delivered, 30);
}

/// Driven by tests/webhooks/run.sh: delivers to `MEMGATE_WEBHOOK_URL` (a receiver that checks
/// each delivery with the `standardwebhooks` library and answers 500, then 429 with Retry-After,
/// then 2xx) with the secrets in `MEMGATE_WEBHOOK_SECRETS` (space-separated), and waits until the
/// action is delivered.
#[tokio::test]
#[ignore = "run by tests/webhooks/run.sh against its Python receiver"]
async fn external_receiver() {
    let url = std::env::var("MEMGATE_WEBHOOK_URL").expect("MEMGATE_WEBHOOK_URL");
    let secrets = std::env::var("MEMGATE_WEBHOOK_SECRETS").expect("MEMGATE_WEBHOOK_SECRETS");
    let quoted: Vec<String> = secrets.split_whitespace().map(|s| format!("\"{s}\"")).collect();
    let text = format!(
        "max_attempts = 5\nbackoff_base_ms = 50\nbackoff_max_ms = 3000\npoll_interval_ms = 25\n\
         [endpoints.ticketing]\nurl = \"{url}\"\nsecrets = [{}]\nallow_private = true\n\
         include_conversation = true\n",
        quoted.join(", ")
    );
    let config: TriggersConfig = toml::from_str(&text).unwrap();
    let db = TestDb::sqlite();
    let store = open(&db).await;
    let triggers = triggers(config, &store);
    let stop = CancellationToken::new();
    let worker = triggers.delivery().spawn(&TaskTracker::new(), stop.clone());
    let id = decide(&triggers, "t", "req-python", "Я поговорю со своим адвокатом — my lawyer").await;
    wait_for_state(&store, "t", &id, OutboxState::Delivered, Duration::from_secs(30)).await;
    stop.cancel();
    worker.await.unwrap();
    let row = store.outbox_get("t", &id).await.unwrap();
    println!("delivered {id} after {} attempts", row.attempts);
}

// ---------------------------------------------------------------------------------------------
// Measurements for docs/triggers.md ("Cost"): run with
//   cargo test --release --test integration -- --ignored --nocapture --test-threads 1 triggers::measure

fn percentile(values: &[f64], p: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// 50 visible records, 5 of them with triggers (50 keywords, a regex, entities, comparisons, the
/// seed SOP): what evaluating them and deciding adds to a request, firing and not.
#[tokio::test]
#[ignore = "a measurement; see docs/triggers.md"]
async fn measure_evaluate_and_decide() {
    let db = TestDb::sqlite();
    let store = open(&db).await;
    let triggers = triggers(config("http://127.0.0.1:9/hook", true), &store);
    let mut records: Vec<Record> = (0..45)
        .map(|i| {
            let mut r = sop_record("t");
            r.id = format!("note-{i}");
            r.content = json!({"title": format!("note {i}"), "steps": "x".repeat(500)});
            r
        })
        .collect();
    let keywords: Vec<String> = (0..50).map(|i| format!("keyword{i}")).collect();
    let act = json!([{"service": "ticketing", "method": "create_ticket"}]);
    for (i, conditions) in [
        json!([{"keywords": keywords}, "mentions refund or chargeback"]),
        json!([{"regex": "(cancel|terminate).{0,40}(contract|subscription)"}]),
        json!([{"entity": "email"}, {"entity": "phone"}]),
        json!(["satisfaction_score < 2"]),
    ]
    .into_iter()
    .enumerate()
    {
        let mut r = sop_record("t");
        r.id = format!("sop-{i}");
        r.content = json!({"title": "t", "steps": "s", "trigger_conditions": conditions, "actions": act});
        records.push(r);
    }
    records.push(sop_record("t"));
    let firing = format!(
        "{} I'm going to talk to my lawyer about ORD-2024-0615, 我要找律师",
        "My router keeps dropping the 5 GHz network every evening and support has not helped. ".repeat(3)
    );
    let values = BTreeMap::new();
    let (mut fire, mut quiet) = (Vec::new(), Vec::new());
    for i in 0..5000 {
        let started = Instant::now();
        let input = TriggerInput::new(&firing, &values);
        let fired = triggers.evaluate(&input, records.iter());
        let decisions = triggers.decide("t", &format!("req-{i}"), Some("u-789"), "key:k1", &input, &fired);
        fire.push(started.elapsed().as_secs_f64() * 1e6);
        assert_eq!(decisions.len(), 2);
        let started = Instant::now();
        let input = TriggerInput::new("what is your refund policy for routers bought last month?", &values);
        let fired = triggers.evaluate(&input, records.iter());
        quiet.push(started.elapsed().as_secs_f64() * 1e6);
        assert_eq!(fired.len(), 1, "`refund` fires the keyword SOP");
    }
    println!(
        "evaluate 50 records + decide (the seed SOP fires, 2 actions): p50 {:.0} µs, p99 {:.0} µs",
        percentile(&fire, 0.5),
        percentile(&fire, 0.99)
    );
    println!(
        "evaluate 50 records, a short question: p50 {:.0} µs, p99 {:.0} µs",
        percentile(&quiet, 0.5),
        percentile(&quiet, 0.99)
    );
}

/// Decisions at 100 per second through `enqueue` to a local receiver: the time from the enqueue
/// call to the receiver's arrival, after the first 100 (connection pools grown and warm).
async fn measure_delivery(db: TestDb, label: &str) {
    let store = open(&db).await;
    let (receiver, url) = Receiver::start(&[]).await;
    let tasks = TaskTracker::new();
    let mut config = config(&url, true);
    config.poll_interval_ms = 1_000;
    let triggers = Triggers::new(config, store.clone(), tasks.clone(), TriggerMetrics::default()).unwrap();
    let stop = CancellationToken::new();
    let worker = triggers.delivery().spawn(&tasks, stop.clone());
    let record = sop_record("t");
    let values = BTreeMap::new();
    let mut sent = Vec::new();
    let mut enqueue_us = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    for i in 0..400 {
        tick.tick().await;
        let input = TriggerInput::new("I'm going to talk to my lawyer", &values);
        let fired = triggers.evaluate(&input, [&record]);
        let mut decisions = triggers.decide("t", &format!("req-{i}"), None, "key:k1", &input, &fired);
        decisions.truncate(1);
        let id = decisions[0].id.clone();
        let started = Instant::now();
        triggers.enqueue(decisions);
        enqueue_us.push(started.elapsed().as_secs_f64() * 1e6);
        sent.push((id, started));
    }
    let r = &receiver;
    eventually(Duration::from_secs(60), "400 deliveries", || async move { (r.count() >= 400).then_some(()) })
        .await;
    stop.cancel();
    worker.await.unwrap();
    let arrived: HashMap<String, Instant> =
        receiver.seen.lock().unwrap().iter().map(|s| (header(&s.headers, "webhook-id"), s.at)).collect();
    let latency: Vec<f64> =
        sent[100..].iter().map(|(id, at)| (arrived[id] - *at).as_secs_f64() * 1e3).collect();
    println!(
        "{label}: enqueue call p99 {:.0} µs; decision to receiver at 100/s: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        percentile(&enqueue_us, 0.99),
        percentile(&latency, 0.5),
        percentile(&latency, 0.99),
        percentile(&latency, 1.0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement; see docs/triggers.md"]
async fn measure_delivery_sqlite() {
    measure_delivery(TestDb::sqlite(), "SQLite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement; see docs/triggers.md"]
async fn measure_delivery_postgres() {
    measure_delivery(TestDb::postgres().await, "PostgreSQL").await;
}
