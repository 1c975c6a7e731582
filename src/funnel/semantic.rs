//! Layer: semantic. A record passes when the query names it exactly (its key, an alias, an
//! identifier in its content — see `terms`), or when the similarity of its embedding to the
//! query's is at least the release's threshold. Small candidate sets are scanned in full; large
//! ones go through the tenant's approximate index, filtered to the candidates.
//!
//! Both scans read int8 copies of the embeddings (`quant`): a candidate whose int8 score cannot
//! reach the threshold, by a proven bound, is dropped; the rest are scored with their f32 vector,
//! and that score decides and is reported. So the hits and similarities are exactly those of an
//! f32 scan over the same records, at a quarter of the memory read.
//!
//! Hybrid releases (`Retrieval::Hybrid`) rank by words too: the tenant's BM25 index (`lexical`)
//! is searched over the same candidates, each word hit the dense scan did not score gets its exact
//! similarity, and the two are fused (`lexical::fusion`: similarity + weight × normalized BM25).
//! A record passes on meaning (similarity ≥ threshold) or on words (normalized BM25 ≥
//! `min_lexical`), and the density layer packs in fused order. Every hit keeps each ranking's
//! part, which `explain` shows.

use super::trace::{LayerLog, Trace};
use crate::index::terms::query_phrases;
use crate::index::{TenantIndex, VectorKind};
use crate::lexical::LexicalQuery;
use crate::lexical::fusion::{self, Fusion, Gate};
use crate::slots::SlotSet;
use crate::vector::dot;
use crate::vector::quant::QuantizedQuery;

/// Up to this many candidates an exact scan is used (well under a millisecond on int8 rows);
/// above it, the approximate index. Measured in docs/benchmarks-memory.md §1.
pub const EXACT_SCAN_MAX: usize = 4096;

/// How many lists of the approximate index a query scans: ~10 % of a 100,000-record tenant's
/// vectors (2√n lists), for a recall@5 against the exact scan of about 0.96 on the benchmark's
/// vectors (docs/benchmarks-memory.md §1).
pub const DEFAULT_PROBES: usize = 64;

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
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LexicalPart {
    pub rank: u32,
    pub bm25: f32,
    pub normalized: f32,
}

pub struct SemanticQuery<'a> {
    pub text: &'a str,
    /// `None` when the query could not be embedded: only exact matches can pass.
    pub vector: Option<&'a [f32]>,
    pub threshold: f32,
    pub probes: usize,
    /// Hybrid releases: the query's words and how to fuse the two rankings.
    pub hybrid: Option<Hybrid<'a>>,
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
    fn dense(slot: u32, similarity: f32) -> Hit {
        Hit { slot, similarity, exact: false, score: similarity, lexical: None }
    }

    fn exact(slot: u32) -> Hit {
        Hit { slot, similarity: 1.0, exact: true, score: EXACT_SCORE, lexical: None }
    }
}

