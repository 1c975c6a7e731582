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

    fn problems(&self) -> Vec<(String, String, String)> {
        problems_of(&self.json["error"]["problems"])
    }

    /// A 422 that names (path, kind) among its problems.
    fn assert_problem(&self, path: &str, kind: &str, what: &str) {
        self.assert_error(422, "invalid_request_error", what);
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

// ---------------------------------------------------------------------------------------------
// The memory paths, one by one.

#[tokio::test]
async fn create_read_update_delete_supersede_and_exact_repeat() {
    let admin = Admin::start();

    // A minimal record: id generated, defaults filled in.
    let answer = admin.create(None, &fact("The warehouse closes at 18:00", &["public"])).await;
    let body = answer.expect(201, "create");
    let id = body["id"].as_str().unwrap().to_owned();
    assert!(!id.is_empty());
    assert_eq!(body["revision"], 1);
    assert!(body.get("superseded").is_none() && body.get("exact_repeat").is_none(), "{}", answer.text);
    let record = &body["record"];
    assert_eq!(record["id"], id.as_str());
    assert_eq!(record["tenant"], "default");
    assert_eq!((record["status"].as_str(), record["priority"].as_u64()), (Some("active"), Some(3)));
    assert_eq!(record["schema_version"], "v1");
    assert_eq!(record["valid_until"], "9999-12-31T23:59:59Z");
    assert_eq!(record["metadata"]["last_updated"], record["updated_at"]);
    assert_eq!(admin.get(None, &id).await.expect(200, "get"), record);

    // The contract's example record, every envelope field given.
    let profile = json!({
        "id": "mem-cust-2024-0615-001",
        "type": "customer_profile",
        "schema_version": "v1",
        "scope": ["user:u-789", "team:sales"],
        "valid_from": "2024-06-15T09:00:00Z",
        "valid_until": "9999-12-31T23:59:59Z",
        "priority": 4,
        "key": "customer:u-789:profile",
        "aliases": ["下周发货", "next week delivery"],
        "content": {"name": "Li Wei", "preferred_language": "zh-CN", "special_requests": ["ship on Fridays"]},
        "metadata": {"source": "CRM_v4.2", "updated_by": "sales-bot-03"}
    });
    let answer = admin.create(None, &profile).await;
    let body = answer.expect(201, "create the profile");
    assert_eq!(body["id"], "mem-cust-2024-0615-001");
    let record = &body["record"];
    for field in ["type", "valid_from", "valid_until", "priority", "key", "aliases", "content"] {
        assert_eq!(record[field], profile[field], "{field}");
    }
    assert_eq!(record["scope"], json!(["team:sales", "user:u-789"]));
    assert_eq!(record["metadata"]["source"], "CRM_v4.2");

    // Same id, other content: the id is taken.
    let taken = admin.create(None, &with(profile.clone(), "key", json!("customer:other"))).await;
    taken.assert_error(409, "invalid_request_error", "an id that exists");

    // Same key and scope (in another order), no id: supersedes in place.
    let mut newer = profile.clone();
    newer.as_object_mut().unwrap().remove("id");
    newer["scope"] = json!(["team:sales", "user:u-789"]);
    newer["content"] = json!({"name": "Li Wei", "preferred_language": "en"});
    let answer = admin.create(None, &newer).await;
    let body = answer.expect(200, "supersede by key");
    assert_eq!(body["superseded"], true, "{}", answer.text);
    assert_eq!((body["id"].as_str(), body["revision"].as_i64()), (Some("mem-cust-2024-0615-001"), Some(2)));
    let current = admin.get(None, "mem-cust-2024-0615-001").await;
    assert_eq!(current.expect(200, "get")["content"], newer["content"]);
    let topic = admin.list_all(None, "q=customer:u-789:profile", 50).await;
    assert_eq!(ids_of(&topic), BTreeSet::from(["mem-cust-2024-0615-001".to_owned()]));

    // The same write again: an exact repeat, nothing changes.
    let answer = admin.create(None, &newer).await;
    let body = answer.expect(200, "exact repeat");
    assert_eq!(body["exact_repeat"], true, "{}", answer.text);
    assert_eq!((body["id"].as_str(), body["revision"].as_i64()), (Some("mem-cust-2024-0615-001"), Some(2)));
    let history = admin.history(None, "mem-cust-2024-0615-001").await;
    assert_eq!(history.expect(200, "history")["data"].as_array().unwrap().len(), 2, "{}", history.text);

    // PATCH: revision + 1, untouched fields kept; a stale If-Match is refused and changes nothing.
    let id = "mem-cust-2024-0615-001";
    let answer =
        admin.patch(None, id, Some(2), &json!({"priority": 5, "aliases": ["Friday shipping"]})).await;
    let patched = answer.expect(200, "patch").clone();
    assert_eq!(patched["revision"], 3);
    assert_eq!(patched["priority"], 5);
    assert_eq!(patched["aliases"], json!(["Friday shipping"]));
    assert_eq!(patched["content"], newer["content"]);
    assert_eq!(patched["key"], "customer:u-789:profile");
    assert_eq!(patched["created_at"], current.json["created_at"]);
    assert!(parse_time(&patched["updated_at"]) >= parse_time(&current.json["updated_at"]));
    let stale = admin.patch(None, id, Some(2), &json!({"priority": 1})).await;
    stale.assert_error(409, "invalid_request_error", "stale If-Match");
    assert_eq!(admin.get(None, id).await.expect(200, "get"), &patched);
    let quoted = send(
        admin
            .req(Method::PATCH, &format!("/memories/{id}"), None)
            .header("if-match", "\"3\"")
            .json(&json!({"priority": 2})),
    )
    .await;
    assert_eq!(quoted.expect(200, "quoted If-Match")["revision"], 4);
    let unguarded = admin.patch(None, id, None, &json!({"aliases": null})).await;
    let unguarded = unguarded.expect(200, "patch without If-Match");
    assert_eq!((unguarded["revision"].as_i64(), unguarded["aliases"].clone()), (Some(5), json!([])));

    // A PATCH that would break the record is refused whole.
    let bad = admin.patch(None, id, Some(5), &json!({"content": {"name": ""}, "priority": 1})).await;
    bad.assert_problem("$.content.name", "schema_violation", "patch with bad content");
    let renamed = admin.patch(None, id, None, &json!({"id": "mem-other"})).await;
    renamed.assert_problem("$.id", "invalid_value", "patch the id");
    let after = admin.get(None, id).await;
    assert_eq!((after.json["revision"].as_i64(), after.json["priority"].as_i64()), (Some(5), Some(2)));

    // Status changes: each a revision; paused and archived records leave the active list.
    for (action, status, revision) in [
        ("pause", "paused", 6),
        ("archive", "archived", 7),
        ("archive", "archived", 7),
        ("activate", "active", 8),
    ] {
        let answer = admin.action(None, id, action).await;
        let record = answer.expect(200, action);
        assert_eq!((record["status"].as_str(), record["revision"].as_i64()), (Some(status), Some(revision)));
        let active = ids_of(&admin.list_all(None, "status=active", 50).await);
        assert_eq!(active.contains(id), status == "active", "{action}");
    }

    // DELETE: gone for GET, PATCH, DELETE and lists.
    let deleted = admin.req(Method::DELETE, &format!("/memories/{id}"), None);
    let deleted = send(deleted).await;
    assert_eq!(deleted.expect(200, "delete"), &json!({"id": id, "deleted": true}));
    admin.get(None, id).await.assert_error(404, "not_found_error", "get after delete");
    admin.patch(None, id, None, &json!({"priority": 1})).await.assert_error(404, "not_found_error", "patch");
    let again = send(admin.req(Method::DELETE, &format!("/memories/{id}"), None)).await;
    again.assert_error(404, "not_found_error", "delete twice");
    assert!(!ids_of(&admin.list_all(None, "", 50).await).contains(id));
    admin.get(None, "mem-never-was").await.assert_error(404, "not_found_error", "unknown id");
}

#[tokio::test]
async fn list_filters_search_and_cursor_paging_reach_every_record_once() {
    let admin = Admin::start();
    // (id, scope, type, status, searchable text)
    let mut expected: Vec<(String, &str, &str, &str, String)> = Vec::new();
    for i in 0..17 {
        let scope = if i % 3 == 0 { "team:a" } else { "team:b" };
        let statement = format!("Fact number {i:02}");
        let id = admin.create_ok(None, &fact_with_id(&format!("mem-f{i:02}"), &statement, &[scope])).await;
        expected.push((id, scope, "fact", "active", statement));
    }
    for i in 0..4 {
        let mut record = json!({"id": format!("mem-p{i}"), "type": "preference", "scope": ["team:a"],
            "content": {"topic": "delivery", "preference": format!("Deliver before noon, slot {i}")}});
        if i == 2 {
            record["aliases"] = json!(["Morning-Delivery"]);
        }
        let id = admin.create_ok(None, &record).await;
        expected.push((id, "team:a", "preference", "active", format!("slot {i}")));
    }
    for (n, (statement, key)) in [
        ("Discount is 50% for VIPs", None),
        ("Discount is 500 points", None),
        ("Reference order_42 shipped", None),
        ("Reference orderX42 shipped", None),
        ("Spare parts", Some("sku:AB-1234")),
    ]
    .into_iter()
    .enumerate()
    {
        let mut record = fact_with_id(&format!("mem-x{n}"), statement, &["public"]);
        if let Some(key) = key {
            record["key"] = json!(key);
        }
        let id = admin.create_ok(None, &record).await;
        expected.push((id, "public", "fact", "active", statement.to_owned()));
    }
    for (index, action, status) in
        [(1, "pause", "paused"), (4, "pause", "paused"), (18, "archive", "archived")]
    {
        admin.action(None, &expected[index].0, action).await.expect(200, action);
        expected[index].3 = status;
    }
    // Another tenant's records never show up.
    admin.create_ok(Some("elsewhere"), &fact("Fact number 99", &["team:a"])).await;

    let all_ids: BTreeSet<String> = expected.iter().map(|e| e.0.clone()).collect();
    for limit in [1, 5, 26, 500] {
        assert_eq!(ids_of(&admin.list_all(None, "", limit).await), all_ids, "limit {limit}");
    }
    let first = send(admin.req(Method::GET, "/memories?limit=5", None)).await;
    assert_eq!(first.expect(200, "first page")["data"].as_array().unwrap().len(), 5);
    assert!(first.json["next_cursor"].is_string());

    let select = |keep: &dyn Fn(&(String, &str, &str, &str, String)) -> bool| -> BTreeSet<String> {
        expected.iter().filter(|e| keep(e)).map(|e| e.0.clone()).collect()
    };
    let cases: Vec<(&str, BTreeSet<String>)> = vec![
        ("scope=team:a", select(&|e| e.1 == "team:a")),
        ("type=preference", select(&|e| e.2 == "preference")),
        ("status=paused", select(&|e| e.3 == "paused")),
        ("status=archived", select(&|e| e.3 == "archived")),
        ("scope=team:b&type=fact&status=active", select(&|e| e.1 == "team:b" && e.3 == "active")),
        ("q=MORNING-delivery", select(&|e| e.4 == "slot 2")),
        ("q=fact%20number%201", select(&|e| e.4.starts_with("Fact number 1"))),
        ("q=50%25", select(&|e| e.4.contains("50%"))),
        ("q=order_4", select(&|e| e.4.contains("order_42"))),
        ("q=ab-1234", select(&|e| e.4 == "Spare parts")),
        ("q=nothing-matches-this", BTreeSet::new()),
    ];
    for (query, want) in &cases {
        assert!(query.starts_with("q=nothing") || !want.is_empty(), "{query} selects nothing");
        let got = ids_of(&admin.list_all(None, query, 2).await);
        assert_eq!(&got, want, "list ?{query}");
    }
    // Export takes the same filters.
    assert_eq!(
        export_ids(&admin.export(None, "?scope=team:a&type=fact").await),
        select(&|e| e.1 == "team:a" && e.2 == "fact")
    );
    assert_eq!(export_ids(&admin.export(None, "").await), all_ids);
}

#[tokio::test]
async fn history_holds_every_change_in_order_with_before_after_actor_and_time() {
    let admin = Admin::start();
    let started = OffsetDateTime::now_utc() - Duration::from_millis(5);
    let as_actor = |request: RequestBuilder, actor: &str| request.header("x-memory-actor", actor.to_owned());
    let record = with(fact("Order ORD-1 is packed", &["user:u-9"]), "key", json!("order:ORD-1:status"));

    // Each step: the actor, the action history should name, and the record it left.
    let mut steps: Vec<(&str, &str, Value)> = Vec::new();
    let created = send(as_actor(admin.req(Method::POST, "/memories", None).json(&record), "alice")).await;
    let id = created.expect(201, "create")["id"].as_str().unwrap().to_owned();
    steps.push(("alice", "create", created.json["record"].clone()));
    let path = format!("/memories/{id}");
    for (actor, body) in [
        ("bob", json!({"content": {"statement": "Order ORD-1 has shipped"}})),
        ("carol", json!({"priority": 5})),
    ] {
        let answer = send(as_actor(admin.req(Method::PATCH, &path, None).json(&body), actor)).await;
        steps.push((actor, "update", answer.expect(200, "patch").clone()));
    }
    for (actor, action) in [("dave", "pause"), ("dave", "pause"), ("erin", "activate")] {
        let answer = send(as_actor(admin.req(Method::POST, &format!("{path}/{action}"), None), actor)).await;
        let after = answer.expect(200, action).clone();
        if steps.last().unwrap().2["status"] != after["status"] {
            steps.push((actor, action, after));
        } else {
            assert_eq!(after, steps.last().unwrap().2, "a second pause changes nothing");
        }
    }
    let newer = with(record.clone(), "content", json!({"statement": "Order ORD-1 was delivered"}));
    let answer = send(as_actor(admin.req(Method::POST, "/memories", None).json(&newer), "frank")).await;
    assert_eq!(answer.expect(200, "supersede")["superseded"], true);
    steps.push(("frank", "supersede", answer.json["record"].clone()));
    let answer = send(as_actor(admin.req(Method::POST, &format!("{path}/archive"), None), "gina")).await;
    steps.push(("gina", "archive", answer.expect(200, "archive").clone()));
    let answer = send(as_actor(admin.req(Method::DELETE, &path, None), "hank")).await;
    answer.expect(200, "delete");
    steps.push(("hank", "delete", Value::Null));
    let finished = OffsetDateTime::now_utc() + Duration::from_millis(5);

    let history = admin.history(None, &id).await;
    let data = history.expect(200, "history")["data"].as_array().unwrap().clone();
    assert_eq!(history.json["id"], id.as_str());
    let actions: Vec<&str> = data.iter().map(|c| c["action"].as_str().unwrap()).collect();
    assert_eq!(
        actions,
        ["create", "update", "update", "pause", "activate", "supersede", "archive", "delete"]
    );
    assert_eq!(data.len(), steps.len());
    let mut previous_after = Value::Null;
    let mut previous_at = started;
    for (i, (change, (actor, action, after))) in data.iter().zip(&steps).enumerate() {
        let what = format!("change {i} ({action})");
        assert_eq!(change["actor"], *actor, "{what}");
        assert_eq!(change["action"], *action, "{what}");
        assert_eq!(change["before"], previous_after, "{what}: before is the previous after");
        assert_eq!(&change["after"], after, "{what}: after is what the write answered");
        let at = parse_time(&change["at"]);
        assert!(previous_at <= at && at <= finished, "{what}: time {at} out of order");
        let revision = change["revision"].as_i64().unwrap();
        assert_eq!(revision, (i as i64 + 1).min(7), "{what}");
        if !after.is_null() {
            assert_eq!(change["at"], after["updated_at"], "{what}");
        }
        previous_after = change["after"].clone();
        previous_at = at;
    }
    assert_eq!(data[7]["before"]["status"], "archived");

    // History is the tenant's own, and an unknown id has none.
    admin.history(Some("someone-else"), &id).await.assert_error(404, "not_found_error", "other tenant");
    admin.history(None, "mem-never-was").await.assert_error(404, "not_found_error", "unknown id");
    for action in ["pause", "archive", "activate"] {
        admin.action(None, "mem-never-was", action).await.assert_error(404, "not_found_error", action);
    }
}

#[tokio::test]
async fn forget_erases_a_scope_and_its_history_and_nothing_else() {
    let admin = Admin::start();
    let erased = admin.create_ok(None, &fact_with_id("mem-tea", "Likes green tea", &["user:u-789"])).await;
    let shared = json!({"type": "customer_profile", "scope": ["user:u-789", "team:sales"],
        "key": "customer:u-789:profile", "content": {"name": "Li Wei"}});
    let shared = admin.create_ok(None, &shared).await;
    let moved =
        admin.create_ok(None, &fact_with_id("mem-moved", "Escalations go to tier 2", &["user:u-789"])).await;
    admin.patch(None, &moved, None, &json!({"scope": ["team:support"]})).await.expect(200, "move");
    let deleted =
        admin.create_ok(None, &fact_with_id("mem-deleted", "Old address on file", &["user:u-789"])).await;
    send(admin.req(Method::DELETE, &format!("/memories/{deleted}"), None)).await.expect(200, "delete");
    let sales = admin.create_ok(None, &fact("Sales quota is 40 calls", &["team:sales"])).await;
    admin.patch(None, &sales, None, &json!({"priority": 4})).await.expect(200, "patch");
    let other_user = admin.create_ok(None, &fact("Prefers email", &["user:u-100"])).await;
    let public = admin.create_ok(None, &fact("We ship worldwide", &["public"])).await;
    let other_tenant = admin.create_ok(Some("acme"), &fact("Likes green tea", &["user:u-789"])).await;
    let sales_history = admin.history(None, &sales).await.json;
    assert!(admin.export(None, "").await.contains("user:u-789"));

    let answer =
        send(admin.req(Method::POST, "/memories/forget", None).json(&json!({"scope": "user:u-789"}))).await;
    let body = answer.expect(200, "forget");
    assert_eq!(body["scope"], "user:u-789");
    assert_eq!(body["records_erased"], 2, "{}", answer.text);
    // erased: 1 + shared: 1 + moved: create and update + deleted: create and delete.
    assert_eq!(body["changes_erased"], 6, "{}", answer.text);

    for id in [&erased, &shared, &deleted] {
        admin.get(None, id).await.assert_error(404, "not_found_error", "get after forget");
        admin.history(None, id).await.assert_error(404, "not_found_error", "history after forget");
    }
    let moved_history = admin.history(None, &moved).await;
    moved_history.expect(200, "history of the moved record");
    assert!(!moved_history.text.contains("u-789"), "history kept a trace: {}", moved_history.text);
    assert_eq!(admin.get(None, &moved).await.json["scope"], json!(["team:support"]));

    let remaining = admin.list_all(None, "", 50).await;
    let want: BTreeSet<String> = [&moved, &sales, &other_user, &public].into_iter().cloned().collect();
    assert_eq!(ids_of(&remaining), want);
    assert!(admin.list_all(None, "scope=user:u-789", 50).await.is_empty());
    assert!(admin.list_all(None, "q=green%20tea", 50).await.is_empty());
    let export = admin.export(None, "").await;
    assert_eq!(export_ids(&export), want);
    assert!(!export.contains("u-789") && !export.contains("Li Wei"), "export kept a trace: {export}");
    assert_eq!(admin.history(None, &sales).await.json, sales_history, "other scopes' history stays");
    let kept = admin.get(Some("acme"), &other_tenant).await;
    assert_eq!(kept.expect(200, "other tenant")["content"]["statement"], "Likes green tea");
    assert_eq!(admin.history(Some("acme"), &other_tenant).await.json["data"].as_array().unwrap().len(), 1);

    // Writing the same thing again starts afresh.
    let again = admin.create(None, &fact("Likes green tea", &["user:u-789"])).await;
    assert_eq!(again.expect(201, "create after forget")["revision"], 1);

    let bad =
        send(admin.req(Method::POST, "/memories/forget", None).json(&json!({"scope": "not a scope"}))).await;
    bad.assert_problem("$.scope", "invalid_value", "forget a malformed scope");
    let missing = send(admin.req(Method::POST, "/memories/forget", None).json(&json!({}))).await;
    missing.assert_error(400, "invalid_request_error", "forget without a scope");
}

#[tokio::test]
async fn a_near_repeat_updates_its_twin_and_says_so() {
    let admin = Admin::start();
    let text = "Deliveries to this customer must arrive before noon.";
    let first = admin.create(None, &fact(text, &["user:u-42"])).await;
    let id = first.expect(201, "first")["id"].as_str().unwrap().to_owned();
    let near = "Deliveries to this customer must arrive before noon";
    let answer = admin.create(None, &fact(near, &["user:u-42"])).await;
    let body = answer.expect(200, "a near repeat");
    assert_eq!(body["deduplicated"], true, "{}", answer.text);
    assert_eq!((body["id"].as_str(), body["revision"].as_i64()), (Some(id.as_str()), Some(2)));
    let similarity = body["similarity"].as_f64().unwrap();
    assert!((0.9..=1.0001).contains(&similarity), "similarity {similarity}");
    assert_eq!(body["record"]["content"]["statement"], near);
    assert_eq!(ids_of(&admin.list_all(None, "scope=user:u-42", 50).await), BTreeSet::from([id.clone()]));
    let history = admin.history(None, &id).await;
    assert_eq!(history.expect(200, "history")["data"].as_array().unwrap().len(), 2, "{}", history.text);

    // Another scope, another tenant, a topic key or an id of its own: never merged.
    admin.create(None, &fact(text, &["user:u-43"])).await.expect(201, "another scope");
    admin.create(Some("other"), &fact(text, &["user:u-42"])).await.expect(201, "another tenant");
    let keyed = with(fact(text, &["user:u-42"]), "key", json!("delivery:u-42"));
    admin.create(None, &keyed).await.expect(201, "a record with a key");
    admin
        .create(None, &fact_with_id("mem-own", &format!("{near}!"), &["user:u-42"]))
        .await
        .expect(201, "an id");

    // A deleted record is no twin.
    let gone = admin.create_ok(None, &fact(text, &["user:u-44"])).await;
    send(admin.req(Method::DELETE, &format!("/memories/{gone}"), None)).await.expect(200, "delete");
    let again = admin.create(None, &fact(text, &["user:u-44"])).await;
    assert_ne!(again.expect(201, "after the twin was deleted")["id"], gone.as_str());
}

#[tokio::test]
async fn different_facts_in_one_scope_are_not_merged_as_near_repeats() {
    // A support bot's memory is full of facts that differ in one number or one word. Merging
    // them would overwrite the first with the second: memory silently lost.
    let admin = Admin::start();
    let pairs = [
        ("Order ORD-1001 shipped on Monday", "Order ORD-1002 shipped on Monday"),
        ("Refund limit is 50 EUR", "Refund limit is 500 EUR"),
        ("The customer is allergic to peanuts", "The customer is not allergic to peanuts"),
        ("The warehouse closes at 18:00", "The warehouse closes at 20:00"),
        ("Imported one", "Written after the import"),
    ];
    let mut merged = Vec::new();
    for (i, (a, b)) in pairs.iter().enumerate() {
        let scope = format!("user:pair-{i}");
        admin.create(None, &fact(a, &[&scope])).await.expect(201, a);
        let answer = admin.create(None, &fact(b, &[&scope])).await;
        if answer.status != 201 {
            merged.push(format!("{a:?} + {b:?} -> {} {}", answer.status, answer.json["similarity"]));
        }
        let kept: BTreeSet<String> = admin
            .list_all(None, &format!("scope={scope}"), 50)
            .await
            .iter()
            .map(|r| r["content"]["statement"].as_str().unwrap().to_owned())
            .collect();
        if kept.len() != 2 {
            merged.push(format!("{scope} keeps only {kept:?}"));
        }
    }
    assert!(merged.is_empty(), "distinct facts merged as near repeats:\n{}", merged.join("\n"));
}

// ---------------------------------------------------------------------------------------------
// Export and import.

/// Records of every kind of envelope, in tenant `acme`; returns their ids.
async fn seed_varied_records(admin: &Admin) -> Vec<String> {
    let t = Some("acme");
    let mut ids = Vec::new();
    let profile = json!({"id": "mem-cust-1", "type": "customer_profile", "scope": ["user:u-789", "team:sales"],
        "valid_from": "2024-06-15T09:00:00Z", "priority": 4, "key": "customer:u-789:profile",
        "aliases": ["下周发货", "next week delivery"],
        "content": {"name": "李伟", "preferred_language": "zh-CN", "special_requests": ["call after 18:00 <b>&</b>"]},
        "metadata": {"source": "CRM_v4.2", "nested": {"n": [1, 2.5, null, true]}}});
    ids.push(admin.create_ok(t, &profile).await);
    let paused =
        admin.create_ok(t, &fact_with_id("mem-returns", "Returns need a receipt", &["public"])).await;
    admin.action(t, &paused, "pause").await.expect(200, "pause");
    ids.push(paused);
    let old = json!({"id": "mem-old", "type": "fact", "scope": ["team:support"], "valid_from": "2020-01-01T00:00:00Z",
        "valid_until": "2021-01-01T00:00:00+02:00", "content": {"statement": "2020 holiday hours", "confidence": 0.85}});
    let old = admin.create_ok(t, &old).await;
    admin.action(t, &old, "archive").await.expect(200, "archive");
    ids.push(old);
    let preference = json!({"type": "preference", "scope": ["user:u-1"], "priority": 1,
        "content": {"topic": "tone", "preference": "formal", "strength": "must"}});
    ids.push(admin.create_ok(t, &preference).await);
    let task = json!({"id": "mem-task-7", "type": "task", "schema_version": "v2", "scope": ["agent:bot-3"],
        "content": {"title": "Call back", "status": "open", "checklist": [{"item": "check order", "done": false}]}});
    ids.push(admin.create_ok(t, &task).await);
    let edited = admin.create_ok(t, &fact_with_id("mem-hours", "Store opens at 9", &["public"])).await;
    admin
        .patch(t, &edited, Some(1), &json!({"content": {"statement": "Store opens at 10"}}))
        .await
        .expect(200, "p");
    admin.patch(t, &edited, Some(2), &json!({"aliases": ["opening hours"]})).await.expect(200, "p");
    ids.push(edited);
    // Another tenant's records stay out of acme's export.
    admin.create_ok(None, &fact("Default tenant note", &["public"])).await;
    ids
}

#[tokio::test]
async fn export_then_import_into_an_empty_store_reproduces_the_same_records() {
    let source = Admin::start();
    let ids = seed_varied_records(&source).await;
    let exported = source.export(Some("acme"), "").await;
    assert_eq!(exported.lines().count(), ids.len(), "{exported}");
    assert!(exported.ends_with('\n'));
    assert_eq!(export_ids(&exported), ids.iter().cloned().collect());
    assert!(!exported.contains("Default tenant note"));

    let target = Admin::start();
    let preview = target.import(Some("acme"), &exported, true).await;
    let report = preview.expect(200, "dry run");
    assert_eq!(report["counts"], json!({"new": ids.len(), "existing": 0, "invalid": 0}), "{}", preview.text);
    assert_eq!((report["dry_run"].as_bool(), report["applied"].as_bool()), (Some(true), Some(false)));
    assert!(report["import_id"].is_null());
    assert_eq!(target.export(Some("acme"), "").await, "", "a dry run writes nothing");

    let applied = target.import(Some("acme"), &exported, false).await;
    let report = applied.expect(201, "apply");
    assert!(report["import_id"].as_str().is_some_and(|id| !id.is_empty()), "{}", applied.text);
    assert_eq!(report["applied"], true);
    assert_eq!(target.export(Some("acme"), "").await, exported, "the two stores' exports differ");
    assert_eq!(target.export(None, "").await, "", "imported into the wrong tenant");
    for id in &ids {
        let a = source.get(Some("acme"), id).await.json;
        let b = target.get(Some("acme"), id).await;
        let b = b.expect(200, "get the imported record");
        assert_eq!(b["revision"], 1);
        for field in [
            "type",
            "schema_version",
            "scope",
            "valid_from",
            "valid_until",
            "priority",
            "aliases",
            "content",
            "status",
        ] {
            assert_eq!(a[field], b[field], "{id}.{field}");
        }
    }
    // An import and export over several pages of 500.
    let many: String =
        (0..1001).map(|i| format!("{}\n", fact(&format!("Bulk fact {i:04}"), &["team:bulk"]))).collect();
    let bulk = target.import(Some("bulk"), &many, false).await;
    assert_eq!(bulk.expect(201, "bulk import")["counts"]["new"], 1001);
    let bulk_export = target.export(Some("bulk"), "").await;
    assert_eq!(export_ids(&bulk_export).len(), 1001);
    assert_eq!(bulk_export.lines().count(), 1001);
    assert_eq!(target.list_all(Some("bulk"), "", 500).await.len(), 1001);
    let import_id = bulk.json["import_id"].as_str().unwrap();
    let undone = send(target.req(Method::POST, &format!("/imports/{import_id}/undo"), Some("bulk"))).await;
    assert_eq!(undone.expect(200, "undo the bulk import")["removed"], 1001);
    assert_eq!(target.export(Some("bulk"), "").await, "");

    let again = target.import(Some("acme"), &exported, true).await;
    let counts = &again.expect(200, "dry run again")["counts"];
    assert_eq!(counts, &json!({"new": 0, "existing": ids.len(), "invalid": 0}));
}

#[tokio::test]
async fn a_patch_cannot_leave_two_live_records_on_one_topic() {
    // "One live record per topic": if a PATCH could give a second record the key and scope of a
    // first, the store would hold what no create can make, and its own export would not import.
    let source = Admin::start();
    let first = with(fact("Plan: gold", &["user:u-5"]), "key", json!("plan:u-5"));
    source.create_ok(None, &first).await;
    let second = source.create_ok(None, &fact("Plan: silver", &["user:u-5"])).await;
    let patched = source.patch(None, &second, None, &json!({"key": "plan:u-5"})).await;
    if patched.status == 200 {
        let live = source.list_all(None, "q=plan:u-5", 50).await;
        assert_eq!(live.len(), 1, "two live records share key plan:u-5 and scope user:u-5: {live:?}");
    } else {
        assert!(matches!(patched.status, 409 | 422), "{}", patched.text);
    }
    let exported = source.export(None, "").await;
    let target = Admin::start();
    let applied = target.import(None, &exported, false).await;
    assert_eq!(applied.status, 201, "an export does not import into an empty store: {}", applied.text);
    assert_eq!(target.export(None, "").await, exported);
}

#[tokio::test]
async fn import_previews_applies_and_undoes_exactly_what_it_added() {
    let admin = Admin::start();
    let t = Some("acme");
    let kept = admin.create_ok(t, &with(fact("Kept record", &["public"]), "id", json!("mem-kept"))).await;
    let topic = with(fact("Plan: gold", &["user:u-5"]), "key", json!("plan:u-5"));
    let keyed = admin.create_ok(t, &topic).await;
    let before = admin.export(t, "").await;

    let new_1 = with(fact("Imported one", &["public"]), "id", json!("mem-imp-1")).to_string();
    let new_2 = fact("Imported two, id generated", &["team:x"]).to_string();
    let same_id = with(fact("Different text, same id", &["public"]), "id", json!("mem-kept")).to_string();
    let same_topic = with(topic.clone(), "content", json!({"statement": "Plan: bronze"})).to_string();
    let same_content = fact("Kept record", &["public"]).to_string();
    let valid = [new_1.as_str(), &new_2, &same_id, &same_topic, &same_content].join("\n");
    let secret = "ghp_aB3dE5fG7hJ9kL1mN2pQ4rS6tU8vW0xY2zA4";
    let invalid_lines = [
        "{\"type\": \"fact\", ".to_owned(),
        json!({"type": "fact", "scope": ["public"], "content": {}}).to_string(),
        fact(&format!("token {secret}"), &["public"]).to_string(),
        new_1.clone(),
    ];
    let body = format!("{valid}\n\n{}\n", invalid_lines.join("\n"));

    let preview = admin.import(t, &body, true).await;
    let report = preview.expect(200, "dry run").clone();
    assert!(!preview.text.contains(secret), "the secret came back: {}", preview.text);
    assert_eq!(report["counts"], json!({"new": 2, "existing": 3, "invalid": 4}), "{}", preview.text);
    let lines = report["lines"].as_array().unwrap();
    let by_line: BTreeMap<u64, &Value> = lines.iter().map(|l| (l["line"].as_u64().unwrap(), l)).collect();
    assert_eq!(
        by_line.keys().copied().collect::<Vec<_>>(),
        [1, 2, 3, 4, 5, 7, 8, 9, 10],
        "blank line 6 skipped"
    );
    assert_eq!(
        (by_line[&1]["status"].as_str(), by_line[&1]["id"].as_str()),
        (Some("new"), Some("mem-imp-1"))
    );
    assert_eq!(by_line[&2]["status"], "new");
    for (line, id) in [(3, &kept), (4, &keyed), (5, &kept)] {
        assert_eq!(
            (by_line[&line]["status"].as_str(), by_line[&line]["id"].as_str()),
            (Some("existing"), Some(id.as_str())),
            "line {line}"
        );
    }
    for (line, path, kind) in [
        (7, "$", "invalid_json"),
        (8, "$.content.statement", "schema_violation"),
        (9, "$.content.statement", "secret"),
        (10, "$.id", "duplicate"),
    ] {
        assert_eq!(by_line[&line]["status"], "invalid", "line {line}");
        let problems = problems_of(&by_line[&line]["problems"]);
        assert!(
            problems.iter().any(|(p, k, m)| p == path && k == kind && !m.is_empty()),
            "line {line}: {problems:?}"
        );
    }
    assert_eq!(admin.export(t, "").await, before, "a dry run writes nothing");

    // An apply with invalid lines adds nothing and says why.
    let refused = admin.import(t, &body, false).await;
    refused.assert_error(422, "invalid_request_error", "apply with invalid lines");
    assert_eq!(refused.json["error"]["report"]["counts"]["invalid"], 4);
    assert!(!refused.text.contains(secret));
    assert_eq!(admin.export(t, "").await, before);

    let applied = admin.import(t, &valid, false).await;
    let report = applied.expect(201, "apply");
    assert_eq!(report["counts"], json!({"new": 2, "existing": 3, "invalid": 0}));
    let import_id = report["import_id"].as_str().unwrap().to_owned();
    let mut added: Vec<String> = report["lines"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["status"] == "new")
        .map(|l| l["id"].as_str().unwrap().to_owned())
        .collect();
    added.sort();
    assert_eq!(added.len(), 2, "{}", applied.text);
    assert!(added.contains(&"mem-imp-1".to_owned()));
    assert_eq!(admin.get(t, "mem-kept").await.json["revision"], 1, "an existing record was touched");
    assert_eq!(admin.get(t, &keyed).await.json["content"]["statement"], "Plan: gold");
    let imported = admin.history(t, "mem-imp-1").await;
    assert_eq!(imported.expect(200, "history")["data"][0]["action"], "import");

    // Later writes are not the import's.
    let later = admin.create_ok(t, &fact_with_id("mem-later", "Written after the import", &["public"])).await;
    admin.patch(t, "mem-kept", None, &json!({"priority": 2})).await.expect(200, "patch");

    // Undo is tenant-bounded, removes exactly the added records, and only once.
    let path = format!("/imports/{import_id}/undo");
    send(admin.req(Method::POST, &path, Some("other"))).await.assert_error(
        404,
        "not_found_error",
        "undo elsewhere",
    );
    assert_eq!(admin.get(t, "mem-imp-1").await.status, 200);
    let undone = send(admin.req(Method::POST, &path, t)).await;
    let body = undone.expect(200, "undo");
    assert_eq!(body["import_id"], import_id.as_str());
    assert_eq!(body["removed"], 2);
    let mut removed: Vec<String> =
        body["ids"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_owned()).collect();
    removed.sort();
    assert_eq!(removed, added);
    for id in &added {
        admin.get(t, id).await.assert_error(404, "not_found_error", "an undone record");
    }
    let left = ids_of(&admin.list_all(t, "", 50).await);
    assert_eq!(left, BTreeSet::from([kept.clone(), keyed.clone(), later.clone()]));
    assert_eq!(admin.get(t, "mem-kept").await.json["priority"], 2);
    let actions: Vec<Value> = admin.history(t, "mem-imp-1").await.json["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["action"].clone())
        .collect();
    assert_eq!(actions, [json!("import"), json!("undo_import")]);
    let twice = send(admin.req(Method::POST, &path, t)).await;
    assert_eq!(twice.expect(200, "undo twice")["removed"], 0);
    assert_eq!(ids_of(&admin.list_all(t, "", 50).await), left);
    send(admin.req(Method::POST, "/imports/imp-never-was/undo", t)).await.assert_error(
        404,
        "not_found_error",
        "unknown import",
    );
}

// ---------------------------------------------------------------------------------------------
// Refusals.

#[tokio::test]
async fn refusals_name_every_problem_by_json_path_and_kind() {
    let admin = Admin::start();
    let base = fact("A plain statement", &["public"]);
    let cases: Vec<(&str, Value, Vec<(&str, &str)>)> = vec![
        (
            "missing required field",
            with(base.clone(), "content", json!({})),
            vec![("$.content.statement", "schema_violation")],
        ),
        (
            "wrong type in content",
            with(base.clone(), "content", json!({"statement": 5})),
            vec![("$.content.statement", "schema_violation")],
        ),
        (
            "field the schema lacks",
            with(base.clone(), "content", json!({"statement": "x", "colour": "red"})),
            vec![("$.content.colour", "schema_violation")],
        ),
        (
            "nested violation",
            json!({"type": "customer_profile", "scope": ["public"], "content": {"name": "A", "special_requests": ["ok", ""]}}),
            vec![("$.content.special_requests[1]", "schema_violation")],
        ),
        ("unknown type", with(base.clone(), "type", json!("horoscope")), vec![("$.type", "unknown_type")]),
        (
            "unknown schema version",
            with(base.clone(), "schema_version", json!("v9")),
            vec![("$.schema_version", "unknown_schema_version")],
        ),
        (
            "valid_until before valid_from",
            with(
                with(base.clone(), "valid_from", json!("2024-06-15T09:00:00Z")),
                "valid_until",
                json!("2024-06-14T09:00:00Z"),
            ),
            vec![("$.valid_until", "invalid_time_range")],
        ),
        (
            "valid_until equal to valid_from",
            with(
                with(base.clone(), "valid_from", json!("2024-06-15T09:00:00Z")),
                "valid_until",
                json!("2024-06-15T11:00:00+02:00"),
            ),
            vec![("$.valid_until", "invalid_time_range")],
        ),
        (
            "valid_until in the past, valid_from defaulted",
            with(base.clone(), "valid_until", json!("2001-01-01T00:00:00Z")),
            vec![("$.valid_until", "invalid_time_range")],
        ),
        (
            "month 13",
            with(base.clone(), "valid_from", json!("2024-13-01T00:00:00Z")),
            vec![("$.valid_from", "invalid_date")],
        ),
        (
            "a date without a time",
            with(base.clone(), "valid_until", json!("2030-01-01")),
            vec![("$.valid_until", "invalid_date")],
        ),
        (
            "not a date",
            with(base.clone(), "valid_from", json!("yesterday")),
            vec![("$.valid_from", "invalid_date")],
        ),
        (
            "date of the wrong type",
            with(base.clone(), "valid_from", json!(1718442000)),
            vec![("$.valid_from", "invalid_type")],
        ),
        (
            "unknown envelope field",
            with(base.clone(), "colour", json!("red")),
            vec![("$.colour", "unknown_field")],
        ),
        (
            "oversized content",
            with(base.clone(), "content", json!({"statement": "x".repeat(70 * 1024)})),
            vec![("$.content", "too_large")],
        ),
        (
            "no scope",
            json!({"type": "fact", "content": {"statement": "x"}}),
            vec![("$.scope", "missing_field")],
        ),
        (
            "bad scope entry",
            with(base.clone(), "scope", json!(["public", "User U1"])),
            vec![("$.scope[1]", "invalid_value")],
        ),
        (
            "priority out of range",
            with(base.clone(), "priority", json!(9)),
            vec![("$.priority", "invalid_value")],
        ),
        (
            "no type",
            json!({"scope": ["public"], "content": {"statement": "x"}}),
            vec![("$.type", "missing_field")],
        ),
        (
            "content not an object",
            with(base.clone(), "content", json!("x")),
            vec![("$.content", "invalid_type")],
        ),
        (
            "several at once",
            json!({
            "type": "fact", "scope": ["public", 7], "colour": "red", "valid_from": "not a date",
            "priority": 0, "aliases": [""], "content": {"confidence": 2, "extra": true},
            "metadata": {"db_password": "Vx7!qPz#4Lm"}}),
            vec![
                ("$.colour", "unknown_field"),
                ("$.scope[1]", "invalid_value"),
                ("$.valid_from", "invalid_date"),
                ("$.priority", "invalid_value"),
                ("$.aliases[0]", "invalid_value"),
                ("$.content.statement", "schema_violation"),
                ("$.content.confidence", "schema_violation"),
                ("$.content.extra", "schema_violation"),
                ("$.metadata.db_password", "secret"),
            ],
        ),
    ];
    for (what, record, expected) in &cases {
        let answer = admin.create(None, record).await;
        for (path, kind) in expected {
            answer.assert_problem(path, kind, what);
        }
        assert_eq!(
            answer.problems().len(),
            expected.len(),
            "{what}: unexpected extra problems in {}",
            answer.text
        );
        for (_, _, message) in answer.problems() {
            assert!(!message.is_empty(), "{what}: a problem without a message");
        }
    }
    assert!(admin.list_all(None, "", 50).await.is_empty(), "a refused write was stored");

    // The same checks guard PATCH and import.
    let id = admin.create_ok(None, &base).await;
    let patch = admin
        .patch(None, &id, Some(1), &json!({"valid_until": "2000-01-01T00:00:00Z", "type": "horoscope"}))
        .await;
    patch.assert_problem("$.valid_until", "invalid_time_range", "patch");
    patch.assert_problem("$.type", "unknown_type", "patch");
    assert_eq!(admin.get(None, &id).await.json["revision"], 1);
}

/// Made-up credentials with the shape of real ones, and the part of each that must never be
/// repeated back.
fn secrets() -> Vec<(&'static str, String, &'static str)> {
    vec![
        ("aws_access_key", "AKIAZ7Q3R5T8W2X4Y6V9".to_owned(), "AKIAZ7Q3R5T8W2X4Y6V9"),
        ("anthropic_key", "sk-ant-api03-Hq4Zt8Wm2Kx6Pv9Rb3Nc7Lf1Jd5Gs0Ty-QeUiOp7AAA".to_owned(), "Hq4Zt8Wm2Kx6Pv9Rb3Nc7"),
        ("openai_key", "sk-proj-T4kW9mQ2xZ7vB3nR8pL5cF1hJ6dG0sYa".to_owned(), "T4kW9mQ2xZ7vB3nR8pL5c"),
        ("github_token", "ghp_aB3dE5fG7hJ9kL1mN2pQ4rS6tU8vW0xY2zA4".to_owned(), "aB3dE5fG7hJ9kL1mN2pQ4"),
        ("slack_token", "xoxb-2048197534-5839201746132-Lm4Qx8Tz2Wv6Rb9Np3Ks7Hd".to_owned(), "5839201746132-Lm4Qx8"),
        ("jwt", "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJ1LTc4OSIsInJvbGUiOiJhZ2VudCJ9.Q2xvdWRTaWduYXR1cmVfMTIzNDU2Nzg5YWJj".to_owned(), "Q2xvdWRTaWduYXR1cmVfMTIzNDU2"),
        ("private_key", "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIBkg4LVWM9nuwNSk3yByxZpYRTBnVJk5oo6aAnXi9GuNoAoGCCqGSM49\nAwEHoUQDQgAEuFZ4TLHbN1f0d3Xq8F9pZJ1kZx2yN7Gd0pR2L6vKp9n3\n-----END EC PRIVATE KEY-----".to_owned(), "MHcCAQEEIBkg4LVWM9nuwNSk3yByxZ"),
        ("password", "Vx7!qPz#4Lm".to_owned(), "Vx7!qPz#4Lm"),
        ("connection_string_credential", "postgres://billing:Hn5Wq2Zr8Tk@db.internal:5432/billing".to_owned(), "Hn5Wq2Zr8Tk"),
    ]
}

#[tokio::test]
async fn secrets_are_refused_by_kind_and_path_and_never_echoed_or_logged() {
    let admin = Admin::start_with(&[], &[("MEMGATE_LOG_LEVEL", "debug")]);
    let existing = admin.create_ok(None, &fact("A record to patch", &["public"])).await;
    let secrets = secrets();
    let s = |kind: &str| secrets.iter().find(|(k, _, _)| *k == kind).unwrap().1.clone();
    // Where each secret hides, and the path the answer must name.
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "aws_access_key",
            fact(&format!("Customer pasted {} in chat", s("aws_access_key")), &["public"]),
            "$.content.statement",
        ),
        (
            "anthropic_key",
            json!({"type": "customer_profile", "scope": ["user:u-1"], "content": {"name": "A",
            "special_requests": ["call after 6pm", format!("use key {}", s("anthropic_key"))]}}),
            "$.content.special_requests[1]",
        ),
        (
            "openai_key",
            with(fact("Eval setup", &["public"]), "aliases", json!([format!("openai {}", s("openai_key"))])),
            "$.aliases[0]",
        ),
        (
            "github_token",
            with(
                fact("CI notes", &["public"]),
                "metadata",
                json!({"note": format!("token {}", s("github_token"))}),
            ),
            "$.metadata.note",
        ),
        (
            "slack_token",
            with(fact("Alerts channel", &["public"]), "key", json!(format!("slack:{}", s("slack_token")))),
            "$.key",
        ),
        (
            "jwt",
            json!({"type": "internal_sop", "scope": ["team:ops"], "content": {"title": "Call the API",
            "steps": format!("1. Send Authorization: Bearer {}\n2. Done", s("jwt"))}}),
            "$.content.steps",
        ),
        (
            "private_key",
            fact(&format!("Deploy key:\n{}", s("private_key")), &["team:ops"]),
            "$.content.statement",
        ),
        (
            "password",
            with(fact("Billing database", &["team:ops"]), "metadata", json!({"db_password": s("password")})),
            "$.metadata.db_password",
        ),
        (
            "connection_string_credential",
            json!({"type": "task", "scope": ["team:ops"], "content": {"title": "Migrate",
            "status": "open", "description": format!("connect with {}", s("connection_string_credential"))}}),
            "$.content.description",
        ),
    ];
    let mut answers: Vec<Answer> = Vec::new();
    for (kind, record, path) in &cases {
        let answer = admin.create(None, record).await;
        answer.assert_problem(path, "secret", &format!("create with {kind}"));
        let problem = answer.problems().into_iter().find(|(p, k, _)| p == path && k == "secret").unwrap();
        assert!(problem.2.contains(kind), "the problem does not name the kind {kind}: {}", answer.text);
        answers.push(answer);

        // The same record through PATCH and import.
        let mut patch = record.clone();
        patch.as_object_mut().unwrap().remove("type");
        let patched = admin.patch(None, &existing, Some(1), &patch).await;
        patched.assert_problem(path, "secret", &format!("patch with {kind}"));
        answers.push(patched);
        let line = record.to_string();
        let preview = admin.import(None, &line, true).await;
        let problems = problems_of(&preview.expect(200, "dry run")["lines"][0]["problems"]);
        assert!(
            problems.iter().any(|(p, k, m)| p == path && k == "secret" && m.contains(kind)),
            "import {kind}: {problems:?}"
        );
        answers.push(preview);
        let refused = admin.import(None, &line, false).await;
        refused.assert_error(422, "invalid_request_error", &format!("import {kind}"));
        answers.push(refused);
    }

    // Secrets where the value also breaks the schema: both named, neither message quoting it.
    let mixed = json!({"type": "customer_profile", "scope": ["user:u-1"], "content": {"name": "A",
        "preferred_language": s("openai_key"), "customer_since": s("anthropic_key"), "preferred_channel": s("github_token"),
        "notes": format!("db at {} with {}", s("connection_string_credential"), s("aws_access_key"))},
        "aliases": [s("jwt")], "metadata": {"api_key": s("password")}});
    let answer = admin.create(None, &mixed).await;
    for (path, kind) in [
        ("$.content.preferred_language", "schema_violation"),
        ("$.content.preferred_language", "secret"),
        ("$.content.customer_since", "schema_violation"),
        ("$.content.customer_since", "secret"),
        ("$.content.preferred_channel", "schema_violation"),
        ("$.content.preferred_channel", "secret"),
        ("$.content.notes", "secret"),
        ("$.aliases[0]", "secret"),
        ("$.metadata.api_key", "secret"),
    ] {
        answer.assert_problem(path, kind, "several secrets in one record");
    }
    let notes: Vec<String> = answer
        .problems()
        .into_iter()
        .filter(|(p, k, _)| p == "$.content.notes" && k == "secret")
        .map(|(_, _, m)| m)
        .collect();
    for kind in ["connection_string_credential", "aws_access_key"] {
        assert!(notes.iter().any(|m| m.contains(kind)), "notes: {kind} not named in {notes:?}");
    }
    answers.push(answer);

    assert_eq!(admin.get(None, &existing).await.json["revision"], 1, "a refused patch was applied");
    assert_eq!(admin.export(None, "").await.lines().count(), 1, "a refused write was stored");
    assert_no_secret_in(&admin, &answers, &secrets).await;
}

