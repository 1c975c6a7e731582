//! Threads: which records sit next to each other in one conversation or document.
//!
//! A record may say where it came from: `metadata.thread` (the conversation or document, any
//! string) and `metadata.position` (its place in it, a non-negative integer). The turns of a
//! conversation imported one record each, or the chunks of a long article, then know their
//! neighbours, which the funnel uses (`funnel::neighbours`): the turn that answers a question often
//! scores lower than the turn just before it, which names what the answer is about.
//!
//! Only records that carry a thread are held here, so a tenant of customer profiles pays nothing.
//! Positions need not be contiguous or unique: a record's neighbours are the records of its thread
//! ordered by (position, slot) just before and after it.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

/// Where a record sits: its thread and its position in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    pub thread: Arc<str>,
    pub position: u32,
}

impl Place {
    /// `metadata.thread` and `metadata.position` of a record, when both are there and well formed
    /// (the write checks refuse a malformed pair; a record written before them is just unthreaded).
    pub fn of(metadata: &serde_json::Map<String, serde_json::Value>) -> Option<Place> {
        let thread = metadata.get("thread")?.as_str().filter(|t| !t.is_empty())?;
        let position = u32::try_from(metadata.get("position")?.as_u64()?).ok()?;
        Some(Place { thread: Arc::from(thread), position })
    }
}

/// A tenant's threaded records.
#[derive(Default)]
pub struct Threads {
    /// Per thread, its records as (position, slot), in order.
    by_thread: HashMap<Arc<str>, BTreeSet<(u32, u32)>>,
    /// Per threaded slot, where it sits.
    of_slot: HashMap<u32, Place>,
}

impl Threads {
    /// Files `slot` at `place` (the slot must not be filed already: the index removes a record
    /// before it inserts its new revision).
    pub fn insert(&mut self, slot: u32, place: Place) {
        let members = match self.by_thread.get_mut(&place.thread) {
            Some(members) => members,
            None => self.by_thread.entry(Arc::clone(&place.thread)).or_default(),
        };
        members.insert((place.position, slot));
        self.of_slot.insert(slot, place);
    }

    pub fn remove(&mut self, slot: u32) {
        let Some(place) = self.of_slot.remove(&slot) else { return };
        if let Some(members) = self.by_thread.get_mut(&place.thread) {
            members.remove(&(place.position, slot));
            if members.is_empty() {
                self.by_thread.remove(&place.thread);
            }
        }
    }

    /// Whether any record of the tenant has a thread (most tenants: none, and the funnel skips
    /// the neighbour step).
    pub fn is_empty(&self) -> bool {
        self.of_slot.is_empty()
    }

    /// The slots up to `reach` places before and after `slot` in its thread, counting only slots
    /// `keep` accepts (what the caller may see), each with its distance (1 = adjacent), nearest
    /// first; empty for an unthreaded slot. A record the caller may not see is stepped over as if
    /// it were not there, so it changes nobody's neighbours; at most `WALK` records are stepped
    /// over on each side.
    pub fn around(&self, slot: u32, reach: usize, keep: impl Fn(u32) -> bool) -> Vec<(u32, usize)> {
        let Some(place) = self.of_slot.get(&slot) else { return Vec::new() };
        let Some(members) = self.by_thread.get(&place.thread) else { return Vec::new() };
        let at = (place.position, slot);
        let kept = |side: &mut dyn Iterator<Item = &(u32, u32)>| -> Vec<u32> {
            side.take(WALK).map(|(_, neighbour)| *neighbour).filter(|n| keep(*n)).take(reach).collect()
        };
        let before = kept(&mut members.range(..at).rev());
        let after = kept(&mut members.range(at..).skip(1));
        let mut out: Vec<(u32, usize)> = before
            .into_iter()
            .enumerate()
            .chain(after.into_iter().enumerate())
            .map(|(i, neighbour)| (neighbour, i + 1))
            .collect();
        out.sort_by_key(|(_, distance)| *distance);
        out
    }
}

/// How many records of a thread a neighbour lookup steps through on each side at most.
pub const WALK: usize = 64;

#[cfg(test)]
mod tests {
    use super::*;

    fn place(thread: &str, position: u32) -> Place {
        Place { thread: Arc::from(thread), position }
    }

    #[test]
    fn neighbours_are_the_records_next_in_the_thread_whatever_the_gaps() {
        let mut threads = Threads::default();
        for (slot, position) in [(10, 0), (11, 1), (12, 5), (13, 9), (14, 10)] {
            threads.insert(slot, place("D1", position));
        }
        threads.insert(20, place("D2", 2));
        let all = |_: u32| true;
        assert_eq!(threads.around(12, 2, all), vec![(11, 1), (13, 1), (10, 2), (14, 2)]);
        assert_eq!(threads.around(10, 1, all), vec![(11, 1)]);
        assert_eq!(threads.around(20, 2, all), vec![], "alone in its thread");
        assert_eq!(threads.around(99, 2, all), vec![], "unthreaded");
        // A slot the caller may not see is stepped over: 13 is then 12's neighbour's neighbour.
        assert_eq!(threads.around(12, 2, |s| s != 11), vec![(10, 1), (13, 1), (14, 2)]);
        threads.remove(11);
        assert_eq!(threads.around(12, 1, all), vec![(10, 1), (13, 1)]);
        for slot in [10, 12, 13, 14, 20] {
            threads.remove(slot);
        }
        assert!(threads.is_empty());
        assert!(threads.by_thread.is_empty(), "an emptied thread is dropped");
    }

    #[test]
    fn a_lookup_steps_over_a_bounded_number_of_hidden_records() {
        let mut threads = Threads::default();
        for slot in 0..200u32 {
            threads.insert(slot, place("D1", slot));
        }
        // Only 0 and 199 visible: too far apart to be neighbours.
        let visible = |s: u32| s == 0 || s == 199;
        assert_eq!(threads.around(0, 2, visible), vec![]);
        let near = |s: u32| s == 0 || s == WALK as u32;
        assert_eq!(threads.around(0, 2, near), vec![(WALK as u32, 1)]);
    }

    #[test]
    fn a_place_needs_a_thread_name_and_a_position() {
        let meta = |v: serde_json::Value| v.as_object().cloned().unwrap_or_default();
        assert_eq!(
            Place::of(&meta(serde_json::json!({"thread": "c-1", "position": 3}))),
            Some(place("c-1", 3))
        );
        for bad in [
            serde_json::json!({"thread": "c-1"}),
            serde_json::json!({"position": 3}),
            serde_json::json!({"thread": "", "position": 3}),
            serde_json::json!({"thread": "c-1", "position": -1}),
            serde_json::json!({"thread": "c-1", "position": 1.5}),
            serde_json::json!({"thread": 7, "position": 3}),
            serde_json::json!({"thread": "c-1", "position": 5_000_000_000u64}),
        ] {
            assert_eq!(Place::of(&meta(bad.clone())), None, "{bad}");
        }
    }
}
