//! Layer: token density. Best first — the semantic layer's score (the similarity, or a hybrid
//! release's fused score; an exact match first), then priority, then the most recently updated —
//! records are taken until the release's token budget or item cap is reached, or until the next
//! record's score falls too far below the best one's (the release's `cut`). A record of priority
//! 4 or 5 that does not fit becomes a one-line stub with its id (up to `max_stubs`), so the model
//! knows it exists; a record below the cut does not (it is not about the question); everything
//! left out is counted as overflow.

use super::cut::Cut;
use super::semantic::Hit;
use super::trace::{LayerLog, Trace};
use crate::index::{IndexedRecord, TenantIndex};
use std::cmp::Ordering;
use std::sync::Arc;

#[derive(Clone)]
pub struct Chosen {
    pub item: Arc<IndexedRecord>,
    pub similarity: f32,
    pub exact: bool,
    /// What it was ranked by (the similarity, or the fused score of a hybrid release).
    pub score: f32,
    pub lexical: Option<super::semantic::LexicalPart>,
    pub neighbours: Option<super::semantic::NeighbourPart>,
}

pub struct Budget {
    pub tokens: usize,
    pub max_items: usize,
    pub max_stubs: usize,
    /// Where the ranking stops (`Cut::OFF`: the budget and the cap alone decide).
    pub cut: Cut,
}

pub struct Packed {
    pub injected: Vec<Chosen>,
    pub stubs: Vec<Chosen>,
    pub overflow: usize,
    pub tokens: usize,
}

impl Packed {
    /// Injects `chosen` when the block has a place and the tokens for it; hands it back when not.
    pub fn inject_if_it_fits(&mut self, chosen: Chosen, budget: &Budget) -> Option<Chosen> {
        let cost = chosen.item.tokens;
        if self.injected.len() < budget.max_items && self.tokens + cost <= budget.tokens {
            self.tokens += cost;
            self.injected.push(chosen);
            return None;
        }
        Some(chosen)
    }
}

/// How many of the best hits are selected and sorted first.
const FIRST: usize = 64;

/// A hit as the density layer ranks it: with its record (`None`: removed since).
pub fn chosen(index: &TenantIndex, hit: &Hit) -> Option<Chosen> {
    let item = index.slots[hit.slot as usize].clone()?;
    Some(Chosen {
        item,
        similarity: hit.similarity,
        exact: hit.exact,
        score: hit.score,
        lexical: hit.lexical,
        neighbours: hit.neighbours,
    })
}

/// The layer's order, best first: score, then priority, then the most recently updated, then id.
/// A total order (ids are unique in a tenant), so unstable sorts give the one order there is.
pub fn rank(a: &Chosen, b: &Chosen) -> Ordering {
    b.score
        .total_cmp(&a.score)
        .then(b.item.head.priority.cmp(&a.item.head.priority))
        .then(b.item.head.updated_at_ms.cmp(&a.item.head.updated_at_ms))
        .then(a.item.head.id().cmp(b.item.head.id()))
}

pub fn pack(index: &TenantIndex, hits: &[Hit], budget: &Budget, detailed: bool, trace: &mut Trace) -> Packed {
    let mut log = LayerLog::new("token_density", hits.len(), detailed);
    let mut ranked: Vec<Chosen> = hits.iter().filter_map(|hit| chosen(index, hit)).collect();
    // With thousands of hits (a low threshold over a large tenant) only the first few are ever
    // packed: select the best `FIRST` and sort those; the rest is sorted only if packing gets
    // that far without filling the block and the stubs (a trace lists removals in rank order, so
    // a detailed run sorts everything).
    let mut sorted_upto = ranked.len();
    if !detailed && ranked.len() > FIRST {
        ranked.select_nth_unstable_by(FIRST, rank);
        ranked[..FIRST].sort_unstable_by(rank);
        sorted_upto = FIRST;
    } else {
        ranked.sort_unstable_by(rank);
    }
    let mut packed = Packed { injected: Vec::new(), stubs: Vec::new(), overflow: 0, tokens: 0 };
    // The best scored (not exact) record sets the cut's floor; ranked is sorted best first at
    // least up to `sorted_upto`, and exact matches rank above every score.
    let floor = match ranked[..sorted_upto].iter().find(|c| !c.exact) {
        Some(best) if !budget.cut.is_off() => budget.cut.floor(best.score),
        _ => f32::NEG_INFINITY,
    };
    // The score of the record ranked just before (exact matches aside), for the cut's step.
    let mut previous: Option<f32> = None;
    let mut position = 0;
    while position < ranked.len() {
        if position == sorted_upto {
            if packed.injected.len() >= budget.max_items {
                // The block is full: what is left can only be a stub (priority 4 or 5), in rank
                // order; everything else there only counts as removed.
                let mut tail = ranked.split_off(position);
                let rest = tail.len();
                packed.overflow += rest;
                log.add_uncounted_removals(rest);
                let room = budget.max_stubs.saturating_sub(packed.stubs.len());
                tail.retain(|c| (c.exact || c.score >= floor) && c.item.head.priority >= 4);
                if room > 0 && !tail.is_empty() {
                    tail.sort_unstable_by(rank);
                    packed.stubs.extend(tail.into_iter().take(room));
                }
                break;
            }
            ranked[position..].sort_unstable_by(rank);
            sorted_upto = ranked.len();
        }
        let steps_down = !ranked[position].exact
            && previous.is_some_and(|previous| budget.cut.steps_down(previous, ranked[position].score));
        if steps_down || (!ranked[position].exact && ranked[position].score < floor) {
            // Sorted up to here: everything after scores below the floor too, and is no answer
            // to this question, so none of it becomes a stub either.
            let rest = ranked.len() - position;
            packed.overflow += rest;
            let mut named = 0;
            for chosen in &ranked[position..] {
                if !log.wants_detail() {
                    break;
                }
                let score = chosen.score;
                log.remove(chosen.item.head.id(), || match previous {
                    Some(previous) if steps_down => {
                        format!("score {score:.3} is below the cut (a step down from {previous:.3})")
                    }
                    _ => format!("score {score:.3} is below the cut at {floor:.3}"),
                });
                named += 1;
            }
            log.add_uncounted_removals(rest - named);
            break;
        }
        let chosen = ranked[position].clone();
        position += 1;
        if !chosen.exact {
            previous = Some(chosen.score);
        }
        let Some(chosen) = packed.inject_if_it_fits(chosen, budget) else { continue };
        let cost = chosen.item.tokens;
        let record = &chosen.item.head;
        packed.overflow += 1;
        if record.priority >= 4 && packed.stubs.len() < budget.max_stubs {
            log.remove(record.id(), || format!("did not fit ({cost} tokens); injected as a stub"));
            packed.stubs.push(chosen);
        } else {
            log.remove(record.id(), || format!("did not fit ({cost} tokens, priority {})", record.priority));
        }
    }
    log.finish(packed.injected.len() + packed.stubs.len(), trace);
    packed
}
