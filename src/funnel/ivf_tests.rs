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

/// The public records of a tenant as its IVF lists them, as its bitset holds them, and as the
/// records' own scopes say.
fn public_in_ivf(t: &Tenant) -> (BTreeSet<u32>, BTreeSet<u32>, BTreeSet<u32>) {
    let listed: BTreeSet<u32> = t.index.ann["public"].slots_in_list_order().collect();
    let members: BTreeSet<u32> =
        t.index.ann_members("public").map(|m| m.iter().collect()).unwrap_or_default();
    let public = |slot: &u32| {
        t.index.slots[*slot as usize].as_ref().is_some_and(|item| item.head.scopes().any(|s| s == "public"))
    };
    let expected: BTreeSet<u32> =
        t.vectors.keys().filter_map(|id| t.index.slot_of(id)).filter(public).collect();
    (listed, members, expected)
}

/// A tenant that serves requests does not build a due IVF in the write that found it due (that
/// held its lock, and the writer's thread, for the seconds k-means takes): the scope is marked
/// due, one builder takes a copy of its rows, and what was written while it built is brought in
/// when the index is installed.
#[test]
fn an_index_due_is_built_off_the_lock_and_takes_in_the_writes_made_meanwhile() {
    let mut rng = Rng(0x1c72);
    let vectors = Vectors::new(&mut rng, DIMS, 30);
    let queries: Vec<Vec<f32>> = (0..5).map(|_| vectors.record(&mut rng)).collect();
    let mut t = Tenant { index: TenantIndex::deferring_ann(), vectors: BTreeMap::new() };
    for i in 0..9000 {
        let scope: &[&str] = if i % 20 == 0 { &["public", "team:a"] } else { &["public"] };
        t.upsert(&format!("kb{i}"), scope, vectors.record(&mut rng));
    }
    assert!(t.index.ann.is_empty(), "no write built the index");
    assert_eq!(t.index.ann_due(), ["public"]);
    assert!(t.index.claim_ann_builder(), "the first to ask starts the builder");
    assert!(!t.index.claim_ann_builder(), "one builder a tenant");
    let job = t.index.take_ann_job().unwrap_or_else(|| panic!("public is due"));

    // While it builds: removals, updates (some now also in a team), new records, a record
    // moved out of the scope.
    for i in (0..9000).step_by(7) {
        t.remove(&format!("kb{i}"));
    }
    for i in (0..9000).step_by(11) {
        let scope: &[&str] = if i % 3 == 0 { &["public", "team:a"] } else { &["public"] };
        t.upsert(&format!("kb{i}"), scope, vectors.record(&mut rng));
    }
    for i in 0..400 {
        t.upsert(&format!("new{i}"), &["public"], vectors.record(&mut rng));
    }
    t.upsert("kb1", &["team:a"], vectors.record(&mut rng));
    assert!(t.index.ann.is_empty(), "the exact scan serves until the index is installed");

    t.index.install_ann(job.build());
    let (listed, members, expected) = public_in_ivf(&t);
    assert_eq!(listed.len(), expected.len(), "each record once");
    assert_eq!(listed, expected, "the IVF holds exactly the scope's records");
    assert_eq!(members, expected, "and so does its bitset");
    assert!(!listed.contains(&t.index.slot_of("kb1").unwrap_or(u32::MAX)), "kb1 left the scope");
    t.assert_laid_out_in_list_order("public");
    t.assert_rows_are_their_records(&queries);
    assert!(t.index.ann_due().is_empty(), "nothing left to build");
    assert!(t.index.take_ann_job().is_none());
}

