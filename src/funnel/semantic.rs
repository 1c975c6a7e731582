//! Layer: semantic. A record passes when the query names it exactly (its key, an alias, an
//! identifier in its content — see `terms`), or when the similarity of its embedding to the
//! query's reaches the bar: the release's threshold, or for a release with a standout rule the
//! mean of the caller's candidates plus `z` deviations, never below the rule's floor
//! (`background`; a subject's own records count with their boost). Small candidate sets are
//! scanned in full; large ones go through the tenant's approximate index, filtered to the
//! candidates.
//!
//! Both scans read the int8 rows (`quant`), the index's one copy of the embeddings: a candidate
//! whose int8 score cannot reach the bar, by a proven bound, is dropped; the rest are scored with
//! the f32 query against their row (`TenantIndex::similarity`), and that score decides and is
//! reported.
//!
//! The layer keeps a bounded number of similarity hits (`TopK`: a few times the density layer's
//! item cap), in two small heaps during the scan — the best overall and the best of priority 4–5
//! (the density layer's stubs) — so its cost does not grow with how many records pass a low
//! threshold: candidates are scored in the order of their int8 bounds, best first, and once a
//! heap is full its worst score is the bar a candidate's bound must reach, so the scan stops
//! after about the best few (`best`). Exact matches and word hits are kept as before. What the
//! heaps left out scored at most their floor (`Matched::floor`), which lets the funnel check that
//! packing the kept hits packed what packing every hit would (`funnel::run`).
//!
//! Large scopes have their own approximate index (`index`): above `EXACT_SCAN_MAX` candidates,
//! the caller's scopes that have one are probed, and the candidates of its other scopes are
//! scanned exactly, so a request reads rows of what the caller may see, never of other callers'
//! scopes.
//!
//! Hybrid releases (`Retrieval::Hybrid`) rank by words too: the tenant's BM25 index (`lexical`)
//! is searched over the same candidates, each word hit the dense scan did not score gets its exact
//! similarity, and the two are fused (`lexical::fusion`: similarity + weight × normalized BM25).
//! A record passes on meaning (similarity ≥ threshold) or on words (normalized BM25 ≥
//! `min_lexical`), and the density layer packs in fused order. Every hit keeps each ranking's
//! part, which `explain` shows.

use super::background::{self, Boost, Standout};
use super::best::{Best, NO_ROW, Pending};
use super::trace::{LayerLog, Trace};
use crate::index::terms::query_phrases;
use crate::index::{TenantIndex, VectorKind};
use crate::lexical::LexicalQuery;
use crate::lexical::fusion::{self, Fusion, Gate};
use crate::slots::SlotSet;
use crate::vector::ivf::Probes;
use crate::vector::quant::{QuantizedQuery, reaches};

/// Up to this many candidates an exact scan is used (well under a millisecond on int8 rows);
/// above it, the approximate index. Measured in docs/benchmarks-memory.md §1.
pub const EXACT_SCAN_MAX: usize = 4096;

/// How many lists of the approximate index a query scans: a share of them, so that a query
/// reads about that share of a large scope's rows whatever its size (`Probes::Share`).
/// At 100,000 records (`public`'s 423 lists, funnel_bench, release): 10 % of the lists gave a
/// recall@5 against the exact scan of 0.977–0.979 and a semantic layer of ~1.1 ms p50; 64 fixed
/// probes (15 %) gave 0.985 at ~1.6 ms, 6 % gave 0.964.
pub const DEFAULT_PROBES: Probes = Probes::Share { share: 0.10, min: 16 };

