//! Per-release stats.

use super::*;

#[tokio::test]
async fn release_stats_count_calls_errors_injected_tokens_and_added_latency_per_release() {
    let rig = Rig::start(&["--fail-marker", "version=\"v2\""]);
    rig.remember_both_profiles().await;
    let key = rig.key(&[], &["pin_release", "debug"]).await;
    let on_v1 = [("x-api-key", key.as_str()), ("x-memory-debug", "1")];
    let on_v2 = [("x-api-key", key.as_str()), ("x-memory-debug", "1"), ("x-memory-version", "v2")];
    for name in ["v1", "v2"] {
        let stats = rig.stats(name).await;
        for field in ["calls", "share", "error_rate", "injected_records", "injected_tokens"] {
            assert_eq!(stats[field].as_f64(), Some(0.0), "{name} before any request: {stats}");
        }
    }

    // 3 calls to v2 whose query names no record: no block, so the fail marker does not fire.
    let mut v2_replies = Vec::new();
    for _ in 0..3 {
        let reply = rig.ask(&on_v2, UNRELATED).await;
        assert_eq!((reply.status, reply.version.as_deref()), (200, Some("v2")), "{}", reply.body);
        assert_eq!((reply.injected.as_deref(), reply.tokens()), (Some("0"), 0));
        v2_replies.push(reply);
    }
    let stats = rig.stats("v2").await;
    assert_eq!(stats["calls"], 3, "{stats}");
    assert_eq!(stats["share"], 1.0, "{stats}");
    assert_eq!((stats["injected_records"].as_u64(), stats["injected_tokens"].as_u64()), (Some(0), Some(0)));
    assert_eq!(stats["error_rate"], 0.0, "{stats}");

    // 6 calls to v1 that inject its record, and 4 to v2 that inject v2's, which the upstream
    // refuses (the block holds the fail marker).
    let mut v1_replies = Vec::new();
    for _ in 0..6 {
        let reply = rig.ask(&on_v1, MATCHING).await;
        assert_eq!((reply.status, reply.version.as_deref()), (200, Some("v1")), "{}", reply.body);
        assert_eq!(reply.injected.as_deref(), Some("1"));
        v1_replies.push(reply);
    }
    for _ in 0..4 {
        let reply = rig.ask(&on_v2, MATCHING).await;
        reply.assert_error(500, "api_error", "a v2 block through the fail marker");
        assert_eq!((reply.version.as_deref(), reply.injected.as_deref()), (Some("v2"), Some("1")));
        v2_replies.push(reply);
    }

    let total = (v1_replies.len() + v2_replies.len()) as f64;
    for (name, replies, errors) in [("v1", &v1_replies, 0u64), ("v2", &v2_replies, 4)] {
        let stats = rig.stats(name).await;
        let calls = replies.len() as u64;
        let tokens: u64 = replies.iter().map(Reply::tokens).sum();
        let records = replies.iter().filter(|r| r.injected.as_deref() == Some("1")).count() as u64;
        assert!(tokens > 0, "{name}");
        assert_eq!(stats["calls"], calls, "{name}: {stats}");
        assert_eq!(stats["upstream_errors"], errors, "{name}: {stats}");
        assert_eq!(stats["memory_errors"], 0, "{name}: {stats}");
        assert_eq!(stats["error_rate"].as_f64(), Some(errors as f64 / calls as f64), "{name}: {stats}");
        assert_eq!(stats["injected_records"], records, "{name}: {stats}");
        assert_eq!(stats["injected_tokens"], tokens, "{name}: injected tokens against the traces: {stats}");
        assert_eq!(stats["share"].as_f64(), Some(calls as f64 / total), "{name}: {stats}");
        assert_eq!(
            stats["window"],
            json!({"secs": 60, "calls": calls, "errors": errors, "error_rate": errors as f64 / calls as f64}),
            "{name}"
        );
        // memgate's own time is part of what the client waited for, and not nothing.
        let slowest_ms = replies.iter().map(|r| r.elapsed.as_secs_f64() * 1000.0).fold(0.0, f64::max);
        let latency = &stats["added_latency_ms"];
        let (mean, p50, p99) = (
            latency["mean"].as_f64().unwrap(),
            latency["p50"].as_f64().unwrap(),
            latency["p99"].as_f64().unwrap(),
        );
        assert!(mean > 0.0 && p50 > 0.0, "{name}: {latency}");
        assert!(p50 <= p99 && mean <= p99, "{name}: {latency}");
        assert!(p99 <= slowest_ms, "{name}: added {p99} ms, yet the slowest answer took {slowest_ms} ms");
    }

    let metrics = rig.metrics().await;
    for (release, outcome, count) in [("v1", "ok", 6.0), ("v2", "ok", 3.0), ("v2", "upstream_error", 4.0)] {
        let labels = [("release", release), ("outcome", outcome)];
        assert_eq!(metric(&metrics, "memgate_release_requests_total", &labels), Some(count), "{labels:?}");
    }
    let (status, answer) = rig.admin("GET", "/releases/nope/stats", None, None).await;
    assert_eq!(status, 404, "{answer}");
}
