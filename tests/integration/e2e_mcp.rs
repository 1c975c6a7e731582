//! `POST /mcp` through the real binary with a real MCP client (`rmcp`'s, over Streamable HTTP):
//! the six tools listed and called with a gateway key or JWT, only the caller's scopes seen,
//! no tools without a tool permission, 401 in the gateway's shape without a valid credential,
//! a JSON-RPC error for a body MCP cannot read, clear tool errors for malformed input, and
//! aliases that name something (an agent's being words of its record, not an exact route).

use crate::e2e_identity::{ADMIN_TOKEN, JWT_SECRET, issue_key, managed_gateway};
use crate::support::{Proc, TempDir, client};
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::TestRunner;
use rmcp::model::{CallToolRequestParams, CallToolResult, ProtocolVersion};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};
use std::collections::HashMap;

pub(crate) type Client = RunningService<RoleClient, ()>;

fn transport(gateway: &Proc, headers: &[(&str, &str)]) -> StreamableHttpClientTransport<reqwest::Client> {
    let headers: HashMap<http::HeaderName, http::HeaderValue> =
        headers.iter().map(|(name, value)| (name.parse().unwrap(), value.parse().unwrap())).collect();
    StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(gateway.url("/mcp")).custom_headers(headers),
    )
}

/// An MCP client connected to the gateway's `/mcp` with these headers (`initialize` handshake).
pub(crate) async fn connect(gateway: &Proc, headers: &[(&str, &str)]) -> Client {
    ().serve(transport(gateway, headers)).await.expect("the MCP client connects")
}

async fn connect_with(gateway: &Proc, headers: &[(String, String)]) -> Client {
    let headers: Vec<(&str, &str)> =
        headers.iter().map(|(name, value)| (name.as_str(), value.as_str())).collect();
    connect(gateway, &headers).await
}

async fn tool_names(client: &Client) -> Vec<String> {
    client.list_all_tools().await.unwrap().into_iter().map(|tool| tool.name.into_owned()).collect()
}

pub(crate) async fn call(client: &Client, name: &str, arguments: Value) -> CallToolResult {
    let arguments = arguments.as_object().cloned().expect("tool arguments are an object");
    client.call_tool(CallToolRequestParams::new(name.to_owned()).with_arguments(arguments)).await.unwrap()
}

pub(crate) fn text(result: &CallToolResult) -> String {
    result.content.iter().filter_map(|block| block.as_text()).map(|t| t.text.as_str()).collect()
}

fn ok_text(result: &CallToolResult) -> String {
    assert_eq!(result.is_error, Some(false), "{}", text(result));
    text(result)
}

fn error_text(result: &CallToolResult) -> String {
    assert_eq!(result.is_error, Some(true), "{}", text(result));
    text(result)
}

/// The id in `memory_add`'s "Saved as <id> (scope …)".
pub(crate) fn saved_id(result: &CallToolResult) -> String {
    let said = ok_text(result);
    let rest = said.split("Saved as ").nth(1).unwrap_or_else(|| panic!("no id in {said}"));
    rest.split([' ', '.']).next().unwrap().to_owned()
}

const SIX: [&str; 6] =
    ["memory_search", "memory_get", "memory_list", "memory_add", "memory_update", "memory_delete"];

async fn admin_get(gateway: &Proc, tenant: &str, id: &str) -> (u16, Value) {
    let response = client()
        .get(gateway.url(&format!("/admin/v1/memories/{id}")))
        .bearer_auth(ADMIN_TOKEN)
        .header("x-memory-tenant", tenant)
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.json().await.unwrap_or(Value::Null))
}

pub(crate) fn hs256(claims: Value) -> String {
    let key = jsonwebtoken::EncodingKey::from_secret(JWT_SECRET.as_bytes()).unwrap();
    jsonwebtoken::encode(&jsonwebtoken::Header::default(), &claims, &key).unwrap()
}

