//! Placing the rendered block into the client's Messages request.
//!
//! The body is edited as text, not rebuilt. It is read as `RawValue`s that borrow from the
//! client's bytes (the few top-level fields placement needs, array elements one at a time: see
//! `scan`), the
//! one value that changes is located by its byte span, and the output is the client's bytes with
//! that one span replaced or one insertion made. Every other byte — the client's blocks, their key
//! order, number formatting, string escapes, unknown fields, even whitespace — comes out as it
//! went in, so nothing in front of the block can change what the client's cache breakpoints see.
//!
//! Where the block goes (`Placement::Auto`): caching reads the prefix as tools → system →
//! messages. If any message carries a `cache_control` breakpoint, or the request asks for
//! automatic caching with a top-level `cache_control` (a breakpoint at the end of the messages),
//! the block becomes a trailing text block of the last user turn: after every breakpoint that
//! turn or an earlier one holds, after any `tool_result` blocks, and before an assistant prefill.
//! Otherwise every breakpoint sits in `tools` or `system`, and the block becomes a trailing text
//! block of `system`, which keeps the messages themselves unchanged.

use super::scan::{for_each_element, top_fields};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// Where the release wants the block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Placement {
    /// After the client's last breakpoint: `system` unless a message holds a breakpoint.
    #[default]
    Auto,
    /// At the end of `system`; still the last user turn when a message holds a breakpoint,
    /// because the block must never go in front of a cached prefix.
    System,
    /// A trailing block of the last user turn; `system` when there is no user turn.
    LastUserTurn,
}

impl Placement {
    pub fn as_str(self) -> &'static str {
        match self {
            Placement::Auto => "auto",
            Placement::System => "system",
            Placement::LastUserTurn => "last_user_turn",
        }
    }
}

/// `Injected::placed_in` when the block went into `system`.
pub const PLACED_IN_SYSTEM: &str = "system";
/// `Injected::placed_in` when the block went into the last user turn.
pub const PLACED_IN_LAST_USER_TURN: &str = "last_user_turn";

/// The body to send upstream, and where the block went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Injected {
    pub body: Vec<u8>,
    /// [`PLACED_IN_SYSTEM`] or [`PLACED_IN_LAST_USER_TURN`].
    pub placed_in: &'static str,
}

/// A body that cannot take the block. These describe the client's own request, so they may be
/// shown to it.
#[derive(Debug, thiserror::Error)]
pub enum InjectError {
    #[error("the request body must be a JSON object: {0}")]
    Body(#[source] serde_json::Error),
    #[error("`{path}` must be {expected}")]
    Shape { path: String, expected: String },
    /// A bug in memgate, not in the request.
    #[error("internal error while placing the memory block: {0}")]
    Internal(&'static str),
}

/// The injected block: a plain text block, never with `cache_control`.
#[derive(Serialize)]
struct TextBlock<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    text: &'a str,
}

#[derive(Deserialize)]
struct MessageProbe<'a> {
    role: Option<String>,
    #[serde(borrow)]
    content: Option<&'a RawValue>,
    #[serde(borrow)]
    cache_control: Option<&'a RawValue>,
}

/// A content block, read only for what placement needs. `input` (a tool call's arguments, which
/// may legitimately hold a key named `cache_control`) and `text` are skipped, never inspected.
#[derive(Deserialize)]
struct BlockProbe<'a> {
    #[serde(borrow)]
    cache_control: Option<&'a RawValue>,
    /// Nested blocks, as in `tool_result` and `search_result`; they can carry breakpoints too.
    #[serde(borrow)]
    content: Option<&'a RawValue>,
}

/// One edit of the client's bytes: `body[start..end]` becomes `text`.
struct Splice {
    start: usize,
    end: usize,
    text: String,
}

/// Puts `block` into `body`, the client's raw JSON (already validated as an object with `model`
/// and `messages`), following `placement` and the cache rules in the module comment.
pub fn inject(body: &[u8], block: &str, placement: Placement) -> Result<Injected, InjectError> {
    let [messages, system, top_cache_control] =
        top_fields(body, ["messages", "system", "cache_control"]).map_err(InjectError::Body)?;
    let Some(messages) = messages else {
        return Err(shape("messages", "present: an array of messages"));
    };

    // `cache_control: null` is no breakpoint: the API reads null as absent.
    let mut message_breakpoint = top_cache_control.is_some_and(|raw| raw.get() != "null");
    let mut last_user: Option<(usize, Option<&RawValue>)> = None;
    for_each_element(messages, |index, raw| {
        let path = format!("messages.{index}");
        let message: MessageProbe = parse(raw, &path, "an object with `role` and `content`")?;
        if message.role.as_deref() == Some("user") {
            last_user = Some((index, message.content));
        }
        if !message_breakpoint {
            message_breakpoint = message.cache_control.is_some()
                || match message.content {
                    Some(content) => blocks_have_breakpoint(content, &format!("{path}.content"))?,
                    None => false,
                };
        }
        Ok(())
    })
    .map_err(|err| shape("messages", &format!("an array of messages ({err})")))??;

    let want_turn = match placement {
        Placement::Auto | Placement::System => message_breakpoint,
        Placement::LastUserTurn => true,
    };
    let block_json = serde_json::to_string(&TextBlock { kind: "text", text: block })
        .map_err(|_| InjectError::Internal("block"))?;
    let (splice, placed_in) = match last_user {
        Some((index, content)) if want_turn => {
            let path = format!("messages.{index}.content");
            let Some(content) = content else {
                return Err(shape(&path, "present in the last user turn"));
            };
            (append_block(body, content, &path, &block_json)?, PLACED_IN_LAST_USER_TURN)
        }
        // No user turn to take the block: `system` is the only place left, even in front of a
        // message breakpoint.
        _ => (append_to_system(body, system, &block_json)?, PLACED_IN_SYSTEM),
    };

    let mut out = Vec::with_capacity(body.len() + splice.text.len());
    out.extend_from_slice(&body[..splice.start]);
    out.extend_from_slice(splice.text.as_bytes());
    out.extend_from_slice(&body[splice.end..]);
    Ok(Injected { body: out, placed_in })
}

