//! Paced response bodies: a script of `Step`s played with real delays.
//!
//! The body stream owns the script and (for SSE answers) the `StreamGuard` of its recording
//! entry. hyper polls the stream for each chunk and drops it when the response ends or the
//! connection fails, so the guard sees every event handed over and, through its `Drop`, a client
//! that went away. `Step::Abort` yields an `Err`, on which hyper cuts the connection without a
//! proper end (no chunk terminator).

use std::collections::VecDeque;
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::MockArgs;
use super::answer::{self, Answer, Event};
use super::record::{Outcome, StreamGuard};
use super::reply::wire_json;

/// Shortest gap between the deltas of `mock-long-stream`, so that a closed connection is noticed
/// on the next write within this delay.
const LONG_STREAM_MIN_INTERVAL: Duration = Duration::from_millis(50);
/// How long `mock-long-stream` goes on at most.
const LONG_STREAM_TOTAL: Duration = Duration::from_secs(600);
/// Pause before a cut, so hyper has flushed what came before it to the socket.
const CUT_DELAY: Duration = Duration::from_millis(50);

pub(super) enum Step {
    /// One SSE event, counted in the recording.
    Event(Event),
    Sleep(Duration),
    /// Bytes that are not an SSE event (the half body of a cut JSON answer).
    Raw(Bytes),
    /// `mock-long-stream`: a text delta every `interval` until `total` has passed or the server
    /// shuts down.
    Ticks {
        interval: Duration,
        total: Duration,
    },
    /// The `message_delta` after `Ticks`, whose usage counts the ticks sent.
    TicksDelta,
    /// Cut the connection.
    Abort,
}

fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

/// The full event sequence of `answer`, with `--ttft-ms` before the first block and
/// `--delta-interval-ms` between deltas; `pause` (for `mock-pause`) right after `message_start`.
pub(super) fn normal_script(answer: &Answer, args: &MockArgs, pause: Option<Duration>) -> Vec<Step> {
    let mut steps = vec![Step::Event(answer.message_start())];
    steps.extend(pause.map(Step::Sleep));
    steps.push(Step::Event(answer::ping()));
    steps.push(Step::Sleep(ms(args.ttft_ms)));
    let mut first_delta = true;
    for (start, deltas, stop) in answer.blocks(args.deltas) {
        steps.push(Step::Event(start));
        for delta in deltas {
            if !first_delta {
                steps.push(Step::Sleep(ms(args.delta_interval_ms)));
            }
            first_delta = false;
            steps.push(Step::Event(delta));
        }
        steps.push(Step::Event(stop));
    }
    steps.push(Step::Event(answer.message_delta()));
    steps.push(Step::Event(answer::message_stop()));
    steps
}

/// `mock-error-mid-stream`: `message_start`, `content_block_start`, one delta, then an
/// `overloaded_error` event and a proper end.
pub(super) fn error_mid_stream_script(answer: &Answer, args: &MockArgs, error: Event) -> Vec<Step> {
    let (start, first_delta) = first_text_delta(answer, args);
    vec![
        Step::Event(answer.message_start()),
        Step::Event(start),
        Step::Sleep(ms(args.ttft_ms)),
        Step::Event(first_delta),
        Step::Sleep(ms(args.delta_interval_ms)),
        Step::Event(error),
    ]
}

/// `mock-drop-connection`: `message_start`, one delta, then the connection is cut.
pub(super) fn drop_connection_script(answer: &Answer, args: &MockArgs) -> Vec<Step> {
    let (_, first_delta) = first_text_delta(answer, args);
    vec![
        Step::Event(answer.message_start()),
        Step::Sleep(ms(args.ttft_ms)),
        Step::Event(first_delta),
        Step::Sleep(ms(args.delta_interval_ms).max(CUT_DELAY)),
        Step::Abort,
    ]
}

/// Non-streaming `mock-drop-connection`: half of the JSON body, then the cut.
pub(super) fn half_body_script(body: &[u8]) -> Vec<Step> {
    vec![Step::Raw(Bytes::copy_from_slice(&body[..body.len() / 2])), Step::Sleep(CUT_DELAY), Step::Abort]
}

