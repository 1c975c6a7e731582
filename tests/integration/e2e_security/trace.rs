//! `X-Memory-Debug` on the proxy path shows a trace of what the caller may see. Other
//! users' records are neither named nor counted; an admin's `explain` still shows everything.

use super::{config_file, put_record};
use crate::e2e_identity::{ADMIN_TOKEN, issue_key, managed_gateway};
use crate::support::{Proc, client};
use serde_json::{Value, json};

fn fact(id: &str, scope: &str, statement: &str) -> Value {
    json!({"id": id, "type": "fact", "scope": [scope], "content": {"statement": statement}})
}

#[tokio::test]
async fn a_callers_trace_names_nothing_it_may_not_see() {
    let mock = Proc::mock(&[]);
    let gateway = managed_gateway(&mock, &[]);
    put_record(&gateway, "default", fact("mine-1", "user:u-1", "My parcel goes to the Berlin office.")).await;
    put_record(&gateway, "default", fact("public-1", "public", "Support answers within one working day."))
        .await;
    for i in 0..5 {
        let id = format!("secret-of-u2-{i}");
        // Different figures, so that no write counts as a near twin of another.
        let statement = format!("Their parcel {i} goes to the Paris office on floor {}.", i + 10);
        put_record(&gateway, "default", fact(&id, "user:u-2", &statement)).await;
    }
    let (key, _) =
        issue_key(&gateway, "default", json!({"name": "bot", "permissions": ["assert_subject", "debug"]}))
            .await;
    let body = json!({"model": "claude-test", "max_tokens": 16,
        "messages": [{"role": "user", "content": "Where does my parcel go?"}]});
    let response = client()
        .post(gateway.url("/v1/messages"))
        .header("x-api-key", &key)
        .header("x-memory-subject", "u-1")
        .header("x-memory-debug", "1")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let header = response.headers()["x-memory-trace"].to_str().unwrap().to_owned();
    assert!(!header.contains("secret-of-u2"), "the trace names another user's records: {header}");
    let trace: Value = serde_json::from_str(&header).unwrap();
    let scope = &trace["trace"]["layers"].as_array().unwrap().iter().find(|l| l["layer"] == "scope").unwrap();
    // The caller sees two records; the tenant's seven stay untold.
    assert_eq!((scope["input"].as_u64(), scope["output"].as_u64()), (Some(2), Some(2)), "{scope}");
    assert_eq!(scope["removed_count"], 0, "{scope}");

    // The admin's explain of the same caller tells all.
    let explained: Value = client()
        .post(gateway.url("/admin/v1/explain"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"request": body, "caller": {"subject": "u-1"}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let scope = explained["trace"]["layers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["layer"] == "scope")
        .unwrap()
        .clone();
    assert_eq!((scope["input"].as_u64(), scope["removed_count"].as_u64()), (Some(7), Some(5)), "{scope}");
    assert!(scope.to_string().contains("secret-of-u2-0"), "{scope}");
}

#[tokio::test]
async fn a_long_trace_is_cut_to_fit_a_header() {
    let mock = Proc::mock(&[]);
    // A threshold nothing reaches: every record is removed by the semantic layer, with a reason.
    let (_dir, config) = config_file("[embedding]\nsimilarity_threshold = 0.999\n");
    let gateway = managed_gateway(&mock, &["--config", &config]);
    let long = "x".repeat(120);
    let lines: String = (0..60)
        .map(|i| {
            json!({"id": format!("{long}-{i}"), "type": "fact", "scope": ["public"],
                "content": {"statement": format!("Unrelated note number {i}")}})
            .to_string()
                + "\n"
        })
        .collect();
    let imported = client()
        .post(gateway.url("/admin/v1/import"))
        .bearer_auth(ADMIN_TOKEN)
        .body(lines)
        .send()
        .await
        .unwrap();
    assert_eq!(imported.status(), 201, "{}", imported.text().await.unwrap());
    let (key, _) = issue_key(&gateway, "default", json!({"name": "bot", "permissions": ["debug"]})).await;
    let response = client()
        .post(gateway.url("/v1/messages"))
        .header("x-api-key", &key)
        .header("x-memory-debug", "1")
        .json(&json!({"model": "claude-test", "max_tokens": 16,
            "messages": [{"role": "user", "content": "What about the weather?"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let header = response.headers()["x-memory-trace"].to_str().unwrap();
    assert!(header.len() <= 6 * 1024, "{} bytes", header.len());
    let trace: Value = serde_json::from_str(header).unwrap();
    assert_eq!(trace["truncated"], true, "{trace}");
    let semantic =
        trace["trace"]["layers"].as_array().unwrap().iter().find(|l| l["layer"] == "semantic").unwrap();
    assert_eq!(semantic["removed_count"], 60, "the counts stay: {semantic}");
}
