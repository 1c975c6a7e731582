//! memgate's memory tools end to end: the real binary in front of the mock upstream, whose model
//! calls the tools as a model would (docs/mock-upstream.md, "Memory tools"). Every assertion is on
//! what the client receives, what the upstream received (the mock's recording) and what the
//! admin API shows.

mod bounds;
mod compat;
mod explain;
mod files_trust;
mod memory_file;
mod streaming;

use crate::e2e_identity::{ADMIN_TOKEN, issue_key, managed_gateway};
use crate::support::{Proc, TempDir, client, without_request_seq};
use serde_json::{Value, json};

const TENANT: &str = "acme";

pub(super) struct Gate {
    pub mock: Proc,
    pub gw: Proc,
    http: reqwest::Client,
    _config: TempDir,
}

/// A gateway key's secret and id.
pub(super) struct Key {
    pub secret: String,
    pub id: String,
}

/// What the gateway answered: status, headers and body text.
pub(super) struct Answer {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub text: String,
}

impl Answer {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|err| panic!("{err}: {}", self.text))
    }
}

impl Gate {
    pub fn start(toml: &str, mock_args: &[&str]) -> Gate {
        let mock = Proc::mock(mock_args);
        let dir = TempDir::new("tools-config");
        let file = dir.path.join("memgate.toml");
        std::fs::write(
            &file,
            format!("[memory]\nfunnel_timeout_ms = 10000\ndefault_release = \"v1\"\n{toml}"),
        )
        .unwrap();
        let gw = managed_gateway(&mock, &["--config", file.to_str().unwrap()]);
        Gate { mock, gw, http: client(), _config: dir }
    }

    pub async fn key(&self, permissions: &[&str]) -> Key {
        let body = json!({"name": "agent", "scopes": ["team:support"], "permissions": permissions});
        let (secret, answer) = issue_key(&self.gw, TENANT, body).await;
        Key { secret, id: answer["id"].as_str().unwrap().to_owned() }
    }

    /// A key with the write tools that may name its end user.
    pub async fn agent(&self) -> Key {
        self.key(&["memory_write_tools", "assert_subject"]).await
    }

    pub async fn send(&self, key: &Key, headers: &[(&str, &str)], body: &[u8]) -> Answer {
        let mut request = self
            .http
            .post(self.gw.url("/v1/messages"))
            .header("x-api-key", &key.secret)
            .header("anthropic-version", "2023-06-01")
            .header("content-type", "application/json")
            .body(body.to_vec());
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        Answer { status, headers, text: response.text().await.unwrap() }
    }

    pub async fn ask(&self, key: &Key, subject: &str, body: &Value) -> Answer {
        self.send(key, &[("x-memory-subject", subject)], &serde_json::to_vec(body).unwrap()).await
    }

    pub async fn records(&self, scope: &str) -> Vec<Value> {
        let response = self
            .http
            .get(self.gw.url(&format!("/admin/v1/memories?scope={scope}")))
            .bearer_auth(ADMIN_TOKEN)
            .header("x-memory-tenant", TENANT)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let body: Value = response.json().await.unwrap();
        body["data"].as_array().cloned().unwrap_or_default()
    }

    pub async fn metrics(&self) -> String {
        self.http.get(self.gw.url("/metrics")).send().await.unwrap().text().await.unwrap()
    }

    /// The bodies the upstream received, in order.
    pub async fn upstream_bodies(&self) -> Vec<Value> {
        self.mock.recorded().await.into_iter().map(|entry| entry["body"].clone()).collect()
    }
}

pub(super) fn ask_body(text: &str, stream: bool) -> Value {
    json!({
        "model": "claude-mock",
        "max_tokens": 256,
        "stream": stream,
        "messages": [{"role": "user", "content": text}],
    })
}

/// The mock's `usage.input_tokens` for a body it received (`answer::estimate_input_tokens`).
pub(super) fn mock_input_tokens(body: &Value) -> u64 {
    let bytes: usize = ["system", "messages", "tools"]
        .iter()
        .filter_map(|k| body.get(*k))
        .map(|v| v.to_string().len())
        .sum();
    (bytes as u64).div_ceil(4)
}

/// The names of the tools a body offers.
pub(super) fn tool_names(body: &Value) -> Vec<String> {
    body["tools"]
        .as_array()
        .map(|tools| tools.iter().map(|t| t["name"].as_str().unwrap_or("").to_owned()).collect())
        .unwrap_or_default()
}

pub(super) const MEMGATE_TOOLS: [&str; 6] =
    ["memory_search", "memory_get", "memory_list", "memory_add", "memory_update", "memory_delete"];