/// A record that passed, with why.
#[derive(Debug, Clone, Copy)]
pub struct Hit {
    pub slot: u32,
    /// Cosine similarity; 1.0 for an exact match.
    pub similarity: f32,
    pub exact: bool,
    /// What the density layer ranks by: the similarity, or for hybrid releases the fused score
    /// (an exact match first either way).
    pub score: f32,
    /// The lexical ranking's part (hybrid releases): rank, BM25 score and its normalized form.
    pub lexical: Option<LexicalPart>,
    /// What the record's neighbours in its thread added to `score` (`funnel::neighbours`), and
    /// whether it passed only as one of them.
    pub neighbours: Option<NeighbourPart>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NeighbourPart {
    pub lift: f32,
    /// Let in as the neighbour of a hit, not on its own meaning or words.
    pub admitted: bool,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LexicalPart {
    pub rank: u32,
    pub bm25: f32,
    pub normalized: f32,
}

#[derive(Clone, Copy)]
pub struct SemanticQuery<'a> {
    pub text: &'a str,
    /// `None` when the query could not be embedded: only exact matches can pass.
    pub vector: Option<&'a [f32]>,
    pub threshold: f32,
    pub probes: Probes,
    /// Hybrid releases: the query's words and how to fuse the two rankings.
    pub hybrid: Option<Hybrid<'a>>,
    /// What moves the bar and the scores beyond the threshold: the caller's own records' boost,
    /// and a release's standout rule (`Lift::NONE`: the threshold alone).
    pub lift: Lift<'a>,
}

/// A release's rules on top of the similarity threshold (`funnel::background`).
#[derive(Debug, Clone, Copy)]
pub struct Lift<'a> {
    /// Records pass on meaning only at `z` standard deviations above the mean similarity of the
    /// caller's candidates, and at the rule's floor.
    pub standout: Option<Standout>,
    /// Added to the similarity of the caller's own subject's records.
    pub boost: Boost<'a>,
}

impl Lift<'_> {
    pub const NONE: Lift<'static> = Lift { standout: None, boost: Boost::NONE };
}

/// How a hybrid release ranks by words too.
#[derive(Clone, Copy)]
pub struct Hybrid<'a> {
    pub query: &'a LexicalQuery,
    pub lexical_weight: f32,
    /// Normalized BM25 at or above which words alone pass a record.
    pub min_lexical: f32,
}

/// How many word hits a query reads (docs/hybrid-retrieval.md: the top 100 lose nothing the
/// budget could hold).
const LEXICAL_K: usize = 100;
/// An exact match ranks above any fused score (similarity ≤ 1 plus weight × normalized < 1).
const EXACT_SCORE: f32 = 1.0e6;

impl Hit {
    /// A similarity hit: `score` is the similarity with the caller's boost.
    fn dense(slot: u32, similarity: f32, score: f32) -> Hit {
        Hit { slot, similarity, exact: false, score, lexical: None, neighbours: None }
    }

    fn exact(slot: u32) -> Hit {
        Hit { slot, similarity: 1.0, exact: true, score: EXACT_SCORE, lexical: None, neighbours: None }
    }
}

/// How many similarity hits the layer keeps: the best `best`, and the best `high_priority` of
/// priority 4–5 (which the density layer may turn into stubs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopK {
    pub best: usize,
    pub high_priority: usize,
}

impl TopK {
    /// Every hit: today's unbounded layer (a detailed trace, a search tool).
    pub const ALL: TopK = TopK { best: usize::MAX, high_priority: 0 };

    /// For a release that injects at most `max_items` records and `max_stubs` stubs: four times
    /// the cap (at least 64) overall, so the density layer rarely runs out of fitting hits, and
    /// every high-priority hit that can become a stub.
    pub fn for_cap(max_items: usize, max_stubs: usize) -> TopK {
        TopK { best: (4 * max_items).max(64), high_priority: (max_items + max_stubs).max(16) }
    }
}

/// The layer's hits and what its bounds left out.
pub struct Matched {
    pub hits: Vec<Hit>,
    /// When the best-overall heap left a similarity hit out: the highest score it could have had.
    pub floor: Option<f32>,
    /// The same for the heap of priority 4–5 hits.
    pub floor_high: Option<f32>,
    /// Every word hit's normalized BM25 (hybrid releases), by slot: what a neighbour's score
    /// takes its words' part from.
    pub words: Vec<(u32, f32)>,
    /// The bar similarities had to reach: the threshold, or higher where the release asks records
    /// to stand out.
    pub bar: f32,
    /// When a heap left a hit out: the fewest tokens such a hit costs (its record's token count
    /// as `SlotMeta` keeps it). A block with less room than that could not have taken any of them.
    pub left_out_tokens: Option<usize>,
}

