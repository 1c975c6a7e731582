//! The guard rolls a failing canary back by itself.

use super::*;

#[tokio::test]
async fn the_guard_rolls_back_a_canary_whose_error_rate_crosses_its_bound() {
    // Only requests that carry v2's block fail upstream.
    let rig = Rig::start(&["--fail-marker", "version=\"v2\""]);
    rig.remember_both_profiles().await;
    let key = rig.key(&[], &[]).await;
    let guard = json!({"enabled": true, "window_secs": 30, "min_calls": 10, "max_error_rate": 0.5});
    rig.patch("v2", "ops", json!({"stage": "canary", "canary_percent": 100, "guard": guard})).await;

    // One request, then a look at v2, until the guard (a ticker, once a second) has acted.
    let answers = std::cell::RefCell::new(Vec::new());
    let (rig_ref, key_ref, answers_ref) = (&rig, key.as_str(), &answers);
    let release = eventually(PATIENCE, "the guard to roll v2 back", move || async move {
        let reply = rig_ref.ask(&[("x-api-key", key_ref)], MATCHING).await;
        answers_ref.borrow_mut().push((reply.status, reply.version));
        let release = rig_ref.release("v2").await;
        (release["rollout"]["stage"] == "available").then_some(release)
    })
    .await;
    let answers = answers.into_inner();
    let failed = answers.iter().filter(|a| *a == &(500, Some("v2".to_owned()))).count();
    assert!(failed >= 10, "rolled back before min_calls: {answers:?}");
    // Every request before the rollback went to v2 and failed; the last one may have come after.
    let (last, before) = answers.split_last().unwrap();
    assert!(before.iter().all(|a| a == &(500, Some("v2".to_owned()))), "{answers:?}");
    assert!(last == &(500, Some("v2".to_owned())) || last == &(200, Some("v1".to_owned())), "{answers:?}");

    assert_eq!(release["rollout"]["canary_percent"], 0.0, "{release}");
    let note = release["rollout"]["note"].as_str().expect("the rollback says why");
    let history = rig.history("v2").await;
    let rollback = history.last().unwrap();
    assert_eq!(
        (&rollback["action"], &rollback["actor"]),
        (&json!("rollback"), &json!("guard")),
        "{history:#?}"
    );
    let reason = rollback["reason"].as_str().unwrap();
    assert!(reason.contains("error rate") && reason.contains("50.0%"), "{reason}");
    assert_eq!(note, reason);
    assert_eq!(rollback["before"]["stage"], "canary", "{rollback}");
    assert_eq!(rollback["after"]["stage"], "available", "{rollback}");
    assert!(parse_rfc3339_ms(rollback["at"].as_str().unwrap()).is_some(), "{rollback}");

    let metrics = rig.metrics().await;
    let series = |name: &str, labels: &[(&str, &str)]| metric(&metrics, name, labels);
    assert_eq!(
        series("memgate_release_rollbacks_total", &[("release", "v2"), ("by", "guard")]),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(
        series("memgate_release_requests_total", &[("release", "v2"), ("outcome", "upstream_error")]),
        Some(failed as f64),
        "{metrics}"
    );
    let stats = rig.stats("v2").await;
    assert_eq!(
        (stats["calls"].as_u64(), stats["upstream_errors"].as_u64()),
        (Some(failed as u64), Some(failed as u64))
    );
    // The rollback forgets the window; only a request routed just before it may land after it.
    assert!(stats["window"]["calls"].as_u64().unwrap() <= 1, "the rollback kept the window: {stats}");

    // Afterwards everyone is back on v1, and its requests succeed.
    for _ in 0..5 {
        let reply = rig.ask(&[("x-api-key", &key)], MATCHING).await;
        assert_eq!((reply.status, reply.version.as_deref()), (200, Some("v1")), "{}", reply.body);
        assert_eq!(reply.injected.as_deref(), Some("1"));
        let block = block_in(&rig.last_upstream_body().await).unwrap();
        assert!(block.starts_with("<MEMORY_CONTEXT version=\"v1\">"), "{block}");
    }

    // A canary that stays healthy for its period is promoted by the guard. Queries that name no
    // record carry no block, so the fail marker leaves them alone.
    let guard = json!({"enabled": true, "window_secs": 30, "min_calls": 3, "max_error_rate": 0.5, "promote_after_secs": 1});
    rig.patch("v2", "ops", json!({"stage": "canary", "canary_percent": 100, "guard": guard})).await;
    let promoted = eventually(PATIENCE, "the guard to promote v2", || async {
        let reply = rig.ask(&[("x-api-key", &key)], UNRELATED).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        let release = rig.release("v2").await;
        (release["active"] == true).then_some(release)
    })
    .await;
    assert_eq!(promoted["rollout"]["stage"], "active", "{promoted}");
    let history = rig.history("v2").await;
    let promotion = history.last().unwrap();
    assert_eq!(
        (&promotion["action"], &promotion["actor"]),
        (&json!("promote"), &json!("guard")),
        "{history:#?}"
    );
    assert!(promotion["reason"].as_str().unwrap().contains("healthy"), "{promotion}");
    assert_eq!(rig.release("v1").await["rollout"]["stage"], "available");
    assert_eq!(rig.routed(&[("x-api-key", &key)]).await, "v2");
}
