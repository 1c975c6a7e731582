//! The rounds of a streaming request, as one event stream to the client.
//!
//! The answer's body is a state machine (`Relay`) that hyper polls: no task is spawned, so when
//! the client goes away hyper drops the body, and with it the upstream stream of the round in
//! flight (which cancels the upstream request) or the tool calls and next round memgate is
//! working on. Each upstream event is handled as it arrives:
//! - `message_start`: the first round's goes out as it came; later rounds' only add their usage;
//! - `content_block_*` of the client's blocks go out with their index renumbered to run on from
//!   0 across rounds (unchanged bytes when the index is already right); memgate's `tool_use`
//!   blocks are kept back, and every block is rebuilt from its deltas (text, thinking and its
//!   signature, tool input) for the next round's `assistant` turn; a block's second
//!   `content_block_stop` is dropped;
//! - `message_delta` and `message_stop` are held until the round's fate is known: relayed as they
//!   came when the one round used no memgate tool, else replaced by one final `message_delta`
//!   (the last round's stop reason and delta, usage summed over the rounds) and `message_stop`;
//! - `ping`, `error` and unknown events go out as they came (an `error` ends the stream).
//!
//! While memgate answers calls and waits for the next round's headers, a `ping` goes out at once
//! and then every `PING_EVERY`, so nothing between the client and memgate takes the pause for a
//! dead connection. A next round that fails becomes an `error` event: the status was sent long
//! ago.

use super::sse::{self, Event, Parser};
use super::{Call, Next, Outcome, Rounds, add_usage, calls_in, error_event, next_after};
use crate::error::ApiError;
use crate::observability::UpstreamLatency;
use crate::upstream::wire::Body;
use crate::upstream::wire::Response;
use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

/// How often memgate pings while it works between rounds.
const PING_EVERY: Duration = Duration::from_secs(5);
/// The most of a failed round's error body read for the `error` event.
const MAX_ERROR_BYTES: usize = 64 * 1024;

type UpstreamStream = Pin<Box<dyn Stream<Item = Result<Bytes, crate::upstream::wire::BodyError>> + Send>>;
type Pending = Pin<Box<dyn Future<Output = Step> + Send>>;

/// What memgate's work between rounds ends in.
enum Step {
    /// The next round's events arrive on `stream`; `body` is what was sent.
    Round { stream: UpstreamStream, body: Bytes, limited: bool },
    /// Events that end the client's stream.
    End(Vec<Bytes>),
}

pub(super) async fn run(rounds: Rounds, body: Bytes) -> Result<(Response<Body>, Outcome), ApiError> {
    let sent = Instant::now();
    let response = rounds.send(body.clone()).await?;
    let upstream_time =
        response.extensions().get::<UpstreamLatency>().map_or_else(|| sent.elapsed(), |l| l.0);
    let outcome = Outcome { rounds: 1, upstream_time };
    if !response.status().is_success() || !is_event_stream(&response) {
        rounds.finished(&outcome);
        return Ok((response, outcome));
    }
    let (parts, upstream) = response.into_parts();
    let relay = Relay::new(rounds, body, Box::pin(upstream.into_data_stream()));
    let stream = futures_util::stream::unfold(relay, |mut relay| async move {
        let chunk = relay.next_chunk().await?;
        Some((chunk, relay))
    });
    Ok((Response::from_parts(parts, Body::from_stream(stream)), outcome))
}

