//! Layer: semantic. A record passes when the query names it exactly (its key, an alias, an
//! identifier in its content — see `terms`), or when the similarity of its embedding to the
//! query's is at least the release's threshold. Small candidate sets are scanned in full; large
//! ones go through the tenant's approximate index, filtered to the candidates.
//!
//! Both scans read int8 copies of the embeddings (`quant`): a candidate whose int8 score cannot
//! reach the threshold, by a proven bound, is dropped; the rest are scored with their f32 vector,
//! and that score decides and is reported. So the hits and similarities are exactly those of an
//! f32 scan over the same records, at a quarter of the memory read.

use super::index::{TenantIndex, VectorKind};
use super::ivf::dot;
use super::quant::QuantizedQuery;
use super::slots::SlotSet;
use super::terms::query_phrases;
use super::trace::{LayerLog, Trace};

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
}

pub struct SemanticQuery<'a> {
    pub text: &'a str,
    /// `None` when the query could not be embedded: only exact matches can pass.
    pub vector: Option<&'a [f32]>,
    pub threshold: f32,
    pub probes: usize,
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
                hits.push(Hit { slot: *slot, similarity: 1.0, exact: true });
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
            (score >= query.threshold).then_some(Hit { slot, similarity: score, exact: false })
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
            log.remove(&item.record.id, || match score {
                Some(score) => format!("similarity {score:.3} below {:.3}", query.threshold),
                None if item.vector.is_none() => "no embedding yet".into(),
                None => format!("similarity below {:.3}", query.threshold),
            });
        }
    }
    log.finish_by_difference(hits.len(), trace);
    hits
}