fn jwt(sub: &str, tenant: &str, permissions: &[&str]) -> String {
    let exp = jsonwebtoken::get_current_timestamp() + 600;
    hs256(json!({"sub": sub, "tenant": tenant, "exp": exp, "memgate_permissions": permissions}))
}

#[tokio::test]
async fn an_mcp_client_lists_and_calls_the_six_tools_with_a_gateway_key() {
    let mock = Proc::mock(&[]);
    let gateway = managed_gateway(&mock, &[]);
    let (key, issued) =
        issue_key(&gateway, "acme", json!({"name": "coder", "permissions": ["memory_write_tools"]})).await;
    let key_id = issued["id"].as_str().unwrap().to_owned();
    let mcp = connect(&gateway, &[("x-api-key", &key)]).await;
    let server = mcp.peer_info().expect("the server answered initialize");
    assert_eq!(server.server_info.as_ref().unwrap().name, "memgate");
    assert!(server.instructions.as_deref().unwrap().contains("not instructions"), "{server:?}");

    let tools = mcp.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|tool| tool.name.as_ref()).collect();
    assert_eq!(names, SIX);
    let add = tools.iter().find(|tool| tool.name == "memory_add").unwrap();
    assert_eq!(add.input_schema["required"], json!(["type", "content"]));
    assert!(add.description.as_deref().unwrap().contains("Never put secrets into memory"));

    let added = call(
        &mcp,
        "memory_add",
        json!({"type": "fact", "content": {"statement": "The staging branch of this repo is called next."}}),
    )
    .await;
    let id = saved_id(&added);
    assert!(text(&added).contains(&format!("agent:{key_id}")), "{}", text(&added));
    // Stored in the key's own scope, with the key as its author.
    let (status, record) = admin_get(&gateway, "acme", &id).await;
    assert_eq!(status, 200, "{record}");
    assert_eq!(record["scope"], json!([format!("agent:{key_id}")]), "{record}");
    assert_eq!(record["author"], format!("agent:{key_id}"), "{record}");
    assert_eq!(record["status"], "active", "{record}");

    let found =
        ok_text(&call(&mcp, "memory_search", json!({"query": "what is the staging branch called?"})).await);
    assert!(found.contains(&id) && found.contains("called next"), "{found}");
    let got = ok_text(&call(&mcp, "memory_get", json!({"id": id})).await);
    assert!(got.contains("called next"), "{got}");
    let listed = ok_text(&call(&mcp, "memory_list", json!({"mine": true})).await);
    assert!(listed.contains(&id), "{listed}");
    let updated = call(
        &mcp,
        "memory_update",
        json!({"id": id, "content": {"statement": "The staging branch of this repo is called edge."}}),
    )
    .await;
    ok_text(&updated);
    let got = ok_text(&call(&mcp, "memory_get", json!({"id": id})).await);
    assert!(got.contains("called edge"), "{got}");
    ok_text(&call(&mcp, "memory_delete", json!({"id": id})).await);
    let gone = error_text(&call(&mcp, "memory_get", json!({"id": id})).await);
    assert!(gone.contains("no record"), "{gone}");
    mcp.cancel().await.unwrap();

    // Counted as the loop's calls are, and as requests of their own route.
    let metrics = client().get(gateway.url("/metrics")).send().await.unwrap().text().await.unwrap();
    let calls = metrics
        .lines()
        .find(|line| line.starts_with("memgate_memory_tool_calls_total") && line.contains("memory_add"))
        .unwrap_or_else(|| panic!("no memory_add calls counted:\n{metrics}"));
    assert!(calls.contains("outcome=\"ok\"") && calls.ends_with(" 1"), "{calls}");
    assert!(metrics.contains("memgate_requests_total{route=\"mcp\",status_class=\"2xx\"}"), "{metrics}");
}

