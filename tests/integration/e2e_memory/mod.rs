//! Memory end to end: records written through the admin API, found by the real embedding model
//! (multilingual-e5-small from .assets/), filtered by the funnel and injected into what the mock
//! upstream receives. Every assertion is on what a client, an operator or the upstream sees: the
//! answer's status and `X-Memory-*` headers, the body the mock recorded, `/admin/v1/explain`,
//! `/metrics`.
//!
//! Gateways here get a funnel time budget of 10 s instead of the default 50 ms: the suite runs on
//! busy machines where one query embedding can take longer than that, and these tests are about
//! what gets injected. The budget itself is tested on its own (`a_funnel_over_its_time_budget_*`).

use crate::e2e_identity::{ADMIN_TOKEN, issue_key, managed_gateway};
use crate::support::{Proc, TempDir, client, eventually};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::time::Duration;

/// The funnel budget for tests that are not about it, and a `v2` that reads `v1` records with a
/// threshold no record reaches: explained with `"release": "v2"`, a query lists the similarity of
/// every record it was compared with (`similarity_table`).
const CONFIG: &str = r#"
[memory]
funnel_timeout_ms = 10000
# The tests here are about v1's blocks (multilingual.rs runs the shipped default).
default_release = "v1"

[releases.v2]
schema_versions = ["v1"]
similarity_threshold = 0.999
"#;

const TENANT: &str = "acme";

/// A mock upstream and a managed-mode gateway in front of it, reading `toml` as its config.
struct Memgate {
    mock: Proc,
    gw: Proc,
    http: reqwest::Client,
    _config: TempDir,
}

impl Memgate {
    fn start(toml: &str) -> Memgate {
        let mock = Proc::mock(&[]);
        let dir = TempDir::new("memory-config");
        let file = dir.path.join("memgate.toml");
        std::fs::write(&file, toml).unwrap();
        let gw = managed_gateway(&mock, &["--config", file.to_str().unwrap()]);
        Memgate { mock, gw, http: client(), _config: dir }
    }

    async fn admin_post(&self, tenant: &str, path: &str, body: &Value) -> (u16, Value) {
        let response = self
            .http
            .post(self.gw.url(&format!("/admin/v1{path}")))
            .bearer_auth(ADMIN_TOKEN)
            .header("x-memory-tenant", tenant)
            .json(body)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap())
    }

    async fn admin_get(&self, tenant: &str, path: &str) -> Value {
        let response = self
            .http
            .get(self.gw.url(&format!("/admin/v1{path}")))
            .bearer_auth(ADMIN_TOKEN)
            .header("x-memory-tenant", tenant)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "GET {path}");
        response.json().await.unwrap()
    }

    /// Writes a record; returns the status and the answer.
    async fn write(&self, tenant: &str, record: &Value) -> (u16, Value) {
        self.admin_post(tenant, "/memories", record).await
    }

    /// Writes a new record and returns its id.
    async fn remember(&self, tenant: &str, record: &Value) -> String {
        let (status, answer) = self.write(tenant, record).await;
        assert_eq!(status, 201, "creating {record}: {answer}");
        answer["id"].as_str().unwrap().to_owned()
    }

    async fn set_status(&self, tenant: &str, id: &str, action: &str) {
        let (status, answer) = self.admin_post(tenant, &format!("/memories/{id}/{action}"), &json!({})).await;
        assert_eq!(status, 200, "{action} {id}: {answer}");
    }

    /// A gateway key of `tenant`.
    async fn key(&self, tenant: &str, scopes: &[&str], permissions: &[&str]) -> String {
        let body = json!({"name": "support-bot", "scopes": scopes, "permissions": permissions});
        issue_key(&self.gw, tenant, body).await.0
    }

    /// `POST /admin/v1/explain` for `request` as seen by a caller with `scopes` and `subject`.
    async fn explain(&self, tenant: &str, request: &Value, caller: Value, release: Option<&str>) -> Value {
        let mut body = json!({"request": request, "caller": caller});
        if let Some(release) = release {
            body["release"] = json!(release);
        }
        let (status, answer) = self.admin_post(tenant, "/explain", &body).await;
        assert_eq!(status, 200, "explain: {answer}");
        answer
    }

    /// Sends raw bytes to `path` with `key` and extra headers.
    async fn send_raw(&self, path: &str, key: &str, headers: &[(&str, &str)], body: Vec<u8>) -> Answer {
        let mut request = self
            .http
            .post(self.gw.url(path))
            .header("x-api-key", key)
            .header("anthropic-version", "2023-06-01")
            .header("content-type", "application/json")
            .body(body);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        Answer::of(request.send().await.unwrap()).await
    }

    async fn ask(&self, key: &str, headers: &[(&str, &str)], body: &Value) -> Answer {
        self.send_raw("/v1/messages", key, headers, serde_json::to_vec(body).unwrap()).await
    }

    async fn ask_count(&self, key: &str, headers: &[(&str, &str)], body: &Value) -> Answer {
        self.send_raw("/v1/messages/count_tokens", key, headers, serde_json::to_vec(body).unwrap()).await
    }

    /// What the upstream received last: the recorded entry (`body` parsed, `body_bytes`).
    async fn last_upstream(&self) -> Value {
        self.mock.recorded().await.pop().expect("the upstream received nothing")
    }

    async fn upstream_count(&self) -> usize {
        self.mock.recorded().await.len()
    }
}

