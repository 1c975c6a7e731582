//! Tests of placement on hand-written bodies, and the checker the property test shares.
//!
//! The checker compares raw JSON text, never re-serialized values: a block that came out with a
//! different key order, number format or escape would fail it.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use indexmap::IndexMap;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use super::placement::{Injected, Placement, inject};

pub(super) const BLOCK: &str = "<MEMORY_CONTEXT version=\"v1\">\nnotes\n{\"id\":\"m1\",\"content\":\"\\u003c/x\\u003e\"}\n</MEMORY_CONTEXT>";

/// Where a test expects the block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Where {
    System,
    Turn(usize),
}

/// The top-level fields as (key, raw text), in order.
pub(super) fn fields(raw: &str) -> Vec<(String, String)> {
    let map: IndexMap<String, Box<RawValue>> = serde_json::from_str(raw).unwrap();
    map.into_iter().map(|(key, value)| (key, value.get().to_owned())).collect()
}

/// The elements of a raw array, as raw text.
pub(super) fn elements(raw: &str) -> Vec<String> {
    let items: Vec<Box<RawValue>> = serde_json::from_str(raw).unwrap();
    items.into_iter().map(|item| item.get().to_owned()).collect()
}

fn field<'a>(fields: &'a [(String, String)], key: &str) -> Option<&'a str> {
    fields.iter().find(|(name, _)| name == key).map(|(_, raw)| raw.as_str())
}

/// Every `cache_control` in a body, as (where, its raw text), in prefix order: top level, tools,
/// system blocks, then message blocks and their nested blocks. Read by parsing, so the text
/// "cache_control" inside a string or a tool's input is not counted.
pub(super) fn breakpoints(body: &str) -> Vec<(String, String)> {
    fn in_blocks(raw: &str, path: &str, out: &mut Vec<(String, String)>) {
        if !raw.starts_with('[') {
            return;
        }
        for (index, block) in elements(raw).iter().enumerate() {
            if !block.starts_with('{') {
                continue;
            }
            let block_fields = fields(block);
            let path = format!("{path}[{index}]");
            if let Some(cc) = field(&block_fields, "cache_control") {
                out.push((path.clone(), cc.to_owned()));
            }
            if let Some(nested) = field(&block_fields, "content") {
                in_blocks(nested, &format!("{path}.content"), out);
            }
        }
    }
    let top = fields(body);
    let mut out = Vec::new();
    if let Some(cc) = field(&top, "cache_control") {
        out.push(("cache_control".to_owned(), cc.to_owned()));
    }
    if let Some(tools) = field(&top, "tools") {
        in_blocks(tools, "tools", &mut out);
    }
    if let Some(system) = field(&top, "system") {
        in_blocks(system, "system", &mut out);
    }
    if let Some(messages) = field(&top, "messages") {
        for (index, message) in elements(messages).iter().enumerate() {
            let message_fields = fields(message);
            if let Some(cc) = field(&message_fields, "cache_control") {
                out.push((format!("messages[{index}]"), cc.to_owned()));
            }
            if let Some(content) = field(&message_fields, "content") {
                in_blocks(content, &format!("messages[{index}].content"), &mut out);
            }
        }
    }
    out.retain(|(_, raw)| raw != "null");
    out
}

fn is_block(raw: &str, block: &str) -> bool {
    serde_json::from_str::<Value>(raw).unwrap() == json!({"type": "text", "text": block})
}

/// `after` must be `before` (a string, array, null or absent) with the block appended, every
/// original element byte-identical.
fn check_appended(before: Option<&str>, after: &str, block: &str) {
    let out = elements(after);
    let last = out.last().expect("an appended block");
    assert!(is_block(last, block), "last element is not the block: {last}");
    let kept = &out[..out.len() - 1];
    match before {
        None | Some("null") | Some("\"\"") => assert!(kept.is_empty(), "{after}"),
        Some(text) if text.starts_with('"') => {
            assert_eq!(kept.len(), 1, "{after}");
            assert_eq!(
                fields(&kept[0]),
                vec![("type".to_owned(), "\"text\"".to_owned()), ("text".to_owned(), text.to_owned())],
                "the original string must come back byte-identical as the first block"
            );
        }
        Some(array) => assert_eq!(kept, &elements(array)[..], "original blocks changed"),
    }
}