/// `mock-long-stream`: deltas every max(`--delta-interval-ms`, 50 ms) for up to 10 minutes.
pub(super) fn long_stream_script(answer: &Answer, args: &MockArgs) -> Vec<Step> {
    vec![
        Step::Event(answer.message_start()),
        Step::Event(answer::ping()),
        Step::Event(answer::block_start(0, serde_json::json!({ "type": "text", "text": "" }))),
        Step::Sleep(ms(args.ttft_ms)),
        Step::Ticks {
            interval: ms(args.delta_interval_ms).max(LONG_STREAM_MIN_INTERVAL),
            total: LONG_STREAM_TOTAL,
        },
        Step::Event(answer::block_stop(0)),
        Step::TicksDelta,
        Step::Event(answer::message_stop()),
    ]
}

fn first_text_delta(answer: &Answer, args: &MockArgs) -> (Event, Event) {
    let mut blocks = answer.blocks(args.deltas).into_iter();
    match blocks.next() {
        Some((start, deltas, _)) => {
            let delta = deltas.into_iter().next().unwrap_or_else(|| answer::text_delta(0, &answer.text));
            (start, delta)
        }
        None => (
            answer::block_start(0, serde_json::json!({ "type": "text", "text": "" })),
            answer::text_delta(0, &answer.text),
        ),
    }
}

/// A response body that plays `steps`. `guard` is `Some` for SSE answers.
pub(super) fn body(steps: Vec<Step>, guard: Option<StreamGuard>, shutdown: CancellationToken) -> Body {
    let player = Player { steps: steps.into(), guard, shutdown, ticks: 0, ticks_started: None };
    Body::from_stream(futures_util::stream::unfold(player, |mut player| async move {
        let chunk = player.next_chunk().await?;
        Some((chunk, player))
    }))
}

struct Player {
    steps: VecDeque<Step>,
    guard: Option<StreamGuard>,
    shutdown: CancellationToken,
    ticks: u64,
    ticks_started: Option<Instant>,
}

impl Player {
    /// The next chunk, after the delays due before it; `None` at the end of the script.
    async fn next_chunk(&mut self) -> Option<Result<Bytes, std::io::Error>> {
        loop {
            let Some(step) = self.steps.pop_front() else {
                if let Some(guard) = &self.guard {
                    guard.finish(Outcome::Completed);
                }
                return None;
            };
            match step {
                Step::Event(event) => return Some(Ok(self.send(event))),
                Step::Raw(bytes) => return Some(Ok(bytes)),
                Step::Sleep(delay) => {
                    if !delay.is_zero() {
                        tokio::time::sleep(delay).await;
                    }
                }
                Step::Ticks { interval, total } => {
                    let started = *self.ticks_started.get_or_insert_with(Instant::now);
                    if started.elapsed() >= total || self.shutdown.is_cancelled() {
                        continue;
                    }
                    tokio::select! {
                        () = tokio::time::sleep(interval) => {}
                        () = self.shutdown.cancelled() => continue,
                    }
                    self.steps.push_front(Step::Ticks { interval, total });
                    self.ticks += 1;
                    let delta = answer::text_delta(0, &format!("tick {} ", self.ticks));
                    return Some(Ok(self.send(delta)));
                }
                Step::TicksDelta => {
                    let event = (
                        "message_delta",
                        serde_json::json!({
                            "type": "message_delta",
                            "delta": { "stop_reason": "end_turn", "stop_sequence": null },
                            "usage": { "output_tokens": self.ticks * 2 },
                        }),
                    );
                    return Some(Ok(self.send(event)));
                }
                Step::Abort => {
                    self.steps.clear();
                    if let Some(guard) = &self.guard {
                        guard.finish(Outcome::Aborted);
                    }
                    return Some(Err(std::io::Error::new(
                        std::io::ErrorKind::ConnectionAborted,
                        "mock-upstream cut the connection on purpose",
                    )));
                }
            }
        }
    }

    fn send(&self, (name, data): Event) -> Bytes {
        if let Some(guard) = &self.guard {
            guard.event_sent();
        }
        Bytes::from(format!("event: {name}\ndata: {}\n\n", wire_json(&data)))
    }
}
