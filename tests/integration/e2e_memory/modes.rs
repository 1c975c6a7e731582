//! X-Memory-Mode, X-Memory-Debug, count_tokens, and access counts.

use super::*;

#[tokio::test]
async fn memory_mode_debug_and_count_tokens() {
    let gate = Memgate::start(CONFIG);
    let id = gate
        .remember(
            TENANT,
            &json!({
                "type": "fact",
                "scope": ["team:support"],
                "aliases": ["gift wrapping"],
                "content": {"statement": "Gift wrapping costs $5 and includes a handwritten card."}
            }),
        )
        .await;
    let plain = gate.key(TENANT, &["team:support"], &[]).await;
    let debugger = gate.key(TENANT, &["team:support"], &["debug"]).await;
    let body = support_bot("Can you add gift wrapping to my order?");

    for mode in [None, Some("read")] {
        let headers: Vec<(&str, &str)> = mode.map(|m| ("x-memory-mode", m)).into_iter().collect();
        let answer = gate.ask(&plain, &headers, &body).await;
        answer.assert_ok(1, &format!("mode {mode:?}"));
        assert!(answer.trace.is_none(), "a trace nobody asked for");
        assert_eq!(injected_ids(&gate.last_upstream().await["body"]), set(&[&id]));
    }

    let answer = gate.ask(&plain, &[("x-memory-mode", "off")], &body).await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.memory_status.as_deref(), Some("skipped"));
    assert_eq!(answer.injected.as_deref(), Some("0"));
    assert_eq!(gate.last_upstream().await["body"], body, "mode off changed the body");

    let before = gate.upstream_count().await;
    for mode in ["write", "none", ""] {
        let answer = gate.ask(&plain, &[("x-memory-mode", mode)], &body).await;
        answer.assert_error(400, "invalid_request_error", &format!("mode {mode:?}"));
    }
    let answer = gate.ask(&plain, &[("x-memory-debug", "1")], &body).await;
    answer.assert_error(403, "permission_error", "debug without the permission");
    assert_eq!(gate.upstream_count().await, before, "a refused request went upstream");

    let answer = gate.ask(&debugger, &[("x-memory-debug", "1")], &body).await;
    answer.assert_ok(1, "debug");
    let trace: Value = serde_json::from_str(answer.trace.as_deref().expect("X-Memory-Trace")).unwrap();
    assert_eq!(trace["injected"], json!([id]), "{trace}");
    assert!(trace["trace"]["layers"].as_array().is_some_and(|l| l.len() == 4), "{trace}");

    // count_tokens counts what the upstream would see: the block included.
    let direct: Value = gate
        .http
        .post(gate.mock.url("/v1/messages/count_tokens"))
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let direct = direct["input_tokens"].as_u64().unwrap();
    let counted = gate.ask_count(&plain, &[], &body).await;
    counted.assert_ok(1, "count_tokens");
    let with_memory = counted.body["input_tokens"].as_u64().unwrap();
    assert!(with_memory > direct, "count_tokens with memory {with_memory} <= without {direct}");
    let upstream = gate.last_upstream().await;
    assert_eq!(upstream["path"], "/v1/messages/count_tokens");
    assert_eq!(injected_ids(&upstream["body"]), set(&[&id]));
    let off = gate.ask_count(&plain, &[("x-memory-mode", "off")], &body).await;
    assert_eq!(off.memory_status.as_deref(), Some("skipped"));
    assert_eq!(off.body["input_tokens"].as_u64().unwrap(), direct);
}

/// `access_count` and `last_accessed_at` follow the records that reached the model in answered
/// Messages requests; a request with memory off and a `count_tokens` call reach no model, and
/// counting is no edit (same revision, same `updated_at`, no history entry).
#[tokio::test]
async fn injected_records_count_their_accesses_and_nothing_else_does() {
    let gate = Memgate::start(CONFIG);
    let fact = |alias: &str, statement: &str| json!({"type": "fact", "scope": ["team:support"], "aliases": [alias], "content": {"statement": statement}});
    let wrapping = gate.remember(TENANT, &fact("gift wrapping", "Gift wrapping costs $5.")).await;
    let points = gate.remember(TENANT, &fact("loyalty points", "Loyalty points expire after a year.")).await;
    let before = gate.admin_get(TENANT, &format!("/memories/{points}")).await;
    assert_eq!((before["access_count"].as_i64(), before["last_accessed_at"].as_str()), (Some(0), None));
    let key = gate.key(TENANT, &["team:support"], &[]).await;

    // First what must not count, about the loyalty points: they are noted no later than what
    // follows, so once the gift wrapping's count shows, a wrong count would show too.
    let about_points = support_bot("Do my loyalty points expire?");
    let off = gate.ask(&key, &[("x-memory-mode", "off")], &about_points).await;
    assert_eq!(off.memory_status.as_deref(), Some("skipped"));
    gate.ask_count(&key, &[], &about_points).await.assert_ok(1, "count_tokens");
    let about_wrapping = support_bot("How much is gift wrapping?");
    for _ in 0..2 {
        gate.ask(&key, &[], &about_wrapping).await.assert_ok(1, "gift wrapping");
    }

    let path = format!("/memories/{wrapping}");
    let counted = eventually(Duration::from_secs(10), "the access count to be written", || async {
        let record = gate.admin_get(TENANT, &path).await;
        (record["access_count"].as_i64() == Some(2)).then_some(record)
    })
    .await;
    let accessed = counted["last_accessed_at"].as_str().expect("last_accessed_at is set");
    assert!(accessed >= counted["created_at"].as_str().unwrap(), "{counted}");
    assert_eq!(counted["revision"], 1, "counting made a revision: {counted}");
    assert_eq!(counted["updated_at"], counted["created_at"], "counting moved updated_at: {counted}");
    let history = gate.admin_get(TENANT, &format!("{path}/history")).await;
    assert_eq!(history["data"].as_array().map(Vec::len), Some(1), "counting wrote history: {history}");
    let untouched = gate.admin_get(TENANT, &format!("/memories/{points}")).await;
    assert_eq!(untouched["access_count"], 0, "memory off or count_tokens counted: {untouched}");
    assert_eq!(untouched["last_accessed_at"], Value::Null, "{untouched}");
}
