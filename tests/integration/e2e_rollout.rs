//! Releases and gray rollout end to end, against the real binary and the real mock upstream:
//! pins, sticky canary shares, allow-lists, the guard, per-release stats, shadow mode, promotion
//! and rollback by the admin API and by the CLI, and hostile input on the release endpoints.
//! Every assertion is on what a client, an operator or the upstream sees.
//!
//! The gateways here read `CONFIG`: a 10 s funnel budget (one query embedding can take longer
//! than the default 50 ms on a busy machine, and these tests are about routing, not the budget),
//! admin and caller rate limits no test reaches (the tests poll the admin API), and a similarity
//! threshold no embedding reaches, so a record is injected only when the query names its alias
//! exactly: which records a release injects depends on the release alone.

use crate::e2e_identity::{ADMIN_TOKEN, JWT_SECRET, issue_key, managed_gateway};
use crate::support::{BIN, Proc, TempDir, TestDb, client, eventually};
use futures_util::stream::{self, StreamExt};
use memgate::memory::record::parse_rfc3339_ms;
use memgate::rollout::sticky_bucket;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

const CONFIG: &str = r#"
[memory]
funnel_timeout_ms = 10000

[admin]
rate_limit_per_minute = 1000000

[auth]
rate_limit_per_minute = 1000000

[embedding]
similarity_threshold = 0.995
"#;

const TENANT: &str = "acme";

/// Names both profile records exactly (their alias).
const MATCHING: &str = "Please pull up the loyalty profile of this customer before I answer.";
/// Names no record.
const UNRELATED: &str = "What is the capital of France?";

/// How long a background change (the guard's ticker, another process's write, a shadow task) may
/// take to show.
const PATIENCE: Duration = Duration::from_secs(30);

/// A mock upstream and a managed-mode gateway on a database this test can also hand to the CLI.
struct Rig {
    mock: Proc,
    gw: Proc,
    http: reqwest::Client,
    db: TestDb,
    config_file: String,
    _config: TempDir,
}

/// One answer of the gateway to a Messages request.
#[derive(Debug)]
struct Reply {
    status: u16,
    version: Option<String>,
    injected: Option<String>,
    /// `X-Memory-Trace`, parsed, for callers with the debug permission.
    trace: Option<Value>,
    body: Value,
    elapsed: Duration,
}

impl Reply {
    fn assert_error(&self, status: u16, error_type: &str, what: &str) {
        assert_eq!(self.status, status, "{what}: {}", self.body);
        assert_eq!(self.body["type"], "error", "{what}: {}", self.body);
        assert_eq!(self.body["error"]["type"], error_type, "{what}: {}", self.body);
    }

    /// Tokens of the injected records, from the trace.
    fn tokens(&self) -> u64 {
        self.trace.as_ref().and_then(|t| t["tokens"].as_u64()).expect("a trace with tokens")
    }
}

impl Rig {
    fn start(mock_args: &[&str]) -> Rig {
        let mock = Proc::mock(mock_args);
        let dir = TempDir::new("rollout-config");
        let file = dir.path.join("memgate.toml");
        std::fs::write(&file, CONFIG).unwrap();
        let config_file = file.to_str().unwrap().to_owned();
        let db = TestDb::sqlite();
        let gw = managed_gateway(&mock, &["--config", &config_file, "--database-url", &db.url]);
        Rig { mock, gw, http: client(), db, config_file, _config: dir }
    }