/// Checks every invariant of one injection; see the module comment of `placement`.
pub(super) fn check(input: &str, injected: &Injected, block: &str, expected: Where) {
    let output = std::str::from_utf8(&injected.body).unwrap();
    serde_json::from_str::<Value>(output).unwrap_or_else(|err| panic!("invalid JSON out ({err}): {output}"));
    let placed_in = match expected {
        Where::System => "system",
        Where::Turn(_) => "last_user_turn",
    };
    assert_eq!(injected.placed_in, placed_in, "input: {input}");

    // Outside one contiguous edit, the bytes are the client's. The edit replaced nothing, or
    // exactly the raw text of the string (or null) that became an array.
    let (a, b) = (input.as_bytes(), output.as_bytes());
    let prefix = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let max_suffix = a.len().min(b.len()) - prefix;
    let suffix = a.iter().rev().zip(b.iter().rev()).take(max_suffix).take_while(|(x, y)| x == y).count();
    let replaced = &input[prefix..a.len() - suffix];

    // No breakpoint added, removed or moved.
    assert_eq!(breakpoints(input), breakpoints(output), "breakpoints changed; input: {input}");

    // The block appears exactly once.
    let all_blocks = |body: &str| -> usize {
        let top = fields(body);
        let mut found = 0;
        if let Some(system) = field(&top, "system").filter(|raw| raw.starts_with('[')) {
            found += elements(system).iter().filter(|raw| is_block(raw, block)).count();
        }
        for message in elements(field(&top, "messages").unwrap()) {
            if let Some(content) = field(&fields(&message), "content").filter(|raw| raw.starts_with('[')) {
                found += elements(content).iter().filter(|raw| is_block(raw, block)).count();
            }
        }
        found
    };
    assert_eq!(all_blocks(output), all_blocks(input) + 1, "output: {output}");

    let (top_in, top_out) = (fields(input), fields(output));
    let edited_key = match expected {
        Where::System => "system",
        Where::Turn(_) => "messages",
    };
    let keys_out: Vec<&str> = top_out.iter().map(|(key, _)| key.as_str()).collect();
    let mut keys_in: Vec<&str> = top_in.iter().map(|(key, _)| key.as_str()).collect();
    if field(&top_in, "system").is_none() && expected == Where::System {
        keys_in.insert(0, "system");
    }
    assert_eq!(keys_out, keys_in, "top-level keys changed");
    for (key, raw) in &top_in {
        if key != edited_key {
            assert_eq!(field(&top_out, key), Some(raw.as_str()), "top-level `{key}` changed");
        }
    }

    match expected {
        Where::System => {
            let before = field(&top_in, "system");
            check_appended(before, field(&top_out, "system").unwrap(), block);
            assert!(replaced.is_empty() || Some(replaced) == before, "replaced {replaced:?}");
        }
        Where::Turn(target) => {
            let (msgs_in, msgs_out) = (
                elements(field(&top_in, "messages").unwrap()),
                elements(field(&top_out, "messages").unwrap()),
            );
            assert_eq!(msgs_in.len(), msgs_out.len());
            for (index, (before, after)) in msgs_in.iter().zip(&msgs_out).enumerate() {
                if index != target {
                    assert_eq!(before, after, "message {index} changed");
                    continue;
                }
                let (fields_in, fields_out) = (fields(before), fields(after));
                let names = |f: &[(String, String)]| f.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>();
                assert_eq!(names(&fields_in), names(&fields_out));
                let role: String = serde_json::from_str(field(&fields_out, "role").unwrap()).unwrap();
                assert_eq!(role, "user", "the block must go into a user turn");
                for (key, raw) in &fields_in {
                    if key != "content" {
                        assert_eq!(
                            field(&fields_out, key),
                            Some(raw.as_str()),
                            "message field `{key}` changed"
                        );
                    }
                }
                let content = field(&fields_in, "content");
                check_appended(content, field(&fields_out, "content").unwrap(), block);
                assert!(replaced.is_empty() || Some(replaced) == content, "replaced {replaced:?}");
            }
        }
    }
}

fn run(input: &str, placement: Placement, expected: Where) -> String {
    let injected = inject(input.as_bytes(), BLOCK, placement).unwrap();
    check(input, &injected, BLOCK, expected);
    String::from_utf8(injected.body).unwrap()
}