/// Every hit (no bound): what a full scan lets through.
pub fn matching(
    index: &TenantIndex,
    candidates: &SlotSet,
    query: &SemanticQuery<'_>,
    detailed: bool,
    trace: &mut Trace,
) -> Vec<Hit> {
    matching_within(index, candidates, None, query, TopK::ALL, detailed, trace).hits
}

/// The layer as the funnel runs it: `scopes` are the caller's (whose approximate indexes may be
/// probed; `None`: every scope's), `top` bounds the similarity hits kept. A detailed trace names
/// every removal with its score, so it should ask for `TopK::ALL`.
pub fn matching_within(
    index: &TenantIndex,
    candidates: &SlotSet,
    scopes: Option<&std::collections::BTreeSet<String>>,
    query: &SemanticQuery<'_>,
    top: TopK,
    detailed: bool,
    trace: &mut Trace,
) -> Matched {
    let input = candidates.len();
    let mut log = LayerLog::new("semantic", input, detailed);
    let mut hits: Vec<Hit> = Vec::new();

    for phrase in query_phrases(query.text) {
        for slot in index.by_term.get(phrase.as_str()).into_iter().flatten() {
            if candidates.contains(*slot) {
                hits.push(Hit::exact(*slot));
            }
        }
    }

    let boost = query.lift.boost;
    // The bar a (boosted) similarity must reach: the threshold, raised to stand out from the
    // caller's candidates where the release asks for it.
    let bar = match (query.lift.standout, query.vector) {
        (Some(standout), Some(vector)) => background::sample(index, candidates, vector, &boost)
            .map_or(query.threshold, |background| standout.floor.max(background.bar(standout.z))),
        _ => query.threshold,
    };
    let mut best = Best::new(top.best);
    let mut high = Best::new(top.high_priority);
    // Whether every candidate with an embedding was scored, so a detailed trace can give each
    // removed one its score; the approximate index scores only the lists it probes.
    let scored_all = match query.vector {
        Some(vector) => {
            let scan = Scan { index, candidates, scopes, vector, probes: query.probes, bar, boost };
            scan.run(|_| true, &mut best, &mut high, trace)
        }
        None => {
            trace.notes.push("the query has no embedding: only exact matches could pass".into());
            false
        }
    };
    let (floor, floor_high) = (best.left_out(), high.left_out());
    let left_out_tokens =
        [best.dropped_tokens, high.dropped_tokens].into_iter().flatten().min().map(usize::from);
    hits.extend(
        best.into_slots()
            .chain(high.into_slots())
            .map(|(slot, score)| Hit::dense(slot, score - boost.of(slot), score)),
    );

    // One hit per slot; an exact match wins over a similarity. Hits of one slot and kind are
    // equal (the same exact match, or the same score in both heaps), so any sort keeps the same.
    hits.sort_unstable_by_key(|h| (h.slot, !h.exact));
    hits.dedup_by_key(|h| h.slot);
    let mut word_scores: Vec<(u32, f32)> = Vec::new();
    if let Some(hybrid) = &query.hybrid {
        hits = fuse_words(index, candidates, query, hybrid, bar, hits, &mut word_scores);
    }

    if detailed {
        let removed = candidates.iter().filter(|slot| hits.binary_search_by_key(slot, |h| h.slot).is_err());
        for slot in removed {
            if !log.wants_detail() {
                break;
            }
            let Some(item) = index.slots[slot as usize].as_ref() else { continue };
            let score = match query.vector {
                Some(q) if scored_all => index.similarity(slot, q),
                _ => None,
            };
            let words = query.hybrid.map(|h| {
                let normalized = word_scores.iter().find(|(s, _)| *s == slot).map_or(0.0, |(_, n)| *n);
                format!("; words {normalized:.3} below {:.3}", h.min_lexical)
            });
            let words = words.unwrap_or_default();
            log.remove(item.head.id(), || match score {
                Some(score) => format!("similarity {score:.3} below {bar:.3}{words}"),
                None if !index.has_vector(slot) => format!("no embedding yet{words}"),
                None => format!("similarity below {bar:.3}{words}"),
            });
        }
    }
    log.finish_by_difference(hits.len(), trace);
    word_scores.sort_unstable_by_key(|(slot, _)| *slot);
    Matched { hits, floor, floor_high, words: word_scores, bar, left_out_tokens }
}

