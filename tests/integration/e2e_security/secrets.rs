//! Findings 6 and 7 through the admin API: the credential shapes the scanner missed are refused
//! with a 422 that names them, and the input that once panicked the scanner (dropping the
//! connection, aborting a whole import) gets its 422 like any other refused record.

use super::put_record;
use crate::e2e_identity::{ADMIN_TOKEN, managed_gateway};
use crate::support::{Proc, client};
use serde_json::{Value, json};

/// A fact whose `content` or (for secrets named by their key, which the closed v1 schemas would
/// refuse in content anyway) `metadata` holds `value`.
async fn create(gateway: &Proc, value: Value) -> (u16, Value) {
    let record = if value.get("statement").is_some() {
        json!({"type": "fact", "scope": ["public"], "content": value})
    } else {
        json!({"type": "fact", "scope": ["public"], "content": {"statement": "ok"}, "metadata": value})
    };
    let response = client()
        .post(gateway.url("/admin/v1/memories"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&record)
        .send()
        .await
        .expect("an answer, not a dropped connection");
    (response.status().as_u16(), response.json().await.unwrap())
}

#[tokio::test]
async fn every_listed_credential_shape_is_refused_and_none_panics() {
    let mock = Proc::mock(&[]);
    let gateway = managed_gateway(&mock, &[]);
    let cases = [
        (json!({"statement": "Stripe: sk_live_4eC39HqLyjWDarjtT1zdp7dc"}), "stripe_key"),
        (json!({"statement": "use mgk_0123456789abcdef_9f2c4e6a8b0d1f3e5a7c9b1d3f5e7a9c"}), "memgate_key"),
        (json!({"statement": "glpat-xK9mP2qR7vT4wZ8bN3hJ"}), "gitlab_token"),
        (json!({"statement": "AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY"}), "google_api_key"),
        (json!({"statement": "hf_aBcDeFgHiJkLmNoPqRsTuVwXyZaBcDeFgHi"}), "hugging_face_token"),
        (json!({"statement": "npm_aB3dE5fG7hJ9kL1mN3pQ5rS7tV9wX1yZ3bD5"}), "npm_token"),
        (json!({"statement": "Authorization: Bearer 7f3a9c2e8b1d4f6a0c5e9b2d"}), "bearer_token"),
        (json!({"token": "opaque"}), "password"),
        (json!({"github_token": "gh-live-1"}), "password"),
        (json!({"pass": "swordfish"}), "password"),
        (json!({"pin": "4821"}), "password"),
        (json!({"credentials": "admin/admin"}), "password"),
        (json!({"db_password": "[Xk9#pL2qR]"}), "password"),
        (json!({"statement": "postgres://app:{S3cretPw}@db/app"}), "connection_string_credential"),
        (json!({"statement": format!("password{}is Summer2024", " ".repeat(512))}), ""),
    ];
    for (content, kind) in cases {
        let (status, body) = create(&gateway, content.clone()).await;
        if kind.is_empty() {
            // Past the scanner's reach: refused or not, answered.
            assert!(status == 201 || status == 422, "{status} {body}");
            continue;
        }
        assert_eq!(status, 422, "{content} was stored: {body}");
        let problems = body["error"]["problems"].to_string();
        assert!(problems.contains(kind), "{kind} not named in {problems}");
    }
    // The process is alive and well.
    put_record(
        &gateway,
        "default",
        json!({"type": "fact", "scope": ["public"], "content": {"statement": "alive"}}),
    )
    .await;
}

#[tokio::test]
async fn an_import_with_the_input_that_once_panicked_reports_it_and_keeps_the_rest() {
    let mock = Proc::mock(&[]);
    let gateway = managed_gateway(&mock, &[]);
    let lines = [
        json!({"type": "fact", "scope": ["public"], "content": {"statement": "Shipping takes two days."}}),
        json!({"type": "fact", "scope": ["public"],
            "content": {"statement": format!("password{}is Summer2024", " ".repeat(511))}}),
        json!({"type": "fact", "scope": ["public"], "content": {"statement": "ok"}, "metadata": {"token": "opaque-7"}}),
        json!({"type": "fact", "scope": ["public"], "content": {"statement": "Returns are free."}}),
    ];
    let body: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let report: Value = client()
        .post(gateway.url("/admin/v1/import?dry_run=true"))
        .bearer_auth(ADMIN_TOKEN)
        .body(body)
        .send()
        .await
        .expect("an answer, not a dropped connection")
        .json()
        .await
        .unwrap();
    assert_eq!(report["counts"]["new"], 3, "{report}");
    assert_eq!(report["counts"]["invalid"], 1, "{report}");
}
