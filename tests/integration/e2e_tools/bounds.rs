//! A model that calls memgate's tools forever gets a bounded loop: the limit is said in a tool
//! result, one last round is sent, and the client gets a message that waits for no tool.

use super::streaming::{coherent, events};
use super::{Gate, ask_body, last_tool_results};
use serde_json::json;

fn looping(stream: bool) -> serde_json::Value {
    let mut body = ask_body("Find everything.", stream);
    body["model"] = json!("mock-tool-loop");
    body
}

#[tokio::test]
async fn e2e_tools_a_model_that_calls_tools_forever_stops_at_the_default_four_rounds() {
    let gate = Gate::start("", &[]);
    let key = gate.agent().await;
    let answer = gate.ask(&key, "u-1", &looping(false)).await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    let message = answer.json();
    assert_eq!(message["stop_reason"], "end_turn", "{message}");
    assert!(message["content"].as_array().unwrap().iter().all(|b| b["type"] == "text"), "{message}");
    // Four rounds of calls answered, one answered with the limit, and the last round.
    let bodies = gate.upstream_bodies().await;
    assert_eq!(bodies.len(), 6, "{}", bodies.len());
    for round in &bodies[1..5] {
        assert_eq!(last_tool_results(round)[0]["is_error"], serde_json::Value::Null, "{round}");
    }
    let limit = &last_tool_results(&bodies[5])[0];
    assert_eq!(limit["is_error"], true);
    assert!(
        limit["content"].as_str().unwrap().contains("reached its limit of memory tool calls (4 rounds)"),
        "{limit}"
    );
    let metrics = gate.metrics().await;
    assert!(
        metrics.contains(
            r#"memgate_memory_tool_calls_total{release="v1",tool="memory_search",outcome="limit"} 1"#
        ),
        "{metrics}"
    );
    assert!(
        metrics
            .contains(r#"memgate_memory_tool_calls_total{release="v1",tool="memory_search",outcome="ok"} 4"#),
        "{metrics}"
    );
}

#[tokio::test]
async fn e2e_tools_the_rounds_and_the_time_budget_are_the_releases_to_set() {
    let gate = Gate::start("[releases.v1]\nmax_tool_rounds = 1\n", &[]);
    let key = gate.agent().await;
    let answer = gate.ask(&key, "u-1", &looping(true)).await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    let message = coherent(&events(&answer.text));
    assert_eq!(message["stop_reason"], "end_turn");
    assert_eq!(gate.upstream_bodies().await.len(), 3);

    // A budget the first round alone overruns (the mock takes 50 ms to answer): the first calls
    // are already answered with the limit.
    let gate = Gate::start("[releases.v1]\ntool_time_budget_ms = 1\n", &["--latency-ms", "50"]);
    let key = gate.agent().await;
    let answer = gate.ask(&key, "u-1", &looping(false)).await;
    assert_eq!(answer.json()["stop_reason"], "end_turn");
    let bodies = gate.upstream_bodies().await;
    assert_eq!(bodies.len(), 2);
    let limit = &last_tool_results(&bodies[1])[0];
    assert!(limit["content"].as_str().unwrap().contains("(1 ms)"), "{limit}");
}

/// A decision of about 8 KB as the read tools show it, in `scope`.
async fn seed_decision(gate: &Gate, id: &str, scope: &str) {
    let words = |n: usize, of: &str| -> String {
        let mut text = String::new();
        while text.len() + of.len() < n {
            text.push_str(of);
        }
        text
    };
    let record = json!({
        "id": id, "type": "decision", "scope": [scope],
        "content": {
            "title": format!("Harbour decision {id}"),
            "decision": words(2000, &format!("The ferry for {id} leaves the pier at dawn. ")),
            "rationale": words(4000, "Crews asked for daylight crossings and the tide tables agree. "),
            "alternatives_considered": (0..4).map(|i| words(500, &format!("Option {i}: a night crossing. "))).collect::<Vec<_>>(),
        },
    });
    let response = crate::support::client()
        .post(gate.gw.url("/admin/v1/memories"))
        .bearer_auth(crate::e2e_identity::ADMIN_TOKEN)
        .header("x-memory-tenant", super::TENANT)
        .json(&record)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201, "{}", response.text().await.unwrap());
}

fn flood(stream: bool) -> serde_json::Value {
    let mut body = ask_body("List everything you know.", stream);
    body["model"] = json!("mock-tool-flood");
    body
}

fn texts(results: &[serde_json::Value]) -> Vec<&str> {
    results.iter().map(|r| r["content"].as_str().unwrap_or_default()).collect()
}

