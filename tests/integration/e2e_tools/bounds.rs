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
