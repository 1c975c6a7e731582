//! What an observed turn keeps of its answer: the final text, read from the body as it is relayed
//! to the client, and only once the answer is complete.
//!
//! The tap passes every chunk on as it came (same bytes, no delay, nothing buffered for the
//! client) and reads a copy beside it: for a JSON answer up to `MAX_JSON_BYTES`, parsed at its
//! end; for a stream, event by event, the `text_delta`s of text blocks, complete only when
//! `message_stop` arrived. An answer cut off (the client went away, the upstream broke off, an
//! `error` event) is never observed; neither is one too large to read. What the tap holds is
//! bounded: one event, or the JSON so far, and `max_chars` of text.

use crate::upstream::wire::{Body, BodyError};
use bytes::{Bytes, BytesMut};
use futures_util::{Stream, StreamExt};
use serde_json::Value;
use std::pin::Pin;
use std::task::{Context, Poll};

/// The largest non-streaming answer read for its text; a larger one is relayed, not observed.
pub const MAX_JSON_BYTES: usize = 4 * 1024 * 1024;

/// The longest server-sent event held while it arrives.
const MAX_EVENT_BYTES: usize = 1024 * 1024;

/// Reads an answer's final text as it passes.
pub struct Reader {
    stream: bool,
    max_chars: usize,
    buffer: BytesMut,
    text: String,
    chars: usize,
    /// Text blocks by index (a stream's deltas name their block).
    text_blocks: Vec<usize>,
    complete: bool,
    broken: bool,
}

impl Reader {
    pub fn new(stream: bool, max_chars: usize) -> Reader {
        Reader {
            stream,
            max_chars,
            buffer: BytesMut::new(),
            text: String::new(),
            chars: 0,
            text_blocks: Vec::new(),
            complete: false,
            broken: false,
        }
    }

    pub fn push(&mut self, chunk: &[u8]) {
        if self.broken {
            return;
        }
        self.buffer.extend_from_slice(chunk);
        if !self.stream {
            if self.buffer.len() > MAX_JSON_BYTES {
                self.give_up();
            }
            return;
        }
        while let Some(end) = event_end(&self.buffer) {
            let event = self.buffer.split_to(end).freeze();
            self.event(&event);
            if self.broken {
                return;
            }
        }
        if self.buffer.len() > MAX_EVENT_BYTES {
            self.give_up();
        }
    }

    fn give_up(&mut self) {
        self.broken = true;
        self.buffer = BytesMut::new();
        self.text.clear();
    }

    fn add_text(&mut self, piece: &str) {
        for c in piece.chars() {
            if self.chars >= self.max_chars {
                return;
            }
            self.text.push(c);
            self.chars += 1;
        }
    }

    fn event(&mut self, raw: &[u8]) {
        let text = String::from_utf8_lossy(raw);
        let mut data = String::new();
        for line in text.lines() {
            if let Some(value) = line.strip_prefix("data:") {
                data.push_str(value.strip_prefix(' ').unwrap_or(value));
            }
        }
        let Ok(data) = serde_json::from_str::<Value>(&data) else { return };
        let index = data.get("index").and_then(Value::as_u64).map(|i| i as usize);
        match data.get("type").and_then(Value::as_str) {
            Some("content_block_start") => {
                let is_text = data.pointer("/content_block/type").and_then(Value::as_str) == Some("text");
                if let (true, Some(index)) = (is_text, index) {
                    if !self.text.is_empty() {
                        self.add_text("\n");
                    }
                    self.text_blocks.push(index);
                    if let Some(start) = data.pointer("/content_block/text").and_then(Value::as_str) {
                        self.add_text(start);
                    }
                }
            }
            Some("content_block_delta") => {
                let is_text = data.pointer("/delta/type").and_then(Value::as_str) == Some("text_delta");
                if is_text
                    && index.is_some_and(|i| self.text_blocks.contains(&i))
                    && let Some(piece) = data.pointer("/delta/text").and_then(Value::as_str)
                {
                    self.add_text(piece);
                }
            }
            Some("message_stop") => self.complete = true,
            Some("error") => self.give_up(),
            _ => {}
        }
    }

