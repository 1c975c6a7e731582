//! Tools off — the default for every existing key and release — changes nothing: what the
//! upstream receives and what the client gets are what they were before memgate had tools.

use super::{Gate, MEMGATE_TOOLS, ask_body, direct, tool_names};
use crate::support::without_request_seq;
use serde_json::json;

#[tokio::test]
async fn e2e_tools_callers_without_the_permission_send_and_get_exactly_what_they_did() {
    let gate = Gate::start("", &[]);
    let plain = gate.key(&["assert_subject"]).await;
    let agent = gate.agent().await;
    for stream in [false, true] {
        // Odd spacing and key order: any re-serialization would show.
        let text = format!(
            r#"{{ "messages":[{{"role":"user","content":"Remember that I like tea?"}}],"model":"claude-mock","max_tokens":64, "stream":{stream}}}"#
        );
        let cases: [(&super::Key, &[(&str, &str)]); 2] = [
            (&plain, &[("x-memory-subject", "u-1")]),
            (&agent, &[("x-memory-subject", "u-1"), ("x-memory-tools", "off")]),
        ];
        for (key, headers) in cases {
            let before = gate.mock.recorded().await.len();
            let answer = gate.send(key, headers, text.as_bytes()).await;
            assert_eq!(answer.status, 200, "{}", answer.text);
            let recorded = gate.mock.recorded().await;
            assert_eq!(recorded.len(), before + 1, "one upstream call");
            let seen = &recorded[before];
            assert_eq!(seen["body_bytes"], text.len(), "the upstream got other bytes");
            assert_eq!(seen["body"], serde_json::from_str::<serde_json::Value>(&text).unwrap());
            assert_eq!(
                without_request_seq(&answer.text),
                direct(&gate, text.as_bytes()).await,
                "stream={stream}"
            );
        }
    }
}

#[tokio::test]
async fn e2e_tools_a_release_with_tools_off_and_the_header_only_narrow() {
    let gate = Gate::start("[releases.v1]\nmemory_tools = \"off\"\n", &[]);
    let agent = gate.agent().await;
    let body = serde_json::to_vec(&ask_body("What do I like?", false)).unwrap();
    let answer = gate.send(&agent, &[("x-memory-subject", "u-1"), ("x-memory-tools", "write")], &body).await;
    assert_eq!(answer.status, 200);
    assert_eq!(gate.mock.recorded().await[0]["body_bytes"], body.len(), "the header cannot widen");

    let gate = Gate::start("", &[]);
    let agent = gate.agent().await;
    gate.send(&agent, &[("x-memory-subject", "u-1"), ("x-memory-tools", "read")], &body).await;
    assert_eq!(tool_names(&gate.upstream_bodies().await[0]), MEMGATE_TOOLS[..3]);
    let reader = gate.key(&["memory_read_tools"]).await;
    gate.send(&reader, &[("x-memory-tools", "write")], &body).await;
    assert_eq!(tool_names(gate.upstream_bodies().await.last().unwrap()), MEMGATE_TOOLS[..3]);
    let answer = gate.send(&agent, &[("x-memory-tools", "all")], &body).await;
    assert_eq!(answer.status, 400, "{}", answer.text);
    assert_eq!(answer.json()["error"]["code"], "invalid_header");

    // A client tool named like one of memgate's: the client's request goes up as it sent it.
    let mut own = ask_body("What do I like?", false);
    own["tools"] = json!([{"name": "memory_search", "input_schema": {"type": "object"}}]);
    let own = serde_json::to_vec(&own).unwrap();
    gate.send(&agent, &[("x-memory-subject", "u-1")], &own).await;
    let last = gate.mock.recorded().await.pop().unwrap();
    assert_eq!(last["body_bytes"], own.len());
}
