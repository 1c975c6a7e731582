//! Layer: token density. Best first — the semantic layer's score (the similarity, or a hybrid
//! release's fused score; an exact match first), then priority, then the most recently updated —
//! records are taken until the release's token budget or item cap is reached. A record of priority 4 or 5 that does not fit becomes a one-line stub with its id (up
//! to `max_stubs`), so the model knows it exists; everything left out is counted as overflow.

use super::semantic::Hit;
use super::trace::{LayerLog, Trace};
use crate::index::{IndexedRecord, TenantIndex};
use std::sync::Arc;

#[derive(Clone)]
pub struct Chosen {
    pub item: Arc<IndexedRecord>,
    pub similarity: f32,
    pub exact: bool,
    /// What it was ranked by (the similarity, or the fused score of a hybrid release).
    pub score: f32,
    pub lexical: Option<super::semantic::LexicalPart>,
}

pub struct Budget {
    pub tokens: usize,
    pub max_items: usize,
    pub max_stubs: usize,
}

pub struct Packed {
    pub injected: Vec<Chosen>,
    pub stubs: Vec<Chosen>,
    pub overflow: usize,
    pub tokens: usize,
}

pub fn pack(
    index: &TenantIndex,
    hits: Vec<Hit>,
    budget: &Budget,
    detailed: bool,
    trace: &mut Trace,
) -> Packed {
    let mut log = LayerLog::new("token_density", hits.len(), detailed);
    let mut ranked: Vec<Chosen> = hits
        .into_iter()
        .filter_map(|hit| {
            let item = index.slots[hit.slot as usize].clone()?;
            Some(Chosen {
                item,
                similarity: hit.similarity,
                exact: hit.exact,
                score: hit.score,
                lexical: hit.lexical,
            })
        })
        .collect();
    ranked.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then(b.item.record.priority.cmp(&a.item.record.priority))
            .then(b.item.record.updated_at_ms.cmp(&a.item.record.updated_at_ms))
            .then(a.item.record.id.cmp(&b.item.record.id))
    });
    let mut packed = Packed { injected: Vec::new(), stubs: Vec::new(), overflow: 0, tokens: 0 };
    for chosen in ranked {
        let cost = chosen.item.tokens;
        let record = &chosen.item.record;
        if packed.injected.len() < budget.max_items && packed.tokens + cost <= budget.tokens {
            packed.tokens += cost;
            packed.injected.push(chosen);
            continue;
        }
        packed.overflow += 1;
        if record.priority >= 4 && packed.stubs.len() < budget.max_stubs {
            log.remove(&record.id, || format!("did not fit ({cost} tokens); injected as a stub"));
            packed.stubs.push(chosen);
        } else {
            log.remove(&record.id, || format!("did not fit ({cost} tokens, priority {})", record.priority));
        }
    }
    log.finish(packed.injected.len() + packed.stubs.len(), trace);
    packed
}
