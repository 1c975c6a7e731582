//! The funnel: which records this caller may see and that fit this request.
//!
//! Four layers, run cheapest first on the caller's tenant index:
//! 1. `scope` — the tenant's records sharing a scope with the caller (deny by default);
//! 2. `temporal` — valid now, active, of a schema version the release reads;
//! 3. `semantic` — named exactly by the query, or similar enough to it: at the release's
//!    threshold, or, where the release asks, standing out from what the caller may see
//!    (`background`), the caller's own records weighing a little more; then records of a
//!    conversation or document lift their neighbours and the best hits' neighbours pass
//!    (`neighbours`);
//! 4. `density` — best first until the token budget, the item cap or the release's cut (`cut`:
//!    the next record scores too far below the best); high-priority overflow as stubs.
//!
//! Each layer reports what it removed in the `trace`. The funnel itself never waits: the query
//! embedding is computed before (see `recall`), so a funnel run is pure CPU on in-memory data.
//!
//! A tenant may hold 100,000 records, of which a caller typically sees half, and the whole run
//! should stay within about 2 ms. So the passes over every candidate read flat, slot-indexed
//! data rather than records: the candidates travel between layers as a bitset (`slots`), the
//! temporal layer reads per-slot validity arrays (`index::SlotMeta`), and the semantic layer's
//! scans read the int8 rows of the embeddings (`quant`), scoring exactly only the candidates that
//! may still beat what it keeps. It keeps a bounded number of hits (`semantic::TopK`, a few times
//! the item cap), so a low threshold over a large tenant costs no more than a high one. The run
//! then checks that the bounded hits pack what every hit would (`packed_as_unbounded`); when the
//! budget ended the block with room a left-out hit could take, it scans again for the hits that
//! fit the room (`fill`), and when neither shows it, it packs every hit. Records are read for
//! the hits, and for the ids and reasons of a detailed trace.

pub mod background;
mod best;
pub mod cut;
pub mod density;
pub mod feedback;
pub mod fill;
pub mod neighbours;
pub mod scope;
pub mod semantic;
pub mod temporal;
pub mod trace;
pub mod writers;

#[cfg(test)]
mod bounded_tests;
#[cfg(test)]
mod ivf_tests;
#[cfg(test)]
mod lift_tests;
#[cfg(test)]
pub(crate) mod tests;

use crate::identity::Caller;
use crate::index::TenantIndex;
use crate::slots::SlotSet;
use background::Boost;
use density::{Budget, Packed};
use semantic::{Hit, Lift, Matched, SemanticQuery, TopK};
use trace::{Detail, Trace};

/// The release's funnel settings.
#[derive(Debug, Clone)]
pub struct FunnelSettings {
    pub schema_versions: Vec<String>,
    pub threshold: f32,
    pub budget_tokens: usize,
    pub max_items: usize,
    pub max_stubs: usize,
    pub probes: crate::vector::ivf::Probes,
    pub retrieval: Retrieval,
    /// Where the ranking stops, beside the budget and the cap.
    pub cut: cut::Cut,
    /// Records pass on meaning only this many standard deviations above the mean similarity of
    /// the caller's candidates, and at its floor (`background`); `None`: the threshold alone.
    pub standout: Option<background::Standout>,
    /// Added to the similarity of the records of the caller's own subject (`user:<subject>`).
    pub subject_boost: f32,
    /// How much a record's neighbours in its thread lift it (`neighbours`); 0: off.
    pub neighbour_weight: f32,
    /// Whose records this release injects (`inject_writers`; `writers`).
    pub inject_writers: crate::record::WriterSet,
}

impl FunnelSettings {
    /// The release's rules beyond the threshold, for this caller; `subject_slots` are filled
    /// with its own records when they get a boost.
    fn lift<'a>(&self, index: &TenantIndex, caller: &Caller, subject_slots: &'a mut Vec<u32>) -> Lift<'a> {
        if self.subject_boost != 0.0
            && let Some(scope) = caller.subject_scope()
        {
            subject_slots.extend(index.by_scope.get(scope.as_str()).into_iter().flatten().copied());
            subject_slots.sort_unstable();
            subject_slots.dedup();
        }
        Lift { standout: self.standout, boost: Boost { slots: subject_slots, amount: self.subject_boost } }
    }
}

