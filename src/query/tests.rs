//! Query extraction on what real clients send (tests/data/clients/, captured from Claude Code
//! and the TypeScript SDK) and on hand-written turns for each rule.

use super::*;
use serde_json::{Value, json};

fn fixture(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/data/clients/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|err| panic!("{path}: {err}"))
}

fn body(messages: Value) -> Vec<u8> {
    serde_json::to_vec(&json!({"model": "m", "max_tokens": 8, "messages": messages})).unwrap()
}

fn text_of(body: &[u8]) -> String {
    extract(body, &QueryRule::default()).unwrap().text
}

#[test]
fn claude_codes_turn_is_the_persons_question_alone() {
    let query = extract(&fixture("claude_code_messages.json"), &QueryRule::default()).unwrap();
    assert_eq!(query.text, "What is our refund policy?");
    assert_eq!(query.from, ["messages.0.content.1"]);
    assert!(!query.follow_up);
    assert_eq!(query.left_out.harness_blocks, 1, "{query:?}");
}

#[test]
fn a_tool_loop_matches_the_question_that_started_it() {
    for name in ["claude_code_messages_tool_result.json", "claude_code_messages_read_result.json"] {
        let query = extract(&fixture(name), &QueryRule::default()).unwrap();
        assert!(query.text.ends_with("What is our refund policy?"), "{name}: {query:?}");
        assert!(
            !query.text.contains("tool_use_error") && !query.text.contains("Refunds: 30 days"),
            "{query:?}"
        );
        assert_eq!(query.left_out.tool_results, 1, "{name}");
    }
}

#[test]
fn a_bare_follow_up_brings_the_previous_question() {
    let query = extract(&fixture("claude_code_messages_follow_up.json"), &QueryRule::default()).unwrap();
    assert_eq!(query.text, "What is our refund policy?\nAnd what about custom-made sofas?");
    assert!(query.follow_up);
    assert_eq!(query.from, ["messages.0.content.1", "messages.3.content.0"]);
    // What triggers read and what names the turn: the newest words alone.
    assert_eq!(query.newest, "And what about custom-made sofas?");
    assert_eq!(query.turn, 3);
    // Turned off, the follow-up stands alone.
    let rule = QueryRule { follow_up_words: 0, ..QueryRule::default() };
    let alone = extract(&fixture("claude_code_messages_follow_up.json"), &rule).unwrap();
    assert_eq!(alone.text, "And what about custom-made sofas?");
}

#[test]
fn sdk_requests_are_taken_as_they_are() {
    for name in ["ts_sdk_create.json", "ts_sdk_stream.json"] {
        let captured: Value = serde_json::from_slice(&fixture(name)).unwrap();
        let body = serde_json::to_vec(&captured["body"]).unwrap();
        let query = extract(&body, &QueryRule::default()).unwrap();
        let last_user = captured["body"]["messages"]
            .as_array()
            .unwrap()
            .iter()
            .rev()
            .find(|m| m["role"] == "user")
            .unwrap()["content"]
            .clone();
        let expected = match last_user {
            Value::String(text) => text,
            blocks => blocks[0]["text"].as_str().unwrap().to_owned(),
        };
        assert!(query.text.ends_with(&expected), "{name}: {query:?}");
    }
}

#[test]
fn harness_tags_go_with_their_contents_and_wrapping_tags_only_lose_themselves() {
    let text = "<system-reminder>today is Monday</system-reminder>Where is my parcel?<local-command-stdout>ok</local-command-stdout>";
    assert_eq!(text_of(&body(json!([{"role": "user", "content": text}]))), "Where is my parcel?");
    let command = "<command-name>/refund</command-name><command-message>refund is running…</command-message><command-args>order ORD-7781 arrived broken</command-args>";
    assert_eq!(
        text_of(&body(json!([{"role": "user", "content": command}]))),
        "order ORD-7781 arrived broken"
    );
    // Attributes, and a reminder never closed: the rest is the harness's.
    let open = "How do I reset my router? <system-reminder priority=\"high\">files changed: a.rs";
    assert_eq!(text_of(&body(json!([{"role": "user", "content": open}]))), "How do I reset my router?");
    // Angle brackets that are no harness tag are the person's.
    let math = "Is 3 < 5 and <b>bold</b> fine? 1<2";
    assert_eq!(text_of(&body(json!([{"role": "user", "content": math}]))), math);
}