/// A client of the 2026-07-28 revision (`server/discover`, no handshake) and a JWT instead of a
/// key: the same tools, and a read permission gets the read tools only.
#[tokio::test]
async fn a_discover_client_with_a_jwt_gets_the_tools_its_permission_allows() {
    let mock = Proc::mock(&[]);
    let gateway = managed_gateway(&mock, &[]);
    let token = jwt("u-7", "acme", &["memory_read_tools"]);
    let bearer = format!("Bearer {token}");
    let lifecycle = ClientLifecycleMode::Discover { preferred_versions: vec![ProtocolVersion::LATEST] };
    let mcp =
        ().serve_with_lifecycle(transport(&gateway, &[("authorization", &bearer)]), lifecycle).await.unwrap();
    assert_eq!(tool_names(&mcp).await, SIX[..3]);
    let refused = error_text(
        &call(
            &mcp,
            "memory_add",
            json!({"type": "fact", "content": {"statement": "Read-only callers keep nothing."}}),
        )
        .await,
    );
    assert!(refused.contains("memory_add is not one of the memory tools offered"), "{refused}");
    ok_text(&call(&mcp, "memory_list", json!({})).await);
    mcp.cancel().await.unwrap();
}

#[tokio::test]
async fn a_key_without_tool_permissions_connects_with_no_tools_and_is_told_why() {
    let mock = Proc::mock(&[]);
    let gateway = managed_gateway(&mock, &[]);
    let (key, _) = issue_key(&gateway, "acme", json!({"name": "chat-only"})).await;
    let mcp = connect(&gateway, &[("x-api-key", &key)]).await;
    let why = mcp.peer_info().unwrap().instructions.clone().unwrap();
    assert!(why.contains("memory_read_tools") && why.contains("memory_write_tools"), "{why}");
    assert!(tool_names(&mcp).await.is_empty());
    let refused = error_text(&call(&mcp, "memory_search", json!({"query": "anything"})).await);
    assert!(refused.contains("no memory tools") && refused.contains("memory_read_tools"), "{refused}");
    mcp.cancel().await.unwrap();

    // A tool key narrowed to nothing by the request: the same, with the header named.
    let (key, _) =
        issue_key(&gateway, "acme", json!({"name": "coder", "permissions": ["memory_write_tools"]})).await;
    let mcp = connect(&gateway, &[("x-api-key", &key), ("x-memory-tools", "off")]).await;
    assert!(tool_names(&mcp).await.is_empty());
    let refused = error_text(&call(&mcp, "memory_list", json!({})).await);
    assert!(refused.contains("X-Memory-Tools: off"), "{refused}");
    mcp.cancel().await.unwrap();
}

#[tokio::test]
async fn a_missing_or_bad_credential_gets_401_in_the_gateways_shape() {
    let mock = Proc::mock(&[]);
    let gateway = managed_gateway(&mock, &[]);
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}});
    for credential in
        [None, Some(("x-api-key", "mgk_not-a-key")), Some(("authorization", "Bearer not.a.jwt"))]
    {
        let mut request = client()
            .post(gateway.url("/mcp"))
            .header("accept", "application/json, text/event-stream")
            .json(&initialize);
        if let Some((name, value)) = credential {
            request = request.header(name, value);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 401, "{credential:?}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["type"], "error", "{body}");
        assert_eq!(body["error"]["type"], "authentication_error", "{body}");
    }
    // The MCP client sees the refusal as a failed connection, not a server without tools.
    let refused = ().serve(transport(&gateway, &[("x-api-key", "mgk_not-a-key")])).await;
    assert!(refused.is_err());
    // Only POST is served; other methods answer the gateway's 405.
    let (key, _) =
        issue_key(&gateway, "acme", json!({"name": "coder", "permissions": ["memory_read_tools"]})).await;
    let response = client().get(gateway.url("/mcp")).header("x-api-key", &key).send().await.unwrap();
    assert_eq!(response.status(), 405);
}

