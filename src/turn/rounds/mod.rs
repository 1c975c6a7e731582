//! The tool loop of one Messages turn: when memgate's tools are offered, the model's calls to
//! them are answered here and the conversation goes on upstream, round after round, until the
//! model answers; the client sees one message.
//!
//! A round is one upstream call. After each, the model's content is sorted: its `tool_use`
//! blocks that name one of memgate's tools (or `memory`, Anthropic's memory tool, when memgate
//! is its backend for the request: `tools::files`) are memgate's calls, everything else is the
//! client's.
//! Then:
//! - no memgate call: the round is the last one (with one round only, the upstream's answer goes
//!   to the client unchanged, byte for byte);
//! - memgate calls only, the model stopped for them (`stop_reason: "tool_use"`): memgate runs
//!   them (`tools::MemoryTools::execute`), appends the model's turn — exactly as it came, thinking
//!   blocks and signatures included — and one `tool_result` per call to `messages`
//!   (`body::append_round`), and sends the next round;
//! - memgate calls and client calls together: memgate runs its own (their writes happen) and
//!   returns the client's calls to the client as the last round; memgate's blocks and results are
//!   not in what the client sees, so its next request is a valid conversation without them (the
//!   model sees no result of memgate's call in it and may call again).
//!
//! Bounds: memgate answers at most `max_tool_rounds` rounds of calls within `tool_time_budget_ms`
//! (per release). A call past either is answered with a tool result saying the limit was
//! reached, and the round after it is the last: memgate's calls in it are dropped and its stop
//! reason becomes `end_turn`. Each tool call also runs under what is left of the time budget.
//!
//! What the calls may add to the next round is bounded too, since each round's body carries
//! every result so far (a 2 KB request whose model made 200 `memory_list` calls once built a
//! 41.6 MB second round, and one request took 270 MB): at most `MAX_CALLS_PER_ROUND` calls of a
//! round run (the rest are told the limit, not run), a result over `tools::MAX_RESULT_BYTES` is
//! replaced by an error that says how to ask for less, and once the results of the request
//! reach `MAX_TURN_RESULT_BYTES` later calls are told the limit and the round after is the last.
//! Each round's body is held against the body budget as it is built (`body::budget::Hold`, the
//! share the edge took for the client's body), and freed once the last round is known.
//!
//! What the client gets: `complete` (one JSON message: the content of every round without
//! memgate's blocks, the last round's stop reason, usage summed over the rounds) and `stream`
//! (one event stream: one `message_start`, block indices renumbered to run on from 0 across
//! rounds, memgate's blocks and the inner `message_delta`/`message_stop` held back, `ping`s while
//! memgate works, one final `message_delta` with the summed usage). A client that goes away
//! drops the answer, and with it whatever round is in flight (no task outlives the request).

pub mod body;
mod complete;
mod sse;
mod stream;

use crate::body::budget::Hold;
use crate::error::ApiError;
use crate::observability::metrics::Metrics;
use crate::rollout::Release;
use crate::tools::{MemoryTools, ToolCaller, ToolResult};
use crate::upstream::wire::Body;
use crate::upstream::wire::{HeaderMap, Method, Response};
use crate::upstream::{Upstream, UpstreamRequest};
use bytes::Bytes;
use serde_json::{Map, Value};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The most of memgate's calls one round runs: models ask for a handful at a time.
pub const MAX_CALLS_PER_ROUND: usize = 16;
/// The most bytes of results one request's rounds carry in all (the result that crosses it
/// still goes: a request carries at most this and one result more).
pub const MAX_TURN_RESULT_BYTES: usize = 512 * 1024;

/// What the rounds of one request share; cheap to clone into the answer's stream.
#[derive(Clone)]
pub struct Rounds {
    inner: Arc<Shared>,
}

struct Shared {
    tools: MemoryTools,
    upstream: Arc<Upstream>,
    metrics: Arc<Metrics>,
    caller: ToolCaller,
    release: Arc<Release>,
    method: Method,
    path_and_query: String,
    headers: HeaderMap,
    started: Instant,
    /// Bytes of the results answered so far, all rounds together.
    result_bytes: AtomicUsize,
    /// The request's share of the body budget; used by one round at a time.
    hold: tokio::sync::Mutex<Hold>,
}

/// One call of a memgate tool, as the model made it.
#[derive(Debug, Clone)]
pub struct Call {
    pub id: String,
    pub name: String,
    pub input: Value,
}

/// How the rounds went, for the turn's figures.
#[derive(Debug, Clone, Copy, Default)]
pub struct Outcome {
    /// Upstream calls made.
    pub rounds: u32,
    /// Time spent waiting on the upstream, all rounds together (for a streamed answer: until
    /// the first round's headers, as a turn without tools counts it).
    pub upstream_time: Duration,
}

