//! Regressions: bugs found while writing the others, each of which these tests caught.

use super::*;

/// PRODUCT.md: `…/rollback` withdraws a canary; a retired release is withdrawn already. Refusing
/// the rollback is right, and so is doing nothing; bringing the release back to `available`,
/// where pins reach it again, is not.
#[tokio::test]
async fn rolling_back_a_retired_release_leaves_it_retired() {
    let rig = Rig::start(&[]);
    let pinner = rig.key(&[], &["pin_release"]).await;
    rig.patch("v2", "ops", json!({"stage": "retired"})).await;
    let (status, answer) = rig.admin("POST", "/releases/v2/rollback", None, None).await;
    assert!(status == 400 || status == 200, "{status} {answer}");
    let v2 = rig.release("v2").await;
    assert_eq!(v2["rollout"]["stage"], "retired", "a rollback brought a retired release back: {v2}");
    let reply = rig.ask(&[("x-api-key", &pinner), ("x-memory-version", "v2")], UNRELATED).await;
    reply.assert_error(400, "invalid_request_error", "a pin to a retired release after a rollback");
}

/// A shadow run renders the candidate's block and throws it away: nothing of it is injected, so
/// the per-release injection metrics must not count it.
#[tokio::test]
async fn a_shadow_run_is_not_counted_as_an_injection_of_the_candidate() {
    let rig = Rig::start(&[]);
    rig.remember_both_profiles().await;
    let key = rig.key(&[], &[]).await;
    rig.patch("v2", "ops", json!({"stage": "shadow", "shadow_sample_percent": 100})).await;
    for _ in 0..3 {
        let reply = rig.ask(&[("x-api-key", &key)], MATCHING).await;
        assert_eq!((reply.status, reply.version.as_deref()), (200, Some("v1")), "{}", reply.body);
    }
    eventually(PATIENCE, "3 shadow samples", || async {
        (rig.stats("v2").await["shadow"]["sampled"] == 3).then_some(())
    })
    .await;
    let metrics = rig.metrics().await;
    let injected = |name: &str, release: &str| metric(&metrics, name, &[("release", release)]).unwrap_or(0.0);
    assert_eq!(injected("memgate_memory_injected_records_total", "v1"), 3.0, "{metrics}");
    assert_eq!(
        injected("memgate_memory_injected_records_total", "v2"),
        0.0,
        "v2 injected nothing, yet the metric counts its shadow runs"
    );
    assert_eq!(injected("memgate_memory_injected_tokens_total", "v2"), 0.0, "{metrics}");
}

/// The shadow records how the candidate differs from what the active release injected. A request
/// that turned memory off (`X-Memory-Mode: off`) had no funnel run to compare with: counting it
/// shows the candidate "adding" every record the active release would have injected as well.
#[tokio::test]
async fn a_request_with_memory_turned_off_is_not_recorded_as_a_shadow_difference() {
    let rig = Rig::start(&[]);
    rig.remember_both_profiles().await;
    let key = rig.key(&[], &[]).await;
    rig.patch("v2", "ops", json!({"stage": "shadow", "shadow_sample_percent": 100})).await;
    for _ in 0..3 {
        let reply = rig.ask(&[("x-api-key", &key), ("x-memory-mode", "off")], MATCHING).await;
        assert_eq!((reply.status, reply.injected.as_deref()), (200, Some("0")), "{}", reply.body);
    }
    // Then three ordinary requests; once their differences are in, the earlier ones would be too.
    for _ in 0..3 {
        let reply = rig.ask(&[("x-api-key", &key)], MATCHING).await;
        assert_eq!(reply.injected.as_deref(), Some("1"), "{}", reply.body);
    }
    let real = json!({"added": ["profile-v2"], "dropped": ["profile-v1"]});
    let shadow = eventually(PATIENCE, "the ordinary requests' shadow differences", || async {
        let shadow = rig.stats("v2").await["shadow"].clone();
        let recent = shadow["recent"].as_array().unwrap();
        let ordinary =
            recent.iter().filter(|d| d["added"] == real["added"] && d["dropped"] == real["dropped"]).count();
        (ordinary == 3).then_some(shadow)
    })
    .await;
    assert_eq!(shadow["sampled"], 3, "requests with memory off were sampled: {shadow}");
    assert_eq!(
        (shadow["ids_added"].as_u64(), shadow["ids_dropped"].as_u64()),
        (Some(3), Some(3)),
        "{shadow}"
    );
}
