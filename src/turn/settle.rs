//! What happens after the answer, besides the report: the release's outcome, trigger actions,
//! the console's history and recent requests, and the observation of the exchange.

use super::{Answer, Turn};
use crate::console::{
    CallError, CallOutcome, MemoryOutcome, MetricsRecorder, RecentCaller, RecentRequest, RecentRequests,
};
use crate::identity::Caller;
use crate::observer::Watch;
use crate::recall::{MemoryStatus, Recalled, Wish};
use crate::rollout::stats::Outcome;
use crate::triggers::{TriggerInput, Triggers, turn_id};
use crate::upstream::wire::Body;
use std::time::Duration;

/// The release's figures for one answered call.
pub(super) fn outcome(recalled: &Recalled, answer: &Answer, added_latency: Duration) -> Outcome {
    Outcome {
        upstream_error: (500..600).contains(&answer.status),
        memory_error: recalled.status == MemoryStatus::Degraded,
        injected_records: recalled.injected_ids.len(),
        injected_tokens: recalled.tokens,
        added_latency,
    }
}

/// Decides the actions of the records whose conditions this request met and hands them to the
/// outbox's writer, off the answer's path. Returns how many were decided (`X-Memory-Triggered`).
pub(super) fn fire_triggers(triggers: &Triggers, caller: &Caller, recalled: &Recalled, wish: &Wish) -> usize {
    let Some((words, turn)) = &recalled.trigger_words else { return 0 };
    let subject = caller.subject.as_deref();
    let input = TriggerInput::new(words, &wish.values);
    let request_id = turn_id(&caller.tenant, subject, *turn, words);
    let decisions =
        triggers.decide(&caller.tenant, &request_id, subject, &caller.rate_key, &input, &recalled.fired);
    let count = decisions.len();
    triggers.enqueue(decisions);
    count
}

/// The console's history and its recent requests: one answered `POST /v1/messages`.
pub(super) fn record_for_console(
    recorder: &MetricsRecorder,
    recent: &RecentRequests,
    turn: &Turn,
    answer: &Answer,
    added_latency: Duration,
) {
    let (caller, recalled) = (&turn.caller, &turn.recalled);
    let memory = match recalled.status {
        MemoryStatus::Ok => MemoryOutcome::Ok,
        MemoryStatus::Skipped => MemoryOutcome::Skipped,
        MemoryStatus::Degraded => MemoryOutcome::Degraded,
    };
    let injected_records = recalled.injected_ids.len() + recalled.stub_ids.len();
    recorder.record(
        &caller.tenant,
        &turn.release.name,
        &CallOutcome {
            error: CallError::classify(answer.status, answer.upstream_time.is_some(), memory),
            memory,
            injected_records: injected_records as u32,
            injected_tokens: u32::try_from(recalled.tokens).unwrap_or(u32::MAX),
            visible_tokens: recalled.visible_tokens,
            added_latency,
        },
    );
    let (kind, key_id) = match caller.rate_key.split_once(':') {
        Some(("key", id)) => ("key", Some(id.to_owned())),
        Some(("jwt", _)) => ("jwt", None),
        _ => ("passthrough", None),
    };
    let request_id = answer
        .request_id
        .as_ref()
        .map(|id| id.chars().take(100).collect())
        .unwrap_or_else(|| format!("req_memgate_{}", uuid::Uuid::new_v4().simple()));
    recent.push(
        &caller.tenant,
        RecentRequest {
            request_id,
            at_ms: crate::clock::now_ms(),
            release: turn.release.name.clone(),
            caller: RecentCaller {
                kind,
                key_id,
                name: caller.key_name.clone(),
                subject: caller.subject.clone(),
                scopes: caller.scopes.iter().cloned().collect(),
            },
            model: Some(turn.facts.model.clone()),
            stream: turn.facts.stream,
            memory_status: recalled.status.as_str(),
            injected_ids: recalled.injected_ids.iter().chain(&recalled.stub_ids).cloned().collect(),
            tokens: recalled.tokens as u64,
            status: answer.status,
            query_preview: None,
        },
    );
}

/// An observed turn the model answered: its body is tapped, and once the answer has arrived
/// whole the exchange is queued off the request's path (`observer`).
pub(super) fn observe(watch: Watch, answer: &Answer, body: &mut Body) {
    let untapped = std::mem::replace(body, Body::empty());
    *body = watch.tap(untapped, answer.request_id.clone());
}
