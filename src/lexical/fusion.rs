//! Fusion: one ranking out of the dense one (cosine similarity of embeddings) and the lexical one
//! (BM25), and the gate that says which fused hits may be injected.
//!
//! - `Fusion::Rrf` — reciprocal-rank fusion (Cormack et al., 2009): `Σ wᵢ / (k + rankᵢ)` over
//!   the rankings a record is in, k = 60. Needs no calibration, since only ranks count; but for
//!   the same reason its score says nothing about whether a record is relevant at all.
//! - `Fusion::Weighted` — `w_d · similarity + w_l · normalized BM25` (`LexicalHit::normalized`,
//!   BM25 over the query's own ceiling, in [0, 1)). Both parts are on fixed scales (the dense
//!   model's calibrated cosine, a share of the query's weight), so a threshold on the sum means
//!   the same for every query.
//!
//! Neither says by itself which records to inject: `Gate` does. A record passes on meaning (its
//! similarity reaches the release's threshold, as today) or on words (its normalized BM25 reaches
//! `min_lexical`), and, under weighted fusion, its fused score reaches `min_fused`. The token
//! density layer then takes the passing ones in fused order until the budget or the item cap.
//! Which settings do best on LoCoMo and on the support set: docs/hybrid-retrieval.md.

use super::bm25::LexicalHit;

/// How two rankings become one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fusion {
    /// The dense ranking alone (memgate before hybrid retrieval).
    Dense,
    /// The lexical ranking alone.
    Lexical,
    /// Reciprocal-rank fusion.
    Rrf { k: f32, dense_weight: f32, lexical_weight: f32 },
    /// A weighted sum of similarity and normalized BM25.
    Weighted { dense_weight: f32, lexical_weight: f32 },
}

impl Fusion {
    /// RRF with the usual k = 60 and equal weights.
    pub const RRF: Fusion = Fusion::Rrf { k: 60.0, dense_weight: 1.0, lexical_weight: 1.0 };

    /// The recommended default: similarity + 1.0 × normalized BM25. Best of the variants measured
    /// on LoCoMo (recall@5 0.590 against 0.468 dense alone, 0.557 for the best RRF), and it needs
    /// no ranks, so an approximate dense search that scores only some candidates fuses the same
    /// way (docs/hybrid-retrieval.md).
    pub const DEFAULT: Fusion = Fusion::Weighted { dense_weight: 1.0, lexical_weight: 1.0 };
}

/// Where a record stood in one ranking: its 1-based rank and its score there.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Contribution {
    pub rank: u32,
    pub score: f32,
}

/// One record of the fused ranking, with what each ranking said about it (for `explain`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FusedHit {
    pub slot: u32,
    /// The fused score: what the ranking is sorted by.
    pub score: f32,
    /// Rank and cosine similarity in the dense ranking, if it holds the record.
    pub dense: Option<Contribution>,
    /// Rank and raw BM25 in the lexical ranking, if it holds the record.
    pub lexical: Option<Contribution>,
    /// Normalized BM25 (0 when the lexical ranking does not hold the record).
    pub lexical_normalized: f32,
    pub matched_terms: u16,
}

impl FusedHit {
    /// The similarity, or 0 (an unrelated record's centered cosine) when the dense ranking does
    /// not hold the record.
    pub fn similarity(&self) -> f32 {
        self.dense.map_or(0.0, |d| d.score)
    }
}

