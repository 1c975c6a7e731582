//! The admin API's memory paths end to end: the real binary on port 0, a SQLite database of its
//! own, driven over HTTP (and through the `memgate memory` CLI) the way an operator drives it.
//! Every assertion is on what a caller sees: status, body fields, headers, the log.

use crate::support::{BIN, Proc, TempDir, TestDb, client, eventually};
use reqwest::{Method, RequestBuilder};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

const TOKEN: &str = "e2e-admin-token-0123456789abcdef";

/// Nothing listens here; the admin API never calls upstream.
const NO_UPSTREAM: &str = "http://127.0.0.1:9";

/// A gateway with the admin API on.
struct Admin {
    gw: Proc,
    http: reqwest::Client,
    _config: Option<TempDir>,
}

impl Admin {
    fn start() -> Admin {
        Admin::start_with(&[], &[])
    }

    fn start_with(extra: &[&str], env: &[(&str, &str)]) -> Admin {
        let mut all_env = vec![("MEMGATE_ADMIN_TOKEN", TOKEN)];
        all_env.extend_from_slice(env);
        Admin { gw: Proc::gateway_to(NO_UPSTREAM, extra, &all_env), http: client(), _config: None }
    }

    /// A gateway that reads `toml` as its config file.
    fn start_with_config(toml: &str) -> Admin {
        let dir = TempDir::new("admin-config");
        let file = dir.path.join("memgate.toml");
        std::fs::write(&file, toml).unwrap();
        let mut admin = Admin::start_with(&["--config", file.to_str().unwrap()], &[]);
        admin._config = Some(dir);
        admin
    }

    /// An authorized request to `/admin/v1{path}`, in `tenant` (the default one when `None`).
    fn req(&self, method: Method, path: &str, tenant: Option<&str>) -> RequestBuilder {
        let request = self.http.request(method, self.gw.url(&format!("/admin/v1{path}"))).bearer_auth(TOKEN);
        match tenant {
            Some(tenant) => request.header("x-memory-tenant", tenant),
            None => request,
        }
    }

    async fn create(&self, tenant: Option<&str>, record: &Value) -> Answer {
        send(self.req(Method::POST, "/memories", tenant).json(record)).await
    }

    async fn create_ok(&self, tenant: Option<&str>, record: &Value) -> String {
        let answer = self.create(tenant, record).await;
        answer.expect(201, "create");
        answer.json["id"].as_str().unwrap().to_owned()
    }

    async fn get(&self, tenant: Option<&str>, id: &str) -> Answer {
        send(self.req(Method::GET, &format!("/memories/{id}"), tenant)).await
    }

    async fn patch(&self, tenant: Option<&str>, id: &str, if_match: Option<i64>, body: &Value) -> Answer {
        let mut request = self.req(Method::PATCH, &format!("/memories/{id}"), tenant).json(body);
        if let Some(revision) = if_match {
            request = request.header("if-match", revision.to_string());
        }
        send(request).await
    }

    async fn action(&self, tenant: Option<&str>, id: &str, action: &str) -> Answer {
        send(self.req(Method::POST, &format!("/memories/{id}/{action}"), tenant)).await
    }

    async fn history(&self, tenant: Option<&str>, id: &str) -> Answer {
        send(self.req(Method::GET, &format!("/memories/{id}/history"), tenant)).await
    }

    /// Every record a filtered list returns, paging with `limit` until `next_cursor` is null.
    /// Checks that no record comes twice and that ids come in ascending order.
    async fn list_all(&self, tenant: Option<&str>, query: &str, limit: u32) -> Vec<Value> {
        let mut out: Vec<Value> = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..1000 {
            let mut path = format!("/memories?limit={limit}");
            if !query.is_empty() {
                path.push('&');
                path.push_str(query);
            }
            if let Some(cursor) = &cursor {
                path.push_str(&format!("&cursor={cursor}"));
            }
            let answer = send(self.req(Method::GET, &path, tenant)).await;
            let body = answer.expect(200, &format!("list {path}"));
            let page = body["data"].as_array().unwrap();
            assert!(page.len() <= limit as usize, "page over limit: {}", answer.text);
            out.extend(page.iter().cloned());
            match body["next_cursor"].as_str() {
                Some(next) => cursor = Some(next.to_owned()),
                None => {
                    let ids: Vec<&str> = out.iter().map(|r| r["id"].as_str().unwrap()).collect();
                    let mut sorted = ids.clone();
                    sorted.sort_unstable();
                    sorted.dedup();
                    assert_eq!(ids, sorted, "paging repeated or reordered records ({query})");
                    return out;
                }
            }
        }
        panic!("paging did not end");
    }

    async fn export(&self, tenant: Option<&str>, query: &str) -> String {
        let answer = send(self.req(Method::GET, &format!("/export{query}"), tenant)).await;
        assert_eq!(answer.status, 200, "export: {}", answer.text);
        let content_type = answer.headers.get("content-type").unwrap().to_str().unwrap();
        assert_eq!(content_type, "application/x-ndjson");
        answer.text
    }