/// What `matching_within` scanned, to scan it again (`more_within`).
pub struct Scanned<'a> {
    pub index: &'a TenantIndex,
    pub candidates: &'a SlotSet,
    pub scopes: &'a std::collections::BTreeSet<String>,
    pub query: &'a SemanticQuery<'a>,
    /// `Matched::bar`.
    pub bar: f32,
}

/// The best `cap` similarity hits among the candidates that `eligible` lets in, scanned as
/// `matching_within` scanned the same candidates (the same approximate indexes or the same exact
/// scan, the same bar and boost), by meaning alone: a record that is not among the query's word
/// hits ranks by its similarity in a hybrid release too. With them, when more reached the bar:
/// the highest score a hit left out could have, and the fewest tokens one costs. What the funnel
/// fills a block's room from (`funnel::fill`).
pub fn more_within(
    scanned: &Scanned<'_>,
    cap: usize,
    eligible: impl Fn(u32) -> bool,
    trace: &mut Trace,
) -> (Vec<Hit>, Option<(f32, usize)>) {
    let Scanned { index, candidates, scopes, query, bar } = *scanned;
    let Some(vector) = query.vector else { return (Vec::new(), None) };
    let boost = query.lift.boost;
    let (mut best, mut high) = (Best::new(cap), Best::new(0));
    let scan = Scan { index, candidates, scopes: Some(scopes), vector, probes: query.probes, bar, boost };
    scan.run(eligible, &mut best, &mut high, trace);
    let left_out = best.left_out().zip(best.dropped_tokens.map(usize::from));
    let hits =
        best.into_slots().map(|(slot, score)| Hit::dense(slot, score - boost.of(slot), score)).collect();
    (hits, left_out)
}

/// One similarity scan of the candidates into the heaps.
struct Scan<'a> {
    index: &'a TenantIndex,
    candidates: &'a SlotSet,
    /// The caller's scopes, whose approximate indexes may be probed (`None`: every scope's).
    scopes: Option<&'a std::collections::BTreeSet<String>>,
    vector: &'a [f32],
    probes: Probes,
    /// The (boosted) similarity a hit must reach.
    bar: f32,
    boost: Boost<'a>,
}

