//! Triggers through the real binary: a record written in the seed's shape, callers with and
//! without the scope it lives in, requests through memgate to the mock upstream, and a real
//! HTTP receiver for the signed webhooks. What a user sees: `X-Memory-Triggered` on the answer,
//! deliveries at the receiver (verified as a Standard Webhooks library would), the actions in
//! `/admin/v1/actions` and `explain`, and an action decided by a memgate killed before it could
//! deliver, delivered by the next one on the same database.

use crate::e2e_identity::{ADMIN_TOKEN, UPSTREAM_KEY, issue_key};
use crate::support::{Proc, TempDir, TestDb, client, eventually};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use memgate::config::triggers::WebhookSecret;
use memgate::triggers::signing;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const WAIT: Duration = Duration::from_secs(20);

/// Every delivery a receiver got: headers and body.
#[derive(Clone, Default)]
pub(crate) struct Receiver {
    seen: Arc<Mutex<Vec<(HeaderMap, Bytes)>>>,
}

impl Receiver {
    /// Serves on `listener` (bound already, so a test can pick the port first).
    fn serve(listener: tokio::net::TcpListener) -> Receiver {
        let receiver = Receiver::default();
        let app = axum::Router::new().route("/hook", axum::routing::post(hook)).with_state(receiver.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        receiver
    }

    pub(crate) async fn start() -> (Receiver, String) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        (Receiver::serve(listener), url)
    }

    pub(crate) fn deliveries(&self) -> Vec<(HeaderMap, Value)> {
        let seen = self.seen.lock().unwrap();
        seen.iter().map(|(h, b)| (h.clone(), serde_json::from_slice(b).unwrap())).collect()
    }

    /// Checks every delivery's signature as a receiver would; returns the bodies.
    fn verified(&self) -> Vec<Value> {
        let secret = WebhookSecret::parse(SECRET).unwrap();
        let now = memgate::clock::now_ms() / 1000;
        let seen = self.seen.lock().unwrap();
        seen.iter()
            .map(|(headers, body)| {
                let get =
                    |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
                signing::verify(
                    &secret,
                    &get("webhook-id"),
                    &get("webhook-timestamp"),
                    &get("webhook-signature"),
                    body,
                    now,
                    300,
                )
                .expect("a delivery signed with the endpoint's secret");
                serde_json::from_slice(body).unwrap()
            })
            .collect()
    }
}

async fn hook(State(receiver): State<Receiver>, headers: HeaderMap, body: Bytes) -> &'static str {
    receiver.seen.lock().unwrap().push((headers, body));
    "ok"
}

/// A config with two endpoints at `url` (a receiver on loopback, so allowed explicitly).
pub(crate) fn triggers_config(url: &str) -> TempDir {
    let dir = TempDir::new("triggers-config");
    let text = format!(
        "[memory]\nfunnel_timeout_ms = 5000\ndefault_release = \"v1\"\n\
         [triggers]\nbackoff_base_ms = 200\nbackoff_max_ms = 1000\npoll_interval_ms = 200\nlease_ms = 6500\n\
         [triggers.endpoints.ticketing]\nurl = \"{url}\"\nsecrets = [\"{SECRET}\"]\nallow_private = true\ntimeout_ms = 1000\n\
         [triggers.endpoints.ops_chat]\nurl = \"{url}\"\nsecrets = [\"{SECRET}\"]\nallow_private = true\ntimeout_ms = 1000\n"
    );
    std::fs::write(dir.path.join("memgate.toml"), text).unwrap();
    dir
}

fn gateway(mock: &Proc, config: &TempDir, db: &TestDb) -> Proc {
    let config_path = config.path.join("memgate.toml");
    Proc::gateway(
        mock,
        &[
            "--auth-mode",
            "managed",
            "--config",
            config_path.to_str().unwrap(),
            "--database-url",
            db.url.as_str(),
        ],
        &[("ANTHROPIC_API_KEY", UPSTREAM_KEY), ("MEMGATE_ADMIN_TOKEN", ADMIN_TOKEN)],
    )
}

