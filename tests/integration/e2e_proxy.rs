//! The proxy's fidelity, end to end: real binary, real mock-upstream, real sockets.

use crate::support::{Proc, client, eventually, messages_body, without_request_seq};
use futures_util::StreamExt;
use serde_json::{Value, json};
use std::time::Duration;

#[tokio::test]
async fn upstream_receives_the_body_headers_and_query_verbatim() {
    let mock = Proc::mock(&[]);
    let gateway = Proc::gateway(&mock, &[], &[]);
    // Field order, spacing and an unknown field: the upstream must get these exact bytes.
    let raw = r#"{"max_tokens": 64,"model":"claude-test","messages":[{"role":"user","content":"Hi \u00e9"}],"future_field":{"n":1.50}}"#;
    let response = client()
        .post(gateway.url("/v1/messages?beta=true&x=a%20b"))
        .header("content-type", "application/json")
        .header("anthropic-version", "2023-06-01")
        .header("anthropic-beta", "prompt-caching-2024-07-31,some-future-beta")
        .header("anthropic-dangerous-direct-browser-access", "true")
        .header("x-api-key", "sk-ant-caller-key")
        .body(raw)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);

    let recorded = mock.recorded().await;
    assert_eq!(recorded.len(), 1);
    let seen = &recorded[0];
    assert_eq!(seen["path"], "/v1/messages");
    assert_eq!(seen["query"], "beta=true&x=a%20b");
    assert_eq!(seen["body"], serde_json::from_str::<Value>(raw).unwrap());
    assert_eq!(seen["body_bytes"], raw.len());
    let headers = &seen["headers"];
    assert_eq!(headers["anthropic-version"], "2023-06-01");
    assert_eq!(headers["anthropic-beta"], "prompt-caching-2024-07-31,some-future-beta");
    assert_eq!(headers["anthropic-dangerous-direct-browser-access"], "true");
    // passthrough mode (the default) forwards the caller's own key.
    assert_eq!(headers["x-api-key"], "sk-ant-caller-key");
}

#[tokio::test]
async fn upstream_answers_come_back_unmodified_errors_included() {
    let mock = Proc::mock(&[]);
    let gateway = Proc::gateway(&mock, &[], &[]);
    let http = client();
    for model in ["claude-test", "mock-tool-use", "mock-overloaded", "mock-500", "mock-429"] {
        let body = messages_body(model, false);
        let direct = http.post(mock.url("/v1/messages")).json(&body).send().await.unwrap();
        let proxied = http.post(gateway.url("/v1/messages")).json(&body).send().await.unwrap();
        assert_eq!(direct.status(), proxied.status(), "{model}");
        for name in [
            "content-type",
            "retry-after",
            "x-should-retry",
            "anthropic-ratelimit-requests-limit",
            "anthropic-ratelimit-requests-remaining",
        ] {
            assert_eq!(direct.headers().get(name), proxied.headers().get(name), "{model}: {name}");
        }
        // The mock says when its window resets, to the second, from its own clock: two requests
        // a moment apart may straddle a second. Passed through, it is the mock's time, not ours.
        let reset = |response: &reqwest::Response| {
            let text = response.headers()["anthropic-ratelimit-requests-reset"].to_str().unwrap().to_owned();
            memgate::clock::parse_rfc3339_ms(&text).unwrap()
        };
        let (direct_reset, proxied_reset) = (reset(&direct), reset(&proxied));
        assert!(
            (0..=2_000).contains(&(proxied_reset - direct_reset)),
            "{model}: {direct_reset} then {proxied_reset}"
        );
        let request_id = proxied.headers().get("request-id").unwrap().to_str().unwrap().to_owned();
        assert!(request_id.starts_with("req_mock_"), "{model}: request-id {request_id}");
        assert!(proxied.headers().contains_key("x-memory-request-id"));
        let direct_body = without_request_seq(&direct.text().await.unwrap());
        let proxied_body = without_request_seq(&proxied.text().await.unwrap());
        assert_eq!(direct_body, proxied_body, "{model}");
        serde_json::from_str::<Value>(&proxied_body).expect("a JSON answer");
    }
    let too_many =
        http.post(gateway.url("/v1/messages")).json(&messages_body("mock-429", false)).send().await.unwrap();
    assert_eq!(too_many.headers()["retry-after"], "7");
}

