//! Server-sent events as the Messages API writes them: `event: <name>` and `data: <json>` lines,
//! an empty line after each event. The parser keeps each event's raw bytes, so an event relayed
//! unchanged goes out exactly as it came.

use bytes::{Bytes, BytesMut};
use serde_json::Value;

/// The longest event memgate holds while it waits for its end: a tool call's input arrives in
/// small deltas, but a `content_block_start` can carry a whole server tool result.
const MAX_EVENT: usize = 16 * 1024 * 1024;

pub struct Event {
    pub name: String,
    pub data: Value,
    /// The event as it came, its terminating blank line included.
    pub raw: Bytes,
}

impl Event {
    /// The event's `type` (its data's, which names it as well as `event:` does).
    pub fn kind(&self) -> &str {
        self.data.get("type").and_then(Value::as_str).unwrap_or(self.name.as_str())
    }
}

/// An event written out: `event: <name>`, `data: <json>`, a blank line; the data's `type` first,
/// as the API writes it (a reader that peeks at the start of a line finds it there).
pub fn encode(name: &str, data: &Value) -> Bytes {
    let json = match data {
        Value::Object(map) if map.contains_key("type") => {
            let mut text = format!("{{\"type\":{}", map["type"]);
            for (key, value) in map.iter().filter(|(key, _)| *key != "type") {
                text.push_str(&format!(",{}:{value}", Value::String(key.clone())));
            }
            text.push('}');
            text
        }
        other => other.to_string(),
    };
    Bytes::from(format!("event: {name}\ndata: {json}\n\n"))
}

#[derive(Default)]
pub struct Parser {
    buffer: BytesMut,
    /// How far `buffer` has been searched for an event's end without finding one: the next
    /// search starts just before it (an end is at most four bytes long), so an event that
    /// arrives in many small chunks is read once, not once per chunk.
    searched: usize,
    /// Bytes looked at by the searches, for the tests that hold the parser linear.
    #[cfg(test)]
    examined: usize,
}

#[derive(Debug, PartialEq, Eq)]
pub enum ParseError {
    TooLong,
}

impl Parser {
    pub fn push(&mut self, chunk: &[u8]) {
        self.buffer.extend_from_slice(chunk);
    }

    /// The next complete event, if one has arrived. Comments and events without data are
    /// skipped; a data line that is not JSON makes an event whose data is `null` (relayed as it
    /// came).
    pub fn next_event(&mut self) -> Result<Option<Event>, ParseError> {
        loop {
            let from = self.searched.saturating_sub(3);
            #[cfg(test)]
            {
                self.examined += self.buffer.len() - from.min(self.buffer.len());
            }
            let Some(end) = find_event_end(&self.buffer, from) else {
                if self.buffer.len() > MAX_EVENT {
                    return Err(ParseError::TooLong);
                }
                self.searched = self.buffer.len();
                return Ok(None);
            };
            self.searched = 0;
            let raw = self.buffer.split_to(end).freeze();
            let text = String::from_utf8_lossy(&raw);
            let mut name = String::from("message");
            let mut data = String::new();
            for line in text.lines() {
                if let Some(value) = line.strip_prefix("event:") {
                    name = value.trim().to_owned();
                } else if let Some(value) = line.strip_prefix("data:") {
                    if !data.is_empty() {
                        data.push('\n');
                    }
                    data.push_str(value.strip_prefix(' ').unwrap_or(value));
                }
            }
            if data.is_empty() && !text.lines().any(|l| l.starts_with("event:")) {
                continue;
            }
            let data = serde_json::from_str(&data).unwrap_or(Value::Null);
            return Ok(Some(Event { name, data, raw }));
        }
    }
}

/// Where the first event in `buffer` ends (after its blank line): `\n\n`, `\r\n\r\n` or `\r\r`,
/// looking from `from` on (where no end starts before it).
fn find_event_end(buffer: &[u8], from: usize) -> Option<usize> {
    let mut i = from;
    while i + 1 < buffer.len() {
        match (buffer[i], buffer[i + 1]) {
            (b'\n', b'\n') | (b'\r', b'\r') => return Some(i + 2),
            (b'\r', b'\n') if buffer.get(i + 2..i + 4) == Some(b"\r\n") => return Some(i + 4),
            _ => i += 1,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One large event in small chunks is searched once, not once a chunk: the bytes looked at
    /// stay within a small multiple of the event's size (a search from the start each time
    /// looks at ~n²/2 of them: 2,000 times the event for this one).
    #[test]
    fn an_event_in_many_small_chunks_is_searched_in_linear_time() {
        let text = "x".repeat(512 * 1024);
        let stream = format!(
            "event: content_block_start\r\ndata: {{\"type\":\"t\",\"text\":\"{text}\"}}\r\n\r\nevent: ping\ndata: {{}}\n\n"
        );
        let mut parser = Parser::default();
        let mut names = Vec::new();
        for piece in stream.as_bytes().chunks(64) {
            parser.push(piece);
            while let Some(event) = parser.next_event().unwrap() {
                names.push(event.name);
            }
        }
        assert_eq!(names, ["content_block_start", "ping"]);
        assert!(
            parser.examined <= 2 * stream.len(),
            "{} bytes looked at for {}",
            parser.examined,
            stream.len()
        );
    }

    #[test]
    fn events_split_across_chunks_come_out_whole_with_their_bytes() {
        let stream = "event: ping\ndata: {\"type\": \"ping\"}\n\nevent: message_stop\r\ndata: {\"type\":\"message_stop\"}\r\n\r\n: comment\n\n";
        let mut parser = Parser::default();
        let mut events = Vec::new();
        for piece in stream.as_bytes().chunks(7) {
            parser.push(piece);
            while let Some(event) = parser.next_event().unwrap() {
                events.push(event);
            }
        }
        assert_eq!(events.len(), 2);
        assert_eq!(events[0].kind(), "ping");
        assert_eq!(&events[0].raw[..], b"event: ping\ndata: {\"type\": \"ping\"}\n\n");
        assert_eq!(events[1].name, "message_stop");
        let written =
            encode("content_block_stop", &serde_json::json!({"index": 2, "type": "content_block_stop"}));
        assert_eq!(
            &written[..],
            b"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":2}\n\n"
        );
    }
}
