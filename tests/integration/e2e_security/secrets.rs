//! Through the admin API: the credential shapes the scanner missed are refused with a 422 that
//! names them (vendor tokens, `*_token` names written inside text, a value after any run of
//! blanks), and the input that once panicked the scanner (dropping the connection, aborting a
//! whole import) gets its 422 like any other refused record.

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
    ];
    for (content, kind) in cases {
        let (status, body) = create(&gateway, content.clone()).await;
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

/// A `*_token` name is caught inside text as it is as a key (`{"bot_token": "…"}` pasted into a
/// string was stored), and no run of whitespace separates a credential's name from its value
/// (past 512 blanks the value was no longer read).
#[tokio::test]
async fn token_names_inside_text_and_values_after_long_blank_runs_are_refused() {
    let mock = Proc::mock(&[]);
    let gateway = managed_gateway(&mock, &[]);
    let cases = [
        (
            json!({"statement": "bot settings", "subject": "{\"bot_token\": \"7d1f0c2a9b8e4f6a3c5d7e9f1a2b3c4d\"}"}),
            "$.content.subject",
        ),
        (json!({"statement": "deploy with slack-token=7d1f0c2a9b8e4f6a"}), "$.content.statement"),
        (json!({"statement": "config: {botToken: 'Xk9pL2qR7vT4'}"}), "$.content.statement"),
        (json!({"statement": format!("password{}is Summer2024", " ".repeat(512))}), "$.content.statement"),
        (json!({"statement": format!("password{}is Summer2024", " ".repeat(1500))}), "$.content.statement"),
        (
            json!({"statement": format!("password:{}hunter22", "\t \u{a0}\u{3000}".repeat(300))}),
            "$.content.statement",
        ),
    ];
    for (content, path) in cases {
        let (status, body) = create(&gateway, content.clone()).await;
        assert_eq!(status, 422, "{content} was stored: {body}");
        let problems = body["error"]["problems"].as_array().unwrap();
        assert!(
            problems.iter().any(|p| p["path"] == path && p["message"].as_str().unwrap().contains("password")),
            "{path} not named as a password in {problems:?}"
        );
    }
    // Cursors and counts named like tokens, and prose about tokens, are still stored.
    for content in [
        json!({"statement": "{\"next_page_token\": \"CAESBggDEAEYAQ\", \"max_tokens\": 1024}"}),
        json!({"statement": "the token_count was 1532 and input_tokens: 20"}),
        json!({"statement": "Rotate the bot token every 90 days."}),
    ] {
        let (status, body) = create(&gateway, content.clone()).await;
        assert_eq!(status, 201, "{content} was refused: {body}");
    }
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
    // The blanks no longer hide the password; the other lines are classified as before.
    assert_eq!(report["counts"]["new"], 2, "{report}");
    assert_eq!(report["counts"]["invalid"], 2, "{report}");
    let invalid: Vec<u64> = report["lines"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|line| line["status"] == "invalid")
        .map(|line| line["line"].as_u64().unwrap())
        .collect();
    assert_eq!(invalid, [2, 3], "{report}");
}