/// How the semantic layer ranks: by meaning alone, or by meaning and words fused
/// (docs/hybrid-retrieval.md).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Retrieval {
    Dense,
    Hybrid {
        /// Weight of the normalized BM25 score beside the similarity (1.0 measured best).
        lexical_weight: f32,
        /// Normalized BM25 at or above which words alone pass a record (0.3: strong matches).
        min_lexical: f32,
    },
}

impl Retrieval {
    /// The measured default: similarity + 1.0 × normalized BM25, words alone passing at 0.3.
    pub const HYBRID: Retrieval = Retrieval::Hybrid { lexical_weight: 1.0, min_lexical: 0.3 };

    pub fn as_str(self) -> &'static str {
        match self {
            Retrieval::Dense => "dense",
            Retrieval::Hybrid { .. } => "hybrid",
        }
    }
}

pub struct FunnelOutput {
    pub packed: Packed,
    pub trace: Trace,
    /// The survivors of the scope and temporal layers: what this caller may see and what is valid
    /// now. Triggers are evaluated on these (a caller fires only what it may see).
    pub current: SlotSet,
    /// What `current` would cost injected in full, in tokens (the console's token savings).
    pub visible_tokens: u64,
}

/// Runs the four layers over one tenant's index.
pub fn run(
    index: &TenantIndex,
    caller: &Caller,
    query: &SemanticQuery<'_>,
    settings: &FunnelSettings,
    now_ms: i64,
    detail: Detail,
) -> FunnelOutput {
    let mut trace = Trace::default();
    let detailed = detail.is_on();
    let visible = scope::visible(index, caller, detail, &mut trace);
    let (current, visible_tokens) =
        temporal::current(index, &visible, now_ms, &settings.schema_versions, detailed, &mut trace);
    let current = writers::admitted(index, current, settings.inject_writers, detailed, &mut trace);
    // A bounded scan keeps the best few similarity hits; a detailed trace names every removal
    // with its score, so it scans without a bound.
    let top = if detailed { TopK::ALL } else { TopK::for_cap(settings.max_items, settings.max_stubs) };
    let mut subject_slots = Vec::new();
    let query = &SemanticQuery { lift: settings.lift(index, caller, &mut subject_slots), ..*query };
    let matched =
        semantic::matching_within(index, &current, Some(&caller.scopes), query, top, detailed, &mut trace);
    let (floor, floor_high, left_out_tokens, bar) =
        (matched.floor, matched.floor_high, matched.left_out_tokens, matched.bar);
    let (hits, allowance) = with_neighbours(index, &current, query, settings, matched);
    admitted_by_the_semantic_layer(index, &hits, &mut trace);
    // A record the bounded scan left out could have been lifted by its neighbours: what it could
    // score is its floor plus the most that lift can be.
    let (floor, floor_high) = (floor.map(|f| f + allowance), floor_high.map(|f| f + allowance));
    if detailed {
        // What each layer let through, for `explain` and traces: the survivors' ids in the
        // layer's order (the semantic layer's with their scores).
        let ids = |set: &SlotSet| -> Vec<trace::Kept> {
            set.iter()
                .filter_map(|slot| index.slots[slot as usize].as_ref())
                .take(trace::MAX_LISTED)
                .map(|item| trace::Kept::id(item.head.id()))
                .collect()
        };
        let scored: Vec<trace::Kept> = hits
            .iter()
            .filter_map(|hit| index.slots[hit.slot as usize].as_ref().map(|item| (hit, item)))
            .take(trace::MAX_LISTED)
            .map(|(hit, item)| trace::Kept {
                // The similarity; none for an exact key or alias match, which ranks first anyway.
                score: (!hit.exact).then_some(hit.similarity),
                neighbour: hit.neighbours.is_some_and(|n| n.admitted).then_some(true),
                exact: Some(hit.exact),
                ..trace::Kept::id(item.head.id())
            })
            .collect();
        for (layer, kept) in [("scope", ids(&visible)), ("temporal", ids(&current)), ("semantic", scored)] {
            if let Some(entry) = trace.layers.iter_mut().find(|l| l.layer == layer) {
                entry.kept = kept;
            }
        }
    }
    let budget = Budget {
        tokens: settings.budget_tokens,
        max_items: settings.max_items,
        max_stubs: settings.max_stubs,
        cut: settings.cut,
    };
    let mut packed = density::pack(index, &hits, &budget, detailed, &mut trace);
    let settled = match packed_as_unbounded(&packed, &budget, floor, floor_high, left_out_tokens) {
        Bounded::Same => true,
        // A cut or a neighbour's lift ranks a hit by what ranks around it, which a scan for what
        // fits the room does not see.
        Bounded::RoomLeft(least)
            if budget.cut.is_off() && !neighbours::lifts(index, settings.neighbour_weight) =>
        {
            let scanned =
                semantic::Scanned { index, candidates: &current, scopes: &caller.scopes, query, bar };
            let kept = hits.iter().map(|hit| hit.slot).collect();
            let more = fill::fill(&scanned, &budget, &mut packed, kept, least, &mut trace);
            if let Some(more) = more {
                filled_from_the_left_out(&packed, more, &mut trace);
            }
            more.is_some()
        }
        Bounded::RoomLeft(_) | Bounded::Unproven => false,
    };
    if !settled {
        // Rare: the block holds a record that does not beat what was left out (ties at the
        // floor), or has room under a cut or beside neighbours' lift, or four rounds of filling
        // did not close it. Pack every hit instead.
        let mut again = Trace::default();
        let all = semantic::matching_within(
            index,
            &current,
            Some(&caller.scopes),
            query,
            TopK::ALL,
            false,
            &mut again,
        );
        trace.scanned += again.scanned;
        trace.scored += again.scored;
        trace.packed_every_hit = true;
        let (all, _) = with_neighbours(index, &current, query, settings, all);
        admitted_by_the_semantic_layer(index, &all, &mut again);
        let mut repacked = Trace::default();
        packed = density::pack(index, &all, &budget, false, &mut repacked);
        trace.layers.retain(|l| l.layer != "semantic" && l.layer != "token_density");
        trace.layers.extend(again.layers.into_iter().chain(repacked.layers));
    }
    if detailed && let Some(entry) = trace.layers.iter_mut().find(|l| l.layer == "token_density") {
        entry.kept = packed
            .injected
            .iter()
            .chain(&packed.stubs)
            .take(trace::MAX_LISTED)
            .map(|chosen| trace::Kept {
                tokens: Some(chosen.item.tokens),
                ..trace::Kept::id(chosen.item.head.id())
            })
            .collect();
    }
    if detailed {
        // What ranked each survivor where: each ranking's part, for `explain` and traces.
        trace.ranked = packed
            .injected
            .iter()
            .chain(&packed.stubs)
            .map(|chosen| trace::Ranked {
                id: chosen.item.head.id().to_string(),
                score: chosen.score.min(2.0),
                exact: chosen.exact,
                similarity: chosen.similarity,
                lexical: chosen.lexical.map(|l| trace::LexicalRank {
                    rank: l.rank,
                    bm25: l.bm25,
                    normalized: l.normalized,
                }),
                neighbours: chosen
                    .neighbours
                    .map(|n| trace::NeighbourRank { lift: n.lift, admitted: n.admitted }),
            })
            .collect();
    }
    FunnelOutput { packed, trace, current, visible_tokens }
}

