//! The recording of every `/v1/` request, served at `/_mock/requests`.
//!
//! Each entry is an `Arc<RecordEntry>` kept in arrival order. A streamed answer attaches a
//! `StreamProgress` to its entry and hands a `StreamGuard` to the body stream: the guard counts
//! the events as they are handed to hyper and settles the outcome. hyper drops the body when the
//! connection fails (the client went away), so a guard dropped while the outcome is still
//! `pending` means `client_closed`. Updates go through atomics on the entry itself, so a guard
//! keeps working (unseen) after `DELETE /_mock/requests` forgot its entry.
//!
//! With `--no-record` the entry is still built (the stream guard and the handlers read it) but
//! not kept: only the count grows. A load test's mock then holds no memory per request, where a
//! recording one grows by ~2 GB over a 10-minute soak at 1,000 requests/s.

use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use axum::extract::{FromRequest, Request};
use axum::response::Response;
use bytes::Bytes;
use serde_json::{Map, Value, json};

use super::MockState;
use super::reply::ApiError;

/// Anthropic's request size limit for Messages.
const MAX_BODY_BYTES: usize = 32 * 1024 * 1024;

/// The shared, ordered list of recorded requests and the sequence counter.
#[derive(Clone)]
pub(super) struct Recorder {
    inner: Arc<Mutex<RecorderInner>>,
    /// False with `--no-record`: requests are counted, not kept.
    keep: bool,
}

#[derive(Default)]
struct RecorderInner {
    last_seq: u64,
    /// `/v1/` requests received since the start or the last `forget_all`, kept or not.
    count: u64,
    entries: Vec<Arc<RecordEntry>>,
}

impl Recorder {
    /// A recorder that keeps every entry (`keep`) or only counts them.
    pub(super) fn new(keep: bool) -> Self {
        Recorder { inner: Arc::default(), keep }
    }

    fn lock(&self) -> MutexGuard<'_, RecorderInner> {
        // A panic while holding this lock cannot leave the list half-updated, so a poisoned
        // lock is still usable.
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A sequence number for an answer that is not recorded (outside `/v1/`).
    pub(super) fn next_seq(&self) -> u64 {
        let mut inner = self.lock();
        inner.last_seq += 1;
        inner.last_seq
    }

    fn record(&self, build: impl FnOnce(u64) -> RecordEntry) -> Arc<RecordEntry> {
        let mut inner = self.lock();
        inner.last_seq += 1;
        inner.count += 1;
        let entry = Arc::new(build(inner.last_seq));
        if self.keep {
            inner.entries.push(Arc::clone(&entry));
        }
        entry
    }

    /// `{"requests": [...], "count": N}`, the entries in arrival order (none with
    /// `--no-record`) and how many were received.
    pub(super) fn to_json(&self) -> Value {
        let inner = self.lock();
        let entries: Vec<Value> = inner.entries.iter().map(|e| e.to_json()).collect();
        json!({ "requests": entries, "count": inner.count })
    }

    /// Forgets every entry and resets the count; the sequence goes on, so request ids stay
    /// unique.
    pub(super) fn forget_all(&self) {
        let mut inner = self.lock();
        inner.entries.clear();
        inner.count = 0;
    }
}

/// One recorded request.
pub(super) struct RecordEntry {
    seq: u64,
    method: String,
    path: String,
    query: Option<String>,
    headers: Map<String, Value>,
    body: Value,
    body_bytes: usize,
    stream: OnceLock<Arc<StreamProgress>>,
}

impl RecordEntry {
    fn to_json(&self) -> Value {
        let stream = match self.stream.get() {
            Some(progress) => json!({
                "events_sent": progress.events_sent.load(Ordering::SeqCst),
                "outcome": progress.outcome().as_str(),
            }),
            None => Value::Null,
        };
        json!({
            "seq": self.seq,
            "method": self.method,
            "path": self.path,
            "query": self.query,
            "headers": self.headers,
            "body": self.body,
            "body_bytes": self.body_bytes,
            "stream": stream,
        })
    }
}

/// How a streamed answer ended, as shown in the recording.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Outcome {
    Pending = 0,
    Completed = 1,
    ClientClosed = 2,
    Aborted = 3,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Outcome::Pending => "pending",
            Outcome::Completed => "completed",
            Outcome::ClientClosed => "client_closed",
            Outcome::Aborted => "aborted",
        }
    }

    fn from_u8(value: u8) -> Self {
        match value {
            1 => Outcome::Completed,
            2 => Outcome::ClientClosed,
            3 => Outcome::Aborted,
            _ => Outcome::Pending,
        }
    }
}

struct StreamProgress {
    events_sent: AtomicU64,
    outcome: AtomicU8,
}

impl StreamProgress {
    fn outcome(&self) -> Outcome {
        Outcome::from_u8(self.outcome.load(Ordering::SeqCst))
    }

    /// Settles a pending outcome; the first settlement wins.
    fn settle(&self, outcome: Outcome) {
        let _ = self.outcome.compare_exchange(
            Outcome::Pending as u8,
            outcome as u8,
            Ordering::SeqCst,
            Ordering::SeqCst,
        );
    }
}

