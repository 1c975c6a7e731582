//! Filling the room a bounded semantic layer left in the block.
//!
//! The semantic layer keeps its best few hits (`semantic::TopK`) and the density layer packs
//! them. When the token budget, not the item cap, ends the block, the room left over may still
//! take a small record the layer left out: packing is greedy, and takes any hit that fits, however
//! low it ranks. Packing every hit finds such a record, at the price of scoring every record above
//! the bar, fusing and sorting them all: over a 100,000-record knowledge base, where the budget
//! ends nearly every block, that second pass was most of a request's CPU. Only a hit that fits the
//! room can change the block, so the funnel asks the scan again for those alone: the best few
//! left-out hits that cost at most the room's tokens, packed in rank order; then, for the smaller
//! room left, again, until no left-out hit can fit or the item cap is reached. After `ROUNDS`
//! rounds it packs every hit as before.
//!
//! Why this packs what packing every hit packs. The funnel calls it only when every injected
//! hit scores above the highest score a left-out hit could have (`Matched::floor`), when no
//! left-out hit could become a stub (none of priority 4–5 was left out, or the stubs are full),
//! with no cut and no neighbours' lift (both rank a hit by what was ranked around it). Packing
//! every hit then reaches the left-out hits with the same block: the same records, the same room,
//! the same stubs. A kept hit scoring at or below that floor was not injected (no room for it, or
//! no place), and more records injected before it leave it less of both. So what packing every
//! hit adds is greedy packing of the left-out hits, in rank order, into the room — and a hit that
//! does not fit the room now never fits later, as the room only shrinks. A round's hits are taken
//! in rank order down to the highest score its own scan left out; below it, ties with what was
//! left out are not ordered, so those are met again in the next round.

use super::density::{self, Budget, Packed};
use super::semantic::{self, Scanned};
use super::trace::Trace;

/// Rounds of asking for more before the funnel packs every hit instead. On the CRM workload
/// every request settled within them (docs/benchmarks.md, "A million customers").
const ROUNDS: usize = 4;
/// The most hits one round asks for: the room left after a budget-ended block holds few.
const PER_ROUND: usize = 32;

/// Fills `packed`'s room from the hits the bounded semantic layer left out. `kept` are the slots
/// of every hit it kept (those were packed already), `least` the fewest tokens a left-out hit
/// costs. Returns how many more hits were met, or `None` when `ROUNDS` did not settle it (the
/// block is then not to be trusted: pack every hit).
pub fn fill(
    scanned: &Scanned<'_>,
    budget: &Budget,
    packed: &mut Packed,
    kept: Vec<u32>,
    mut least: usize,
    trace: &mut Trace,
) -> Option<usize> {
    let meta = scanned.index.meta();
    let mut met = kept;
    met.sort_unstable();
    let mut more = 0;
    for _ in 0..ROUNDS {
        let room = budget.tokens.saturating_sub(packed.tokens);
        let places = budget.max_items.saturating_sub(packed.injected.len());
        if places == 0 || least > room {
            return Some(more);
        }
        // A record costing more than the room never fits in it; one already met was packed.
        let fits_the_room =
            |slot: u32| usize::from(meta[slot as usize].tokens) <= room && met.binary_search(&slot).is_err();
        let (hits, left_out) = semantic::more_within(scanned, places.min(PER_ROUND), fits_the_room, trace);
        let mut ranked: Vec<(u32, density::Chosen)> = hits
            .iter()
            .filter_map(|hit| density::chosen(scanned.index, hit).map(|chosen| (hit.slot, chosen)))
            .collect();
        ranked.sort_by(|(_, a), (_, b)| density::rank(a, b));
        let floor = left_out.map(|(score, _)| score);
        least = left_out.map_or(usize::MAX, |(_, tokens)| tokens);
        for (slot, chosen) in ranked {
            if floor.is_some_and(|floor| chosen.score <= floor) {
                least = least.min(chosen.item.tokens);
                continue;
            }
            met.insert(met.partition_point(|s| *s < slot), slot);
            more += 1;
            if packed.inject_if_it_fits(chosen, budget).is_some() {
                packed.overflow += 1;
            }
        }
    }
    let room = budget.tokens.saturating_sub(packed.tokens);
    let places = budget.max_items.saturating_sub(packed.injected.len());
    (places == 0 || least > room).then_some(more)
}
