//! Editing the request body for the tool rounds, as text (as `inject::placement` does): the
//! client's bytes stay as they came, and only two kinds of insertion are made.
//!
//! - `offer_tools`: memgate's definitions go at the end of `tools` (after the client's own, which
//!   keep their order, bytes and breakpoints; a `tools` array is added when the request has none).
//!   Tools lead the prompt-cache prefix, so appending there, in the same bytes every time, keeps
//!   what the client's breakpoints cache.
//! - `append_round`: the model's turn and memgate's `tool_result`s go at the end of `messages`,
//!   after everything the upstream has already seen, so each round's prefix is the previous
//!   round's request.

use crate::inject::scan::{for_each_element, top_fields};
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

/// Where a value borrowed from `body` lies in it.
fn span(body: &[u8], raw: &RawValue) -> (usize, usize) {
    let start = raw.get().as_ptr() as usize - body.as_ptr() as usize;
    (start, start + raw.get().len())
}

/// Whether a JSON array's text holds no element.
fn is_empty_array(text: &str) -> bool {
    text.len() >= 2 && text[1..text.len() - 1].trim().is_empty()
}

#[derive(Deserialize)]
struct NamedTool {
    name: Option<String>,
}

/// Why memgate's tools are not offered in a request.
#[derive(Debug, PartialEq, Eq)]
pub enum NotOffered {
    /// The client declares a tool of the same name: its own wins (the upstream refuses two tools
    /// of one name).
    NameTaken,
    /// `tools` is not an array, or the body is not what the checks let through.
    Shape,
}

/// `body` with `elements` (tool definitions joined by commas) at the end of its `tools`.
pub fn offer_tools(body: &[u8], elements: &str, names: &[&str]) -> Result<Vec<u8>, NotOffered> {
    let [tools] = top_fields(body, ["tools"]).map_err(|_| NotOffered::Shape)?;
    let mut out = Vec::with_capacity(body.len() + elements.len() + 16);
    match tools {
        Some(raw) if raw.get() == "null" => return offer_tools_replacing_null(body, elements),
        None => {
            // A new `tools` first: the object's other fields keep their bytes after it.
            let open = body.iter().position(|b| *b == b'{').ok_or(NotOffered::Shape)?;
            out.extend_from_slice(&body[..=open]);
            out.extend_from_slice(b"\"tools\":[");
            out.extend_from_slice(elements.as_bytes());
            out.extend_from_slice(b"]");
            let rest = &body[open + 1..];
            if rest.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'}') {
                out.push(b',');
            }
            out.extend_from_slice(rest);
        }
        Some(raw) => {
            if !raw.get().starts_with('[') {
                return Err(NotOffered::Shape);
            }
            let mut taken = false;
            for_each_element(raw, |_, element| {
                if let Ok(NamedTool { name: Some(name) }) = serde_json::from_str::<NamedTool>(element.get()) {
                    taken |= names.contains(&name.as_str());
                }
                Ok::<(), ()>(())
            })
            .map_err(|_| NotOffered::Shape)?
            .map_err(|()| NotOffered::Shape)?;
            if taken {
                return Err(NotOffered::NameTaken);
            }
            let (_, end) = span(body, raw);
            // Before the array's closing bracket.
            let close = end - 1;
            out.extend_from_slice(&body[..close]);
            if !is_empty_array(raw.get()) {
                out.push(b',');
            }
            out.extend_from_slice(elements.as_bytes());
            out.extend_from_slice(&body[close..]);
        }
    }
    Ok(out)
}

/// `"tools": null`: the null becomes the array of memgate's definitions.
fn offer_tools_replacing_null(body: &[u8], elements: &str) -> Result<Vec<u8>, NotOffered> {
    let [tools] = top_fields(body, ["tools"]).map_err(|_| NotOffered::Shape)?;
    let raw = tools.ok_or(NotOffered::Shape)?;
    let (start, end) = span(body, raw);
    let mut out = Vec::with_capacity(body.len() + elements.len() + 2);
    out.extend_from_slice(&body[..start]);
    out.push(b'[');
    out.extend_from_slice(elements.as_bytes());
    out.push(b']');
    out.extend_from_slice(&body[end..]);
    Ok(out)
}

#[derive(Deserialize)]
struct DeclaredTool<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow)]
    name: Option<std::borrow::Cow<'a, str>>,
}

/// Whether the body's `tools` declares Anthropic's memory tool
/// (`{"type": "memory_20250818", "name": "memory"}`).
pub fn declares_memory_tool(body: &[u8]) -> bool {
    let Ok([Some(tools)]) = top_fields(body, ["tools"]) else { return false };
    if !tools.get().starts_with('[') {
        return false;
    }
    let mut declared = false;
    let scanned = for_each_element(tools, |_, element| {
        if let Ok(tool) = serde_json::from_str::<DeclaredTool<'_>>(element.get()) {
            declared |= tool.kind.as_deref() == Some(crate::tools::files::TOOL_TYPE)
                && tool.name.as_deref() == Some(crate::tools::files::TOOL_NAME);
        }
        Ok::<(), ()>(())
    });
    matches!(scanned, Ok(Ok(()))) && declared
}

/// One `tool_result` memgate sends back.
pub struct ToolAnswer<'a> {
    pub tool_use_id: &'a str,
    pub content: &'a str,
    pub is_error: bool,
}

