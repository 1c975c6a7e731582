//! Shadow mode.

use super::*;

#[tokio::test]
async fn a_shadow_release_runs_beside_the_active_one_and_records_the_difference_without_sending_it() {
    let rig = Rig::start(&[]);
    rig.remember_both_profiles().await;
    let key = rig.key(&[], &["pin_release", "debug"]).await;
    let state = rig.patch("v2", "ops", json!({"stage": "shadow", "shadow_sample_percent": 100})).await;
    assert_eq!(state["stage"], "shadow");

    // v1 injects profile-v1 where v2 would inject profile-v2: one id added and one dropped each.
    let mut v1_tokens = Vec::new();
    for _ in 0..5 {
        let reply = rig.ask(&[("x-api-key", &key), ("x-memory-debug", "1")], MATCHING).await;
        assert_eq!((reply.status, reply.version.as_deref()), (200, Some("v1")), "{}", reply.body);
        assert_eq!(reply.injected.as_deref(), Some("1"));
        v1_tokens.push(reply.tokens() as i64);
    }
    // Nothing to inject for either: sampled, with no difference.
    for _ in 0..2 {
        let reply = rig.ask(&[("x-api-key", &key)], UNRELATED).await;
        assert_eq!((reply.status, reply.version.as_deref()), (200, Some("v1")), "{}", reply.body);
    }
    let stats = eventually(PATIENCE, "7 shadow samples of v2", || async {
        let stats = rig.stats("v2").await;
        (stats["shadow"]["sampled"] == 7).then_some(stats)
    })
    .await;
    let shadow = &stats["shadow"];
    assert_eq!(
        (shadow["ids_added"].as_u64(), shadow["ids_dropped"].as_u64()),
        (Some(5), Some(5)),
        "{shadow}"
    );
    let recent = shadow["recent"].as_array().unwrap();
    assert_eq!(recent.len(), 7, "{shadow}");
    let differing = recent
        .iter()
        .filter(|d| d["added"] == json!(["profile-v2"]) && d["dropped"] == json!(["profile-v1"]));
    assert_eq!(differing.count(), 5, "{shadow}");
    let same = recent.iter().filter(|d| d == &&json!({"added": [], "dropped": [], "tokens_delta": 0}));
    assert_eq!(same.count(), 2, "{shadow}");
    assert_eq!(stats["calls"], 0, "a shadow serves nobody: {stats}");

    // Nothing of v2 ever went upstream.
    let recorded = rig.mock.recorded().await;
    assert_eq!(recorded.len(), 7);
    for seen in &recorded {
        let mut texts = Vec::new();
        strings_in(&seen["body"], &mut texts);
        assert!(!texts.iter().any(|t| t.contains("version=\"v2\"")), "a shadow block was sent: {seen}");
    }
    assert_eq!(recorded.iter().filter(|s| block_in(&s["body"]).is_some()).count(), 5);

    // The token difference is what v2's block costs over v1's, per sampled request.
    let pinned =
        rig.ask(&[("x-api-key", &key), ("x-memory-debug", "1"), ("x-memory-version", "v2")], MATCHING).await;
    assert_eq!((pinned.status, pinned.version.as_deref()), (200, Some("v2")), "{}", pinned.body);
    let v2_tokens = pinned.tokens() as i64;
    let expected: i64 = v1_tokens.iter().map(|t1| v2_tokens - t1).sum();
    assert_eq!(shadow["tokens_delta"], expected, "{shadow}");
}