/// Whether a round is the last, and what its stop reason becomes.
#[derive(Debug, PartialEq, Eq)]
enum Next {
    /// Answer memgate's calls and send another round.
    Continue,
    /// The client's answer ends with this round; `Some` replaces its stop reason.
    Finish(Option<&'static str>),
}

/// What follows a round with `memgate` calls and `client` calls that stopped for
/// `stop_reason`; `last` when the round came after memgate answered a limit.
fn next_after(stop_reason: Option<&str>, memgate: usize, client: usize, last: bool) -> Next {
    if memgate == 0 || client > 0 {
        Next::Finish(None)
    } else if last {
        // Memgate's calls are dropped: nothing the client sees waits for a tool any more.
        Next::Finish((stop_reason == Some("tool_use")).then_some("end_turn"))
    } else if stop_reason == Some("tool_use") {
        Next::Continue
    } else {
        // Cut short (max_tokens, a refusal): a half-written call is dropped, the reason stays.
        Next::Finish(None)
    }
}

impl Rounds {
    pub(super) fn new(
        tools: MemoryTools,
        upstream: Arc<Upstream>,
        metrics: Arc<Metrics>,
        caller: ToolCaller,
        release: Arc<Release>,
        request: UpstreamRequest,
        hold: Hold,
    ) -> Rounds {
        let UpstreamRequest { method, path_and_query, mut headers, .. } = request;
        // memgate reads every round's answer: it must come uncompressed.
        headers.remove(crate::upstream::wire::header::ACCEPT_ENCODING);
        Rounds {
            inner: Arc::new(Shared {
                tools,
                upstream,
                metrics,
                caller,
                release,
                method,
                path_and_query,
                headers,
                started: Instant::now(),
                result_bytes: AtomicUsize::new(0),
                hold: tokio::sync::Mutex::new(hold),
            }),
        }
    }

    /// Runs the rounds for `body` (the turn's, with memgate's tools offered), streaming or not.
    pub(super) async fn run(self, body: Bytes, stream: bool) -> Result<(Response<Body>, Outcome), ApiError> {
        if stream { stream::run(self, body).await } else { complete::run(self, body).await }
    }

    fn names(&self) -> &'static [&'static str] {
        crate::tools::definitions::names(self.inner.caller.level)
    }

    /// A call memgate answers: one of its own tools, or Anthropic's memory tool when memgate is
    /// its backend for this request.
    fn is_memgate_call(&self, block: &Value) -> bool {
        block.get("type").and_then(Value::as_str) == Some("tool_use")
            && block.get("name").and_then(Value::as_str).is_some_and(|name| {
                self.names().contains(&name)
                    || (self.inner.caller.file_tool() && name == crate::tools::files::TOOL_NAME)
            })
    }

    fn is_client_call(&self, block: &Value) -> bool {
        block.get("type").and_then(Value::as_str) == Some("tool_use") && !self.is_memgate_call(block)
    }

    async fn send(&self, body: Bytes) -> Result<Response<Body>, ApiError> {
        let shared = &self.inner;
        let request = UpstreamRequest {
            method: shared.method.clone(),
            path_and_query: shared.path_and_query.clone(),
            headers: shared.headers.clone(),
            body: Some(reqwest::Body::from(body)),
        };
        shared.upstream.send(request).await
    }

    /// Answers `calls`, the `done`-th round of them: run within the bounds, or each told the
    /// limit was reached. Returns the results in the calls' order and whether a limit was hit.
    async fn answer(&self, calls: &[Call], done: u32) -> (Vec<ToolResult>, bool) {
        let shared = &self.inner;
        let settings = &shared.release.tools;
        let limit = if done >= settings.max_rounds {
            Some(format!("{} rounds", settings.max_rounds))
        } else if shared.started.elapsed() >= settings.time_budget {
            Some(format!("{} ms", settings.time_budget.as_millis()))
        } else {
            None
        };
        if let Some(limit) = limit {
            let results: Vec<ToolResult> = calls.iter().map(|_| ToolResult::limit_reached(&limit)).collect();
            for call in calls {
                shared.metrics.record_tool_call(
                    &shared.release.name,
                    crate::tools::metric_name(&call.name),
                    "limit",
                );
            }
            return (results, true);
        }
        let mut results = Vec::with_capacity(calls.len());
        let mut limited = false;
        for (n, call) in calls.iter().enumerate() {
            let refused = if n >= MAX_CALLS_PER_ROUND {
                Some(format!("{MAX_CALLS_PER_ROUND} calls in one round"))
            } else if shared.result_bytes.load(Ordering::Relaxed) >= MAX_TURN_RESULT_BYTES {
                Some(format!("{} KiB of results in one request", MAX_TURN_RESULT_BYTES / 1024))
            } else {
                None
            };
            if let Some(what) = refused {
                shared.metrics.record_tool_call(
                    &shared.release.name,
                    crate::tools::metric_name(&call.name),
                    "limit",
                );
                results.push(ToolResult::limit_reached(&what));
                continue;
            }
            let left = settings.time_budget.saturating_sub(shared.started.elapsed());
            let run = shared.tools.execute(&shared.caller, &shared.release, &call.name, &call.input);
            match tokio::time::timeout(left, run).await {
                Ok(result) => {
                    shared.result_bytes.fetch_add(result.content.len(), Ordering::Relaxed);
                    results.push(result);
                }
                Err(_) => {
                    limited = true;
                    shared.metrics.record_tool_call(
                        &shared.release.name,
                        crate::tools::metric_name(&call.name),
                        "limit",
                    );
                    results
                        .push(ToolResult::limit_reached(&format!("{} ms", settings.time_budget.as_millis())));
                }
            }
        }
        // Results enough for one request: the model answers with them in the next round.
        limited |= shared.result_bytes.load(Ordering::Relaxed) >= MAX_TURN_RESULT_BYTES;
        (results, limited)
    }