/// Whether a message's `content` (or a block's nested `content`) holds a breakpoint. A parse, not
/// a text search: the text `"cache_control":` can appear legitimately as a key inside a tool
/// call's `input`, and that is no breakpoint.
fn blocks_have_breakpoint(content: &RawValue, path: &str) -> Result<bool, InjectError> {
    if !content.get().starts_with('[') {
        return Ok(false);
    }
    let mut found = false;
    for_each_element(content, |index, raw| {
        if found || !raw.get().starts_with('{') {
            return Ok(());
        }
        let path = format!("{path}.{index}");
        let block: BlockProbe = parse(raw, &path, "a content block object")?;
        found = block.cache_control.is_some()
            || match block.content {
                Some(nested) => blocks_have_breakpoint(nested, &format!("{path}.content"))?,
                None => false,
            };
        Ok(())
    })
    .map_err(|err| shape(path, &format!("a string or an array of content blocks ({err})")))??;
    Ok(found)
}

fn append_to_system(body: &[u8], system: Option<&RawValue>, block_json: &str) -> Result<Splice, InjectError> {
    match system {
        Some(raw) if raw.get() != "null" => append_block(body, raw, "system", block_json),
        Some(raw) => {
            let (start, end) = span(body, raw)?;
            Ok(Splice { start, end, text: format!("[{block_json}]") })
        }
        None => {
            // The new key goes first; the order of top-level keys means nothing to the cache.
            let Some(open) = body.iter().position(|byte| !is_json_whitespace(*byte)) else {
                return Err(InjectError::Internal("empty body"));
            };
            let at = open + 1;
            Ok(Splice { start: at, end: at, text: format!("\"system\":[{block_json}],") })
        }
    }
}

/// Appends the block to a `system` or `content` value: an array gets it as its last element; a
/// string becomes `[{"type":"text","text":<the same string, same bytes>}, block]`, or `[block]`
/// when empty (the API refuses empty text blocks).
fn append_block(body: &[u8], raw: &RawValue, path: &str, block_json: &str) -> Result<Splice, InjectError> {
    let (start, end) = span(body, raw)?;
    let text = raw.get();
    if text.starts_with('"') {
        let replacement = if text == "\"\"" {
            format!("[{block_json}]")
        } else {
            format!("[{{\"type\":\"text\",\"text\":{text}}},{block_json}]")
        };
        return Ok(Splice { start, end, text: replacement });
    }
    if text.starts_with('[') {
        // A `RawValue` is valid JSON that ends exactly at its `]`, so the block goes right before
        // that byte, after a comma unless the array holds only whitespace.
        let inner = &text[1..text.len() - 1];
        let empty = inner.bytes().all(is_json_whitespace);
        let insert = if empty { block_json.to_owned() } else { format!(",{block_json}") };
        return Ok(Splice { start: end - 1, end: end - 1, text: insert });
    }
    Err(shape(path, "a string or an array of text blocks"))
}

/// The byte range of `raw` inside `body`. Every `RawValue` here borrows from `body` (serde_json
/// hands out sub-slices of the input), so the range follows from the pointers; it is checked, not
/// trusted.
fn span(body: &[u8], raw: &RawValue) -> Result<(usize, usize), InjectError> {
    let text = raw.get();
    let start = (text.as_ptr() as usize)
        .checked_sub(body.as_ptr() as usize)
        .ok_or(InjectError::Internal("value outside the body"))?;
    let end = start + text.len();
    if body.get(start..end) != Some(text.as_bytes()) {
        return Err(InjectError::Internal("value outside the body"));
    }
    Ok((start, end))
}

fn parse<'a, T: Deserialize<'a>>(raw: &'a RawValue, path: &str, expected: &str) -> Result<T, InjectError> {
    serde_json::from_str(raw.get()).map_err(|err| shape(path, &format!("{expected} ({err})")))
}

fn shape(path: &str, expected: &str) -> InjectError {
    InjectError::Shape { path: path.to_owned(), expected: expected.to_owned() }
}

fn is_json_whitespace(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\n' | b'\r')
}
