//! Tests of the layers together against naive versions of them: the bitsets, flat arrays and
//! int8 scans must select exactly what a filter over the records and an f32 scan would, also
//! after removals and slot reuse, and the trace must keep its counts and reasons.

use super::semantic::{self, Hit, SemanticQuery};
use super::trace::{Detail, Trace};
use super::{FunnelSettings, scope, temporal};
use crate::clock::format_ms;
use crate::identity::Caller;
use crate::index::{IndexedRecord, TenantIndex};
use crate::record::{OPEN_END_MS, Record, Status};
use crate::vector::dot;
use crate::vector::ivf::Probes;
use crate::vector::testing::{Rng, normalized};
use std::sync::Arc;

pub(super) const NOW: i64 = 1_800_000_000_000;
pub(super) const DAY: i64 = 86_400_000;

/// Vectors like e5's: a shared direction, a topic centre, noise; scores spread around 0.5–0.95.
pub(super) struct Vectors {
    pub(super) common: Vec<f32>,
    topics: Vec<Vec<f32>>,
}

impl Vectors {
    pub(super) fn new(rng: &mut Rng, dims: usize, topics: usize) -> Vectors {
        let mut unit = || normalized((0..dims).map(|_| rng.gauss()).collect());
        Vectors { common: unit(), topics: (0..topics).map(|_| unit()).collect() }
    }

    pub(super) fn near(&self, rng: &mut Rng, centre: &[f32], noise: f32) -> Vec<f32> {
        normalized(centre.iter().map(|c| c + noise * rng.gauss()).collect())
    }

    pub(super) fn record(&self, rng: &mut Rng) -> Vec<f32> {
        let topic = &self.topics[rng.below(self.topics.len())];
        let centre: Vec<f32> = self.common.iter().zip(topic).map(|(c, t)| 0.8 * c + 0.55 * t).collect();
        self.near(rng, &normalized(centre), 0.045)
    }
}

pub(super) fn record(id: &str, scope: &[&str], valid: (i64, i64), schema: &str) -> Record {
    Record {
        tenant: "t".into(),
        id: id.into(),
        record_type: "fact".into(),
        schema_version: schema.into(),
        scope: scope.iter().map(|s| (*s).to_owned()).collect(),
        valid_from_ms: valid.0,
        valid_until_ms: valid.1,
        priority: 3,
        key: None,
        aliases: Vec::new(),
        content: serde_json::json!({"statement": id}),
        metadata: serde_json::Map::new(),
        revision: 1,
        status: Status::Active,
        created_at_ms: NOW - DAY,
        updated_at_ms: NOW - DAY,
        last_accessed_at_ms: None,
        access_count: 0,
        change_seq: 0,
        author: None,
        provenance: None,
    }
}

pub(super) fn item(record: Record, vector: Option<Vec<f32>>, terms: &[&str]) -> IndexedRecord {
    IndexedRecord {
        head: crate::index::RecordHead::of(&record),
        arriving: Some(Box::new(crate::index::Arriving {
            body: None,
            vector: vector.map(Arc::from),
            words: Some(crate::lexical::record_terms(crate::lexical::analyzer(), &record)),
            place: crate::index::threads::Place::of(&record.metadata),
            terms: terms.iter().map(|t| (*t).to_owned()).collect(),
            trigger_body: None,
        })),
        tokens: 20,
        terms: Box::default(),
    }
}

pub(super) fn caller(scopes: &[&str]) -> Caller {
    let mut caller = Caller::new("t", scopes.iter().map(|s| (*s).to_owned()));
    // A caller without `public` sees no public records: some tests need exactly that.
    if !scopes.contains(&"public") {
        caller.scopes.remove("public");
    }
    caller
}

/// The scan the int8 path must reproduce: every candidate with a vector, scored on its row (the
/// index's one copy of the embedding; how close that is to f32: `quant`'s tests).
fn naive_similar(index: &TenantIndex, candidates: &[u32], query: &[f32], threshold: f32) -> Vec<(u32, u32)> {
    candidates
        .iter()
        .filter_map(|slot| {
            let score = index.similarity(*slot, query)?;
            (score >= threshold).then_some((*slot, score.to_bits()))
        })
        .collect()
}

