//! Pins: each release reads its own schema version and renders its own template.

use super::*;

#[tokio::test]
async fn a_pin_chooses_the_release_and_each_release_injects_its_own_schema_and_template() {
    let rig = Rig::start(&[]);
    rig.remember_both_profiles().await;
    let pinner = rig.key(&[], &["pin_release"]).await;
    let plain = rig.key(&[], &[]).await;

    // Pinned to v2: v2's template, and only the schema-v2 record.
    let reply = rig.ask(&[("x-api-key", &pinner), ("x-memory-version", "v2")], MATCHING).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.version.as_deref(), Some("v2"));
    assert_eq!(reply.injected.as_deref(), Some("1"));
    let body = rig.last_upstream_body().await;
    let block = block_in(&body).expect("v2 injected a block");
    assert!(block.starts_with("<MEMORY_CONTEXT version=\"v2\">"), "{block}");
    assert!(block.contains("Memory notes for this conversation, grouped by record type"), "{block}");
    assert!(block.lines().any(|l| l == "## customer_profile (1)"), "v2 groups by type: {block}");
    assert!(block.trim_end().ends_with("</MEMORY_CONTEXT>"), "{block}");
    assert_eq!(ids_of(&block), set(&["profile-v2"]), "{block}");
    let line = &record_lines(&block)[0];
    assert_eq!(line["content"]["name"]["display_name"], "Dr. Ana Souza", "{line}");
    assert_eq!(line["content"]["contact"]["email"], "ana.souza@example.com", "{line}");

    // No pin: the active release, v1, with its own template and only the schema-v1 record.
    for (what, headers) in [
        ("no pin", vec![("x-api-key", pinner.as_str())]),
        ("pinned to v1", vec![("x-api-key", pinner.as_str()), ("x-memory-version", "v1")]),
        ("a caller that may not pin, not pinning", vec![("x-api-key", plain.as_str())]),
    ] {
        let reply = rig.ask(&headers, MATCHING).await;
        assert_eq!(reply.status, 200, "{what}: {}", reply.body);
        assert_eq!(reply.version.as_deref(), Some("v1"), "{what}");
        assert_eq!(reply.injected.as_deref(), Some("1"), "{what}");
        let block = block_in(&rig.last_upstream_body().await).expect("v1 injected a block");
        assert!(block.starts_with("<MEMORY_CONTEXT version=\"v1\">"), "{what}: {block}");
        assert!(block.contains("These are memory records retrieved for this conversation"), "{what}");
        assert!(!block.contains("## "), "{what}: v1 does not group: {block}");
        assert!(!block.contains("version=\"v2\""), "{what}: {block}");
        assert_eq!(ids_of(&block), set(&["profile-v1"]), "{what}: {block}");
        assert_eq!(record_lines(&block)[0]["content"]["name"], "Ana Souza", "{what}");
    }
    let recorded = rig.mock.recorded().await;
    assert_eq!(recorded.len(), 4);
    for seen in &recorded {
        assert!(seen["headers"].get("x-memory-version").is_none(), "the pin went upstream: {seen}");
    }

    // Refused pins never reach the upstream.
    let reply = rig.ask(&[("x-api-key", &pinner), ("x-memory-version", "v9")], MATCHING).await;
    reply.assert_error(400, "invalid_request_error", "an unknown release");
    let message = reply.body["error"]["message"].as_str().unwrap();
    assert!(message.contains("v9") && message.contains("v1, v2"), "{message}");
    for pin in ["v2", "v1"] {
        let reply = rig.ask(&[("x-api-key", &plain), ("x-memory-version", pin)], MATCHING).await;
        reply.assert_error(403, "permission_error", &format!("a pin to {pin} without pin_release"));
    }
    assert_eq!(rig.patch("v2", "ops", json!({"stage": "retired"})).await["stage"], "retired");
    let reply = rig.ask(&[("x-api-key", &pinner), ("x-memory-version", "v2")], MATCHING).await;
    reply.assert_error(400, "invalid_request_error", "a retired release");
    assert!(reply.body["error"]["message"].as_str().unwrap().contains("retired"), "{}", reply.body);
    assert_eq!(rig.mock.recorded().await.len(), 4, "a refused request reached the upstream");

    // Made available again, it can be pinned again.
    rig.patch("v2", "ops", json!({"stage": "available"})).await;
    let reply = rig.ask(&[("x-api-key", &pinner), ("x-memory-version", "v2")], MATCHING).await;
    assert_eq!((reply.status, reply.version.as_deref()), (200, Some("v2")), "{}", reply.body);
}
