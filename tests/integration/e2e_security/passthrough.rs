//! In passthrough mode only the upstream can judge a caller's key. Memory work (an
//! embedding run) is done only for keys the upstream has accepted (checked once per key with a
//! cheap upstream call); requests with other keys count against the client's address; and memory
//! headers appear only on successful answers, so an unauthenticated prober learns nothing about
//! records from a 401.

use super::{config_file, memory_headers, put_record};
use crate::e2e_identity::ADMIN_TOKEN;
use crate::support::{Proc, client};
use serde_json::{Value, json};

const GOOD_KEY: &str = "sk-ant-api03-the-one-real-key";

fn refund_record() -> Value {
    json!({"type": "fact", "scope": ["public"], "key": "refund-policy",
        "content": {"statement": "Refunds within 30 days of delivery, our refund policy."}})
}

fn refund_question() -> Value {
    json!({"model": "claude-test", "max_tokens": 16,
        "messages": [{"role": "user", "content": "What is your refund policy?"}]})
}

async fn query_embeddings(gateway: &Proc) -> u64 {
    let text = client().get(gateway.url("/metrics")).send().await.unwrap().text().await.unwrap();
    text.lines()
        .filter(|l| l.starts_with("memgate_query_embeddings_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

fn gateway(mock: &Proc, config: &str) -> Proc {
    Proc::gateway(mock, &["--config", config], &[("MEMGATE_ADMIN_TOKEN", ADMIN_TOKEN)])
}

#[tokio::test]
async fn memory_waits_for_a_key_the_upstream_accepted() {
    let mock = Proc::mock(&["--api-key", GOOD_KEY]);
    let (_dir, config) = config_file("");
    let gateway = gateway(&mock, &config);
    put_record(&gateway, "default", refund_record()).await;
    let http = client();
    let send = |key: &'static str| {
        http.post(gateway.url("/v1/messages")).header("x-api-key", key).json(&refund_question()).send()
    };

    // A made-up key: the upstream refuses it when asked, and the request's 401 comes back as it
    // is, with nothing about memory.
    let refused = send("sk-ant-made-up").await.unwrap();
    assert_eq!(refused.status(), 401);
    assert_eq!(memory_headers(&refused), Vec::<String>::new());
    assert_eq!(query_embeddings(&gateway).await, 0, "the embedder ran for a key nobody accepted");
    let sent = mock.recorded().await;
    let paths: Vec<&str> = sent.iter().map(|r| r["path"].as_str().unwrap()).collect();
    assert_eq!(paths, ["/v1/models", "/v1/messages"]);
    assert!(!sent[1]["body"].to_string().contains("MEMORY_CONTEXT"), "memory went out with a made-up key");

    // The real key: checked once, then memory from its first request on.
    for _ in 0..2 {
        let answer = send(GOOD_KEY).await.unwrap();
        assert_eq!(answer.status(), 200);
        assert_eq!(answer.headers()["x-memory-injected"], "1");
    }
    let sent = mock.recorded().await;
    let paths: Vec<&str> = sent.iter().map(|r| r["path"].as_str().unwrap()).collect();
    assert_eq!(paths, ["/v1/models", "/v1/messages", "/v1/models", "/v1/messages", "/v1/messages"]);
    assert!(sent[3]["body"].to_string().contains("MEMORY_CONTEXT"));
    assert_eq!(sent[2]["headers"]["x-api-key"], GOOD_KEY, "the check used the caller's own key");
}

#[tokio::test]
async fn made_up_keys_count_against_the_clients_address_and_accepted_keys_do_not() {
    let mock = Proc::mock(&["--api-key", GOOD_KEY]);
    let (_dir, config) = config_file("[auth]\npreauth_rate_limit_per_minute = 5\n");
    let gateway = gateway(&mock, &config);
    put_record(&gateway, "default", refund_record()).await;
    let http = client();
    let mut statuses = Vec::new();
    for i in 0..8 {
        let response = http
            .post(gateway.url("/v1/messages"))
            .header("x-api-key", format!("sk-ant-random-{i}"))
            .json(&refund_question())
            .send()
            .await
            .unwrap();
        statuses.push(response.status().as_u16());
    }
    // The sixth made-up key on: memgate's own 429, and the upstream never hears of them (each of
    // the first five cost one key check and the request itself).
    assert_eq!(statuses, [401, 401, 401, 401, 401, 429, 429, 429]);
    assert_eq!(mock.recorded().await.len(), 10);

    // An accepted key is not unauthenticated work: it is not held to that limit. (Accepted on
    // another address's behalf would do as well; here it was accepted before the flood.)
    let mock = Proc::mock(&["--api-key", GOOD_KEY]);
    let gateway = gateway_with_accepted_key(&mock, &config).await;
    for _ in 0..12 {
        let response = http
            .post(gateway.url("/v1/messages"))
            .header("x-api-key", GOOD_KEY)
            .json(&refund_question())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
    }
}

/// A gateway whose one accepted key is GOOD_KEY (its first request went through).
async fn gateway_with_accepted_key(mock: &Proc, config: &str) -> Proc {
    let gateway = gateway(mock, config);
    let first = client()
        .post(gateway.url("/v1/messages"))
        .header("x-api-key", GOOD_KEY)
        .json(&refund_question())
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), 200);
    gateway
}