/// A model that makes 200 calls in one round: memgate runs the first 16 and answers the rest with
/// the limit; its results stop once the turn's reach 512 KiB (the one that crosses the line goes,
/// the later ones are told the limit); a result over 128 KiB is an error that says how to ask for
/// less. The next round's body stays small whatever the model asked, every call gets its
/// `tool_result`, and the client gets a 200 with one message.
#[tokio::test]
async fn e2e_tools_a_round_of_200_calls_is_answered_within_the_call_and_byte_caps() {
    let gate = Gate::start("", &[]);
    let key = gate.agent().await;
    // What every subject of the key lists: 6 decisions (about 50 KB). What u-big lists besides:
    // 12 more of its own, about 150 KB in one listing.
    for i in 0..6 {
        seed_decision(&gate, &format!("mem-team-{i}"), "team:support").await;
    }
    for i in 0..12 {
        seed_decision(&gate, &format!("mem-big-{i}"), "user:u-big").await;
    }

    for stream in [false, true] {
        let before = gate.mock.recorded().await.len();
        let answer = gate.ask(&key, "u-small", &flood(stream)).await;
        assert_eq!(answer.status, 200, "{}", answer.text);
        let recorded = gate.mock.recorded().await;
        assert_eq!(recorded.len(), before + 2, "a round of calls, then the last round");
        let second = &recorded[before + 1];
        assert!(
            second["body_bytes"].as_u64().unwrap() < 1 << 20,
            "round 2 is {} bytes",
            second["body_bytes"]
        );
        let results = last_tool_results(&second["body"]);
        assert_eq!(results.len(), 200, "one tool_result per call");
        let said = texts(&results);
        let ran = said.iter().take_while(|text| text.contains("memory record(s);")).count();
        let ran_bytes: usize = said[..ran].iter().map(|text| text.len()).sum();
        let last = said[ran - 1].len();
        assert!(
            ran_bytes >= 512 * 1024 && ran_bytes - last < 512 * 1024,
            "results ran until the turn's reached 512 KiB: {ran} results, {ran_bytes} bytes"
        );
        for text in &said[ran..16] {
            assert!(text.contains("reached its limit of memory tool calls (512 KiB of results"), "{text}");
        }
        for text in &said[16..] {
            assert!(
                text.contains("reached its limit of memory tool calls (16 calls in one round)"),
                "{text}"
            );
        }
        assert!(results[ran..].iter().all(|r| r["is_error"] == true));
    }

    // Each of u-big's listings is over what one call may return.
    let before = gate.mock.recorded().await.len();
    let answer = gate.ask(&key, "u-big", &flood(false)).await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    let recorded = gate.mock.recorded().await;
    let results = last_tool_results(&recorded[before + 1]["body"]);
    assert_eq!(results.len(), 200);
    for result in &results[..16] {
        let text = result["content"].as_str().unwrap();
        assert_eq!(result["is_error"], true, "{text}");
        assert!(text.contains("more than the 128 KiB one call may return"), "{text}");
        assert!(text.len() < 1024, "{text}");
    }
    let metrics = gate.metrics().await;
    assert!(
        metrics
            .contains(r#"memgate_memory_tool_calls_total{release="v1",tool="memory_list",outcome="limit"}"#),
        "{metrics}"
    );
}

/// Each round's body is held against the body budget while memgate keeps it for the rounds
/// after (`request_body_bytes_held`, every byte counted twice), not only the client's body: the
/// second round of a streamed turn, paused upstream, holds twice its bytes; the end of the
/// answer frees them.
#[tokio::test]
async fn e2e_tools_each_rounds_body_is_held_against_the_body_budget() {
    let gate = Gate::start("", &["--pause-ms", "4000"]);
    let key = gate.agent().await;
    seed_decision(&gate, "mem-team-0", "team:support").await;
    let mut body = ask_body("What did we decide about the ferry?", true);
    body["model"] = json!("mock-pause");
    let asked = gate.ask(&key, "u-1", &body);
    let watched = async {
        let second = crate::support::eventually(
            std::time::Duration::from_secs(30),
            "the second round to reach the upstream",
            || async { gate.mock.recorded().await.get(1).cloned() },
        )
        .await;
        let bytes = second["body_bytes"].as_u64().unwrap();
        let held = held_bytes(&gate.metrics().await);
        assert!(held >= 2 * bytes, "round 2 is {bytes} bytes and {held} are held");
    };
    let (answer, ()) = tokio::join!(asked, watched);
    assert_eq!(answer.status, 200, "{}", answer.text);
    assert_eq!(gate.mock.recorded().await.len(), 2);
    crate::support::eventually(std::time::Duration::from_secs(10), "the bytes to be freed", || async {
        (held_bytes(&gate.metrics().await) == 0).then_some(())
    })
    .await;
}

fn held_bytes(metrics: &str) -> u64 {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix("memgate_request_body_bytes_held "))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or_else(|| panic!("no memgate_request_body_bytes_held in\n{metrics}"))
}
