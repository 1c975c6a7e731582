//! Layer: semantic. A record passes when the query names it exactly (its key, an alias, an
//! identifier in its content — see `terms`), or when the similarity of its embedding to the
//! query's is at least the release's threshold. Small candidate sets are scanned exactly; large
//! ones go through the tenant's approximate index, filtered to the candidates.

use super::index::TenantIndex;
use super::ivf::dot;
use super::terms::query_phrases;
use super::trace::{LayerLog, Trace};
use std::collections::HashMap;

/// Up to this many candidates an exact scan is used (it costs well under a millisecond); above
/// it, the approximate index. Measured in docs/benchmarks.md.
pub const EXACT_SCAN_MAX: usize = 4096;

/// How many lists of the approximate index a query scans.
pub const DEFAULT_PROBES: usize = 24;

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
    candidates: &[u32],
    query: &SemanticQuery<'_>,
    detailed: bool,
    trace: &mut Trace,
) -> Vec<Hit> {
    let mut log = LayerLog::new("semantic", candidates.len(), detailed);
    let mut is_candidate = vec![false; index.slots.len()];
    for slot in candidates {
        is_candidate[*slot as usize] = true;
    }
    let mut hits: HashMap<u32, Hit> = HashMap::new();

    for phrase in query_phrases(query.text) {
        for slot in index.by_term.get(&phrase).into_iter().flatten() {
            if is_candidate[*slot as usize] {
                hits.insert(*slot, Hit { slot: *slot, similarity: 1.0, exact: true });
            }
        }
    }

    let mut scores: HashMap<u32, f32> = HashMap::new();
    if let Some(vector) = query.vector {
        match &index.ann {
            Some(ann) if candidates.len() > EXACT_SCAN_MAX => {
                for (slot, score) in
                    ann.search(vector, query.probes, query.threshold, |s| is_candidate[s as usize])
                {
                    hits.entry(slot).or_insert(Hit { slot, similarity: score, exact: false });
                }
            }
            _ => {
                for slot in candidates {
                    let Some(item) = index.slots[*slot as usize].as_ref() else { continue };
                    let Some(record_vector) = item.vector.as_deref() else { continue };
                    let score = dot(vector, record_vector);
                    if detailed {
                        scores.insert(*slot, score);
                    }
                    if score >= query.threshold {
                        hits.entry(*slot).or_insert(Hit { slot: *slot, similarity: score, exact: false });
                    }
                }
            }
        }
    } else {
        trace.notes.push("the query has no embedding: only exact matches could pass".into());
    }

    for slot in candidates {
        if hits.contains_key(slot) {
            continue;
        }
        let Some(item) = index.slots[*slot as usize].as_ref() else { continue };
        log.remove(&item.record.id, || match scores.get(slot) {
            Some(score) => format!("similarity {score:.3} below {:.3}", query.threshold),
            None if item.vector.is_none() => "no embedding yet".into(),
            None => format!("similarity below {:.3}", query.threshold),
        });
    }
    let mut hits: Vec<Hit> = hits.into_values().collect();
    hits.sort_by_key(|h| h.slot);
    log.finish(hits.len(), trace);
    hits
}