/// `body` with two more messages at the end of `messages`: the model's turn (`assistant`, its
/// content exactly as the model gave it, thinking blocks and their signatures included) and a
/// user turn holding one `tool_result` per call, in the calls' order.
pub fn append_round(body: &[u8], assistant: &[Value], answers: &[ToolAnswer<'_>]) -> Option<Vec<u8>> {
    let [messages] = top_fields(body, ["messages"]).ok()?;
    let raw = messages?;
    if !raw.get().starts_with('[') {
        return None;
    }
    let results: Vec<Value> = answers
        .iter()
        .map(|answer| {
            let mut result = serde_json::json!({
                "type": "tool_result",
                "tool_use_id": answer.tool_use_id,
                "content": answer.content,
            });
            if answer.is_error {
                result["is_error"] = Value::Bool(true);
            }
            result
        })
        .collect();
    let turns = format!(
        "{},{}",
        serde_json::json!({"role": "assistant", "content": assistant}),
        serde_json::json!({"role": "user", "content": results}),
    );
    let (_, end) = span(body, raw);
    let close = end - 1;
    let mut out = Vec::with_capacity(body.len() + turns.len() + 1);
    out.extend_from_slice(&body[..close]);
    if !is_empty_array(raw.get()) {
        out.push(b',');
    }
    out.extend_from_slice(turns.as_bytes());
    out.extend_from_slice(&body[close..]);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEFS: &str = r#"{"name":"memory_search"},{"name":"memory_get"}"#;
    const NAMES: [&str; 2] = ["memory_search", "memory_get"];

    fn offered(body: &str) -> String {
        String::from_utf8(offer_tools(body.as_bytes(), DEFS, &NAMES).unwrap()).unwrap()
    }

    #[test]
    fn memgates_tools_follow_the_clients_own_bytes_unchanged() {
        let body = r#"{"model":"m", "tools" : [ {"name":"get_weather","cache_control":{"type":"ephemeral"}} ] ,"messages":[]}"#;
        let out = offered(body);
        assert_eq!(
            out,
            r#"{"model":"m", "tools" : [ {"name":"get_weather","cache_control":{"type":"ephemeral"}} ,{"name":"memory_search"},{"name":"memory_get"}] ,"messages":[]}"#
        );
        let value: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(value["tools"].as_array().unwrap().len(), 3);
        // The client's bytes up to its breakpoint are a prefix of what goes up.
        let cut = body.find("} ]").unwrap() + 1;
        assert!(out.starts_with(&body[..cut]));
    }

    #[test]
    fn a_request_without_tools_gets_an_array_of_memgates() {
        let out = offered(r#" {"model":"m","messages":[{"role":"user","content":"hi"}]}"#);
        let value: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(value["tools"][1]["name"], "memory_get");
        assert_eq!(value["messages"][0]["content"], "hi");
        let out = offered(r#"{"model":"m","tools":[],"messages":[]}"#);
        assert_eq!(
            out,
            r#"{"model":"m","tools":[{"name":"memory_search"},{"name":"memory_get"}],"messages":[]}"#
        );
        let out = offered(r#"{"model":"m","tools":null,"messages":[]}"#);
        let value: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(value["tools"].as_array().unwrap().len(), 2, "{out}");
    }

    #[test]
    fn a_client_tool_of_the_same_name_wins_and_odd_shapes_get_nothing() {
        let body = r#"{"tools":[{"name":"memory_get","input_schema":{}}],"messages":[]}"#;
        assert_eq!(offer_tools(body.as_bytes(), DEFS, &NAMES), Err(NotOffered::NameTaken));
        let body = r#"{"tools":{"name":"x"},"messages":[]}"#;
        assert_eq!(offer_tools(body.as_bytes(), DEFS, &NAMES), Err(NotOffered::Shape));
    }

    #[test]
    fn only_the_memory_tool_by_its_type_and_name_is_found_declared() {
        let declared = |body: &str| declares_memory_tool(body.as_bytes());
        assert!(declared(
            r#"{"tools":[{"name":"x","input_schema":{}},{"type":"memory_20250818","name":"memory"}]}"#
        ));
        assert!(!declared(r#"{"tools":[{"type":"memory_20250818","name":"notes"}]}"#));
        assert!(!declared(r#"{"tools":[{"name":"memory","input_schema":{}}]}"#));
        assert!(!declared(r#"{"tools":{"type":"memory_20250818","name":"memory"}}"#));
        assert!(!declared(r#"{"messages":[]}"#));
    }

    #[test]
    fn a_round_is_appended_after_every_message_the_client_sent() {
        let body = r#"{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hi","cache_control":{"type":"ephemeral"}}]}],"stream":true}"#;
        let assistant = vec![
            serde_json::json!({"type":"thinking","thinking":"hmm","signature":"c2ln=="}),
            serde_json::json!({"type":"tool_use","id":"toolu_1","name":"memory_search","input":{"query":"x"}}),
        ];
        let answers = [ToolAnswer { tool_use_id: "toolu_1", content: "none", is_error: false }];
        let out = String::from_utf8(append_round(body.as_bytes(), &assistant, &answers).unwrap()).unwrap();
        let cut = body.find("}]}]").unwrap() + 3;
        assert!(out.starts_with(&body[..cut]), "{out}");
        assert!(out.ends_with(r#"],"stream":true}"#), "{out}");
        let value: Value = serde_json::from_str(&out).unwrap();
        let messages = value["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 3);
        assert_eq!(messages[1]["content"][0]["signature"], "c2ln==");
        assert_eq!(messages[2]["content"][0]["tool_use_id"], "toolu_1");
        assert!(messages[2]["content"][0].get("is_error").is_none());
    }
}