/// With nothing written meanwhile, the index built from the copy is the one built in place.
#[test]
fn built_off_the_lock_the_index_is_the_one_built_in_place() {
    let mut rng = Rng(0x1d73);
    let vectors = Vectors::new(&mut rng, DIMS, 30);
    let records: Vec<Vec<f32>> = (0..9000).map(|_| vectors.record(&mut rng)).collect();
    let [mut off, mut in_place] =
        [0, 1].map(|_| Tenant { index: TenantIndex::deferring_ann(), vectors: BTreeMap::new() });
    for t in [&mut off, &mut in_place] {
        for (i, v) in records.iter().enumerate() {
            t.upsert(&format!("kb{i}"), &["public"], v.clone());
        }
    }
    let job = off.index.take_ann_job().unwrap_or_else(|| panic!("public is due"));
    off.index.install_ann(job.build());
    in_place.index.rebuild_ann("public");
    let (off, in_place) = (&off.index.ann["public"], &in_place.index.ann["public"]);
    assert_eq!(off.list_lens(), in_place.list_lens());
    assert_eq!(
        off.slots_in_list_order().collect::<Vec<_>>(),
        in_place.slots_in_list_order().collect::<Vec<_>>()
    );
}

/// Through `MemoryIndex`, the tenant's builder thread builds the index a write found due.
#[test]
fn a_memory_index_builds_a_due_index_on_its_builder_thread() {
    let mut rng = Rng(0x1e74);
    let vectors = Vectors::new(&mut rng, DIMS, 30);
    let index = crate::index::MemoryIndex::default();
    for i in 0..9000 {
        index.upsert(item(
            record(&format!("kb{i}"), &["public"], (0, OPEN_END_MS), "v1"),
            Some(vectors.record(&mut rng)),
            &[],
        ));
    }
    let tenant = index.tenant("t").unwrap_or_else(|| panic!("the tenant"));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let built = loop {
        let locked = tenant.read().unwrap_or_else(|p| p.into_inner());
        if let Some(ann) = locked.ann.get("public") {
            break ann.len();
        }
        drop(locked);
        assert!(std::time::Instant::now() < deadline, "the builder did not build public's index");
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    // Every write was made before the test looked: copied, or taken in when installed.
    assert_eq!(built, 9000);
    let locked = tenant.read().unwrap_or_else(|p| p.into_inner());
    assert_eq!(locked.ann_members("public").map(|m| m.len()), Some(9000));
}

/// Whatever is written while builds run, and wherever a build starts or ends among the writes
/// (random ones: new records, updates, removals, records moving in and out of the scope), every
/// installed index holds exactly the scope's records, once each, each entry
/// at its own row.
#[test]
fn builds_interleaved_with_any_writes_install_exactly_the_scopes_records() {
    for seed in [0x2a01] {
        let mut rng = Rng(seed);
        let vectors = Vectors::new(&mut rng, DIMS, 30);
        let queries: Vec<Vec<f32>> = (0..2).map(|_| vectors.record(&mut rng)).collect();
        let mut t = Tenant { index: TenantIndex::deferring_ann(), vectors: BTreeMap::new() };
        let (mut job, mut installs, mut next_id) = (None, 0, 0);
        for step in 0..36_000 {
            match rng.below(10) {
                0..=5 => {
                    let scope: &[&str] = if rng.below(10) == 0 { &["team:a"] } else { &["public"] };
                    t.upsert(&format!("r{next_id}"), scope, vectors.record(&mut rng));
                    next_id += 1;
                }
                6 | 7 if next_id > 0 => {
                    let id = format!("r{}", rng.below(next_id));
                    let scope: &[&str] = if rng.below(4) == 0 { &["team:a"] } else { &["public"] };
                    t.upsert(&id, scope, vectors.record(&mut rng));
                }
                _ if next_id > 0 => t.remove(&format!("r{}", rng.below(next_id))),
                _ => {}
            }
            // Now and then a build starts (if one is due and none runs) or ends.
            if rng.below(150) == 0 {
                match job.take() {
                    None => job = t.index.take_ann_job(),
                    Some(taken) => {
                        t.index.install_ann(taken.build());
                        installs += 1;
                        let (listed, members, expected) = public_in_ivf(&t);
                        assert_eq!(listed.len(), t.index.ann["public"].len(), "seed {seed:#x}: each once");
                        assert_eq!(listed, expected, "seed {seed:#x}, step {step}");
                        assert_eq!(members, expected, "seed {seed:#x}, step {step}");
                        t.assert_rows_are_their_records(&queries);
                    }
                }
            }
        }
        assert!(installs >= 1, "seed {seed:#x}: no build was installed");
    }
}
