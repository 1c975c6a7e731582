//! Hostile input on the release endpoints, and PATCH as a merge patch.

use super::*;

#[tokio::test]
async fn the_release_endpoints_refuse_unknown_releases_and_bad_rollout_changes() {
    let rig = Rig::start(&[]);
    let before = rig.release("v2").await;

    for (method, path) in [
        ("GET", "/releases/nope"),
        ("PATCH", "/releases/nope"),
        ("POST", "/releases/nope/promote"),
        ("POST", "/releases/nope/rollback"),
        ("GET", "/releases/nope/stats"),
        ("GET", "/releases/nope/history"),
        ("GET", "/releases/V2"),
        ("GET", "/releases/v2%00"),
        ("GET", "/releases/..%2Fv2"),
        ("GET", "/releases/%E2%9C%93"),
    ] {
        let body = (method == "PATCH").then(|| json!({"stage": "canary"}));
        let (status, answer) = rig.admin(method, path, None, body.as_ref()).await;
        assert_eq!(status, 404, "{method} {path}: {answer}");
        assert_eq!(answer["error"]["type"], "not_found_error", "{method} {path}: {answer}");
    }

    for bad in [
        json!({"stage": "canary", "canary_precent": 10}),
        json!({"guard": {"enabled": true, "max_errors": 3}}),
        json!({"allow": {"users": ["u-1"]}}),
        json!(["stage", "canary"]),
        json!("canary"),
        json!(42),
        json!(null),
        json!({"canary_percent": 150}),
        json!({"canary_percent": -1}),
        json!({"canary_percent": "10"}),
        json!({"shadow_sample_percent": 101}),
        json!({"allow": {"cidrs": ["10.0.0.0/33"]}}),
        json!({"allow": {"cidrs": ["not-a-cidr"]}}),
        json!({"allow": {"cidrs": "10.0.0.0/8"}}),
        json!({"stage": "active"}),
        json!({"stage": "Canary"}),
        json!({"stage": "everywhere"}),
        json!({"guard": {"max_error_rate": 2}}),
        json!({"guard": {"window_secs": 0}}),
        json!({"stage_since_ms": 0}),
    ] {
        let (status, answer) = rig.admin("PATCH", "/releases/v2", None, Some(&bad)).await;
        assert_eq!(status, 400, "{bad}: {answer}");
        assert_eq!(answer["error"]["type"], "invalid_request_error", "{bad}: {answer}");
    }
    let not_json = rig
        .http
        .patch(rig.gw.url("/admin/v1/releases/v2"))
        .bearer_auth(ADMIN_TOKEN)
        .header("content-type", "application/json")
        .body("{\"stage\": ")
        .send()
        .await
        .unwrap();
    assert_eq!(not_json.status(), 400);
    for actor in ["robert'); DROP TABLE release_history;--", &"a".repeat(65)] {
        let (status, answer) =
            rig.admin("PATCH", "/releases/v2", Some(actor), Some(&json!({"canary_percent": 5}))).await;
        assert_eq!(status, 400, "actor {actor}: {answer}");
    }
    let anonymous = rig
        .http
        .patch(rig.gw.url("/admin/v1/releases/v2"))
        .json(&json!({"stage": "canary"}))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 401);

    // The active release keeps its stage and cannot be rolled back.
    for bad in [json!({"stage": "canary"}), json!({"stage": "retired"}), json!({"stage": "shadow"})] {
        let (status, answer) = rig.admin("PATCH", "/releases/v1", None, Some(&bad)).await;
        assert_eq!(status, 400, "v1 {bad}: {answer}");
    }
    let (status, answer) = rig.admin("POST", "/releases/v1/rollback", None, None).await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"]["type"], "invalid_request_error", "{answer}");
    assert!(answer["error"]["message"].as_str().unwrap().contains("active"), "{answer}");

    // Nothing of it changed anything.
    assert_eq!(rig.release("v2").await, before);
    assert_eq!(rig.release("v1").await["active"], true);
    for name in ["v1", "v2"] {
        assert_eq!(rig.history(name).await, Vec::<Value>::new(), "{name}");
    }
}

/// PATCH is a JSON merge patch (RFC 7396): a nested object changes only the fields it names, and
/// `null` takes a field back to its default.
#[tokio::test]
async fn a_patch_changes_only_what_it_names() {
    let rig = Rig::start(&[]);
    let first =
        json!({"allow": {"subjects": ["u-1"], "cidrs": ["10.0.0.0/8"]}, "guard": {"window_secs": 120}});
    rig.patch("v2", "alice", first).await;
    let second =
        json!({"allow": {"subjects": ["u-2"]}, "guard": {"max_error_rate": 0.5}, "note": "watching"});
    let rollout = rig.patch("v2", "alice", second).await;
    assert_eq!(rollout["allow"]["subjects"], json!(["u-2"]), "{rollout}");
    assert_eq!(rollout["allow"]["cidrs"], json!(["10.0.0.0/8"]), "the CIDRs were dropped: {rollout}");
    assert_eq!(rollout["guard"]["window_secs"], 120, "the window was reset: {rollout}");
    assert_eq!(rollout["guard"]["max_error_rate"], 0.5, "{rollout}");
    assert_eq!(rollout["note"], "watching", "{rollout}");
    let rollout = rig.patch("v2", "alice", json!({"note": null, "allow": {"cidrs": null}})).await;
    assert_eq!(rollout["note"], Value::Null, "{rollout}");
    assert_eq!(rollout["allow"]["cidrs"], json!([]), "null takes a field back to its default: {rollout}");
    assert_eq!(rollout["allow"]["subjects"], json!(["u-2"]), "{rollout}");
}