#[test]
fn only_user_text_counts() {
    let messages = json!([
        {"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}},
            {"type": "text", "text": "What does this label say about returns?"},
            {"type": "document", "source": {"type": "text", "data": "Returns policy v2 full text"}}
        ]},
        {"role": "system", "content": "Available agent types: claude, Explore"},
        {"role": "assistant", "content": "Let me look."}
    ]);
    let query = extract(&body(messages), &QueryRule::default()).unwrap();
    assert_eq!(query.text, "What does this label say about returns?");
    assert_eq!(query.left_out.other_blocks, 2);
}

#[test]
fn short_follow_ups_in_any_language_bring_the_previous_words() {
    for (first, then) in [
        ("Which warranty does the K7 router have?", "and for the K9?"),
        ("K7 路由器的保修期是多久？", "K9 呢？"),
        ("Какая гарантия на роутер K7?", "А на K9?"),
    ] {
        let messages = json!([
            {"role": "user", "content": first},
            {"role": "assistant", "content": "Two years."},
            {"role": "user", "content": then}
        ]);
        let query = extract(&body(messages), &QueryRule::default()).unwrap();
        assert_eq!(query.text, format!("{first}\n{then}"));
        assert!(query.follow_up);
    }
    let long = "Please tell me about the delivery times for large furniture to Berlin next month";
    let messages = json!([{"role": "user", "content": "hello"}, {"role": "user", "content": long}]);
    assert_eq!(text_of(&body(messages)), long);
}

#[test]
fn no_words_no_query() {
    assert!(extract(&body(json!([])), &QueryRule::default()).is_none());
    let only_harness = json!([{"role": "user", "content": "<system-reminder>x</system-reminder>"}]);
    assert!(extract(&body(only_harness), &QueryRule::default()).is_none());
    let only_tools =
        json!([{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "42"}]}]);
    assert!(extract(&body(only_tools), &QueryRule::default()).is_none());
    assert!(extract(b"not json", &QueryRule::default()).is_none());
}

#[test]
fn a_long_question_is_cut_to_what_the_model_reads() {
    let long = "ask ".repeat(1000);
    assert_eq!(text_of(&body(json!([{"role": "user", "content": long}]))).chars().count(), MAX_QUERY_CHARS);
}

/// What the query was before harness text was told apart (moved from placement's tests): the
/// last user turn's text, its text blocks joined, a tool loop's question.
#[test]
fn the_last_user_turn_is_read_as_before_with_follow_ups_off() {
    let rule = QueryRule { follow_up_words: 0, ..QueryRule::default() };
    let text = |messages: &str| {
        extract(format!(r#"{{"model":"m","messages":{messages}}}"#).as_bytes(), &rule).map(|q| q.text)
    };
    assert_eq!(text(r#"[{"role":"user","content":"a \u00e9"}]"#).as_deref(), Some("a é"));
    let blocks = r#"[{"role":"user","content":"old"},{"role":"assistant","content":"x"},
      {"role":"user","content":[{"type":"text","text":"one"},{"type":"image","source":{}},{"type":"text","text":"two"}]},
      {"role":"assistant","content":"prefill"}]"#;
    assert_eq!(text(blocks).as_deref(), Some("one\ntwo"));
    let tool_loop = r#"[{"role":"user","content":"find order 42"},
      {"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{}}]},
      {"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"found"}]}]"#;
    assert_eq!(text(tool_loop).as_deref(), Some("find order 42"));
    assert_eq!(text(r#"[{"role":"assistant","content":"x"}]"#), None);
    assert_eq!(extract(b"not json", &rule), None);
}

#[test]
fn newest_words_are_the_last_turns_own_words_only() {
    let rule = QueryRule::default();
    let body = br#"{"messages":[{"role":"user","content":"I prefer tea."},{"role":"assistant","content":"Noted."},{"role":"user","content":[{"type":"text","text":"<system-reminder>harness</system-reminder>I live in Oslo."}]}]}"#;
    assert_eq!(newest_words(body, &rule).as_deref(), Some("I live in Oslo."));
    let tool_turn = br#"{"messages":[{"role":"user","content":"I prefer tea."},{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"x","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"r"}]}]}"#;
    assert_eq!(newest_words(tool_turn, &rule), None);
    let prefill = br#"{"messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"Sure"}]}"#;
    assert_eq!(newest_words(prefill, &rule), None);
}