    async fn admin(
        &self,
        method: &str,
        path: &str,
        actor: Option<&str>,
        body: Option<&Value>,
    ) -> (u16, Value) {
        let url = self.gw.url(&format!("/admin/v1{path}"));
        let mut request = match method {
            "GET" => self.http.get(url),
            "POST" => self.http.post(url),
            "PATCH" => self.http.patch(url),
            other => panic!("no method {other}"),
        }
        .bearer_auth(ADMIN_TOKEN)
        .header("x-memory-tenant", TENANT);
        if let Some(actor) = actor {
            request = request.header("x-memory-actor", actor);
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    /// PATCH /admin/v1/releases/{name}, which must succeed; returns the new rollout state.
    async fn patch(&self, name: &str, actor: &str, body: Value) -> Value {
        let (status, answer) =
            self.admin("PATCH", &format!("/releases/{name}"), Some(actor), Some(&body)).await;
        assert_eq!(status, 200, "PATCH {name} {body}: {answer}");
        assert_eq!(answer["name"], name, "{answer}");
        answer["rollout"].clone()
    }

    async fn release(&self, name: &str) -> Value {
        let (status, answer) = self.admin("GET", &format!("/releases/{name}"), None, None).await;
        assert_eq!(status, 200, "GET {name}: {answer}");
        answer
    }

    async fn stats(&self, name: &str) -> Value {
        let (status, answer) = self.admin("GET", &format!("/releases/{name}/stats"), None, None).await;
        assert_eq!(status, 200, "stats of {name}: {answer}");
        answer["stats"].clone()
    }

    async fn history(&self, name: &str) -> Vec<Value> {
        let (status, answer) = self.admin("GET", &format!("/releases/{name}/history"), None, None).await;
        assert_eq!(status, 200, "history of {name}: {answer}");
        answer["data"].as_array().cloned().unwrap()
    }

    async fn remember(&self, record: Value) {
        let (status, answer) = self.admin("POST", "/memories", None, Some(&record)).await;
        assert_eq!(status, 201, "creating {record}: {answer}");
    }

    /// Both customer profiles: one under schema v1, one under v2, named by the same alias.
    async fn remember_both_profiles(&self) {
        self.remember(profile_v1()).await;
        self.remember(profile_v2()).await;
    }

    /// A gateway key of the tenant, with a rate limit no test reaches.
    async fn key(&self, scopes: &[&str], permissions: &[&str]) -> String {
        let body = json!({
            "name": "rollout-test",
            "scopes": scopes,
            "permissions": permissions,
            "rate_limit_per_minute": 1_000_000,
        });
        issue_key(&self.gw, TENANT, body).await.0
    }

    /// POST /v1/messages asking `text`, with `headers` (the credential among them).
    async fn ask(&self, headers: &[(&str, &str)], text: &str) -> Reply {
        let mut request = self
            .http
            .post(self.gw.url("/v1/messages"))
            .header("anthropic-version", "2023-06-01")
            .json(&asking(text));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let started = Instant::now();
        let response = request.send().await.unwrap();
        let header = |name: &str| response.headers().get(name).map(|v| v.to_str().unwrap().to_owned());
        let (version, injected, trace) =
            (header("x-memory-version"), header("x-memory-injected"), header("x-memory-trace"));
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        let elapsed = started.elapsed();
        Reply {
            status,
            version,
            injected,
            trace: trace.map(|t| serde_json::from_str(&t).unwrap()),
            body: serde_json::from_str(&text).unwrap_or(Value::String(text)),
            elapsed,
        }
    }

    /// The release a plain request with `headers` is routed to; it must succeed.
    async fn routed(&self, headers: &[(&str, &str)]) -> String {
        let reply = self.ask(headers, UNRELATED).await;
        assert_eq!(reply.status, 200, "{headers:?}: {}", reply.body);
        reply.version.expect("every answer names its release")
    }

    /// The body the upstream received last.
    async fn last_upstream_body(&self) -> Value {
        self.mock.recorded().await.pop().expect("the upstream received nothing")["body"].clone()
    }

    async fn metrics(&self) -> String {
        self.http.get(self.gw.url("/metrics")).send().await.unwrap().text().await.unwrap()
    }

    /// Runs `memgate release <args…>` on this gateway's database and config, like an operator.
    async fn cli(&self, args: &[&str]) -> std::process::Output {
        let mut command = std::process::Command::new(BIN);
        command.arg("release").args(args).args([
            "--database-url",
            &self.db.url,
            "--config",
            &self.config_file,
        ]);
        for var in ["MEMGATE_DATABASE_URL", "MEMGATE_ADMIN_TOKEN", "MEMGATE_AUTH_MODE", "ANTHROPIC_API_KEY"] {
            command.env_remove(var);
        }
        tokio::task::spawn_blocking(move || command.output().unwrap()).await.unwrap()
    }
}

fn asking(text: &str) -> Value {
    json!({
        "model": "claude-test",
        "max_tokens": 64,
        "system": "You are Acme's customer-support assistant.",
        "messages": [{"role": "user", "content": text}],
    })
}

fn profile_v1() -> Value {
    json!({
        "id": "profile-v1",
        "type": "customer_profile",
        "schema_version": "v1",
        "scope": ["public"],
        "aliases": ["loyalty profile"],
        "content": {"name": "Ana Souza", "preferred_language": "pt-BR", "preferred_channel": "email"}
    })
}

/// The same customer in v2's shape: the name in parts, a tier, contact details grouped.
fn profile_v2() -> Value {
    json!({
        "id": "profile-v2",
        "type": "customer_profile",
        "schema_version": "v2",
        "scope": ["public"],
        "aliases": ["loyalty profile"],
        "content": {
            "name": {"display_name": "Dr. Ana Souza", "given_name": "Ana", "family_name": "Souza", "honorific": "Dr."},
            "preferred_language": "pt-BR",
            "tier": "premium",
            "contact": {"email": "ana.souza@example.com", "preferred_channel": "email"}
        }
    })
}

/// Every string in a JSON value.
fn strings_in<'a>(value: &'a Value, out: &mut Vec<&'a str>) {
    match value {
        Value::String(text) => out.push(text),
        Value::Array(items) => items.iter().for_each(|v| strings_in(v, out)),
        Value::Object(map) => map.values().for_each(|v| strings_in(v, out)),
        _ => {}
    }
}

/// The one `<MEMORY_CONTEXT>` block in a Messages body, if any.
fn block_in(body: &Value) -> Option<String> {
    let mut all = Vec::new();
    strings_in(body, &mut all);
    let blocks: Vec<&str> = all.into_iter().filter(|s| s.contains("<MEMORY_CONTEXT")).collect();
    assert!(blocks.len() <= 1, "more than one string holds a memory block: {blocks:#?}");
    blocks.first().map(|b| b[b.find("<MEMORY_CONTEXT").unwrap()..].to_owned())
}

/// The record lines of a block (one JSON object per line).
fn record_lines(block: &str) -> Vec<Value> {
    block
        .lines()
        .filter(|line| line.starts_with('{'))
        .map(|line| serde_json::from_str(line).unwrap_or_else(|err| panic!("{err}: {line}")))
        .collect()
}

fn ids_of(block: &str) -> BTreeSet<String> {
    record_lines(block).iter().map(|l| l["id"].as_str().unwrap().to_owned()).collect()
}

fn set(ids: &[&str]) -> BTreeSet<String> {
    ids.iter().map(|id| (*id).to_owned()).collect()
}

/// The value of one series in the metrics text: `name{…labels…} value`.
fn metric(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines().filter(|line| !line.starts_with('#')).find_map(|line| {
        let (series, value) = line.rsplit_once(' ')?;
        let (metric, rest) = series.split_once('{').unwrap_or((series, ""));
        let wanted = metric == name && labels.iter().all(|(k, v)| rest.contains(&format!("{k}=\"{v}\"")));
        if wanted { value.parse().ok() } else { None }
    })
}

fn jwt(claims: Value) -> String {
    let key = jsonwebtoken::EncodingKey::from_secret(JWT_SECRET.as_bytes()).unwrap();
    jsonwebtoken::encode(&jsonwebtoken::Header::default(), &claims, &key).unwrap()
}

fn in_an_hour() -> i64 {
    jsonwebtoken::get_current_timestamp() as i64 + 3600
}

// ---------------------------------------------------------------------------------------------
// 1. Pins: each release reads its own schema version and renders its own template

#[tokio::test]
async fn a_pin_chooses_the_release_and_each_release_injects_its_own_schema_and_template() {
    let rig = Rig::start(&[]);
    rig.remember_both_profiles().await;
    let pinner = rig.key(&[], &["pin_release"]).await;
    let plain = rig.key(&[], &[]).await;

    // Pinned to v2: v2's template, and only the schema-v2 record.
    let reply = rig.ask(&[("x-api-key", &pinner), ("x-memory-version", "v2")], MATCHING).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.version.as_deref(), Some("v2"));
    assert_eq!(reply.injected.as_deref(), Some("1"));
    let body = rig.last_upstream_body().await;
    let block = block_in(&body).expect("v2 injected a block");
    assert!(block.starts_with("<MEMORY_CONTEXT version=\"v2\">"), "{block}");
    assert!(block.contains("Memory notes for this conversation, grouped by record type"), "{block}");
    assert!(block.lines().any(|l| l == "## customer_profile (1)"), "v2 groups by type: {block}");
    assert!(block.trim_end().ends_with("</MEMORY_CONTEXT>"), "{block}");
    assert_eq!(ids_of(&block), set(&["profile-v2"]), "{block}");
    let line = &record_lines(&block)[0];
    assert_eq!(line["content"]["name"]["display_name"], "Dr. Ana Souza", "{line}");
    assert_eq!(line["content"]["contact"]["email"], "ana.souza@example.com", "{line}");

