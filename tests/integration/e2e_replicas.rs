//! Several memgate replicas on loopback sharing one PostgreSQL: what one replica writes, the
//! others serve within about a second — records (their in-memory indexes) and rollout alike.

use crate::e2e_identity::{ADMIN_TOKEN, UPSTREAM_KEY};
use crate::support::{Proc, TestDb, client, eventually};
use serde_json::{Value, json};
use std::time::Duration;

fn replica(mock: &Proc, db: &TestDb) -> Proc {
    Proc::gateway(
        mock,
        &["--database-url", db.url.as_str()],
        &[("MEMGATE_ADMIN_TOKEN", ADMIN_TOKEN), ("ANTHROPIC_API_KEY", UPSTREAM_KEY)],
    )
}

async fn explain_ids(gateway: &Proc, question: &str) -> Vec<String> {
    let body = json!({
        "request": {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": question}]},
        "caller": {"scopes": ["team:support"]},
    });
    let answer: Value = client()
        .post(gateway.url("/admin/v1/explain"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    answer["injected"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_owned()).collect()
}

#[tokio::test]
async fn replicas_on_one_postgres_serve_each_others_writes_within_seconds() {
    let db = TestDb::postgres().await;
    let mock = Proc::mock(&[]);
    let a = replica(&mock, &db);
    let b = replica(&mock, &db);
    let http = client();

    let record = json!({"id": "sop-refund", "type": "fact", "scope": ["team:support"], "key": "sop:refund-window",
        "content": {"statement": "Refunds are possible within 30 days of delivery for order ORD-2024-0615."}});
    let created =
        http.post(a.url("/admin/v1/memories")).bearer_auth(ADMIN_TOKEN).json(&record).send().await.unwrap();
    assert_eq!(created.status(), 201);
    let question = "Can I still get a refund for ORD-2024-0615?";
    assert_eq!(explain_ids(&a, question).await, ["sop-refund"]);
    eventually(Duration::from_secs(5), "replica B to serve A's new record", || async {
        (explain_ids(&b, question).await == ["sop-refund"]).then_some(())
    })
    .await;

    let deleted =
        http.delete(a.url("/admin/v1/memories/sop-refund")).bearer_auth(ADMIN_TOKEN).send().await.unwrap();
    assert_eq!(deleted.status(), 200);
    eventually(Duration::from_secs(5), "replica B to drop A's deleted record", || async {
        explain_ids(&b, question).await.is_empty().then_some(())
    })
    .await;

    let patched = http
        .patch(a.url("/admin/v1/releases/v2"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"stage": "canary", "canary_percent": 5}))
        .send()
        .await
        .unwrap();
    assert_eq!(patched.status(), 200);
    eventually(Duration::from_secs(3), "replica B to see the canary", || async {
        let listed: Value = http
            .get(b.url("/admin/v1/releases/v2"))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        (listed["rollout"]["stage"] == "canary" && listed["rollout"]["canary_percent"] == 5.0).then_some(())
    })
    .await;
}
