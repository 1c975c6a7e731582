//! Finding 5: a 32 MB body holding a long array once cost ~0.5–1 GB of memory to check two
//! fields, and nothing bounded how many such bodies were held at once. Now a body is held as its
//! bytes (twice at most: the copy with memory), and the bytes held across requests are bounded
//! by `limits.max_inflight_body_bytes` (256 MiB by default): concurrent large bodies queue or
//! get 529, and memgate's resident memory grows by at most about that bound (docs/operations.md).

use crate::e2e_identity::{issue_key, managed_gateway};
use crate::support::{Proc, client};
use serde_json::json;

/// Just under Anthropic's 32 MiB limit, also once memory is injected.
const BODY_BYTES: usize = 32_000_000;
const MIB: u64 = 1024 * 1024;

/// A valid Messages request padded with a long array of zeros: the shape that is cheap to send
/// and costly to parse into a `Value` (32 bytes per two-byte element).
fn padded_body() -> Vec<u8> {
    let head = json!({"model": "claude-test", "max_tokens": 8,
        "messages": [{"role": "user", "content": "What is your refund policy?"}]})
    .to_string();
    let mut body = Vec::with_capacity(BODY_BYTES);
    body.extend_from_slice(&head.as_bytes()[..head.len() - 1]);
    body.extend_from_slice(b",\"padding\":[0");
    while body.len() < BODY_BYTES - 3 {
        body.extend_from_slice(b",0");
    }
    body.extend_from_slice(b"]}");
    body
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

    // Twenty at once: some wait for their share of the budget; none may cost more than it.
    let baseline = status_kib(pid, "VmRSS:");
    reset_peak(pid);
    let answers = futures_util::future::join_all((0..20).map(|_| send(body.clone()))).await;
    let mut statuses = Vec::new();
    for answer in answers {
        let answer = answer.unwrap();
        let status = answer.status().as_u16();
        if status == 529 {
            assert!(answer.headers().contains_key("retry-after"));
        }
        statuses.push(status);
    }
    assert!(statuses.iter().all(|s| *s == 200 || *s == 529), "{statuses:?}");
    assert!(statuses.iter().filter(|s| **s == 200).count() >= 4, "{statuses:?}");
    let twenty = peak_growth_bytes(pid, baseline);
    // The documented bound: limits.max_inflight_body_bytes (256 MiB) plus working buffers.
    assert!(twenty < 384 * MIB, "twenty 32 MB bodies raised the resident set by {} MiB", twenty / MIB);
}