fn is_event_stream(response: &Response<Body>) -> bool {
    response
        .headers()
        .get(crate::upstream::wire::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"))
}

/// One content block of a round, rebuilt from its events.
struct Block {
    /// Its index in the client's stream; `None` for memgate's calls, which the client never sees.
    out: Option<usize>,
    value: Value,
    /// A tool call's input so far (`input_json_delta` fragments).
    json: String,
    stopped: bool,
}

/// One round as it arrives.
#[derive(Default)]
struct Round {
    blocks: BTreeMap<u64, Block>,
    usage: Map<String, Value>,
    /// The round's `message_delta`, and its raw events held from there on.
    delta: Option<Value>,
    held: Vec<Bytes>,
}

struct Relay {
    rounds: Rounds,
    /// The request body of the round in flight.
    body: Bytes,
    upstream: Option<UpstreamStream>,
    parser: Parser,
    out: VecDeque<Bytes>,
    round: Round,
    /// The client's next block index.
    next_index: usize,
    /// Usage of the rounds before this one.
    usage: Map<String, Value>,
    /// Upstream calls made, and rounds of calls memgate answered.
    sent: u32,
    answered: u32,
    /// A limit was answered: this round is the last.
    last: bool,
    pending: Option<Pending>,
    done: bool,
}

impl Relay {
    fn new(rounds: Rounds, body: Bytes, upstream: UpstreamStream) -> Relay {
        Relay {
            rounds,
            body,
            upstream: Some(upstream),
            parser: Parser::default(),
            out: VecDeque::new(),
            round: Round::default(),
            next_index: 0,
            usage: Map::new(),
            sent: 1,
            answered: 0,
            last: false,
            pending: None,
            done: false,
        }
    }

    /// The next bytes for the client; `None` at the end.
    async fn next_chunk(&mut self) -> Option<Result<Bytes, std::io::Error>> {
        loop {
            if let Some(bytes) = self.out.pop_front() {
                return Some(Ok(bytes));
            }
            if self.done {
                return None;
            }
            if let Some(pending) = self.pending.as_mut() {
                tokio::select! {
                    step = pending => {
                        self.pending = None;
                        self.take_step(step);
                    }
                    () = tokio::time::sleep(PING_EVERY) => self.out.push_back(ping()),
                }
                continue;
            }
            match self.parser.next_event() {
                Ok(Some(event)) => {
                    self.on_event(event);
                    continue;
                }
                Ok(None) => {}
                Err(sse::ParseError::TooLong) => {
                    self.end_with(vec![sse::encode(
                        "error",
                        &error_event("api_error", "the upstream sent an event too long to relay"),
                    )]);
                    continue;
                }
            }
            let Some(upstream) = self.upstream.as_mut() else {
                self.finish_metrics();
                self.done = true;
                continue;
            };
            match upstream.next().await {
                Some(Ok(chunk)) => self.parser.push(&chunk),
                Some(Err(_)) => {
                    self.upstream = None;
                    self.finish_metrics();
                    self.done = true;
                    return Some(Err(std::io::Error::other("the upstream broke off the answer")));
                }
                None => {
                    // Ended without `message_stop`: what came is all there is.
                    self.upstream = None;
                    self.out.extend(std::mem::take(&mut self.round.held));
                }
            }
        }
    }

    fn end_with(&mut self, events: Vec<Bytes>) {
        self.out.extend(events);
        self.rounds.release_hold();
        self.upstream = None;
        self.finish_metrics();
        self.done = true;
    }

    fn finish_metrics(&mut self) {
        if !self.done {
            self.rounds.finished(&Outcome { rounds: self.sent, upstream_time: Duration::ZERO });
        }
    }

    fn take_step(&mut self, step: Step) {
        match step {
            Step::Round { stream, body, limited } => {
                self.upstream = Some(stream);
                self.body = body;
                self.last |= limited;
                self.sent += 1;
                self.parser = Parser::default();
            }
            Step::End(events) => self.end_with(events),
        }
    }

    /// `event` with its index set to `out`: its own bytes when they already say so.
    fn indexed(event: &Event, upstream_index: u64, out: usize) -> Bytes {
        if upstream_index == out as u64 {
            return event.raw.clone();
        }
        let mut data = event.data.clone();
        data["index"] = json!(out);
        sse::encode(&event.name, &data)
    }

    fn on_event(&mut self, event: Event) {
        let index = event.data.get("index").and_then(Value::as_u64);
        match (event.kind(), index) {
            ("message_start", _) => {
                if let Some(Value::Object(usage)) = event.data.pointer("/message/usage") {
                    self.round.usage = usage.clone();
                }
                if self.sent == 1 {
                    self.out.push_back(event.raw);
                }
            }
            ("content_block_start", Some(index)) => {
                let value = event.data.get("content_block").cloned().unwrap_or(Value::Null);
                let out = (!self.rounds.is_memgate_call(&value)).then(|| {
                    self.next_index += 1;
                    self.next_index - 1
                });
                if let Some(out) = out {
                    self.out.push_back(Relay::indexed(&event, index, out));
                }
                self.round.blocks.insert(index, Block { out, value, json: String::new(), stopped: false });
            }
            ("content_block_delta", Some(index)) => match self.round.blocks.get_mut(&index) {
                Some(block) => {
                    apply_delta(block, event.data.get("delta"));
                    if let Some(out) = block.out {
                        self.out.push_back(Relay::indexed(&event, index, out));
                    }
                }
                None => self.out.push_back(event.raw),
            },
            ("content_block_stop", Some(index)) => match self.round.blocks.get_mut(&index) {
                Some(block) if block.stopped => {}
                Some(block) => {
                    block.stopped = true;
                    finish_block(block);
                    if let Some(out) = block.out {
                        self.out.push_back(Relay::indexed(&event, index, out));
                    }
                }
                None => self.out.push_back(event.raw),
            },
            ("message_delta", _) => {
                if let Some(Value::Object(usage)) = event.data.get("usage") {
                    // Cumulative: each field replaces the round's figure so far.
                    for (name, value) in usage {
                        self.round.usage.insert(name.clone(), value.clone());
                    }
                }
                self.round.delta = Some(event.data.clone());
                self.round.held.push(event.raw);
            }
            ("message_stop", _) => {
                self.round.held.push(event.raw);
                self.end_round();
            }
            ("error", _) => self.end_with(vec![event.raw]),
            _ if self.round.delta.is_some() => self.round.held.push(event.raw),
            _ => self.out.push_back(event.raw),
        }
    }

    fn end_round(&mut self) {
        let round = std::mem::take(&mut self.round);
        let content: Vec<Value> = round.blocks.into_values().map(|block| block.value).collect();
        let calls = calls_in(&self.rounds, &content);
        let client_calls = content.iter().filter(|b| self.rounds.is_client_call(b)).count();
        if self.sent == 1 && calls.is_empty() {
            // The tools went unused: the upstream's own ending.
            self.end_with(round.held);
            return;
        }
        add_usage(&mut self.usage, &round.usage);
        let stop_reason =
            round.delta.as_ref().and_then(|d| d.pointer("/delta/stop_reason")).and_then(Value::as_str);
        let next = next_after(stop_reason, calls.len(), client_calls, self.last);
        self.upstream = None;
        let rounds = self.rounds.clone();
        let answered = self.answered;
        match next {
            Next::Continue => {
                self.out.push_back(ping());
                self.answered += 1;
                let body = self.body.clone();
                self.pending = Some(Box::pin(next_round(rounds, body, content, calls, answered)));
            }
            Next::Finish(stop) => {
                let ending = final_events(round.delta, stop, &self.usage);
                if calls.is_empty() || client_calls == 0 {
                    self.end_with(ending);
                } else {
                    // Memgate's calls beside the client's: answered for their effect first.
                    self.out.push_back(ping());
                    self.pending = Some(Box::pin(async move {
                        let _ = rounds.answer(&calls, answered).await;
                        Step::End(ending)
                    }));
                }
            }
        }
    }
}

/// Answers `calls` and sends the next round; a failure becomes the client's last event.
async fn next_round(
    rounds: Rounds,
    body: Bytes,
    content: Vec<Value>,
    calls: Vec<Call>,
    answered: u32,
) -> Step {
    let (results, limited) = rounds.answer(&calls, answered).await;
    let Some(next) = rounds.next_body(&body, &content, &calls, &results) else {
        return fail("api_error", "memgate could not build the next tool round");
    };
    if let Err(err) = rounds.hold(next.len()).await {
        return fail(err.kind().status_and_type().1, err.message());
    }
    let response = match rounds.send(next.clone()).await {
        Ok(response) => response,
        Err(err) => return fail(err.kind().status_and_type().1, err.message()),
    };
    if !response.status().is_success() || !is_event_stream(&response) {
        // The upstream's own error, in an `error` event: its type and message as it gave them.
        let status = response.status();
        let bytes =
            crate::upstream::wire::to_bytes(response.into_body(), MAX_ERROR_BYTES).await.unwrap_or_default();
        let error = serde_json::from_slice::<Value>(&bytes)
            .ok()
            .filter(|e| e.get("error").is_some_and(Value::is_object))
            .unwrap_or_else(|| error_event("api_error", &format!("the upstream answered {status}")));
        return Step::End(vec![sse::encode("error", &error)]);
    }
    Step::Round { stream: Box::pin(response.into_body().into_data_stream()), body: next, limited }
}

fn fail(kind: &str, message: &str) -> Step {
    Step::End(vec![sse::encode("error", &error_event(kind, message))])
}

/// The one `message_delta` (the last round's, its stop reason replaced when `stop` says, with
/// the summed usage) and the `message_stop` that end the client's stream.
fn final_events(delta: Option<Value>, stop: Option<&str>, usage: &Map<String, Value>) -> Vec<Bytes> {
    let mut delta = delta.unwrap_or_else(
        || json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null}}),
    );
    if let Some(stop) = stop {
        delta["delta"]["stop_reason"] = json!(stop);
    }
    delta["usage"] = Value::Object(usage.clone());
    vec![sse::encode("message_delta", &delta), sse::encode("message_stop", &json!({"type": "message_stop"}))]
}

