//! Naming a new subject on every request must not buy a fresh allowance; the key's
//! own bucket is charged too.

use super::error_of;
use crate::e2e_identity::{issue_key, managed_gateway};
use crate::support::{Proc, client, messages_body};
use serde_json::json;

#[tokio::test]
async fn rotating_subjects_does_not_multiply_a_keys_limit() {
    let mock = Proc::mock(&[]);
    let gateway = managed_gateway(&mock, &[]);
    let (key, _) = issue_key(
        &gateway,
        "default",
        json!({"name": "bot", "permissions": ["assert_subject"], "rate_limit_per_minute": 3}),
    )
    .await;
    let http = client();
    let mut statuses = Vec::new();
    for i in 0..6 {
        let response = http
            .post(gateway.url("/v1/messages"))
            .header("x-api-key", &key)
            .header("x-memory-subject", format!("u-{i}"))
            .json(&messages_body("claude-test", false))
            .send()
            .await
            .unwrap();
        statuses.push(response.status().as_u16());
        if response.status() == 429 {
            let (_, error) = error_of(response).await;
            assert_eq!(error["type"], "rate_limit_error");
        }
    }
    assert_eq!(statuses, [200, 200, 200, 429, 429, 429]);
    assert_eq!(mock.recorded().await.len(), 3);
}
