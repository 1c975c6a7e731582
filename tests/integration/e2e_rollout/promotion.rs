//! Promotion and rollback, by the admin API and by the CLI, and the history of it all.

use super::*;

/// A release's history as (action, actor, reason, stage after), checking every entry has a time
/// and that the times never go back.
fn changes(entries: &[Value]) -> Vec<(String, String, String, String)> {
    let mut last_at = 0;
    entries
        .iter()
        .map(|e| {
            let at = parse_rfc3339_ms(e["at"].as_str().unwrap()).unwrap_or_else(|| panic!("no time: {e}"));
            assert!(at >= last_at, "history out of order: {entries:#?}");
            last_at = at;
            let field = |f: &str| e[f].as_str().unwrap_or_else(|| panic!("no {f}: {e}")).to_owned();
            (
                field("action"),
                field("actor"),
                field("reason"),
                e["after"]["stage"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn change(action: &str, actor: &str, reason: &str, stage: &str) -> (String, String, String, String) {
    (action.to_owned(), actor.to_owned(), reason.to_owned(), stage.to_owned())
}

#[tokio::test]
async fn promotions_and_rollbacks_by_the_admin_api_take_effect_at_once_and_are_recorded() {
    let rig = Rig::start(&[]);
    let key = rig.key(&[], &[]).await;
    let plain = [("x-api-key", key.as_str())];
    let (status, list) = rig.admin("GET", "/releases", None, None).await;
    assert_eq!(status, 200, "{list}");
    let names: Vec<(&Value, &Value)> =
        list["data"].as_array().unwrap().iter().map(|r| (&r["name"], &r["active"])).collect();
    assert_eq!(
        names,
        [
            (&json!("v1"), &json!(true)),
            (&json!("v2"), &json!(false)),
            (&json!("v3"), &json!(false)),
            (&json!("v4"), &json!(false))
        ],
        "{list}"
    );

    rig.patch("v2", "alice", json!({"stage": "canary", "canary_percent": 5})).await;
    let reason = json!({"reason": "canary is healthy"});
    let (status, answer) = rig.admin("POST", "/releases/v2/promote", Some("alice"), Some(&reason)).await;
    assert_eq!((status, answer), (200, json!({"name": "v2", "active": true})));
    assert_eq!(rig.routed(&plain).await, "v2");
    let (v1, v2) = (rig.release("v1").await, rig.release("v2").await);
    assert_eq!((&v1["active"], &v1["rollout"]["stage"]), (&json!(false), &json!("available")), "{v1}");
    assert_eq!((&v2["active"], &v2["rollout"]["stage"]), (&json!(true), &json!("active")), "{v2}");
    assert_eq!(v2["rollout"]["canary_percent"], 0.0, "{v2}");
    let (status, answer) = rig.admin("POST", "/releases/v2/rollback", Some("alice"), None).await;
    assert_eq!(status, 400, "the active release was rolled back: {answer}");
    assert_eq!(answer["error"]["type"], "invalid_request_error", "{answer}");
    let (status, answer) = rig.admin("POST", "/releases/v1/promote", Some("bob"), None).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(rig.routed(&plain).await, "v1");

    rig.patch("v2", "carol", json!({"stage": "canary", "canary_percent": 100})).await;
    assert_eq!(rig.routed(&plain).await, "v2");
    let reason = json!({"reason": "bad answers"});
    let (status, answer) = rig.admin("POST", "/releases/v2/rollback", Some("carol"), Some(&reason)).await;
    assert_eq!((status, answer), (200, json!({"name": "v2", "rolled_back": true})));
    assert_eq!(rig.routed(&plain).await, "v1");
    let v2 = rig.release("v2").await;
    assert_eq!(
        (&v2["rollout"]["stage"], &v2["rollout"]["canary_percent"]),
        (&json!("available"), &json!(0.0))
    );
    assert_eq!(v2["rollout"]["note"], "bad answers", "{v2}");
    let metrics = rig.metrics().await;
    let by_person =
        metric(&metrics, "memgate_release_rollbacks_total", &[("release", "v2"), ("by", "person")]);
    assert_eq!(by_person, Some(1.0), "{metrics}");

    assert_eq!(
        changes(&rig.history("v2").await),
        [
            change("patch", "alice", "", "canary"),
            change("promote", "alice", "canary is healthy", "active"),
            change("promote", "bob", "", "available"),
            change("patch", "carol", "", "canary"),
            change("rollback", "carol", "bad answers", "available"),
        ]
    );
    assert_eq!(
        changes(&rig.history("v1").await),
        [
            change("promote", "alice", "canary is healthy", "available"),
            change("promote", "bob", "", "active")
        ]
    );
}

#[tokio::test]
async fn the_cli_promotes_and_rolls_back_on_the_database_and_the_running_gateway_follows() {
    let rig = Rig::start(&[]);
    let key = rig.key(&[], &[]).await;
    let plain = [("x-api-key", key.as_str())];
    // The running gateway notices another process's change within about a second (its ticker).
    let follows = |expected: &'static str| {
        let (rig, plain) = (&rig, &plain);
        async move {
            let started = Instant::now();
            eventually(Duration::from_secs(5), &format!("the gateway to serve {expected}"), || async move {
                (rig.routed(plain).await == expected).then_some(())
            })
            .await;
            eprintln!("the gateway served {expected} {:?} after the CLI finished", started.elapsed());
        }
    };

    let output = rig.cli(&["promote", "v2", "--reason", "night switch"]).await;
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let listed: Vec<Value> =
        String::from_utf8(output.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(listed.iter().find(|r| r["name"] == "v2").unwrap()["active"], true, "{listed:?}");
    follows("v2").await;
    assert_eq!(rig.release("v2").await["active"], true);

    let output = rig.cli(&["rollback", "v2"]).await;
    assert!(!output.status.success(), "the CLI rolled back the active release");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("cannot be rolled back"), "{stderr}");
    let output = rig.cli(&["promote", "v1"]).await;
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    follows("v1").await;

    rig.patch("v2", "carol", json!({"stage": "canary", "canary_percent": 100})).await;
    assert_eq!(rig.routed(&plain).await, "v2");
    let output = rig.cli(&["rollback", "v2", "--reason", "cli rollback"]).await;
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    follows("v1").await;
    assert_eq!(rig.release("v2").await["rollout"]["stage"], "available");

    assert_eq!(
        changes(&rig.history("v2").await),
        [
            change("promote", "cli", "night switch", "active"),
            change("promote", "cli", "", "available"),
            change("patch", "carol", "", "canary"),
            change("rollback", "cli", "cli rollback", "available"),
        ]
    );
    assert_eq!(
        changes(&rig.history("v1").await),
        [change("promote", "cli", "night switch", "available"), change("promote", "cli", "", "active")]
    );
}
