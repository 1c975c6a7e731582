//! The mock as a model that uses memgate's memory tools, when a request offers them (its `tools`
//! name `memory_search` or `memory_add`); requests without them are answered as before. A
//! request that declares Anthropic's memory tool is answered by `memory_file` first.
//!
//! What it does, by the request's last turn (docs/mock-upstream.md, "Memory tools"):
//! - a `tool_result` (memgate answered a call): a final text that quotes it, "From memory: …";
//! - "remember that …" (any case): a `memory_add` of a `fact` whose statement is the rest;
//! - a question (ends with `?`): a `memory_search` for it;
//! - anything else: the usual answer.
//!
//! Models that misbehave on purpose, for the gateway's bounds and refusals:
//! - `mock-tool-loop`: calls `memory_search` on every turn, tool results included, forever;
//! - `mock-tool-mixed`: calls `memory_search` and the client's own first tool in one turn;
//! - `mock-tool-bad-input`: calls `memory_add` with an input no tool takes;
//! - `mock-tool-flood`: calls `memory_list` `FLOOD_CALLS` times in its first turn (a model that
//!   asks for far more than a turn should carry), then quotes the results as usual.

use serde_json::{Map, Value, json};

/// What the mock model says and calls.
pub(super) struct Plan {
    pub(super) text: String,
    /// (tool name, input), in order.
    pub(super) calls: Vec<(String, Value)>,
}

const QUOTED_CHARS: usize = 400;
/// How many `memory_list` calls `mock-tool-flood` makes in one turn.
const FLOOD_CALLS: usize = 200;

fn offered(body: &Map<String, Value>) -> Vec<&str> {
    body.get("tools")
        .and_then(Value::as_array)
        .map(|tools| tools.iter().filter_map(|t| t.get("name").and_then(Value::as_str)).collect())
        .unwrap_or_default()
}

/// The text of the `tool_result`s in the last user turn, if it holds any.
pub(super) fn tool_results(body: &Map<String, Value>) -> Option<String> {
    let last = body.get("messages")?.as_array()?.last()?;
    if last.get("role").and_then(Value::as_str) != Some("user") {
        return None;
    }
    let blocks = last.get("content")?.as_array()?;
    let mut texts = Vec::new();
    for block in blocks.iter().filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_result")) {
        match block.get("content") {
            Some(Value::String(text)) => texts.push(text.clone()),
            Some(Value::Array(parts)) => texts.extend(
                parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).map(str::to_owned),
            ),
            _ => {}
        }
    }
    (!blocks.is_empty()
        && blocks.iter().any(|b| b.get("type").and_then(Value::as_str) == Some("tool_result")))
    .then(|| texts.join("\n"))
}

/// What the mock does with memgate's tools offered; `None` when they are not, or when it has
/// nothing to do with them.
pub(super) fn plan(body: &Map<String, Value>, model: &str) -> Option<Plan> {
    if let Some(plan) = super::memory_file::plan(body) {
        return Some(plan);
    }
    let tools = offered(body);
    let can_search = tools.contains(&"memory_search");
    let can_add = tools.contains(&"memory_add");
    if !can_search && !can_add {
        return None;
    }
    let words = super::answer::last_user_text(body).trim().to_owned();
    let search = |query: &str| ("memory_search".to_owned(), json!({ "query": query }));
    match model {
        "mock-tool-loop" if can_search => {
            return Some(Plan { text: "Let me look again.".into(), calls: vec![search("more")] });
        }
        "mock-tool-mixed" if can_search => {
            let client_tool = tools.iter().find(|name| !name.starts_with("memory_"))?;
            return Some(Plan {
                text: "Checking memory and the weather.".into(),
                calls: vec![search(&words), ((*client_tool).to_owned(), json!({ "location": "Paris" }))],
            });
        }
        "mock-tool-flood" if tools.contains(&"memory_list") && tool_results(body).is_none() => {
            let list = || ("memory_list".to_owned(), json!({ "limit": 50 }));
            return Some(Plan {
                text: "Let me list everything.".into(),
                calls: (0..FLOOD_CALLS).map(|_| list()).collect(),
            });
        }
        "mock-tool-bad-input" if can_add && tool_results(body).is_none() => {
            return Some(Plan {
                text: "Saving.".into(),
                calls: vec![(
                    "memory_add".to_owned(),
                    json!({ "content": "not an object", "scope": ["public"] }),
                )],
            });
        }
        _ => {}
    }
    if let Some(results) = tool_results(body) {
        let quoted: String = results.chars().take(QUOTED_CHARS).collect();
        return Some(Plan { text: format!("From memory: {quoted}"), calls: Vec::new() });
    }
    let lower = words.to_lowercase();
    if can_add && let Some(at) = lower.find("remember that ") {
        let statement = words[at + "remember that ".len()..].trim().trim_end_matches('.');
        if !statement.is_empty() {
            return Some(Plan {
                text: "I'll remember that.".into(),
                calls: vec![(
                    "memory_add".to_owned(),
                    json!({ "type": "fact", "content": { "statement": statement } }),
                )],
            });
        }
    }
    if can_search && words.ends_with('?') {
        return Some(Plan { text: "Let me check my memory.".into(), calls: vec![search(&words)] });
    }
    None
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::*;

    fn body(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => panic!("an object"),
        }
    }

    fn with_tools(messages: Value) -> Map<String, Value> {
        body(
            json!({"model": "m", "tools": [{"name": "memory_search"}, {"name": "memory_add"}], "messages": messages}),
        )
    }

    #[test]
    fn the_mock_remembers_searches_and_quotes_as_a_model_would() {
        let remember = plan(
            &with_tools(json!([{"role": "user", "content": "Please remember that I like green tea."}])),
            "m",
        )
        .expect("a plan");
        assert_eq!(
            remember.calls,
            vec![(
                "memory_add".to_owned(),
                json!({"type": "fact", "content": {"statement": "I like green tea"}})
            )]
        );
        let question = plan(&with_tools(json!([{"role": "user", "content": "What tea do I like?"}])), "m")
            .expect("a plan");
        assert_eq!(question.calls[0].0, "memory_search");
        let answered = plan(
            &with_tools(json!([
                {"role": "user", "content": "What tea do I like?"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "memory_search", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "green tea"}]},
            ])),
            "m",
        )
        .expect("a plan");
        assert_eq!((answered.text.as_str(), answered.calls.len()), ("From memory: green tea", 0));
        assert!(plan(&with_tools(json!([{"role": "user", "content": "Hello."}])), "m").is_none());
        // Without memgate's tools: the usual answer.
        assert!(
            plan(&body(json!({"messages": [{"role": "user", "content": "remember that x"}]})), "m").is_none()
        );
    }

    #[test]
    fn the_flood_model_lists_two_hundred_times_then_quotes() {
        let with_list = |messages: Value| {
            body(
                json!({"model": "m", "tools": [{"name": "memory_search"}, {"name": "memory_list"}], "messages": messages}),
            )
        };
        let asked = with_list(json!([{"role": "user", "content": "List it all."}]));
        let flood = plan(&asked, "mock-tool-flood").expect("a plan");
        assert_eq!(flood.calls.len(), FLOOD_CALLS);
        assert!(
            flood.calls.iter().all(|(name, input)| name == "memory_list" && input == &json!({"limit": 50}))
        );
        let answered = with_list(json!([
            {"role": "user", "content": "List it all."},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "memory_list", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "none"}]},
        ]));
        let quoted = plan(&answered, "mock-tool-flood").expect("a plan");
        assert_eq!((quoted.text.as_str(), quoted.calls.len()), ("From memory: none", 0));
    }
}
