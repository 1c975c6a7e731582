//! A 32 MB body holding a long array once cost ~0.5–1 GB of memory to check two
//! fields, and nothing bounded how many such bodies were held at once. Now a body is held as its
//! bytes (twice at most: the copy with memory), and the bytes held across requests are bounded
//! by `limits.max_inflight_body_bytes` (256 MiB by default): concurrent large bodies queue or
//! get 529, and memgate's resident memory grows by at most about that bound (docs/operations.md).
//!
//! The budget is held by bytes that arrived, never by declared lengths (four connections that
//! declared 32 MiB and sent nothing once held all of it), per client address and per caller too,
//! and a refused body is read to its end before the 529, so the client reads the answer.

use super::{config_file, error_of};
use crate::e2e_identity::{issue_key, managed_gateway};
use crate::support::{Proc, client, eventually, messages_body};
use serde_json::json;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Just under Anthropic's 32 MiB limit, also once memory is injected.
const BODY_BYTES: usize = 32_000_000;
const MIB: u64 = 1024 * 1024;

/// A valid Messages request padded with a long array of zeros: the shape that is cheap to send
/// and costly to parse into a `Value` (32 bytes per two-byte element).
fn padded_body() -> Vec<u8> {
    padded_to(BODY_BYTES)
}

fn padded_to(size: usize) -> Vec<u8> {
    let head = json!({"model": "claude-test", "max_tokens": 8,
        "messages": [{"role": "user", "content": "What is your refund policy?"}]})
    .to_string();
    let mut body = Vec::with_capacity(size);
    body.extend_from_slice(&head.as_bytes()[..head.len() - 1]);
    body.extend_from_slice(b",\"padding\":[0");
    while body.len() < size - 3 {
        body.extend_from_slice(b",0");
    }
    body.extend_from_slice(b"]}");
    body
}

fn addr_of(gateway: &Proc) -> String {
    gateway.base.trim_start_matches("http://").to_owned()
}

/// Opens a raw connection and sends a Messages request's headers (`extra` lines included) and
/// the first `sent` bytes of a body that declares `declared`; the rest never comes.
async fn stalled_body(gateway: &Proc, extra: &str, declared: usize, sent: usize) -> TcpStream {
    let addr = addr_of(gateway);
    let mut stream = TcpStream::connect(&addr).await.unwrap();
    let head = format!(
        "POST /v1/messages HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n{extra}content-length: {declared}\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(&padded_to(declared)[..sent]).await.unwrap();
    stream
}

/// The bytes the body budget holds now, from /metrics (each body byte counted twice).
async fn held_bytes(gateway: &Proc) -> u64 {
    let text = client().get(gateway.url("/metrics")).send().await.unwrap().text().await.unwrap();
    let line = text.lines().find(|l| l.starts_with("memgate_request_body_bytes_held ")).unwrap_or_default();
    line.rsplit(' ').next().and_then(|n| n.parse().ok()).unwrap_or(0)
}

/// Reads what memgate answered on a raw connection, up to the end of the first answer's head.
async fn answer_head(stream: &mut TcpStream, limit: Duration) -> String {
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + limit;
    while !String::from_utf8_lossy(&answer).contains("\r\n\r\n") {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => answer.extend_from_slice(&buf[..n]),
            Ok(_) => break,
            Err(_) => panic!("memgate did not answer within {limit:?}: {}", String::from_utf8_lossy(&answer)),
        }
    }
    String::from_utf8_lossy(&answer).into_owned()
}

/// Writes a whole Messages request on a connection of its own, then reads the answer: the
/// status, the head (names lowercase) and the body. `Err` says where the exchange broke.
async fn send_whole_then_read(addr: &str, key: &str, body: &[u8]) -> Result<(u16, String, String), String> {
    let mut stream = TcpStream::connect(addr).await.map_err(|err| format!("connect: {err}"))?;
    let head = format!(
        "POST /v1/messages HTTP/1.1\r\nhost: {addr}\r\nx-api-key: {key}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.map_err(|err| format!("sending the head: {err}"))?;
    stream.write_all(body).await.map_err(|err| format!("sending the body: {err}"))?;
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(120), stream.read_to_end(&mut answer))
        .await
        .map_err(|_| "no answer within 120 s".to_owned())?
        .map_err(|err| format!("reading the answer: {err}"))?;
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let (head, text) =
        answer.split_once("\r\n\r\n").ok_or_else(|| format!("not an HTTP answer: {answer:?}"))?;
    let status =
        head.split(' ').nth(1).and_then(|s| s.parse().ok()).ok_or_else(|| format!("no status: {head}"))?;
    Ok((status, head.to_ascii_lowercase(), text.to_owned()))
}