    // No pin: the active release, v1, with its own template and only the schema-v1 record.
    for (what, headers) in [
        ("no pin", vec![("x-api-key", pinner.as_str())]),
        ("pinned to v1", vec![("x-api-key", pinner.as_str()), ("x-memory-version", "v1")]),
        ("a caller that may not pin, not pinning", vec![("x-api-key", plain.as_str())]),
    ] {
        let reply = rig.ask(&headers, MATCHING).await;
        assert_eq!(reply.status, 200, "{what}: {}", reply.body);
        assert_eq!(reply.version.as_deref(), Some("v1"), "{what}");
        assert_eq!(reply.injected.as_deref(), Some("1"), "{what}");
        let block = block_in(&rig.last_upstream_body().await).expect("v1 injected a block");
        assert!(block.starts_with("<MEMORY_CONTEXT version=\"v1\">"), "{what}: {block}");
        assert!(block.contains("These are memory records retrieved for this conversation"), "{what}");
        assert!(!block.contains("## "), "{what}: v1 does not group: {block}");
        assert!(!block.contains("version=\"v2\""), "{what}: {block}");
        assert_eq!(ids_of(&block), set(&["profile-v1"]), "{what}: {block}");
        assert_eq!(record_lines(&block)[0]["content"]["name"], "Ana Souza", "{what}");
    }
    let recorded = rig.mock.recorded().await;
    assert_eq!(recorded.len(), 4);
    for seen in &recorded {
        assert!(seen["headers"].get("x-memory-version").is_none(), "the pin went upstream: {seen}");
    }

    // Refused pins never reach the upstream.
    let reply = rig.ask(&[("x-api-key", &pinner), ("x-memory-version", "v9")], MATCHING).await;
    reply.assert_error(400, "invalid_request_error", "an unknown release");
    let message = reply.body["error"]["message"].as_str().unwrap();
    assert!(message.contains("v9") && message.contains("v1, v2"), "{message}");
    for pin in ["v2", "v1"] {
        let reply = rig.ask(&[("x-api-key", &plain), ("x-memory-version", pin)], MATCHING).await;
        reply.assert_error(403, "permission_error", &format!("a pin to {pin} without pin_release"));
    }
    assert_eq!(rig.patch("v2", "ops", json!({"stage": "retired"})).await["stage"], "retired");
    let reply = rig.ask(&[("x-api-key", &pinner), ("x-memory-version", "v2")], MATCHING).await;
    reply.assert_error(400, "invalid_request_error", "a retired release");
    assert!(reply.body["error"]["message"].as_str().unwrap().contains("retired"), "{}", reply.body);
    assert_eq!(rig.mock.recorded().await.len(), 4, "a refused request reached the upstream");

    // Made available again, it can be pinned again.
    rig.patch("v2", "ops", json!({"stage": "available"})).await;
    let reply = rig.ask(&[("x-api-key", &pinner), ("x-memory-version", "v2")], MATCHING).await;
    assert_eq!((reply.status, reply.version.as_deref()), (200, Some("v2")), "{}", reply.body);
}

// ---------------------------------------------------------------------------------------------
// 2. Canary: a sticky share of subjects, and allow-lists

/// Sends one request per subject (asserted with `X-Memory-Subject`), 16 at a time, on a pooled
/// client; returns each subject's release, in order.
async fn releases_of(rig: &Rig, key: &str, subjects: &[String]) -> Vec<String> {
    let http = reqwest::Client::new();
    let url = rig.gw.url("/v1/messages");
    let body = serde_json::to_vec(&asking(UNRELATED)).unwrap();
    stream::iter(subjects.iter().cloned())
        .map(|subject| {
            let request = http
                .post(&url)
                .header("x-api-key", key)
                .header("x-memory-subject", &subject)
                .header("content-type", "application/json")
                .header("anthropic-version", "2023-06-01")
                .body(body.clone());
            async move {
                let response = request.send().await.unwrap();
                assert_eq!(response.status(), 200, "{subject}");
                response.headers()["x-memory-version"].to_str().unwrap().to_owned()
            }
        })
        .buffered(16)
        .collect()
        .await
}

#[tokio::test]
async fn a_ten_percent_canary_serves_about_a_tenth_of_subjects_and_each_always_the_same_release() {
    let rig = Rig::start(&[]);
    let key = rig.key(&[], &["assert_subject"]).await;
    let state = rig.patch("v2", "ops", json!({"stage": "canary", "canary_percent": 10})).await;
    assert_eq!((state["stage"].clone(), state["canary_percent"].clone()), (json!("canary"), json!(10.0)));

    // Every one of 10,000 subjects goes through the real HTTP path, twice: measured on the 2-core
    // debug build with other tests running, a pass of 10,000 requests takes about 10 s, so no
    // sampling is needed. Each answer must also be what the stable hash predicts.
    let subjects: Vec<String> = (0..10_000).map(|i| format!("subject-{i:05}")).collect();
    let started = Instant::now();
    let first = releases_of(&rig, &key, &subjects).await;
    eprintln!("10,000 requests through the gateway took {:?}", started.elapsed());
    let second = releases_of(&rig, &key, &subjects).await;

    let mut on_v2 = 0;
    for ((subject, a), b) in subjects.iter().zip(&first).zip(&second) {
        assert_eq!(a, b, "{subject} flipped between two requests");
        let predicted = if sticky_bucket(subject) < 1000 { "v2" } else { "v1" };
        assert_eq!(a, predicted, "{subject}: bucket {}", sticky_bucket(subject));
        on_v2 += usize::from(a == "v2");
    }
    assert!((800..=1200).contains(&on_v2), "{on_v2} of 10,000 subjects got the 10% canary");
    let stats = rig.stats("v2").await;
    assert_eq!(stats["calls"], 2 * on_v2, "{stats}");
    let share = stats["share"].as_f64().unwrap();
    assert!((share - on_v2 as f64 / 10_000.0).abs() < 1e-9, "{stats}");
}

/// What a caller is, the headers it sends, and the release it should get.
type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, &'a str);

