//! In-process tests of the mock: the router driven with `oneshot`.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use axum::Router;
use axum::body::Body;
use bytes::Bytes;
use clap::Parser;
use futures_util::StreamExt;
use http::{HeaderMap, Method, Request, StatusCode};
use serde_json::{Value, json};
use tower::ServiceExt;

use super::{MockArgs, router};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: MockArgs,
}

pub(super) fn args(flags: &[&str]) -> MockArgs {
    Cli::parse_from(std::iter::once("mock-upstream").chain(flags.iter().copied())).args
}

pub(super) fn messages_body(model: &str, stream: bool) -> Value {
    json!({
        "model": model,
        "max_tokens": 64,
        "stream": stream,
        "messages": [
            {"role": "user", "content": "first question"},
            {"role": "assistant", "content": "an answer"},
            {"role": "user", "content": [{"type": "text", "text": "What is the weather in Paris today?"}]},
        ],
    })
}

pub(super) fn request(method: Method, uri: &str, body: impl Into<Body>) -> Request<Body> {
    Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", "application/json")
        .header("anthropic-version", "2023-06-01")
        .body(body.into())
        .expect("request")
}

async fn send(app: &Router, req: Request<Body>) -> (StatusCode, HeaderMap, Bytes) {
    let response = app.clone().oneshot(req).await.expect("infallible");
    let (parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX).await.expect("body");
    (parts.status, parts.headers, bytes)
}

pub(super) async fn post_json(app: &Router, path: &str, body: &Value) -> (StatusCode, HeaderMap, Bytes) {
    send(app, request(Method::POST, path, body.to_string())).await
}

pub(super) fn json_of(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).expect("a JSON body")
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> &'a str {
    headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default()
}

/// Parses an SSE body, checking each event is exactly `event: NAME\ndata: JSON\n\n`.
fn sse_events(bytes: &[u8]) -> Vec<(String, Value)> {
    let text = std::str::from_utf8(bytes).expect("utf-8");
    assert!(text.ends_with("\n\n"), "body ends with a blank line: {text:?}");
    text.trim_end_matches("\n\n")
        .split("\n\n")
        .map(|event| {
            let (name_line, data_line) = event.split_once('\n').expect("two lines");
            let name = name_line.strip_prefix("event: ").expect("event line");
            let data = data_line.strip_prefix("data: ").expect("data line");
            let type_first = format!("{{\"type\":\"{name}\"");
            assert!(data.starts_with(&type_first), "wire order: {data}");
            let data: Value = serde_json::from_str(data).expect("data JSON");
            assert_eq!(data["type"], name, "event name matches data type");
            (name.to_owned(), data)
        })
        .collect()
}

fn names(events: &[(String, Value)]) -> Vec<&str> {
    events.iter().map(|(name, _)| name.as_str()).collect()
}

pub(super) async fn recorded(app: &Router) -> Vec<Value> {
    let (status, _, body) = send(app, request(Method::GET, "/_mock/requests", Body::empty())).await;
    assert_eq!(status, StatusCode::OK);
    json_of(&body)["requests"].as_array().cloned().expect("requests array")
}

fn assert_error(status: StatusCode, body: &[u8], want: u16, kind: &str) {
    assert_eq!(status.as_u16(), want);
    let body = json_of(body);
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], kind);
    assert!(body["error"]["message"].is_string());
    assert!(body["request_id"].as_str().expect("id").starts_with("req_mock_"));
}

