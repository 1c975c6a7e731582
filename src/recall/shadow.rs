//! Shadow mode: on a sample of requests, a candidate release's funnel runs beside the active one
//! and the difference (ids it would add and drop, tokens) is recorded in the candidate's stats.
//! It runs after the request has been routed, in a tracked background task, so it never delays
//! the answer; its block is thrown away — nothing of it is ever sent upstream.
//!
//! Shadow runs are bounded: at most `MAX_RUNNING` at once (each holds a copy of a request body
//! and competes for the embedder). A request sampled while they are all busy is not shadowed;
//! the comparison is a sample anyway, and a burst must not queue work without end.

use super::{Recalled, Recaller, Wish};
use crate::funnel::trace::Detail;
use crate::identity::Caller;
use crate::rollout::stats::ShadowDiff;
use crate::rollout::{Release, Rollout};
use bytes::Bytes;
use std::sync::Arc;

/// Shadow runs in flight at most, across requests.
pub const MAX_RUNNING: usize = 4;

/// Runs each candidate on the request in the background; the difference goes to `rollout`.
pub fn spawn(
    recaller: &Recaller,
    rollout: &Arc<Rollout>,
    caller: &Caller,
    active: &Recalled,
    shadows: Vec<Arc<Release>>,
    body: Bytes,
) {
    let Ok(slot) = recaller.inner.shadow_slots.clone().try_acquire_owned() else {
        tracing::debug!("all shadow runs busy; this request is not shadowed");
        return;
    };
    let (recaller, rollout) = (recaller.clone(), rollout.clone());
    let caller = caller.clone();
    let active_ids = active.injected_ids.clone();
    let active_tokens = active.tokens as i64;
    let tasks = recaller.memories().tasks().clone();
    tasks.spawn(async move {
        for candidate in shadows {
            let wish = Wish {
                off: false,
                trace: Detail::Off,
                budget: Some(std::time::Duration::from_secs(10)),
                shadow: true,
                triggers: false,
                values: Default::default(),
            };
            let Ok(shadowed) = recaller.recall(&caller, &candidate, body.clone(), &wish).await else {
                continue;
            };
            let added = shadowed.injected_ids.iter().filter(|id| !active_ids.contains(id)).cloned().collect();
            let dropped =
                active_ids.iter().filter(|id| !shadowed.injected_ids.contains(id)).cloned().collect();
            let diff = ShadowDiff { added, dropped, tokens_delta: shadowed.tokens as i64 - active_tokens };
            rollout.record_shadow(&candidate.name, diff);
        }
        drop(slot);
    });
}