#[tokio::test]
async fn malformed_tool_input_gets_a_clear_tool_error() {
    let mock = Proc::mock(&[]);
    let dir = TempDir::new("mcp-limits");
    let config = dir.path.join("memgate.toml");
    std::fs::write(
        &config,
        "[memory]\nfunnel_timeout_ms = 5000\ndefault_release = \"v1\"\n[limits]\nmax_body_bytes = 65536\n",
    )
    .unwrap();
    let gateway = managed_gateway(&mock, &["--config", config.to_str().unwrap()]);
    let (key, _) =
        issue_key(&gateway, "acme", json!({"name": "coder", "permissions": ["memory_write_tools"]})).await;
    let mcp = connect(&gateway, &[("x-api-key", &key)]).await;
    for (tool, arguments, says) in [
        ("memory_search", json!({}), "query is required"),
        ("memory_get", json!({"id": 42}), "id must be a string"),
        ("memory_add", json!({"type": "fact"}), "content is required"),
        ("memory_add", json!({"type": "fact", "content": "not an object"}), "content must be a JSON object"),
        (
            "memory_add",
            json!({"type": "fact", "content": {"nonsense": true}}),
            "refused, nothing was written",
        ),
        ("memory_list", json!({"mine": "yes"}), "mine must be true or false"),
        ("memory_update", json!({"id": "mem-none"}), "give content, aliases or priority"),
        ("memory_forget_everything", json!({}), "not one of the memory tools"),
    ] {
        let said = error_text(&call(&mcp, tool, arguments.clone()).await);
        assert!(said.contains(says), "{tool} {arguments}: {said}");
    }
    let secret = call(
        &mcp,
        "memory_add",
        json!({"type": "fact", "content": {"statement": "the deploy key is sk-ant-api03-Zx81Kq93Lm20Pv47Rt65Yw18Nb39Hc72"}}),
    )
    .await;
    let said = error_text(&secret);
    assert!(said.contains("refused"), "{said}");
    assert!(!said.contains("Zx81Kq93Lm20"), "a refusal must not echo the secret: {said}");
    // Still serving after all of it.
    ok_text(&call(&mcp, "memory_list", json!({})).await);
    mcp.cancel().await.unwrap();

    // A body past limits.max_body_bytes is refused before rmcp reads it, in the gateway's shape.
    let huge = "x".repeat(65536 + 1);
    let response = client()
        .post(gateway.url("/mcp"))
        .header("x-api-key", &key)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .body(huge)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 413);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["type"], "request_too_large", "{body}");
}

/// Who writes and who then looks, in one generated case.
#[derive(Debug, Clone)]
enum Pair {
    /// Two keys of different tenants.
    OtherTenant,
    /// Two keys of one tenant: each writes into its own `agent:<key id>`.
    SameTenantOtherKey,
    /// Two end users of one tenant, by JWT: each writes into its own `user:<sub>`.
    OtherSubject,
    /// One key answering for two end users (`X-Memory-Subject`): one author, two scopes.
    OtherAssertedSubject,
}

#[derive(Debug, Clone)]
struct Case {
    pair: Pair,
    /// A word no other record holds, so a search that finds it found the writer's record.
    word: String,
    kind: &'static str,
}

fn cases(count: usize) -> Vec<Case> {
    let pair = proptest::prop_oneof![
        proptest::strategy::Just(Pair::OtherTenant),
        proptest::strategy::Just(Pair::SameTenantOtherKey),
        proptest::strategy::Just(Pair::OtherSubject),
        proptest::strategy::Just(Pair::OtherAssertedSubject),
    ];
    let kind = proptest::sample::select(vec!["fact", "preference"]);
    let strategy = (pair, "[a-z]{10}", kind).prop_map(|(pair, word, kind)| Case { pair, word, kind });
    let mut runner = TestRunner::deterministic();
    let mut cases: Vec<Case> =
        (0..count).map(|_| strategy.new_tree(&mut runner).unwrap().current()).collect();
    // Every pairing at least once, whatever the generator drew.
    for (case, pair) in
        cases.iter_mut().zip([Pair::OtherTenant, Pair::SameTenantOtherKey, Pair::OtherSubject])
    {
        case.pair = pair;
    }
    cases
}