#[tokio::test]
async fn allow_listed_subjects_teams_and_cidrs_get_the_canary_even_at_zero_percent() {
    let rig = Rig::start(&[]);
    let asserting = rig.key(&[], &["assert_subject"]).await;
    let beta = rig.key(&["team:beta"], &[]).await;
    let alpha = rig.key(&["team:alpha"], &[]).await;
    let jwt_beta =
        format!("Bearer {}", jwt(json!({"sub": "jwt-user-1", "team": "beta", "exp": in_an_hour()})));
    let jwt_alpha =
        format!("Bearer {}", jwt(json!({"sub": "jwt-user-2", "team": "alpha", "exp": in_an_hour()})));
    let jwt_vip = format!("Bearer {}", jwt(json!({"sub": "vip-7", "exp": in_an_hour()})));

    rig.patch(
        "v2",
        "ops",
        json!({"stage": "canary", "canary_percent": 0, "allow": {"subjects": ["vip-7"], "teams": ["beta"]}}),
    )
    .await;
    let cases: [Case; 7] = [
        ("an allow-listed subject", vec![("x-api-key", &asserting), ("x-memory-subject", "vip-7")], "v2"),
        ("another subject", vec![("x-api-key", &asserting), ("x-memory-subject", "vip-8")], "v1"),
        ("a key of an allow-listed team", vec![("x-api-key", &beta)], "v2"),
        ("a key of another team", vec![("x-api-key", &alpha)], "v1"),
        ("a JWT of an allow-listed team", vec![("authorization", &jwt_beta)], "v2"),
        ("a JWT of another team", vec![("authorization", &jwt_alpha)], "v1"),
        ("a JWT of an allow-listed subject", vec![("authorization", &jwt_vip)], "v2"),
    ];
    for (what, headers, expected) in &cases {
        for _ in 0..3 {
            assert_eq!(rig.routed(headers).await, *expected, "{what}");
        }
    }
    // At 0% nobody else gets it.
    for i in 0..200 {
        let subject = format!("someone-{i}");
        let headers = [("x-api-key", asserting.as_str()), ("x-memory-subject", subject.as_str())];
        assert_eq!(rig.routed(&headers).await, "v1", "{subject} got a 0% canary");
    }

    // The tests connect from loopback: a CIDR holding it sends every caller to the canary.
    rig.patch("v2", "ops", json!({"allow": {"subjects": [], "teams": [], "cidrs": ["127.0.0.1/32"]}})).await;
    for (what, headers, _) in &cases {
        assert_eq!(rig.routed(headers).await, "v2", "{what}, from an allow-listed address");
    }
    rig.patch(
        "v2",
        "ops",
        json!({"allow": {"subjects": [], "teams": [], "cidrs": ["10.0.0.0/8", "::1/128"]}}),
    )
    .await;
    for (what, headers, _) in &cases {
        assert_eq!(rig.routed(headers).await, "v1", "{what}, from an address not listed");
    }
    // Rolled back, the allow-lists no longer route anyone there.
    rig.patch(
        "v2",
        "ops",
        json!({"allow": {"subjects": ["vip-7"], "teams": ["beta"], "cidrs": ["127.0.0.0/8"]}}),
    )
    .await;
    assert_eq!(rig.routed(&cases[0].1).await, "v2");
    let (status, answer) = rig.admin("POST", "/releases/v2/rollback", None, None).await;
    assert_eq!(status, 200, "{answer}");
    for (what, headers, _) in &cases {
        assert_eq!(rig.routed(headers).await, "v1", "{what}, after the rollback");
    }
}

// ---------------------------------------------------------------------------------------------
// 3. The guard rolls a failing canary back by itself