/// No answer body nor the gateway's log holds any of `secrets` (once the log has every answer's
/// line, so the check covers them).
async fn assert_no_secret_in(admin: &Admin, answers: &[Answer], secrets: &[(&str, String, &str)]) {
    let ids: Vec<String> = answers.iter().map(Answer::request_id).collect();
    let log = eventually(Duration::from_secs(10), "the log lines of every request", || {
        let log = admin.gw.stderr();
        let complete = ids.iter().all(|id| log.contains(id.as_str()));
        std::future::ready(complete.then_some(log))
    })
    .await;
    let mut leaks = Vec::new();
    for (kind, _, needle) in secrets {
        for answer in answers.iter().filter(|a| a.text.contains(needle)) {
            leaks.push(format!("the {kind} came back in an answer: {}", answer.text));
        }
        if log.contains(needle) {
            leaks.push(format!("the {kind} is in the gateway's log"));
        }
    }
    assert!(leaks.is_empty(), "{} leak(s):\n{}", leaks.len(), leaks.join("\n"));
}

#[tokio::test]
async fn a_secret_used_as_a_field_name_is_not_echoed() {
    // A map keyed by credential (`{"AKIA…": "prod"}`) puts the secret in the path itself.
    let admin = Admin::start();
    let secrets = secrets();
    let aws = &secrets[0].1;
    let github = &secrets[3].1;
    let anthropic = &secrets[1].1;
    let records = [
        with(fact("Keys in use", &["public"]), "metadata", json!({"keys": {aws.clone(): "prod"}})),
        with(fact("Keys in use", &["public"]), "content", json!({"statement": "x", github.clone(): "ci"})),
        with(fact("Keys in use", &["public"]), anthropic, json!(true)),
        with(fact("Keys in use", &["public"]), "aliases", json!([{aws.clone(): 1}])),
    ];
    let mut answers = Vec::new();
    for record in &records {
        let answer = admin.create(None, record).await;
        answer.assert_error(422, "invalid_request_error", "a secret as a field name");
        answers.push(answer);
    }
    let refused = admin.import(None, &records[0].to_string(), true).await;
    answers.push(refused);
    assert_no_secret_in(&admin, &answers, &secrets).await;
}