/// Isolation as a property: whatever one caller writes over MCP, a caller of another tenant,
/// another key or another end user never sees, finds, changes or deletes through its own tools,
/// while both see what they share (a `public` record of their tenant).
#[tokio::test]
async fn what_one_callers_tools_write_another_callers_tools_never_see() {
    let mock = Proc::mock(&[]);
    let gateway = managed_gateway(&mock, &[]);
    // The same permissions for both: memory_write_any too, so only scopes keep them apart.
    let permissions = ["memory_write_tools", "memory_write_any"];
    for (n, case) in cases(8).into_iter().enumerate() {
        let (writer_tenant, reader_tenant) = match case.pair {
            Pair::OtherTenant => (format!("t{n}a"), format!("t{n}b")),
            _ => (format!("t{n}"), format!("t{n}")),
        };
        let header = |name: &str, value: String| (name.to_owned(), value);
        let (writer_headers, reader_headers) = match case.pair {
            Pair::OtherSubject => (
                vec![header(
                    "authorization",
                    format!("Bearer {}", jwt(&format!("w{n}"), &writer_tenant, &permissions)),
                )],
                vec![header(
                    "authorization",
                    format!("Bearer {}", jwt(&format!("r{n}"), &reader_tenant, &permissions)),
                )],
            ),
            Pair::OtherAssertedSubject => {
                let asserting = [&permissions[..], &["assert_subject"]].concat();
                let body = json!({"name": "agent", "permissions": asserting});
                let (key, _) = issue_key(&gateway, &writer_tenant, body).await;
                (
                    vec![header("x-api-key", key.clone()), header("x-memory-subject", format!("w{n}"))],
                    vec![header("x-api-key", key), header("x-memory-subject", format!("r{n}"))],
                )
            }
            _ => {
                let body = json!({"name": "agent", "permissions": permissions});
                let (writer, _) = issue_key(&gateway, &writer_tenant, body.clone()).await;
                let (reader, _) = issue_key(&gateway, &reader_tenant, body).await;
                (vec![header("x-api-key", writer)], vec![header("x-api-key", reader)])
            }
        };
        let shared = json!({"scope": ["public"], "type": "fact",
            "content": {"statement": format!("Shared notice {} for everyone in the tenant.", case.word)}});
        for tenant in [&writer_tenant, &reader_tenant] {
            let response = client()
                .post(gateway.url("/admin/v1/memories"))
                .bearer_auth(ADMIN_TOKEN)
                .header("x-memory-tenant", tenant.as_str())
                .json(&shared)
                .send()
                .await
                .unwrap();
            let status = response.status();
            assert!(status.is_success(), "{case:?}: {status} {}", response.text().await.unwrap());
        }

        let writer = connect_with(&gateway, &writer_headers).await;
        let content = match case.kind {
            "fact" => json!({"statement": format!("The private codename is {}.", case.word)}),
            _ => {
                json!({"topic": format!("codename {}", case.word), "preference": format!("call it {}", case.word)})
            }
        };
        let id = saved_id(&call(&writer, "memory_add", json!({"type": case.kind, "content": content})).await);
        let mine = ok_text(&call(&writer, "memory_search", json!({"query": case.word, "limit": 20})).await);
        assert!(mine.contains(&id), "{case:?}: the writer finds its own record: {mine}");
        writer.cancel().await.unwrap();

        let reader = connect_with(&gateway, &reader_headers).await;
        let found = ok_text(&call(&reader, "memory_search", json!({"query": case.word, "limit": 20})).await);
        assert!(!found.contains(&id) && !found.contains("private codename"), "{case:?}: {found}");
        assert!(
            found.contains("Shared notice"),
            "{case:?}: the reader sees its tenant's public record: {found}"
        );
        let listed = ok_text(&call(&reader, "memory_list", json!({"limit": 50})).await);
        assert!(!listed.contains(&id), "{case:?}: {listed}");
        for (tool, arguments) in [
            ("memory_get", json!({"id": id})),
            ("memory_update", json!({"id": id, "content": {"statement": "overwritten"}})),
            ("memory_delete", json!({"id": id})),
        ] {
            let said = error_text(&call(&reader, tool, arguments).await);
            assert!(said.contains("no record"), "{case:?} {tool}: {said}");
        }
        reader.cancel().await.unwrap();
        let (status, record) = admin_get(&gateway, &writer_tenant, &id).await;
        assert_eq!(status, 200, "{case:?}: the record is still there");
        assert!(
            record.to_string().contains(&case.word) && !record.to_string().contains("overwritten"),
            "{record}"
        );
    }
}