impl Scan<'_> {
    /// Offers every candidate that `eligible` lets in, and that reaches the bar, to the heaps.
    /// Whether a scan reads the approximate indexes or every row depends only on the candidates
    /// and the scopes, so two scans of the same candidates meet the same records. Returns
    /// whether every candidate was scored (the exact path).
    ///
    /// Two passes. The first bounds each candidate's score by its int8 row (`reaches`) and keeps
    /// those that may reach the bar. The second scores them exactly in the order of their bounds,
    /// highest first, and stops at the first whose bound cannot reach the heaps' floors: what is
    /// left could not have been kept. Scored in slot order instead, a scan under a low bar scored
    /// most rows, each beating a floor that rose only as the heaps filled; in the bounds' order
    /// the floor is the best rows' from the start. The heaps keep the same hits either way
    /// (`Best` breaks ties by slot, not by arrival).
    fn run(
        &self,
        eligible: impl Fn(u32) -> bool,
        best: &mut Best,
        high: &mut Best,
        trace: &mut Trace,
    ) -> bool {
        let Scan { index, candidates, scopes, vector, probes, bar, boost } = *self;
        let input = candidates.len();
        let quantized = QuantizedQuery::new(vector);
        let meta = index.meta();
        let rows = index.int8_rows().filter(|rows| rows.dims() == vector.len());
        let mut scanned = 0usize;
        let mut pending: Vec<Pending> = Vec::new();
        // Bounds one candidate's boosted score (the heaps hold boosted scores) and keeps it when
        // the bound reaches the bar. `at` is the row's position when the caller knows it (an IVF
        // entry, whose row is int8): then the slot's meta is read only for a row whose bound
        // reaches the bar, so a probed list is read as its rows alone, in order.
        let mut bound = |slot: u32, at: Option<usize>| {
            if !eligible(slot) {
                return;
            }
            let at = match at {
                Some(at) => Some(at),
                None => match (meta[slot as usize].vector, rows) {
                    (VectorKind::None, _) => return,
                    (VectorKind::Int8, Some(rows)) => rows.position(slot as usize),
                    _ => None, // only an f32 vector to compare: score it exactly
                },
            };
            let upper = match (at, rows) {
                (Some(at), Some(rows)) => {
                    scanned += 1;
                    let upper = rows.upper_bound_at(at, &quantized) + boost.of(slot);
                    if !reaches(upper, bar) {
                        return;
                    }
                    // A vector that is not finite bounds nothing: scored first, like one
                    // without a row.
                    if upper.is_nan() { f32::INFINITY } else { upper }
                }
                _ => f32::INFINITY,
            };
            let m = &meta[slot as usize];
            pending.push(Pending {
                upper,
                slot,
                at: at.map_or(NO_ROW, |at| at as u32),
                tokens: m.tokens,
                high_priority: m.priority >= 4,
            });
        };
        let probed: Vec<(&String, &crate::vector::ivf::Ivf)> = match scopes {
            _ if input <= EXACT_SCAN_MAX => Vec::new(),
            Some(scopes) => scopes.iter().filter_map(|s| index.ann.get_key_value(s)).collect(),
            None => index.ann.iter().collect(),
        };
        let probed: Vec<_> = probed.into_iter().filter(|(_, ann)| ann.dims() == vector.len()).collect();
        let scored_all = probed.is_empty();
        if scored_all {
            for slot in candidates.iter() {
                bound(slot, None);
            }
        } else {
            // A record in two probed scopes is met twice: bound it once.
            let mut seen = SlotSet::new(index.slots.len());
            let mut rest = candidates.clone();
            for (scope, ann) in &probed {
                if let Some(members) = index.ann_members(scope) {
                    rest = rest.and_not(members);
                }
                for entry in ann.probe(&quantized, probes).flatten() {
                    let slot = entry.slot;
                    if candidates.contains(slot) && !seen.contains(slot) {
                        seen.insert(slot);
                        debug_assert!(
                            rows.is_none_or(|r| r.key_at(entry.position as usize) == Some(slot as usize)),
                            "the IVF entry of slot {slot} points at another row"
                        );
                        bound(slot, rows.map(|_| entry.position as usize));
                    }
                }
            }
            for slot in rest.iter() {
                bound(slot, None);
            }
        }

        let mut pending = std::collections::BinaryHeap::from(pending);
        let mut scored = 0usize;
        while let Some(&next) = pending.peek() {
            // Nothing whose bound is below both floors can be kept, and no bound that follows is
            // higher.
            if !reaches(next.upper, bar.max(best.floor().min(high.floor()))) {
                break;
            }
            pending.pop();
            let floor = if next.high_priority { best.floor().min(high.floor()) } else { best.floor() };
            if !reaches(next.upper, bar.max(floor)) {
                // Out for the best heap's floor, not for the bar: a hit left out, whose score is
                // at most its bound.
                best.rule_out(next.upper, next.tokens);
                continue;
            }
            let score = match rows {
                Some(rows) if next.at != NO_ROW => rows.score_at(next.at as usize, vector),
                _ => match index.similarity(next.slot, vector) {
                    Some(score) => score,
                    None => continue,
                },
            };
            scored += 1;
            let score = score + boost.of(next.slot);
            if score >= bar {
                best.offer(next.slot, score, next.tokens);
                if next.high_priority {
                    high.offer(next.slot, score, next.tokens);
                }
            }
        }
        // What is left reached the bar but neither floor: hits left out, by their bounds.
        for left in pending.iter() {
            best.rule_out(left.upper, left.tokens);
            if left.high_priority {
                high.rule_out(left.upper, left.tokens);
            }
        }
        trace.scanned += scanned;
        trace.scored += scored;
        scored_all
    }
}