    async fn import(&self, tenant: Option<&str>, body: &str, dry_run: bool) -> Answer {
        let path = if dry_run { "/import?dry_run=true" } else { "/import" };
        send(self.req(Method::POST, path, tenant).body(body.to_owned())).await
    }

    async fn healthy(&self) {
        let answer = send(self.http.get(self.gw.url("/healthz"))).await;
        assert_eq!(answer.status, 200, "/healthz: {}", answer.text);
    }
}

/// One HTTP answer, read whole.
struct Answer {
    status: u16,
    headers: reqwest::header::HeaderMap,
    text: String,
    json: Value,
}

async fn send(request: RequestBuilder) -> Answer {
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let text = response.text().await.unwrap();
    let json = serde_json::from_str(&text).unwrap_or(Value::Null);
    Answer { status, headers, text, json }
}

/// An admin request written on a bare socket: `head` ends the header block, `body` follows. For
/// oversized bodies, which the gateway answers before reading them: an HTTP client that insists
/// on sending the whole body first may see the connection reset instead of the answer.
async fn raw_http(admin: &Admin, method: &str, path: &str, head: &str, body: &[u8]) -> Answer {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = admin.gw.base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "{method} /admin/v1{path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\n\
         Content-Type: application/json\r\nConnection: close\r\n{head}"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    stream.write_all(body).await.unwrap();
    let mut raw = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut raw)).await;
    assert!(read.is_ok_and(|r| r.is_ok()) || !raw.is_empty(), "no answer to {method} {path}");
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let json = serde_json::from_str(body).unwrap_or(Value::Null);
    Answer { status, headers: reqwest::header::HeaderMap::new(), text: body.to_owned(), json }
}

impl Answer {
    fn expect(&self, status: u16, what: &str) -> &Value {
        assert_eq!(self.status, status, "{what}: {}", self.text);
        &self.json
    }

    /// Anthropic's error shape: `{"type":"error","error":{"type":…,"message":…}}`.
    fn assert_error(&self, status: u16, error_type: &str, what: &str) {
        assert_eq!(self.status, status, "{what}: {}", self.text);
        assert_eq!(self.json["type"], "error", "{what}: {}", self.text);
        assert_eq!(self.json["error"]["type"], error_type, "{what}: {}", self.text);
        let message = self.json["error"]["message"].as_str().unwrap_or("");
        assert!(!message.is_empty(), "{what}: no message in {}", self.text);
    }

    /// The stable `error.code` programs branch on (docs/admin-api.md).
    fn assert_code(&self, code: &str, what: &str) {
        assert_eq!(self.json["error"]["code"], code, "{what}: {}", self.text);
    }

    fn problems(&self) -> Vec<(String, String, String)> {
        problems_of(&self.json["error"]["problems"])
    }

    /// A 422 that names (path, kind) among its problems.
    fn assert_problem(&self, path: &str, kind: &str, what: &str) {
        self.assert_error(422, "invalid_request_error", what);
        self.assert_code("validation_failed", what);
        assert!(
            self.problems().iter().any(|(p, k, _)| p == path && k == kind),
            "{what}: no problem ({path}, {kind}) in {}",
            self.text
        );
    }

    fn request_id(&self) -> String {
        self.headers.get("x-memory-request-id").unwrap().to_str().unwrap().to_owned()
    }
}

fn problems_of(value: &Value) -> Vec<(String, String, String)> {
    value
        .as_array()
        .unwrap_or(&Vec::new())
        .iter()
        .map(|p| {
            let field = |name: &str| p[name].as_str().unwrap_or("").to_owned();
            (field("path"), field("kind"), field("message"))
        })
        .collect()
}

fn fact(statement: &str, scope: &[&str]) -> Value {
    json!({"type": "fact", "scope": scope, "content": {"statement": statement}})
}

/// A fact with its id given, so that no near-duplicate check merges it into a similar one.
fn fact_with_id(id: &str, statement: &str, scope: &[&str]) -> Value {
    with(fact(statement, scope), "id", json!(id))
}

/// `record` with `field` set (or replaced).
fn with(mut record: Value, field: &str, value: Value) -> Value {
    record[field] = value;
    record
}

fn parse_time(text: &Value) -> OffsetDateTime {
    OffsetDateTime::parse(text.as_str().unwrap(), &Rfc3339).unwrap()
}

fn ids_of(records: &[Value]) -> BTreeSet<String> {
    records.iter().map(|r| r["id"].as_str().unwrap().to_owned()).collect()
}

fn export_ids(lines: &str) -> BTreeSet<String> {
    lines
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap()["id"].as_str().unwrap().to_owned())
        .collect()
}

mod cli;
mod concurrency;
mod hostile;
mod memories;
mod refusals;
mod tenants;
mod transfer;