fn similar(hits: &[Hit]) -> Vec<(u32, u32)> {
    hits.iter().filter(|h| !h.exact).map(|h| (h.slot, h.similarity.to_bits())).collect()
}

fn everything_visible(index: &TenantIndex) -> (crate::slots::SlotSet, Vec<u32>) {
    let visible = scope::visible(index, &caller(&["public"]), Detail::Full, &mut Trace::default());
    let list = visible.iter().collect();
    (visible, list)
}

#[test]
fn int8_scan_returns_exactly_the_hits_and_similarities_of_scoring_every_candidate() {
    let mut rng = Rng(0x5eed);
    let dims = 384;
    let vectors = Vectors::new(&mut rng, dims, 12);
    let mut index = TenantIndex::default();
    let mut stored = Vec::new();
    for i in 0..2500 {
        let vector = match i % 50 {
            0 => None,                                                      // not embedded yet
            1 => Some(normalized((0..256).map(|_| rng.gauss()).collect())), // another model's length
            _ => Some(vectors.record(&mut rng)),
        };
        if let Some(v) = &vector {
            stored.push(v.clone());
        }
        index.upsert(item(record(&format!("r{i}"), &["public"], (0, OPEN_END_MS), "v1"), vector, &[]));
    }
    assert!(index.ann.is_empty(), "below ANN_MIN_RECORDS: the exact scan");
    // The first embedding had the odd length; the int8 rows follow the majority.
    assert_eq!(index.int8_rows().map(|r| r.dims()), Some(dims));
    let (candidates, list) = everything_visible(&index);
    let (mut compared, mut hits_seen) = (0, 0);
    for q in 0..120 {
        let target = &stored[rng.below(stored.len())];
        let query = vectors.near(&mut rng, target, [0.01, 0.03, 0.06][q % 3]);
        for threshold in [0.5, 0.75, 0.8, 0.85, 0.9, 0.95, 0.99] {
            let semantic = SemanticQuery {
                text: "",
                vector: Some(&query),
                threshold,
                probes: Probes::Lists(1),
                hybrid: None,
                lift: crate::funnel::semantic::Lift::NONE,
            };
            let hits = semantic::matching(&index, &candidates, &semantic, false, &mut Trace::default());
            let expected = naive_similar(&index, &list, &query, threshold);
            assert_eq!(similar(&hits), expected, "query {q} threshold {threshold}");
            compared += 1;
            hits_seen += expected.len();
        }
    }
    assert!(hits_seen > compared * 5, "the thresholds should cut through the scores: {hits_seen}");
}

#[test]
fn ivf_path_probing_every_list_equals_the_full_scan_after_removals_and_reuse() {
    let mut rng = Rng(0xfeed);
    let dims = 32;
    let vectors = Vectors::new(&mut rng, dims, 40);
    let mut index = TenantIndex::default();
    let n = 9000;
    for i in 0..n {
        let r = record(&format!("r{i}"), &["public"], (0, OPEN_END_MS), "v1");
        index.upsert(item(r, Some(vectors.record(&mut rng)), &[]));
    }
    assert!(index.ann.contains_key("public"));
    for i in (0..n).step_by(9) {
        index.remove(&format!("r{i}"));
    }
    for i in (0..n).step_by(18) {
        let r = record(&format!("new{i}"), &["public"], (0, OPEN_END_MS), "v1");
        index.upsert(item(r, Some(vectors.record(&mut rng)), &[]));
    }
    let (candidates, list) = everything_visible(&index);
    assert!(list.len() > semantic::EXACT_SCAN_MAX);
    for q in 0..40 {
        let target = index.vector(list[rng.below(list.len())]);
        let query = vectors.near(&mut rng, target.as_deref().unwrap_or(&vectors.common), 0.02);
        for threshold in [0.7, 0.85, 0.95] {
            let semantic = SemanticQuery {
                text: "",
                vector: Some(&query),
                threshold,
                probes: Probes::ALL,
                hybrid: None,
                lift: crate::funnel::semantic::Lift::NONE,
            };
            let hits = semantic::matching(&index, &candidates, &semantic, false, &mut Trace::default());
            assert_eq!(
                similar(&hits),
                naive_similar(&index, &list, &query, threshold),
                "query {q} {threshold}"
            );
        }
    }
}