fn ping() -> Bytes {
    sse::encode("ping", &json!({"type": "ping"}))
}

/// Adds one delta to the block it belongs to. Text and thinking grow where they lie: copying
/// the text so far for each delta made a long answer quadratic in its length (40,000 deltas of
/// 10 bytes cost 0.82 s of CPU with the tools offered, 160,000 cost 8.68 s; growing in place,
/// 0.32 s and 1.17 s, against 0.22 s and 0.70 s relayed without the tools: docs/benchmarks.md,
/// "Streamed text with the tools offered").
fn apply_delta(block: &mut Block, delta: Option<&Value>) {
    let Some(delta) = delta else { return };
    let text = |field: &str| delta.get(field).and_then(Value::as_str).unwrap_or_default();
    match delta.get("type").and_then(Value::as_str) {
        Some("text_delta") => append(&mut block.value, "text", text("text")),
        Some("thinking_delta") => append(&mut block.value, "thinking", text("thinking")),
        Some("signature_delta") => block.value["signature"] = Value::String(text("signature").to_owned()),
        Some("input_json_delta") => block.json.push_str(text("partial_json")),
        Some("citations_delta") => {
            if let Some(citation) = delta.get("citation") {
                match block.value.get_mut("citations").and_then(Value::as_array_mut) {
                    Some(list) => list.push(citation.clone()),
                    None => block.value["citations"] = json!([citation]),
                }
            }
        }
        _ => {}
    }
}

