//! Layer: scope. A record is visible to a caller iff it is in the caller's tenant and one of its
//! scopes is among the caller's (`Caller::can_see`). Deny by default: the candidates are built
//! only from the caller's own scopes, so a record no scope admits is never even looked at.

use super::index::TenantIndex;
use super::trace::{LayerLog, Trace};
use crate::identity::Caller;

/// Slots of the tenant's records this caller may see, in slot order, without repeats.
pub fn visible(index: &TenantIndex, caller: &Caller, detailed: bool, trace: &mut Trace) -> Vec<u32> {
    let mut seen = vec![false; index.slots.len()];
    let mut slots = Vec::new();
    for scope in &caller.scopes {
        for slot in index.by_scope.get(scope).into_iter().flatten() {
            if !std::mem::replace(&mut seen[*slot as usize], true) {
                slots.push(*slot);
            }
        }
    }
    slots.sort_unstable();
    let mut log = LayerLog::new("scope", index.len(), detailed);
    let hidden = index.len() - slots.len();
    if log.wants_detail() {
        for (slot, item) in index.slots.iter().enumerate() {
            if let (Some(item), false) = (item, seen[slot]) {
                log.remove(&item.record.id, || "no scope in common with the caller".into());
            }
        }
    } else {
        log.add_uncounted_removals(hidden);
    }
    log.finish(slots.len(), trace);
    slots
}