#[test]
fn scope_and_temporal_bitsets_equal_a_naive_filter_after_removals_and_slot_reuse() {
    let mut rng = Rng(0xabc);
    let scopes = ["public", "team:a", "team:b", "user:1", "user:2", "user:3"];
    let schemas = ["v1", "v2", "v3"];
    let mut index = TenantIndex::default();
    let write = |index: &mut TenantIndex, rng: &mut Rng, id: String| {
        let own: Vec<&str> = (0..1 + rng.below(2)).map(|_| scopes[rng.below(scopes.len())]).collect();
        let from = NOW + (rng.below(5) as i64 - 3) * DAY;
        let until = if rng.below(3) == 0 { NOW + (rng.below(5) as i64 - 2) * DAY } else { OPEN_END_MS };
        let vector = (rng.below(4) != 0).then(|| vec![1.0, 0.0]);
        index.upsert(item(record(&id, &own, (from, until), schemas[rng.below(3)]), vector, &[]));
    };
    // Enough records that `public` and the teams keep bitsets beside their lists
    // (`TenantIndex::scope_set`), which the removals and rewrites must keep in step.
    for i in 0..6000 {
        write(&mut index, &mut rng, format!("r{i}"));
    }
    assert!(index.scope_set("public").is_some());
    for round in 0..3 {
        for _ in 0..1400 {
            index.remove(&format!("r{}", rng.below(6000)));
        }
        for _ in 0..1000 {
            // Rewrites of existing ids (new scope and validity) and new ids reusing free slots.
            let id = if rng.below(2) == 0 {
                format!("r{}", rng.below(6000))
            } else {
                format!("n{round}-{}", rng.next())
            };
            write(&mut index, &mut rng, id);
        }
        for who in [
            &["public"][..],
            &["team:a", "user:2"],
            &["user:3"],
            &["nobody"],
            &["public", "team:a", "team:b"],
        ] {
            let caller = caller(who);
            let mut trace = Trace::default();
            let visible = scope::visible(&index, &caller, Detail::Full, &mut trace);
            let expected: Vec<u32> = (0..index.slots.len() as u32)
                .filter(|s| {
                    index.slots[*s as usize].as_ref().is_some_and(|i| caller.can_see("t", i.head.scopes()))
                })
                .collect();
            assert_eq!(visible.iter().collect::<Vec<_>>(), expected, "round {round} caller {who:?}");
            for now in [NOW - 2 * DAY, NOW, NOW + DAY] {
                let read = vec!["v1".to_owned(), "v3".to_owned()];
                let current = temporal::current(&index, &visible, now, &read, false, &mut trace).0;
                let expected_now: Vec<u32> = expected
                    .iter()
                    .copied()
                    .filter(|s| {
                        let r = index.slots[*s as usize].as_ref().map(|i| &i.head);
                        r.is_some_and(|r| {
                            r.valid_from_ms <= now
                                && now < r.valid_until_ms
                                && read.iter().any(|v| **v == *r.schema_version())
                        })
                    })
                    .collect();
                assert_eq!(current.iter().collect::<Vec<_>>(), expected_now, "round {round} now {now}");
            }
            let scope_layer = &trace.layers[0];
            assert_eq!((scope_layer.input, scope_layer.output), (index.len(), expected.len()));
            assert_eq!(scope_layer.removed_count, index.len() - expected.len());
        }
        assert_eq!(index.len(), index.slots.iter().flatten().count());
    }
}