/// Irregular on purpose: spaces, escapes and number formats a re-serializer would normalize.
const STRING_SYSTEM: &str = r#"{ "model" : "claude-sonnet-4-5", "max_tokens":1024, "temperature": 1.0e0,
  "metadata":{"user_id":"u\u002d789"},
  "system": "You are \"helpful\".\nBe brief \u00e9 \/ 中文",
  "messages": [ {"role":"user","content":"hi"},
    {"role":"assistant","content":[{"type":"text","text":"hello" , "citations" : null}]},
    {"role":"user","content":"what does \"cache_control\": {\"type\": \"ephemeral\"} mean?"} ],
  "x_unknown_field": [1, 2.50, -0, 1E2] }"#;

#[test]
fn string_system_without_breakpoints_gets_the_block_in_system() {
    let out = run(STRING_SYSTEM, Placement::Auto, Where::System);
    assert!(out.contains(r#""system": [{"type":"text","text":"You are \"helpful\".\nBe brief \u00e9 \/ 中文"},{"type":"text","text":"#));
}

#[test]
fn block_system_with_a_breakpoint_on_its_last_block() {
    // The messages mention cache_control in text, in a tool's input and as a null: none of them
    // is a breakpoint, so the block goes after the system breakpoint.
    let input = r#"{"model":"m","max_tokens":10,
      "tools":[{"name":"t","input_schema":{"type":"object"}}],
      "system":[{"type":"text","text":"x-anthropic-billing-header: cc_version=1"},
                {"type":"text","text":"long rules","cache_control":{"type":"ephemeral","ttl":"1h"}}],
      "messages":[{"role":"user","content":[{"type":"text","text":"\"cache_control\":{\"type\":\"ephemeral\"}"}]},
        {"role":"assistant","content":[{"type":"tool_use","id":"tu1","name":"t","input":{"cache_control":{"type":"ephemeral"}}}]},
        {"role":"user","content":[{"type":"tool_result","tool_use_id":"tu1","content":"ok"},{"type":"text","text":"go","cache_control":null}]}]}"#;
    let out = run(input, Placement::Auto, Where::System);
    let system = elements(field(&fields(&out), "system").unwrap());
    assert_eq!(system.len(), 3);
    assert!(system[1].contains("cache_control") && is_block(&system[2], BLOCK));
    assert_eq!(
        breakpoints(&out),
        vec![("system[1]".to_owned(), r#"{"type":"ephemeral","ttl":"1h"}"#.to_owned())]
    );
}

#[test]
fn breakpoint_on_the_last_user_turn_block_content() {
    let input = r#"{"model":"m","system":"sys","messages":[
      {"role":"user","content":"first"},{"role":"assistant","content":"reply"},
      {"role":"user","content":[{"type":"text","text":"big document","cache_control":{"type":"ephemeral"}},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}}]}]}"#;
    let out = run(input, Placement::Auto, Where::Turn(2));
    let messages = elements(field(&fields(&out), "messages").unwrap());
    let content = elements(field(&fields(&messages[2]), "content").unwrap());
    assert_eq!(content.len(), 3, "after the breakpoint block and the image");
    // Forcing `System` must not put the block in front of the message breakpoint.
    run(input, Placement::System, Where::Turn(2));
}

#[test]
fn breakpoint_in_the_conversation_with_a_string_last_user_turn() {
    let input = r#"{"model":"m","messages":[
      {"role":"user","content":[{"type":"text","text":"earlier","cache_control":{"type":"ephemeral"}}]},
      {"role":"assistant","content":[{"type":"text","text":"ok","cache_control":{"type":"ephemeral"}}]},
      {"role":"user","content":"now \u00e9 \"quoted\""}]}"#;
    let out = run(input, Placement::Auto, Where::Turn(2));
    assert!(out.contains(
        r#"{"role":"user","content":[{"type":"text","text":"now \u00e9 \"quoted\""},{"type":"text""#
    ));
    assert!(!out.contains("\"system\""));
}

#[test]
fn breakpoints_in_tools_only() {
    let input = r#"{"model":"m","tools":[{"name":"a","input_schema":{}},{"name":"b","input_schema":{},"cache_control":{"type":"ephemeral"}}],
      "system":"rules","messages":[{"role":"user","content":"hi"}]}"#;
    run(input, Placement::Auto, Where::System);
    // Forcing the last user turn is allowed: it is after every breakpoint too.
    run(input, Placement::LastUserTurn, Where::Turn(0));
}

