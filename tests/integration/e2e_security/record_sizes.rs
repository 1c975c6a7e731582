//! A write is checked for size before anything reads its values, and one answer names a bounded
//! number of problems. `{"pwd": [0, 0, …]}` (300 KB of content) once took 15 s of CPU, one
//! secret per element found by a quadratic duplicate check, and came back as a 15 MB 422.

use crate::e2e_identity::{ADMIN_TOKEN, managed_gateway};
use crate::support::{Proc, client};
use serde_json::{Value, json};

/// Problems one answer names before it counts the rest (`problems::MAX_PROBLEMS`).
const NAMED: usize = 100;

async fn create(gateway: &Proc, record: &Value) -> (u16, usize, Value) {
    let response = client()
        .post(gateway.url("/admin/v1/memories"))
        .bearer_auth(ADMIN_TOKEN)
        .json(record)
        .send()
        .await
        .expect("an answer");
    let status = response.status().as_u16();
    let bytes = response.bytes().await.unwrap();
    (status, bytes.len(), serde_json::from_slice(&bytes).unwrap())
}

fn zeros(n: usize) -> Value {
    json!(vec![0; n])
}

#[tokio::test]
async fn content_over_the_size_limit_is_refused_unread_with_one_problem() {
    let mock = Proc::mock(&[]);
    let gateway = managed_gateway(&mock, &[]);
    for (field, record) in [
        ("content", json!({"type": "fact", "scope": ["public"], "content": {"pwd": zeros(100_000)}})),
        (
            "metadata",
            json!({"type": "fact", "scope": ["public"], "content": {"statement": "ok"},
                "metadata": {"pwd": zeros(100_000)}}),
        ),
    ] {
        let (status, size, body) = create(&gateway, &record).await;
        assert_eq!(status, 422, "{body}");
        let problems = body["error"]["problems"].as_array().unwrap();
        let named: Vec<(&str, &str)> =
            problems.iter().map(|p| (p["path"].as_str().unwrap(), p["kind"].as_str().unwrap())).collect();
        assert_eq!(named, [(format!("$.{field}").as_str(), "too_large")], "{body}");
        assert!(size < 2_000, "a {size}-byte answer for one problem");
    }
}

#[tokio::test]
async fn an_answer_names_the_first_hundred_problems_and_counts_the_rest() {
    let mock = Proc::mock(&[]);
    let gateway = managed_gateway(&mock, &[]);
    // Within the size limit (64 KiB), one secret per element.
    let record = json!({"type": "fact", "scope": ["public"], "content": {"statement": "ok"},
        "metadata": {"pwd": zeros(20_000)}});
    let (status, size, body) = create(&gateway, &record).await;
    assert_eq!(status, 422, "{body}");
    let problems = body["error"]["problems"].as_array().unwrap();
    assert_eq!(problems.len(), NAMED + 1, "{size} bytes");
    assert_eq!(problems[0]["path"], "$.metadata.pwd[0]");
    assert_eq!(problems[NAMED - 1]["path"], format!("$.metadata.pwd[{}]", NAMED - 1));
    let last = &problems[NAMED];
    assert_eq!((last["path"].as_str(), last["kind"].as_str()), (Some("$"), Some("too_many_problems")));
    let more = 20_000 - NAMED;
    assert!(last["message"].as_str().unwrap().contains(&format!("… and {more} more")), "{last}");
    assert!(size < 40_000, "a {size}-byte answer");
    // Many unknown fields are counted the same way.
    let mut record = json!({"type": "fact", "scope": ["public"], "content": {"statement": "ok"}});
    for i in 0..3_000 {
        record[format!("field_{i}")] = json!(1);
    }
    let (status, size, body) = create(&gateway, &record).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["problems"].as_array().unwrap().len(), NAMED + 1, "{size} bytes");
}
