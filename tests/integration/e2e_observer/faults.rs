//! Faults: the upstream rate-limited, overloaded or cut off, then well again; memgate killed
//! between queueing an exchange and extracting it. Nothing is lost and nothing is written twice.

use super::{Observed, QUICK, TENANT, body, by_gate};
use crate::support::eventually;
use std::time::Duration;

/// 429, 529 and an answer broken off, twice each before the upstream recovers: the exchange is
/// tried again after its backoff and written once.
#[tokio::test]
async fn e2e_observer_an_upstream_that_refuses_then_recovers_gets_the_exchange_written_once() {
    for (model, outcome) in [
        ("mock-flaky-429", "rate_limited"),
        ("mock-flaky-529", "overloaded"),
        ("mock-flaky-down", "upstream_error"),
    ] {
        let quick = QUICK.replace("mock-extract", model);
        let gate = Observed::start(
            &format!("[releases.v1]\nobserve = \"write\"\n{quick}"),
            &["--flaky-failures", "2"],
        );
        let key = gate.key(TENANT, &["observe", "assert_subject"]).await;
        let sent = serde_json::to_vec(&body(None, "I prefer green tea in the morning.", false)).unwrap();
        assert_eq!(gate.send(&key, Some("u-1"), &sent).await.status, 200);
        let status = gate.settled(TENANT, 1).await;
        assert_eq!(gate.extractions().await.len(), 3, "{model}: two failures, then the answer");
        let records = gate.records(TENANT, None).await;
        assert_eq!(records.len(), 1, "{model}: {records:#?}");
        assert_eq!(records[0]["status"], "active");
        assert_eq!(records[0]["content"]["preference"], "green tea in the morning");
        assert_eq!(by_gate(&status)["kept"].len(), 1);
        let metrics = gate.metrics().await;
        for line in [
            format!(r#"memgate_observer_extraction_calls_total{{outcome="{outcome}"}} 2"#),
            r#"memgate_observer_extraction_calls_total{outcome="ok"} 1"#.to_owned(),
        ] {
            assert!(metrics.contains(&line), "{line} missing from\n{metrics}");
        }
    }
}

/// A gateway killed while its extraction call is in flight (the exchange claimed, nothing
/// written): a restarted gateway on the same database extracts it once its lease has run out,
/// and writes each candidate once.
#[tokio::test]
async fn e2e_observer_a_gateway_killed_mid_extraction_leaves_the_exchange_to_the_next_one() {
    let slow = QUICK
        .replace("mock-extract", "mock-slow-first-byte")
        .replace("timeout_ms = 5000", "timeout_ms = 1500")
        .replace("lease_ms = 6000", "lease_ms = 2000");
    let gate = Observed::start(
        &format!("[releases.v1]\nobserve = \"propose\"\n{slow}"),
        &["--slow-first-byte-ms", "30000"],
    );
    let key = gate.key(TENANT, &["observe", "assert_subject"]).await;
    let sent = serde_json::to_vec(&body(None, "I prefer green tea in the morning.", false)).unwrap();
    assert_eq!(gate.send(&key, Some("u-1"), &sent).await.status, 200);
    eventually(Duration::from_secs(30), "the first extraction call", || async {
        (!gate.extractions().await.is_empty()).then_some(())
    })
    .await;
    let Observed { mock, gw, db, .. } = gate;
    drop(gw);
    assert_eq!(
        memgate::store::Store::connect(&db.url).await.unwrap().observer_queue_counts(None).await.unwrap()["pending"]
            + memgate::store::Store::connect(&db.url)
                .await
                .unwrap()
                .observer_queue_counts(None)
                .await
                .unwrap()["retrying"],
        1,
        "the exchange is still queued"
    );
    let (gw, _config) =
        Observed::gateway(&mock, &db, &format!("[releases.v1]\nobserve = \"propose\"\n{QUICK}"));
    let again = Observed { mock, gw, db, http: crate::support::client(), _config };
    let status = again.settled(TENANT, 7).await;
    assert_eq!(status["outcomes"].as_array().unwrap().len(), 7, "each candidate decided once");
    let records = again.records(TENANT, None).await;
    assert_eq!(records.len(), 1, "{records:#?}");
    assert_eq!(records[0]["status"], "proposed");
    assert_eq!(again.extractions().await.len(), 2, "the killed call and the restarted one");
}
