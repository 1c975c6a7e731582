//! The token budget, the item cap, and high-priority overflow as stubs.

use super::*;

/// A note about order ORD-7731-A: the identifier makes every note match the query exactly, so the
/// ranking comes down to priority.
fn order_note(id: &str, priority: u8, record_type: &str, text: String) -> Value {
    let content = match record_type {
        "fact" => json!({"statement": text, "subject": "order ORD-7731-A"}),
        _ => json!({"summary": text, "channel": "email", "outcome": "escalated"}),
    };
    json!({
        "id": id,
        "type": record_type,
        "scope": ["team:support"],
        "priority": priority,
        "content": content
    })
}

#[tokio::test]
async fn the_item_cap_and_token_budget_hold_and_a_high_priority_overflow_becomes_a_stub() {
    let config = format!("{CONFIG}\n[releases.v1]\nmax_items = 2\nbudget_tokens = 300\n");
    let gate = Memgate::start(&config);
    let history = "The customer wrote again about order ORD-7731-A, the oak dining table that arrived \
        with a cracked leg. The first replacement leg was the wrong colour, the second was lost by the \
        courier, and the customer took two days off work to wait for deliveries that never came. ";
    let notes = [
        // Priority 5 and far over the whole budget: a stub.
        order_note("note-escalation", 5, "conversation_summary", history.repeat(12)),
        // Priority 4, fits: injected first.
        order_note(
            "note-replacement",
            4,
            "fact",
            "A full replacement table for order ORD-7731-A ships from the Leeds warehouse on \
             Thursday by two-person courier, who will carry it in, assemble it and take away the \
             packaging. The customer keeps the damaged table at no cost, and the assembly fee of 40 \
             pounds is waived. If Thursday does not suit, the warehouse can hold the table for up to \
             two weeks; ask the customer for a day and a two-hour window, and note it on the order \
             before 15:00 the day before."
                .to_owned(),
        ),
        // Priority 3 and fits alone, but not beside the first: the budget keeps it out.
        order_note("note-timeline", 3, "fact", history.repeat(3)),
        // Priority 2, fits: injected second.
        order_note("note-voucher", 2, "fact", "Order ORD-7731-A: a 20% voucher was offered.".to_owned()),
        // Priority 1, fits the budget, but the cap of two is reached.
        order_note("note-contact", 1, "fact", "Order ORD-7731-A: call back after 17:00.".to_owned()),
    ];
    for note in &notes {
        gate.remember(TENANT, note).await;
    }
    let key = gate.key(TENANT, &["team:support"], &["debug"]).await;
    let body = support_bot("Any news on order ORD-7731-A? The customer is upset.");
    let answer = gate.ask(&key, &[("x-memory-debug", "1")], &body).await;
    answer.assert_ok(2, "order question");

    let block = block_in(&gate.last_upstream().await["body"]).expect("a block");
    let lines = record_lines(&block);
    let content: Vec<&str> =
        lines.iter().filter(|l| l.get("content").is_some()).map(|l| l["id"].as_str().unwrap()).collect();
    assert_eq!(content, ["note-replacement", "note-voucher"], "{block}");
    let stubs: Vec<&Value> = lines.iter().filter(|l| l.get("stub").is_some()).collect();
    assert_eq!(stubs.len(), 1, "{block}");
    assert_eq!(stubs[0]["id"], "note-escalation");
    assert!(stubs[0].get("content").is_none(), "{}", stubs[0]);
    let stub = stubs[0]["stub"].as_str().unwrap();
    assert!(stub.starts_with("conversation_summary") && stub.contains("ORD-7731-A"), "{stub}");
    assert!(stub.chars().count() < 200, "a stub is one short line: {stub}");
    assert_eq!(lines.len(), 3, "{block}");

    let trace: Value = serde_json::from_str(answer.trace.as_deref().expect("X-Memory-Trace")).unwrap();
    assert_eq!(trace["injected"], json!(["note-replacement", "note-voucher"]), "{trace}");
    assert_eq!(trace["stubs"], json!(["note-escalation"]), "{trace}");
    let tokens = trace["tokens"].as_u64().unwrap();
    assert!(tokens > 0 && tokens <= 300, "{tokens} tokens over a budget of 300");
    // The X-Memory-Trace header has the shape of explain's answer.
    let density = removed(&trace, "token_density");
    assert_eq!(
        density.keys().cloned().collect::<BTreeSet<_>>(),
        set(&["note-escalation", "note-timeline", "note-contact"]),
        "{trace}"
    );
    assert!(density["note-escalation"].contains("stub"), "{density:?}");
    // The timeline would fit alone: the budget kept it out. The contact note would fit the
    // budget: the cap kept it out.
    let cost = |id: &str| -> u64 {
        let reason = &density[id];
        reason.strip_prefix("did not fit (").and_then(|r| r.split(' ').next()).unwrap().parse().unwrap()
    };
    assert!(cost("note-timeline") <= 300 && tokens + cost("note-timeline") > 300, "{density:?}");
    assert!(tokens + cost("note-contact") <= 300, "{density:?}");
}
