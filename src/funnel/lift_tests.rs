//! The rules beyond the threshold, through the whole funnel: the standout cut (`background`), the
//! caller's own records' boost, and neighbours in a thread (`neighbours`). Each is checked for
//! what it lets in and, as a property, for what a caller may not see having no part in it.

use super::semantic::{Lift, SemanticQuery};
use super::tests::{NOW, caller, item, record};
use super::trace::Detail;
use super::{FunnelSettings, Retrieval};
use crate::identity::Caller;
use crate::index::TenantIndex;
use crate::record::{OPEN_END_MS, Record};
use crate::vector::ivf::Probes;
use crate::vector::testing::{Rng, normalized};

const DIMS: usize = 16;
const VALID: (i64, i64) = (0, OPEN_END_MS);

/// A unit vector whose similarity to the query (`axis 0`) is `similarity`; `k` picks the
/// direction of the rest.
fn at(similarity: f32, k: usize) -> Vec<f32> {
    let mut v = vec![0.0; DIMS];
    v[0] = similarity;
    v[1 + k % (DIMS - 1)] = (1.0 - similarity * similarity).max(0.0).sqrt();
    normalized(v)
}

fn query() -> Vec<f32> {
    at(1.0, 0)
}

fn settings(standout: Option<f32>, subject_boost: f32, neighbour_weight: f32) -> FunnelSettings {
    let standout = standout.map(|z| super::background::Standout { z, floor: 0.1 });
    FunnelSettings {
        schema_versions: vec!["v1".into()],
        threshold: 0.19,
        budget_tokens: 10_000,
        max_items: 100,
        max_stubs: 0,
        probes: Probes::ALL,
        retrieval: Retrieval::Dense,
        cut: super::cut::Cut::OFF,
        standout,
        subject_boost,
        neighbour_weight,
        inject_writers: crate::record::WriterSet::ALL,
    }
}

fn injected(index: &TenantIndex, caller: &Caller, settings: &FunnelSettings) -> Vec<(String, f32)> {
    let vector = query();
    let semantic = SemanticQuery {
        text: "",
        vector: Some(&vector),
        threshold: settings.threshold,
        probes: settings.probes,
        hybrid: None,
        lift: Lift::NONE,
    };
    let out = super::run(index, caller, &semantic, settings, NOW, Detail::Off);
    out.packed.injected.iter().map(|c| (c.item.head.id().to_string(), c.score)).collect()
}

fn ids(got: &[(String, f32)]) -> Vec<&str> {
    got.iter().map(|(id, _)| id.as_str()).collect()
}

fn threaded(id: &str, scope: &[&str], thread: &str, position: u32) -> Record {
    let mut r = record(id, scope, VALID, "v1");
    r.metadata.insert("thread".into(), thread.into());
    r.metadata.insert("position".into(), position.into());
    r
}

#[test]
fn a_record_passes_when_it_stands_out_from_what_the_caller_sees() {
    // Twenty records alike at ~0.30 and one clear answer at 0.60: the answer alone stands out.
    let mut uniform = TenantIndex::default();
    for i in 0..20 {
        let similarity = 0.28 + 0.002 * i as f32;
        uniform.upsert(item(
            record(&format!("alike-{i}"), &["public"], VALID, "v1"),
            Some(at(similarity, i)),
            &[],
        ));
    }
    uniform.upsert(item(record("answer", &["public"], VALID, "v1"), Some(at(0.6, 3)), &[]));
    let public = caller(&["public"]);
    assert_eq!(ids(&injected(&uniform, &public, &settings(Some(1.0), 0.0, 0.0))), ["answer"]);
    assert_eq!(injected(&uniform, &public, &settings(None, 0.0, 0.0)).len(), 21, "the threshold alone");

    // The same 0.30 stands out where the rest score near zero.
    let mut varied = TenantIndex::default();
    for i in 0..20 {
        varied.upsert(item(record(&format!("other-{i}"), &["public"], VALID, "v1"), Some(at(0.0, i)), &[]));
    }
    varied.upsert(item(record("answer", &["public"], VALID, "v1"), Some(at(0.3, 3)), &[]));
    assert_eq!(ids(&injected(&varied, &public, &settings(Some(1.0), 0.0, 0.0))), ["answer"]);

    // Fewer than five candidates: no background, the threshold (0.19) decides, not the floor.
    let mut few = TenantIndex::default();
    for (i, similarity) in [0.3, 0.3, 0.25, 0.15].into_iter().enumerate() {
        few.upsert(item(record(&format!("few-{i}"), &["public"], VALID, "v1"), Some(at(similarity, i)), &[]));
    }
    assert_eq!(ids(&injected(&few, &public, &settings(Some(1.0), 0.0, 0.0))), ["few-0", "few-1", "few-2"]);
    // With a background, the floor (0.1) holds however a record stands out.
    let mut low = TenantIndex::default();
    for i in 0..20 {
        low.upsert(item(record(&format!("low-{i}"), &["public"], VALID, "v1"), Some(at(-0.3, i)), &[]));
    }
    low.upsert(item(record("above", &["public"], VALID, "v1"), Some(at(0.12, 1)), &[]));
    low.upsert(item(record("below", &["public"], VALID, "v1"), Some(at(0.05, 2)), &[]));
    assert_eq!(ids(&injected(&low, &public, &settings(Some(1.0), 0.0, 0.0))), ["above"]);
}

