//! The IVF path over rows laid out in list order: every slot keeps its own row through inserts,
//! updates, removals and rebuilds (the layout moves rows, never changes one), each rebuild leaves
//! a large scope's lists as consecutive rows, and a query on the IVF path returns exactly what
//! scoring every row of the lists it probes (and the caller's other candidates) returns.

use super::semantic::{self, SemanticQuery, TopK};
use super::tests::{Vectors, caller, item, record};
use super::trace::{Detail, Trace};
use crate::index::TenantIndex;
use crate::record::OPEN_END_MS;
use crate::vector::dot;
use crate::vector::ivf::Probes;
use crate::vector::quant::{QuantizedQuery, Rows};
use crate::vector::testing::Rng;
use std::collections::{BTreeMap, BTreeSet};

const DIMS: usize = 32;

/// A tenant being written to, with each live record's f32 vector beside it.
struct Tenant {
    index: TenantIndex,
    vectors: BTreeMap<String, Vec<f32>>,
}

impl Tenant {
    fn upsert(&mut self, id: &str, scope: &[&str], vector: Vec<f32>) {
        self.index.upsert(item(record(id, scope, (0, OPEN_END_MS), "v1"), Some(vector.clone()), &[]));
        self.vectors.insert(id.to_owned(), vector);
    }

    fn remove(&mut self, id: &str) {
        self.index.remove(id);
        self.vectors.remove(id);
    }

    /// Every live record's row is its own vector quantized, wherever the layout put it; and every
    /// IVF entry points at its slot's row.
    fn assert_rows_are_their_records(&self, queries: &[Vec<f32>]) {
        for (id, v) in &self.vectors {
            let slot = self.index.slot_of(id).unwrap_or_else(|| panic!("{id} is indexed"));
            let mut own = Rows::new(DIMS);
            own.set(0, v);
            let expected = own.dequantize(0).unwrap_or_default();
            assert_eq!(self.index.vector(slot).as_deref(), Some(expected.as_slice()), "{id}'s row");
            for q in queries {
                let score = self.index.similarity(slot, q).unwrap_or(f32::NAN);
                assert!((score - dot(&expected, q)).abs() < 1e-5, "{id}: {score} vs {}", dot(&expected, q));
            }
        }
        let rows = self.index.int8_rows().unwrap_or_else(|| panic!("rows"));
        let probe_all = QuantizedQuery::new(&queries[0]);
        for ann in self.index.ann.values() {
            for entry in ann.probe(&probe_all, Probes::ALL).flatten() {
                assert_eq!(rows.key_at(entry.position as usize), Some(entry.slot as usize));
            }
        }
    }

    /// Right after a rebuild of the largest scope, its lists are rows 0, 1, 2, … in list order.
    fn assert_laid_out_in_list_order(&self, scope: &str) {
        let ann = &self.index.ann[scope];
        let first = self.vectors.values().next().cloned().unwrap_or_default();
        let query = QuantizedQuery::new(&first);
        let positions: Vec<u32> = ann.probe(&query, Probes::ALL).flatten().map(|e| e.position).collect();
        assert_eq!(
            positions,
            (0..ann.len() as u32).collect::<Vec<_>>(),
            "{scope}'s lists are consecutive rows"
        );
    }
}

/// 9,000 public records (an IVF from 8,192 on), 600 of a team (some public too), the caller's own
/// profile; then updates, removals and new records, a rebuild, and more writes after it.
fn written_tenant(rng: &mut Rng, vectors: &Vectors, queries: &[Vec<f32>]) -> Tenant {
    let mut t = Tenant { index: TenantIndex::default(), vectors: BTreeMap::new() };
    for i in 0..9000 {
        let scope: &[&str] = if i % 20 == 0 { &["public", "team:a"] } else { &["public"] };
        t.upsert(&format!("kb{i}"), scope, vectors.record(rng));
        if i % 15 == 0 {
            t.upsert(&format!("team{i}"), &["team:a"], vectors.record(rng));
        }
    }
    t.upsert("me", &["user:me"], vectors.record(rng));
    assert!(t.index.ann.contains_key("public") && !t.index.ann.contains_key("team:a"));
    t.assert_rows_are_their_records(queries);
    for i in (0..9000).step_by(7) {
        t.remove(&format!("kb{i}"));
    }
    for i in (0..9000).step_by(11) {
        t.upsert(&format!("kb{i}"), &["public"], vectors.record(rng)); // updates, and 7·11's back
    }
    for i in 0..400 {
        t.upsert(&format!("new{i}"), &["public"], vectors.record(rng));
    }
    t.assert_rows_are_their_records(queries);
    t.index.rebuild_ann("public");
    t.assert_laid_out_in_list_order("public");
    t.assert_rows_are_their_records(queries);
    for i in (0..9000).step_by(13) {
        t.remove(&format!("kb{i}"));
    }
    for i in 400..700 {
        t.upsert(&format!("new{i}"), &["public"], vectors.record(rng));
    }
    t.assert_rows_are_their_records(queries);
    t
}