    /// Holds the next round's body, `len` bytes, against the body budget while memgate keeps it
    /// (a wait, then the 529 the edge would answer, when the budget is full).
    async fn hold(&self, len: usize) -> Result<(), ApiError> {
        self.inner.hold.lock().await.cover(len as u64).await
    }

    /// The last round is known: no body will be built from this one, its share is free.
    fn release_hold(&self) {
        if let Ok(mut hold) = self.inner.hold.try_lock() {
            hold.release();
        }
    }

    /// The next round's body: `body` with the model's `assistant` turn and the answers.
    fn next_body(
        &self,
        body: &[u8],
        assistant: &[Value],
        calls: &[Call],
        results: &[ToolResult],
    ) -> Option<Bytes> {
        let answers: Vec<body::ToolAnswer<'_>> = calls
            .iter()
            .zip(results)
            .map(|(call, result)| body::ToolAnswer {
                tool_use_id: &call.id,
                content: &result.content,
                is_error: result.is_error,
            })
            .collect();
        body::append_round(body, assistant, &answers).map(Bytes::from)
    }

    fn finished(&self, outcome: &Outcome) {
        self.inner.metrics.record_tool_rounds(&self.inner.release.name, outcome.rounds);
    }
}

/// The calls of memgate's tools among `content`'s blocks, in order. An input that is not an
/// object is passed on as it is: the tool answers it with an error the model can read.
fn calls_in(rounds: &Rounds, content: &[Value]) -> Vec<Call> {
    content
        .iter()
        .filter(|block| rounds.is_memgate_call(block))
        .map(|block| Call {
            id: block.get("id").and_then(Value::as_str).unwrap_or_default().to_owned(),
            name: block.get("name").and_then(Value::as_str).unwrap_or_default().to_owned(),
            input: block.get("input").cloned().unwrap_or(Value::Null),
        })
        .collect()
}

/// Adds one round's usage to the total: numbers add up (nested objects too, as
/// `cache_creation` and `server_tool_use`), anything else is the latest round's.
fn add_usage(total: &mut Map<String, Value>, round: &Map<String, Value>) {
    for (name, value) in round {
        match (total.get_mut(name), value) {
            (Some(Value::Number(sum)), Value::Number(n)) => {
                if let (Some(a), Some(b)) = (sum.as_u64(), n.as_u64()) {
                    *sum = (a + b).into();
                } else if let Some(f) =
                    serde_json::Number::from_f64(sum.as_f64().unwrap_or(0.0) + n.as_f64().unwrap_or(0.0))
                {
                    *sum = f;
                }
            }
            (Some(Value::Object(sum)), Value::Object(part)) => add_usage(sum, part),
            _ => {
                total.insert(name.clone(), value.clone());
            }
        }
    }
}

/// An `error` event body in Anthropic's shape, for a failure after the stream began.
fn error_event(kind: &str, message: &str) -> Value {
    serde_json::json!({"type": "error", "error": {"type": kind, "message": message}})
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn usage_adds_up_numbers_and_nested_counts() {
        let mut total = Map::new();
        let rounds = [
            json!({"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 100,
                   "cache_creation": {"ephemeral_5m_input_tokens": 7}, "service_tier": "standard"}),
            json!({"input_tokens": 12, "output_tokens": 9, "cache_read_input_tokens": 110,
                   "cache_creation": {"ephemeral_5m_input_tokens": 0}, "service_tier": "priority"}),
        ];
        for round in &rounds {
            add_usage(&mut total, round.as_object().unwrap());
        }
        assert_eq!(
            Value::Object(total),
            json!({"input_tokens": 22, "output_tokens": 14, "cache_read_input_tokens": 210,
                   "cache_creation": {"ephemeral_5m_input_tokens": 7}, "service_tier": "priority"})
        );
    }

    #[test]
    fn a_round_goes_on_only_for_memgates_calls_alone() {
        let tool_use = Some("tool_use");
        assert_eq!(next_after(Some("end_turn"), 0, 0, false), Next::Finish(None));
        assert_eq!(next_after(tool_use, 0, 1, false), Next::Finish(None));
        assert_eq!(next_after(tool_use, 1, 0, false), Next::Continue);
        assert_eq!(next_after(tool_use, 2, 1, false), Next::Finish(None));
        assert_eq!(next_after(tool_use, 1, 0, true), Next::Finish(Some("end_turn")));
        assert_eq!(next_after(Some("max_tokens"), 1, 0, false), Next::Finish(None));
    }
}
