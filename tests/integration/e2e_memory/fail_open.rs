//! Fail open and fail closed when memory is late.

use super::*;

async fn degraded_count(gate: &Memgate, reason: &str) -> f64 {
    let text = gate.http.get(gate.gw.url("/metrics")).send().await.unwrap().text().await.unwrap();
    text.lines()
        .filter(|line| {
            line.starts_with("memgate_memory_degraded") && line.contains(&format!("reason=\"{reason}\""))
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A record the query below would find (exactly, by its alias), in a gateway whose funnel has
/// 1 ms: the query embedding alone takes longer.
async fn gateway_with_a_1ms_budget(extra: &str) -> (Memgate, String) {
    let gate = Memgate::start(&format!("[memory]\nfunnel_timeout_ms = 1\ndefault_release = \"v1\"\n{extra}"));
    gate.remember(
        TENANT,
        &json!({
            "type": "fact",
            "scope": ["team:support"],
            "aliases": ["gift wrapping"],
            "content": {"statement": "Gift wrapping costs $5 and includes a handwritten card."}
        }),
    )
    .await;
    let key = gate.key(TENANT, &["team:support"], &[]).await;
    (gate, key)
}

#[tokio::test]
async fn a_funnel_over_its_time_budget_fails_open_and_is_counted() {
    let (gate, key) = gateway_with_a_1ms_budget("").await;
    assert_eq!(degraded_count(&gate, "timeout").await, 0.0);
    for (n, question) in ["Can you add gift wrapping?", "How much is gift wrapping?"].iter().enumerate() {
        let raw = serde_json::to_vec_pretty(&support_bot(question)).unwrap();
        let answer = gate.send_raw("/v1/messages", &key, &[], raw.clone()).await;
        assert_eq!(answer.status, 200, "{}", answer.body);
        assert_eq!(answer.memory_status.as_deref(), Some("degraded"));
        assert_eq!(answer.injected.as_deref(), Some("0"));
        assert_eq!(answer.body["type"], "message", "{}", answer.body);
        let upstream = gate.last_upstream().await;
        assert_eq!(upstream["body"], serde_json::from_slice::<Value>(&raw).unwrap());
        assert_eq!(upstream["body_bytes"].as_u64().unwrap() as usize, raw.len(), "the body was rewritten");
        assert_eq!(degraded_count(&gate, "timeout").await, (n + 1) as f64);
    }
}

#[tokio::test]
async fn fail_closed_answers_529_when_memory_is_late() {
    let (gate, key) = gateway_with_a_1ms_budget("fail_closed = true\n").await;
    let answer = gate.ask(&key, &[], &support_bot("Can you add gift wrapping?")).await;
    answer.assert_error(529, "overloaded_error", "fail closed");
    assert_eq!(gate.upstream_count().await, 0, "a fail-closed request went upstream");
    assert_eq!(degraded_count(&gate, "timeout").await, 1.0);
}
