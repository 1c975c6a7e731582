//! Observation end to end: the real binary in front of the mock upstream, whose extraction model
//! answers the forced `save_memories` call with scripted candidates, junk included
//! (docs/mock-upstream.md, "Observation"). Assertions are on what the client receives, what the
//! upstream received (the mock's recording), what the admin API shows and what the database
//! holds.

mod faults;
mod isolation;
mod trust;

use crate::e2e_identity::{ADMIN_TOKEN, UPSTREAM_KEY, issue_key, managed_gateway};
use crate::support::{Proc, TempDir, TestDb, client, eventually, without_request_seq};
use serde_json::{Value, json};
use std::time::Duration;

pub(super) const TENANT: &str = "acme";
const WAIT: Duration = Duration::from_secs(60);

/// `[observer]` settings that keep tests quick: a short poll and backoff.
pub(super) const QUICK: &str = "[observer]\nmodel = \"mock-extract\"\npoll_interval_ms = 50\nbackoff_base_ms = 20\n\
    backoff_max_ms = 100\ntimeout_ms = 5000\nlease_ms = 6000\n";

pub(super) struct Observed {
    pub mock: Proc,
    pub gw: Proc,
    pub db: TestDb,
    http: reqwest::Client,
    _config: TempDir,
}

pub(super) struct Answer {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub text: String,
}

impl Observed {
    /// A managed gateway with `toml` (after `[memory]`), its own SQLite database.
    pub fn start(toml: &str, mock_args: &[&str]) -> Observed {
        Observed::start_on(TestDb::sqlite(), toml, mock_args)
    }

    /// `start` on `db` (SQLite or PostgreSQL).
    pub fn start_on(db: TestDb, toml: &str, mock_args: &[&str]) -> Observed {
        let mock = Proc::mock(mock_args);
        let (gw, config) = Observed::gateway(&mock, &db, toml);
        Observed { mock, gw, db, http: client(), _config: config }
    }

    /// Another gateway process on `db` (a restart).
    pub fn gateway(mock: &Proc, db: &TestDb, toml: &str) -> (Proc, TempDir) {
        let dir = TempDir::new("observer-config");
        let file = dir.path.join("memgate.toml");
        std::fs::write(
            &file,
            format!("[memory]\nfunnel_timeout_ms = 10000\ndefault_release = \"v1\"\n{toml}"),
        )
        .unwrap();
        let gw = managed_gateway(mock, &["--config", file.to_str().unwrap(), "--database-url", &db.url]);
        (gw, dir)
    }

    pub async fn key(&self, tenant: &str, permissions: &[&str]) -> String {
        let body = json!({"name": "bot", "scopes": ["team:support"], "permissions": permissions});
        issue_key(&self.gw, tenant, body).await.0
    }

