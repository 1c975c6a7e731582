//! In-process tests of the router (`build_app` + `oneshot`): memgate's own answers.

use crate::support::TestDb;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use bytes::Bytes;
use memgate::config::RawConfig;
use memgate::{AppState, build_app};
use serde_json::Value;
use tower::ServiceExt;

/// An app on a SQLite file of its own (kept as long as the app), whose upstream is a port nobody
/// listens on: none of these requests may reach it.
pub struct TestApp {
    pub router: axum::Router,
    _db: TestDb,
}

pub async fn app_with(toml: &str) -> TestApp {
    let db = TestDb::sqlite();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let text =
        format!("[upstream]\nurl = \"http://127.0.0.1:{port}\"\n[database]\nurl = \"{}\"\n{toml}", db.url);
    let config = RawConfig::from_toml(&text).unwrap().validate().unwrap();
    TestApp { router: build_app(AppState::new(&config).await.unwrap()), _db: db }
}

async fn app() -> TestApp {
    app_with("").await
}

async fn call(app: axum::Router, request: Request<Body>) -> (StatusCode, axum::http::HeaderMap, Value) {
    let response = app.oneshot(request).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
    let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (status, headers, body)
}

fn post(path: &str, body: impl Into<Body>) -> Request<Body> {
    Request::post(path).header("content-type", "application/json").body(body.into()).unwrap()
}

fn assert_anthropic_error(body: &Value, error_type: &str) {
    assert_eq!(body["type"], "error", "{body}");
    assert_eq!(body["error"]["type"], error_type, "{body}");
    assert!(!body["error"]["message"].as_str().unwrap().is_empty(), "{body}");
}

#[tokio::test]
async fn malformed_and_non_messages_bodies_are_invalid_requests() {
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("truncated JSON", br#"{"model":"m","messages":[{"role":"#.to_vec(), "not valid JSON"),
        ("empty body", Vec::new(), "not valid JSON"),
        ("bad UTF-8", b"{\"model\":\"m\xff\xfe\",\"messages\":[]}".to_vec(), "not valid JSON"),
        ("an array", b"[]".to_vec(), "JSON object"),
        ("no model", br#"{"messages":[]}"#.to_vec(), "model"),
        ("no messages", br#"{"model":"m"}"#.to_vec(), "messages"),
        ("messages not a list", br#"{"model":"m","messages":"hi"}"#.to_vec(), "messages"),
        (
            "deep nesting",
            format!("{{\"model\":\"m\",\"messages\":{}{}}}", "[".repeat(50_000), "]".repeat(50_000))
                .into_bytes(),
            "recursion",
        ),
    ];
    for path in ["/v1/messages", "/v1/messages/count_tokens"] {
        for (what, body, says) in &cases {
            let (status, headers, answer) = call(app().await.router, post(path, body.clone())).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{path} {what}");
            assert_anthropic_error(&answer, "invalid_request_error");
            assert!(answer["error"]["message"].as_str().unwrap().contains(says), "{what}: {answer}");
            assert!(headers.contains_key("x-memory-request-id"), "{what}");
        }
    }
}

#[tokio::test]
async fn a_body_over_the_limit_is_request_too_large() {
    // Declared too large: refused before reading.
    let request = Request::post("/v1/messages")
        .header("content-length", (32 * 1024 * 1024 + 1).to_string())
        .body(Body::from("{}"))
        .unwrap();
    let (status, _, answer) = call(app().await.router, request).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_anthropic_error(&answer, "request_too_large");

    // Undeclared (streamed) and too large: refused once the limit is passed.
    let chunks: Vec<Result<Bytes, std::io::Error>> =
        (0..40).map(|_| Ok(Bytes::from(vec![b' '; 100]))).collect();
    let request =
        Request::post("/v1/messages").body(Body::from_stream(futures_util::stream::iter(chunks))).unwrap();
    let (status, _, answer) = call(app_with("[limits]\nmax_body_bytes = 2048\n").await.router, request).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_anthropic_error(&answer, "request_too_large");

    // A real 33 MB body against the default limit.
    let big = format!("{{\"model\":\"m\",\"messages\":[],\"pad\":\"{}\"}}", "x".repeat(33 * 1024 * 1024));
    let (status, _, answer) = call(app().await.router, post("/v1/messages", big)).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_anthropic_error(&answer, "request_too_large");
}

#[tokio::test]
async fn a_body_that_breaks_off_is_an_invalid_request() {
    let chunks: Vec<Result<Bytes, std::io::Error>> = vec![
        Ok(Bytes::from_static(br#"{"model":"m","#)),
        Err(std::io::Error::new(std::io::ErrorKind::ConnectionReset, "client went away")),
    ];
    let request =
        Request::post("/v1/messages").body(Body::from_stream(futures_util::stream::iter(chunks))).unwrap();
    let (status, _, answer) = call(app().await.router, request).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_anthropic_error(&answer, "invalid_request_error");
}

#[tokio::test]
async fn unknown_paths_outside_v1_are_not_found() {
    for path in ["/", "/v2/messages", "/admin", "/wp-login.php", "/v1"] {
        let (status, headers, answer) =
            call(app().await.router, Request::get(path).body(Body::empty()).unwrap()).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
        assert_anthropic_error(&answer, "not_found_error");
        assert!(headers.contains_key("x-memory-request-id"));
    }
}

#[tokio::test]
async fn an_unreachable_upstream_answers_502_in_anthropics_shape() {
    let body = r#"{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}"#;
    let (status, headers, answer) = call(app().await.router, post("/v1/messages", body)).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY);
    assert_eq!(headers["x-should-retry"], "true");
    assert_anthropic_error(&answer, "api_error");
}

#[tokio::test]
async fn health_readiness_and_metrics() {
    let test_app = app().await;
    let app = test_app.router.clone();
    let (status, _, body) = call(app.clone(), Request::get("/healthz").body(Body::empty()).unwrap()).await;
    assert_eq!((status, body["status"].as_str()), (StatusCode::OK, Some("ok")));
    let (status, _, _) = call(app.clone(), Request::get("/readyz").body(Body::empty()).unwrap()).await;
    assert_eq!(status, StatusCode::OK);

    call(app.clone(), post("/v1/messages", "nope")).await;
    call(app.clone(), Request::get("/nowhere").body(Body::empty()).unwrap()).await;
    let response = app.oneshot(Request::get("/metrics").body(Body::empty()).unwrap()).await.unwrap();
    let text =
        String::from_utf8(axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap().to_vec())
            .unwrap();
    assert!(text.contains(r#"memgate_requests_total{route="messages",status_class="4xx"} 1"#), "{text}");
    assert!(text.contains(r#"memgate_requests_total{route="unmatched",status_class="4xx"} 1"#), "{text}");
}