/// The `tool_result` blocks of a body's last message.
pub(super) fn last_tool_results(body: &Value) -> Vec<Value> {
    body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .and_then(|m| m["content"].as_array())
        .cloned()
        .unwrap_or_default()
}

/// Done when, non-streaming: a request whose model calls memory_add then answers stores the
/// record in the caller's scope with its author; the client receives one final message without
/// memgate's blocks, usage summed over both rounds; and the next turn finds the record.
#[tokio::test]
async fn e2e_tools_memory_add_then_answer_stores_the_record_and_the_client_sees_one_message() {
    let gate = Gate::start("", &[]);
    let key = gate.agent().await;
    let answer =
        gate.ask(&key, "u-1", &ask_body("Please remember that my favourite colour is green.", false)).await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    let message = answer.json();
    let content = message["content"].as_array().unwrap();
    assert!(content.iter().all(|b| b["type"] == "text"), "memgate's blocks reached the client: {message}");
    assert_eq!(content[0]["text"], "I'll remember that.");
    assert!(content[1]["text"].as_str().unwrap().starts_with("From memory: Saved as mem-"), "{message}");
    assert_eq!(message["stop_reason"], "end_turn");
    assert!(message["id"].as_str().unwrap().starts_with("msg_mock_"));

    // Two rounds upstream: the second carries the model's call and memgate's result.
    let bodies = gate.upstream_bodies().await;
    assert_eq!(bodies.len(), 2, "{bodies:#?}");
    assert_eq!(tool_names(&bodies[0]), MEMGATE_TOOLS);
    let results = last_tool_results(&bodies[1]);
    assert_eq!(results.len(), 1);
    assert_eq!(results[0]["type"], "tool_result");
    assert!(results[0]["content"].as_str().unwrap().starts_with("Saved as mem-"), "{results:?}");
    let call = &bodies[1]["messages"][1]["content"][1];
    assert_eq!((call["type"].as_str(), call["name"].as_str()), (Some("tool_use"), Some("memory_add")));
    assert_eq!(results[0]["tool_use_id"], call["id"]);
    let input_tokens: u64 = bodies.iter().map(mock_input_tokens).sum();
    assert_eq!(message["usage"]["input_tokens"], input_tokens, "usage summed over the rounds: {message}");
    assert!(message["usage"]["output_tokens"].as_u64().unwrap() > 3);

    // The record: in the subject's scope, by the key, active.
    let records = gate.records("user:u-1").await;
    assert_eq!(records.len(), 1, "{records:#?}");
    let record = &records[0];
    assert_eq!(record["scope"], json!(["user:u-1"]));
    assert_eq!(record["author"], format!("agent:{}", key.id));
    assert_eq!(record["status"], "active");
    assert_eq!(record["content"]["statement"], "my favourite colour is green");

    // The next turn: a question the model searches memory for, and finds.
    let answer = gate.ask(&key, "u-1", &ask_body("What is my favourite colour?", false)).await;
    let text = answer.json()["content"][1]["text"].as_str().unwrap().to_owned();
    assert!(text.contains("favourite colour is green"), "{text}");
    // Another subject of the same key finds nothing of it.
    let answer = gate.ask(&key, "u-2", &ask_body("What is my favourite colour?", false)).await;
    assert!(!answer.text.contains("green"), "{}", answer.text);

    let metrics = gate.metrics().await;
    for line in [
        r#"memgate_memory_tool_calls_total{release="v1",tool="memory_add",outcome="ok"} 1"#,
        r#"memgate_memory_tool_calls_total{release="v1",tool="memory_search",outcome="ok"} 2"#,
    ] {
        assert!(metrics.contains(line), "{line} missing from\n{metrics}");
    }
}

