//! The deterministic message the mock answers with, and its wire forms: the complete JSON and
//! the SSE events of the same message.

use serde_json::{Map, Value, json};

/// One SSE event: its `event:` name and its `data:` JSON.
pub(super) type Event = (&'static str, Value);

const USER_TEXT_CHARS: usize = 60;
const DEFAULT_TOOL: &str = "get_weather";
const TOOL_INPUT: &str = r#"{"location": "Paris"}"#;

/// The answer to one Messages request. The same request body (ignoring `stream`) always gives
/// the same answer, so streamed and complete forms describe one message.
#[derive(Debug, Clone)]
pub(super) struct Answer {
    pub(super) id: String,
    pub(super) model: String,
    /// A thinking block first, with its signature (memory tool calls with thinking enabled).
    pub(super) thinking: Option<(String, String)>,
    pub(super) text: String,
    pub(super) tools: Vec<ToolCall>,
    pub(super) input_tokens: u64,
    pub(super) output_tokens: u64,
}

#[derive(Debug, Clone)]
pub(super) struct ToolCall {
    pub(super) id: String,
    pub(super) name: String,
    /// The input as JSON text, streamed in pieces.
    pub(super) input: String,
}

impl Answer {
    /// `with_tool` adds a `tool_use` block after the text (the `mock-tool-use` model). With
    /// memgate's memory tools offered, the mock calls them as a model would (`memory::plan`).
    pub(super) fn new(body: &Map<String, Value>, model: &str, with_tool: bool) -> Self {
        let hash = format!("{:016x}", body_hash(body));
        let user_text: String = last_user_text(body).chars().take(USER_TEXT_CHARS).collect();
        let mut text = format!("Hello from mock-upstream (model {model}). You said: {user_text}");
        let mut thinking = None;
        let mut tools = Vec::new();
        if super::observe::forced(body) {
            // Forced structured output: the call alone, no text (as the API answers).
            text = String::new();
            tools.push(ToolCall {
                id: format!("toolu_mock_{hash}"),
                name: super::observe::TOOL.to_owned(),
                input: super::observe::input(body).to_string(),
            });
        } else if with_tool {
            tools.push(ToolCall {
                id: format!("toolu_mock_{hash}"),
                name: first_tool_name(body).unwrap_or(DEFAULT_TOOL).to_owned(),
                input: TOOL_INPUT.to_owned(),
            });
        } else if let Some(plan) = super::memory::plan(body, model) {
            text = plan.text;
            tools = plan
                .calls
                .into_iter()
                .enumerate()
                .map(|(i, (name, input))| ToolCall {
                    id: format!("toolu_mock_{hash}_{i}"),
                    name,
                    input: input.to_string(),
                })
                .collect();
            let thinks =
                body.get("thinking").and_then(|t| t.get("type")).and_then(Value::as_str) == Some("enabled");
            if thinks && !tools.is_empty() {
                thinking =
                    Some(("The person wants me to use memory.".to_owned(), format!("sig_mock_{hash}")));
            }
        }
        let output_tokens = text.split_whitespace().count() as u64
            + tools.iter().map(|t| (t.input.len() as u64).div_ceil(4)).sum::<u64>();
        Answer {
            id: format!("msg_mock_{hash}"),
            model: model.to_owned(),
            output_tokens,
            thinking,
            text,
            tools,
            input_tokens: estimate_input_tokens(body),
        }
    }

    /// `--text-bytes`: the text repeated, space-separated, to at least `bytes` bytes (an empty
    /// text, or `0`, stays as it is).
    pub(super) fn lengthen(&mut self, bytes: usize) {
        if self.text.is_empty() || self.text.len() >= bytes {
            return;
        }
        let words = self.text.split_whitespace().count() as u64;
        let mut text = String::with_capacity(bytes + self.text.len() + 1);
        while text.len() < bytes {
            if !text.is_empty() {
                text.push(' ');
            }
            text.push_str(&self.text);
        }
        self.output_tokens += text.split_whitespace().count() as u64 - words;
        self.text = text;
    }

    fn stop_reason(&self) -> &'static str {
        if self.tools.is_empty() { "end_turn" } else { "tool_use" }
    }

    /// The complete (non-streaming) message.
    pub(super) fn to_json(&self) -> Value {
        let mut content = Vec::new();
        if let Some((thinking, signature)) = &self.thinking {
            content.push(json!({ "type": "thinking", "thinking": thinking, "signature": signature }));
        }
        if !self.text.is_empty() || self.tools.is_empty() {
            content.push(json!({ "type": "text", "text": self.text }));
        }
        for tool in &self.tools {
            let input: Value = serde_json::from_str(&tool.input).unwrap_or(Value::Null);
            content.push(json!({
                "type": "tool_use", "id": tool.id, "name": tool.name, "input": input,
            }));
        }
        json!({
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": content,
            "stop_reason": self.stop_reason(),
            "stop_sequence": null,
            "usage": { "input_tokens": self.input_tokens, "output_tokens": self.output_tokens },
        })
    }

    pub(super) fn message_start(&self) -> Event {
        let message = json!({
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": null,
            "stop_sequence": null,
            "usage": { "input_tokens": self.input_tokens, "output_tokens": 1 },
        });
        ("message_start", json!({ "type": "message_start", "message": message }))
    }

    /// The content blocks, each as (`content_block_start`, its delta events, `content_block_stop`),
    /// with the text and the tool input split into about `deltas` pieces each.
    pub(super) fn blocks(&self, deltas: usize) -> Vec<(Event, Vec<Event>, Event)> {
        let mut blocks = Vec::new();
        if let Some((thinking, signature)) = &self.thinking {
            let at = blocks.len();
            let mut pieces: Vec<Event> = split_even(thinking, deltas)
                .into_iter()
                .map(|piece| content_delta(at, json!({ "type": "thinking_delta", "thinking": piece })))
                .collect();
            pieces.push(content_delta(at, json!({ "type": "signature_delta", "signature": signature })));
            blocks.push((
                block_start(at, json!({ "type": "thinking", "thinking": "" })),
                pieces,
                block_stop(at),
            ));
        }
        if !self.text.is_empty() || self.tools.is_empty() {
            let at = blocks.len();
            blocks.push((
                block_start(at, json!({ "type": "text", "text": "" })),
                split_even(&self.text, deltas).into_iter().map(|piece| text_delta(at, piece)).collect(),
                block_stop(at),
            ));
        }
        for tool in &self.tools {
            let at = blocks.len();
            let start =
                block_start(at, json!({ "type": "tool_use", "id": tool.id, "name": tool.name, "input": {} }));
            let pieces = split_even(&tool.input, deltas)
                .into_iter()
                .map(|piece| {
                    let delta = json!({ "type": "input_json_delta", "partial_json": piece });
                    content_delta(at, delta)
                })
                .collect();
            blocks.push((start, pieces, block_stop(at)));
        }
        blocks
    }

    pub(super) fn message_delta(&self) -> Event {
        (
            "message_delta",
            json!({
                "type": "message_delta",
                "delta": { "stop_reason": self.stop_reason(), "stop_sequence": null },
                "usage": { "output_tokens": self.output_tokens },
            }),
        )
    }
}