/// The seed design's escalation SOP, as written, for the support team.
async fn write_sop(gateway: &Proc, actions: Value) {
    write_sop_in(gateway, "default", actions).await;
}

async fn write_sop_in(gateway: &Proc, tenant: &str, actions: Value) {
    let record = json!({
        "id": "sop-escalation",
        "type": "internal_sop",
        "schema_version": "v1",
        "scope": ["team:support"],
        "content": {
            "process_name": "customer complaint escalation",
            "trigger_conditions": ["satisfaction_score < 2", "mentions lawyer or sue"],
            "actions": actions,
        },
    });
    let (status, answer) = admin(gateway, reqwest::Method::POST, "/memories", tenant, Some(record)).await;
    assert_eq!(status, 201, "{answer}");
}

fn seed_actions() -> Value {
    json!([
        {"service": "ticketing", "method": "create_ticket", "params": {"priority": "urgent"}},
        {"service": "ops_chat", "method": "post_message", "params": {"channel": "#support-escalations"}},
    ])
}

/// Sends one user message with `key`; returns the status and `X-Memory-Triggered` (0 when absent).
async fn say(gateway: &Proc, key: &str, text: &str, values: Option<&str>) -> (u16, usize) {
    say_as(gateway, key, None, text, values).await
}

/// `say`, naming the end user with `X-Memory-Subject` (the key must be allowed to).
pub(crate) async fn say_as(
    gateway: &Proc,
    key: &str,
    subject: Option<&str>,
    text: &str,
    values: Option<&str>,
) -> (u16, usize) {
    let body = json!({"model": "claude-sonnet-4-5", "max_tokens": 32,
        "messages": [{"role": "user", "content": text}]});
    let mut request = client().post(gateway.url("/v1/messages")).header("x-api-key", key).json(&body);
    if let Some(values) = values {
        request = request.header("x-memory-values", values);
    }
    if let Some(subject) = subject {
        request = request.header("x-memory-subject", subject);
    }
    let response = request.send().await.unwrap();
    let triggered =
        response.headers().get("x-memory-triggered").map_or(0, |v| v.to_str().unwrap().parse().unwrap());
    (response.status().as_u16(), triggered)
}