// ---------------------------------------------------------------------------------------------
// Concurrency.

#[tokio::test]
async fn concurrent_patches_with_the_same_if_match_let_exactly_one_through() {
    let admin = Admin::start();
    let id = admin.create_ok(None, &fact("round 0", &["public"])).await;
    for round in 1..=8 {
        let revision = admin.get(None, &id).await.json["revision"].as_i64().unwrap();
        let texts = [format!("round {round} by A"), format!("round {round} by B")];
        let body_a = json!({"content": {"statement": texts[0]}});
        let body_b = json!({"content": {"statement": texts[1]}});
        let (a, b) = tokio::join!(
            admin.patch(None, &id, Some(revision), &body_a),
            admin.patch(None, &id, Some(revision), &body_b),
        );
        let mut statuses = [a.status, b.status];
        statuses.sort_unstable();
        assert_eq!(statuses, [200, 409], "round {round}: {} / {}", a.text, b.text);
        let (winner, loser) = if a.status == 200 { (&a, &b) } else { (&b, &a) };
        loser.assert_error(409, "invalid_request_error", "the losing PATCH");
        let won = winner.json["content"]["statement"].as_str().unwrap().to_owned();
        assert!(texts.contains(&won));
        let current = admin.get(None, &id).await;
        assert_eq!(current.json["content"]["statement"], won.as_str(), "round {round}");
        assert_eq!(current.json["revision"], revision + 1, "round {round}");
        assert_eq!(&current.json, &winner.json);
        let history = admin.history(None, &id).await.json;
        let updates: Vec<&Value> =
            history["data"].as_array().unwrap().iter().filter(|c| c["action"] == "update").collect();
        assert_eq!(updates.len(), round as usize, "round {round}: {history}");
        let last = updates.last().unwrap();
        assert_eq!(last["after"]["content"]["statement"], won.as_str());
        assert_eq!(last["before"]["revision"], revision);
    }
}

