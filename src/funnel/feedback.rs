//! Pseudo-relevance feedback: a second query built from the first one's best records.
//!
//! A question shares few words and only part of its meaning with the record that answers it;
//! the best records of a first pass usually share more with the others that also answer it. So
//! the query is expanded with what the top `docs` records hold — their mean embedding added to
//! the query's (Rocchio), and their rarest words added to its terms — and the funnel runs again.
//! It costs no model: a few vector additions and one more pass over in-memory data.
//!
//! Whether it helps is measured, not assumed (docs/benchmarks.md, "Retrieval"): a release
//! turns it on only where the held-out figures say so.

use crate::lexical::{Analyzer, LexicalIndex, LexicalQuery, record_terms};
use crate::record::Record;
use std::collections::HashMap;

/// How a query is expanded from its first pass.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Feedback {
    /// How many of the first pass's best records feed the second query.
    pub docs: usize,
    /// Weight of their mean embedding added to the query's (0: the vector stays).
    pub vector_weight: f32,
    /// How many of their words are added to the query's terms (0: the words stay).
    pub terms: usize,
}

/// The query vector moved towards the mean of the best records' embeddings (`vectors`),
/// normalized again; `None` when none of them is of the query's length.
pub fn expand_vector(query: &[f32], vectors: &[&[f32]], weight: f32) -> Option<Vec<f32>> {
    let vectors: Vec<&[f32]> = vectors.iter().copied().filter(|v| v.len() == query.len()).collect();
    if vectors.is_empty() || weight <= 0.0 {
        return None;
    }
    let share = weight / vectors.len() as f32;
    let mut out = query.to_vec();
    for vector in vectors {
        for (o, x) in out.iter_mut().zip(vector) {
            *o += share * x;
        }
    }
    let norm = out.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm <= f32::EPSILON {
        return None;
    }
    out.iter_mut().for_each(|x| *x /= norm);
    Some(out)
}

/// The query's terms and up to `count` terms of `records` it lacks, chosen by how many of the
/// records hold them times their rarity in the tenant (idf): what the best answers have in common
/// and most records do not.
pub fn expand_words(
    analyzer: &Analyzer,
    lexical: &LexicalIndex,
    query: &LexicalQuery,
    records: &[&Record],
    count: usize,
) -> LexicalQuery {
    if count == 0 || records.is_empty() {
        return query.clone();
    }
    let mut held: HashMap<String, usize> = HashMap::new();
    for record in records {
        let (mut terms, _) = record_terms(analyzer, record);
        terms.sort_unstable();
        terms.dedup();
        for term in terms {
            if query.terms.binary_search(&term).is_err() {
                *held.entry(term).or_default() += 1;
            }
        }
    }
    let n = lexical.len().max(1) as f32;
    let mut scored: Vec<(f32, String)> = held
        .into_iter()
        .map(|(term, docs)| {
            let df = lexical.document_frequency(&term) as f32;
            let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
            (docs as f32 * idf, term)
        })
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    let mut terms = query.terms.clone();
    terms.extend(scored.into_iter().take(count).map(|(_, term)| term));
    terms.sort();
    terms.dedup();
    LexicalQuery { terms }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(id: &str, text: &str) -> Record {
        Record::test_fact(id, serde_json::json!({"statement": text}))
    }

    #[test]
    fn the_vector_moves_towards_the_feedback_and_stays_unit_length() {
        let out = expand_vector(&[1.0, 0.0], &[&[0.0, 1.0]], 1.0).unwrap();
        assert!((out[0] - out[1]).abs() < 1e-6, "{out:?}");
        assert!((out.iter().map(|x| x * x).sum::<f32>() - 1.0).abs() < 1e-5);
        assert!(expand_vector(&[1.0, 0.0], &[], 1.0).is_none());
    }

    #[test]
    fn shared_rare_words_of_the_best_records_join_the_query() {
        let analyzer = Analyzer::default();
        let texts = [
            "Melanie painted a sunrise over the lake",
            "Melanie showed the lake painting at the pottery class",
            "Caroline went hiking in the mountains",
            "Caroline talked about the support group",
        ];
        let mut lexical = LexicalIndex::default();
        let items: Vec<Record> = texts.iter().enumerate().map(|(i, t)| item(&i.to_string(), t)).collect();
        for (slot, it) in items.iter().enumerate() {
            lexical.upsert_record(slot as u32, it);
        }
        let query = LexicalQuery::new(&analyzer, "What did Melanie paint?");
        let expanded = expand_words(&analyzer, &lexical, &query, &[&items[0], &items[1]], 1);
        assert!(expanded.terms.iter().any(|t| t == "lake"), "{:?}", expanded.terms);
        assert_eq!(expanded.terms.len(), query.terms.len() + 1);
        assert_eq!(expand_words(&analyzer, &lexical, &query, &[&items[0]], 0), query);
    }
}