#[test]
fn rows_keep_their_records_through_writes_and_rebuilds_and_lists_read_consecutive_rows() {
    let mut rng = Rng(0x1a70);
    let vectors = Vectors::new(&mut rng, DIMS, 30);
    let queries: Vec<Vec<f32>> = (0..5).map(|_| vectors.record(&mut rng)).collect();
    written_tenant(&mut rng, &vectors, &queries);
}

#[test]
fn the_ivf_path_returns_exactly_a_scan_of_the_probed_lists_rows() {
    let mut rng = Rng(0x1b71);
    let vectors = Vectors::new(&mut rng, DIMS, 30);
    let queries: Vec<Vec<f32>> = (0..5).map(|_| vectors.record(&mut rng)).collect();
    let t = written_tenant(&mut rng, &vectors, &queries);
    let index = &t.index;
    let scopes: BTreeSet<String> = ["public", "team:a", "user:me"].map(String::from).into();
    let me = caller(&["public", "team:a", "user:me"]);
    let candidates = super::scope::visible(index, &me, Detail::Off, &mut Trace::default());
    assert!(candidates.len() > semantic::EXACT_SCAN_MAX);
    let public = index.ann_members("public").unwrap_or_else(|| panic!("public has an IVF"));
    let mut compared = 0;
    for q in 0..30 {
        let live: Vec<&Vec<f32>> = t.vectors.values().collect();
        let target = live[rng.below(live.len())];
        let query = vectors.near(&mut rng, target, 0.02);
        for (probes, threshold) in
            [(Probes::Lists(3), 0.7), (Probes::Lists(12), 0.85), (Probes::Lists(1), 0.5)]
        {
            // What the path must return: every probed row's exact score, plus every candidate
            // outside `public` (scanned exactly), at or above the threshold.
            let mut expected: Vec<(u32, u32)> = index.ann["public"]
                .probe(&QuantizedQuery::new(&query), probes)
                .flatten()
                .map(|e| e.slot)
                .chain(candidates.iter().filter(|s| !public.contains(*s)))
                .filter(|s| candidates.contains(*s))
                .filter_map(|s| {
                    index.similarity(s, &query).filter(|x| *x >= threshold).map(|x| (s, x.to_bits()))
                })
                .collect();
            expected.sort_unstable();
            expected.dedup();
            let sq = SemanticQuery {
                text: "",
                vector: Some(&query),
                threshold,
                probes,
                hybrid: None,
                lift: crate::funnel::semantic::Lift::NONE,
            };
            let run = |top| {
                semantic::matching_within(
                    index,
                    &candidates,
                    Some(&scopes),
                    &sq,
                    top,
                    false,
                    &mut Trace::default(),
                )
            };
            let got: Vec<(u32, u32)> = run(TopK::ALL)
                .hits
                .iter()
                .filter(|h| !h.exact)
                .map(|h| (h.slot, h.similarity.to_bits()))
                .collect();
            assert_eq!(got, expected, "query {q}, {probes}, threshold {threshold}");
            // Bounded, the best hits are the same.
            let best = |mut hits: Vec<(u32, u32)>| {
                hits.sort_by(|a, b| f32::from_bits(b.1).total_cmp(&f32::from_bits(a.1)).then(a.0.cmp(&b.0)));
                hits.truncate(5);
                hits
            };
            let bounded: Vec<(u32, u32)> = run(TopK::for_cap(5, 3))
                .hits
                .iter()
                .filter(|h| !h.exact)
                .map(|h| (h.slot, h.similarity.to_bits()))
                .collect();
            assert_eq!(best(bounded), best(expected.clone()), "query {q}, {probes}, bounded");
            compared += expected.len();
        }
    }
    assert!(compared > 30 * 3, "the thresholds should let hits through: {compared}");
}