#[tokio::test]
async fn concurrent_creates_of_one_id_or_one_topic_leave_one_record() {
    let admin = Admin::start();
    for round in 0..6 {
        let id = format!("mem-race-{round}");
        let a = with(fact(&format!("{id} by A"), &["public"]), "id", json!(id));
        let b = with(fact(&format!("{id} by B"), &["public"]), "id", json!(id));
        let (a, b) = tokio::join!(admin.create(None, &a), admin.create(None, &b));
        let mut statuses = [a.status, b.status];
        statuses.sort_unstable();
        assert_eq!(statuses, [201, 409], "same id, round {round}: {} / {}", a.text, b.text);
        let winner = if a.status == 201 { &a } else { &b };
        assert_eq!(admin.get(None, &id).await.json["content"], winner.json["record"]["content"]);

        let key = format!("topic:{round}");
        let a = with(fact(&format!("{key} by A"), &["user:u-1"]), "key", json!(key));
        let b = with(fact(&format!("{key} by B"), &["user:u-1"]), "key", json!(key));
        let (a, b) = tokio::join!(admin.create(None, &a), admin.create(None, &b));
        let mut statuses = [a.status, b.status];
        statuses.sort_unstable();
        assert_eq!(statuses, [200, 201], "same topic, round {round}: {} / {}", a.text, b.text);
        let (first, second) = if a.status == 201 { (&a, &b) } else { (&b, &a) };
        assert_eq!(second.json["superseded"], true, "{}", second.text);
        assert_eq!(first.json["id"], second.json["id"]);
        let live = admin.list_all(None, &format!("q={key}"), 50).await;
        assert_eq!(live.len(), 1, "round {round}: {live:?}");
        assert_eq!(live[0]["content"], second.json["record"]["content"]);
        assert_eq!(live[0]["revision"], 2);
    }
}