/// Fuses a dense ranking (`(slot, similarity)`, any order) with a lexical one (`LexicalIndex`'s
/// hits, best first). Every record of either appears once; best first, ties by similarity, then
/// slot. Under `Dense` or `Lexical` the other ranking is kept as information only.
pub fn fuse(dense: &[(u32, f32)], lexical: &[LexicalHit], fusion: Fusion) -> Vec<FusedHit> {
    let mut dense: Vec<(u32, f32)> = dense.to_vec();
    // Ties end at the slot, so the order is total and an unstable sort (no scratch, faster on
    // the few hundred hits a request fuses) gives the one order there is.
    dense.sort_unstable_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut by_slot: std::collections::HashMap<u32, FusedHit> =
        std::collections::HashMap::with_capacity(dense.len() + lexical.len());
    let empty = |slot| FusedHit {
        slot,
        score: 0.0,
        dense: None,
        lexical: None,
        lexical_normalized: 0.0,
        matched_terms: 0,
    };
    for (rank, (slot, similarity)) in dense.iter().enumerate() {
        by_slot.entry(*slot).or_insert_with(|| empty(*slot)).dense =
            Some(Contribution { rank: rank as u32 + 1, score: *similarity });
    }
    for (rank, hit) in lexical.iter().enumerate() {
        let fused = by_slot.entry(hit.slot).or_insert_with(|| empty(hit.slot));
        fused.lexical = Some(Contribution { rank: rank as u32 + 1, score: hit.score });
        fused.lexical_normalized = hit.normalized;
        fused.matched_terms = hit.matched_terms;
    }
    let mut hits: Vec<FusedHit> = by_slot.into_values().collect();
    for hit in &mut hits {
        let rrf = |c: Option<Contribution>, k: f32, w: f32| c.map_or(0.0, |c| w / (k + c.rank as f32));
        hit.score = match fusion {
            Fusion::Dense => hit.dense.map_or(f32::NEG_INFINITY, |d| d.score),
            Fusion::Lexical => hit.lexical.map_or(f32::NEG_INFINITY, |l| l.score),
            Fusion::Rrf { k, dense_weight, lexical_weight } => {
                rrf(hit.dense, k, dense_weight) + rrf(hit.lexical, k, lexical_weight)
            }
            Fusion::Weighted { dense_weight, lexical_weight } => {
                dense_weight * hit.similarity() + lexical_weight * hit.lexical_normalized
            }
        };
    }
    hits.sort_unstable_by(|a, b| {
        b.score.total_cmp(&a.score).then(b.similarity().total_cmp(&a.similarity())).then(a.slot.cmp(&b.slot))
    });
    hits
}

/// Which fused hits may be injected.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gate {
    /// Passes on meaning: similarity at least this (the release's semantic threshold).
    pub min_similarity: f32,
    /// Passes on words: normalized BM25 at least this (above 1: never).
    pub min_lexical: f32,
    /// And, whatever it passed on, a fused score at least this (`f32::NEG_INFINITY`: no bar).
    pub min_fused: f32,
}

impl Gate {
    /// Today's rule: the similarity threshold alone.
    pub fn dense_only(min_similarity: f32) -> Gate {
        Gate { min_similarity, min_lexical: f32::INFINITY, min_fused: f32::NEG_INFINITY }
    }

    /// The recommended default: the release's similarity threshold, or a strong word match
    /// (normalized BM25 ≥ 0.3, where a query's rare words are most of what a record holds). On the
    /// support set it lets nothing more through than the threshold alone
    /// (docs/hybrid-retrieval.md).
    pub fn default_for(min_similarity: f32) -> Gate {
        Gate { min_similarity, min_lexical: 0.3, min_fused: f32::NEG_INFINITY }
    }

    /// Nothing is gated: the ranking and the budget decide.
    pub const OPEN: Gate = Gate {
        min_similarity: f32::NEG_INFINITY,
        min_lexical: f32::NEG_INFINITY,
        min_fused: f32::NEG_INFINITY,
    };

    pub fn passes(&self, hit: &FusedHit) -> bool {
        let on_meaning = hit.dense.is_some_and(|d| d.score >= self.min_similarity);
        let on_words = hit.lexical.is_some() && hit.lexical_normalized >= self.min_lexical;
        (on_meaning || on_words) && hit.score >= self.min_fused
    }
}

