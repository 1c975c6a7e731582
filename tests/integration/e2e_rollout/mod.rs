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
use memgate::clock::parse_rfc3339_ms;
use memgate::rollout::sticky_bucket;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

const CONFIG: &str = r#"
[memory]
funnel_timeout_ms = 10000
# These tests are about rollout mechanics between the releases v1 and v2.
default_release = "v1"

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

mod canary;
mod guard;
mod hostile;
mod pins;
mod promotion;
mod regressions;
mod shadow;
mod stats;