#[tokio::test]
async fn a_stream_is_relayed_byte_for_byte() {
    let mock = Proc::mock(&["--deltas", "8"]);
    let gateway = Proc::gateway(&mock, &[], &[]);
    let http = client();
    for model in ["claude-test", "mock-tool-use", "mock-error-mid-stream"] {
        let body = messages_body(model, true);
        let direct = http.post(mock.url("/v1/messages")).json(&body).send().await.unwrap();
        let proxied = http.post(gateway.url("/v1/messages")).json(&body).send().await.unwrap();
        assert_eq!(proxied.headers()["content-type"], "text/event-stream");
        let direct = without_request_seq(&direct.text().await.unwrap());
        let proxied = without_request_seq(&proxied.text().await.unwrap());
        assert_eq!(direct, proxied, "{model}");
        assert!(proxied.starts_with("event: message_start\n"), "{model}: {proxied}");
    }
}

#[tokio::test]
async fn an_event_sent_before_an_upstream_pause_arrives_during_the_pause() {
    let mock = Proc::mock(&["--pause-ms", "2000"]);
    let gateway = Proc::gateway(&mock, &[], &[]);
    let response = client()
        .post(gateway.url("/v1/messages"))
        .json(&messages_body("mock-pause", true))
        .send()
        .await
        .unwrap();
    let mut body = response.bytes_stream();
    let mut received = String::new();
    while !received.contains("\n\n") {
        let chunk = body.next().await.expect("stream ended before the first event").unwrap();
        received.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(received.starts_with("event: message_start\n"), "{received}");
    // The first event is here; the upstream must still be in its pause (stream not finished),
    // which shows memgate relayed the event instead of holding it back.
    let recorded = mock.recorded().await;
    let stream = &recorded[0]["stream"];
    assert_eq!(stream["outcome"], "pending", "upstream already finished: memgate buffered ({stream})");
    // And the rest still comes through after the pause.
    while let Some(chunk) = body.next().await {
        received.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
    }
    assert!(received.contains("event: message_stop"), "{received}");
}

#[tokio::test]
async fn a_client_that_disconnects_mid_stream_closes_the_upstream_request() {
    let mock = Proc::mock(&["--delta-interval-ms", "50"]);
    let gateway = Proc::gateway(&mock, &[], &[]);
    let response = client()
        .post(gateway.url("/v1/messages"))
        .json(&messages_body("mock-long-stream", true))
        .send()
        .await
        .unwrap();
    let mut body = response.bytes_stream();
    body.next().await.unwrap().unwrap();
    drop(body);
    eventually(Duration::from_secs(1), "the upstream stream to see the client leave", || async {
        let recorded = mock.recorded().await;
        (recorded[0]["stream"]["outcome"] == "client_closed").then_some(())
    })
    .await;
}

#[tokio::test]
async fn other_v1_paths_and_methods_pass_through_with_their_query() {
    let mock = Proc::mock(&[]);
    let gateway = Proc::gateway(&mock, &[], &[]);
    let http = client();
    let direct: Value = http.get(mock.url("/v1/models")).send().await.unwrap().json().await.unwrap();
    let proxied: Value = http.get(gateway.url("/v1/models")).send().await.unwrap().json().await.unwrap();
    assert_eq!(direct, proxied);

    let upload = vec![7u8; 300_000];
    let answer: Value = http
        .post(gateway.url("/v1/files?purpose=test"))
        .body(upload.clone())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(answer["echo"]["method"], "POST");
    assert_eq!(answer["echo"]["path"], "/v1/files");
    assert_eq!(answer["echo"]["query"], "purpose=test");
    assert_eq!(answer["echo"]["body_bytes"], upload.len());

    let deleted: Value =
        http.delete(gateway.url("/v1/files/file_123")).send().await.unwrap().json().await.unwrap();
    assert_eq!(deleted["echo"]["method"], "DELETE");
    assert_eq!(deleted["echo"]["path"], "/v1/files/file_123");
}

#[tokio::test]
async fn an_unreachable_upstream_is_a_retryable_5xx_that_says_so() {
    // Bind and drop a listener to get a port nobody listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let gateway = Proc::gateway_to(&format!("http://127.0.0.1:{port}"), &[], &[]);
    let response = client()
        .post(gateway.url("/v1/messages"))
        .json(&messages_body("claude-test", false))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 502);
    assert_eq!(response.headers()["x-should-retry"], "true");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], "api_error");
    assert!(body["error"]["message"].as_str().unwrap().contains("unreachable"), "{body}");
}

