//! Timing and connection tests: pacing, and a client that goes away mid-stream (in process,
//! then over a real socket served by `run`).
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::disallowed_methods)]

use std::net::SocketAddr;
use std::time::Duration;

use futures_util::StreamExt;
use http::Method;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tower::ServiceExt;

use super::tests::{args, json_of, messages_body, post_json, recorded, request};
use super::{router, run};

#[tokio::test]
async fn streams_are_paced_by_the_settings() {
    let app = router(args(&["--pause-ms", "150", "--delta-interval-ms", "30", "--deltas", "3"]));
    let body = messages_body("mock-pause", true).to_string();
    let response =
        app.clone().oneshot(request(Method::POST, "/v1/messages", body)).await.expect("infallible");
    let mut chunks = response.into_body().into_data_stream();
    let first = chunks.next().await.expect("a chunk").expect("data");
    assert!(first.starts_with(b"event: message_start\n"));
    let after_start = tokio::time::Instant::now();
    let second = chunks.next().await.expect("a chunk").expect("data");
    assert!(second.starts_with(b"event: ping\n"));
    assert!(after_start.elapsed() >= Duration::from_millis(150), "the pause");
    let before_deltas = tokio::time::Instant::now();
    let mut rest = Vec::new();
    while let Some(chunk) = chunks.next().await {
        rest.extend_from_slice(&chunk.expect("data"));
    }
    // Two gaps of 30 ms between the three deltas.
    assert!(before_deltas.elapsed() >= Duration::from_millis(60), "the delta interval");
    assert!(rest.ends_with(b"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"));

    let (_, _, complete) = post_json(&app, "/v1/messages", &messages_body("mock-pause", false)).await;
    assert_eq!(json_of(&complete)["stop_reason"], "end_turn");
}

#[tokio::test]
async fn dropping_a_stream_body_records_client_closed() {
    let app = router(args(&[]));
    let req = request(Method::POST, "/v1/messages", messages_body("mock-long-stream", true).to_string());
    let response = app.clone().oneshot(req).await.expect("infallible");
    let mut chunks = response.into_body().into_data_stream();
    for _ in 0..4 {
        chunks.next().await.expect("a chunk").expect("data");
    }
    assert_eq!(recorded(&app).await[0]["stream"]["outcome"], "pending");
    drop(chunks);
    let stream = &recorded(&app).await[0]["stream"];
    assert_eq!(stream, &json!({"events_sent": 4, "outcome": "client_closed"}));
}

/// One HTTP/1.1 request over a fresh connection, `Connection: close`; returns the body.
async fn raw_get(addr: SocketAddr, path: &str) -> String {
    let mut socket = TcpStream::connect(addr).await.expect("connect");
    let head = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    socket.write_all(head.as_bytes()).await.expect("write");
    let mut response = String::new();
    socket.read_to_string(&mut response).await.expect("read");
    let (_, body) = response.split_once("\r\n\r\n").expect("head and body");
    body.to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_connection_is_recorded_as_client_closed() {
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    let server = tokio::spawn(run(args(&["--listen", "127.0.0.1:0"]), move |addr| {
        let _ = ready_tx.send(addr);
    }));
    let addr = tokio::time::timeout(Duration::from_secs(10), ready_rx)
        .await
        .expect("ready in time")
        .expect("an address");

    let body = messages_body("mock-long-stream", true).to_string();
    let mut socket = TcpStream::connect(addr).await.expect("connect");
    let head = format!(
        "POST /v1/messages HTTP/1.1\r\nHost: {addr}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    socket.write_all(head.as_bytes()).await.expect("write");
    let mut received = Vec::new();
    let mut buf = [0u8; 4096];
    let first_delta = tokio::time::timeout(Duration::from_secs(10), async {
        while !String::from_utf8_lossy(&received).contains("content_block_delta") {
            let n = socket.read(&mut buf).await.expect("read");
            assert!(n > 0, "the stream ended early");
            received.extend_from_slice(&buf[..n]);
        }
    })
    .await;
    assert!(first_delta.is_ok(), "a delta arrived");
    assert!(String::from_utf8_lossy(&received).starts_with("HTTP/1.1 200 OK"));
    drop(socket);

    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let outcome = loop {
        let requests: Value =
            serde_json::from_str(&raw_get(addr, "/_mock/requests").await).expect("requests JSON");
        let stream = requests["requests"][0]["stream"].clone();
        if stream["outcome"] == "client_closed" || tokio::time::Instant::now() > deadline {
            break stream;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(outcome["outcome"], "client_closed", "{outcome}");
    assert!(outcome["events_sent"].as_u64().expect("count") >= 4);
    server.abort();
}