#[test]
fn detailed_trace_keeps_counts_and_reasons() {
    let dims = 8;
    let axis = |i: usize| -> Vec<f32> { (0..dims).map(|d| if d == i { 1.0 } else { 0.0 }).collect() };
    let close = normalized((0..dims).map(|d| if d == 0 { 1.0 } else { 0.1 }).collect()); // 0.93 to axis 0
    let valid = (NOW - DAY, OPEN_END_MS);
    let mut index = TenantIndex::default();
    let records = [
        item(record("hidden", &["team:x"], valid, "v1"), Some(axis(0)), &[]),
        item(record("expired", &["public"], (NOW - 2 * DAY, NOW - DAY), "v1"), Some(axis(0)), &[]),
        item(record("future", &["public"], (NOW + DAY, OPEN_END_MS), "v1"), Some(axis(0)), &[]),
        item(record("old-schema", &["public"], valid, "v0"), Some(axis(0)), &[]),
        item(record("far", &["public"], valid, "v1"), Some(axis(1)), &[]),
        item(record("unembedded", &["public"], valid, "v1"), None, &[]),
        item(record("named", &["public"], valid, "v1"), Some(axis(2)), &["ord-1001"]),
        item(record("close", &["public"], valid, "v1"), Some(close.clone()), &[]),
        item(record("same", &["public", "user:1"], valid, "v1"), Some(axis(0)), &[]),
    ];
    for r in records {
        index.upsert(r);
    }
    let settings = FunnelSettings {
        schema_versions: vec!["v1".into()],
        threshold: 0.8,
        budget_tokens: 1000,
        max_items: 10,
        max_stubs: 0,
        probes: Probes::Lists(4),
        retrieval: super::Retrieval::Dense,
        cut: super::cut::Cut::OFF,
        standout: None,
        subject_boost: 0.0,
        neighbour_weight: 0.0,
        inject_writers: crate::record::WriterSet::ALL,
    };
    let query = axis(0);
    let semantic = SemanticQuery {
        text: "where is ORD-1001",
        vector: Some(&query),
        threshold: 0.8,
        probes: Probes::Lists(4),
        hybrid: None,
        lift: crate::funnel::semantic::Lift::NONE,
    };
    let out = super::run(&index, &caller(&["public", "user:1"]), &semantic, &settings, NOW, Detail::Full);
    let layers = &out.trace.layers;
    let names: Vec<&str> = layers.iter().map(|l| l.layer).collect();
    assert_eq!(names, ["scope", "temporal", "semantic", "token_density"]);
    let counts: Vec<(usize, usize, usize)> =
        layers.iter().map(|l| (l.input, l.output, l.removed_count)).collect();
    assert_eq!(counts, [(9, 8, 1), (8, 5, 3), (5, 3, 2), (3, 3, 0)]);
    for pair in layers.windows(2) {
        assert_eq!(pair[0].output, pair[1].input);
    }
    let reasons = |i: usize| -> Vec<(String, String)> {
        layers[i].removed.iter().map(|r| (r.id.clone(), r.reason.clone())).collect()
    };
    let pair = |id: &str, reason: String| (id.to_owned(), reason);
    assert_eq!(reasons(0), [pair("hidden", "no scope in common with the caller".into())]);
    assert_eq!(
        reasons(1),
        [
            pair("expired", format!("expired at {}", format_ms(NOW - DAY))),
            pair("future", format!("not valid before {}", format_ms(NOW + DAY))),
            pair("old-schema", "schema v0 is not read by this release".into()),
        ]
    );
    assert_eq!(
        reasons(2),
        [pair("far", "similarity 0.000 below 0.800".into()), pair("unembedded", "no embedding yet".into())]
    );
    let injected: Vec<(&str, f32, bool)> =
        out.packed.injected.iter().map(|c| (c.item.head.id(), c.similarity, c.exact)).collect();
    let similarity = |id: &str| index.slot_of(id).and_then(|slot| index.similarity(slot, &query));
    assert!((similarity("close").unwrap_or(0.0) - dot(&query, &close)).abs() < 2e-3);
    assert_eq!(
        injected,
        [
            ("named", 1.0, true),
            ("same", similarity("same").unwrap_or(0.0), false),
            ("close", similarity("close").unwrap_or(0.0), false)
        ]
    );

    // Without detail: the same counts, no names.
    let out = super::run(&index, &caller(&["public", "user:1"]), &semantic, &settings, NOW, Detail::Off);
    let plain: Vec<(usize, usize, usize)> =
        out.trace.layers.iter().map(|l| (l.input, l.output, l.removed_count)).collect();
    assert_eq!(plain, counts);
    assert!(out.trace.layers.iter().all(|l| l.removed.is_empty()));

    // The caller's own trace: its visible records named, the hidden one neither named nor counted.
    let out = super::run(&index, &caller(&["public", "user:1"]), &semantic, &settings, NOW, Detail::Visible);
    let visible: Vec<(usize, usize, usize)> =
        out.trace.layers.iter().map(|l| (l.input, l.output, l.removed_count)).collect();
    assert_eq!(visible, [(8, 8, 0), (8, 5, 3), (5, 3, 2), (3, 3, 0)]);
    assert!(out.trace.layers[0].removed.is_empty());
    assert_eq!(out.trace.layers[1].removed.len(), 3, "what the caller may see is still explained");
    assert!(!format!("{:?}", out.trace).contains("hidden"));
}

