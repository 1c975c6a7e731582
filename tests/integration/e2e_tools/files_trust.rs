//! Anthropic's memory tool backed by memgate, held to the same rules as the six tools, end to
//! end: a file is its writer's (another key's edit or delete is refused, and a key that a record
//! of another type or author holds is not taken over); the release's cap and `X-Memory-Tools`
//! decide its commands as they decide the tools'; `view` shows only what recall would (active,
//! valid now), with the caller's own proposals marked.

use super::{Gate, Key, last_tool_results};
use crate::e2e_identity::ADMIN_TOKEN;
use serde_json::{Value, json};

const BACKEND: (&str, &str) = ("x-memory-tool-backend", "memgate");

async fn backend_key(gate: &Gate) -> Key {
    gate.key(&["memory_tool_backend", "assert_subject"]).await
}

/// One `memory` command by `key` for `subject`, with extra headers; the client's answer status.
async fn command_with(
    gate: &Gate,
    key: &Key,
    subject: &str,
    headers: &[(&str, &str)],
    input: Value,
) -> Value {
    let body = json!({
        "model": "claude-mock",
        "max_tokens": 256,
        "tools": [{"type": "memory_20250818", "name": "memory"}],
        "messages": [{"role": "user", "content": format!("memory command: {input}")}],
    });
    let mut all = vec![("x-memory-subject", subject), BACKEND];
    all.extend_from_slice(headers);
    let answer = gate.send(key, &all, &serde_json::to_vec(&body).unwrap()).await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    answer.json()
}

/// The result memgate gave the model's last `memory` call, and whether it was an error.
async fn result_of(gate: &Gate) -> (String, bool) {
    let bodies = gate.upstream_bodies().await;
    let result = &last_tool_results(bodies.last().unwrap())[0];
    (result["content"].as_str().unwrap().to_owned(), result["is_error"] == true)
}

async fn command(gate: &Gate, key: &Key, subject: &str, input: Value) -> (String, bool) {
    command_with(gate, key, subject, &[], input).await;
    result_of(gate).await
}

async fn admin_create(gate: &Gate, record: Value) -> Value {
    let response = reqwest::Client::new()
        .post(gate.gw.url("/admin/v1/memories"))
        .bearer_auth(ADMIN_TOKEN)
        .header("x-memory-tenant", "acme")
        .json(&record)
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success(), "{:?}", response.status());
    response.json().await.unwrap()
}

async fn admin_post(gate: &Gate, path: &str) {
    let response = reqwest::Client::new()
        .post(gate.gw.url(&format!("/admin/v1/memories/{path}")))
        .bearer_auth(ADMIN_TOKEN)
        .header("x-memory-tenant", "acme")
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success(), "{path}: {:?}", response.status());
}

fn record_at<'a>(records: &'a [Value], key: &str) -> Option<&'a Value> {
    records.iter().find(|r| r["key"] == key)
}

#[tokio::test]
async fn e2e_a_memory_file_is_its_writers_and_a_key_another_holds_is_not_taken() {
    let gate = Gate::start("", &[]);
    let (mine, other) = (backend_key(&gate).await, backend_key(&gate).await);
    let file = "/memories/plan.md";
    let created = command(
        &gate,
        &mine,
        "u-1",
        json!({"command": "create", "path": file, "file_text": "ship on Monday"}),
    )
    .await;
    assert_eq!(created, (format!("File created successfully at: {file}"), false));

    // Another key serving the same person sees the file, and may not change or delete it.
    let (viewed, _) = command(&gate, &other, "u-1", json!({"command": "view", "path": file})).await;
    assert!(viewed.contains("ship on Monday"), "{viewed}");
    for input in [
        json!({"command": "str_replace", "path": file, "old_str": "Monday", "new_str": "Friday"}),
        json!({"command": "insert", "path": file, "insert_line": 0, "insert_text": "cancelled"}),
        json!({"command": "delete", "path": file}),
        json!({"command": "rename", "old_path": file, "new_path": "/memories/taken.md"}),
    ] {
        let (said, is_error) = command(&gate, &other, "u-1", input.clone()).await;
        assert!(is_error && said.contains("another writer wrote this record"), "{input}: {said}");
    }
    let records = gate.records("user:u-1").await;
    let stored = record_at(&records, file).unwrap();
    assert_eq!(stored["content"]["statement"], "ship on Monday");
    assert_eq!(
        (stored["revision"].as_i64(), stored["author"].as_str()),
        (Some(1), Some(format!("agent:{}", mine.id).as_str()))
    );
    assert_eq!(stored["provenance"]["writer"], "memory_tool");
    assert_eq!(stored["provenance"]["credential"], format!("key:{}", mine.id));

    // An operator's record of another type holding a path is not a file, and not taken over.
    admin_create(
        &gate,
        json!({"id": "profile-u-1", "type": "customer_profile", "scope": ["user:u-1"],
        "key": "/memories/profile.md", "content": {"name": "Li Wei"}}),
    )
    .await;
    let (said, is_error) = command(
        &gate,
        &mine,
        "u-1",
        json!({"command": "create", "path": "/memories/profile.md", "file_text": "tier: platinum"}),
    )
    .await;
    assert!(is_error && said.contains("already holds this key"), "{said}");
    let records = gate.records("user:u-1").await;
    let profile = record_at(&records, "/memories/profile.md").unwrap();
    assert_eq!((profile["type"].as_str(), profile["revision"].as_i64()), (Some("customer_profile"), Some(1)));
    assert_eq!(profile["author"], "admin:admin");
    assert_eq!(profile["content"], json!({"name": "Li Wei"}));
}