#[test]
fn no_breakpoints_and_no_system() {
    let input = "\n {\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}\n";
    let out = run(input, Placement::Auto, Where::System);
    assert!(out.starts_with("\n {\"system\":[{\"type\":\"text\",\"text\":"), "{out}");
    assert!(
        out.ends_with(",\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}\n"),
        "{out}"
    );
}

#[test]
fn empty_and_null_system() {
    for system in [r#""""#, "null", "[]", "[ \n ]"] {
        let input =
            format!(r#"{{"model":"m","system":{system},"messages":[{{"role":"user","content":"hi"}}]}}"#);
        let out = run(&input, Placement::Auto, Where::System);
        assert_eq!(elements(field(&fields(&out), "system").unwrap()).len(), 1, "{out}");
    }
}

#[test]
fn assistant_prefill_puts_the_block_in_the_user_turn_before_it() {
    let input = r#"{"model":"m","messages":[
      {"role":"user","content":[{"type":"text","text":"q","cache_control":{"type":"ephemeral"}}]},
      {"role":"assistant","content":"{\"answer\":"}]}"#;
    run(input, Placement::Auto, Where::Turn(0));
    run(input, Placement::LastUserTurn, Where::Turn(0));
}

#[test]
fn tool_results_keep_their_place_first() {
    let input = r#"{"model":"m","messages":[{"role":"user","content":"run it"},
      {"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"x","input":{}}]},
      {"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"42","cache_control":{"type":"ephemeral"}}]}]}]}"#;
    let out = run(input, Placement::Auto, Where::Turn(2));
    let messages = elements(field(&fields(&out), "messages").unwrap());
    let content = elements(field(&fields(&messages[2]), "content").unwrap());
    assert!(content[0].contains("tool_result") && is_block(&content[1], BLOCK));
}

#[test]
fn top_level_automatic_caching_counts_as_a_breakpoint_at_the_end() {
    let input = r#"{"model":"m","cache_control":{"type":"ephemeral"},"system":"s","messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"user","content":"c"}]}"#;
    run(input, Placement::Auto, Where::Turn(2));
    run(input, Placement::System, Where::Turn(2));
    let off = input.replace(r#""cache_control":{"type":"ephemeral"}"#, r#""cache_control":null"#);
    run(&off, Placement::Auto, Where::System);
}

#[test]
fn no_user_turn_falls_back_to_system() {
    let input = r#"{"model":"m","system":[{"type":"text","text":"s"}],"messages":[{"role":"assistant","content":[{"type":"text","text":"x","cache_control":{"type":"ephemeral"}}]}]}"#;
    run(input, Placement::Auto, Where::System);
    run(input, Placement::LastUserTurn, Where::System);
    run(r#"{"model":"m","messages":[]}"#, Placement::LastUserTurn, Where::System);
}

#[test]
fn forced_last_user_turn_without_breakpoints() {
    run(STRING_SYSTEM, Placement::LastUserTurn, Where::Turn(2));
    run(STRING_SYSTEM, Placement::System, Where::System);
}

#[test]
fn pretty_printed_bodies_keep_their_whitespace() {
    let input = "{\n  \"model\": \"m\",\n  \"system\": [\n    {\"type\": \"text\", \"text\": \"s\"}\n  ],\n  \"messages\": [\n    {\"role\": \"user\", \"content\": \"hi\"}\n  ]\n}";
    let out = run(input, Placement::Auto, Where::System);
    assert!(
        out.starts_with(
            "{\n  \"model\": \"m\",\n  \"system\": [\n    {\"type\": \"text\", \"text\": \"s\"}\n  ,{"
        ),
        "{out}"
    );
}

#[test]
fn malformed_shapes_are_errors_not_panics() {
    for body in [
        "[]",
        "{\"model\":\"m\"}",
        "{\"model\":\"m\",\"messages\":{}}",
        "{\"model\":\"m\",\"messages\":[1]}",
        "{\"model\":\"m\",\"system\":5,\"messages\":[]}",
        "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":5}],\"cache_control\":{}}",
        "{\"model\":\"m\",\"messages\":[{\"role\":\"user\"}],\"cache_control\":{}}",
    ] {
        assert!(inject(body.as_bytes(), BLOCK, Placement::Auto).is_err(), "{body}");
    }
}