/// What every route of memgate answers a body it cannot read, `/mcp` answers in the shape its
/// clients read: a JSON-RPC error with `"id": null` (JSON-RPC 2.0 §5 for a request whose id is
/// unknown), at the status the official SDKs' servers use, never rmcp's plain-text 415.
#[tokio::test]
async fn a_body_mcp_cannot_read_gets_a_json_rpc_error_at_its_status() {
    let mock = Proc::mock(&[]);
    let gateway = managed_gateway(&mock, &[]);
    let (key, _) =
        issue_key(&gateway, "acme", json!({"name": "coder", "permissions": ["memory_read_tools"]})).await;
    let both = "application/json, text/event-stream";
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}});
    for (what, content_type, accept, body, status, code) in [
        (
            "not JSON",
            "application/json",
            both,
            r#"{"jsonrpc": "2.0", "id": 1, "method": "#.to_owned(),
            400,
            -32700,
        ),
        ("JSON, not JSON-RPC", "application/json", both, r#"{"hello": "world"}"#.to_owned(), 400, -32600),
        ("a batch", "application/json", both, format!("[{initialize}]"), 400, -32600),
        ("another media type", "text/plain", both, initialize.to_string(), 415, -32000),
        (
            "an answer it cannot take",
            "application/json",
            "application/json",
            initialize.to_string(),
            406,
            -32000,
        ),
    ] {
        let response = client()
            .post(gateway.url("/mcp"))
            .header("x-api-key", &key)
            .header("accept", accept)
            .header("content-type", content_type)
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), status, "{what}");
        let media = response.headers().get("content-type").map(|v| v.to_str().unwrap().to_owned());
        assert_eq!(media.as_deref(), Some("application/json"), "{what}");
        let text = response.text().await.unwrap();
        let answer: Value =
            serde_json::from_str(&text).unwrap_or_else(|_| panic!("{what}: not JSON: {text}"));
        assert_eq!(answer["jsonrpc"], "2.0", "{what}: {answer}");
        assert_eq!(answer["id"], Value::Null, "{what}: {answer}");
        assert_eq!(answer["error"]["code"], code, "{what}: {answer}");
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(!message.is_empty(), "{what}: {answer}");
        assert!(
            !message.contains("hello") && !message.contains("clientInfo"),
            "{what}: echoes the body: {answer}"
        );
    }
    // A client that sends what MCP takes is served as before.
    let mcp = connect(&gateway, &[("x-api-key", &key)]).await;
    assert_eq!(tool_names(&mcp).await, SIX[..3]);
    mcp.cancel().await.unwrap();
}

async fn admin_post(gateway: &Proc, tenant: &str, path: &str, body: &Value) -> (u16, Value) {
    let response = client()
        .post(gateway.url(&format!("/admin/v1{path}")))
        .bearer_auth(ADMIN_TOKEN)
        .header("x-memory-tenant", tenant)
        .json(body)
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.json().await.unwrap_or(Value::Null))
}

