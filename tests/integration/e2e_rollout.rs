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

    async fn admin(&self, method: &str, path: &str, actor: Option<&str>, body: Option<&Value>) -> (u16, Value) {
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
        let (status, answer) = self.admin("PATCH", &format!("/releases/{name}"), Some(actor), Some(&body)).await;
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

    // Every one of 10,000 subjects goes through the real HTTP path, twice. (Measured on the
    // 2-core debug build: about TODO s a pass, so no sampling is needed.)
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

#[tokio::test]
async fn allow_listed_subjects_teams_and_cidrs_get_the_canary_even_at_zero_percent() {
    let rig = Rig::start(&[]);
    let asserting = rig.key(&[], &["assert_subject"]).await;
    let beta = rig.key(&["team:beta"], &[]).await;
    let alpha = rig.key(&["team:alpha"], &[]).await;
    let jwt_beta = format!("Bearer {}", jwt(json!({"sub": "jwt-user-1", "team": "beta", "exp": in_an_hour()})));
    let jwt_alpha = format!("Bearer {}", jwt(json!({"sub": "jwt-user-2", "team": "alpha", "exp": in_an_hour()})));
    let jwt_vip = format!("Bearer {}", jwt(json!({"sub": "vip-7", "exp": in_an_hour()})));

    rig.patch(
        "v2",
        "ops",
        json!({"stage": "canary", "canary_percent": 0, "allow": {"subjects": ["vip-7"], "teams": ["beta"]}}),
    )
    .await;
    let cases: [(&str, Vec<(&str, &str)>, &str); 7] = [
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
    rig.patch("v2", "ops", json!({"allow": {"cidrs": ["127.0.0.1/32"]}})).await;
    for (what, headers, _) in &cases {
        assert_eq!(rig.routed(headers).await, "v2", "{what}, from an allow-listed address");
    }
    rig.patch("v2", "ops", json!({"allow": {"cidrs": ["10.0.0.0/8", "::1/128"]}})).await;
    for (what, headers, _) in &cases {
        assert_eq!(rig.routed(headers).await, "v1", "{what}, from an address not listed");
    }
    // Rolled back, the allow-lists no longer route anyone there.
    rig.patch("v2", "ops", json!({"allow": {"cidrs": ["127.0.0.0/8"], "subjects": ["vip-7"]}})).await;
    assert_eq!(rig.routed(&cases[0].1).await, "v2");
    let (status, answer) = rig.admin("POST", "/releases/v2/rollback", None, None).await;
    assert_eq!(status, 200, "{answer}");
    for (what, headers, _) in &cases {
        assert_eq!(rig.routed(headers).await, "v1", "{what}, after the rollback");
    }
}

