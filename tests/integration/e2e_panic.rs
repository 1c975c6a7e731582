//! A handler that panics answers 500 `api_error` in Anthropic's shape, and the process keeps
//! serving (`src/http/panic.rs`). The panicking route exists only in debug builds started with
//! `MEMGATE_TEST_PANIC_ROUTE=1`.

use crate::support::{Proc, client};
use serde_json::Value;

#[tokio::test]
async fn a_panicking_handler_answers_500_in_anthropics_shape_and_the_process_keeps_serving() {
    let mock = Proc::mock(&[]);
    let gateway = Proc::gateway(&mock, &[], &[("MEMGATE_TEST_PANIC_ROUTE", "1")]);
    let http = client();
    for _ in 0..3 {
        let answer = http.get(gateway.url("/_test/panic")).send().await.unwrap();
        assert_eq!(answer.status(), 500);
        assert!(answer.headers().contains_key("x-memory-request-id"), "observe saw the answer");
        let body: Value = answer.json().await.unwrap();
        assert_eq!(body["type"], "error");
        assert_eq!(body["error"]["type"], "api_error");
        assert_eq!(body["error"]["code"], "internal");
        // What panicked stays in the log.
        assert!(!body.to_string().contains("asked to"), "{body}");
    }
    assert!(gateway.stderr().contains("the test route panicked"), "the panic is logged");
    let health = http.get(gateway.url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200, "the process still serves");
    let messages = http
        .post(gateway.url("/v1/messages"))
        .header("x-api-key", "sk-ant-test")
        .header("content-type", "application/json")
        .body(r#"{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(messages.status(), 200);
}

#[tokio::test]
async fn without_the_test_setting_there_is_no_panicking_route() {
    let mock = Proc::mock(&[]);
    let gateway = Proc::gateway(&mock, &[], &[]);
    let answer = client().get(gateway.url("/_test/panic")).send().await.unwrap();
    assert_eq!(answer.status(), 404);
}