/// Aliases are an exact route past the semantic layer: a record named by one in a question is
/// injected whatever the question means. So an alias must name something (not stop words, not
/// a letter or two), for every writer, and an agent's aliases are words of its record (found by
/// meaning and words, with a score) rather than a route: only an operator's record is injected
/// because a question names it.
#[tokio::test]
async fn common_words_are_no_alias_and_an_agents_aliases_are_words_not_an_exact_route() {
    let mock = Proc::mock(&[]);
    let dir = TempDir::new("mcp-aliases");
    let config = dir.path.join("memgate.toml");
    // v2: meaning alone, at a threshold no record reaches, so only an exact match passes.
    std::fs::write(
        &config,
        "[memory]\nfunnel_timeout_ms = 10000\n[releases.v2]\nschema_versions = [\"v1\"]\n\
         retrieval = \"dense\"\nsimilarity_threshold = 0.999\n",
    )
    .unwrap();
    let gateway = managed_gateway(&mock, &["--config", config.to_str().unwrap()]);
    let (key, issued) =
        issue_key(&gateway, "acme", json!({"name": "coder", "permissions": ["memory_write_tools"]})).await;
    let key_id = issued["id"].as_str().unwrap().to_owned();
    let mcp = connect(&gateway, &[("x-api-key", &key)]).await;

    // The aliases that put a record into every question: refused by path, nothing written.
    let refused = error_text(
        &call(
            &mcp,
            "memory_add",
            json!({"type": "fact", "content": {"statement": "Support answers within a day."},
                "aliases": ["the", "my", "i", "what", "is"]}),
        )
        .await,
    );
    for at in 0..5 {
        assert!(refused.contains(&format!("$.aliases[{at}]")), "{refused}");
    }
    let listed = ok_text(&call(&mcp, "memory_list", json!({"mine": true})).await);
    assert!(!listed.contains("within a day"), "{listed}");
    // The same for an operator, as a 422 naming exactly the unspecific ones.
    let (status, answer) = admin_post(
        &gateway,
        "acme",
        "/memories",
        &json!({"type": "fact", "scope": ["public"], "content": {"statement": "Refunds take five days."},
            "aliases": ["refund window", "the", "ab", "what is", "退款"]}),
    )
    .await;
    assert_eq!(status, 422, "{answer}");
    let paths: Vec<&str> =
        answer["error"]["problems"].as_array().unwrap().iter().filter_map(|p| p["path"].as_str()).collect();
    assert_eq!(paths, ["$.aliases[1]", "$.aliases[2]", "$.aliases[3]"], "{answer}");

    // A specific alias each: the agent's and the operator's.
    let agents = saved_id(
        &call(
            &mcp,
            "memory_add",
            json!({"type": "fact", "content": {"statement": "The lighthouse tour leaves at noon."},
                "aliases": ["bluebird rollout"]}),
        )
        .await,
    );
    let (status, answer) = admin_post(
        &gateway,
        "acme",
        "/memories",
        &json!({"type": "fact", "scope": ["public"], "aliases": ["heron rollout"],
            "content": {"statement": "The harbour ferry runs every hour."}}),
    )
    .await;
    assert_eq!(status, 201, "{answer}");
    let operators = answer["id"].as_str().unwrap().to_owned();
    let request = json!({"model": "claude-test", "max_tokens": 64,
        "messages": [{"role": "user", "content": "Any news on the bluebird rollout or the heron rollout?"}]});
    let caller = json!({"scopes": ["public", format!("agent:{key_id}")]});
    let (status, explained) = admin_post(
        &gateway,
        "acme",
        "/explain",
        &json!({"request": request, "caller": caller, "release": "v2"}),
    )
    .await;
    assert_eq!(status, 200, "{explained}");
    let injected: Vec<&str> =
        explained["injected"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(injected.contains(&operators.as_str()), "the operator's alias is an exact route: {explained}");
    assert!(!injected.contains(&agents.as_str()), "the agent's alias passed without a score: {explained}");
    // Still words of the agent's record: its own search finds it by them.
    let found = ok_text(&call(&mcp, "memory_search", json!({"query": "bluebird rollout"})).await);
    assert!(found.contains(&agents), "{found}");
    mcp.cancel().await.unwrap();
}
