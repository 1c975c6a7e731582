//! Dormancy end to end, through the real binary: records written at today's date, then the same
//! database served by a memgate whose clock runs 100 days ahead (libfaketime, as the replica
//! tests do), so "not used for 90 days" is true without waiting. Every assertion is on what an
//! operator reads from the admin API and what the mock upstream received.

use crate::e2e_identity::{ADMIN_TOKEN, UPSTREAM_KEY, issue_key};
use crate::support::{Proc, TempDir, client, eventually};
use serde_json::{Value, json};
use std::time::Duration;

const FAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// A gateway on the database file in `dir`, with `toml`, its clock `offset` ahead (`None`: now).
fn gateway(mock: &Proc, dir: &TempDir, name: &str, toml: &str, offset: Option<&str>) -> Proc {
    let config = dir.path.join(format!("{name}.toml"));
    std::fs::write(&config, format!("[memory]\nfunnel_timeout_ms = 10000\n{toml}")).unwrap();
    let db = format!("sqlite://{}?mode=rwc", dir.path.join("memgate.db").display());
    let mut env = vec![("ANTHROPIC_API_KEY", UPSTREAM_KEY), ("MEMGATE_ADMIN_TOKEN", ADMIN_TOKEN)];
    if let Some(offset) = offset {
        assert!(std::path::Path::new(FAKETIME).exists(), "libfaketime is needed (apt-get install faketime)");
        env.extend([
            ("LD_PRELOAD", FAKETIME),
            ("FAKETIME", offset),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
            ("FAKETIME_DONT_RESET", "1"),
        ]);
    }
    let args =
        ["--auth-mode", "managed", "--database-url", db.as_str(), "--config", config.to_str().unwrap()];
    Proc::gateway(mock, &args, &env)
}