/// A record with `statement` as its content.
fn stated(id: &str, scope: &[&str], statement: &str) -> Record {
    let mut record = record(id, scope, (NOW - DAY, OPEN_END_MS), "v1");
    record.content = serde_json::json!({"statement": statement});
    record
}

/// Hybrid releases: a record the query names in strong words passes though its
/// similarity is below the threshold; weak words alone do not; records outside the caller's
/// scope are never scored by words either; and every survivor says what each ranking gave it.
#[test]
fn hybrid_retrieval_passes_strong_word_matches_and_explains_each_rankings_part() {
    let dims = 8;
    let axis = |i: usize| -> Vec<f32> { (0..dims).map(|d| if d == i { 1.0 } else { 0.0 }).collect() };
    let mut index = TenantIndex::default();
    let records = [
        // Far in meaning (orthogonal), but the question's rare words are its words.
        item(
            stated("words", &["public"], "Sofa cushions are refilled with buckwheat husks every spring."),
            Some(axis(1)),
            &[],
        ),
        // Close in meaning, no shared word.
        item(stated("meaning", &["public"], "Chair pads get new filling yearly."), Some(axis(0)), &[]),
        // Shares only a common word.
        item(stated("weak", &["public"], "Every order ships within a week."), Some(axis(2)), &[]),
        // The same strong words, but not the caller's to see.
        item(stated("hidden", &["team:x"], "Sofa cushions buckwheat husks refilled."), Some(axis(1)), &[]),
    ];
    for r in records {
        index.upsert(r);
    }
    let query_text = "when are the sofa cushions refilled with buckwheat husks";
    let lexical = crate::lexical::LexicalQuery::new(crate::lexical::analyzer(), query_text);
    let vector = axis(0);
    let settings = |retrieval| FunnelSettings {
        schema_versions: vec!["v1".into()],
        threshold: 0.5,
        budget_tokens: 1000,
        max_items: 10,
        max_stubs: 0,
        probes: Probes::Lists(4),
        retrieval,
        cut: super::cut::Cut::OFF,
        standout: None,
        subject_boost: 0.0,
        neighbour_weight: 0.0,
        inject_writers: crate::record::WriterSet::ALL,
    };
    let run = |retrieval: super::Retrieval| {
        let hybrid = match retrieval {
            super::Retrieval::Hybrid { lexical_weight, min_lexical } => {
                Some(semantic::Hybrid { query: &lexical, lexical_weight, min_lexical })
            }
            super::Retrieval::Dense => None,
        };
        let query = SemanticQuery {
            text: query_text,
            vector: Some(&vector),
            threshold: 0.5,
            probes: Probes::Lists(4),
            hybrid,
            lift: crate::funnel::semantic::Lift::NONE,
        };
        super::run(&index, &caller(&["public"]), &query, &settings(retrieval), NOW, Detail::Full)
    };
    let ids = |out: &super::FunnelOutput| -> Vec<String> {
        out.packed.injected.iter().map(|c| c.item.head.id().to_string()).collect()
    };

    let dense = run(super::Retrieval::Dense);
    assert_eq!(ids(&dense), ["meaning"]);
    assert!(dense.trace.ranked.iter().all(|r| r.lexical.is_none()));

    let hybrid = run(super::Retrieval::HYBRID);
    let mut got = ids(&hybrid);
    got.sort();
    assert_eq!(got, ["meaning", "words"], "strong words pass, weak ones and hidden records do not");
    let words = hybrid.trace.ranked.iter().find(|r| r.id == "words").unwrap();
    let lexical_part = words.lexical.as_ref().expect("the word ranking's part");
    assert!(lexical_part.normalized >= 0.3 && lexical_part.rank == 1, "{lexical_part:?}");
    assert!(words.similarity.abs() < 1e-6 && (words.score - lexical_part.normalized).abs() < 1e-5);
    let meaning = hybrid.trace.ranked.iter().find(|r| r.id == "meaning").unwrap();
    assert!((meaning.similarity - 1.0).abs() < 1e-6);
    let semantic_layer = hybrid.trace.layers.iter().find(|l| l.layer == "semantic").unwrap();
    let weak = semantic_layer.removed.iter().find(|r| r.id == "weak").unwrap();
    assert!(weak.reason.contains("words"), "{}", weak.reason);
    assert!(!format!("{:?}", hybrid.trace.ranked).contains("hidden"));
}

