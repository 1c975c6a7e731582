//! Placement: the block lands after the client's last breakpoint and the client's bytes stay.

use super::*;

/// The JSON paths of every `cache_control` in a value.
fn breakpoints(value: &Value, path: String, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                let here = format!("{path}.{key}");
                if key == "cache_control" {
                    out.push(here.clone());
                }
                breakpoints(child, here, out);
            }
        }
        Value::Array(items) => {
            for (index, child) in items.iter().enumerate() {
                breakpoints(child, format!("{path}[{index}]"), out);
            }
        }
        _ => {}
    }
}

fn breakpoints_of(value: &Value) -> Vec<String> {
    let mut out = Vec::new();
    breakpoints(value, "$".into(), &mut out);
    out
}

#[tokio::test]
async fn the_block_lands_after_the_clients_last_breakpoint_and_the_clients_blocks_keep_their_bytes() {
    let gate = Memgate::start(CONFIG);
    let id = gate
        .remember(
            TENANT,
            &json!({
                "type": "fact",
                "scope": ["team:support"],
                "aliases": ["loyalty tier"],
                "content": {
                    "statement": "Li Wei has been a Gold loyalty member since 2021 and gets free returns."
                }
            }),
        )
        .await;
    let key = gate.key(TENANT, &["team:support"], &[]).await;

    // Client bodies written by hand, in a layout no serializer produces (key order, spaces,
    // escapes), so any rewrite of the client's bytes would show in the byte count.
    let question = r#""What loyalty tier is this customer on? \u00e9t\u00e9 \ud83d\ude00""#;
    let system_text = r#""You are Acme's support assistant.\n  Policies:\t\"be kind\" \u003cnot html\u003e""#;
    let string_system = format!(
        r#"{{ "system" : {system_text},
  "messages": [ {{"content": {question}, "role": "user"}} ],
  "max_tokens": 100, "temperature": 0.50, "model": "claude-test", "metadata": {{"user_id": "u-789"}} }}"#
    );
    let block_system = format!(
        r#"{{"model":"claude-test","max_tokens":100,
 "system": [ {{"type":"text","text":{system_text},"cache_control":{{"type":"ephemeral","ttl":"1h"}}}} ],
 "messages":[{{"role":"user","content":[{{"type":"text","text":{question}}}]}}]}}"#
    );
    let turn_breakpoint = format!(
        r#"{{"model":"claude-test","max_tokens":100,"system":{system_text},
 "messages":[
   {{"role":"user","content":"Hello"}},
   {{"role":"assistant","content":[{{"type":"text","text":"Hi! How can I help?"}}]}},
   {{"role":"user","content":[
     {{"type":"text","text":"Earlier context.","cache_control":{{"type":"ephemeral"}}}},
     {{"type":"text","text":{question},"cache_control":{{"type":"ephemeral"}}}}]}}
 ]}}"#
    );
    let earlier_breakpoint = format!(
        r#"{{"model":"claude-test","max_tokens":100,
 "messages":[
   {{"role":"user","content":[
     {{"type":"text","text":"A long document…","cache_control":{{"type":"ephemeral"}}}}]}},
   {{"role":"assistant","content":"Noted."}},
   {{"role":"user","content":{question}}}
 ]}}"#
    );
    let no_system = format!(
        r#"{{"model":"claude-test","max_tokens":100,"messages":[{{"role":"user","content":{question}}}]}}"#
    );

    enum Lands {
        /// `system` was a string: it becomes [its text block, the block].
        SystemFromString,
        /// `system` was blocks: the block is appended.
        SystemAppended,
        /// No `system`: one is added holding only the block.
        SystemAdded,
        /// The last user turn's blocks: the block is appended.
        TurnAppended,
        /// The last user turn was a string: it becomes [its text block, the block].
        TurnFromString,
    }
    let cases = [
        ("string system", string_system, Lands::SystemFromString),
        ("block system with cache_control", block_system, Lands::SystemAppended),
        ("breakpoint on the last user turn", turn_breakpoint, Lands::TurnAppended),
        ("breakpoint on an earlier user turn", earlier_breakpoint, Lands::TurnFromString),
        ("no system, no breakpoint", no_system, Lands::SystemAdded),
    ];
    for (what, raw, lands) in cases {
        let client: Value = serde_json::from_str(&raw).unwrap();
        let answer = gate.send_raw("/v1/messages", &key, &[], raw.clone().into_bytes()).await;
        answer.assert_ok(1, what);
        let upstream = gate.last_upstream().await;
        let sent = &upstream["body"];
        let block = block_in(sent).unwrap_or_else(|| panic!("{what}: no block in {sent}"));
        assert_eq!(injected_ids(sent), set(&[&id]), "{what}");

        let injected = json!({"type": "text", "text": block});
        let block_json = serde_json::to_string(&injected).unwrap();
        let wrapped = format!(r#"[{{"type":"text","text":}},{block_json}]"#).len();
        let mut expected = client.clone();
        let last = client["messages"].as_array().unwrap().len() - 1;
        let added = match lands {
            Lands::SystemFromString => {
                expected["system"] = json!([{"type": "text", "text": client["system"]}, injected]);
                wrapped
            }
            Lands::SystemAppended => {
                expected["system"].as_array_mut().unwrap().push(injected);
                1 + block_json.len()
            }
            Lands::SystemAdded => {
                expected["system"] = json!([injected]);
                format!(r#""system":[{block_json}],"#).len()
            }
            Lands::TurnAppended => {
                expected["messages"][last]["content"].as_array_mut().unwrap().push(injected);
                1 + block_json.len()
            }
            Lands::TurnFromString => {
                let text = client["messages"][last]["content"].clone();
                expected["messages"][last]["content"] = json!([{"type": "text", "text": text}, injected]);
                wrapped
            }
        };
        // Every block of the client's is there, equal and in order; the block is where it belongs
        // and carries no cache_control of its own.
        assert_eq!(sent, &expected, "{what}");
        assert_eq!(breakpoints_of(sent), breakpoints_of(&client), "{what}: a breakpoint was added or moved");
        // Nothing but the insertion changed the byte count: no re-serialization.
        assert_eq!(upstream["body_bytes"].as_u64().unwrap() as usize, raw.len() + added, "{what}");
    }
}