/// Done-when: four connections that declare 32 MiB and send nothing do not delay a normal
/// request. They once reserved the declared length (twice, for the copy), which is the whole
/// default budget, and every other caller waited `inflight_wait_ms` (5 s) for a 529.
#[tokio::test]
async fn connections_that_declare_32_mib_and_send_nothing_do_not_delay_a_normal_request() {
    let mock = Proc::mock(&[]);
    let gateway = Proc::gateway(&mock, &[], &[]);
    let mut idle = Vec::new();
    for _ in 0..4 {
        // `Expect: 100-continue`: memgate says `100 Continue` when it starts reading the body, so
        // the request has been authenticated and holds whatever it holds before the next step.
        let mut stream =
            stalled_body(&gateway, "x-api-key: sk-ant-idle\r\nexpect: 100-continue\r\n", 33_554_432, 0).await;
        let head = answer_head(&mut stream, Duration::from_secs(10)).await;
        assert!(head.starts_with("HTTP/1.1 100"), "{head}");
        idle.push(stream);
    }
    let started = Instant::now();
    let response = client()
        .post(gateway.url("/v1/messages"))
        .header("x-api-key", "sk-ant-normal")
        .json(&messages_body("claude-test", false))
        .send()
        .await
        .unwrap();
    let elapsed = started.elapsed();
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
    assert!(elapsed < Duration::from_secs(3), "a normal request waited {elapsed:?} behind idle bodies");
    drop(idle);
}

/// A body that goes silent between two chunks is answered 408 after `limits.body_idle_timeout_ms`
/// (10 s), long before the whole body's read deadline (60 s) it once waited for.
#[tokio::test]
async fn a_body_that_stalls_between_chunks_gets_408_long_before_the_read_deadline() {
    let mock = Proc::mock(&[]);
    let gateway = Proc::gateway(&mock, &[], &[]);
    let started = Instant::now();
    let mut stream = stalled_body(&gateway, "x-api-key: sk-ant-slow\r\n", 5_000, 1_000).await;
    let answer = answer_head(&mut stream, Duration::from_secs(30)).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(started.elapsed() < Duration::from_secs(30));
    let mut rest = String::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_string(&mut rest)).await;
    let whole = answer + &rest;
    assert!(whole.contains("\"timeout_error\"") && whole.contains("body_idle_timeout_ms"), "{whole}");
    assert!(mock.recorded().await.is_empty());
}

/// Small budgets, so that one stalled 1 MB body fills a share.
const SMALL_LIMITS: &str =
    "max_body_bytes = 1048576\nmax_inflight_body_bytes = 16777216\ninflight_wait_ms = 300\n";
const HOLDING: usize = 1_000_000;

/// Waits until the budget holds the stalled body's bytes (twice each).
async fn until_held(gateway: &Proc, bytes: u64) {
    eventually(Duration::from_secs(10), "the stalled body to be held", || async {
        (held_bytes(gateway).await >= bytes).then_some(())
    })
    .await;
}

#[tokio::test]
async fn one_client_address_cannot_hold_the_whole_budget() {
    let mock = Proc::mock(&[]);
    let (_dir, config) = config_file(&format!(
        "[client_ip]\ntrusted_proxies = [\"127.0.0.1\"]\n[limits]\n{SMALL_LIMITS}max_inflight_body_bytes_per_address = 2097152\n"
    ));
    let gateway = Proc::gateway(&mock, &["--config", &config], &[]);
    let from = |address: &'static str| {
        client()
            .post(gateway.url("/v1/messages"))
            .header("x-api-key", "sk-ant-shared")
            .header("x-forwarded-for", address)
            .header("content-type", "application/json")
            .body(padded_to(60_000))
            .send()
    };
    let holder = stalled_body(
        &gateway,
        "x-api-key: sk-ant-shared\r\nx-forwarded-for: 203.0.113.1\r\n",
        1_048_000,
        HOLDING,
    )
    .await;
    until_held(&gateway, 2 * HOLDING as u64).await;

    let refused = from("203.0.113.1").await.unwrap();
    assert!(refused.headers().contains_key("retry-after"), "{:?}", refused.headers());
    let (status, error) = error_of(refused).await;
    assert_eq!((status, error["type"].as_str()), (529, Some("overloaded_error")), "{error}");
    assert!(error["message"].as_str().unwrap().contains("per_address"), "{error}");
    let other = from("203.0.113.2").await.unwrap();
    assert_eq!(other.status(), 200, "another address has its own share");

    drop(holder);
    eventually(Duration::from_secs(10), "the stalled body to be let go", || async {
        (held_bytes(&gateway).await == 0).then_some(())
    })
    .await;
    assert_eq!(from("203.0.113.1").await.unwrap().status(), 200);
}

