//! The tool loop streamed: one coherent event stream for the client, whatever the rounds were.

use super::{Gate, MEMGATE_TOOLS, ask_body, last_tool_results, mock_input_tokens};
use crate::support::eventually;
use futures_util::StreamExt;
use serde_json::{Map, Value, json};
use std::time::Duration;

/// The events of an SSE body: (event name, data).
pub(super) fn events(text: &str) -> Vec<(String, Value)> {
    text.split("\n\n")
        .filter(|chunk| !chunk.trim().is_empty())
        .map(|chunk| {
            let mut name = String::new();
            let mut data = String::new();
            for line in chunk.lines() {
                if let Some(v) = line.strip_prefix("event: ") {
                    name = v.to_owned();
                } else if let Some(v) = line.strip_prefix("data: ") {
                    data.push_str(v);
                }
            }
            (name, serde_json::from_str(&data).unwrap_or_else(|err| panic!("{err}: {chunk}")))
        })
        .collect()
}

/// Checks the stream is one message as the API defines it, and rebuilds it as the SDKs do: one
/// `message_start` first, blocks started at indices 0, 1, 2, … each stopped once before the next
/// starts, their deltas in between, no memgate tool block, one `message_delta` after the blocks,
/// `message_stop` last.
pub(super) fn coherent(events: &[(String, Value)]) -> Value {
    let kinds: Vec<&str> = events.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(kinds.iter().filter(|k| **k == "message_start").count(), 1, "{kinds:?}");
    assert_eq!(kinds[0], "message_start", "{kinds:?}");
    assert_eq!(kinds.iter().filter(|k| **k == "message_delta").count(), 1, "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"message_stop"), "{kinds:?}");
    assert_eq!(kinds.iter().filter(|k| **k == "message_stop").count(), 1, "{kinds:?}");
    let mut message = events[0].1["message"].clone();
    let mut content: Vec<Value> = Vec::new();
    let mut open: Option<usize> = None;
    let mut delta_seen = false;
    for (name, data) in &events[1..] {
        let index = data["index"].as_u64().map(|i| i as usize);
        match name.as_str() {
            "content_block_start" => {
                assert!(!delta_seen && open.is_none(), "a block starts while {open:?} is open: {kinds:?}");
                assert_eq!(index, Some(content.len()), "indices run on from 0: {kinds:?}");
                let block = data["content_block"].clone();
                if block["type"] == "tool_use" {
                    assert!(
                        !MEMGATE_TOOLS.contains(&block["name"].as_str().unwrap()),
                        "memgate's call shown: {block}"
                    );
                }
                content.push(block);
                open = index;
            }
            "content_block_delta" => {
                assert_eq!(index, open, "a delta of a block that is not open");
                let block = &mut content[open.unwrap()];
                let delta = &data["delta"];
                let append = |block: &mut Value, field: &str, more: &Value| {
                    let now = block[field].as_str().unwrap_or("").to_owned();
                    block[field] = json!(now + more.as_str().unwrap_or(""));
                };
                match delta["type"].as_str().unwrap() {
                    "text_delta" => append(block, "text", &delta["text"]),
                    "thinking_delta" => append(block, "thinking", &delta["thinking"]),
                    "signature_delta" => block["signature"] = delta["signature"].clone(),
                    "input_json_delta" => append(block, "partial_json", &delta["partial_json"]),
                    other => panic!("unexpected delta {other}"),
                }
            }
            "content_block_stop" => {
                assert_eq!(index, open, "a stop of a block that is not open (or twice)");
                open = None;
            }
            "message_delta" => {
                assert!(open.is_none(), "message_delta inside a block");
                delta_seen = true;
                message["stop_reason"] = data["delta"]["stop_reason"].clone();
                let usage: &mut Map<String, Value> = message["usage"].as_object_mut().unwrap();
                for (k, v) in data["usage"].as_object().unwrap() {
                    usage.insert(k.clone(), v.clone());
                }
            }
            "ping" | "message_stop" => {}
            other => panic!("unexpected event {other}: {data}"),
        }
    }
    message["content"] = Value::Array(content);
    message
}

/// Whether a `ping` comes between the stop of block `before` and the start of block `before+1`.
fn ping_between(events: &[(String, Value)], before: u64) -> bool {
    let stop = events
        .iter()
        .position(|(n, d)| n == "content_block_stop" && d["index"] == before)
        .expect("the block's stop");
    let next = events
        .iter()
        .position(|(n, d)| n == "content_block_start" && d["index"] == before + 1)
        .expect("the next block's start");
    events[stop..next].iter().any(|(n, _)| n == "ping")
}

/// Done when, streaming: memory_add then an answer, as one coherent stream with summed usage.
#[tokio::test]
async fn e2e_tools_streamed_memory_add_then_answer_is_one_coherent_message_with_summed_usage() {
    let gate = Gate::start("", &[]);
    let key = gate.agent().await;
    let answer =
        gate.ask(&key, "u-1", &ask_body("Remember that the staging branch is called next.", true)).await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    assert!(answer.headers["content-type"].to_str().unwrap().starts_with("text/event-stream"));
    let events = events(&answer.text);
    let message = coherent(&events);
    let content = message["content"].as_array().unwrap();
    assert_eq!(content.len(), 2, "{message}");
    assert_eq!(content[0]["text"], "I'll remember that.");
    assert!(content[1]["text"].as_str().unwrap().starts_with("From memory: Saved as mem-"), "{message}");
    assert_eq!(message["stop_reason"], "end_turn");
    assert!(ping_between(&events, 0), "no ping while memgate worked: {events:?}");

    let bodies = gate.upstream_bodies().await;
    assert_eq!(bodies.len(), 2);
    let input_tokens: u64 = bodies.iter().map(mock_input_tokens).sum();
    assert_eq!(message["usage"]["input_tokens"], input_tokens, "{message}");
    let records = gate.records("user:u-1").await;
    assert_eq!(records.len(), 1);
    assert_eq!(records[0]["author"], format!("agent:{}", key.id));
    assert_eq!(records[0]["content"]["statement"], "the staging branch is called next");
}

/// What the client sent stays as it sent it, and the model's thinking goes back exactly as the
/// model gave it: the next round's request starts with the client's messages and tools unchanged,
/// its `assistant` turn holds the thinking block and its signature.
#[tokio::test]
async fn e2e_tools_thinking_and_cache_breakpoints_go_up_unchanged_in_every_round() {
    let gate = Gate::start("", &[]);
    let key = gate.agent().await;
    let body = json!({
        "model": "claude-mock",
        "max_tokens": 2048,
        "stream": true,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "system": [{"type": "text", "text": "You are helpful.", "cache_control": {"type": "ephemeral"}}],
        "tools": [{"name": "get_weather", "description": "Weather", "input_schema": {"type": "object"},
                   "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
        "messages": [{"role": "user", "content": [
            {"type": "text", "text": "Remember that I take my tea without sugar.", "cache_control": {"type": "ephemeral"}}
        ]}],
    });
    let answer = gate.ask(&key, "u-1", &body).await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    let message = coherent(&events(&answer.text));
    let content = message["content"].as_array().unwrap();
    assert_eq!(content[0]["type"], "thinking", "{message}");
    assert!(content[0]["signature"].as_str().unwrap().starts_with("sig_mock_"));

    let bodies = gate.upstream_bodies().await;
    assert_eq!(bodies.len(), 2);
    for round in &bodies {
        assert_eq!(round["system"], body["system"]);
        assert_eq!(round["thinking"], body["thinking"]);
        assert_eq!(round["tools"][0], body["tools"][0], "the client's tool and its breakpoint");
        assert_eq!(round["messages"][0], body["messages"][0], "the client's turn and its breakpoint");
    }
    let assistant = &bodies[1]["messages"][1];
    assert_eq!(assistant["role"], "assistant");
    assert_eq!(assistant["content"][0], content[0], "the thinking block, signature and all");
    assert_eq!(assistant["content"][2]["name"], "memory_add");
    assert_eq!(last_tool_results(&bodies[1])[0]["tool_use_id"], assistant["content"][2]["id"]);
}

/// A client that goes away mid-loop ends it: the round in flight is dropped upstream, and no
/// further round is sent.
#[tokio::test]
async fn e2e_tools_a_client_that_disconnects_mid_loop_cancels_the_rounds() {
    let gate = Gate::start("", &["--delta-interval-ms", "100", "--deltas", "20"]);
    let key = gate.agent().await;
    let mut body = ask_body("Look this up.", true);
    body["model"] = json!("mock-tool-loop");
    let response = crate::support::client()
        .post(gate.gw.url("/v1/messages"))
        .header("x-api-key", &key.secret)
        .header("x-memory-subject", "u-1")
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&body).unwrap())
        .send()
        .await
        .unwrap();
    let mut stream = response.bytes_stream();
    let mut seen = String::new();
    // Read until the second round's first block has started, then go away.
    while !seen.contains("\"index\":1") {
        let chunk = stream.next().await.expect("the stream ended early").unwrap();
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    drop(stream);
    let recorded = eventually(Duration::from_secs(10), "the second round to be cut", || async {
        let recorded = gate.mock.recorded().await;
        (recorded.len() >= 2 && recorded[1]["stream"]["outcome"] == "client_closed").then_some(recorded)
    })
    .await;
    assert_eq!(recorded.len(), 2, "a round was sent after the client left");
    assert_eq!(recorded[0]["stream"]["outcome"], "completed");
}