pub fn matching(
    index: &TenantIndex,
    candidates: &SlotSet,
    query: &SemanticQuery<'_>,
    detailed: bool,
    trace: &mut Trace,
) -> Vec<Hit> {
    let input = candidates.len();
    let mut log = LayerLog::new("semantic", input, detailed);
    let mut hits: Vec<Hit> = Vec::new();

    for phrase in query_phrases(query.text) {
        for slot in index.by_term.get(&phrase).into_iter().flatten() {
            if candidates.contains(*slot) {
                hits.push(Hit::exact(*slot));
            }
        }
    }

    // Whether every candidate with an embedding was scored, so a detailed trace can give each
    // removed one its score; the approximate index scores only the lists it probes.
    let mut scored_all = false;
    if let Some(vector) = query.vector {
        let quantized = QuantizedQuery::new(vector);
        // The exact similarity, which alone decides and is reported.
        let exact = |slot: u32| {
            let item = index.slots[slot as usize].as_ref()?;
            let score = dot(vector, item.vector.as_deref()?);
            (score >= query.threshold).then_some(Hit::dense(slot, score))
        };
        match &index.ann {
            Some(ann) if input > EXACT_SCAN_MAX && ann.dims() == vector.len() => {
                let near = ann.search(&quantized, query.probes, query.threshold, |s| candidates.contains(s));
                hits.extend(near.into_iter().filter_map(exact));
            }
            _ => {
                scored_all = true;
                let meta = index.meta();
                let rows = index.int8_rows().filter(|rows| rows.dims() == vector.len());
                for slot in candidates.iter() {
                    let may_reach = match (meta[slot as usize].vector, rows) {
                        (VectorKind::None, _) => false,
                        (VectorKind::Int8, Some(rows)) => {
                            rows.may_reach(slot as usize, &quantized, query.threshold)
                        }
                        _ => true, // only an f32 vector to compare: score it exactly
                    };
                    if may_reach {
                        hits.extend(exact(slot));
                    }
                }
            }
        }
    } else {
        trace.notes.push("the query has no embedding: only exact matches could pass".into());
    }

    // One hit per slot; an exact match (pushed first) wins over a similarity.
    hits.sort_by_key(|h| (h.slot, !h.exact));
    hits.dedup_by_key(|h| h.slot);
    let mut word_scores: Vec<(u32, f32)> = Vec::new();
    if let Some(hybrid) = &query.hybrid {
        hits = fuse_words(index, candidates, query, hybrid, hits, &mut word_scores);
    }

    if detailed {
        let removed = candidates.iter().filter(|slot| hits.binary_search_by_key(slot, |h| h.slot).is_err());
        for slot in removed {
            if !log.wants_detail() {
                break;
            }
            let Some(item) = index.slots[slot as usize].as_ref() else { continue };
            let score = match (query.vector, item.vector.as_deref()) {
                (Some(q), Some(v)) if scored_all => Some(dot(q, v)),
                _ => None,
            };
            let words = query.hybrid.map(|h| {
                let normalized = word_scores.iter().find(|(s, _)| *s == slot).map_or(0.0, |(_, n)| *n);
                format!("; words {normalized:.3} below {:.3}", h.min_lexical)
            });
            let words = words.unwrap_or_default();
            log.remove(&item.record.id, || match score {
                Some(score) => format!("similarity {score:.3} below {:.3}{words}", query.threshold),
                None if item.vector.is_none() => format!("no embedding yet{words}"),
                None => format!("similarity below {:.3}{words}", query.threshold),
            });
        }
    }
    log.finish_by_difference(hits.len(), trace);
    hits
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
    dense_hits: Vec<Hit>,
    word_scores: &mut Vec<(u32, f32)>,
) -> Vec<Hit> {
    let words = index.lexical.search(hybrid.query, candidates, LEXICAL_K);
    word_scores.extend(words.iter().map(|w| (w.slot, w.normalized)));
    let mut dense: Vec<(u32, f32)> =
        dense_hits.iter().filter(|h| !h.exact).map(|h| (h.slot, h.similarity)).collect();
    for word in &words {
        if dense_hits.binary_search_by_key(&word.slot, |h| h.slot).is_ok() {
            continue;
        }
        let similarity = match (
            query.vector,
            index.slots[word.slot as usize].as_ref().and_then(|i| i.vector.as_deref()),
        ) {
            (Some(q), Some(v)) => dot(q, v),
            _ => 0.0,
        };
        dense.push((word.slot, similarity));
    }
    let fusion = Fusion::Weighted { dense_weight: 1.0, lexical_weight: hybrid.lexical_weight };
    let gate = Gate {
        min_similarity: query.threshold,
        min_lexical: hybrid.min_lexical,
        min_fused: f32::NEG_INFINITY,
    };
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
            similarity: fused.similarity(),
            exact: false,
            score: fused.score,
            lexical: lexical_of(fused.slot),
        });
    }
    hits.sort_by_key(|h| h.slot);
    hits
}