#[tokio::test]
async fn one_caller_cannot_hold_the_whole_budget_from_any_number_of_addresses() {
    let mock = Proc::mock(&[]);
    let (_dir, config) =
        config_file(&format!("[limits]\n{SMALL_LIMITS}max_inflight_body_bytes_per_caller = 2097152\n"));
    let gateway = managed_gateway(&mock, &["--config", &config]);
    let (greedy, _) = issue_key(&gateway, "default", json!({"name": "greedy"})).await;
    let (other, _) = issue_key(&gateway, "default", json!({"name": "other"})).await;
    let with = |key: &str| {
        client()
            .post(gateway.url("/v1/messages"))
            .header("x-api-key", key)
            .header("content-type", "application/json")
            .body(padded_to(60_000))
            .send()
    };
    let _holder = stalled_body(&gateway, &format!("x-api-key: {greedy}\r\n"), 1_048_000, HOLDING).await;
    until_held(&gateway, 2 * HOLDING as u64).await;

    let (status, error) = error_of(with(&greedy).await.unwrap()).await;
    assert_eq!((status, error["type"].as_str()), (529, Some("overloaded_error")), "{error}");
    assert!(error["message"].as_str().unwrap().contains("per_caller"), "{error}");
    assert_eq!(with(&other).await.unwrap().status(), 200, "another key has its own share");
}

fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with(field)).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Resets the process's peak resident set size to its current one (Linux `clear_refs` 5).
fn reset_peak(pid: u32) {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").unwrap();
}

/// How far the resident set rose above where it was when `reset_peak` ran.
fn peak_growth_bytes(pid: u32, baseline_kib: u64) -> u64 {
    status_kib(pid, "VmHWM:").saturating_sub(baseline_kib) * 1024
}

#[tokio::test]
async fn large_bodies_cost_their_bytes_and_concurrent_ones_are_bounded() {
    let mock = Proc::mock(&[]);
    let gateway = managed_gateway(&mock, &[]);
    let (key, _) =
        issue_key(&gateway, "default", json!({"name": "bulk", "rate_limit_per_minute": 1000})).await;
    let body = bytes::Bytes::from(padded_body());
    let http = client();
    let send = |body: bytes::Bytes| {
        http.post(gateway.url("/v1/messages"))
            .header("x-api-key", &key)
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    // Warm up (model, pools), then measure one body alone.
    assert_eq!(
        send(bytes::Bytes::from_static(br#"{"model":"m","max_tokens":1,"messages":[]}"#))
            .await
            .unwrap()
            .status(),
        200
    );
    let pid = gateway.pid();
    let baseline = status_kib(pid, "VmRSS:");
    reset_peak(pid);
    let response = send(body.clone()).await.unwrap();
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
    let one = peak_growth_bytes(pid, baseline);
    // The body, its injected copy, the buffers on the way up: a few times 32 MB, not 0.5–1 GB.
    assert!(one < 160 * MIB, "one 32 MB body raised the resident set by {} MiB", one / MIB);

    // Twenty at once: some wait for their share of the budget, the rest are told to retry; none
    // may cost more than the budget, and every client reads its answer. Each sends its whole
    // request before it reads, as Python's httpx does under the Anthropic SDK: 15 of 20 once met
    // the connection closed under their upload (a broken pipe, which no SDK reads as "retry").
    let baseline = status_kib(pid, "VmRSS:");
    reset_peak(pid);
    let addr = addr_of(&gateway);
    let answers =
        futures_util::future::join_all((0..20).map(|_| send_whole_then_read(&addr, &key, &body))).await;
    let mut statuses = Vec::new();
    for answer in answers {
        let (status, head, text) = answer.unwrap_or_else(|err| panic!("a client got no answer: {err}"));
        if status == 529 {
            assert!(head.contains("\r\nretry-after: "), "{head}");
            assert!(text.contains("\"overloaded_error\""), "{text}");
        }
        statuses.push(status);
    }
    assert!(statuses.iter().all(|s| *s == 200 || *s == 529), "{statuses:?}");
    // One caller's share (128 MiB) holds two of these at once, their copies counted.
    assert!(statuses.iter().filter(|s| **s == 200).count() >= 2, "{statuses:?}");
    let twenty = peak_growth_bytes(pid, baseline);
    // The documented bound: limits.max_inflight_body_bytes (256 MiB) plus working buffers.
    assert!(twenty < 384 * MIB, "twenty 32 MB bodies raised the resident set by {} MiB", twenty / MIB);
}
