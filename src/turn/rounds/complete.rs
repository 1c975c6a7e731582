//! The rounds of a non-streaming request: each round's answer read whole, the client's answer
//! one JSON message.

use super::{Next, Outcome, Rounds, add_usage, calls_in, next_after};
use crate::error::{ApiError, ErrorKind};
use crate::upstream::wire::Body;
use crate::upstream::wire::Response;
use bytes::Bytes;
use serde_json::{Map, Value};
use std::time::Instant;

/// The largest round answer memgate reads (a full 64k-token answer is well under a megabyte).
const MAX_ANSWER_BYTES: usize = 32 * 1024 * 1024;

pub(super) async fn run(rounds: Rounds, mut body: Bytes) -> Result<(Response<Body>, Outcome), ApiError> {
    let mut outcome = Outcome::default();
    let mut first: Option<(crate::upstream::wire::ResponseParts, Value)> = None;
    let mut content: Vec<Value> = Vec::new();
    let mut usage = Map::new();
    let mut answered = 0u32;
    let mut last = false;
    loop {
        let sent = Instant::now();
        let response = rounds.send(body.clone()).await?;
        outcome.rounds += 1;
        let (parts, answer) = response.into_parts();
        let bytes = crate::upstream::wire::to_bytes(answer, MAX_ANSWER_BYTES).await.map_err(|_| {
            ApiError::new(ErrorKind::UpstreamUnreachable, "the upstream broke off its answer")
        })?;
        // Reading the answer is the upstream's time too: the model writes it meanwhile.
        outcome.upstream_time += sent.elapsed();
        let message: Option<Value> = parts
            .status
            .is_success()
            .then(|| serde_json::from_slice::<Value>(&bytes).ok())
            .flatten()
            .filter(|m| m.get("content").is_some_and(Value::is_array));
        let Some(mut message) = message else {
            // An error, or an answer memgate cannot read: the client gets it as it came (after
            // a first round, the earlier rounds' content is lost with it: the request failed).
            rounds.finished(&outcome);
            return Ok((Response::from_parts(parts, Body::from(bytes)), outcome));
        };
        let round_content: Vec<Value> = message["content"].as_array().cloned().unwrap_or_default();
        let calls = calls_in(&rounds, &round_content);
        let client_calls = round_content.iter().filter(|b| rounds.is_client_call(b)).count();
        if outcome.rounds == 1 && calls.is_empty() {
            // The tools went unused: the upstream's answer, unchanged.
            rounds.finished(&outcome);
            return Ok((Response::from_parts(parts, Body::from(bytes)), outcome));
        }
        if let Some(Value::Object(round_usage)) = message.get("usage") {
            add_usage(&mut usage, round_usage);
        }
        content.extend(round_content.iter().filter(|b| !rounds.is_memgate_call(b)).cloned());
        let stop_reason = message.get("stop_reason").and_then(Value::as_str).map(str::to_owned);
        let next = next_after(stop_reason.as_deref(), calls.len(), client_calls, last);
        if next != Next::Continue && !calls.is_empty() && client_calls > 0 {
            // Memgate's own calls in a turn that goes back to the client: answered for their
            // effect (a write happens); their results have nowhere to go.
            let _ = rounds.answer(&calls, answered).await;
        }
        if first.is_none() {
            first = Some((clone_parts(&parts), message.get("id").cloned().unwrap_or(Value::Null)));
        }
        match next {
            Next::Continue => {
                let (results, limited) = rounds.answer(&calls, answered).await;
                answered += 1;
                last |= limited;
                body = rounds
                    .next_body(&body, &round_content, &calls, &results)
                    .ok_or_else(|| ApiError::internal("the next tool round's body could not be built"))?;
                rounds.hold(body.len()).await?;
            }
            Next::Finish(stop) => {
                let (parts, id) = first.take().unwrap_or((parts, Value::Null));
                if let Value::Object(map) = &mut message {
                    map.insert("id".into(), id);
                    map.insert("content".into(), Value::Array(std::mem::take(&mut content)));
                    map.insert("usage".into(), Value::Object(std::mem::take(&mut usage)));
                    if let Some(stop) = stop {
                        map.insert("stop_reason".into(), Value::String(stop.into()));
                    }
                }
                let mut parts = parts;
                parts.headers.remove(crate::upstream::wire::header::CONTENT_LENGTH);
                rounds.finished(&outcome);
                let text = serde_json::to_vec(&message)
                    .map_err(|_| ApiError::internal("the answer could not be written"))?;
                return Ok((Response::from_parts(parts, Body::from(text)), outcome));
            }
        }
    }
}

/// The first round's status and headers, which the client's answer carries (its `request-id`
/// is the one the turn reports).
fn clone_parts(parts: &crate::upstream::wire::ResponseParts) -> crate::upstream::wire::ResponseParts {
    let mut response = Response::new(());
    *response.status_mut() = parts.status;
    *response.headers_mut() = parts.headers.clone();
    response.into_parts().0
}