/// An answer from the gateway: status, the headers this file looks at, and the body.
struct Answer {
    status: u16,
    memory_status: Option<String>,
    injected: Option<String>,
    trace: Option<String>,
    body: Value,
}

impl Answer {
    async fn of(response: reqwest::Response) -> Answer {
        let header = |name: &str| response.headers().get(name).map(|v| v.to_str().unwrap().to_owned());
        let (memory_status, injected, trace) =
            (header("x-memory-status"), header("x-memory-injected"), header("x-memory-trace"));
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Answer { status, memory_status, injected, trace, body }
    }

    /// A 200 with `X-Memory-Status: ok` and `X-Memory-Injected: count`.
    fn assert_ok(&self, count: usize, what: &str) {
        assert_eq!(self.status, 200, "{what}: {}", self.body);
        assert_eq!(self.memory_status.as_deref(), Some("ok"), "{what}");
        assert_eq!(self.injected.as_deref(), Some(count.to_string().as_str()), "{what}");
    }

    fn assert_error(&self, status: u16, error_type: &str, what: &str) {
        assert_eq!(self.status, status, "{what}: {}", self.body);
        assert_eq!(self.body["type"], "error", "{what}: {}", self.body);
        assert_eq!(self.body["error"]["type"], error_type, "{what}: {}", self.body);
    }
}

fn messages(system: Option<Value>, user_text: &str) -> Value {
    let mut body = json!({
        "model": "claude-test",
        "max_tokens": 256,
        "messages": [{"role": "user", "content": user_text}],
    });
    if let Some(system) = system {
        body["system"] = system;
    }
    body
}

fn support_bot(user_text: &str) -> Value {
    messages(Some(json!("You are Acme's customer-support assistant. Be brief and kind.")), user_text)
}

/// Every string in a JSON value that holds a memory block tag (in any case).
fn memory_strings(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(text) if text.to_ascii_lowercase().contains("memory_context") => out.push(text.clone()),
        Value::Array(items) => items.iter().for_each(|v| memory_strings(v, out)),
        Value::Object(map) => map.values().for_each(|v| memory_strings(v, out)),
        _ => {}
    }
}

/// The one `<MEMORY_CONTEXT>` block in a Messages body, if any.
fn block_in(body: &Value) -> Option<String> {
    let mut found = Vec::new();
    memory_strings(body, &mut found);
    assert!(found.len() <= 1, "more than one string holds a memory block: {found:#?}");
    found.pop()
}

/// The record lines of a block: one JSON object per line.
fn record_lines(block: &str) -> Vec<Value> {
    block
        .lines()
        .filter(|line| line.starts_with('{'))
        .map(|line| serde_json::from_str(line).unwrap_or_else(|err| panic!("{err}: {line}")))
        .collect()
}

/// The ids of the records injected into a Messages body (stubs included).
fn injected_ids(body: &Value) -> BTreeSet<String> {
    block_in(body)
        .map(|block| {
            record_lines(&block).iter().map(|line| line["id"].as_str().unwrap().to_owned()).collect()
        })
        .unwrap_or_default()
}

fn set(ids: &[&str]) -> BTreeSet<String> {
    ids.iter().map(|id| (*id).to_owned()).collect()
}

/// The layer of an explain trace named `name`.
fn layer<'a>(explained: &'a Value, name: &str) -> &'a Value {
    explained["trace"]["layers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|layer| layer["layer"] == name)
        .unwrap_or_else(|| panic!("no layer {name}: {explained}"))
}

/// `id -> reason` of what one layer removed.
fn removed(explained: &Value, name: &str) -> std::collections::BTreeMap<String, String> {
    layer(explained, name)["removed"]
        .as_array()
        .map(|list| {
            list.iter()
                .map(|r| (r["id"].as_str().unwrap().to_owned(), r["reason"].as_str().unwrap().to_owned()))
                .collect()
        })
        .unwrap_or_default()
}

/// The cosine of every record the semantic layer compared with the query, best first, from an
/// explain under the `v2` probe release (its threshold removes every record with its score).
/// Records matched exactly (key, alias, identifier) show as 1.0.
async fn similarity_table(
    gate: &Memgate,
    tenant: &str,
    request: &Value,
    caller: Value,
) -> Vec<(String, f32)> {
    let explained = gate.explain(tenant, request, caller, Some("v2")).await;
    let mut scores: Vec<(String, f32)> = removed(&explained, "semantic")
        .into_iter()
        .map(|(id, reason)| {
            let score = reason
                .strip_prefix("similarity ")
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|s| s.parse().ok())
                .unwrap_or_else(|| panic!("no score in {reason:?}"));
            (id, score)
        })
        .collect();
    for id in explained["injected"].as_array().unwrap() {
        scores.push((id.as_str().unwrap().to_owned(), 1.0));
    }
    scores.sort_by(|a, b| b.1.total_cmp(&a.1));
    scores
}

mod budget;
mod duplicates;
mod fail_open;
mod freshness;
mod hostile;
mod modes;
mod multilingual;
mod neighbours;
mod placement;
mod ranking;
mod scope;
mod time_and_status;