pub(super) fn ping() -> Event {
    ("ping", json!({ "type": "ping" }))
}

pub(super) fn message_stop() -> Event {
    ("message_stop", json!({ "type": "message_stop" }))
}

pub(super) fn block_start(index: usize, block: Value) -> Event {
    ("content_block_start", json!({ "type": "content_block_start", "index": index, "content_block": block }))
}

pub(super) fn block_stop(index: usize) -> Event {
    ("content_block_stop", json!({ "type": "content_block_stop", "index": index }))
}

pub(super) fn text_delta(index: usize, text: &str) -> Event {
    content_delta(index, json!({ "type": "text_delta", "text": text }))
}

fn content_delta(index: usize, delta: Value) -> Event {
    ("content_block_delta", json!({ "type": "content_block_delta", "index": index, "delta": delta }))
}

/// `{"input_tokens": N}` of count_tokens and `usage.input_tokens`: ceil(bytes of the JSON of
/// `system`, `messages` and `tools`, over 4).
pub(super) fn estimate_input_tokens(body: &Map<String, Value>) -> u64 {
    let bytes: usize = ["system", "messages", "tools"]
        .iter()
        .filter_map(|key| body.get(*key))
        .map(|value| value.to_string().len())
        .sum();
    (bytes as u64).div_ceil(4)
}