/// The hybrid step: the dense hits (exact matches and similarities at or above the threshold)
/// fused with the best word hits among the same candidates. A word hit the dense scan did not
/// score gets its exact similarity (one dot product). Returns the hits that pass the gate, in
/// slot order, each with its fused score and lexical part; `word_scores` gets every word hit's
/// normalized score, for a detailed trace's reasons.
fn fuse_words(
    index: &TenantIndex,
    candidates: &SlotSet,
    query: &SemanticQuery<'_>,
    hybrid: &Hybrid<'_>,
    bar: f32,
    dense_hits: Vec<Hit>,
    word_scores: &mut Vec<(u32, f32)>,
) -> Vec<Hit> {
    let boost = query.lift.boost;
    let words = index.lexical.search(hybrid.query, candidates, LEXICAL_K);
    word_scores.extend(words.iter().map(|w| (w.slot, w.normalized)));
    // Fused on the boosted similarity (a dense hit's score), so the caller's own records keep
    // their boost through the fusion and the gate.
    let mut dense: Vec<(u32, f32)> =
        dense_hits.iter().filter(|h| !h.exact).map(|h| (h.slot, h.score)).collect();
    for word in &words {
        if dense_hits.binary_search_by_key(&word.slot, |h| h.slot).is_ok() {
            continue;
        }
        let similarity = query.vector.and_then(|q| index.similarity(word.slot, q)).unwrap_or(0.0);
        dense.push((word.slot, similarity + boost.of(word.slot)));
    }
    let fusion = Fusion::Weighted { dense_weight: 1.0, lexical_weight: hybrid.lexical_weight };
    let gate = Gate { min_similarity: bar, min_lexical: hybrid.min_lexical, min_fused: f32::NEG_INFINITY };
    let mut hits: Vec<Hit> = dense_hits.iter().filter(|h| h.exact).copied().collect();
    // Each word hit's rank, by slot, for a binary search per fused hit.
    let mut ranks: Vec<(u32, usize)> = words.iter().enumerate().map(|(rank, w)| (w.slot, rank)).collect();
    ranks.sort_unstable();
    let lexical_of = |slot: u32| {
        let at = ranks.binary_search_by_key(&slot, |(s, _)| *s).ok()?;
        let rank = ranks[at].1;
        let w = &words[rank];
        Some(LexicalPart { rank: rank as u32 + 1, bm25: w.score, normalized: w.normalized })
    };
    for hit in &mut hits {
        hit.lexical = lexical_of(hit.slot);
    }
    // The exact matches, in slot order (the dense hits were): a fused hit of the same slot is
    // skipped by a binary search, not by a scan of every hit so far, which made this quadratic
    // in the hits when thousands pass a low threshold (100,000 records: hundreds of ms).
    let exact_slots: Vec<u32> = hits.iter().map(|h| h.slot).collect();
    for fused in fusion::select(fusion::fuse(&dense, &words, fusion), &gate) {
        if exact_slots.binary_search(&fused.slot).is_ok() {
            continue;
        }
        hits.push(Hit {
            slot: fused.slot,
            similarity: fused.similarity() - boost.of(fused.slot),
            exact: false,
            score: fused.score,
            lexical: lexical_of(fused.slot),
            neighbours: None,
        });
    }
    // Each slot is here once: an unstable sort gives the one order.
    hits.sort_unstable_by_key(|h| h.slot);
    hits
}
