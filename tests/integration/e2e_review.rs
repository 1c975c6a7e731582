//! The review of proposed records through the real binary: the queue (`GET /admin/v1/memories?
//! status=proposed` with its filters), approve, edit then approve, reject, and the bulk calls, each
//! id answered on its own. A proposed record is never injected; an approved one is, in the next
//! request the mock upstream receives.

use crate::e2e_identity::{ADMIN_TOKEN, issue_key, managed_gateway};
use crate::support::{Proc, client};
use serde_json::{Value, json};

async fn admin(gw: &Proc, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
    let mut request = client().request(method, gw.url(&format!("/admin/v1{path}"))).bearer_auth(ADMIN_TOKEN);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

async fn post(gw: &Proc, path: &str, body: Value) -> (u16, Value) {
    admin(gw, reqwest::Method::POST, path, Some(body)).await
}

async fn queue(gw: &Proc, filters: &str) -> Vec<String> {
    let (status, body) =
        admin(gw, reqwest::Method::GET, &format!("/memories?status=proposed{filters}"), None).await;
    assert_eq!(status, 200, "{body}");
    body["data"].as_array().unwrap().iter().map(|r| r["id"].as_str().unwrap().to_owned()).collect()
}

/// What the upstream received for one request with `text` as the person's words.
async fn sent_upstream(gw: &Proc, mock: &Proc, key: &str, text: &str) -> String {
    let body =
        json!({"model": "claude-mock", "max_tokens": 64, "messages": [{"role": "user", "content": text}]});
    let response = client()
        .post(gw.url("/v1/messages"))
        .header("x-api-key", key)
        .header("anthropic-version", "2023-06-01")
        .header("x-memory-subject", "u-7")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    mock.recorded().await.last().unwrap()["body"].to_string()
}

fn proposed(id: &str, record_type: &str, scope: &str, content: Value) -> Value {
    json!({"id": id, "type": record_type, "scope": [scope], "status": "proposed", "content": content,
        "metadata": {"evidence": "I like my answers short, please."}})
}

/// Done when (review): the queue lists only proposed records, filtered by subject, type and
/// author, with their evidence; approving one makes the next request inject it; an edit is
/// checked like any write and approved in the same write; reject deletes only proposed records;
/// bulk calls answer each id and are bounded.
#[tokio::test]
async fn e2e_review_queue_approve_edit_reject_and_bulk() {
    let mock = Proc::mock(&[]);
    let gw = managed_gateway(&mock, &[]);
    let (key, _) = issue_key(&gw, "default", json!({"name": "bot", "permissions": ["assert_subject"]})).await;
    let tone = proposed(
        "mem-tone",
        "preference",
        "user:u-7",
        json!({"topic": "tone", "preference": "Short answers about the garden shed."}),
    );
    let shed = proposed(
        "mem-shed",
        "fact",
        "user:u-7",
        json!({"statement": "The garden shed key is under the blue pot."}),
    );
    let other =
        proposed("mem-other", "fact", "user:u-8", json!({"statement": "Another person's shed is green."}));
    let bulk_a =
        proposed("mem-bulk-a", "fact", "user:u-7", json!({"statement": "The greenhouse opens at nine."}));
    let bulk_b =
        proposed("mem-bulk-b", "fact", "user:u-7", json!({"statement": "The compost bin is by the gate."}));
    let live = json!({"id": "mem-live", "type": "fact", "scope": ["user:u-7"], "content": {"statement": "The hose is in the garage."}});
    for record in [&tone, &shed, &other, &bulk_a, &bulk_b, &live] {
        let (status, body) = post(&gw, "/memories", record.clone()).await;
        assert_eq!(status, 201, "{body}");
    }

    // The queue and its filters.
    assert_eq!(queue(&gw, "").await, ["mem-bulk-a", "mem-bulk-b", "mem-other", "mem-shed", "mem-tone"]);
    assert_eq!(queue(&gw, "&scope=user:u-7&type=preference").await, ["mem-tone"]);
    assert_eq!(queue(&gw, "&scope=user:u-8").await, ["mem-other"]);
    assert_eq!(queue(&gw, "&author=admin:admin&type=fact&limit=2").await, ["mem-bulk-a", "mem-bulk-b"]);
    assert!(queue(&gw, "&author=observer").await.is_empty());
    let (_, item) = admin(&gw, reqwest::Method::GET, "/memories/mem-shed", None).await;
    assert_eq!(item["metadata"]["evidence"], "I like my answers short, please.", "{item}");
    assert_eq!(item["author"], "admin:admin");

    // Proposed: never injected.
    let sent = sent_upstream(&gw, &mock, &key, "Where is the garden shed key?").await;
    assert!(!sent.contains("mem-shed"), "a proposed record was injected: {sent}");

    // Approve as it is: the next request injects it.
    let (status, approved) = post(&gw, "/memories/mem-shed/activate", json!(null)).await;
    assert_eq!((status, approved["status"].as_str()), (200, Some("active")), "{approved}");
    let sent = sent_upstream(&gw, &mock, &key, "Where is the garden shed key?").await;
    assert!(sent.contains("mem-shed"), "the approved record is injected: {sent}");

    // Edit then approve: a bad edit is refused with its path and changes nothing.
    let (status, refused) = post(&gw, "/memories/mem-tone/activate", json!({"content": {"topic": ""}})).await;
    assert_eq!(status, 422, "{refused}");
    assert_eq!(refused["error"]["code"], "validation_failed");
    let (_, still) = admin(&gw, reqwest::Method::GET, "/memories/mem-tone", None).await;
    assert_eq!(still["status"], "proposed");
    let edit = json!({"content": {"topic": "tone", "preference": "Short answers, in British English."}});
    let (status, edited) = post(&gw, "/memories/mem-tone/activate", edit).await;
    assert_eq!(status, 200, "{edited}");
    assert_eq!(
        (edited["status"].as_str(), edited["revision"].as_i64()),
        (Some("active"), Some(2)),
        "{edited}"
    );
    assert_eq!(edited["content"]["preference"], "Short answers, in British English.");

    // Bulk reject: each id on its own; a live record is not rejected, an unknown one is named.
    let (status, rejected) =
        post(&gw, "/memories/reject", json!({"ids": ["mem-other", "mem-live", "mem-nope", "mem-other"]}))
            .await;
    assert_eq!(status, 200, "{rejected}");
    assert_eq!((rejected["done"].as_u64(), rejected["failed"].as_u64()), (Some(1), Some(2)), "{rejected}");
    let by_id =
        |id: &str| rejected["data"].as_array().unwrap().iter().find(|r| r["id"] == id).unwrap().clone();
    assert_eq!(by_id("mem-other")["deleted"], true);
    assert_eq!(by_id("mem-live")["error"]["code"], "not_proposed");
    assert_eq!(by_id("mem-nope")["error"]["code"], "not_found");
    let (status, _) = admin(&gw, reqwest::Method::GET, "/memories/mem-other", None).await;
    assert_eq!(status, 404, "a rejected record is gone");
    let (_, kept) = admin(&gw, reqwest::Method::GET, "/memories/mem-live", None).await;
    assert_eq!(kept["status"], "active");

    // Bulk approve.
    let (status, activated) =
        post(&gw, "/memories/activate", json!({"ids": ["mem-bulk-a", "mem-bulk-b"]})).await;
    assert_eq!((status, activated["done"].as_u64()), (200, Some(2)), "{activated}");
    assert!(queue(&gw, "").await.is_empty(), "the queue is empty");

    // Bounded, and said so.
    let many: Vec<String> = (0..101).map(|i| format!("mem-{i}")).collect();
    let (status, too_many) = post(&gw, "/memories/reject", json!({"ids": many})).await;
    assert_eq!(status, 400, "{too_many}");
    assert!(too_many["error"]["message"].as_str().unwrap().contains("1 to 100"), "{too_many}");
    let (status, _) = post(&gw, "/memories/activate", json!({"ids": []})).await;
    assert_eq!(status, 400);
}