#[tokio::test]
async fn answers_a_normal_request_with_a_complete_message() {
    let app = router(args(&[]));
    let (status, headers, body) =
        post_json(&app, "/v1/messages?beta=true", &messages_body("claude-test", false)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(header(&headers, "request-id"), "req_mock_1");
    assert_eq!(header(&headers, "anthropic-ratelimit-requests-limit"), "4000");
    assert_eq!(header(&headers, "anthropic-ratelimit-requests-remaining"), "3999");
    assert!(header(&headers, "anthropic-ratelimit-requests-reset").ends_with('Z'));
    let message = json_of(&body);
    let id = message["id"].as_str().expect("id");
    let hex = id.strip_prefix("msg_mock_").expect("id prefix");
    assert!(hex.len() == 16 && hex.chars().all(|c| c.is_ascii_hexdigit()));
    let text = "Hello from mock-upstream (model claude-test). You said: What is the weather in Paris today?";
    assert_eq!(message["content"], json!([{"type": "text", "text": text}]));
    assert_eq!(message["type"], "message");
    assert_eq!(message["role"], "assistant");
    assert_eq!(message["model"], "claude-test");
    assert_eq!(message["stop_reason"], "end_turn");
    assert_eq!(message["stop_sequence"], Value::Null);
    assert_eq!(message["usage"]["output_tokens"], 14);
    assert!(message["usage"]["input_tokens"].as_u64().expect("tokens") > 0);

    let (_, _, again) = post_json(&app, "/v1/messages", &messages_body("claude-test", false)).await;
    assert_eq!(json_of(&again)["id"], id, "same request, same id");
}

#[tokio::test]
async fn streams_the_full_event_sequence_of_the_same_message() {
    let app = router(args(&["--deltas", "4"]));
    let (_, _, complete) = post_json(&app, "/v1/messages", &messages_body("claude-x", false)).await;
    let complete = json_of(&complete);
    let (status, headers, body) = post_json(&app, "/v1/messages", &messages_body("claude-x", true)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(header(&headers, "content-type"), "text/event-stream");
    assert_eq!(header(&headers, "request-id"), "req_mock_2");
    let events = sse_events(&body);
    assert_eq!(
        names(&events),
        [
            "message_start",
            "ping",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop",
        ]
    );
    let start = &events[0].1["message"];
    assert_eq!(start["id"], complete["id"]);
    assert_eq!(start["content"], json!([]));
    assert_eq!(start["usage"]["input_tokens"], complete["usage"]["input_tokens"]);
    let text: String =
        events[3..7].iter().map(|(_, data)| data["delta"]["text"].as_str().expect("text_delta")).collect();
    assert_eq!(text, complete["content"][0]["text"].as_str().expect("text"));
    assert_eq!(events[8].1["delta"]["stop_reason"], "end_turn");
    assert_eq!(events[8].1["usage"]["output_tokens"], complete["usage"]["output_tokens"]);

    let requests = recorded(&app).await;
    assert_eq!(requests[1]["stream"], json!({"events_sent": 10, "outcome": "completed"}));
    assert_eq!(requests[0]["stream"], Value::Null);
}

#[tokio::test]
async fn text_bytes_lengthens_the_text_into_as_many_deltas_as_asked() {
    let app = router(args(&["--deltas", "5000", "--text-bytes", "40000"]));
    let (_, _, complete) = post_json(&app, "/v1/messages", &messages_body("claude-x", false)).await;
    let complete = json_of(&complete);
    let text = complete["content"][0]["text"].as_str().expect("text");
    assert!(text.len() >= 40_000 && text.starts_with("Hello from mock-upstream"), "{}", text.len());
    let words = text.split_whitespace().count() as u64;
    assert_eq!(complete["usage"]["output_tokens"], words);
    let (_, _, body) = post_json(&app, "/v1/messages", &messages_body("claude-x", true)).await;
    let deltas: Vec<String> = sse_events(&body)
        .into_iter()
        .filter(|(name, _)| name == "content_block_delta")
        .map(|(_, data)| data["delta"]["text"].as_str().expect("text_delta").to_owned())
        .collect();
    assert_eq!(deltas.len(), 5000);
    assert_eq!(deltas.concat(), text);
}

#[tokio::test]
async fn tool_use_model_answers_a_tool_call_in_both_forms() {
    let app = router(args(&[]));
    let mut body = messages_body("mock-tool-use", false);
    body["tools"] = json!([{"name": "lookup", "input_schema": {"type": "object"}}]);
    let (status, _, complete) = post_json(&app, "/v1/messages", &body).await;
    assert_eq!(status, StatusCode::OK);
    let complete = json_of(&complete);
    assert_eq!(complete["stop_reason"], "tool_use");
    assert_eq!(complete["content"][0]["type"], "text");
    let tool = &complete["content"][1];
    assert_eq!(tool["type"], "tool_use");
    assert_eq!(tool["name"], "lookup");
    assert_eq!(tool["input"], json!({"location": "Paris"}));

    body["stream"] = json!(true);
    let (_, _, streamed) = post_json(&app, "/v1/messages", &body).await;
    let events = sse_events(&streamed);
    let tool_start = events
        .iter()
        .find(|(name, data)| name == "content_block_start" && data["index"] == 1)
        .expect("tool block");
    assert_eq!(tool_start.1["content_block"]["id"], tool["id"]);
    let partial: String = events
        .iter()
        .filter(|(_, data)| data["delta"]["type"] == "input_json_delta")
        .map(|(_, data)| data["delta"]["partial_json"].as_str().expect("partial"))
        .collect();
    assert_eq!(json_of(partial.as_bytes()), tool["input"]);
    let delta = events.iter().find(|(name, _)| name == "message_delta").expect("delta");
    assert_eq!(delta.1["delta"]["stop_reason"], "tool_use");

    let (_, _, default_tool) = post_json(&app, "/v1/messages", &messages_body("mock-tool-use", false)).await;
    assert_eq!(json_of(&default_tool)["content"][1]["name"], "get_weather");
}

#[tokio::test]
async fn fault_models_answer_their_errors() {
    let app = router(args(&[]));
    for stream in [false, true] {
        let (status, headers, body) =
            post_json(&app, "/v1/messages", &messages_body("mock-overloaded", stream)).await;
        assert_error(status, &body, 529, "overloaded_error");
        assert_eq!(header(&headers, "x-should-retry"), "true");

        let (status, _, body) = post_json(&app, "/v1/messages", &messages_body("mock-500", stream)).await;
        assert_error(status, &body, 500, "api_error");

        let (status, headers, body) =
            post_json(&app, "/v1/messages", &messages_body("mock-429", stream)).await;
        assert_error(status, &body, 429, "rate_limit_error");
        assert_eq!(header(&headers, "retry-after"), "7");
        assert_eq!(header(&headers, "anthropic-ratelimit-requests-remaining"), "0");
        assert!(header(&headers, "request-id").starts_with("req_mock_"));
    }
    let (status, _, body) =
        post_json(&app, "/v1/messages/count_tokens", &messages_body("mock-429", false)).await;
    assert_error(status, &body, 429, "rate_limit_error");
    let (status, _, body) =
        post_json(&app, "/v1/messages", &messages_body("mock-error-mid-stream", false)).await;
    assert_error(status, &body, 529, "overloaded_error");
}

#[tokio::test]
async fn error_mid_stream_sends_an_error_event_after_a_delta() {
    let app = router(args(&[]));
    let (status, _, body) =
        post_json(&app, "/v1/messages", &messages_body("mock-error-mid-stream", true)).await;
    assert_eq!(status, StatusCode::OK);
    let events = sse_events(&body);
    assert_eq!(names(&events), ["message_start", "content_block_start", "content_block_delta", "error"]);
    assert_eq!(events[3].1["error"]["type"], "overloaded_error");
}

#[tokio::test]
async fn drop_connection_cuts_the_body() {
    let app = router(args(&[]));
    let req = request(Method::POST, "/v1/messages", messages_body("mock-drop-connection", true).to_string());
    let response = app.clone().oneshot(req).await.expect("infallible");
    assert_eq!(response.status(), StatusCode::OK);
    let mut chunks = response.into_body().into_data_stream();
    let mut events = 0;
    let mut failed = false;
    while let Some(chunk) = chunks.next().await {
        match chunk {
            Ok(_) => events += 1,
            Err(_) => {
                failed = true;
                break;
            }
        }
    }
    assert!(failed, "the body ends with an error");
    assert_eq!(events, 2);
    drop(chunks);
    let requests = recorded(&app).await;
    assert_eq!(requests[0]["stream"], json!({"events_sent": 2, "outcome": "aborted"}));

    let req = request(Method::POST, "/v1/messages", messages_body("mock-drop-connection", false).to_string());
    let response = app.clone().oneshot(req).await.expect("infallible");
    assert!(axum::body::to_bytes(response.into_body(), usize::MAX).await.is_err());
}

#[tokio::test]
async fn fail_marker_in_system_answers_500() {
    let app = router(args(&["--fail-marker", "BOOM"]));
    let mut body = messages_body("claude-x", false);
    body["system"] = json!("you are kind. BOOM.");
    let (status, _, answer) = post_json(&app, "/v1/messages", &body).await;
    assert_error(status, &answer, 500, "api_error");

    body["system"] = json!([{"type": "text", "text": "first"}, {"type": "text", "text": "xxBOOMxx"}]);
    let (status, _, answer) = post_json(&app, "/v1/messages", &body).await;
    assert_error(status, &answer, 500, "api_error");

    body["system"] = json!([{"type": "text", "text": "nothing here"}]);
    let (status, _, _) = post_json(&app, "/v1/messages", &body).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn records_every_v1_request_and_forgets_on_delete() {
    let app = router(args(&[]));
    let req = Request::builder()
        .method(Method::POST)
        .uri("/v1/messages?beta=true")
        .header("X-Api-Key", "sk-test")
        .header("anthropic-beta", "a")
        .header("anthropic-beta", "b")
        .body(Body::from(messages_body("claude-x", false).to_string()))
        .expect("request");
    send(&app, req).await;
    send(&app, request(Method::GET, "/v1/models", Body::empty())).await;
    send(&app, request(Method::GET, "/health", Body::empty())).await;

    let requests = recorded(&app).await;
    assert_eq!(requests.len(), 2, "only /v1/ requests: {requests:?}");
    assert_eq!(recorded_count(&app).await, 2);
    let first = &requests[0];
    assert_eq!(first["seq"], 1);
    assert_eq!(first["method"], "POST");
    assert_eq!(first["path"], "/v1/messages");
    assert_eq!(first["query"], "beta=true");
    assert_eq!(first["headers"]["x-api-key"], "sk-test");
    assert_eq!(first["headers"]["anthropic-beta"], "a, b");
    assert_eq!(first["body"], messages_body("claude-x", false));
    let body_bytes = messages_body("claude-x", false).to_string().len();
    assert_eq!(first["body_bytes"], body_bytes);
    assert_eq!(first["stream"], Value::Null);
    assert_eq!(requests[1]["query"], Value::Null);
    assert_eq!(requests[1]["body"], Value::Null);

    let (status, _, body) = send(&app, request(Method::DELETE, "/_mock/requests", Body::empty())).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert!(body.is_empty());
    assert!(recorded(&app).await.is_empty());
    assert_eq!(recorded_count(&app).await, 0);
}

async fn recorded_count(app: &Router) -> u64 {
    let (status, _, body) = send(app, request(Method::GET, "/_mock/requests", Body::empty())).await;
    assert_eq!(status, StatusCode::OK);
    json_of(&body)["count"].as_u64().expect("count")
}

/// `--no-record` (long load tests): every answer as usual, streams included, but nothing kept,
/// only counted; request ids still unique.
#[tokio::test]
async fn no_record_answers_and_counts_but_keeps_nothing() {
    let app = router(args(&["--no-record"]));
    let (status, headers, body) = post_json(&app, "/v1/messages", &messages_body("claude-x", false)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(json_of(&body)["type"], "message");
    assert_eq!(header(&headers, "request-id"), "req_mock_1");
    let (status, headers, body) = post_json(&app, "/v1/messages", &messages_body("claude-x", true)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(header(&headers, "request-id"), "req_mock_2");
    assert_eq!(names(&sse_events(&body)).last(), Some(&"message_stop"));

    assert!(recorded(&app).await.is_empty(), "nothing kept");
    assert_eq!(recorded_count(&app).await, 2);
    send(&app, request(Method::DELETE, "/_mock/requests", Body::empty())).await;
    assert_eq!(recorded_count(&app).await, 0);
}

#[tokio::test]
async fn malformed_json_is_a_400_and_still_recorded() {
    let app = router(args(&[]));
    let (status, headers, body) = send(&app, request(Method::POST, "/v1/messages", "{\"model\": ")).await;
    assert_error(status, &body, 400, "invalid_request_error");
    assert_eq!(header(&headers, "request-id"), "req_mock_1");
    let requests = recorded(&app).await;
    assert_eq!(requests[0]["body"], Value::Null);
    assert_eq!(requests[0]["body_bytes"], 10);
}

#[tokio::test]
async fn other_paths_count_tokens_models_echo_and_404() {
    let app = router(args(&[]));
    let body = json!({"model": "claude-x", "system": "ab", "messages": []});
    let (status, _, answer) = post_json(&app, "/v1/messages/count_tokens", &body).await;
    assert_eq!(status, StatusCode::OK);
    // `"ab"` is 4 bytes and `[]` 2: ceil(6 / 4) = 2.
    assert_eq!(json_of(&answer), json!({"input_tokens": 2}));

    let (_, _, models) = send(&app, request(Method::GET, "/v1/models", Body::empty())).await;
    let models = json_of(&models);
    assert_eq!(models["data"].as_array().map(Vec::len), Some(1));
    assert_eq!(models["data"][0]["type"], "model");

    let (status, _, echo) = send(&app, request(Method::PUT, "/v1/files/x?y=1", "abc")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        json_of(&echo),
        json!({"echo": {"method": "PUT", "path": "/v1/files/x", "query": "y=1", "body_bytes": 3}})
    );
    let (_, _, echo) = send(&app, request(Method::GET, "/v1/messages", Body::empty())).await;
    assert_eq!(json_of(&echo)["echo"]["method"], "GET");

    let (status, _, body) = send(&app, request(Method::GET, "/nothing", Body::empty())).await;
    assert_error(status, &body, 404, "not_found_error");
}