/// Owned by a streamed body: counts its events and settles its outcome (see the module comment).
pub(super) struct StreamGuard {
    progress: Arc<StreamProgress>,
}

impl StreamGuard {
    pub(super) fn event_sent(&self) {
        self.progress.events_sent.fetch_add(1, Ordering::SeqCst);
    }

    pub(super) fn finish(&self, outcome: Outcome) {
        self.progress.settle(outcome);
    }
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.progress.settle(Outcome::ClientClosed);
    }
}

/// A `/v1/` request, already recorded: the extractor every API handler takes.
pub(super) struct Recorded {
    pub(super) seq: u64,
    pub(super) method: String,
    pub(super) path: String,
    pub(super) query: Option<String>,
    pub(super) body_bytes: usize,
    /// The parsed body, or `None` when it was empty or not JSON.
    pub(super) json: Option<Value>,
    entry: Arc<RecordEntry>,
}

impl Recorded {
    /// Marks the answer as a stream and returns the guard its body must own.
    pub(super) fn start_stream(&self) -> StreamGuard {
        let progress = self.entry.stream.get_or_init(|| {
            Arc::new(StreamProgress {
                events_sent: AtomicU64::new(0),
                outcome: AtomicU8::new(Outcome::Pending as u8),
            })
        });
        StreamGuard { progress: Arc::clone(progress) }
    }
}

impl FromRequest<MockState> for Recorded {
    type Rejection = Response;

    async fn from_request(req: Request, state: &MockState) -> Result<Self, Self::Rejection> {
        let (parts, body) = req.into_parts();
        let read = axum::body::to_bytes(body, MAX_BODY_BYTES).await;
        let raw = read.as_ref().map_or(Bytes::new(), Bytes::clone);
        let json: Option<Value> = if raw.len() <= FULLY_PARSED_BYTES {
            serde_json::from_slice(&raw).ok()
        } else {
            messages_fields(&raw)
        };
        let method = parts.method.as_str().to_owned();
        let path = parts.uri.path().to_owned();
        let query = parts.uri.query().map(str::to_owned);
        let entry = state.recorder.record(|seq| RecordEntry {
            seq,
            method: method.clone(),
            path: path.clone(),
            query: query.clone(),
            headers: headers_json(&parts.headers),
            body: json.clone().unwrap_or(Value::Null),
            body_bytes: raw.len(),
            stream: OnceLock::new(),
        });
        let args = &state.args;
        if !args.api_keys.is_empty() {
            let presented = parts
                .headers
                .get("x-api-key")
                .and_then(|v| v.to_str().ok())
                .or_else(|| {
                    parts
                        .headers
                        .get("authorization")
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.strip_prefix("Bearer "))
                })
                .unwrap_or("");
            if !args.api_keys.iter().any(|key| key == presented) {
                return Err(ApiError::Authentication.into_response_with(entry.seq));
            }
        }
        if let Err(err) = read {
            let too_large = std::error::Error::source(&err)
                .is_some_and(|source| source.is::<http_body_util::LengthLimitError>());
            let error = if too_large {
                ApiError::TooLarge
            } else {
                ApiError::InvalidRequest("could not read the request body".to_owned())
            };
            return Err(error.into_response_with(entry.seq));
        }
        Ok(Recorded { seq: entry.seq, method, path, query, body_bytes: raw.len(), json, entry })
    }
}

/// Lower-cased names (as `http` stores them), several values joined with `, `.
fn headers_json(headers: &http::HeaderMap) -> Map<String, Value> {
    let mut out = Map::new();
    for name in headers.keys() {
        let joined = headers
            .get_all(name)
            .iter()
            .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned())
            .collect::<Vec<_>>()
            .join(", ");
        out.insert(name.as_str().to_owned(), Value::String(joined));
    }
    out
}

/// Bodies up to this size are parsed and kept whole; larger ones only for the fields a Messages
/// answer reads (`messages_fields`), so that a load of 32 MB bodies padded with other fields does
/// not cost the mock gigabytes of `Value`s.
const FULLY_PARSED_BYTES: usize = 4 * 1024 * 1024;

/// The Messages fields of a large body, every other top-level field skipped unparsed.
fn messages_fields(raw: &[u8]) -> Option<Value> {
    #[derive(serde::Deserialize)]
    struct Fields {
        model: Option<Value>,
        max_tokens: Option<Value>,
        stream: Option<Value>,
        system: Option<Value>,
        messages: Option<Value>,
        tools: Option<Value>,
    }
    let fields: Fields = serde_json::from_slice(raw).ok()?;
    let mut out = Map::new();
    for (name, value) in [
        ("model", fields.model),
        ("max_tokens", fields.max_tokens),
        ("stream", fields.stream),
        ("system", fields.system),
        ("messages", fields.messages),
        ("tools", fields.tools),
    ] {
        if let Some(value) = value {
            out.insert(name.to_owned(), value);
        }
    }
    Some(Value::Object(out))
}
