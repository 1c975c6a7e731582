//! `explain` lists the memory tools a caller would be offered: what its key's permissions and the
//! release allow, in the order memgate appends them.

use super::{Gate, TENANT};
use crate::e2e_identity::ADMIN_TOKEN;
use crate::support::client;
use serde_json::{Value, json};

async fn explained_tools(gate: &Gate, key_id: &str, release: Option<&str>) -> Value {
    let mut body = json!({"request": {"model": "m", "max_tokens": 8,
        "messages": [{"role": "user", "content": "What did we decide about the staging branch?"}]},
        "caller": {"key_id": key_id}});
    if let Some(release) = release {
        body["release"] = json!(release);
    }
    let response = client()
        .post(gate.gw.url("/admin/v1/explain"))
        .bearer_auth(ADMIN_TOKEN)
        .header("x-memory-tenant", TENANT)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let explained: Value = response.json().await.unwrap();
    explained["tools"].clone()
}

#[tokio::test]
async fn explain_lists_the_tools_a_caller_would_get() {
    let gate = Gate::start("[releases.v2]\nmemory_tools = \"read\"\n", &[]);
    let writer = gate.key(&["memory_write_tools"]).await;
    let reader = gate.key(&["memory_read_tools"]).await;
    let plain = gate.key(&[]).await;
    let all =
        json!(["memory_search", "memory_get", "memory_list", "memory_add", "memory_update", "memory_delete"]);
    let read = json!(["memory_search", "memory_get", "memory_list"]);
    assert_eq!(explained_tools(&gate, &writer.id, None).await, all);
    assert_eq!(explained_tools(&gate, &reader.id, None).await, read);
    assert_eq!(explained_tools(&gate, &plain.id, None).await, json!([]));
    // The release caps what its callers get, whatever the key holds.
    assert_eq!(explained_tools(&gate, &writer.id, Some("v2")).await, read);
}
