//! Layer: temporal. `valid_from <= now < valid_until`, status active, and a schema version the
//! release reads. The memory tools pass the same rule with dormant records taken too
//! (`findable`): a dormant record is never injected, but an agent may still find it. Decided on the index's flat per-slot arrays (`SlotMeta`), not on the records:
//! the records are read only to name the removed ones in a detailed trace.

use super::trace::{LayerLog, Trace};
use crate::clock::format_ms;
use crate::index::{SlotMeta, SlotState, TenantIndex};
use crate::record::Status;
use crate::slots::SlotSet;

/// The candidates valid now that this release reads, and their tokens (what the caller's
/// visible, valid records would cost injected in full), summed in the same pass over `SlotMeta`.
pub fn current(
    index: &TenantIndex,
    candidates: &SlotSet,
    now_ms: i64,
    schema_versions: &[String],
    detailed: bool,
    trace: &mut Trace,
) -> (SlotSet, u64) {
    valid(index, candidates, now_ms, schema_versions, detailed, trace, |state| state == SlotState::Active)
}

/// `current`, with dormant records kept: what the memory tools may find.
pub fn findable(
    index: &TenantIndex,
    candidates: &SlotSet,
    now_ms: i64,
    schema_versions: &[String],
    trace: &mut Trace,
) -> SlotSet {
    let takes = |state| matches!(state, SlotState::Active | SlotState::Dormant);
    valid(index, candidates, now_ms, schema_versions, false, trace, takes).0
}

fn valid(
    index: &TenantIndex,
    candidates: &SlotSet,
    now_ms: i64,
    schema_versions: &[String],
    detailed: bool,
    trace: &mut Trace,
    takes: impl Fn(SlotState) -> bool,
) -> (SlotSet, u64) {
    // Per interned schema of the tenant: does this release read it?
    let read: Vec<bool> = index.schemas().iter().map(|s| schema_versions.contains(s)).collect();
    let meta = index.meta();
    let is_current = |m: &SlotMeta| {
        takes(m.state)
            && m.valid_from_ms <= now_ms
            && now_ms < m.valid_until_ms
            && read.get(m.schema as usize).copied().unwrap_or(false)
    };
    let mut tokens = 0u64;
    let kept = candidates.filter(|slot| match meta.get(slot as usize) {
        Some(m) if is_current(m) => {
            tokens += u64::from(m.tokens);
            true
        }
        _ => false,
    });
    let mut log = LayerLog::new("temporal", candidates.len(), detailed);
    if detailed {
        for slot in candidates.iter().filter(|slot| !kept.contains(*slot)) {
            if !log.wants_detail() {
                break;
            }
            let Some(item) = index.slots[slot as usize].as_ref() else { continue };
            let record = &item.head;
            let reason = if record.status != Status::Active {
                format!("status {}", record.status.as_str())
            } else if now_ms < record.valid_from_ms {
                format!("not valid before {}", format_ms(record.valid_from_ms))
            } else if now_ms >= record.valid_until_ms {
                format!("expired at {}", format_ms(record.valid_until_ms))
            } else {
                format!("schema {} is not read by this release", record.schema_version())
            };
            log.remove(record.id(), || reason);
        }
    }
    log.finish_by_difference(kept.len(), trace);
    (kept, tokens)
}