/// The token-density layer selects the best hits before sorting when there are many (and no
/// trace is wanted); what it packs must be what a full sort packs, for any budget.
#[test]
fn packing_many_hits_by_selection_packs_what_a_full_sort_packs() {
    use super::density::{Budget, pack};
    let mut rng = Rng(41);
    let mut index = TenantIndex::default();
    let count = 700u32;
    for i in 0..count {
        let mut r = record(&format!("r{i:03}"), &["public"], (0, OPEN_END_MS), "v1");
        r.priority = (i % 5 + 1) as u8;
        r.updated_at_ms = NOW - i64::from(i % 7) * DAY;
        let mut it = IndexedRecord::new(r, None);
        it.tokens = 10 + rng.below(400);
        index.upsert(it);
    }
    let hits: Vec<Hit> = (0..count)
        .map(|slot| {
            // Ties on purpose (scores in steps of 1/50), so the tie-breakers matter too.
            let score = rng.below(50) as f32 / 50.0;
            Hit { slot, similarity: score, exact: slot % 97 == 0, score, lexical: None, neighbours: None }
        })
        .collect();
    let ids = |chosen: &[super::density::Chosen]| {
        chosen.iter().map(|c| c.item.head.id().to_string()).collect::<Vec<_>>()
    };
    for (tokens, max_items, max_stubs) in
        [(3000, 5, 3), (150, 5, 3), (0, 5, 3), (100_000, 200, 0), (3000, 0, 2), (800, 3, 50)]
    {
        for cut in [super::cut::Cut::OFF, super::cut::Cut { relative: Some(0.7), ..super::cut::Cut::OFF }] {
            let budget = Budget { tokens, max_items, max_stubs, cut };
            let fast = pack(&index, &hits, &budget, false, &mut Trace::default());
            let full = pack(&index, &hits, &budget, true, &mut Trace::default());
            assert_eq!(ids(&fast.injected), ids(&full.injected), "{tokens} {max_items} {max_stubs}");
            assert_eq!(ids(&fast.stubs), ids(&full.stubs), "{tokens} {max_items} {max_stubs}");
            assert_eq!((fast.tokens, fast.overflow), (full.tokens, full.overflow));
        }
    }
}