#[tokio::test]
async fn a_tenant_named_in_the_body_never_chooses_the_tenant() {
    let admin = Admin::start();
    let record =
        with(with(fact("Alpha's note", &["public"]), "tenant", json!("t-beta")), "id", json!("mem-t"));
    let created = admin.create(Some("t-alpha"), &record).await;
    assert_eq!(created.expect(201, "create")["record"]["tenant"], "t-alpha");
    let patched =
        admin.patch(Some("t-alpha"), "mem-t", None, &json!({"tenant": "t-beta", "priority": 4})).await;
    assert_eq!(patched.expect(200, "patch")["tenant"], "t-alpha");
    let line =
        with(with(fact("Imported by alpha", &["public"]), "tenant", json!("t-beta")), "id", json!("mem-i"));
    admin.import(Some("t-alpha"), &line.to_string(), false).await.expect(201, "import");
    assert_eq!(
        export_ids(&admin.export(Some("t-alpha"), "").await),
        BTreeSet::from(["mem-i".into(), "mem-t".into()])
    );
    for tenant in [Some("t-beta"), None] {
        assert_eq!(admin.export(tenant, "").await, "", "{tenant:?} got alpha's records");
        admin.get(tenant, "mem-t").await.assert_error(404, "not_found_error", "another tenant's id");
    }
}