/// The semantic layer's hits lifted by their neighbours (`neighbours`), and the most a record
/// the bounded scan left out could have been lifted: 1.5 × the weight × the best unlifted score
/// any candidate's neighbour can have — a hit's, or one below the bar whose words did not pass it
/// (the bar plus the lexical weight × `min_lexical`). A neighbour's own score is scored as the
/// layer would: its boosted similarity plus its words' part.
fn with_neighbours(
    index: &TenantIndex,
    current: &SlotSet,
    query: &SemanticQuery<'_>,
    settings: &FunnelSettings,
    matched: Matched,
) -> (Vec<Hit>, f32) {
    let Some(vector) = query.vector else { return (matched.hits, 0.0) };
    let (lexical_weight, min_lexical) =
        query.hybrid.map_or((0.0, 0.0), |h| (h.lexical_weight, h.min_lexical));
    let (words, bar) = (&matched.words, matched.bar);
    let own = |slot: u32| {
        let similarity = index.similarity(slot, vector)?;
        let word = words.binary_search_by_key(&slot, |(s, _)| *s).map_or(0.0, |at| words[at].1);
        Some((similarity, similarity + query.lift.boost.of(slot) + lexical_weight * word))
    };
    let weight = settings.neighbour_weight;
    // The least a record passes on by meaning under this release: a neighbour must reach it too.
    let floor = query.lift.standout.map_or(query.threshold, |standout| standout.floor);
    let (hits, best) = neighbours::lift(index, current, matched.hits, weight, floor, own);
    let allowance =
        best.map_or(0.0, |best| 1.5 * weight * best.max(bar + lexical_weight * min_lexical).max(0.0));
    (hits, allowance)
}