/// The cut: a question with one clear answer gets it alone, a broad question whose records
/// score alike gets each of them, and without the cut both get everything the gate passed.
#[test]
fn the_cut_passes_a_clear_answer_alone_and_a_broad_question_several() {
    use super::cut::Cut;
    let dims = 8;
    // A unit vector at cosine `c` to axis 0, the rest on axis `other`.
    let at = |c: f32, other: usize| -> Vec<f32> {
        (0..dims)
            .map(|d| {
                if d == 0 {
                    c
                } else if d == other {
                    (1.0 - c * c).sqrt()
                } else {
                    0.0
                }
            })
            .collect()
    };
    let mut index = TenantIndex::default();
    // The refund policy answers the refund question clearly; three records about a delivery
    // score alike for the broad question about the order; the rest is weakly related.
    let clear: [(&str, f32); 4] =
        [("refund-policy", 0.92), ("warranty", 0.41), ("store-hours", 0.35), ("loyalty", 0.30)];
    for (i, (id, c)) in clear.iter().enumerate() {
        index.upsert(item(stated(id, &["public"], id), Some(at(*c, 1 + i)), &[]));
    }
    let broad: [(&str, f32); 4] =
        [("carrier-delay", 0.74), ("new-date", 0.71), ("express-upgrade", 0.69), ("catalog", 0.33)];
    for (i, (id, c)) in broad.iter().enumerate() {
        // Along axis 5 for the second question.
        let v: Vec<f32> = (0..dims)
            .map(|d| {
                if d == 5 {
                    *c
                } else if d == 6 + i % 2 {
                    (1.0 - c * c).sqrt()
                } else {
                    0.0
                }
            })
            .collect();
        index.upsert(item(stated(id, &["public"], id), Some(v), &[]));
    }
    let ask = |query: Vec<f32>, cut: Cut| -> Vec<String> {
        let settings = FunnelSettings {
            schema_versions: vec!["v1".into()],
            threshold: 0.25,
            budget_tokens: 1000,
            max_items: 10,
            max_stubs: 3,
            probes: Probes::Lists(4),
            retrieval: super::Retrieval::Dense,
            cut,
            standout: None,
            subject_boost: 0.0,
            neighbour_weight: 0.0,
            inject_writers: crate::record::WriterSet::ALL,
        };
        let semantic = SemanticQuery {
            text: "question",
            vector: Some(&query),
            threshold: 0.25,
            probes: Probes::Lists(4),
            hybrid: None,
            lift: crate::funnel::semantic::Lift::NONE,
        };
        let out = super::run(&index, &caller(&["public"]), &semantic, &settings, NOW, Detail::Full);
        if !cut.is_off() {
            let density = out.trace.layers.iter().find(|l| l.layer == "token_density").unwrap();
            assert!(
                density.removed.iter().all(|r| r.reason.contains("below the cut")),
                "{:?}",
                density.removed
            );
        }
        out.packed.injected.iter().map(|c| c.item.head.id().to_string()).collect()
    };
    let refund_question = at(1.0, 1);
    let order_question: Vec<f32> = (0..dims).map(|d| if d == 5 { 1.0 } else { 0.0 }).collect();
    for cut in [
        Cut { relative: Some(0.75), ..Cut::OFF },
        Cut { gap: Some(0.2), ..Cut::OFF },
        Cut { drop: Some(0.15), ..Cut::OFF },
    ] {
        assert_eq!(ask(refund_question.clone(), cut), ["refund-policy"], "{cut:?}");
        assert_eq!(
            ask(order_question.clone(), cut),
            ["carrier-delay", "new-date", "express-upgrade"],
            "{cut:?}"
        );
    }
    assert_eq!(ask(refund_question, Cut::OFF).len(), 4, "without the cut the gate alone decides");
    assert_eq!(ask(order_question, Cut::OFF).len(), 4);
}
