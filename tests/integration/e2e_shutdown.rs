//! Graceful shutdown and hostile connections against the real binary.

use crate::support::{Proc, client, messages_body};
use futures_util::StreamExt;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[tokio::test]
async fn sigterm_drains_then_refuses_new_connections_and_lets_a_stream_in_flight_finish() {
    let mock = Proc::mock(&["--pause-ms", "2500"]);
    let config = std::env::temp_dir().join(format!("memgate-drain-{}.toml", std::process::id()));
    std::fs::write(&config, "[shutdown]\ndrain_delay_ms = 600\n").unwrap();
    let mut gateway = Proc::gateway(&mock, &["--config", config.to_str().unwrap()], &[]);
    let response = client()
        .post(gateway.url("/v1/messages"))
        .json(&messages_body("mock-pause", true))
        .send()
        .await
        .unwrap();
    let mut body = response.bytes_stream();
    let first = body.next().await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&first).starts_with("event: message_start"));

    gateway.terminate();
    // Draining: still answering, /readyz says 503, and every answer closes its connection so a
    // load balancer keeps no idle connection to this replica (poll: the signal is async).
    let http = client();
    let drained =
        crate::support::eventually(Duration::from_millis(500), "/readyz to say draining", || async {
            let ready = http.get(gateway.url("/readyz")).send().await.ok()?;
            (ready.status() == 503).then_some(ready)
        })
        .await;
    assert_eq!(drained.headers()["connection"], "close");
    // Then new connections are refused once the listener is closed.
    let addr = gateway.base.trim_start_matches("http://").to_owned();
    let mut refused = false;
    for _ in 0..400 {
        if TcpStream::connect(&addr).await.is_err() {
            refused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(refused, "memgate kept accepting connections after SIGTERM");

    let mut rest = String::new();
    while let Some(chunk) = body.next().await {
        rest.push_str(&String::from_utf8_lossy(&chunk.expect("stream cut during graceful shutdown")));
    }
    assert!(rest.contains("event: message_stop"), "stream did not finish: {rest}");
    let status = gateway.wait_exit(Duration::from_secs(10)).expect("memgate did not exit after draining");
    assert!(status.success(), "{status:?}");
}

#[tokio::test]
async fn the_grace_period_bounds_how_long_shutdown_waits() {
    let mock = Proc::mock(&["--delta-interval-ms", "50"]);
    let config = std::env::temp_dir().join(format!("memgate-grace-{}.toml", std::process::id()));
    std::fs::write(&config, "[shutdown]\ngrace_ms = 300\ndrain_delay_ms = 100\n").unwrap();
    let mut gateway = Proc::gateway(&mock, &["--config", config.to_str().unwrap()], &[]);
    let response = client()
        .post(gateway.url("/v1/messages"))
        .json(&messages_body("mock-long-stream", true))
        .send()
        .await
        .unwrap();
    let mut body = response.bytes_stream();
    body.next().await.unwrap().unwrap();
    gateway.terminate();
    // A ten-minute stream must not hold the process: it exits once the grace period is over.
    let status = gateway.wait_exit(Duration::from_secs(10)).expect("memgate waited past its grace period");
    assert!(status.success(), "{status:?}");
}

/// Writes raw bytes, half-closes, and returns whatever memgate answered.
async fn raw_exchange(addr: &str, request: &[u8]) -> String {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(request).await.unwrap();
    stream.shutdown().await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer))
        .await
        .expect("memgate hung on a hostile request");
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test]
async fn truncated_and_garbage_requests_neither_hang_nor_crash_memgate() {
    let mock = Proc::mock(&[]);
    let gateway = Proc::gateway(&mock, &[], &[]);
    let addr = gateway.base.trim_start_matches("http://").to_owned();

    // A body shorter than its content-length, then the client stops sending.
    let truncated = b"POST /v1/messages HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: 500\r\n\r\n{\"model\":\"claude-test\",\"mess";
    let answer = raw_exchange(&addr, truncated).await;
    assert!(answer.is_empty() || answer.starts_with("HTTP/1.1 400"), "{answer}");

    // Not HTTP at all.
    let answer = raw_exchange(&addr, b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03garbage\r\n\r\n").await;
    assert!(answer.is_empty() || answer.starts_with("HTTP/1.1 400"), "{answer}");

    // A chunked body cut mid-chunk.
    let chunked =
        b"POST /v1/messages HTTP/1.1\r\nhost: 127.0.0.1\r\ntransfer-encoding: chunked\r\n\r\n10\r\n{\"model\":";
    let answer = raw_exchange(&addr, chunked).await;
    assert!(answer.is_empty() || answer.starts_with("HTTP/1.1 400"), "{answer}");

    // memgate is still up and nothing of the above reached the upstream.
    let health = client().get(gateway.url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);
    assert!(mock.recorded().await.is_empty());
}

#[tokio::test]
async fn a_client_that_stalls_mid_body_gets_408() {
    let mock = Proc::mock(&[]);
    let config = std::env::temp_dir().join(format!("memgate-stall-{}.toml", std::process::id()));
    std::fs::write(&config, "[limits]\nbody_read_timeout_ms = 200\n").unwrap();
    let gateway = Proc::gateway(&mock, &["--config", config.to_str().unwrap()], &[]);
    let addr = gateway.base.trim_start_matches("http://").to_owned();
    let mut stream = TcpStream::connect(&addr).await.unwrap();
    stream
        .write_all(b"POST /v1/messages HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: 500\r\n\r\n{\"model\":")
        .await
        .unwrap();
    // Keep the connection open without sending the rest.
    let mut answer = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut answer))
        .await
        .expect("memgate waited forever for a stalled body")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer[..n]);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("\"timeout_error\""), "{answer}");
}

#[tokio::test]
async fn a_bad_config_stops_startup_naming_the_key() {
    let config = std::env::temp_dir().join(format!("memgate-bad-{}.toml", std::process::id()));
    std::fs::write(&config, "[upstream]\nurl = \"not a url\"\n").unwrap();
    let output = std::process::Command::new(crate::support::BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--config", config.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("upstream.url"), "{stderr}");

    std::fs::write(&config, "[upstream]\ntimeout = 5\n").unwrap();
    let output = std::process::Command::new(crate::support::BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--config", config.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("timeout") && stderr.contains("upstream"), "{stderr}");
}
