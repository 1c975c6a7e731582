//! The query: what memory is matched against — the person's words, not the harness around them.
//!
//! Agent harnesses put their own text into the same user turn as the person's question: Claude
//! Code sends `<system-reminder>` blocks (CLAUDE.md contents, the date, file notes) in front of a
//! one-line question, then lists its agents and skills in a `system`-role message after it; a tool
//! loop's later user turns hold only `tool_result` blocks. Embedding all of that matches the
//! harness, not the question (tests/data/clients/ holds real captures). So, for the last user turn:
//!
//! 1. only `user` messages count, and in them only text (`text` blocks, or a string content):
//!    tool results, images, documents and other blocks are left out;
//! 2. blocks wrapped in a harness tag (`QueryRule::harness_tags`, `<system-reminder>` and the
//!    like) are cut out of the text, and tags that wrap the person's own words
//!    (`QueryRule::unwrap_tags`, the arguments of a slash command) lose only their tags;
//! 3. a turn left with no words (a tool loop's `tool_result` turn) is passed over for the user
//!    turn before it, so every step of a loop matches the person's last question;
//! 4. a short follow-up (fewer than `QueryRule::follow_up_words` words: "and for the K9?") is
//!    matched together with the person's previous words, which say what it is about.
//!
//! The rule is part of a release (`[releases.<name>.query]`), so a canary can try another; the
//! extracted text and where it came from show in `explain` and in the caller's trace.

mod text;

use crate::inject::scan::{for_each_element, top_fields};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use text::person_text;

/// Blocks of harness text: cut out with their contents. Tag names as the clients write them
/// (Claude Code 2.x: tests/data/clients/README.md).
pub const DEFAULT_HARNESS_TAGS: &[&str] = &[
    "system-reminder",
    "command-name",
    "command-message",
    "local-command-stdout",
    "local-command-stderr",
    "bash-input",
    "bash-stdout",
    "bash-stderr",
    "user-prompt-submit-hook",
    "task-notification",
    "teammate-message",
    "persisted-output",
    "new-diagnostics",
    "tool_use_error",
];

/// Tags around the person's own words: the tags go, the words stay.
pub const DEFAULT_UNWRAP_TAGS: &[&str] = &["command-args"];

/// A last turn with fewer words than this also brings the person's previous words.
pub const DEFAULT_FOLLOW_UP_WORDS: usize = 8;

/// The longest query, in characters; the embedding model reads about this much anyway.
pub const MAX_QUERY_CHARS: usize = 2000;

/// How a release finds the person's words.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QueryRule {
    pub harness_tags: Vec<String>,
    pub unwrap_tags: Vec<String>,
    /// 0: a follow-up never brings the previous words.
    pub follow_up_words: usize,
}

impl Default for QueryRule {
    fn default() -> Self {
        QueryRule {
            harness_tags: DEFAULT_HARNESS_TAGS.iter().map(|t| (*t).to_owned()).collect(),
            unwrap_tags: DEFAULT_UNWRAP_TAGS.iter().map(|t| (*t).to_owned()).collect(),
            follow_up_words: DEFAULT_FOLLOW_UP_WORDS,
        }
    }
}

/// The text memory is matched against, and where it came from (for `explain` and traces).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Query {
    pub text: String,
    /// JSON paths of the blocks the words came from, e.g. `messages.0.content.1`.
    pub from: Vec<String>,
    /// Whether the previous user words were added to a short follow-up.
    pub follow_up: bool,
    /// What was left out of the turns read: harness blocks, tool results, other blocks.
    pub left_out: LeftOut,
    /// The newest user turn's words alone (without a follow-up's previous words), and that
    /// turn's index in `messages`: what triggers read, so one threatening message does not fire
    /// again on every short reply after it, and what names the turn across a client's retries.
    #[serde(skip)]
    pub newest: String,
    #[serde(skip)]
    pub turn: usize,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct LeftOut {
    pub harness_blocks: usize,
    pub tool_results: usize,
    pub other_blocks: usize,
}

/// The person's words in one user turn.
#[derive(Debug, Default)]
struct Words {
    text: String,
    from: Vec<String>,
    left_out: LeftOut,
    /// The message's index in `messages`.
    turn: usize,
}

#[derive(Deserialize)]
struct MessageProbe<'a> {
    role: Option<&'a str>,
    #[serde(borrow)]
    content: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct BlockProbe {
    #[serde(rename = "type")]
    kind: Option<String>,
    text: Option<String>,
}