// ---------------------------------------------------------------------------------------------
// Auth and hostile input.

#[tokio::test]
async fn without_an_admin_token_the_admin_api_is_off() {
    let gateway = Proc::gateway_to(NO_UPSTREAM, &[], &[]);
    let http = client();
    for (method, path) in [
        (Method::GET, "/admin/v1/memories"),
        (Method::POST, "/admin/v1/memories"),
        (Method::GET, "/admin/v1/export"),
        (Method::POST, "/admin/v1/memories/forget"),
        (Method::GET, "/admin/v1/nope"),
    ] {
        for auth in [None, Some(TOKEN)] {
            let mut request =
                http.request(method.clone(), gateway.url(path)).json(&json!({"scope": "public"}));
            if let Some(token) = auth {
                request = request.bearer_auth(token);
            }
            let answer = send(request).await;
            answer.assert_error(404, "not_found_error", path);
            let message = answer.json["error"]["message"].as_str().unwrap();
            assert!(
                message.contains("admin API is off") && message.contains("MEMGATE_ADMIN_TOKEN"),
                "{message}"
            );
        }
    }
}

#[tokio::test]
async fn a_short_admin_token_stops_startup() {
    let db = TestDb::sqlite();
    let mut child = std::process::Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--upstream-url", NO_UPSTREAM, "--database-url", &db.url])
        .env("MEMGATE_ADMIN_TOKEN", "short")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("memgate started with a 5-character admin token");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(!status.success());
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(stderr.contains("admin.token") && stderr.contains("16"), "{stderr}");
}

#[tokio::test]
async fn a_wrong_or_missing_bearer_is_an_authentication_error() {
    let admin = Admin::start();
    let url = admin.gw.url("/admin/v1/memories");
    let short = &TOKEN[..TOKEN.len() - 1];
    let longer = format!("{TOKEN}x");
    let headers: Vec<Option<String>> = vec![
        None,
        Some("Bearer wrong-token-0123456789abcdef".into()),
        Some(format!("Bearer {short}")),
        Some(format!("Bearer {longer}")),
        Some(TOKEN.into()),
        Some(format!("Bearer{TOKEN}")),
        Some(format!("Basic {TOKEN}")),
        Some("Bearer ".into()),
    ];
    for header in &headers {
        for method in [Method::GET, Method::POST] {
            let mut request = admin.http.request(method.clone(), &url).json(&fact("sneaky", &["public"]));
            if let Some(value) = header {
                request = request.header("authorization", value);
            }
            let answer = send(request).await;
            answer.assert_error(401, "authentication_error", &format!("{method} with {header:?}"));
            assert!(!answer.text.contains("wrong-token"), "the presented token came back");
        }
    }
    let keyed = send(admin.http.get(&url).header("x-api-key", TOKEN)).await;
    keyed.assert_error(401, "authentication_error", "the token as x-api-key");
    assert!(admin.list_all(None, "", 50).await.is_empty(), "an unauthenticated create was stored");
}

