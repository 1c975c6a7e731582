//! Step between the temporal and semantic layers: the writers a release injects
//! (`inject_writers`, default all). A release for a bot that must answer from operators' policy
//! alone sets `["operator", "import"]`, and what agents, the memory tool or the observer kept
//! stays out of its blocks (the tools still find it). Runs only when the release narrows it, so
//! every other release's trace is as before.

use super::trace::{LayerLog, Trace};
use crate::index::TenantIndex;
use crate::record::WriterSet;
use crate::slots::SlotSet;

/// The records of `current` whose writer `writers` holds.
pub fn admitted(
    index: &TenantIndex,
    current: SlotSet,
    writers: WriterSet,
    detailed: bool,
    trace: &mut Trace,
) -> SlotSet {
    if writers.is_all() {
        return current;
    }
    let mut log = LayerLog::new("writers", current.len(), detailed);
    let kept = current.filter(|slot| {
        let Some(item) = index.slots[slot as usize].as_ref() else { return false };
        let writer = item.head.writer();
        let keep = writers.contains(writer);
        if !keep && log.wants_detail() {
            log.remove(item.head.id(), || format!("this release injects no {} records", writer.as_str()));
        }
        keep
    });
    log.finish_by_difference(kept.len(), trace);
    kept
}