/// An admin call in `tenant`; its status and JSON answer (`Null` when it has none).
async fn admin(
    gateway: &Proc,
    method: reqwest::Method,
    path: &str,
    tenant: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut request = client()
        .request(method, gateway.url(&format!("/admin/v1{path}")))
        .bearer_auth(ADMIN_TOKEN)
        .header("x-memory-tenant", tenant);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

pub(crate) async fn actions(gateway: &Proc, query: &str) -> Vec<Value> {
    actions_in(gateway, "default", query).await
}

async fn actions_in(gateway: &Proc, tenant: &str, query: &str) -> Vec<Value> {
    let (status, answer) =
        admin(gateway, reqwest::Method::GET, &format!("/actions{query}"), tenant, None).await;
    assert_eq!(status, 200, "{answer}");
    answer["data"].as_array().cloned().unwrap()
}

/// A counter on the gateway's `/metrics` (0 when it is not there).
async fn counter(gateway: &Proc, name: &str) -> f64 {
    let text = client().get(gateway.url("/metrics")).send().await.unwrap().text().await.unwrap();
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .map_or(0.0, |value| value.trim().parse().unwrap())
}

/// A `[triggers]` section with `settings`, and one endpoint `ticketing` at `url` with `endpoint`
/// settings.
fn config_with(url: &str, settings: &str, endpoint: &str) -> TempDir {
    let dir = TempDir::new("triggers-config");
    let text = format!(
        "[memory]\nfunnel_timeout_ms = 5000\ndefault_release = \"v1\"\n\
         [triggers]\npoll_interval_ms = 200\nlease_ms = 6500\n{settings}\n\
         [triggers.endpoints.ticketing]\nurl = \"{url}\"\nsecrets = [\"{SECRET}\"]\nallow_private = true\n\
         timeout_ms = 1000\n{endpoint}\n"
    );
    std::fs::write(dir.path.join("memgate.toml"), text).unwrap();
    dir
}

fn ticket() -> Value {
    json!([{"service": "ticketing", "method": "create_ticket", "params": {"priority": "urgent"}}])
}

/// A key for the support team that may name the end user.
async fn support_bot(gateway: &Proc, tenant: &str) -> String {
    let body = json!({"name": "support-bot", "scopes": ["team:support"], "permissions": ["assert_subject"]});
    issue_key(gateway, tenant, body).await.0
}

#[tokio::test]
async fn a_threat_fires_the_seeds_sop_for_callers_who_may_see_it_and_the_webhooks_arrive_signed() {
    let (receiver, url) = Receiver::start().await;
    let config = triggers_config(&url);
    let db = TestDb::sqlite();
    let mock = Proc::mock(&[]);
    let gateway = gateway(&mock, &config, &db);
    write_sop(&gateway, seed_actions()).await;
    let (support, _) =
        issue_key(&gateway, "default", json!({"name": "support", "scopes": ["team:support"]})).await;
    let (outsider, _) = issue_key(&gateway, "default", json!({"name": "shop", "scopes": []})).await;

    // Someone who cannot see the SOP fires nothing, whatever they say.
    assert_eq!(say(&gateway, &outsider, "I'm going to talk to my lawyer", None).await, (200, 0));
    // A plain question fires nothing.
    assert_eq!(say(&gateway, &support, "What is your refund policy?", None).await, (200, 0));
    // The threat fires both actions of the record, delivered signed.
    assert_eq!(say(&gateway, &support, "I'm going to talk to my lawyer about this", None).await, (200, 2));
    eventually(WAIT, "two deliveries", || async { (receiver.deliveries().len() >= 2).then_some(()) }).await;
    let bodies = receiver.verified();
    let mut methods: Vec<&str> = bodies.iter().map(|b| b["data"]["method"].as_str().unwrap()).collect();
    methods.sort_unstable();
    assert_eq!(methods, ["create_ticket", "post_message"]);
    for body in &bodies {
        assert_eq!(body["data"]["record"]["id"], "sop-escalation");
        assert_eq!(body["data"]["matched"]["hit"], "lawyer");
        // The conversation stays out unless the endpoint opts in.
        assert!(!body.to_string().contains("about this"), "{body}");
    }
    // A client's retry of the same turn decides the same ids: still two actions.
    assert_eq!(say(&gateway, &support, "I'm going to talk to my lawyer about this", None).await, (200, 2));
    // A value the client passes meets the comparison (from another key: the first one's firing
    // of this record is cooling down).
    let (support_2, _) =
        issue_key(&gateway, "default", json!({"name": "support-2", "scopes": ["team:support"]})).await;
    assert_eq!(
        say(&gateway, &support_2, "The sofa arrived fine", Some("satisfaction_score=4")).await,
        (200, 0)
    );
    assert_eq!(
        say(&gateway, &support_2, "The sofa arrived broken", Some("satisfaction_score=1")).await,
        (200, 2)
    );
    let listed = eventually(WAIT, "four actions delivered", || async {
        let listed = actions(&gateway, "?state=delivered").await;
        (listed.len() == 4).then_some(listed)
    })
    .await;
    assert!(
        listed.iter().all(|a| a["record_id"] == "sop-escalation" && a.get("body").is_none()),
        "{listed:?}"
    );
    assert_eq!(actions(&gateway, "").await.len(), 4, "the retried turn added nothing");
    eventually(WAIT, "four deliveries", || async { (receiver.deliveries().len() == 4).then_some(()) }).await;

    // explain shows what would fire, sending nothing.
    let explain = json!({
        "request": {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "we will sue you"}]},
        "caller": {"scopes": ["team:support"]},
    });
    let (_, explained) = admin(&gateway, reqwest::Method::POST, "/explain", "default", Some(explain)).await;
    let would: Vec<(&str, bool)> = explained["triggers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| (w["service"].as_str().unwrap(), w["configured"].as_bool().unwrap()))
        .collect();
    assert_eq!(would, [("ticketing", true), ("ops_chat", true)]);
    assert!(explained["triggers"].as_array().unwrap().iter().all(|w| w["cooldown_seconds"] == 600));
    // Each layer names what it let through, and every record named is summarized.
    let scope =
        explained["trace"]["layers"].as_array().unwrap().iter().find(|l| l["layer"] == "scope").unwrap();
    assert_eq!(scope["kept"][0]["id"], "sop-escalation", "{scope}");
    assert_eq!(explained["records"]["sop-escalation"]["type"], "internal_sop", "{explained}");
    assert_eq!(actions(&gateway, "").await.len(), 4, "explain decided nothing");
    assert_eq!(receiver.deliveries().len(), 4);
}