#[tokio::test]
async fn a_slow_upstream_is_a_timeout_error() {
    let mock = Proc::mock(&["--slow-first-byte-ms", "3000"]);
    let config = std::env::temp_dir().join(format!("memgate-timeout-{}.toml", std::process::id()));
    std::fs::write(&config, "[upstream]\nfirst_byte_timeout_ms = 200\n").unwrap();
    let gateway = Proc::gateway(&mock, &["--config", config.to_str().unwrap()], &[]);
    let response = client()
        .post(gateway.url("/v1/messages"))
        .json(&messages_body("mock-slow-first-byte", false))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 504);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["type"], "timeout_error");
    assert!(body["error"]["message"].as_str().unwrap().contains("first_byte_timeout_ms"), "{body}");
}

/// Text logs written to a pipe or a file (what a service manager or a container runtime
/// collects) carry the words, not a terminal's colour codes around every field.
#[tokio::test]
async fn text_logs_to_a_pipe_carry_no_terminal_colour_codes() {
    let mock = Proc::mock(&[]);
    let gateway = Proc::gateway(&mock, &[], &[]);
    let response = client()
        .post(gateway.url("/v1/messages"))
        .header("x-api-key", "sk-ant-caller-key")
        .json(&messages_body("claude-test", false))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let logs = eventually(Duration::from_secs(5), "a request log line", || async {
        let logs = gateway.stderr();
        logs.contains("answered").then_some(logs)
    })
    .await;
    assert!(logs.contains("status=200"), "{logs}");
    assert!(!logs.contains('\u{1b}'), "an escape code in the log:\n{logs:?}");
}

#[tokio::test]
async fn logs_carry_neither_bodies_nor_credentials() {
    let mock = Proc::mock(&[]);
    let gateway = Proc::gateway(&mock, &["--log-format", "json"], &[]);
    let http = client();
    let body = json!({
        "model": "claude-test",
        "max_tokens": 5,
        "messages": [{"role": "user", "content": "body-marker-7f3a"}],
    });
    for path in ["/v1/messages", "/v1/messages?token=query-marker-91bc", "/v1/models"] {
        http.post(gateway.url(path))
            .header("x-api-key", "sk-ant-log-canary-key")
            .header("authorization", "Bearer log-canary-jwt")
            .json(&body)
            .send()
            .await
            .unwrap();
    }
    http.post(gateway.url("/v1/messages")).body("{not json body-marker-7f3a").send().await.unwrap();
    let logs = eventually(Duration::from_secs(5), "four request log lines", || async {
        let logs = gateway.stderr();
        (logs.matches("\"answered\"").count() >= 4).then_some(logs)
    })
    .await;
    for secret in ["body-marker-7f3a", "query-marker-91bc", "log-canary-key", "log-canary-jwt"] {
        assert!(!logs.contains(secret), "`{secret}` appeared in the log:\n{logs}");
    }
    for line in logs.lines().filter(|l| l.contains("\"answered\"")) {
        let entry: Value = serde_json::from_str(line).expect("json log line");
        assert!(entry["request_id"].as_str().unwrap().starts_with("mgr_"), "{line}");
    }
}