    /// The answer's text, when the answer arrived whole.
    pub fn finish(mut self) -> Option<String> {
        if self.broken {
            return None;
        }
        if self.stream {
            return self.complete.then_some(self.text);
        }
        let message: Value = serde_json::from_slice(&self.buffer).ok()?;
        if message.get("type").and_then(Value::as_str) != Some("message") {
            return None;
        }
        let mut first = true;
        for block in message.get("content")?.as_array()? {
            if block.get("type").and_then(Value::as_str) == Some("text") {
                if !first {
                    self.add_text("\n");
                }
                first = false;
                let text = block.get("text").and_then(Value::as_str).unwrap_or("").to_owned();
                self.add_text(&text);
            }
        }
        Some(self.text)
    }
}

/// Where the first event in `buffer` ends (after its blank line).
fn event_end(buffer: &[u8]) -> Option<usize> {
    let mut i = 0;
    while i + 1 < buffer.len() {
        match (buffer[i], buffer[i + 1]) {
            (b'\n', b'\n') | (b'\r', b'\r') => return Some(i + 2),
            (b'\r', b'\n') if buffer.get(i + 2..i + 4) == Some(b"\r\n") => return Some(i + 4),
            _ => i += 1,
        }
    }
    None
}

/// The body relayed unchanged, with `done` called with the answer's text once it has arrived
/// whole (never, when it did not).
pub fn tap(body: Body, reader: Reader, done: impl FnOnce(String) + Send + 'static) -> Body {
    Body::from_stream(Tap {
        inner: body.into_data_stream(),
        reader: Some(reader),
        done: Some(Box::new(done)),
    })
}

type Done = Box<dyn FnOnce(String) + Send>;

struct Tap<S> {
    inner: S,
    reader: Option<Reader>,
    done: Option<Done>,
}

impl<S> Stream for Tap<S>
where
    S: Stream<Item = Result<Bytes, BodyError>> + Unpin,
{
    type Item = Result<Bytes, BodyError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let polled = self.inner.poll_next_unpin(cx);
        match &polled {
            Poll::Ready(Some(Ok(chunk))) => {
                if let Some(reader) = self.reader.as_mut() {
                    reader.push(chunk);
                }
            }
            // A broken body is never observed.
            Poll::Ready(Some(Err(_))) => {
                self.reader = None;
                self.done = None;
            }
            Poll::Ready(None) => self.finish(),
            Poll::Pending => {}
        }
        polled
    }
}

impl<S> Tap<S> {
    fn finish(&mut self) {
        if let (Some(reader), Some(done)) = (self.reader.take(), self.done.take())
            && let Some(text) = reader.finish()
        {
            done(text);
        }
    }
}

/// hyper stops polling a body once it has written the `content-length` it announced, and drops
/// it without asking for its end: the answer is judged then, on what arrived. A JSON answer cut
/// short does not parse and a stream without `message_stop` is incomplete, so nothing partial
/// is ever observed.
impl<S> Drop for Tap<S> {
    fn drop(&mut self) {
        self.finish();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn read(stream: bool, chunks: &[&str]) -> Option<String> {
        let mut reader = Reader::new(stream, 1000);
        for chunk in chunks {
            reader.push(chunk.as_bytes());
        }
        reader.finish()
    }

    #[test]
    fn a_streams_text_counts_only_once_message_stop_arrived() {
        let events = [
            "event: message_start\ndata: {\"type\":\"message_start\"}\n\n",
            "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hel",
            "lo\"}}\n\nevent: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"x\",\"input\":{}}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{}\"}}\n\n",
        ];
        assert_eq!(read(true, &events), None, "no message_stop: cut off");
        let mut whole = events.to_vec();
        whole.push("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n");
        assert_eq!(read(true, &whole).as_deref(), Some("Hello"));
        let mut failed = events.to_vec();
        failed.push("event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"}}\n\n");
        failed.push("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n");
        assert_eq!(read(true, &failed), None);
    }

    #[test]
    fn a_json_answers_text_blocks_are_joined_and_bounded() {
        let json = r#"{"type":"message","content":[{"type":"text","text":"One."},{"type":"tool_use","id":"t","name":"x","input":{}},{"type":"text","text":"Two."}]}"#;
        assert_eq!(read(false, &[&json[..20], &json[20..]]).as_deref(), Some("One.\nTwo."));
        assert_eq!(read(false, &[r#"{"type":"error"}"#]), None);
        let mut reader = Reader::new(false, 3);
        reader.push(json.as_bytes());
        assert_eq!(reader.finish().as_deref(), Some("One"));
    }
}
