//! Time and status: expired, future, paused and archived records are never injected, and explain says why.

use super::*;

/// The refund process in one of its editions: every edition names the alias `refund process`, so
/// a query that says it matches each one exactly.
fn refund_sop(id: &str, edition: &str, window: &[(&str, &str)]) -> Value {
    let mut record = json!({
        "id": id,
        "type": "internal_sop",
        "scope": ["team:support"],
        "aliases": ["refund process"],
        "content": {
            "title": format!("Refund process ({edition})"),
            "steps": format!(
                "1. Confirm the order and the damage with a photo.\n\
                 2. Refund to the original payment method within 5 business days.\n\
                 3. Log the case as {edition}."
            ),
            "owner_team": "Support"
        }
    });
    for (field, value) in window {
        record[*field] = json!(value);
    }
    record
}

#[tokio::test]
async fn expired_future_paused_and_archived_records_are_never_injected_and_explain_says_why() {
    let gate = Memgate::start(CONFIG);
    let records = [
        refund_sop("sop-refund-current", "current", &[("valid_from", "2024-01-01T00:00:00Z")]),
        refund_sop(
            "sop-refund-expired",
            "2023",
            &[("valid_from", "2023-01-01T00:00:00Z"), ("valid_until", "2024-01-01T00:00:00Z")],
        ),
        refund_sop("sop-refund-future", "2999", &[("valid_from", "2999-01-01T00:00:00Z")]),
        refund_sop("sop-refund-paused", "paused draft", &[]),
        refund_sop("sop-refund-archived", "archived", &[]),
    ];
    for record in &records {
        gate.remember(TENANT, record).await;
    }
    gate.set_status(TENANT, "sop-refund-paused", "pause").await;
    gate.set_status(TENANT, "sop-refund-archived", "archive").await;
    let mut billing = refund_sop("sop-refund-billing", "billing", &[]);
    billing["scope"] = json!(["team:billing"]);
    gate.remember(TENANT, &billing).await;

    let body = support_bot("What is the refund process for a damaged item?");
    let caller = json!({"scopes": ["team:support"], "subject": "u-789"});

    // Explain first: it shows what a request would get, and calls no upstream.
    let explained = gate.explain(TENANT, &body, caller, None).await;
    assert_eq!(gate.upstream_count().await, 0, "explain called the upstream");
    assert_eq!(explained["status"], "ok", "{explained}");
    assert_eq!(explained["release"], "v1");
    assert_eq!(explained["injected"], json!(["sop-refund-current"]), "{explained}");
    assert_eq!(explained["placed_in"], "system");
    let block = explained["block"].as_str().unwrap();
    assert!(block.starts_with("<MEMORY_CONTEXT version=\"v1\">") && block.ends_with("</MEMORY_CONTEXT>"));
    let lines = record_lines(block);
    assert_eq!(lines.len(), 1, "{block}");
    assert_eq!(lines[0]["id"], "sop-refund-current");
    assert_eq!(lines[0]["content"], records[0]["content"]);
    assert_eq!(
        block_in(&explained["request"]).as_deref(),
        Some(block),
        "the explained request holds the block"
    );

    let names: Vec<&str> = explained["trace"]["layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["layer"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["scope", "temporal", "semantic", "token_density"]);
    let layers = explained["trace"]["layers"].as_array().unwrap();
    for (index, layer) in layers.iter().enumerate() {
        let (input, output) = (layer["input"].as_u64().unwrap(), layer["output"].as_u64().unwrap());
        assert_eq!(input - output, layer["removed_count"].as_u64().unwrap(), "{layer}");
        if let Some(next) = layers.get(index + 1) {
            assert_eq!(next["input"], layer["output"], "layers do not chain: {explained}");
        }
    }
    // Paused and archived records get past no layer; where the trace lists them, it says why.
    for layer in layers {
        for entry in layer["removed"].as_array().into_iter().flatten() {
            if ["sop-refund-paused", "sop-refund-archived"].contains(&entry["id"].as_str().unwrap()) {
                assert!(entry["reason"].as_str().unwrap().starts_with("status "), "{entry}");
            }
        }
    }
    let scope = removed(&explained, "scope");
    assert_eq!(scope.keys().collect::<Vec<_>>(), ["sop-refund-billing"], "{explained}");
    assert!(scope["sop-refund-billing"].contains("no scope in common"), "{scope:?}");
    let temporal = removed(&explained, "temporal");
    assert_eq!(
        temporal.keys().cloned().collect::<BTreeSet<_>>(),
        set(&["sop-refund-expired", "sop-refund-future"]),
        "{explained}"
    );
    assert!(temporal["sop-refund-expired"].starts_with("expired at 2024-01-01"), "{temporal:?}");
    assert!(temporal["sop-refund-future"].starts_with("not valid before 2999-01-01"), "{temporal:?}");
    assert_eq!(layer(&explained, "token_density")["output"], 1);

    // The real request gets exactly what explain showed, byte for byte.
    let key = gate.key(TENANT, &["team:support"], &["assert_subject"]).await;
    let answer = gate.ask(&key, &[("x-memory-subject", "u-789")], &body).await;
    answer.assert_ok(1, "refund question");
    let upstream = gate.last_upstream().await;
    assert_eq!(injected_ids(&upstream["body"]), set(&["sop-refund-current"]));
    assert_eq!(block_in(&upstream["body"]).as_deref(), Some(block), "explain and the request differ");

    // A paused record comes back when it is activated: pausing hid it, nothing else did.
    gate.set_status(TENANT, "sop-refund-paused", "activate").await;
    let answer = gate.ask(&key, &[("x-memory-subject", "u-789")], &body).await;
    answer.assert_ok(2, "after activating the paused record");
    assert_eq!(
        injected_ids(&gate.last_upstream().await["body"]),
        set(&["sop-refund-current", "sop-refund-paused"])
    );
}