#[tokio::test]
async fn e2e_the_release_cap_and_the_header_decide_the_memory_tool_as_they_decide_the_tools() {
    let gate = Gate::start("[releases.v1]\nmemory_tools = \"read\"\n", &[]);
    let key = backend_key(&gate).await;
    let create = json!({"command": "create", "path": "/memories/a.md", "file_text": "x"});
    let (said, is_error) = command(&gate, &key, "u-1", create.clone()).await;
    assert!(is_error && said.contains("read-only"), "{said}");
    let (listed, is_error) =
        command(&gate, &key, "u-1", json!({"command": "view", "path": "/memories"})).await;
    assert!(!is_error && listed.contains("/memories"), "{listed}");
    assert!(gate.records("user:u-1").await.is_empty());

    let gate = Gate::start("", &[]);
    let key = backend_key(&gate).await;
    command_with(&gate, &key, "u-1", &[("x-memory-tools", "read")], create.clone()).await;
    let (said, is_error) = result_of(&gate).await;
    assert!(is_error && said.contains("read-only"), "{said}");
    // Off: memgate executes nothing; the model's call goes back to the client as it came.
    let told = command_with(&gate, &key, "u-1", &[("x-memory-tools", "off")], create).await;
    assert_eq!(told["stop_reason"], "tool_use", "{told}");
    assert_eq!(told["content"][1]["name"], "memory", "{told}");
    assert_eq!(gate.upstream_bodies().await.len(), 3, "one round for the off request");
    assert!(gate.records("user:u-1").await.is_empty());
}

#[tokio::test]
async fn e2e_view_shows_only_what_recall_would_and_marks_the_callers_own_proposals() {
    let gate = Gate::start("[releases.v1]\nagent_writes = \"proposed\"\n", &[]);
    let (mine, other) = (backend_key(&gate).await, backend_key(&gate).await);
    let fact = |id: &str, key: &str, extra: Value| {
        let mut record = json!({"id": id, "type": "fact", "scope": ["user:u-1"], "key": key,
            "content": {"statement": format!("{id} says hello")}});
        record.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        record
    };
    admin_create(&gate, fact("live", "/memories/live.md", json!({}))).await;
    admin_create(&gate, fact("paused", "/memories/paused.md", json!({}))).await;
    admin_post(&gate, "paused/pause").await;
    admin_create(&gate, fact("archived", "/memories/archived.md", json!({}))).await;
    admin_post(&gate, "archived/archive").await;
    admin_create(
        &gate,
        fact(
            "expired",
            "/memories/expired.md",
            json!({"valid_from": "2020-01-01T00:00:00Z", "valid_until": "2021-01-01T00:00:00Z"}),
        ),
    )
    .await;
    admin_create(&gate, fact("proposed", "/memories/proposed.md", json!({"status": "proposed"}))).await;
    let (said, _) = command(
        &gate,
        &mine,
        "u-1",
        json!({"command": "create", "path": "/memories/mine.md", "file_text": "my note"}),
    )
    .await;
    assert!(said.contains("awaits review"), "{said}");

    let (listed, _) = command(&gate, &mine, "u-1", json!({"command": "view", "path": "/memories"})).await;
    assert!(listed.contains("/memories/live.md") && listed.contains("/memories/mine.md"), "{listed}");
    for hidden in ["paused", "archived", "expired", "proposed.md"] {
        assert!(!listed.contains(hidden), "{hidden} shown: {listed}");
    }
    assert!(listed.contains("Awaiting review") && listed.contains("/memories/mine.md."), "{listed}");
    for hidden in ["paused", "archived", "expired", "proposed"] {
        let (said, is_error) = command(
            &gate,
            &mine,
            "u-1",
            json!({"command": "view", "path": format!("/memories/{hidden}.md")}),
        )
        .await;
        assert!(is_error && said.contains("does not exist"), "{hidden}: {said}");
        assert!(!said.contains("says hello"), "{said}");
    }
    // Another writer does not see this one's proposal.
    let (listed, _) = command(&gate, &other, "u-1", json!({"command": "view", "path": "/memories"})).await;
    assert!(listed.contains("/memories/live.md") && !listed.contains("mine.md"), "{listed}");
    // A withdrawn file is not brought back by writing its path again.
    let (said, is_error) = command(
        &gate,
        &mine,
        "u-1",
        json!({"command": "create", "path": "/memories/paused.md", "file_text": "back"}),
    )
    .await;
    assert!(is_error, "{said}");
    let records = gate.records("user:u-1").await;
    assert_eq!(record_at(&records, "/memories/paused.md").unwrap()["status"], "paused", "{records:#?}");
}