/// The person's words in a Messages request `body`, by `rule`; `None` when no user turn has any.
/// Reads the body without copying it (`inject::scan`), holding two user turns at most.
pub fn extract(body: &[u8], rule: &QueryRule) -> Option<Query> {
    let [messages] = top_fields(body, ["messages"]).ok()?;
    // The last two user turns with words, oldest first.
    let mut last: Vec<Words> = Vec::with_capacity(2);
    let mut left_out = LeftOut::default();
    for_each_element(messages?, |index, raw| {
        if let Some(words) = user_words(raw, index, rule) {
            left_out.harness_blocks += words.left_out.harness_blocks;
            left_out.tool_results += words.left_out.tool_results;
            left_out.other_blocks += words.left_out.other_blocks;
            if !words.text.is_empty() {
                if last.len() == 2 {
                    last.remove(0);
                }
                last.push(words);
            }
        }
        Ok::<(), ()>(())
    })
    .ok()?
    .ok()?;
    let newest = last.pop()?;
    let turn = newest.turn;
    let newest_text: String = newest.text.chars().take(MAX_QUERY_CHARS).collect();
    let follow_up = rule.follow_up_words > 0 && word_count(&newest.text) < rule.follow_up_words;
    let (text, from, follow_up) = match (follow_up, last.pop()) {
        (true, Some(previous)) => {
            let text = format!("{}\n{}", previous.text, newest.text);
            (text, [previous.from, newest.from].concat(), true)
        }
        _ => (newest.text, newest.from, false),
    };
    let text: String = text.chars().take(MAX_QUERY_CHARS).collect();
    Some(Query { text, from, follow_up, left_out, newest: newest_text, turn })
}

/// The person's words of the request's newest turn, for observation: only when the last message
/// of `body` is a user turn with words of its own. A tool loop's `tool_result` turn, or a body
/// that ends with the assistant's prefill, says nothing new, so it gives `None` (the words were
/// observed when they were new).
pub fn newest_words(body: &[u8], rule: &QueryRule) -> Option<String> {
    let [messages] = top_fields(body, ["messages"]).ok()?;
    let mut last: Option<(usize, Option<Words>)> = None;
    for_each_element(messages?, |index, raw| {
        last = Some((index, user_words(raw, index, rule)));
        Ok::<(), ()>(())
    })
    .ok()?
    .ok()?;
    let (_, words) = last?;
    let words = words?;
    (!words.text.is_empty()).then_some(words.text)
}

/// A user message's words; `None` for other roles and malformed messages.
fn user_words(raw: &RawValue, index: usize, rule: &QueryRule) -> Option<Words> {
    let message: MessageProbe = serde_json::from_str(raw.get()).ok()?;
    if message.role != Some("user") {
        return None;
    }
    let content = message.content?;
    let mut words = Words { turn: index, ..Words::default() };
    let mut pieces: Vec<String> = Vec::new();
    if content.get().starts_with('"') {
        let text: String = serde_json::from_str(content.get()).ok()?;
        let (kept, cut) = person_text(&text, rule);
        words.left_out.harness_blocks += cut;
        if !kept.is_empty() {
            pieces.push(kept);
            words.from.push(format!("messages.{index}.content"));
        }
    } else {
        for_each_element(content, |block_index, block| {
            match serde_json::from_str::<BlockProbe>(block.get()) {
                Ok(BlockProbe { kind: Some(kind), text: Some(text) }) if kind == "text" => {
                    let (kept, cut) = person_text(&text, rule);
                    words.left_out.harness_blocks += cut;
                    if !kept.is_empty() {
                        pieces.push(kept);
                        words.from.push(format!("messages.{index}.content.{block_index}"));
                    }
                }
                Ok(BlockProbe { kind: Some(kind), .. }) if kind == "tool_result" => {
                    words.left_out.tool_results += 1;
                }
                _ => words.left_out.other_blocks += 1,
            }
            Ok::<(), ()>(())
        })
        .ok()?
        .ok()?;
    }
    words.text = pieces.join("\n");
    Some(words)
}

/// Words, for the follow-up rule: whitespace-separated tokens, with each two CJK characters
/// counted as one word (Chinese and Japanese write no spaces).
fn word_count(text: &str) -> usize {
    let spaced = text.split_whitespace().count();
    let cjk = text
        .chars()
        .filter(|c| matches!(*c, '\u{3040}'..='\u{30ff}' | '\u{3400}'..='\u{4dbf}' | '\u{4e00}'..='\u{9fff}'))
        .count();
    spaced + cjk / 2
}

#[cfg(test)]
mod tests;