#[tokio::test]
async fn an_action_for_an_unconfigured_endpoint_is_dead_and_a_replay_sends_it_again() {
    let (_receiver, url) = Receiver::start().await;
    let config = triggers_config(&url);
    let db = TestDb::sqlite();
    let mock = Proc::mock(&[]);
    let gateway = gateway(&mock, &config, &db);
    write_sop(&gateway, json!([{"service": "crm", "method": "flag_account"}])).await;
    let (support, _) =
        issue_key(&gateway, "default", json!({"name": "support", "scopes": ["team:support"]})).await;
    // Still decided (and counted): an operator sees it dead, with the reason, and can replay it.
    assert_eq!(say(&gateway, &support, "we will sue", None).await, (200, 1));
    let dead = eventually(WAIT, "a dead action", || async {
        let listed = actions(&gateway, "?state=dead").await;
        listed.into_iter().next()
    })
    .await;
    assert!(dead["last_error"].as_str().unwrap_or("").contains("crm"), "{dead}");
    let id = dead["id"].as_str().unwrap();
    let (status, replayed) =
        admin(&gateway, reqwest::Method::POST, &format!("/actions/{id}/replay"), "default", None).await;
    assert_eq!(status, 200, "{replayed}");
    assert_eq!(replayed["replays"], 1);
    // Another tenant's admin view does not have it.
    let (status, _) = admin(&gateway, reqwest::Method::GET, &format!("/actions/{id}"), "globex", None).await;
    assert_eq!(status, 404);
    // A bad filter is named.
    let (status, answer) =
        admin(&gateway, reqwest::Method::GET, "/actions?state=gone", "default", None).await;
    assert_eq!(status, 400, "{answer}");
    // A malformed X-Memory-Values header is the caller's error, before anything goes upstream.
    assert_eq!(say(&gateway, &support, "hello", Some("no equals sign")).await.0, 400);
}

#[tokio::test]
async fn an_action_decided_by_a_memgate_killed_before_delivering_is_delivered_by_the_next() {
    // A port with nothing on it yet: the first memgate's attempts are refused.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let url = format!("http://{addr}/hook");
    let config = triggers_config(&url);
    let db = TestDb::sqlite();
    let mock = Proc::mock(&[]);
    let first = gateway(&mock, &config, &db);
    write_sop(&first, seed_actions()).await;
    let (support, _) =
        issue_key(&first, "default", json!({"name": "support", "scopes": ["team:support"]})).await;
    assert_eq!(say(&first, &support, "I'm going to talk to my lawyer", None).await, (200, 2));
    eventually(WAIT, "a failed attempt", || async {
        let listed = actions(&first, "").await;
        (listed.len() == 2 && listed.iter().any(|a| a["attempts"].as_i64() >= Some(1))).then_some(())
    })
    .await;
    // Killed (SIGKILL): no shutdown, nothing more delivered. An action it had claimed stays
    // reserved until its lease (6.5 s here) runs out, then anyone may deliver it.
    drop(first);

    let receiver = Receiver::serve(tokio::net::TcpListener::bind(addr).await.unwrap());
    let second = gateway(&mock, &config, &db);
    eventually(WAIT, "both actions delivered by the next memgate", || async {
        (receiver.deliveries().len() >= 2).then_some(())
    })
    .await;
    let bodies = receiver.verified();
    let mut ids: Vec<&str> = bodies.iter().map(|b| b["data"]["event_id"].as_str().unwrap()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 2, "each action once: {ids:?}");
    eventually(WAIT, "both marked delivered", || async {
        (actions(&second, "?state=delivered").await.len() == 2).then_some(())
    })
    .await;
}

