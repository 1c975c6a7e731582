//! Neighbours: a hit lifts the records next to it in its conversation or document.
//!
//! Records that carry a thread (`index::threads`) know their neighbours. In conversation memory
//! the turn that answers a question often shares little with it ("Yes, last May, with my
//! sister") while the turn before names the topic; the chunk after a document's heading holds
//! what the heading promised. So, after the semantic layer:
//! - every hit's score gains `weight` × the best score among its adjacent records (±1), and
//!   `weight / 2` × the best two places away (±2): a record in a passage that matches rises
//!   above an isolated one that scores alike;
//! - the records within two places of the best hits pass too, ranked by the same lifted score,
//!   if their own score reaches the release's floor (`floor`: its `standout_floor`, else its
//!   threshold). A thread is the writer's to say: a note about something else filed between two
//!   turns that answer the question is no neighbour of theirs, and passes only as it would alone.
//!   The floor is the least any record passes on by meaning; an answer turn that says little the
//!   question says still clears it (LoCoMo's and the suite's figures), an unrelated one does not.
//!
//! A neighbour counts only if the caller may see it and it is valid now (it is in the temporal
//! layer's output): a record the caller cannot see neither passes nor lifts another, and is
//! stepped over as if absent (`Threads::around`), so ranking reveals nothing about it. Tenants
//! without threads skip the step. Measured on LoCoMo (docs/benchmarks.md, "Retrieval"): weight
//! 0.5 lifts held-out recall within 1,000 tokens from 0.702 to 0.768; feedback from the best
//! hits' vectors or words did not help.

use super::semantic::{Hit, NeighbourPart};
use crate::index::TenantIndex;
use crate::slots::SlotSet;
use std::collections::{HashMap, HashSet};

/// How far along the thread a hit reaches.
const REACH: usize = 2;
/// The neighbours of this many of the best hits pass on their own.
pub const ADMITTING: usize = 16;

/// A candidate's similarity and unlifted score (its boosted similarity plus its words' part).
pub type Own = (f32, f32);

/// Whether the step runs for this tenant: a weight, and records that carry a thread.
pub fn lifts(index: &TenantIndex, weight: f32) -> bool {
    weight > 0.0 && !index.threads.is_empty()
}

/// Lifts `hits` by their neighbours' scores and lets in the neighbours of the best of them whose
/// own score reaches `floor`. `own` scores a candidate that is not a hit; exact matches keep
/// ranking first. Returns the hits, then the admitted neighbours, and, when the step ran, the
/// best unlifted score of a hit (what bounds the lift a record left out of `hits` could have had).
pub fn lift(
    index: &TenantIndex,
    current: &SlotSet,
    hits: Vec<Hit>,
    weight: f32,
    floor: f32,
    own: impl Fn(u32) -> Option<Own>,
) -> (Vec<Hit>, Option<f32>) {
    if !lifts(index, weight) || hits.is_empty() {
        return (hits, None);
    }
    let mut scores = Scores { known: HashMap::with_capacity(hits.len() * (2 * REACH + 1)), current, own };
    for hit in &hits {
        let known = if hit.exact { (scores.own)(hit.slot) } else { Some((hit.similarity, hit.score)) };
        scores.known.insert(hit.slot, known.unwrap_or((0.0, 0.0)));
    }
    // The best hits' neighbours, nearest first, each once.
    let mut by_rank: Vec<&Hit> = hits.iter().collect();
    by_rank.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.slot.cmp(&b.slot)));
    let held: HashSet<u32> = hits.iter().map(|h| h.slot).collect();
    let mut admitted: Vec<u32> = Vec::new();
    for hit in by_rank.iter().take(ADMITTING) {
        for (slot, _) in index.threads.around(hit.slot, REACH, |s| current.contains(s)) {
            let fresh = !held.contains(&slot) && !admitted.contains(&slot);
            if fresh && scores.get(slot).is_some_and(|(_, own)| own >= floor) {
                admitted.push(slot);
            }
        }
    }
    let best = scores.known.values().map(|(_, score)| *score).fold(f32::NEG_INFINITY, f32::max);
    let mut lifted = Vec::with_capacity(hits.len() + admitted.len());
    for mut hit in hits {
        let lift = scores.lift(index, hit.slot, weight);
        if lift > 0.0 {
            if !hit.exact {
                hit.score += lift;
            }
            hit.neighbours = Some(NeighbourPart { lift, admitted: false });
        }
        lifted.push(hit);
    }
    for slot in admitted {
        let Some((similarity, score)) = scores.get(slot) else { continue };
        let lift = scores.lift(index, slot, weight);
        lifted.push(Hit {
            slot,
            similarity,
            exact: false,
            score: score + lift,
            lexical: None,
            neighbours: Some(NeighbourPart { lift, admitted: true }),
        });
    }
    (lifted, Some(best))
}

/// The unlifted scores looked up so far; only candidates (`current`) have one.
struct Scores<'a, F> {
    known: HashMap<u32, Own>,
    current: &'a SlotSet,
    own: F,
}

impl<F: Fn(u32) -> Option<Own>> Scores<'_, F> {
    fn get(&mut self, slot: u32) -> Option<Own> {
        if !self.current.contains(slot) {
            return None;
        }
        if let Some(known) = self.known.get(&slot) {
            return Some(*known);
        }
        let known = (self.own)(slot)?;
        self.known.insert(slot, known);
        Some(known)
    }

    /// `weight` × the best adjacent score, plus half of it × the best two places away; a
    /// neighbour's negative score lifts nothing.
    fn lift(&mut self, index: &TenantIndex, slot: u32, weight: f32) -> f32 {
        let (mut near, mut far) = (0.0f32, 0.0f32);
        let current = self.current;
        for (neighbour, distance) in index.threads.around(slot, REACH, |s| current.contains(s)) {
            let Some((_, score)) = self.get(neighbour) else { continue };
            if distance == 1 {
                near = near.max(score);
            } else {
                far = far.max(score);
            }
        }
        weight * near + weight / 2.0 * far
    }
}