/// `more` at the end of the string `value[field]`, in place (amortized: the string doubles as it
/// grows); a field that is not a string yet becomes `more`.
fn append(value: &mut Value, field: &str, more: &str) {
    match value.get_mut(field) {
        Some(Value::String(text)) => text.push_str(more),
        _ => value[field] = Value::String(more.to_owned()),
    }
}

/// A finished block: a tool call's input parsed from its fragments (`{}` when none came, as the
/// API's own start event says; an input that is not JSON stays `{}` and the call is answered as
/// one without input).
fn finish_block(block: &mut Block) {
    if block.value.is_object() && block.value.get("input").is_some() && !block.json.trim().is_empty() {
        block.value["input"] = serde_json::from_str(&block.json).unwrap_or_else(|_| json!({}));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A block's text grows where it lies: each delta adds its own bytes, and the text so far
    /// moves only when its buffer grows (a few times, by doubling), never once a delta. Copying
    /// the text so far for each delta made a long streamed answer quadratic in its length.
    #[test]
    fn a_blocks_text_is_built_in_place_from_its_deltas() {
        const PIECE: &str = "abcde";
        const DELTAS: usize = 20_000;
        for (kind, field) in [("text_delta", "text"), ("thinking_delta", "thinking")] {
            let mut block = Block {
                out: Some(0),
                value: json!({"type": field, field: ""}),
                json: String::new(),
                stopped: false,
            };
            let (mut moves, mut copied, mut at) = (0usize, 0usize, std::ptr::null::<u8>());
            for _ in 0..DELTAS {
                apply_delta(&mut block, Some(&json!({"type": kind, field: PIECE})));
                let text = block.value[field].as_str().unwrap_or_default();
                if text.as_ptr() != at {
                    moves += 1;
                    copied += text.len();
                    at = text.as_ptr();
                }
            }
            assert_eq!(block.value[field].as_str().map(str::len), Some(PIECE.len() * DELTAS));
            // Doubling moves 100,000 bytes about 17 times and copies about twice their length in
            // all; a copy per delta moves the text 20,000 times and copies a billion bytes.
            assert!(moves < 64, "{kind}: the text moved {moves} times for {DELTAS} deltas");
            assert!(copied <= 4 * PIECE.len() * DELTAS, "{kind}: {copied} bytes copied");
        }
    }
}