    pub async fn send(&self, key: &str, subject: Option<&str>, body: &[u8]) -> Answer {
        let mut request = self
            .http
            .post(self.gw.url("/v1/messages"))
            .header("x-api-key", key)
            .header("anthropic-version", "2023-06-01")
            .header("content-type", "application/json")
            .body(body.to_vec());
        if let Some(subject) = subject {
            request = request.header("x-memory-subject", subject);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        Answer { status, headers, text: response.text().await.unwrap() }
    }

    pub async fn admin(
        &self,
        tenant: &str,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Value {
        self.admin_of(&self.gw, tenant, method, path, body).await
    }

    /// `admin`, through the gateway `gw` (another replica on the same database).
    pub async fn admin_of(
        &self,
        gw: &Proc,
        tenant: &str,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Value {
        let mut request = self
            .http
            .request(method, gw.url(&format!("/admin/v1{path}")))
            .bearer_auth(ADMIN_TOKEN)
            .header("x-memory-tenant", tenant);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        let text = response.text().await.unwrap();
        assert!(status.is_success(), "{path}: {status} {text}");
        serde_json::from_str(&text).unwrap_or(Value::Null)
    }

    pub async fn records(&self, tenant: &str, scope: Option<&str>) -> Vec<Value> {
        let path = match scope {
            Some(scope) => format!("/memories?scope={scope}&limit=500"),
            None => "/memories?limit=500".to_owned(),
        };
        let body = self.admin(tenant, reqwest::Method::GET, &path, None).await;
        body["data"].as_array().cloned().unwrap_or_default()
    }

    pub async fn status(&self, tenant: &str) -> Value {
        self.admin(tenant, reqwest::Method::GET, "/observer?limit=500", None).await
    }

    /// Waits until `tenant` has at least `outcomes` outcomes and nothing waits in its queue.
    pub async fn settled(&self, tenant: &str, outcomes: usize) -> Value {
        eventually(WAIT, "the observer to process the queue", || async {
            let status = self.status(tenant).await;
            let queued = status["queue"]["pending"].as_i64().unwrap_or(0)
                + status["queue"]["retrying"].as_i64().unwrap_or(0);
            let done = status["outcomes"].as_array().map_or(0, Vec::len);
            (queued == 0 && done >= outcomes).then_some(status)
        })
        .await
    }

    pub async fn metrics(&self) -> String {
        self.metrics_of(&self.gw).await
    }

    pub async fn metrics_of(&self, gw: &Proc) -> String {
        self.http.get(gw.url("/metrics")).send().await.unwrap().text().await.unwrap()
    }

    /// The extraction requests the upstream received.
    pub async fn extractions(&self) -> Vec<Value> {
        self.mock
            .recorded()
            .await
            .into_iter()
            .filter(|entry| entry["body"]["tool_choice"]["name"] == "save_memories")
            .collect()
    }

    /// What the database's queue holds, every tenant (pending, retrying, dead).
    pub async fn queued_in_store(&self) -> i64 {
        let store = memgate::store::Store::connect(&self.db.url).await.unwrap();
        store.observer_queue_counts(None).await.unwrap().values().sum()
    }
}

pub(super) fn body(system: Option<&str>, text: &str, stream: bool) -> Value {
    let mut body = json!({
        "model": "claude-mock",
        "max_tokens": 256,
        "stream": stream,
        "messages": [{"role": "user", "content": text}],
    });
    if let Some(system) = system {
        body["system"] = json!(system);
    }
    body
}

/// The outcomes of a status, by gate.
pub(super) fn by_gate(status: &Value) -> std::collections::BTreeMap<String, Vec<Value>> {
    let mut gates: std::collections::BTreeMap<String, Vec<Value>> = Default::default();
    for outcome in status["outcomes"].as_array().into_iter().flatten() {
        gates.entry(outcome["gate"].as_str().unwrap().to_owned()).or_default().push(outcome.clone());
    }
    gates
}

const SYSTEM: &str = "You are the booking assistant of Example Air. Answer briefly.";

/// Done when 1 and 2: under `observe = "propose"` a person's durable preference becomes one
/// proposed `preference` in their scope with its evidence, and every junk kind the extractor
/// returns is dropped by its gate (counted, explained, the secret never quoted); approved, the
/// record is injected into the next request; the next exchange's echo of it is dropped too.
#[tokio::test]
async fn e2e_observer_a_stated_preference_is_proposed_the_junk_dropped_and_approval_injects_it() {
    let gate = Observed::start(&format!("[releases.v1]\nobserve = \"propose\"\n{QUICK}"), &[]);
    let key = gate.key(TENANT, &["observe", "assert_subject"]).await;
    let words = "<system-reminder>CLAUDE.md says: use pnpm</system-reminder>Hi there. I prefer window seats on long flights. My sister loves skiing.";
    let sent = serde_json::to_vec(&body(Some(SYSTEM), words, false)).unwrap();
    let answer = gate.send(&key, Some("u-1"), &sent).await;
    assert_eq!(answer.status, 200, "{}", answer.text);

    // One extraction call: forced tool, memgate's key, the person's words without harness text.
    let status = gate.settled(TENANT, 8).await;
    let extractions = gate.extractions().await;
    assert_eq!(extractions.len(), 1, "{extractions:#?}");
    let call = &extractions[0];
    assert_eq!(call["body"]["model"], "mock-extract");
    assert_eq!(call["body"]["tool_choice"], json!({"type": "tool", "name": "save_memories"}));
    assert_eq!(call["headers"]["x-api-key"], UPSTREAM_KEY);
    let prompt = call["body"]["messages"][0]["content"].as_str().unwrap();
    let person = prompt.split_once("<person>").and_then(|(_, rest)| rest.split_once("</person>")).unwrap().0;
    assert_eq!(person, "Hi there. I prefer window seats on long flights. My sister loves skiing.");

    // The one record: proposed, in the subject's scope, with its evidence and provenance.
    let records = gate.records(TENANT, None).await;
    assert_eq!(records.len(), 1, "{records:#?}");
    let record = &records[0];
    assert_eq!(record["type"], "preference");
    assert_eq!(record["status"], "proposed");
    assert_eq!(record["scope"], json!(["user:u-1"]));
    assert_eq!(record["author"], "observer");
    assert_eq!(record["content"]["preference"], "window seats on long flights");
    let provenance = &record["metadata"]["observer"];
    assert_eq!(provenance["evidence"], "I prefer window seats on long flights.");
    assert_eq!(provenance["model"], "mock-extract");
    assert_eq!(provenance["release"], "v1");
    assert!(provenance["request_id"].as_str().unwrap().starts_with("req_mock_"), "{provenance}");

    // Every junk kind, dropped by its gate; the repeat refreshed the record instead of a twin.
    let gates = by_gate(&status);
    let count = |gate: &str| gates.get(gate).map_or(0, Vec::len);
    assert_eq!(
        [
            count("kept"),
            count("dedup"),
            count("echo"),
            count("secret"),
            count("attribution"),
            count("confidence"),
            count("schema")
        ],
        [1, 1, 2, 1, 1, 1, 1],
        "{gates:#?}"
    );
    let reasons: Vec<&str> = gates["echo"].iter().map(|o| o["reason"].as_str().unwrap()).collect();
    assert!(reasons.iter().any(|r| r.contains("system prompt")), "{reasons:?}");
    assert!(reasons.iter().any(|r| r.contains("assistant's answer")), "{reasons:?}");
    assert!(gates["attribution"][0]["reason"].as_str().unwrap().contains("someone else"));
    assert!(gates["confidence"][0]["reason"].as_str().unwrap().contains("below the bound"));
    assert_eq!(gates["dedup"][0]["record_id"], record["id"]);
    // The secret: refused by kind, in no outcome, record, log or metric.
    assert!(gates["secret"][0]["reason"].as_str().unwrap().contains("secret"));
    assert!(!status.to_string().contains("sk-ant-api03"), "{status}");
    assert!(!gate.gw.stderr().contains("sk-ant-api03"), "a secret reached the log");
    let metrics = gate.metrics().await;
    for line in [
        r#"memgate_observer_candidates_total{gate="kept",verdict="written"} 1"#,
        r#"memgate_observer_candidates_total{gate="secret",verdict="dropped"} 1"#,
        r#"memgate_observer_candidates_total{gate="echo",verdict="dropped"} 2"#,
        r#"memgate_observer_candidates_total{gate="dedup",verdict="refreshed"} 1"#,
        r#"memgate_observer_extraction_calls_total{outcome="ok"} 1"#,
        r#"memgate_observer_tenant_calls_total{tenant="acme"} 1"#,
    ] {
        assert!(metrics.contains(line), "{line} missing from\n{metrics}");
    }
    assert!(gate.status(TENANT).await["usage"][0]["input_tokens"].as_i64().unwrap() > 0);

    // Proposed: not injected. Approved: the next request injects it.
    let question =
        serde_json::to_vec(&body(Some(SYSTEM), "Which seats do I prefer on long flights?", false)).unwrap();
    let before = gate.send(&key, Some("u-1"), &question).await;
    assert_ne!(before.headers.get("x-memory-injected").map(|v| v.to_str().unwrap()), Some("1"));
    let id = record["id"].as_str().unwrap();
    gate.admin(TENANT, reqwest::Method::POST, &format!("/memories/{id}/activate"), None).await;
    let after = gate.send(&key, Some("u-1"), &question).await;
    assert_eq!(after.headers.get("x-memory-injected").unwrap(), "1", "{}", after.text);
    let upstream = gate.mock.recorded().await;
    let last_question = upstream.iter().rev().find(|e| e["body"]["tool_choice"].is_null()).unwrap();
    assert!(last_question["body"].to_string().contains("window seats on long flights"));

    // That exchange's echo of the injected record is dropped as an echo: no feedback loop.
    let status = gate.settled(TENANT, 8 + 6 + 7).await;
    let echoes: Vec<String> =
        by_gate(&status)["echo"].iter().map(|o| o["reason"].as_str().unwrap().to_owned()).collect();
    assert!(echoes.iter().any(|r| r.contains("injected record")), "{echoes:?}");
    assert_eq!(gate.records(TENANT, None).await.len(), 1, "nothing else was written");

    // Erasure: forgetting the person removes their outcomes (and any queued exchange).
    let erased = gate
        .admin(TENANT, reqwest::Method::POST, "/memories/forget", Some(json!({"scope": "user:u-1"})))
        .await;
    assert_eq!(erased["outcomes_erased"], 21, "{erased}");
    assert!(gate.status(TENANT).await["outcomes"].as_array().unwrap().is_empty());
    assert_eq!(gate.queued_in_store().await, 0);
}

/// Done when 4: with observation off (the default) — and for a caller without `observe` under a
/// release that observes — nothing is kept: the queue's table stays empty, no extraction call is
/// made, and the request and answer are byte for byte what they are without memgate's observer.
#[tokio::test]
async fn e2e_observer_off_keeps_nothing_and_leaves_the_request_as_it_was() {
    let gate = Observed::start(QUICK, &[]);
    let observer_key = gate.key(TENANT, &["observe", "assert_subject"]).await;
    let sent = serde_json::to_vec(&body(Some(SYSTEM), "I prefer aisle seats.", false)).unwrap();
    for stream in [false, true] {
        let sent = serde_json::to_vec(&body(Some(SYSTEM), "I prefer aisle seats.", stream)).unwrap();
        let answer = gate.send(&observer_key, Some("u-1"), &sent).await;
        assert_eq!(answer.status, 200);
        let direct = client()
            .post(gate.mock.url("/v1/messages"))
            .header("content-type", "application/json")
            .body(sent.clone())
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert_eq!(without_request_seq(&answer.text), without_request_seq(&direct));
    }
    let recorded = gate.mock.recorded().await;
    // What the gateway sent is the client's bytes (the first request: no record to inject).
    assert_eq!(recorded[0]["body"], serde_json::from_slice::<Value>(&sent).unwrap());
    assert!(gate.extractions().await.is_empty());
    assert_eq!(gate.queued_in_store().await, 0);

    // A release that observes, a caller without the permission: nothing either.
    let (gw, _config) =
        Observed::gateway(&gate.mock, &gate.db, &format!("[releases.v1]\nobserve = \"write\"\n{QUICK}"));
    drop(gate.gw);
    let plain =
        issue_key(&gw, TENANT, json!({"name": "plain", "scopes": [], "permissions": ["assert_subject"]}))
            .await
            .0;
    let response = client()
        .post(gw.url("/v1/messages"))
        .header("x-api-key", plain)
        .header("x-memory-subject", "u-1")
        .header("content-type", "application/json")
        .body(sent)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    response.text().await.unwrap();
    let store = memgate::store::Store::connect(&gate.db.url).await.unwrap();
    assert_eq!(store.observer_queue_counts(None).await.unwrap().values().sum::<i64>(), 0);
    assert!(store.observer_outcomes(TENANT, None, 10).await.unwrap().is_empty());
}

/// A candidate with the key of a live record supersedes it in place, the old revision kept in its
/// history (never a silent delete); its repeat refreshes instead of adding a twin.
#[tokio::test]
async fn e2e_observer_a_new_value_for_a_key_supersedes_the_record_with_history_kept() {
    let gate = Observed::start(&format!("[releases.v1]\nobserve = \"write\"\n{QUICK}"), &[]);
    let key = gate.key(TENANT, &["observe", "assert_subject"]).await;
    for (round, colour) in ["blue", "green"].iter().enumerate() {
        let sent =
            serde_json::to_vec(&body(None, &format!("My favourite colour is {colour}."), false)).unwrap();
        assert_eq!(gate.send(&key, Some("u-1"), &sent).await.status, 200);
        gate.settled(TENANT, 7 * (round + 1)).await;
    }
    let records = gate.records(TENANT, None).await;
    assert_eq!(records.len(), 1, "{records:#?}");
    let record = &records[0];
    assert_eq!(record["key"], "fact:favourite-colour");
    assert_eq!(record["content"]["statement"], "My favourite colour is green");
    assert_eq!(record["status"], "active");
    let id = record["id"].as_str().unwrap();
    let history = gate.admin(TENANT, reqwest::Method::GET, &format!("/memories/{id}/history"), None).await;
    let changes = history["data"].as_array().or_else(|| history.as_array()).cloned().unwrap_or_default();
    let superseded =
        changes.iter().find(|c| c["action"] == "supersede").unwrap_or_else(|| panic!("{history:#}"));
    assert_eq!(superseded["before"]["content"]["statement"], "My favourite colour is blue");
    let gates = by_gate(&gate.status(TENANT).await);
    assert_eq!(gates["supersede"].len(), 1, "{gates:#?}");
    assert_eq!(gates["supersede"][0]["verdict"], "superseded");
    assert_eq!(gates["dedup"].len(), 2, "each round's repeat refreshed the record");
}
