//! Calls the upstream refused for their credential said nothing
//! about a release, yet counted as healthy calls in its figures, so a flood of made-up keys could
//! dilute a bad canary's error rate until its guard never fired. Such calls no longer count.

use super::config_file;
use crate::e2e_identity::ADMIN_TOKEN;
use crate::support::{Proc, client};
use serde_json::{Value, json};

const GOOD_KEY: &str = "sk-ant-api03-the-one-real-key";

async fn calls(gateway: &Proc) -> u64 {
    let stats: Value = client()
        .get(gateway.url("/admin/v1/releases/v1/stats"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    stats["stats"]["calls"].as_u64().unwrap()
}

#[tokio::test]
async fn refused_credentials_do_not_count_as_a_releases_healthy_calls() {
    let mock = Proc::mock(&["--api-key", GOOD_KEY]);
    let (_dir, config) = config_file("");
    let gateway = Proc::gateway(&mock, &["--config", &config], &[("MEMGATE_ADMIN_TOKEN", ADMIN_TOKEN)]);
    let http = client();
    let body =
        json!({"model": "claude-test", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]});
    for i in 0..10 {
        let refused = http
            .post(gateway.url("/v1/messages"))
            .header("x-api-key", format!("sk-ant-made-up-{i}"))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(refused.status(), 401);
    }
    assert_eq!(calls(&gateway).await, 0, "401s counted as the release's calls");
    let answered = http
        .post(gateway.url("/v1/messages"))
        .header("x-api-key", GOOD_KEY)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(answered.status(), 200);
    assert_eq!(calls(&gateway).await, 1);
}