const COOLED: &str = "memgate_trigger_firings_cooled_down_total";

#[tokio::test]
async fn varied_words_from_one_subject_open_one_action_within_the_cooldown_and_another_subject_still_fires() {
    let (receiver, url) = Receiver::start().await;
    let config = triggers_config(&url);
    let db = TestDb::sqlite();
    let mock = Proc::mock(&[]);
    let gateway = gateway(&mock, &config, &db);
    write_sop(&gateway, ticket()).await;
    let bot = support_bot(&gateway, "default").await;

    // One customer's threat opens one ticket; their next ones, worded otherwise, open none.
    assert_eq!(
        say_as(&gateway, &bot, Some("cust-1"), "I'm going to talk to my lawyer 1", None).await,
        (200, 1)
    );
    for i in 2..=5 {
        let words = format!("I'm going to talk to my lawyer {i}");
        assert_eq!(say_as(&gateway, &bot, Some("cust-1"), &words, None).await, (200, 0), "{words}");
    }
    // Another customer's threat still fires.
    assert_eq!(
        say_as(&gateway, &bot, Some("cust-2"), "I'm going to talk to my lawyer 1", None).await,
        (200, 1)
    );
    // Without a subject, the cooldown is the caller key's.
    let (plain, _) =
        issue_key(&gateway, "default", json!({"name": "shop", "scopes": ["team:support"]})).await;
    assert_eq!(say(&gateway, &plain, "we will sue 1", None).await, (200, 1));
    assert_eq!(say(&gateway, &plain, "we will sue 2", None).await, (200, 0));

    eventually(WAIT, "three deliveries", || async { (receiver.deliveries().len() >= 3).then_some(()) }).await;
    let mut subjects: Vec<Value> = actions(&gateway, "").await.iter().map(|a| a["subject"].clone()).collect();
    subjects.sort_by_key(Value::to_string);
    assert_eq!(subjects, [json!("cust-1"), json!("cust-2"), Value::Null]);
    assert_eq!(counter(&gateway, COOLED).await, 5.0);
    assert_eq!(receiver.deliveries().len(), 3);
}

#[tokio::test]
async fn a_cooldown_holds_across_replicas_on_one_database() {
    let (receiver, url) = Receiver::start().await;
    let config = triggers_config(&url);
    let db = TestDb::postgres().await;
    let mock = Proc::mock(&[]);
    let a = gateway(&mock, &config, &db);
    let b = gateway(&mock, &config, &db);
    write_sop(&a, ticket()).await;
    let bot = support_bot(&a, "default").await;
    // B serves A's record once its index has caught up (explain decides nothing).
    let explain = json!({
        "request": {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "my lawyer"}]},
        "caller": {"scopes": ["team:support"]},
    });
    eventually(WAIT, "replica B to see the SOP", || async {
        let (_, answer) =
            admin(&b, reqwest::Method::POST, "/explain", "default", Some(explain.clone())).await;
        (answer["triggers"].as_array().is_some_and(|t| !t.is_empty())).then_some(())
    })
    .await;

    assert_eq!(say_as(&a, &bot, Some("cust-1"), "I'm going to talk to my lawyer 1", None).await, (200, 1));
    eventually(WAIT, "A's action written", || async { (actions(&a, "").await.len() == 1).then_some(()) })
        .await;
    // B has not seen A's firing: it decides, and the database, where the cooldown is, refuses it.
    assert_eq!(say_as(&b, &bot, Some("cust-1"), "I'm going to talk to my lawyer 2", None).await.0, 200);
    eventually(WAIT, "B's firing found cooling", || async {
        (counter(&b, COOLED).await == 1.0).then_some(())
    })
    .await;
    assert_eq!(actions(&b, "").await.len(), 1, "one ticket for cust-1 across replicas");
    // And another customer is another cooldown, on either replica.
    assert_eq!(say_as(&b, &bot, Some("cust-2"), "I'm going to talk to my lawyer 1", None).await, (200, 1));
    eventually(WAIT, "two deliveries", || async { (receiver.deliveries().len() == 2).then_some(()) }).await;
    assert_eq!(actions(&a, "").await.len(), 2);
}