#[test]
fn what_a_caller_may_not_see_never_moves_its_bar_or_its_ranking() {
    // Property: for random tenants, adding records in scopes the caller lacks (and records it
    // sees but that are expired) changes nothing the caller gets, scores included.
    let mut rng = Rng(7);
    for round in 0..40 {
        let mut mine = TenantIndex::default();
        let mut shared = TenantIndex::default();
        let n = 3 + rng.below(30);
        for i in 0..n {
            let similarity = rng.below(100) as f32 / 100.0;
            let r = threaded(&format!("r{i}"), &["public", "user:u1"][..1 + rng.below(2)], "c", 2 * i as u32);
            mine.upsert(item(r.clone(), Some(at(similarity, i)), &[]));
            shared.upsert(item(r, Some(at(similarity, i)), &[]));
        }
        for i in 0..rng.below(40) {
            let similarity = rng.below(100) as f32 / 100.0;
            let scope = ["team:x", "user:u2"][rng.below(2)];
            // In the same thread, between the caller's records.
            shared.upsert(item(
                threaded(&format!("hidden{i}"), &[scope], "c", 1 + 2 * rng.below(n) as u32),
                Some(at(similarity, i)),
                &[],
            ));
            let mut expired = threaded(&format!("expired{i}"), &["public"], "c", 2 * rng.below(n) as u32 + 1);
            expired.valid_until_ms = NOW - 1;
            shared.upsert(item(expired, Some(at(similarity, i + 1)), &[]));
        }
        let mut who = caller(&["public", "user:u1"]);
        who.subject = Some("u1".into());
        for s in [settings(Some(1.0), 0.1, 0.5), settings(Some(0.5), 0.0, 1.0), settings(None, 0.2, 0.5)] {
            assert_eq!(injected(&mine, &who, &s), injected(&shared, &who, &s), "round {round}");
        }
    }
}

#[test]
fn the_callers_own_records_weigh_more_for_that_subject_alone() {
    let mut index = TenantIndex::default();
    for i in 0..10 {
        index.upsert(item(record(&format!("kb-{i}"), &["public"], VALID, "v1"), Some(at(0.0, i)), &[]));
    }
    index.upsert(item(record("sop", &["public"], VALID, "v1"), Some(at(0.30, 2)), &[]));
    index.upsert(item(record("my-order", &["user:u1"], VALID, "v1"), Some(at(0.25, 4)), &[]));
    let mut subject = caller(&["public", "user:u1"]);
    subject.subject = Some("u1".into());
    let boosted = injected(&index, &subject, &settings(Some(1.0), 0.1, 0.0));
    assert_eq!(ids(&boosted), ["my-order", "sop"]);
    assert!((boosted[0].1 - 0.35).abs() < 0.01, "{boosted:?}");
    // Unboosted: the order of the similarities.
    assert_eq!(ids(&injected(&index, &subject, &settings(Some(1.0), 0.0, 0.0))), ["sop", "my-order"]);
    // A caller that sees the record without being its subject (an agent of the team) gets no boost.
    let team = caller(&["public", "user:u1"]);
    assert_eq!(ids(&injected(&index, &team, &settings(Some(1.0), 0.1, 0.0))), ["sop", "my-order"]);
}

#[test]
fn a_hit_lifts_its_neighbours_and_lets_the_nearest_in() {
    let mut index = TenantIndex::default();
    for i in 0..12 {
        index.upsert(item(record(&format!("noise-{i}"), &["public"], VALID, "v1"), Some(at(0.0, i)), &[]));
    }
    // A conversation: the question's topic is named at turn 2; the answer, turn 3, shares little
    // with the question. An isolated record scores what the answer scores.
    let turns = [("t0", 0.0), ("t1", 0.02), ("topic", 0.6), ("answer", 0.12), ("t4", 0.0), ("t5", 0.01)];
    for (position, (id, similarity)) in turns.iter().enumerate() {
        index.upsert(item(
            threaded(id, &["public"], "conv", position as u32),
            Some(at(*similarity, position)),
            &[],
        ));
    }
    index.upsert(item(record("isolated", &["public"], VALID, "v1"), Some(at(0.5, 9)), &[]));
    let public = caller(&["public"]);
    let without = injected(&index, &public, &settings(Some(1.0), 0.0, 0.0));
    assert_eq!(ids(&without), ["topic", "isolated"], "only the two that stand out");
    let with = injected(&index, &public, &settings(Some(1.0), 0.0, 0.5));
    // Within two places of the topic, each lifted by its neighbours (0.5 × the best adjacent,
    // 0.25 × the best two places away), and let in when its own score reaches the release's
    // floor (0.1): the answer (0.12) does; t0, t1 and t4, which say nothing of the question, do
    // not, however near the topic they are filed; t5 is three places away.
    let score = |id: &str| with.iter().find(|(i, _)| i == id).map(|(_, s)| *s);
    assert_eq!(ids(&with), ["topic", "isolated", "answer"], "{with:?}");
    let expected = [("topic", 0.6 + 0.5 * 0.12), ("answer", 0.12 + 0.5 * 0.6 + 0.25 * 0.02)];
    for (id, want) in expected {
        let got = score(id).unwrap_or_else(|| panic!("{id} is not in {with:?}"));
        assert!((got - want).abs() < 0.02, "{id}: {got} against {want}");
    }
    for id in ["t0", "t1", "t4", "t5"] {
        assert_eq!(score(id), None, "{id}: {with:?}");
    }
    assert!(score("isolated").is_some_and(|s| (s - 0.5).abs() < 0.01), "no thread, no lift: {with:?}");
}