/// The text of the last user message that has some (its last text block when it has blocks).
pub(super) fn last_user_text(body: &Map<String, Value>) -> &str {
    let Some(messages) = body.get("messages").and_then(Value::as_array) else {
        return "";
    };
    messages
        .iter()
        .rev()
        .filter(|message| message.get("role").and_then(Value::as_str) == Some("user"))
        .find_map(|message| match message.get("content") {
            Some(Value::String(text)) => Some(text.as_str()),
            Some(Value::Array(blocks)) => blocks
                .iter()
                .rev()
                .filter(|block| block.get("type").and_then(Value::as_str) == Some("text"))
                .find_map(|block| block.get("text").and_then(Value::as_str)),
            _ => None,
        })
        .unwrap_or("")
}

fn first_tool_name(body: &Map<String, Value>) -> Option<&str> {
    body.get("tools")?.as_array()?.first()?.get("name")?.as_str()
}

/// Whether `system` (a string, or any text of its blocks) contains `marker`.
pub(super) fn system_contains(body: &Map<String, Value>, marker: &str) -> bool {
    match body.get("system") {
        Some(Value::String(text)) => text.contains(marker),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .any(|block| block.get("text").and_then(Value::as_str).is_some_and(|text| text.contains(marker))),
        _ => false,
    }
}

/// Splits `text` into `pieces` runs of nearly equal length in characters (fewer when the text
/// is shorter; at least one, possibly empty).
pub(super) fn split_even(text: &str, pieces: usize) -> Vec<&str> {
    let bounds: Vec<usize> = text.char_indices().map(|(at, _)| at).chain([text.len()]).collect();
    let chars = bounds.len() - 1;
    let pieces = pieces.clamp(1, chars.max(1));
    (0..pieces).map(|i| &text[bounds[i * chars / pieces]..bounds[(i + 1) * chars / pieces]]).collect()
}

/// FNV-1a (stable across Rust versions and runs) over a canonical form of the body: object keys
/// sorted, `stream` left out so a streamed and a complete request share their id.
fn body_hash(body: &Map<String, Value>) -> u64 {
    let mut hasher = Fnv1a::default();
    let mut keys: Vec<&String> = body.keys().filter(|key| *key != "stream").collect();
    keys.sort();
    hasher.write(b"{");
    for key in keys {
        hasher.write(Value::String(key.clone()).to_string().as_bytes());
        hasher.write(b":");
        if let Some(value) = body.get(key) {
            hash_value(&mut hasher, value);
        }
        hasher.write(b",");
    }
    hasher.write(b"}");
    hasher.0
}

fn hash_value(hasher: &mut Fnv1a, value: &Value) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            hasher.write(b"{");
            for key in keys {
                hasher.write(Value::String(key.clone()).to_string().as_bytes());
                hasher.write(b":");
                if let Some(inner) = map.get(key) {
                    hash_value(hasher, inner);
                }
                hasher.write(b",");
            }
            hasher.write(b"}");
        }
        Value::Array(items) => {
            hasher.write(b"[");
            for item in items {
                hash_value(hasher, item);
                hasher.write(b",");
            }
            hasher.write(b"]");
        }
        scalar => hasher.write(scalar.to_string().as_bytes()),
    }
}

struct Fnv1a(u64);

impl Default for Fnv1a {
    fn default() -> Self {
        Fnv1a(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv1a {
    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 ^= u64::from(*byte);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn split_even_keeps_the_text_and_the_count() {
        let text = "Hello from mock-upstream, héllo";
        let parts = split_even(text, 5);
        assert_eq!(parts.len(), 5);
        assert_eq!(parts.concat(), text);
        assert_eq!(split_even("ab", 5), vec!["a", "b"]);
        assert_eq!(split_even("", 3), vec![""]);
    }

    #[test]
    fn hash_ignores_stream_and_key_order() {
        let a: Value =
            serde_json::from_str(r#"{"model":"m","stream":true,"x":{"b":1,"a":2}}"#).expect("json");
        let b: Value = serde_json::from_str(r#"{"x":{"a":2,"b":1},"model":"m"}"#).expect("json");
        let (Value::Object(a), Value::Object(b)) = (a, b) else {
            panic!("objects expected");
        };
        assert_eq!(body_hash(&a), body_hash(&b));
    }
}