#[tokio::test]
async fn a_tenant_past_its_cap_of_waiting_actions_has_new_ones_refused_counted_and_logged() {
    // Nothing listens: actions stay waiting (retrying, with attempts to spare).
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    drop(listener);
    let settings = "cooldown_seconds = 0\nmax_waiting_per_tenant = 2\nmax_attempts = 100\n\
                    backoff_base_ms = 30000\nbackoff_max_ms = 60000";
    let config = config_with(&url, settings, "");
    let db = TestDb::sqlite();
    let mock = Proc::mock(&[]);
    let gateway = gateway(&mock, &config, &db);
    write_sop(&gateway, ticket()).await;
    let (support, _) =
        issue_key(&gateway, "default", json!({"name": "support", "scopes": ["team:support"]})).await;
    for i in 1..=2 {
        assert_eq!(say(&gateway, &support, &format!("we will sue {i}"), None).await, (200, 1));
        eventually(WAIT, "the action written", || async {
            (actions(&gateway, "").await.len() == i).then_some(())
        })
        .await;
    }
    // Decided (the answer says so), but refused when written: the tenant has two waiting.
    assert_eq!(say(&gateway, &support, "we will sue 3", None).await, (200, 1));
    let refused = "memgate_trigger_actions_refused_total";
    eventually(WAIT, "the third refused", || async {
        (counter(&gateway, refused).await == 1.0).then_some(())
    })
    .await;
    let listed = actions(&gateway, "").await;
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert!(listed.iter().all(|a| a["state"] == "pending" || a["state"] == "retrying"), "{listed:?}");
    eventually(WAIT, "a log line", || async {
        gateway
            .stderr()
            .lines()
            .any(|l| l.contains("WARN") && l.contains("refused") && l.contains("default"))
            .then_some(())
    })
    .await;
    // The cap is the tenant's: another tenant's actions are still written.
    write_sop_in(&gateway, "globex", ticket()).await;
    let (globex, _) =
        issue_key(&gateway, "globex", json!({"name": "support", "scopes": ["team:support"]})).await;
    assert_eq!(say(&gateway, &globex, "we will sue 1", None).await, (200, 1));
    eventually(WAIT, "globex's action", || async {
        (actions_in(&gateway, "globex", "").await.len() == 1).then_some(())
    })
    .await;
    assert_eq!(counter(&gateway, refused).await, 1.0);
}

#[tokio::test]
async fn an_endpoint_past_its_rate_keeps_what_waits_queued_and_sends_it_when_the_rate_allows() {
    let (receiver, url) = Receiver::start().await;
    // 3 a minute: a burst of three, then one every 20 seconds.
    let config = config_with(&url, "cooldown_seconds = 0", "max_per_minute = 3");
    let db = TestDb::sqlite();
    let mock = Proc::mock(&[]);
    let gateway = gateway(&mock, &config, &db);
    write_sop(&gateway, ticket()).await;
    let (support, _) =
        issue_key(&gateway, "default", json!({"name": "support", "scopes": ["team:support"]})).await;
    for i in 1..=4 {
        assert_eq!(say(&gateway, &support, &format!("we will sue {i}"), None).await, (200, 1));
    }
    // Three go at once (the burst) and are recorded delivered; the fourth waits its slot, put
    // back unattempted (a claim that found the pace full gives its attempt back). Until the
    // worker has claimed it, a fourth never tried looks the same, so the wait is also for the
    // deferral the claim counts.
    let listed = eventually(WAIT, "three delivered, one put back", || async {
        let listed = actions(&gateway, "").await;
        let delivered = listed.iter().filter(|a| a["state"] == "delivered").count();
        let put_back = listed.iter().any(|a| a["attempts"] == 0 && a["in_flight_until"].is_null());
        let deferred = counter(&gateway, "memgate_trigger_deliveries_deferred_total").await >= 1.0;
        (listed.len() == 4 && delivered == 3 && put_back && deferred).then_some(listed)
    })
    .await;
    let waiting: Vec<&Value> = listed.iter().filter(|a| a["state"] != "delivered").collect();
    assert_eq!(waiting.len(), 1, "{listed:?}");
    // Held back, not tried: no attempt spent, due when the pace allows (whether that moment has
    // already come by now depends on how busy the machine is, so only its presence is checked).
    assert_eq!((waiting[0]["state"].as_str(), waiting[0]["attempts"].as_i64()), (Some("pending"), Some(0)));
    assert!(waiting[0]["next_at"].is_string(), "{listed:?}");
    assert_eq!(receiver.deliveries().len(), 3);
    eventually(Duration::from_secs(60), "the fourth delivered when the pace allows", || async {
        (receiver.deliveries().len() == 4).then_some(())
    })
    .await;
    assert_eq!(actions(&gateway, "?state=delivered").await.len(), 4);
}

