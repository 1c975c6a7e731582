//! Slow connections: nothing bounded how long a connection could hold memgate
//! without a request in flight: a client sending its headers a byte at a time (slowloris), or a
//! kept-alive connection left open and silent. Now `limits.header_read_timeout_ms` cuts the
//! first and `limits.connection_idle_timeout_ms` closes the second; a request in flight is never
//! cut by either.

use super::config_file;
use crate::support::{Proc, messages_body};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn addr_of(gateway: &Proc) -> String {
    gateway.base.trim_start_matches("http://").to_owned()
}

/// Sends one whole request on `stream` and reads its answer (`Content-Length` framed).
async fn exchange(stream: &mut TcpStream, request: &str) -> String {
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&answer).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_owned())
                })
                .and_then(|v| v.parse::<usize>().ok())
                .unwrap_or(0);
            if body.len() >= length {
                return text;
            }
        }
        let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf))
            .await
            .expect("memgate did not answer")
            .unwrap();
        assert!(n > 0, "memgate closed the connection before answering: {text}");
        answer.extend_from_slice(&buf[..n]);
    }
}

/// Whether memgate has closed `stream` (EOF or reset) by `deadline`.
async fn closed_by(stream: &mut TcpStream, deadline: Instant) -> bool {
    let mut buf = [0u8; 64];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => {}
        }
    }
}

#[tokio::test]
async fn headers_sent_a_byte_at_a_time_are_cut_while_an_idle_kept_alive_connection_is_not() {
    let mock = Proc::mock(&[]);
    let (_dir, config) = config_file("[limits]\nheader_read_timeout_ms = 500\n");
    let gateway = Proc::gateway(&mock, &["--config", &config], &[]);
    let addr = addr_of(&gateway);
    let health = format!("GET /healthz HTTP/1.1\r\nhost: {addr}\r\n\r\n");
    // A kept-alive connection that has answered and now says nothing: idle, not reading a head.
    let mut kept = TcpStream::connect(&addr).await.unwrap();
    assert!(exchange(&mut kept, &health).await.starts_with("HTTP/1.1 200"));

    let started = Instant::now();
    let mut slow = TcpStream::connect(&addr).await.unwrap();
    let head = format!("GET /healthz HTTP/1.1\r\nhost: {addr}\r\nx-slow: {}\r\n\r\n", "a".repeat(400));
    let mut cut = false;
    for byte in head.as_bytes() {
        if slow.write_all(&[*byte]).await.is_err() {
            cut = true;
            break;
        }
        // One byte every 25 ms: the whole head would take 10 s.
        if closed_by(&mut slow, Instant::now() + Duration::from_millis(25)).await {
            cut = true;
            break;
        }
    }
    let elapsed = started.elapsed();
    assert!(cut, "a head sent a byte at a time was read for {elapsed:?} without being cut");
    assert!(elapsed < Duration::from_secs(5), "cut only after {elapsed:?}");
    // The idle connection, open longer than the slow one, still serves its next request.
    assert!(exchange(&mut kept, &health).await.starts_with("HTTP/1.1 200"));
}

#[tokio::test]
async fn an_idle_connection_is_closed_but_a_long_answer_is_not_cut() {
    let mock = Proc::mock(&["--pause-ms", "1500"]);
    let (_dir, config) = config_file("[limits]\nconnection_idle_timeout_ms = 500\n");
    let gateway = Proc::gateway(&mock, &["--config", &config], &[]);
    let addr = addr_of(&gateway);

    // An answer that takes three idle periods to come is busy time, not idle time.
    let body = messages_body("mock-pause", false).to_string();
    let request = format!(
        "POST /v1/messages HTTP/1.1\r\nhost: {addr}\r\nx-api-key: sk-ant-slow\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut stream = TcpStream::connect(&addr).await.unwrap();
    let answer = exchange(&mut stream, &request).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");

    // Then nothing more is sent on it: memgate closes it.
    assert!(
        closed_by(&mut stream, Instant::now() + Duration::from_secs(10)).await,
        "an idle kept-alive connection was still open 10 s later"
    );
    // A connection that never sends anything is idle from its start.
    let mut silent = TcpStream::connect(&addr).await.unwrap();
    assert!(closed_by(&mut silent, Instant::now() + Duration::from_secs(10)).await);
}
