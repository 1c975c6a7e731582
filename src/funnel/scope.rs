//! Layer: scope. A record is visible to a caller iff it is in the caller's tenant and one of its
//! scopes is among the caller's (`Caller::can_see`). Deny by default: the candidates are built
//! only from the caller's own scopes, so a record no scope admits is never even looked at. The
//! caller's scope lists are merged into a bitset (`SlotSet`), which also removes repeats; a large
//! scope (`public`) is merged a word at a time from the bitset the index keeps of it.
//!
//! What this layer removed is the one part of a trace that is about records the caller may not
//! see: only an admin's trace (`Detail::Full`) names them, and metrics (`Detail::Off`) count them.
//! The caller's own trace (`Detail::Visible`) shows the layer's output alone, as if its visible
//! records were all there is.

use super::trace::{Detail, LayerLog, Trace};
use crate::identity::Caller;
use crate::index::TenantIndex;
use crate::slots::SlotSet;

/// Slots of the tenant's records this caller may see.
pub fn visible(index: &TenantIndex, caller: &Caller, detail: Detail, trace: &mut Trace) -> SlotSet {
    let mut visible = SlotSet::new(index.slots.len());
    for scope in &caller.scopes {
        match index.scope_set(scope) {
            Some(set) => visible.union_with(set),
            None => {
                for slot in index.by_scope.get(scope.as_str()).into_iter().flatten() {
                    visible.insert(*slot);
                }
            }
        }
    }
    if detail == Detail::Visible {
        LayerLog::new("scope", visible.len(), false).finish(visible.len(), trace);
        return visible;
    }
    let mut log = LayerLog::new("scope", index.len(), detail.is_on());
    if detail == Detail::Full {
        let hidden = index.slots.iter().enumerate().filter(|(slot, _)| !visible.contains(*slot as u32));
        for (_, item) in hidden {
            if !log.wants_detail() {
                break;
            }
            if let Some(item) = item {
                log.remove(item.head.id(), || "no scope in common with the caller".into());
            }
        }
    }
    log.finish_by_difference(visible.len(), trace);
    visible
}