#[tokio::test]
async fn hostile_input_gets_a_4xx_in_anthropics_shape_and_the_gateway_lives_on() {
    let admin = Admin::start();
    let id = admin.create_ok(None, &fact("Still here", &["public"])).await;
    let record_path = format!("/memories/{id}");
    let deep_array = "[".repeat(100_000) + &"]".repeat(100_000);
    let deep_content = format!(
        "{{\"type\":\"fact\",\"scope\":[\"public\"],\"content\":{{\"statement\":\"x\",\"n\":{}1{}}}}}",
        "{\"a\":".repeat(5000),
        "}".repeat(5000)
    );
    let bad_utf8: Vec<u8> =
        b"{\"type\":\"fact\",\"scope\":[\"public\"],\"content\":{\"statement\":\"\xff\xfe\"}}".to_vec();
    let long_tenant = "t".repeat(200);

    // (what, request, status, error type)
    let cases: Vec<(&str, RequestBuilder, u16, &str)> = vec![
        (
            "malformed JSON",
            admin.req(Method::POST, "/memories", None).body("{\"type\": \"fact\","),
            400,
            "invalid_request_error",
        ),
        ("empty body", admin.req(Method::POST, "/memories", None), 400, "invalid_request_error"),
        (
            "an array body",
            admin.req(Method::POST, "/memories", None).body("[1, 2]"),
            422,
            "invalid_request_error",
        ),
        (
            "a string body",
            admin.req(Method::POST, "/memories", None).body("\"fact\""),
            422,
            "invalid_request_error",
        ),
        (
            "a null body",
            admin.req(Method::POST, "/memories", None).body("null"),
            422,
            "invalid_request_error",
        ),
        (
            "an array patch",
            admin.req(Method::PATCH, &record_path, None).body("[]"),
            422,
            "invalid_request_error",
        ),
        (
            "a number to forget",
            admin.req(Method::POST, "/memories/forget", None).body("42"),
            400,
            "invalid_request_error",
        ),
        (
            "bad UTF-8",
            admin.req(Method::POST, "/memories", None).body(bad_utf8.clone()),
            400,
            "invalid_request_error",
        ),
        (
            "bad UTF-8 import",
            admin.req(Method::POST, "/import", None).body(bad_utf8.clone()),
            400,
            "invalid_request_error",
        ),
        (
            "deeply nested body",
            admin.req(Method::POST, "/memories", None).body(deep_array.clone()),
            400,
            "invalid_request_error",
        ),
        (
            "deeply nested content",
            admin.req(Method::POST, "/memories", None).body(deep_content.clone()),
            400,
            "invalid_request_error",
        ),
        (
            "tenant with spaces",
            admin.req(Method::GET, "/memories", Some("acme corp")),
            400,
            "invalid_request_error",
        ),
        (
            "200-character tenant",
            admin.req(Method::GET, "/memories", Some(&long_tenant)),
            400,
            "invalid_request_error",
        ),
        ("empty tenant", admin.req(Method::GET, "/memories", Some("")), 400, "invalid_request_error"),
        (
            "tenant with a slash",
            admin.req(Method::POST, "/memories", Some("acme/../default")).json(&fact("x", &["public"])),
            400,
            "invalid_request_error",
        ),
        (
            "non-ASCII tenant",
            admin
                .req(Method::GET, "/memories", None)
                .header("x-memory-tenant", reqwest::header::HeaderValue::from_bytes(b"t\xe9nant").unwrap()),
            400,
            "invalid_request_error",
        ),
        (
            "actor with spaces",
            admin.req(Method::GET, "/memories", None).header("x-memory-actor", "Robert'); DROP TABLE"),
            400,
            "invalid_request_error",
        ),
        (
            "If-Match not a revision",
            admin
                .req(Method::PATCH, &record_path, None)
                .header("if-match", "abc")
                .json(&json!({"priority": 1})),
            400,
            "invalid_request_error",
        ),
        (
            "If-Match empty",
            admin.req(Method::PATCH, &record_path, None).header("if-match", "").json(&json!({"priority": 1})),
            400,
            "invalid_request_error",
        ),
        (
            "If-Match a fraction",
            admin
                .req(Method::PATCH, &record_path, None)
                .header("if-match", "1.5")
                .json(&json!({"priority": 1})),
            400,
            "invalid_request_error",
        ),
        (
            "unknown query parameter",
            admin.req(Method::GET, "/memories?colour=red", None),
            400,
            "invalid_request_error",
        ),
        ("limit=abc", admin.req(Method::GET, "/memories?limit=abc", None), 400, "invalid_request_error"),
        ("negative limit", admin.req(Method::GET, "/memories?limit=-5", None), 400, "invalid_request_error"),
        (
            "unknown status",
            admin.req(Method::GET, "/memories?status=deleted", None),
            400,
            "invalid_request_error",
        ),
        (
            "q too long",
            admin.req(Method::GET, &format!("/memories?q={}", "a".repeat(300)), None),
            400,
            "invalid_request_error",
        ),
        (
            "export unknown parameter",
            admin.req(Method::GET, "/export?format=csv", None),
            400,
            "invalid_request_error",
        ),
        (
            "dry_run=maybe",
            admin.req(Method::POST, "/import?dry_run=maybe", None).body(""),
            400,
            "invalid_request_error",
        ),
        ("unknown admin path", admin.req(Method::GET, "/memorys", None), 404, "not_found_error"),
        (
            "a very long id",
            admin.req(Method::GET, &format!("/memories/{}", "i".repeat(5000)), None),
            404,
            "not_found_error",
        ),
        (
            "an id of escapes",
            admin.req(Method::GET, "/memories/..%2F..%2Fetc%00", None),
            404,
            "not_found_error",
        ),
    ];
    for (what, request, status, error_type) in cases {
        send(request).await.assert_error(status, error_type, what);
    }
    // Bodies over 1 MiB, declared or chunked, are refused without reading them whole.
    let declared = format!("Content-Length: {}\r\n\r\n", 1024 * 1024 + 1);
    let over = raw_http(&admin, "POST", "/memories", &declared, &[]).await;
    over.assert_error(413, "request_too_large", "a declared body over 1 MiB");
    let over = raw_http(&admin, "PATCH", &record_path, &declared, &[]).await;
    over.assert_error(413, "request_too_large", "a declared patch over 1 MiB");
    let size = 1024 * 1024 + 1;
    let chunk = [format!("{size:x}\r\n").into_bytes(), vec![b'x'; size]].concat();
    let over = raw_http(&admin, "POST", "/memories", "Transfer-Encoding: chunked\r\n\r\n", &chunk).await;
    over.assert_error(413, "request_too_large", "a chunked body over 1 MiB");

    admin.healthy().await;
    let record = admin.get(None, &id).await;
    assert_eq!((record.status, record.json["revision"].as_i64()), (200, Some(1)), "{}", record.text);
    assert_eq!(admin.list_all(None, "", 50).await.len(), 1, "hostile input wrote something");
    admin.create_ok(None, &fact_with_id("mem-after", "Writes still work", &["public"])).await;
}

#[tokio::test]
async fn a_wrong_method_on_an_admin_path_answers_in_anthropics_shape() {
    let admin = Admin::start();
    for (method, path) in [
        (Method::PUT, "/memories"),
        (Method::DELETE, "/memories"),
        (Method::GET, "/memories/forget"),
        (Method::GET, "/import"),
        (Method::PUT, "/memories/mem-1"),
    ] {
        let answer = send(admin.req(method.clone(), path, None)).await;
        assert!((400..500).contains(&answer.status), "{method} {path}: {}", answer.status);
        assert_eq!(
            answer.json["type"], "error",
            "{method} {path} answered {} {:?}",
            answer.status, answer.text
        );
        assert!(answer.json["error"]["type"].is_string(), "{method} {path}: {}", answer.text);
    }
    admin.healthy().await;
}

// ---------------------------------------------------------------------------------------------
// Tenant isolation, as a property over random interleavings.

/// xorshift64: a fixed seed gives the same run every time.
struct XorShift(u64);