/// The neighbours let in count as the semantic layer's survivors, so each layer's output stays the
/// next one's input: they are no longer among its removals, and a note says how many came so.
fn admitted_by_the_semantic_layer(index: &TenantIndex, hits: &[Hit], trace: &mut Trace) {
    let admitted: Vec<&str> = hits
        .iter()
        .filter(|hit| hit.neighbours.is_some_and(|n| n.admitted))
        .filter_map(|hit| index.slots[hit.slot as usize].as_ref().map(|item| item.head.id()))
        .collect();
    if admitted.is_empty() {
        return;
    }
    if let Some(entry) = trace.layers.iter_mut().find(|l| l.layer == "semantic") {
        entry.output += admitted.len();
        entry.removed_count = entry.removed_count.saturating_sub(admitted.len());
        entry.removed.retain(|removed| !admitted.contains(&removed.id.as_str()));
    }
    trace
        .notes
        .push(format!("{} passed as neighbours of hits in their conversation or document", admitted.len()));
}

/// The hits the fill met count as the semantic layer's survivors and the density layer's input
/// (each layer's output stays the next one's input); the density layer's output is the block.
fn filled_from_the_left_out(packed: &Packed, more: usize, trace: &mut Trace) {
    if more == 0 {
        return;
    }
    for entry in trace.layers.iter_mut() {
        match entry.layer {
            "semantic" => {
                entry.output += more;
                entry.removed_count = entry.removed_count.saturating_sub(more);
            }
            "token_density" => {
                entry.input += more;
                entry.output = packed.injected.len() + packed.stubs.len();
                entry.removed_count = entry.input.saturating_sub(entry.output);
            }
            _ => {}
        }
    }
}

/// What the check of the bounded hits' block found.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Bounded {
    /// Packing every hit packs the same block.
    Same,
    /// The same, but for the room the block left, which a left-out hit may fit: the fewest
    /// tokens such a hit costs (`fill`).
    RoomLeft(usize),
    /// Not shown: pack every hit.
    Unproven,
}

/// Whether packing the bounded hits packed what packing every hit would. Everything the semantic
/// layer left out scored at most its floor, and the density layer ranks by that score first; so
/// when the block's records all beat the floor and the block is full — it holds `max_items`
/// records, or has less room left than the smallest left-out hit needs — no left-out hit could
/// have been injected; and when the stubs are all there and beat the high-priority floor (or no
/// high-priority hit was left out), no left-out hit could have been a stub. When all of that holds
/// but the block is not full, only a left-out hit that fits the room could change it: `RoomLeft`.
fn packed_as_unbounded(
    packed: &Packed,
    budget: &Budget,
    floor: Option<f32>,
    floor_high: Option<f32>,
    left_out_tokens: Option<usize>,
) -> Bounded {
    let beats = |chosen: &[density::Chosen], floor: f32| chosen.iter().all(|c| c.score > floor);
    let stubs = floor.is_none()
        || floor_high.is_none_or(|f| packed.stubs.len() >= budget.max_stubs && beats(&packed.stubs, f));
    let Some(floor) = floor else { return Bounded::Same };
    if !stubs || !beats(&packed.injected, floor) {
        return Bounded::Unproven;
    }
    match left_out_tokens {
        _ if packed.injected.len() >= budget.max_items => Bounded::Same,
        Some(least) if budget.tokens.saturating_sub(packed.tokens) < least => Bounded::Same,
        Some(least) => Bounded::RoomLeft(least),
        // A hit was left out without its cost known: it may fit.
        None => Bounded::RoomLeft(0),
    }
}
