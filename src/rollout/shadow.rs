//! Shadow mode: on a sample of requests, a candidate release's funnel runs beside the active one
//! and the difference (ids it would add and drop, tokens) is recorded in the candidate's stats.
//! It runs after the request has been routed, in a tracked background task, so it never delays
//! the answer; its block is thrown away — nothing of it is ever sent upstream.
//!
//! Shadow runs are bounded: at most `MAX_RUNNING` at once (each holds a copy of a request body
//! and competes for the embedder). A request sampled while they are all busy is not shadowed;
//! the comparison is a sample anyway, and a burst must not queue work without end.

use crate::app::AppState;
use crate::funnel::trace::Detail;
use crate::identity::Caller;
use crate::recall::{Recalled, Wish, recall};
use crate::rollout::Release;
use crate::rollout::stats::ShadowDiff;
use bytes::Bytes;
use std::sync::Arc;

/// Shadow runs in flight at most, across requests.
pub const MAX_RUNNING: usize = 4;

pub fn spawn(state: &AppState, caller: &Caller, active: &Recalled, shadows: Vec<Arc<Release>>, body: Bytes) {
    let Ok(slot) = state.shadow_slots().clone().try_acquire_owned() else {
        tracing::debug!("all shadow runs busy; this request is not shadowed");
        return;
    };
    let state_for_task = state.clone();
    let caller = caller.clone();
    let active_ids = active.injected_ids.clone();
    let active_tokens = active.tokens as i64;
    state.memories().tasks().spawn(async move {
        let state = state_for_task;
        for candidate in shadows {
            let wish = Wish {
                off: false,
                trace: Detail::Off,
                budget: Some(std::time::Duration::from_secs(10)),
                shadow: true,
            };
            let Ok(shadowed) = recall(&state, &caller, &candidate, body.clone(), &wish).await else {
                continue;
            };
            let added = shadowed.injected_ids.iter().filter(|id| !active_ids.contains(id)).cloned().collect();
            let dropped =
                active_ids.iter().filter(|id| !shadowed.injected_ids.contains(id)).cloned().collect();
            let diff = ShadowDiff { added, dropped, tokens_delta: shadowed.tokens as i64 - active_tokens };
            state.rollout().record_shadow(&candidate.name, diff);
        }
        drop(slot);
    });
}