#[tokio::test]
async fn the_guard_rolls_back_a_canary_whose_error_rate_crosses_its_bound() {
    // Only requests that carry v2's block fail upstream.
    let rig = Rig::start(&["--fail-marker", "version=\"v2\""]);
    rig.remember_both_profiles().await;
    let key = rig.key(&[], &[]).await;
    let guard = json!({"enabled": true, "window_secs": 30, "min_calls": 10, "max_error_rate": 0.5});
    rig.patch("v2", "ops", json!({"stage": "canary", "canary_percent": 100, "guard": guard})).await;

    // One request, then a look at v2, until the guard (a ticker, once a second) has acted.
    let answers = std::cell::RefCell::new(Vec::new());
    let (rig_ref, key_ref, answers_ref) = (&rig, key.as_str(), &answers);
    let release = eventually(PATIENCE, "the guard to roll v2 back", move || async move {
        let reply = rig_ref.ask(&[("x-api-key", key_ref)], MATCHING).await;
        answers_ref.borrow_mut().push((reply.status, reply.version));
        let release = rig_ref.release("v2").await;
        (release["rollout"]["stage"] == "available").then_some(release)
    })
    .await;
    let answers = answers.into_inner();
    let failed = answers.iter().filter(|a| *a == &(500, Some("v2".to_owned()))).count();
    assert!(failed >= 10, "rolled back before min_calls: {answers:?}");
    // Every request before the rollback went to v2 and failed; the last one may have come after.
    let (last, before) = answers.split_last().unwrap();
    assert!(before.iter().all(|a| a == &(500, Some("v2".to_owned()))), "{answers:?}");
    assert!(last == &(500, Some("v2".to_owned())) || last == &(200, Some("v1".to_owned())), "{answers:?}");

    assert_eq!(release["rollout"]["canary_percent"], 0.0, "{release}");
    let note = release["rollout"]["note"].as_str().expect("the rollback says why");
    let history = rig.history("v2").await;
    let rollback = history.last().unwrap();
    assert_eq!(
        (&rollback["action"], &rollback["actor"]),
        (&json!("rollback"), &json!("guard")),
        "{history:#?}"
    );
    let reason = rollback["reason"].as_str().unwrap();
    assert!(reason.contains("error rate") && reason.contains("50.0%"), "{reason}");
    assert_eq!(note, reason);
    assert_eq!(rollback["before"]["stage"], "canary", "{rollback}");
    assert_eq!(rollback["after"]["stage"], "available", "{rollback}");
    assert!(parse_rfc3339_ms(rollback["at"].as_str().unwrap()).is_some(), "{rollback}");

    let metrics = rig.metrics().await;
    let series = |name: &str, labels: &[(&str, &str)]| metric(&metrics, name, labels);
    assert_eq!(
        series("memgate_release_rollbacks_total", &[("release", "v2"), ("by", "guard")]),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(
        series("memgate_release_requests_total", &[("release", "v2"), ("outcome", "upstream_error")]),
        Some(failed as f64),
        "{metrics}"
    );
    let stats = rig.stats("v2").await;
    assert_eq!(
        (stats["calls"].as_u64(), stats["upstream_errors"].as_u64()),
        (Some(failed as u64), Some(failed as u64))
    );
    // The rollback forgets the window; only a request routed just before it may land after it.
    assert!(stats["window"]["calls"].as_u64().unwrap() <= 1, "the rollback kept the window: {stats}");

    // Afterwards everyone is back on v1, and its requests succeed.
    for _ in 0..5 {
        let reply = rig.ask(&[("x-api-key", &key)], MATCHING).await;
        assert_eq!((reply.status, reply.version.as_deref()), (200, Some("v1")), "{}", reply.body);
        assert_eq!(reply.injected.as_deref(), Some("1"));
        let block = block_in(&rig.last_upstream_body().await).unwrap();
        assert!(block.starts_with("<MEMORY_CONTEXT version=\"v1\">"), "{block}");
    }

    // A canary that stays healthy for its period is promoted by the guard. Queries that name no
    // record carry no block, so the fail marker leaves them alone.
    let guard = json!({"enabled": true, "window_secs": 30, "min_calls": 3, "max_error_rate": 0.5, "promote_after_secs": 1});
    rig.patch("v2", "ops", json!({"stage": "canary", "canary_percent": 100, "guard": guard})).await;
    let promoted = eventually(PATIENCE, "the guard to promote v2", || async {
        let reply = rig.ask(&[("x-api-key", &key)], UNRELATED).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        let release = rig.release("v2").await;
        (release["active"] == true).then_some(release)
    })
    .await;
    assert_eq!(promoted["rollout"]["stage"], "active", "{promoted}");
    let history = rig.history("v2").await;
    let promotion = history.last().unwrap();
    assert_eq!(
        (&promotion["action"], &promotion["actor"]),
        (&json!("promote"), &json!("guard")),
        "{history:#?}"
    );
    assert!(promotion["reason"].as_str().unwrap().contains("healthy"), "{promotion}");
    assert_eq!(rig.release("v1").await["rollout"]["stage"], "available");
    assert_eq!(rig.routed(&[("x-api-key", &key)]).await, "v2");
}

// ---------------------------------------------------------------------------------------------
// 4. Per-release stats

#[tokio::test]
async fn release_stats_count_calls_errors_injected_tokens_and_added_latency_per_release() {
    let rig = Rig::start(&["--fail-marker", "version=\"v2\""]);
    rig.remember_both_profiles().await;
    let key = rig.key(&[], &["pin_release", "debug"]).await;
    let on_v1 = [("x-api-key", key.as_str()), ("x-memory-debug", "1")];
    let on_v2 = [("x-api-key", key.as_str()), ("x-memory-debug", "1"), ("x-memory-version", "v2")];
    for name in ["v1", "v2"] {
        let stats = rig.stats(name).await;
        for field in ["calls", "share", "error_rate", "injected_records", "injected_tokens"] {
            assert_eq!(stats[field].as_f64(), Some(0.0), "{name} before any request: {stats}");
        }
    }

    // 3 calls to v2 whose query names no record: no block, so the fail marker does not fire.
    let mut v2_replies = Vec::new();
    for _ in 0..3 {
        let reply = rig.ask(&on_v2, UNRELATED).await;
        assert_eq!((reply.status, reply.version.as_deref()), (200, Some("v2")), "{}", reply.body);
        assert_eq!((reply.injected.as_deref(), reply.tokens()), (Some("0"), 0));
        v2_replies.push(reply);
    }
    let stats = rig.stats("v2").await;
    assert_eq!(stats["calls"], 3, "{stats}");
    assert_eq!(stats["share"], 1.0, "{stats}");
    assert_eq!((stats["injected_records"].as_u64(), stats["injected_tokens"].as_u64()), (Some(0), Some(0)));
    assert_eq!(stats["error_rate"], 0.0, "{stats}");

    // 6 calls to v1 that inject its record, and 4 to v2 that inject v2's, which the upstream
    // refuses (the block holds the fail marker).
    let mut v1_replies = Vec::new();
    for _ in 0..6 {
        let reply = rig.ask(&on_v1, MATCHING).await;
        assert_eq!((reply.status, reply.version.as_deref()), (200, Some("v1")), "{}", reply.body);
        assert_eq!(reply.injected.as_deref(), Some("1"));
        v1_replies.push(reply);
    }
    for _ in 0..4 {
        let reply = rig.ask(&on_v2, MATCHING).await;
        reply.assert_error(500, "api_error", "a v2 block through the fail marker");
        assert_eq!((reply.version.as_deref(), reply.injected.as_deref()), (Some("v2"), Some("1")));
        v2_replies.push(reply);
    }

    let total = (v1_replies.len() + v2_replies.len()) as f64;
    for (name, replies, errors) in [("v1", &v1_replies, 0u64), ("v2", &v2_replies, 4)] {
        let stats = rig.stats(name).await;
        let calls = replies.len() as u64;
        let tokens: u64 = replies.iter().map(Reply::tokens).sum();
        let records = replies.iter().filter(|r| r.injected.as_deref() == Some("1")).count() as u64;
        assert!(tokens > 0, "{name}");
        assert_eq!(stats["calls"], calls, "{name}: {stats}");
        assert_eq!(stats["upstream_errors"], errors, "{name}: {stats}");
        assert_eq!(stats["memory_errors"], 0, "{name}: {stats}");
        assert_eq!(stats["error_rate"].as_f64(), Some(errors as f64 / calls as f64), "{name}: {stats}");
        assert_eq!(stats["injected_records"], records, "{name}: {stats}");
        assert_eq!(stats["injected_tokens"], tokens, "{name}: injected tokens against the traces: {stats}");
        assert_eq!(stats["share"].as_f64(), Some(calls as f64 / total), "{name}: {stats}");
        assert_eq!(
            stats["window"],
            json!({"secs": 60, "calls": calls, "errors": errors, "error_rate": errors as f64 / calls as f64}),
            "{name}"
        );
        // memgate's own time is part of what the client waited for, and not nothing.
        let slowest_ms = replies.iter().map(|r| r.elapsed.as_secs_f64() * 1000.0).fold(0.0, f64::max);
        let latency = &stats["added_latency_ms"];
        let (mean, p50, p99) = (
            latency["mean"].as_f64().unwrap(),
            latency["p50"].as_f64().unwrap(),
            latency["p99"].as_f64().unwrap(),
        );
        assert!(mean > 0.0 && p50 > 0.0, "{name}: {latency}");
        assert!(p50 <= p99 && mean <= p99, "{name}: {latency}");
        assert!(p99 <= slowest_ms, "{name}: added {p99} ms, yet the slowest answer took {slowest_ms} ms");
    }

    let metrics = rig.metrics().await;
    for (release, outcome, count) in [("v1", "ok", 6.0), ("v2", "ok", 3.0), ("v2", "upstream_error", 4.0)] {
        let labels = [("release", release), ("outcome", outcome)];
        assert_eq!(metric(&metrics, "memgate_release_requests_total", &labels), Some(count), "{labels:?}");
    }
    let (status, answer) = rig.admin("GET", "/releases/nope/stats", None, None).await;
    assert_eq!(status, 404, "{answer}");
}

// ---------------------------------------------------------------------------------------------
// 5. Shadow mode

#[tokio::test]
async fn a_shadow_release_runs_beside_the_active_one_and_records_the_difference_without_sending_it() {
    let rig = Rig::start(&[]);
    rig.remember_both_profiles().await;
    let key = rig.key(&[], &["pin_release", "debug"]).await;
    let state = rig.patch("v2", "ops", json!({"stage": "shadow", "shadow_sample_percent": 100})).await;
    assert_eq!(state["stage"], "shadow");

    // v1 injects profile-v1 where v2 would inject profile-v2: one id added and one dropped each.
    let mut v1_tokens = Vec::new();
    for _ in 0..5 {
        let reply = rig.ask(&[("x-api-key", &key), ("x-memory-debug", "1")], MATCHING).await;
        assert_eq!((reply.status, reply.version.as_deref()), (200, Some("v1")), "{}", reply.body);
        assert_eq!(reply.injected.as_deref(), Some("1"));
        v1_tokens.push(reply.tokens() as i64);
    }
    // Nothing to inject for either: sampled, with no difference.
    for _ in 0..2 {
        let reply = rig.ask(&[("x-api-key", &key)], UNRELATED).await;
        assert_eq!((reply.status, reply.version.as_deref()), (200, Some("v1")), "{}", reply.body);
    }
    let stats = eventually(PATIENCE, "7 shadow samples of v2", || async {
        let stats = rig.stats("v2").await;
        (stats["shadow"]["sampled"] == 7).then_some(stats)
    })
    .await;
    let shadow = &stats["shadow"];
    assert_eq!(
        (shadow["ids_added"].as_u64(), shadow["ids_dropped"].as_u64()),
        (Some(5), Some(5)),
        "{shadow}"
    );
    let recent = shadow["recent"].as_array().unwrap();
    assert_eq!(recent.len(), 7, "{shadow}");
    let differing = recent
        .iter()
        .filter(|d| d["added"] == json!(["profile-v2"]) && d["dropped"] == json!(["profile-v1"]));
    assert_eq!(differing.count(), 5, "{shadow}");
    let same = recent.iter().filter(|d| d == &&json!({"added": [], "dropped": [], "tokens_delta": 0}));
    assert_eq!(same.count(), 2, "{shadow}");
    assert_eq!(stats["calls"], 0, "a shadow serves nobody: {stats}");

    // Nothing of v2 ever went upstream.
    let recorded = rig.mock.recorded().await;
    assert_eq!(recorded.len(), 7);
    for seen in &recorded {
        let mut texts = Vec::new();
        strings_in(&seen["body"], &mut texts);
        assert!(!texts.iter().any(|t| t.contains("version=\"v2\"")), "a shadow block was sent: {seen}");
    }
    assert_eq!(recorded.iter().filter(|s| block_in(&s["body"]).is_some()).count(), 5);

    // The token difference is what v2's block costs over v1's, per sampled request.
    let pinned =
        rig.ask(&[("x-api-key", &key), ("x-memory-debug", "1"), ("x-memory-version", "v2")], MATCHING).await;
    assert_eq!((pinned.status, pinned.version.as_deref()), (200, Some("v2")), "{}", pinned.body);
    let v2_tokens = pinned.tokens() as i64;
    let expected: i64 = v1_tokens.iter().map(|t1| v2_tokens - t1).sum();
    assert_eq!(shadow["tokens_delta"], expected, "{shadow}");
}

// ---------------------------------------------------------------------------------------------
// 6. Promotion and rollback, by the admin API and by the CLI, and the history of it all

/// A release's history as (action, actor, reason, stage after), checking every entry has a time
/// and that the times never go back.
fn changes(entries: &[Value]) -> Vec<(String, String, String, String)> {
    let mut last_at = 0;
    entries
        .iter()
        .map(|e| {
            let at = parse_rfc3339_ms(e["at"].as_str().unwrap()).unwrap_or_else(|| panic!("no time: {e}"));
            assert!(at >= last_at, "history out of order: {entries:#?}");
            last_at = at;
            let field = |f: &str| e[f].as_str().unwrap_or_else(|| panic!("no {f}: {e}")).to_owned();
            (
                field("action"),
                field("actor"),
                field("reason"),
                e["after"]["stage"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn change(action: &str, actor: &str, reason: &str, stage: &str) -> (String, String, String, String) {
    (action.to_owned(), actor.to_owned(), reason.to_owned(), stage.to_owned())
}

#[tokio::test]
async fn promotions_and_rollbacks_by_the_admin_api_take_effect_at_once_and_are_recorded() {
    let rig = Rig::start(&[]);
    let key = rig.key(&[], &[]).await;
    let plain = [("x-api-key", key.as_str())];
    let (status, list) = rig.admin("GET", "/releases", None, None).await;
    assert_eq!(status, 200, "{list}");
    let names: Vec<(&Value, &Value)> =
        list["data"].as_array().unwrap().iter().map(|r| (&r["name"], &r["active"])).collect();
    assert_eq!(names, [(&json!("v1"), &json!(true)), (&json!("v2"), &json!(false))], "{list}");

    rig.patch("v2", "alice", json!({"stage": "canary", "canary_percent": 5})).await;
    let reason = json!({"reason": "canary is healthy"});
    let (status, answer) = rig.admin("POST", "/releases/v2/promote", Some("alice"), Some(&reason)).await;
    assert_eq!((status, answer), (200, json!({"name": "v2", "active": true})));
    assert_eq!(rig.routed(&plain).await, "v2");
    let (v1, v2) = (rig.release("v1").await, rig.release("v2").await);
    assert_eq!((&v1["active"], &v1["rollout"]["stage"]), (&json!(false), &json!("available")), "{v1}");
    assert_eq!((&v2["active"], &v2["rollout"]["stage"]), (&json!(true), &json!("active")), "{v2}");
    assert_eq!(v2["rollout"]["canary_percent"], 0.0, "{v2}");
    let (status, answer) = rig.admin("POST", "/releases/v2/rollback", Some("alice"), None).await;
    assert_eq!(status, 400, "the active release was rolled back: {answer}");
    assert_eq!(answer["error"]["type"], "invalid_request_error", "{answer}");
    let (status, answer) = rig.admin("POST", "/releases/v1/promote", Some("bob"), None).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(rig.routed(&plain).await, "v1");

    rig.patch("v2", "carol", json!({"stage": "canary", "canary_percent": 100})).await;
    assert_eq!(rig.routed(&plain).await, "v2");
    let reason = json!({"reason": "bad answers"});
    let (status, answer) = rig.admin("POST", "/releases/v2/rollback", Some("carol"), Some(&reason)).await;
    assert_eq!((status, answer), (200, json!({"name": "v2", "rolled_back": true})));
    assert_eq!(rig.routed(&plain).await, "v1");
    let v2 = rig.release("v2").await;
    assert_eq!(
        (&v2["rollout"]["stage"], &v2["rollout"]["canary_percent"]),
        (&json!("available"), &json!(0.0))
    );
    assert_eq!(v2["rollout"]["note"], "bad answers", "{v2}");
    let metrics = rig.metrics().await;
    let by_person =
        metric(&metrics, "memgate_release_rollbacks_total", &[("release", "v2"), ("by", "person")]);
    assert_eq!(by_person, Some(1.0), "{metrics}");

    assert_eq!(
        changes(&rig.history("v2").await),
        [
            change("patch", "alice", "", "canary"),
            change("promote", "alice", "canary is healthy", "active"),
            change("promote", "bob", "", "available"),
            change("patch", "carol", "", "canary"),
            change("rollback", "carol", "bad answers", "available"),
        ]
    );
    assert_eq!(
        changes(&rig.history("v1").await),
        [
            change("promote", "alice", "canary is healthy", "available"),
            change("promote", "bob", "", "active")
        ]
    );
}

#[tokio::test]
async fn the_cli_promotes_and_rolls_back_on_the_database_and_the_running_gateway_follows() {
    let rig = Rig::start(&[]);
    let key = rig.key(&[], &[]).await;
    let plain = [("x-api-key", key.as_str())];
    // The running gateway notices another process's change within about a second (its ticker).
    let follows = |expected: &'static str| {
        let (rig, plain) = (&rig, &plain);
        async move {
            let started = Instant::now();
            eventually(Duration::from_secs(5), &format!("the gateway to serve {expected}"), || async move {
                (rig.routed(plain).await == expected).then_some(())
            })
            .await;
            eprintln!("the gateway served {expected} {:?} after the CLI finished", started.elapsed());
        }
    };

    let output = rig.cli(&["promote", "v2", "--reason", "night switch"]).await;
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let listed: Vec<Value> =
        String::from_utf8(output.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(listed.iter().find(|r| r["name"] == "v2").unwrap()["active"], true, "{listed:?}");
    follows("v2").await;
    assert_eq!(rig.release("v2").await["active"], true);

    let output = rig.cli(&["rollback", "v2"]).await;
    assert!(!output.status.success(), "the CLI rolled back the active release");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("cannot be rolled back"), "{stderr}");
    let output = rig.cli(&["promote", "v1"]).await;
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    follows("v1").await;

    rig.patch("v2", "carol", json!({"stage": "canary", "canary_percent": 100})).await;
    assert_eq!(rig.routed(&plain).await, "v2");
    let output = rig.cli(&["rollback", "v2", "--reason", "cli rollback"]).await;
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    follows("v1").await;
    assert_eq!(rig.release("v2").await["rollout"]["stage"], "available");

    assert_eq!(
        changes(&rig.history("v2").await),
        [
            change("promote", "cli", "night switch", "active"),
            change("promote", "cli", "", "available"),
            change("patch", "carol", "", "canary"),
            change("rollback", "cli", "cli rollback", "available"),
        ]
    );
    assert_eq!(
        changes(&rig.history("v1").await),
        [change("promote", "cli", "night switch", "available"), change("promote", "cli", "", "active")]
    );
}

// ---------------------------------------------------------------------------------------------
// 7. Hostile input on the release endpoints

#[tokio::test]
async fn the_release_endpoints_refuse_unknown_releases_and_bad_rollout_changes() {
    let rig = Rig::start(&[]);
    let before = rig.release("v2").await;

    for (method, path) in [
        ("GET", "/releases/nope"),
        ("PATCH", "/releases/nope"),
        ("POST", "/releases/nope/promote"),
        ("POST", "/releases/nope/rollback"),
        ("GET", "/releases/nope/stats"),
        ("GET", "/releases/nope/history"),
        ("GET", "/releases/V2"),
        ("GET", "/releases/v2%00"),
        ("GET", "/releases/..%2Fv2"),
        ("GET", "/releases/%E2%9C%93"),
    ] {
        let body = (method == "PATCH").then(|| json!({"stage": "canary"}));
        let (status, answer) = rig.admin(method, path, None, body.as_ref()).await;
        assert_eq!(status, 404, "{method} {path}: {answer}");
        assert_eq!(answer["error"]["type"], "not_found_error", "{method} {path}: {answer}");
    }

    for bad in [
        json!({"stage": "canary", "canary_precent": 10}),
        json!({"guard": {"enabled": true, "max_errors": 3}}),
        json!({"allow": {"users": ["u-1"]}}),
        json!(["stage", "canary"]),
        json!("canary"),
        json!(42),
        json!(null),
        json!({"canary_percent": 150}),
        json!({"canary_percent": -1}),
        json!({"canary_percent": "10"}),
        json!({"shadow_sample_percent": 101}),
        json!({"allow": {"cidrs": ["10.0.0.0/33"]}}),
        json!({"allow": {"cidrs": ["not-a-cidr"]}}),
        json!({"allow": {"cidrs": "10.0.0.0/8"}}),
        json!({"stage": "active"}),
        json!({"stage": "Canary"}),
        json!({"stage": "everywhere"}),
        json!({"guard": {"max_error_rate": 2}}),
        json!({"guard": {"window_secs": 0}}),
        json!({"stage_since_ms": 0}),
    ] {
        let (status, answer) = rig.admin("PATCH", "/releases/v2", None, Some(&bad)).await;
        assert_eq!(status, 400, "{bad}: {answer}");
        assert_eq!(answer["error"]["type"], "invalid_request_error", "{bad}: {answer}");
    }
    let not_json = rig
        .http
        .patch(rig.gw.url("/admin/v1/releases/v2"))
        .bearer_auth(ADMIN_TOKEN)
        .header("content-type", "application/json")
        .body("{\"stage\": ")
        .send()
        .await
        .unwrap();
    assert_eq!(not_json.status(), 400);
    for actor in ["robert'); DROP TABLE release_history;--", &"a".repeat(65)] {
        let (status, answer) =
            rig.admin("PATCH", "/releases/v2", Some(actor), Some(&json!({"canary_percent": 5}))).await;
        assert_eq!(status, 400, "actor {actor}: {answer}");
    }
    let anonymous = rig
        .http
        .patch(rig.gw.url("/admin/v1/releases/v2"))
        .json(&json!({"stage": "canary"}))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 401);

    // The active release keeps its stage and cannot be rolled back.
    for bad in [json!({"stage": "canary"}), json!({"stage": "retired"}), json!({"stage": "shadow"})] {
        let (status, answer) = rig.admin("PATCH", "/releases/v1", None, Some(&bad)).await;
        assert_eq!(status, 400, "v1 {bad}: {answer}");
    }
    let (status, answer) = rig.admin("POST", "/releases/v1/rollback", None, None).await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"]["type"], "invalid_request_error", "{answer}");
    assert!(answer["error"]["message"].as_str().unwrap().contains("active"), "{answer}");

    // Nothing of it changed anything.
    assert_eq!(rig.release("v2").await, before);
    assert_eq!(rig.release("v1").await["active"], true);
    for name in ["v1", "v2"] {
        assert_eq!(rig.history(name).await, Vec::<Value>::new(), "{name}");
    }
}

/// PATCH is a JSON merge patch (RFC 7396): a nested object changes only the fields it names, and
/// `null` takes a field back to its default.
#[tokio::test]
async fn a_patch_changes_only_what_it_names() {
    let rig = Rig::start(&[]);
    let first =
        json!({"allow": {"subjects": ["u-1"], "cidrs": ["10.0.0.0/8"]}, "guard": {"window_secs": 120}});
    rig.patch("v2", "alice", first).await;
    let second =
        json!({"allow": {"subjects": ["u-2"]}, "guard": {"max_error_rate": 0.5}, "note": "watching"});
    let rollout = rig.patch("v2", "alice", second).await;
    assert_eq!(rollout["allow"]["subjects"], json!(["u-2"]), "{rollout}");
    assert_eq!(rollout["allow"]["cidrs"], json!(["10.0.0.0/8"]), "the CIDRs were dropped: {rollout}");
    assert_eq!(rollout["guard"]["window_secs"], 120, "the window was reset: {rollout}");
    assert_eq!(rollout["guard"]["max_error_rate"], 0.5, "{rollout}");
    assert_eq!(rollout["note"], "watching", "{rollout}");
    let rollout = rig.patch("v2", "alice", json!({"note": null, "allow": {"cidrs": null}})).await;
    assert_eq!(rollout["note"], Value::Null, "{rollout}");
    assert_eq!(rollout["allow"]["cidrs"], json!([]), "null takes a field back to its default: {rollout}");
    assert_eq!(rollout["allow"]["subjects"], json!(["u-2"]), "{rollout}");
}

// ---------------------------------------------------------------------------------------------
// Regressions: bugs found while writing the above, each of which these tests caught.

/// PRODUCT.md: `…/rollback` withdraws a canary; a retired release is withdrawn already. Refusing
/// the rollback is right, and so is doing nothing; bringing the release back to `available`,
/// where pins reach it again, is not.
#[tokio::test]
async fn rolling_back_a_retired_release_leaves_it_retired() {
    let rig = Rig::start(&[]);
    let pinner = rig.key(&[], &["pin_release"]).await;
    rig.patch("v2", "ops", json!({"stage": "retired"})).await;
    let (status, answer) = rig.admin("POST", "/releases/v2/rollback", None, None).await;
    assert!(status == 400 || status == 200, "{status} {answer}");
    let v2 = rig.release("v2").await;
    assert_eq!(v2["rollout"]["stage"], "retired", "a rollback brought a retired release back: {v2}");
    let reply = rig.ask(&[("x-api-key", &pinner), ("x-memory-version", "v2")], UNRELATED).await;
    reply.assert_error(400, "invalid_request_error", "a pin to a retired release after a rollback");
}

/// A shadow run renders the candidate's block and throws it away: nothing of it is injected, so
/// the per-release injection metrics must not count it.
#[tokio::test]
async fn a_shadow_run_is_not_counted_as_an_injection_of_the_candidate() {
    let rig = Rig::start(&[]);
    rig.remember_both_profiles().await;
    let key = rig.key(&[], &[]).await;
    rig.patch("v2", "ops", json!({"stage": "shadow", "shadow_sample_percent": 100})).await;
    for _ in 0..3 {
        let reply = rig.ask(&[("x-api-key", &key)], MATCHING).await;
        assert_eq!((reply.status, reply.version.as_deref()), (200, Some("v1")), "{}", reply.body);
    }
    eventually(PATIENCE, "3 shadow samples", || async {
        (rig.stats("v2").await["shadow"]["sampled"] == 3).then_some(())
    })
    .await;
    let metrics = rig.metrics().await;
    let injected = |name: &str, release: &str| metric(&metrics, name, &[("release", release)]).unwrap_or(0.0);
    assert_eq!(injected("memgate_memory_injected_records_total", "v1"), 3.0, "{metrics}");
    assert_eq!(
        injected("memgate_memory_injected_records_total", "v2"),
        0.0,
        "v2 injected nothing, yet the metric counts its shadow runs"
    );
    assert_eq!(injected("memgate_memory_injected_tokens_total", "v2"), 0.0, "{metrics}");
}

/// The shadow records how the candidate differs from what the active release injected. A request
/// that turned memory off (`X-Memory-Mode: off`) had no funnel run to compare with: counting it
/// shows the candidate "adding" every record the active release would have injected as well.
#[tokio::test]
async fn a_request_with_memory_turned_off_is_not_recorded_as_a_shadow_difference() {
    let rig = Rig::start(&[]);
    rig.remember_both_profiles().await;
    let key = rig.key(&[], &[]).await;
    rig.patch("v2", "ops", json!({"stage": "shadow", "shadow_sample_percent": 100})).await;
    for _ in 0..3 {
        let reply = rig.ask(&[("x-api-key", &key), ("x-memory-mode", "off")], MATCHING).await;
        assert_eq!((reply.status, reply.injected.as_deref()), (200, Some("0")), "{}", reply.body);
    }
    // Then three ordinary requests; once their differences are in, the earlier ones would be too.
    for _ in 0..3 {
        let reply = rig.ask(&[("x-api-key", &key)], MATCHING).await;
        assert_eq!(reply.injected.as_deref(), Some("1"), "{}", reply.body);
    }
    let real = json!({"added": ["profile-v2"], "dropped": ["profile-v1"]});
    let shadow = eventually(PATIENCE, "the ordinary requests' shadow differences", || async {
        let shadow = rig.stats("v2").await["shadow"].clone();
        let recent = shadow["recent"].as_array().unwrap();
        let ordinary =
            recent.iter().filter(|d| d["added"] == real["added"] && d["dropped"] == real["dropped"]).count();
        (ordinary == 3).then_some(shadow)
    })
    .await;
    assert_eq!(shadow["sampled"], 3, "requests with memory off were sampled: {shadow}");
    assert_eq!(
        (shadow["ids_added"].as_u64(), shadow["ids_dropped"].as_u64()),
        (Some(3), Some(3)),
        "{shadow}"
    );
}
