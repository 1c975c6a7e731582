//! The semantic layer's bounded heaps (`Best`), and the order its scan scores candidates in
//! (`Pending`).
//!
//! A heap keeps the best `cap` hits by score and, of equal scores, the lower slot: what it keeps
//! does not depend on the order hits are offered in, so the scan may offer them in whatever order
//! is cheapest (the order of their int8 bounds) and keep what a scan in slot order would.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

/// A bounded heap of the best (score, slot) pairs, each with its record's token count.
pub(super) struct Best {
    cap: usize,
    /// The worst kept on top: the lowest score, of equal scores the highest slot.
    heap: BinaryHeap<Reverse<(Score, Reverse<u32>, u16)>>,
    /// The highest score (or bound on it) of a hit it left out; none left out: `None`.
    dropped: Option<f32>,
    /// The fewest tokens of a hit it left out.
    pub(super) dropped_tokens: Option<u16>,
}

/// An f32 ordered by `total_cmp`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Score(f32);

impl Eq for Score {}

impl PartialOrd for Score {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Score {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0)
    }
}

impl Best {
    pub(super) fn new(cap: usize) -> Best {
        Best { cap, heap: BinaryHeap::new(), dropped: None, dropped_tokens: None }
    }

    /// The score a new entry must reach: the worst kept once full (reaching it exactly, an
    /// entry of a lower slot is kept).
    pub(super) fn floor(&self) -> f32 {
        match self.heap.peek() {
            Some(Reverse((Score(worst), _, _))) if self.heap.len() >= self.cap => *worst,
            _ if self.cap == 0 => f32::INFINITY,
            _ => f32::NEG_INFINITY,
        }
    }

    pub(super) fn offer(&mut self, slot: u32, score: f32, tokens: u16) {
        if self.cap == 0 {
            return; // not kept apart at all (`TopK::ALL`): the other heap holds every hit
        }
        let entry = (Score(score), Reverse(slot), tokens);
        if self.heap.len() < self.cap {
            self.heap.push(Reverse(entry));
            return;
        }
        let beats_worst =
            self.heap.peek().is_some_and(|Reverse(worst)| (entry.0, entry.1) > (worst.0, worst.1));
        let (Score(left), _, left_tokens) = if beats_worst {
            let Some(Reverse(evicted)) = self.heap.pop() else { return };
            self.heap.push(Reverse(entry));
            evicted
        } else {
            entry
        };
        self.leave_out(left, left_tokens);
    }

    /// A hit the bar admits but this full heap's floor ruled out before it was scored, by
    /// `bound` on its score: left out all the same.
    pub(super) fn rule_out(&mut self, bound: f32, tokens: u16) {
        if self.cap > 0 && self.heap.len() >= self.cap {
            self.leave_out(bound, tokens);
        }
    }

    fn leave_out(&mut self, score: f32, tokens: u16) {
        self.dropped = Some(self.dropped.map_or(score, |s| s.max(score)));
        self.dropped_tokens = Some(self.dropped_tokens.map_or(tokens, |t| t.min(tokens)));
    }

    /// The highest score of a hit left out, if one was: never above the worst kept.
    pub(super) fn left_out(&self) -> Option<f32> {
        self.dropped.map(|dropped| dropped.min(self.floor()))
    }

    pub(super) fn into_slots(self) -> impl Iterator<Item = (u32, f32)> {
        self.heap.into_iter().map(|Reverse((Score(score), Reverse(slot), _))| (slot, score))
    }
}

/// `Pending::at` of a candidate without an int8 row.
pub(super) const NO_ROW: u32 = u32::MAX;

/// A candidate whose int8 bound reaches the bar, waiting to be scored: the bound
/// (`f32::INFINITY` when it has none), where its row is, and what the heaps keep of it.
/// Ordered highest bound first, then lower slot.
#[derive(Debug, Clone, Copy)]
pub(super) struct Pending {
    pub upper: f32,
    pub slot: u32,
    /// The row's position (`NO_ROW`: none; scored from its f32 vector).
    pub at: u32,
    pub tokens: u16,
    /// Priority 4–5: offered to the high-priority heap too.
    pub high_priority: bool,
}

impl PartialEq for Pending {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Pending {}

impl PartialOrd for Pending {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Pending {
    fn cmp(&self, other: &Self) -> Ordering {
        self.upper.total_cmp(&other.upper).then(other.slot.cmp(&self.slot))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Offers (slot, score) pairs in the given order; returns the kept slots, sorted.
    fn kept(cap: usize, offers: &[(u32, f32)]) -> Vec<u32> {
        let mut best = Best::new(cap);
        for &(slot, score) in offers {
            best.offer(slot, score, 10);
        }
        let mut slots: Vec<u32> = best.into_slots().map(|(slot, _)| slot).collect();
        slots.sort_unstable();
        slots
    }

    #[test]
    fn a_heap_keeps_the_same_hits_in_whatever_order_they_come() {
        // Ties at the floor: the lower slots are kept, whichever came first.
        let offers = [(7, 0.5), (3, 0.5), (9, 0.6), (1, 0.5), (4, 0.4), (2, 0.5)];
        let forward = kept(3, &offers);
        assert_eq!(forward, vec![1, 2, 9]);
        let mut reversed = offers;
        reversed.reverse();
        assert_eq!(kept(3, &reversed), forward);
        let mut by_slot = offers;
        by_slot.sort_by_key(|(slot, _)| *slot);
        assert_eq!(kept(3, &by_slot), forward);
    }

    #[test]
    fn what_a_heap_leaves_out_is_bounded_by_its_worst_kept() {
        let mut best = Best::new(2);
        for (slot, score) in [(1, 0.9), (2, 0.8), (3, 0.85), (4, 0.7)] {
            best.offer(slot, score, slot as u16 * 10);
        }
        assert_eq!(best.left_out(), Some(0.8), "the evicted 0.8 is the best left out");
        assert_eq!(best.dropped_tokens, Some(20), "the fewest tokens of 0.8 (20) and 0.7 (40)");
        best.rule_out(0.84, 5);
        assert_eq!((best.left_out(), best.dropped_tokens), (Some(0.84), Some(5)));
        assert_eq!(best.floor(), 0.85);
    }

    #[test]
    fn pending_candidates_come_highest_bound_first_then_lowest_slot() {
        let pending =
            |upper: f32, slot: u32| Pending { upper, slot, at: NO_ROW, tokens: 1, high_priority: false };
        let mut heap: BinaryHeap<Pending> =
            [pending(0.5, 4), pending(f32::INFINITY, 9), pending(0.7, 2), pending(0.5, 1)]
                .into_iter()
                .collect();
        let mut order = Vec::new();
        while let Some(next) = heap.pop() {
            order.push(next.slot);
        }
        assert_eq!(order, vec![9, 2, 1, 4]);
    }
}
