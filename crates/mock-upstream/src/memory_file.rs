//! The mock as a model that uses Anthropic's memory tool, when a request declares it
//! (`{"type": "memory_20250818", "name": "memory"}` in `tools`): it calls `memory` as the model
//! would, whoever executes it (the client, or memgate as its backend).
//!
//! By the request's last turn (docs/mock-upstream.md, "Anthropic's memory tool"):
//! - a `tool_result`: a final text that quotes it, "From memory: …";
//! - "remember that …": `create` of `/memories/<the first words, dashed>.md` holding the rest;
//! - "what do you remember": `view` of `/memories`;
//! - "memory command: {…}": that JSON object, verbatim, as the call's input (for tests that need a
//!   particular command: `str_replace`, a traversal path, a secret);
//! - anything else: the usual answer.

use super::memory::{Plan, tool_results};
use serde_json::{Map, Value, json};

const QUOTED_CHARS: usize = 1200;
const SLUG_WORDS: usize = 5;

fn declared(body: &Map<String, Value>) -> bool {
    body.get("tools").and_then(Value::as_array).is_some_and(|tools| {
        tools.iter().any(|tool| {
            tool.get("type").and_then(Value::as_str) == Some("memory_20250818")
                && tool.get("name").and_then(Value::as_str) == Some("memory")
        })
    })
}

/// `/memories/<slug>.md` for a statement: its first words, lowercase, joined by dashes.
fn file_for(statement: &str) -> String {
    let words: Vec<String> = statement
        .split_whitespace()
        .map(|word| word.chars().filter(|c| c.is_alphanumeric()).collect::<String>().to_lowercase())
        .filter(|word| !word.is_empty())
        .take(SLUG_WORDS)
        .collect();
    let slug = if words.is_empty() { "note".to_owned() } else { words.join("-") };
    format!("/memories/{slug}.md")
}

fn call(input: Value) -> Vec<(String, Value)> {
    vec![("memory".to_owned(), input)]
}

/// What the mock does with the memory tool declared; `None` when it is not, or when it has
/// nothing to do with it.
pub(super) fn plan(body: &Map<String, Value>) -> Option<Plan> {
    if !declared(body) {
        return None;
    }
    if let Some(results) = tool_results(body) {
        let quoted: String = results.chars().take(QUOTED_CHARS).collect();
        return Some(Plan { text: format!("From memory: {quoted}"), calls: Vec::new() });
    }
    let words = super::answer::last_user_text(body).trim();
    let lower = words.to_lowercase();
    if let Some(at) = lower.find("memory command:") {
        let input: Value = serde_json::from_str(words[at + "memory command:".len()..].trim()).ok()?;
        return Some(Plan { text: "Working on my memory.".into(), calls: call(input) });
    }
    if let Some(at) = lower.find("remember that ") {
        let statement = words[at + "remember that ".len()..].trim().trim_end_matches('.');
        if !statement.is_empty() {
            return Some(Plan {
                text: "I'll remember that.".into(),
                calls: call(
                    json!({"command": "create", "path": file_for(statement), "file_text": statement}),
                ),
            });
        }
    }
    if lower.contains("what do you remember") {
        return Some(Plan {
            text: "Let me look at my memory.".into(),
            calls: call(json!({"command": "view", "path": "/memories"})),
        });
    }
    None
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::*;

    fn with_memory_tool(messages: Value) -> Map<String, Value> {
        match json!({"tools": [{"type": "memory_20250818", "name": "memory"}], "messages": messages}) {
            Value::Object(map) => map,
            _ => unreachable!(),
        }
    }

    #[test]
    fn the_mock_creates_views_and_quotes_with_the_memory_tool() {
        let said = |text: &str| plan(&with_memory_tool(json!([{"role": "user", "content": text}])));
        let remember = said("Please remember that I like green tea.").expect("a plan");
        assert_eq!(
            remember.calls,
            call(
                json!({"command": "create", "path": "/memories/i-like-green-tea.md", "file_text": "I like green tea"})
            )
        );
        let view = said("What do you remember about me?").expect("a plan");
        assert_eq!(view.calls, call(json!({"command": "view", "path": "/memories"})));
        let verbatim = said(r#"memory command: {"command": "view", "path": "/etc"}"#).expect("a plan");
        assert_eq!(verbatim.calls, call(json!({"command": "view", "path": "/etc"})));
        assert!(said("Hello.").is_none());
        let answered = plan(&with_memory_tool(json!([
            {"role": "user", "content": "What do you remember?"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "memory", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "listing"}]},
        ])))
        .expect("a plan");
        assert_eq!((answered.text.as_str(), answered.calls.len()), ("From memory: listing", 0));
        let undeclared = json!({"messages": [{"role": "user", "content": "remember that x"}]});
        assert!(plan(undeclared.as_object().expect("an object")).is_none());
    }
}