impl XorShift {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

#[derive(Debug, Clone, PartialEq)]
struct ModelRecord {
    statement: String,
    scope: String,
    revision: i64,
    status: String,
}

/// What one tenant should see: its live records and, per id, the scope each history entry named.
#[derive(Default)]
struct TenantModel {
    records: BTreeMap<String, ModelRecord>,
    history: BTreeMap<String, Vec<String>>,
}

fn observed(record: &Value, tenant: &str, what: &str) -> ModelRecord {
    assert_eq!(record["tenant"], tenant, "{what}: another tenant's record: {record}");
    ModelRecord {
        statement: record["content"]["statement"].as_str().unwrap().to_owned(),
        scope: record["scope"][0].as_str().unwrap().to_owned(),
        revision: record["revision"].as_i64().unwrap(),
        status: record["status"].as_str().unwrap().to_owned(),
    }
}

const TENANTS: [Option<&str>; 3] = [None, Some("t-alpha"), Some("t-beta")];
const SHARED_IDS: [&str; 4] = ["mem-shared-1", "mem-shared-2", "mem-shared-3", "mem-shared-4"];

fn label(tenant: Option<&str>) -> &str {
    tenant.unwrap_or("default")
}

/// Everything `tenant` can see agrees with its model: list, export, get and history.
async fn check_tenant(admin: &Admin, tenant: Option<&str>, model: &TenantModel, what: &str) {
    let name = label(tenant);
    let listed: BTreeMap<String, ModelRecord> = admin
        .list_all(tenant, "", 3)
        .await
        .iter()
        .map(|r| (r["id"].as_str().unwrap().to_owned(), observed(r, name, what)))
        .collect();
    assert_eq!(listed, model.records, "{what}: list of {name}");
    let exported: BTreeMap<String, String> = admin
        .export(tenant, "")
        .await
        .lines()
        .map(|line| {
            let r: Value = serde_json::from_str(line).unwrap();
            (r["id"].as_str().unwrap().to_owned(), r["content"]["statement"].as_str().unwrap().to_owned())
        })
        .collect();
    let want: BTreeMap<String, String> =
        model.records.iter().map(|(id, r)| (id.clone(), r.statement.clone())).collect();
    assert_eq!(exported, want, "{what}: export of {name}");
    for id in SHARED_IDS {
        check_get(admin, tenant, model, id, what).await;
        check_history(admin, tenant, model, id, what).await;
    }
}

async fn check_get(admin: &Admin, tenant: Option<&str>, model: &TenantModel, id: &str, what: &str) {
    let answer = admin.get(tenant, id).await;
    match model.records.get(id) {
        Some(want) => {
            assert_eq!(&observed(answer.expect(200, what), label(tenant), what), want, "{what}: get {id}")
        }
        None => answer.assert_error(404, "not_found_error", &format!("{what}: get {id}")),
    }
}

async fn check_history(admin: &Admin, tenant: Option<&str>, model: &TenantModel, id: &str, what: &str) {
    let answer = admin.history(tenant, id).await;
    let want = model.history.get(id).map_or(0, Vec::len);
    if want == 0 && !model.records.contains_key(id) {
        answer.assert_error(404, "not_found_error", &format!("{what}: history of {id}"));
        return;
    }
    let data = answer.expect(200, what)["data"].as_array().unwrap();
    assert_eq!(data.len(), want, "{what}: history of {id}: {}", answer.text);
    for change in data {
        for side in ["before", "after"] {
            if !change[side].is_null() {
                observed(&change[side], label(tenant), what);
                let statement = change[side]["content"]["statement"].as_str().unwrap();
                assert!(
                    statement.starts_with(label(tenant)),
                    "{what}: {statement} in {}'s history",
                    label(tenant)
                );
            }
        }
    }
}

#[tokio::test]
async fn tenants_never_read_or_change_each_others_records() {
    // Some 2,000 requests in a few seconds: over the admin API's default rate limit.
    let admin = Admin::start_with_config("[admin]\nrate_limit_per_minute = 1000000\n");
    let scopes = ["user:u-1", "user:u-2", "public"];
    let mut models: Vec<TenantModel> = TENANTS.iter().map(|_| TenantModel::default()).collect();
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    for step in 0..400 {
        let t = rng.below(TENANTS.len());
        let tenant = TENANTS[t];
        let name = label(tenant);
        let id = SHARED_IDS[rng.below(SHARED_IDS.len())];
        let what = format!("step {step}: {name} on {id}");
        let model = &mut models[t];
        let statement = format!("{name} wrote #{step}");
        match rng.below(20) {
            0..=4 => {
                let scope = scopes[rng.below(scopes.len())];
                let answer = admin.create(tenant, &with(fact(&statement, &[scope]), "id", json!(id))).await;
                if model.records.contains_key(id) {
                    answer.assert_error(409, "invalid_request_error", &what);
                } else {
                    answer.expect(201, &what);
                    let record = ModelRecord {
                        statement,
                        scope: scope.to_owned(),
                        revision: 1,
                        status: "active".into(),
                    };
                    assert_eq!(observed(&answer.json["record"], name, &what), record);
                    model.records.insert(id.to_owned(), record);
                    model.history.entry(id.to_owned()).or_default().push(scope.to_owned());
                }
            }
            5..=7 => {
                let revision = model.records.get(id).map_or(1, |r| r.revision);
                let answer = admin
                    .patch(tenant, id, Some(revision), &json!({"content": {"statement": statement}}))
                    .await;
                match model.records.get_mut(id) {
                    Some(record) => {
                        record.statement = statement;
                        record.revision += 1;
                        assert_eq!(&observed(answer.expect(200, &what), name, &what), record);
                        model.history.entry(id.to_owned()).or_default().push(record.scope.clone());
                    }
                    None => answer.assert_error(404, "not_found_error", &what),
                }
            }
            8..=9 => {
                let answer = send(admin.req(Method::DELETE, &format!("/memories/{id}"), tenant)).await;
                match model.records.remove(id) {
                    Some(record) => {
                        answer.expect(200, &what);
                        model.history.entry(id.to_owned()).or_default().push(record.scope);
                    }
                    None => answer.assert_error(404, "not_found_error", &what),
                }
            }
            10..=11 => {
                let (action, status) =
                    if rng.below(2) == 0 { ("pause", "paused") } else { ("activate", "active") };
                let answer = admin.action(tenant, id, action).await;
                match model.records.get_mut(id) {
                    Some(record) => {
                        if record.status != status {
                            record.status = status.to_owned();
                            record.revision += 1;
                            model.history.entry(id.to_owned()).or_default().push(record.scope.clone());
                        }
                        assert_eq!(&observed(answer.expect(200, &what), name, &what), record);
                    }
                    None => answer.assert_error(404, "not_found_error", &what),
                }
            }
            12..=13 => check_get(&admin, tenant, model, id, &what).await,
            14..=15 => check_history(&admin, tenant, model, id, &what).await,
            16..=17 => check_tenant(&admin, tenant, model, &what).await,
            _ => {
                let scope = scopes[rng.below(scopes.len())];
                let answer =
                    send(admin.req(Method::POST, "/memories/forget", tenant).json(&json!({"scope": scope})))
                        .await;
                let erased: Vec<String> = model
                    .records
                    .iter()
                    .filter(|(_, r)| r.scope == scope)
                    .map(|(id, _)| id.clone())
                    .collect();
                let before: usize = model.history.values().map(Vec::len).sum();
                for id in &erased {
                    model.records.remove(id);
                    model.history.remove(id);
                }
                for entries in model.history.values_mut() {
                    entries.retain(|s| s != scope);
                }
                let after: usize = model.history.values().map(Vec::len).sum();
                let body = answer.expect(200, &what);
                assert_eq!(body["records_erased"], erased.len(), "{what}: forget {scope}");
                assert_eq!(body["changes_erased"], before - after, "{what}: forget {scope}");
            }
        }
        // Now and then, make sure the others were left alone.
        if step % 25 == 0 {
            for (other, model) in TENANTS.iter().zip(&models) {
                check_tenant(&admin, *other, model, &format!("{what}, checking {}", label(*other))).await;
            }
        }
    }
    for (tenant, model) in TENANTS.iter().zip(&models) {
        check_tenant(&admin, *tenant, model, "at the end").await;
        assert!(
            !model.records.is_empty() || !model.history.is_empty(),
            "the run never wrote to {}",
            label(*tenant)
        );
    }
}

// ---------------------------------------------------------------------------------------------
// The CLI.

fn cli(args: &[&str]) -> std::process::Output {
    let mut command = std::process::Command::new(BIN);
    command.args(args);
    for var in [
        "MEMGATE_DATABASE_URL",
        "MEMGATE_ADMIN_TOKEN",
        "MEMGATE_UPSTREAM_URL",
        "MEMGATE_LISTEN",
        "MEMGATE_AUTH_MODE",
        "ANTHROPIC_API_KEY",
        "MEMGATE_LOG_FORMAT",
        "MEMGATE_LOG_LEVEL",
    ] {
        command.env_remove(var);
    }
    command.output().unwrap()
}

fn cli_ok(args: &[&str]) -> String {
    let output = cli(args);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "memgate {args:?} failed: {stderr}");
    String::from_utf8(output.stdout).unwrap()
}

#[tokio::test]
async fn cli_export_and_import_round_trip_records_between_databases() {
    let db_a = TestDb::sqlite();
    let source = Admin::start_with(&["--database-url", &db_a.url], &[]);
    let ids = seed_varied_records(&source).await;
    let over_http = source.export(Some("acme"), "").await;

    let exported = cli_ok(&["memory", "export", "--tenant", "acme", "--database-url", &db_a.url]);
    assert_eq!(exported, over_http, "the CLI and the API export differently");
    assert_eq!(export_ids(&exported), ids.iter().cloned().collect());
    let scoped =
        cli_ok(&["memory", "export", "--tenant", "acme", "--scope", "public", "--database-url", &db_a.url]);
    assert_eq!(scoped, source.export(Some("acme"), "?scope=public").await);
    assert_eq!(scoped.lines().count(), 2);

    let dir = TempDir::new("cli-import");
    let file = dir.path.join("acme.jsonl");
    std::fs::write(&file, &exported).unwrap();
    let file = file.to_str().unwrap();
    let db_b = TestDb::sqlite();

    let preview: Value = serde_json::from_str(&cli_ok(&[
        "memory",
        "import",
        file,
        "--dry-run",
        "--tenant",
        "acme",
        "--database-url",
        &db_b.url,
    ]))
    .unwrap();
    assert_eq!(preview["counts"], json!({"new": ids.len(), "existing": 0, "invalid": 0}), "{preview}");
    assert_eq!(preview["applied"], false);
    assert_eq!(cli_ok(&["memory", "export", "--tenant", "acme", "--database-url", &db_b.url]), "");

    let report: Value = serde_json::from_str(&cli_ok(&[
        "memory",
        "import",
        file,
        "--tenant",
        "acme",
        "--database-url",
        &db_b.url,
    ]))
    .unwrap();
    assert_eq!(report["applied"], true, "{report}");
    assert!(report["import_id"].as_str().is_some_and(|id| !id.is_empty()));
    assert_eq!(cli_ok(&["memory", "export", "--tenant", "acme", "--database-url", &db_b.url]), exported);
    assert_eq!(
        cli_ok(&["memory", "export", "--database-url", &db_b.url]),
        "",
        "imported into the default tenant"
    );

    // The imported records serve over HTTP from the second database.
    let target = Admin::start_with(&["--database-url", &db_b.url], &[]);
    assert_eq!(target.export(Some("acme"), "").await, exported);
    let history = target.history(Some("acme"), "mem-cust-1").await;
    let change = &history.expect(200, "history")["data"][0];
    assert_eq!((change["action"].as_str(), change["actor"].as_str()), (Some("import"), Some("cli")));

    // A file with a bad line imports nothing and fails.
    let bad = dir.path.join("bad.jsonl");
    std::fs::write(&bad, format!("{}\nnot json\n", fact("fine", &["public"]))).unwrap();
    let output =
        cli(&["memory", "import", bad.to_str().unwrap(), "--tenant", "other", "--database-url", &db_b.url]);
    assert!(!output.status.success());
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("invalid line"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(target.export(Some("other"), "").await, "");
}
