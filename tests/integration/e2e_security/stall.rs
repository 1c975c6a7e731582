//! One request once stopped the gateway. Finding the person's words
//! restarted a search to the end of the text at every `<`, synchronously, before the
//! nothing-visible shortcut: 1 MiB of `"<a<a<a…"` cost 21 s of CPU, a 4 MiB one several
//! minutes, while `/healthz` waited behind it. Now the scan is one pass (a tag is looked for only
//! within a small window, a long text is read at its end), the body is read only for a caller
//! memory can serve, and large bodies are worked on off the async workers, a few at a time.
//!
//! The cost in CPU and `/healthz`'s latency under ten 32 MiB bodies are measured by
//! `loadtest/harness/stall.py` (docs/benchmarks.md); here the gateway must answer such bodies,
//! with memory, and keep answering everyone else while they run.

use super::{config_file, put_record};
use crate::e2e_identity::ADMIN_TOKEN;
use crate::support::{Proc, client};
use serde_json::json;

const KEY: &str = "sk-ant-api03-stall-test";

/// A Messages request whose first user turn is `"<a"` repeated to `size` bytes, and whose last
/// asks a question: every user turn is read for the person's words, the flood too.
fn tag_flood(size: usize) -> String {
    json!({"model": "claude-test", "max_tokens": 16, "messages": [
        {"role": "user", "content": "<a".repeat(size / 2)},
        {"role": "assistant", "content": "I see a lot of tags."},
        {"role": "user", "content": "What is your refund policy for orders delivered last week?"},
    ]})
    .to_string()
}

#[tokio::test]
async fn a_flood_of_tags_is_answered_with_memory_and_the_gateway_keeps_serving() {
    let mock = Proc::mock(&["--api-key", KEY]);
    let (_dir, config) = config_file("");
    let gateway = Proc::gateway(&mock, &["--config", &config], &[("MEMGATE_ADMIN_TOKEN", ADMIN_TOKEN)]);
    put_record(
        &gateway,
        "default",
        json!({"type": "fact", "scope": ["public"], "key": "refund-policy",
            "content": {"statement": "Refunds within 30 days of delivery, our refund policy."}}),
    )
    .await;
    let http = client();
    let send = |body: String| {
        http.post(gateway.url("/v1/messages"))
            .header("x-api-key", KEY)
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    // Before the fix each of these cost minutes of CPU; two at once held both async workers.
    let floods = [tag_flood(4 << 20), tag_flood(4 << 20)];
    let [first, second] = floods.map(|body| tokio::spawn(send(body)));
    // While they run, everyone else is answered.
    let health = http.get(gateway.url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);
    let small = send(tag_flood(64)).await.unwrap();
    assert_eq!(small.status(), 200);
    for answer in [first.await.unwrap().unwrap(), second.await.unwrap().unwrap()] {
        assert_eq!(answer.status(), 200);
        assert_eq!(
            answer.headers().get("x-memory-injected").and_then(|v| v.to_str().ok()),
            Some("1"),
            "the question after the flood found its record"
        );
    }
}