/// A receiver that answers every delivery 500 with `reply`.
async fn failing_receiver(reply: &'static str) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let app = axum::Router::new()
        .fallback(move || async move { (axum::http::StatusCode::INTERNAL_SERVER_ERROR, reply) });
    tokio::spawn(async move { axum::serve(listener, app).await });
    base
}

#[tokio::test]
async fn delivery_errors_name_the_endpoint_never_its_url_and_carry_no_control_characters() {
    const SECRET_PATH: &str = "/hooks/T0K3N-s3cr3t-path";
    let forged =
        "oops\r\n2024-06-15T09:00:00.000000Z  INFO FORGED: admin token accepted\n\u{1b}[2J\u{1b}[31mred";
    let failing = failing_receiver(forged).await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed_addr = closed.local_addr().unwrap();
    drop(closed);
    let endpoint = format!(
        "[triggers.endpoints.ops_chat]\nurl = \"http://{closed_addr}{SECRET_PATH}?sig=Q7bd91e\"\n\
         secrets = [\"{SECRET}\"]\nallow_private = true\ntimeout_ms = 1000"
    );
    let config = config_with(&format!("{failing}{SECRET_PATH}?sig=Q7bd91e"), "", &endpoint);
    let db = TestDb::sqlite();
    let mock = Proc::mock(&[]);
    let gateway = gateway(&mock, &config, &db);
    write_sop(&gateway, seed_actions()).await;
    let (support, _) =
        issue_key(&gateway, "default", json!({"name": "support", "scopes": ["team:support"]})).await;
    assert_eq!(say(&gateway, &support, "I'm going to talk to my lawyer", None).await, (200, 2));
    let listed = eventually(WAIT, "both actions tried", || async {
        let listed = actions(&gateway, "").await;
        (listed.len() == 2 && listed.iter().all(|a| a["last_error"].is_string())).then_some(listed)
    })
    .await;
    let port = |base: &str| base.rsplit(':').next().unwrap().to_owned();
    for action in &listed {
        let error = action["last_error"].as_str().unwrap();
        let name = action["endpoint"].as_str().unwrap();
        assert!(error.contains(&format!("`{name}`")), "names its endpoint: {error}");
        for part in ["T0K3N", "Q7bd91e", "127.0.0.1", &port(&failing), &closed_addr.port().to_string()] {
            assert!(!error.contains(part), "{part} of the URL in {error:?}");
        }
        assert!(!error.chars().any(char::is_control), "{error:?}");
    }
    let ticketing = listed.iter().find(|a| a["endpoint"] == "ticketing").unwrap();
    let error = ticketing["last_error"].as_str().unwrap();
    assert!(error.contains("500") && error.contains("oops") && error.contains("red"), "{error}");
    let log = gateway.stderr();
    assert!(log.contains("will retry"), "the failures are logged");
    assert!(!log.contains("T0K3N") && !log.contains("Q7bd91e"), "{log}");
    assert!(!log.lines().any(|l| l.contains("FORGED") && !l.contains("trigger")), "a forged line: {log}");
    assert!(!log.contains("[2J") && !log.contains("[31m"), "the reply's escape sequences in the log");
}