/// The fused hits that pass the gate, in fused order.
pub fn select(fused: Vec<FusedHit>, gate: &Gate) -> Vec<FusedHit> {
    fused.into_iter().filter(|h| gate.passes(h)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lexical(hits: &[(u32, f32, f32)]) -> Vec<LexicalHit> {
        hits.iter()
            .map(|(slot, score, normalized)| LexicalHit {
                slot: *slot,
                score: *score,
                normalized: *normalized,
                matched_terms: 1,
            })
            .collect()
    }

    fn order(hits: &[FusedHit]) -> Vec<u32> {
        hits.iter().map(|h| h.slot).collect()
    }

    #[test]
    fn rrf_rewards_agreement_and_keeps_each_ranking_s_part() {
        let dense = [(1, 0.50), (2, 0.40), (3, 0.30), (4, 0.10)];
        let words = lexical(&[(3, 9.0, 0.6), (5, 7.0, 0.5), (1, 2.0, 0.1)]);
        let fused = fuse(&dense, &words, Fusion::RRF);
        // 1: 1/61 + 1/63; 3: 1/63 + 1/61 — equal, the higher similarity first; then 2 and 5
        // (one ranking each, rank 2), 2 first on similarity; then 4.
        assert_eq!(order(&fused), [1, 3, 2, 5, 4]);
        let three = fused.iter().find(|h| h.slot == 3).copied();
        assert_eq!(three.and_then(|h| h.dense), Some(Contribution { rank: 3, score: 0.30 }));
        assert_eq!(three.and_then(|h| h.lexical), Some(Contribution { rank: 1, score: 9.0 }));
        let five = fused.iter().find(|h| h.slot == 5).copied();
        assert_eq!(five.map(|h| (h.dense, h.similarity())), Some((None, 0.0)));
        // Weights: words count double.
        let heavy = fuse(&dense, &words, Fusion::Rrf { k: 60.0, dense_weight: 1.0, lexical_weight: 2.0 });
        assert_eq!(order(&heavy)[0], 3);
    }

    #[test]
    fn weighted_fusion_adds_calibrated_scores() {
        let dense = [(1, 0.50), (2, 0.20), (3, 0.05)];
        let words = lexical(&[(3, 9.0, 0.8), (2, 3.0, 0.3)]);
        let fused = fuse(&dense, &words, Fusion::Weighted { dense_weight: 1.0, lexical_weight: 0.5 });
        // 1: 0.50; 2: 0.20 + 0.15 = 0.35; 3: 0.05 + 0.40 = 0.45.
        assert_eq!(order(&fused), [1, 3, 2]);
        assert!((fused[1].score - 0.45).abs() < 1e-6);
        assert_eq!(order(&fuse(&dense, &words, Fusion::Dense)), [1, 2, 3]);
        assert_eq!(order(&fuse(&dense, &words, Fusion::Lexical))[..2], [3, 2]);
    }

    #[test]
    fn the_gate_passes_on_meaning_or_on_words() {
        let dense = [(1, 0.50), (2, 0.15), (3, 0.05)];
        let words = lexical(&[(3, 9.0, 0.45), (2, 3.0, 0.10), (4, 1.0, 0.05)]);
        let fused = fuse(&dense, &words, Fusion::RRF);
        assert_eq!(order(&select(fused.clone(), &Gate::dense_only(0.20))), [1]);
        let either = Gate { min_similarity: 0.20, min_lexical: 0.40, min_fused: f32::NEG_INFINITY };
        assert_eq!(order(&select(fused.clone(), &either)), [3, 1]);
        assert_eq!(select(fused.clone(), &Gate::OPEN).len(), 4);
        let weighted = fuse(&dense, &words, Fusion::Weighted { dense_weight: 1.0, lexical_weight: 1.0 });
        // 1 and 3 both at 0.50: the higher similarity first.
        let bar = Gate { min_fused: 0.45, ..Gate::OPEN };
        assert_eq!(order(&select(weighted, &bar)), [1, 3]);
    }
}