async fn admin(gw: &Proc, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
    let mut request = client().request(method, gw.url(&format!("/admin/v1{path}"))).bearer_auth(ADMIN_TOKEN);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

async fn get(gw: &Proc, path: &str) -> Value {
    let (status, body) = admin(gw, reqwest::Method::GET, path, None).await;
    assert_eq!(status, 200, "GET {path}: {body}");
    body
}

async fn status_of(gw: &Proc, id: &str) -> String {
    get(gw, &format!("/memories/{id}")).await["status"].as_str().unwrap().to_owned()
}

/// Sends `text` as the person's words with `key`; returns what the upstream received first for
/// it (the body memgate injected into).
async fn ask(gw: &Proc, mock: &Proc, key: &str, text: &str) -> String {
    let before = mock.recorded().await.len();
    let body =
        json!({"model": "claude-mock", "max_tokens": 64, "messages": [{"role": "user", "content": text}]});
    let response = client()
        .post(gw.url("/v1/messages"))
        .header("x-api-key", key)
        .header("anthropic-version", "2023-06-01")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
    let recorded = mock.recorded().await;
    assert!(recorded.len() > before, "the upstream received nothing");
    recorded[before]["body"].to_string()
}

fn ids(report: &Value) -> Vec<String> {
    let mut ids: Vec<String> =
        report["data"].as_array().unwrap().iter().map(|r| r["id"].as_str().unwrap().to_owned()).collect();
    ids.sort();
    ids
}

/// Done when: dormancy's dry run lists and changes nothing, apply makes the idle records dormant
/// and a dormant record is never injected, pinned records and types without a rule stay, a tool's
/// read or one admin call brings a record back (injected again), every step is in the history,
/// and the periodic sweep applies it by itself; off by default.
#[tokio::test]
async fn e2e_dormancy_dry_run_apply_never_injected_woken_by_a_tool_or_an_admin_call() {
    let mock = Proc::mock(&[]);
    let dir = TempDir::new("dormancy");
    let records = [
        json!({"id": "mem-lighthouse", "type": "fact", "scope": ["public"], "aliases": ["lighthouse schedule"],
            "content": {"statement": "The lighthouse on Pier 9 is lit from dusk to dawn."}}),
        json!({"id": "mem-ferry", "type": "fact", "scope": ["public"], "aliases": ["ferry timetable"],
            "content": {"statement": "The ferry to the island leaves at 7:15 every morning."}}),
        json!({"id": "mem-harbour", "type": "fact", "scope": ["public"], "priority": 5, "aliases": ["harbour office"],
            "content": {"statement": "The harbour office answers on channel 12."}}),
        json!({"id": "mem-tone", "type": "preference", "scope": ["public"], "aliases": ["answer tone"],
            "content": {"topic": "tone", "preference": "Short answers, no emojis."}}),
    ];
    {
        // Today, without `[records.dormancy]`: off by default.
        let today = gateway(&mock, &dir, "today", "", None);
        for record in &records {
            let (status, body) =
                admin(&today, reqwest::Method::POST, "/memories", Some(record.clone())).await;
            assert_eq!(status, 201, "{body}");
        }
        let report = get(&today, "/dormancy").await;
        assert_eq!(
            (report["enabled"].as_bool(), report["count"].as_u64()),
            (Some(false), Some(0)),
            "{report}"
        );
        let (status, run) = admin(&today, reqwest::Method::POST, "/dormancy/run", None).await;
        assert_eq!((status, run["applied"].as_u64()), (200, Some(0)), "{run}");
    }

    // 100 days later, with a 90-day rule for facts.
    let rule = "[records.dormancy]\nfact = \"90d\"\n";
    let later = gateway(&mock, &dir, "later", rule, Some("+100d"));
    let (plain, _) = issue_key(&later, "default", json!({"name": "bot", "scopes": ["public"]})).await;
    let (reader, _) = issue_key(
        &later,
        "default",
        json!({"name": "agent", "scopes": ["public"], "permissions": ["memory_read_tools"]}),
    )
    .await;

    let dry = get(&later, "/dormancy").await;
    assert_eq!(
        ids(&dry),
        ["mem-ferry", "mem-lighthouse"],
        "pinned and rule-less records are not listed: {dry}"
    );
    assert_eq!((dry["dry_run"].as_bool(), dry["applied"].as_u64()), (Some(true), Some(0)), "{dry}");
    assert_eq!(dry["data"][0]["after_days"], 90, "{dry}");
    let (_, dry_post) = admin(&later, reqwest::Method::POST, "/dormancy/run?dry_run=true", None).await;
    assert_eq!(ids(&dry_post), ids(&dry));
    for record in &records {
        let id = record["id"].as_str().unwrap();
        assert_eq!(status_of(&later, id).await, "active", "a dry run changes nothing ({id})");
    }

    let (status, applied) = admin(&later, reqwest::Method::POST, "/dormancy/run", None).await;
    assert_eq!((status, applied["applied"].as_u64()), (200, Some(2)), "{applied}");
    assert_eq!(status_of(&later, "mem-lighthouse").await, "dormant");
    assert_eq!(status_of(&later, "mem-ferry").await, "dormant");
    assert_eq!(status_of(&later, "mem-harbour").await, "active", "priority 5 is pinned");
    assert_eq!(status_of(&later, "mem-tone").await, "active", "no rule for preferences");
    let listed = get(&later, "/memories?status=dormant").await;
    assert_eq!(ids(&listed), ["mem-ferry", "mem-lighthouse"], "dormant records are still listed");
    let history = get(&later, "/memories/mem-lighthouse/history").await;
    let last = history["data"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        (last["action"].as_str(), last["actor"].as_str()),
        (Some("dormant"), Some("dormancy")),
        "{history}"
    );
    assert_eq!(get(&later, "/dormancy").await["count"], 0, "nothing left to make dormant");

    // Never injected while dormant; the pinned record beside it still is.
    let sent =
        ask(&later, &mock, &plain, "Tell me the lighthouse schedule and the harbour office channel.").await;
    assert!(sent.contains("mem-harbour"), "the pinned record is injected: {sent}");
    assert!(!sent.contains("mem-lighthouse"), "a dormant record was injected: {sent}");
    let sent = ask(&later, &mock, &plain, "Tell me the ferry timetable.").await;
    assert!(!sent.contains("mem-ferry"), "a dormant record was injected: {sent}");

    // A memory tool finds the dormant record, and reading it makes it active again.
    let searched = ask(&later, &mock, &reader, "What does the ferry timetable say?").await;
    assert!(!searched.contains("mem-ferry"), "injected before the tool read it: {searched}");
    let results: Vec<Value> = mock.recorded().await;
    let tool_result = results.last().unwrap()["body"].to_string();
    assert!(tool_result.contains("mem-ferry"), "memory_search found the dormant record: {tool_result}");
    assert_eq!(status_of(&later, "mem-ferry").await, "active", "a tool's read wakes it");
    let sent = ask(&later, &mock, &plain, "Tell me the ferry timetable.").await;
    assert!(sent.contains("mem-ferry"), "injected again once awake: {sent}");

    // One admin call brings the other back.
    let (status, woken) =
        admin(&later, reqwest::Method::POST, "/memories/mem-lighthouse/activate", None).await;
    assert_eq!((status, woken["status"].as_str()), (200, Some("active")), "{woken}");
    let sent = ask(&later, &mock, &plain, "Tell me the lighthouse schedule.").await;
    assert!(sent.contains("mem-lighthouse"), "injected again once activated: {sent}");
    drop(later);

    // Another 100 days on, the periodic sweep (every second here) applies the rule by itself.
    let swept = gateway(
        &mock,
        &dir,
        "swept",
        &format!("[records]\ndormancy_check_every_secs = 1\n{rule}"),
        Some("+200d"),
    );
    eventually(Duration::from_secs(30), "the periodic sweep to make the idle facts dormant", || async {
        let listed = get(&swept, "/memories?status=dormant").await;
        (ids(&listed) == ["mem-ferry", "mem-lighthouse"]).then_some(())
    })
    .await;
    assert_eq!(status_of(&swept, "mem-harbour").await, "active");
}

/// Activation in bulk (the review queue's `POST /memories/activate`, the console's bulk approve)
/// is for records awaiting review or asleep: a paused or archived record among the ids is
/// refused by id with `status_conflict`, and keeps its status; the others are approved. The
/// record's own `POST /memories/{id}/activate` is an operator naming it, and resumes it.
#[tokio::test]
async fn e2e_dormancy_bulk_activate_takes_only_proposed_and_dormant_records() {
    let mock = Proc::mock(&[]);
    let dir = TempDir::new("dormancy-bulk");
    let gw = gateway(&mock, &dir, "bulk", "", None);
    for status in ["proposed", "dormant", "paused", "archived"] {
        let record = json!({"id": format!("mem-{status}"), "type": "fact", "scope": ["public"],
            "status": status, "content": {"statement": format!("A {status} note about the pier.")}});
        let (code, body) = admin(&gw, reqwest::Method::POST, "/memories", Some(record)).await;
        assert_eq!(code, 201, "{body}");
    }
    let ids = json!({"ids": ["mem-proposed", "mem-dormant", "mem-paused", "mem-archived"]});
    let (code, answer) = admin(&gw, reqwest::Method::POST, "/memories/activate", Some(ids)).await;
    assert_eq!(code, 200, "{answer}");
    assert_eq!((answer["done"].as_u64(), answer["failed"].as_u64()), (Some(2), Some(2)), "{answer}");
    let data = answer["data"].as_array().unwrap();
    for (item, id) in data.iter().zip(["mem-proposed", "mem-dormant"]) {
        assert_eq!((item["id"].as_str(), item["status"].as_str()), (Some(id), Some("active")), "{item}");
    }
    for (item, status) in data[2..].iter().zip(["paused", "archived"]) {
        assert_eq!(item["ok"], false, "{item}");
        assert_eq!(item["error"]["code"], "status_conflict", "{item}");
        let message = item["error"]["message"].as_str().unwrap();
        assert!(message.contains(status) && message.contains("/activate"), "{message}");
    }
    assert_eq!(status_of(&gw, "mem-paused").await, "paused");
    assert_eq!(status_of(&gw, "mem-archived").await, "archived");
    let history = get(&gw, "/memories/mem-archived/history").await;
    assert_eq!(history["data"].as_array().unwrap().len(), 1, "a refused activation is no change: {history}");
    for id in ["mem-paused", "mem-archived"] {
        let (code, one) = admin(&gw, reqwest::Method::POST, &format!("/memories/{id}/activate"), None).await;
        assert_eq!((code, one["status"].as_str()), (200, Some("active")), "{one}");
    }
}

/// A type without a schema is refused at startup, naming the key.
#[tokio::test]
async fn e2e_dormancy_of_an_unknown_type_is_refused_at_startup() {
    let dir = TempDir::new("dormancy-bad");
    let config = dir.path.join("bad.toml");
    std::fs::write(&config, "[records.dormancy]\nfacts = \"90d\"\n").unwrap();
    let output = std::process::Command::new(crate::support::gateway_bin())
        .args(["serve", "--listen", "127.0.0.1:0", "--config", config.to_str().unwrap()])
        .args(["--database-url", &format!("sqlite://{}?mode=rwc", dir.path.join("m.db").display())])
        .env_remove("MEMGATE_DATABASE_URL")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("records.dormancy") && stderr.contains("facts"), "{stderr}");
}