/// Hostile input the model sends: a secret (refused; the value is in no result and no answer),
/// an input no tool takes (a clear error the model reads). The client gets a 200 either way.
#[tokio::test]
async fn e2e_tools_a_secret_is_refused_and_a_malformed_call_gets_a_clear_error() {
    let gate = Gate::start("", &[]);
    let key = gate.agent().await;
    let secret = "sk-ant-api03-Zx8bQ2vN7mK4pL9wR3tY6uI1oP5aS0dF2gH8jK4lZ7xC9vB1nM3qW5eR7tY9uI0oP2aS4dF6gH8jK0lZ2xC4vB6n-AAAAAAAA";
    let answer =
        gate.ask(&key, "u-1", &ask_body(&format!("Remember that the deploy key is {secret}"), false)).await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    let message = answer.json();
    let said = message["content"][1]["text"].as_str().unwrap();
    assert!(said.contains("Secrets never go into memory"), "{message}");
    assert!(!answer.text.contains(&secret[..24]), "the secret came back: {}", answer.text);
    let bodies = gate.upstream_bodies().await;
    let result = &last_tool_results(&bodies[1])[0];
    assert_eq!(result["is_error"], true);
    assert!(!result["content"].as_str().unwrap().contains(&secret[..24]), "{result}");
    assert!(gate.records("user:u-1").await.is_empty());

    let mut body = ask_body("Save something.", false);
    body["model"] = json!("mock-tool-bad-input");
    let answer = gate.ask(&key, "u-1", &body).await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    let bodies = gate.upstream_bodies().await;
    let result = &last_tool_results(bodies.last().unwrap())[0];
    assert_eq!(result["is_error"], true, "{result}");
    assert!(result["content"].as_str().unwrap().contains("unknown field"), "{result}");
    assert!(gate.records("user:u-1").await.is_empty());
    // The gateway is still well.
    let health = client().get(gate.gw.url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);
}

/// The model calls a memgate tool and the client's own in one turn: memgate answers its own (the
/// call runs) and the client gets its tool call back, with nothing of memgate's.
#[tokio::test]
async fn e2e_tools_a_turn_with_memgates_and_the_clients_tool_returns_the_clients_call() {
    let gate = Gate::start("", &[]);
    let key = gate.agent().await;
    let mut body = ask_body("What's the weather where I live?", false);
    body["model"] = json!("mock-tool-mixed");
    body["tools"] =
        json!([{"name": "get_weather", "description": "Weather", "input_schema": {"type": "object"}}]);
    let answer = gate.ask(&key, "u-1", &body).await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    let message = answer.json();
    let content = message["content"].as_array().unwrap();
    assert_eq!(content.len(), 2, "{message}");
    assert_eq!(content[1]["type"], "tool_use");
    assert_eq!(content[1]["name"], "get_weather");
    assert_eq!(message["stop_reason"], "tool_use");
    let bodies = gate.upstream_bodies().await;
    assert_eq!(bodies.len(), 1, "the client's call goes back to the client");
    // memgate's tools come after the client's own.
    let mut expected = vec!["get_weather".to_owned()];
    expected.extend(MEMGATE_TOOLS.iter().map(|s| (*s).to_owned()));
    assert_eq!(tool_names(&bodies[0]), expected);
    let metrics = gate.metrics().await;
    assert!(
        metrics
            .contains(r#"memgate_memory_tool_calls_total{release="v1",tool="memory_search",outcome="ok"} 1"#),
        "{metrics}"
    );
}

/// A JWT's permission claim gives the tools as a key permission does: writes go into the
/// token's `user:<sub>` scope with `agent:jwt:<sub>` as author; a token without it gets none.
#[tokio::test]
async fn e2e_tools_a_jwt_permission_claim_gives_the_tools() {
    use crate::e2e_identity::{hs256, in_a_minute};
    let gate = Gate::start("", &[]);
    let send = |token: String, text: &str| {
        let body = serde_json::to_vec(&ask_body(text, false)).unwrap();
        let request = client()
            .post(gate.gw.url("/v1/messages"))
            .bearer_auth(token)
            .header("content-type", "application/json")
            .body(body);
        async move { request.send().await.unwrap() }
    };
    let claims = json!({"sub": "u-9", "tenant": TENANT, "exp": in_a_minute(), "memgate_permissions": ["memory_write_tools"]});
    let response = send(hs256(claims), "Remember that I work nights.").await;
    assert_eq!(response.status(), 200);
    let records = gate.records("user:u-9").await;
    assert_eq!(records.len(), 1, "{records:#?}");
    assert_eq!(records[0]["author"], "agent:jwt:u-9");
    let before = gate.upstream_bodies().await.len();
    let plain = json!({"sub": "u-9", "tenant": TENANT, "exp": in_a_minute()});
    send(hs256(plain), "Remember that I work days.").await;
    let bodies = gate.upstream_bodies().await;
    assert_eq!(bodies.len(), before + 1);
    assert!(tool_names(&bodies[before]).is_empty());
}

/// The same request straight to the mock: what a gateway that adds nothing must answer.
pub(super) async fn direct(gate: &Gate, body: &[u8]) -> String {
    let response = client()
        .post(gate.mock.url("/v1/messages"))
        .header("content-type", "application/json")
        .body(body.to_vec())
        .send()
        .await
        .unwrap();
    without_request_seq(&response.text().await.unwrap())
}
