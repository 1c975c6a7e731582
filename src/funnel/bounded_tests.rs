//! The bounded semantic layer against the unbounded one: what a request injects (records and
//! stubs, in order) is the same whether the layer keeps its best few hits or every hit, over
//! random vectors, priorities, sizes, thresholds and budgets, on the exact scan and the IVF path,
//! dense and hybrid; and a request's scan reads the rows of what its caller may see, however many
//! other customers' profiles the tenant holds.

use super::semantic::{self, Hybrid, SemanticQuery, TopK};
use super::tests::{DAY, NOW, Vectors, caller, item, record};
use super::trace::{Detail, Trace};
use super::{FunnelOutput, FunnelSettings, Retrieval};
use crate::index::TenantIndex;
use crate::record::OPEN_END_MS;
use crate::vector::ivf::Probes;
use crate::vector::testing::Rng;

const WORDS: [&str; 12] = [
    "refund", "invoice", "courier", "warranty", "battery", "sofa", "cushion", "delivery", "voucher", "label",
    "parcel", "return",
];

/// A tenant of `n` public records near a few topics, with random priorities, token costs, ages and
/// a few words each (for the lexical ranking).
fn tenant(rng: &mut Rng, vectors: &Vectors, n: usize) -> TenantIndex {
    tenant_of_sizes(rng, vectors, n, |rng| 20 + rng.below(300))
}

/// The same, with each record's token count drawn by `tokens`.
fn tenant_of_sizes(rng: &mut Rng, vectors: &Vectors, n: usize, tokens: fn(&mut Rng) -> usize) -> TenantIndex {
    let mut index = TenantIndex::default();
    for i in 0..n {
        let mut r = record(&format!("r{i:05}"), &["public"], (0, OPEN_END_MS), "v1");
        r.priority = (1 + rng.below(5)) as u8;
        r.updated_at_ms = NOW - rng.below(30) as i64 * DAY;
        let statement: Vec<&str> = (0..3).map(|_| WORDS[rng.below(WORDS.len())]).collect();
        r.content = serde_json::json!({"statement": statement.join(" ")});
        let key = (i % 250 == 0).then(|| format!("ord-{i}"));
        let mut it = crate::index::IndexedRecord::new(r, Some(std::sync::Arc::from(vectors.record(rng))));
        it.tokens = tokens(rng);
        if let (Some(key), Some(arriving)) = (key, it.arriving.as_mut()) {
            arriving.terms.push(key);
        }
        index.upsert(it);
    }
    index
}

fn settings(
    threshold: f32,
    budget_tokens: usize,
    max_items: usize,
    max_stubs: usize,
    retrieval: Retrieval,
) -> FunnelSettings {
    FunnelSettings {
        schema_versions: vec!["v1".into()],
        threshold,
        budget_tokens,
        max_items,
        max_stubs,
        probes: Probes::ALL,
        retrieval,
        cut: super::cut::Cut::OFF,
        standout: None,
        subject_boost: 0.0,
        neighbour_weight: 0.0,
        inject_writers: crate::record::WriterSet::ALL,
    }
}

fn injected(out: &FunnelOutput) -> (Vec<String>, Vec<String>) {
    let ids = |c: &[super::density::Chosen]| c.iter().map(|c| c.item.head.id().to_string()).collect();
    (ids(&out.packed.injected), ids(&out.packed.stubs))
}

/// Runs the funnel bounded (as requests do) and unbounded (a detailed run scans without a bound),
/// and the unbounded layer packed directly, over many queries; all three must inject the same.
/// Returns how many bounded scans left hits out, and how many blocks were filled from them.
fn compare(
    index: &TenantIndex,
    rng: &mut Rng,
    vectors: &Vectors,
    stored: &[Vec<f32>],
    queries: usize,
) -> (usize, usize) {
    let lexical_texts =
        ["refund for the courier", "sofa cushion voucher delivery", "where is ord-500", "battery"];
    let who = caller(&["public"]);
    let (mut bounded_hits, mut filled) = (0, 0);
    for q in 0..queries {
        let target = rng.below(stored.len());
        let query = vectors.near(rng, &stored[target], [0.01, 0.04, 0.08][q % 3]);
        let text = lexical_texts[q % lexical_texts.len()];
        let lexical = crate::lexical::LexicalQuery::new(crate::lexical::analyzer(), text);
        for threshold in [0.3, 0.6, 0.8, 0.9] {
            for (budget, items, stubs) in
                [(3000, 5, 3), (400, 5, 3), (3000, 20, 0), (100, 2, 10), (919, 64, 3)]
            {
                for retrieval in [Retrieval::Dense, Retrieval::HYBRID] {
                    let hybrid = match retrieval {
                        Retrieval::Hybrid { lexical_weight, min_lexical } => {
                            Some(Hybrid { query: &lexical, lexical_weight, min_lexical })
                        }
                        Retrieval::Dense => None,
                    };
                    let sq = SemanticQuery {
                        text,
                        vector: Some(&query),
                        threshold,
                        probes: Probes::ALL,
                        hybrid,
                        lift: crate::funnel::semantic::Lift::NONE,
                    };
                    let s = settings(threshold, budget, items, stubs, retrieval);
                    let fast = super::run(index, &who, &sq, &s, NOW, Detail::Off);
                    let full = super::run(index, &who, &sq, &s, NOW, Detail::Full);
                    let context = format!(
                        "query {q} threshold {threshold} budget {budget}/{items}/{stubs} {retrieval:?}"
                    );
                    assert_eq!(injected(&fast), injected(&full), "{context}");
                    let current = fast.current.clone();
                    let all = semantic::matching(index, &current, &sq, false, &mut Trace::default());
                    let budget = super::density::Budget {
                        tokens: budget,
                        max_items: items,
                        max_stubs: stubs,
                        cut: super::cut::Cut::OFF,
                    };
                    let packed = super::density::pack(index, &all, &budget, false, &mut Trace::default());
                    let ids = |c: &[super::density::Chosen]| -> Vec<String> {
                        c.iter().map(|c| c.item.head.id().to_string()).collect()
                    };
                    assert_eq!(injected(&fast), (ids(&packed.injected), ids(&packed.stubs)), "{context}");
                    let mut first = Trace::default();
                    let bounded = semantic::matching_within(
                        index,
                        &current,
                        Some(&who.scopes),
                        &sq,
                        TopK::for_cap(items, stubs),
                        false,
                        &mut first,
                    );
                    // Scanned again, but not every hit packed: the block's room was filled from
                    // what the bounded scan left out.
                    filled += usize::from(fast.trace.scanned > first.scanned && !fast.trace.packed_every_hit);
                    let exact = bounded.hits.iter().filter(|h| h.exact).count();
                    let words = if hybrid.is_some() { 100 } else { 0 };
                    assert!(
                        bounded.hits.len()
                            <= exact
                                + words
                                + TopK::for_cap(items, stubs).best
                                + TopK::for_cap(items, stubs).high_priority,
                        "{context}: {} hits kept",
                        bounded.hits.len()
                    );
                    bounded_hits += usize::from(bounded.floor.is_some());
                }
            }
        }
    }
    (bounded_hits, filled)
}

#[test]
fn bounded_scan_injects_what_a_full_exact_scan_injects() {
    let mut rng = Rng(0x70b);
    let vectors = Vectors::new(&mut rng, 64, 6);
    let index = tenant(&mut rng, &vectors, 3000);
    assert!(index.ann.is_empty());
    let stored: Vec<Vec<f32>> = (0..50).filter_map(|s| index.vector(s).map(|v| v.to_vec())).collect();
    let (bounded, filled) = compare(&index, &mut rng, &vectors, &stored, 24);
    assert!(bounded > 100, "the low thresholds must fill the heaps, or the bound is not tested: {bounded}");
    assert!(filled >= 8, "blocks the budget ends must be filled from the left-out hits: {filled}");
}

#[test]
fn bounded_scan_injects_what_a_full_scan_injects_on_the_ivf_path() {
    let mut rng = Rng(0x1f5);
    let vectors = Vectors::new(&mut rng, 32, 8);
    let index = tenant(&mut rng, &vectors, 9000);
    assert!(index.ann.contains_key("public"));
    let stored: Vec<Vec<f32>> = (0..50).filter_map(|s| index.vector(s).map(|v| v.to_vec())).collect();
    let (bounded, filled) = compare(&index, &mut rng, &vectors, &stored, 6);
    assert!(bounded > 20, "{bounded}");
    assert!(filled >= 3, "blocks the budget ends must be filled from the left-out hits: {filled}");
}

/// A tenant of `public` records, then `others` customers' profiles (one `user:<i>` each), and
/// the caller's own profile: the rows a request reads are those of what the caller may see.
fn scanned_for(public: usize, others: usize) -> (usize, usize, Vec<String>) {
    let mut rng = Rng(0x5c0);
    let vectors = Vectors::new(&mut rng, 32, 8);
    let mut index = TenantIndex::default();
    for i in 0..public {
        let r = record(&format!("kb{i}"), &["public"], (0, OPEN_END_MS), "v1");
        index.upsert(item(r, Some(vectors.record(&mut rng)), &[]));
    }
    let mut other_rng = Rng(0x07e);
    for i in 0..others {
        let r = record(&format!("profile-{i}"), &[&format!("user:c{i}")], (0, OPEN_END_MS), "v1");
        index.upsert(item(r, Some(vectors.record(&mut other_rng)), &[]));
    }
    let own = vectors.record(&mut rng);
    index.upsert(item(record("profile-me", &["user:me"], (0, OPEN_END_MS), "v1"), Some(own.clone()), &[]));
    let me = caller(&["public", "user:me"]);
    let query = vectors.near(&mut rng, &own, 0.01);
    let sq = SemanticQuery {
        text: "",
        vector: Some(&query),
        threshold: 0.5,
        probes: semantic::DEFAULT_PROBES,
        hybrid: None,
        lift: crate::funnel::semantic::Lift::NONE,
    };
    let out = super::run(&index, &me, &sq, &settings(0.5, 3000, 5, 3, Retrieval::Dense), NOW, Detail::Off);
    (out.trace.scanned, out.current.len(), injected(&out).0)
}

#[test]
fn a_subjects_scan_reads_only_what_it_may_see() {
    // Exact path: every visible record's row, none of the other customers'.
    for others in [1_000, 20_000] {
        let (scanned, visible, injected) = scanned_for(300, others);
        assert_eq!((scanned, visible), (301, 301), "{others} other customers");
        assert_eq!(injected.first().map(String::as_str), Some("profile-me"));
    }
    // The IVF path (public is large enough for its own index): the probed lists of `public` and
    // the caller's own profile, the same rows with 1,000 or 20,000 other customers.
    let (few, visible, injected) = scanned_for(9_000, 1_000);
    let (many, _, injected_many) = scanned_for(9_000, 20_000);
    assert_eq!(visible, 9_001);
    assert!(few < visible, "the IVF reads part of what is visible: {few}");
    assert_eq!(few, many, "other customers' profiles cost the request nothing");
    assert_eq!(injected.first().map(String::as_str), Some("profile-me"));
    assert_eq!(injected, injected_many);
}

/// The rules beyond the threshold (the standout cut, the subject's boost, neighbours in threads)
/// keep the bounded run's promise: a request injects what scoring every hit would, over random
/// threaded tenants, the caller's own records among them.
#[test]
fn the_bounded_run_injects_what_the_unbounded_one_does_with_standout_boost_and_neighbours() {
    let mut rng = Rng(41);
    let vectors = Vectors::new(&mut rng, 32, 6);
    for n in [40, 400, 1500] {
        let mut index = TenantIndex::default();
        let mut stored = Vec::new();
        for i in 0..n {
            let scope = if i % 7 == 0 { "user:u1" } else { "public" };
            let mut r = record(&format!("r{i:05}"), &[scope], (0, OPEN_END_MS), "v1");
            r.priority = (1 + rng.below(5)) as u8;
            r.metadata.insert("thread".into(), format!("chat-{}", i / 12).into());
            r.metadata.insert("position".into(), (i % 12).into());
            let vector = vectors.record(&mut rng);
            stored.push(vector.clone());
            let mut it = crate::index::IndexedRecord::new(r, Some(std::sync::Arc::from(vector)));
            it.tokens = 20 + rng.below(200);
            index.upsert(it);
        }
        let mut who = caller(&["public", "user:u1"]);
        who.subject = Some("u1".into());
        for q in 0..30 {
            let target = rng.below(stored.len());
            let query = vectors.near(&mut rng, &stored[target], [0.02, 0.06][q % 2]);
            for (z, boost, weight) in [(1.0, 0.1, 0.5), (0.5, 0.0, 1.0), (2.0, 0.2, 0.25)] {
                for (budget, items) in [(919, 64), (300, 5), (3000, 3)] {
                    let mut s = settings(0.19, budget, items, 2, Retrieval::Dense);
                    s.standout = Some(super::background::Standout { z, floor: 0.1 });
                    s.subject_boost = boost;
                    s.neighbour_weight = weight;
                    let sq = SemanticQuery {
                        text: "",
                        vector: Some(&query),
                        threshold: s.threshold,
                        probes: Probes::ALL,
                        hybrid: None,
                        lift: crate::funnel::semantic::Lift::NONE,
                    };
                    let fast = super::run(&index, &who, &sq, &s, NOW, Detail::Off);
                    let full = super::run(&index, &who, &sq, &s, NOW, Detail::Full);
                    let context = format!(
                        "n {n} query {q} z {z} boost {boost} weight {weight} budget {budget}/{items}"
                    );
                    assert_eq!(injected(&fast), injected(&full), "{context}");
                }
            }
        }
    }
}

/// Records that share one embedding (a CRM's records built from a pool of texts; copies of one
/// article) score exactly alike, so the heaps' floor falls among ties. The bounded run still
/// injects what the unbounded one does, in the same order, with the release's rules on (words,
/// standout, the subject's boost, neighbours) and without.
#[test]
fn the_bounded_run_injects_what_the_unbounded_one_does_when_records_tie() {
    let mut rng = Rng(0x71e5);
    let vectors = Vectors::new(&mut rng, 16, 6);
    let pool: Vec<Vec<f32>> = (0..40).map(|_| vectors.record(&mut rng)).collect();
    let mut index = TenantIndex::default();
    for i in 0..1500 {
        let scope = if i % 9 == 0 { "user:u1" } else { "public" };
        let mut r = record(&format!("r{i:05}"), &[scope], (0, OPEN_END_MS), "v1");
        r.priority = (1 + rng.below(5)) as u8;
        r.updated_at_ms = NOW - rng.below(3) as i64 * DAY;
        let statement: Vec<&str> = (0..3).map(|_| WORDS[rng.below(WORDS.len())]).collect();
        r.content = serde_json::json!({"statement": statement.join(" ")});
        if i % 3 == 0 {
            r.metadata.insert("thread".into(), format!("doc-{}", i / 30).into());
            r.metadata.insert("position".into(), (i % 30).into());
        }
        let mut it = crate::index::IndexedRecord::new(
            r,
            Some(std::sync::Arc::from(pool[rng.below(pool.len())].clone())),
        );
        it.tokens = 20 + rng.below(120);
        index.upsert(it);
    }
    let mut who = caller(&["public", "user:u1"]);
    who.subject = Some("u1".into());
    let lexical = crate::lexical::LexicalQuery::new(crate::lexical::analyzer(), "courier refund voucher");
    for q in 0..12 {
        let query = vectors.near(&mut rng, &pool[q % pool.len()], [0.02, 0.08][q % 2]);
        for rules in [false, true] {
            for (budget, items) in [(919, 64), (400, 5), (3000, 20)] {
                let mut s = settings(0.19, budget, items, 2, Retrieval::HYBRID);
                if rules {
                    s.standout = Some(super::background::Standout { z: 1.0, floor: 0.1 });
                    s.subject_boost = 0.1;
                    s.neighbour_weight = 0.5;
                }
                let Retrieval::Hybrid { lexical_weight, min_lexical } = s.retrieval else { continue };
                let sq = SemanticQuery {
                    text: "courier refund voucher",
                    vector: Some(&query),
                    threshold: s.threshold,
                    probes: Probes::ALL,
                    hybrid: Some(Hybrid { query: &lexical, lexical_weight, min_lexical }),
                    lift: crate::funnel::semantic::Lift::NONE,
                };
                let fast = super::run(&index, &who, &sq, &s, NOW, Detail::Off);
                let full = super::run(&index, &who, &sq, &s, NOW, Detail::Full);
                assert_eq!(
                    injected(&fast),
                    injected(&full),
                    "query {q} rules {rules} budget {budget}/{items}"
                );
            }
        }
    }
}

/// A query along the first of 16 axes.
fn the_axis() -> Vec<f32> {
    let mut q = vec![0.0f32; 16];
    q[0] = 1.0;
    q
}

/// A public record of `tokens` whose similarity to `the_axis` is `similarity` (the rest of its
/// vector on axis `1 + k % 15`).
fn add_on_the_axis(index: &mut TenantIndex, id: &str, similarity: f32, k: usize, tokens: usize) {
    let mut v = vec![0.0f32; 16];
    v[0] = similarity;
    v[1 + k % 15] = (1.0 - similarity * similarity).sqrt();
    let mut it = crate::index::IndexedRecord::new(
        record(id, &["public"], (0, OPEN_END_MS), "v1"),
        Some(std::sync::Arc::from(v)),
    );
    it.tokens = tokens;
    index.upsert(it);
}

/// A dense query along `the_axis` at 0.19, no words, no lift.
fn dense(query: &[f32]) -> SemanticQuery<'_> {
    SemanticQuery {
        text: "",
        vector: Some(query),
        threshold: 0.19,
        probes: Probes::ALL,
        hybrid: None,
        lift: crate::funnel::semantic::Lift::NONE,
    }
}

/// The funnel over `index` for a public caller asking along `the_axis`, with a 1,000-token budget
/// and five items: bounded (as requests run) and unbounded (a detailed trace).
fn bounded_and_full(index: &TenantIndex) -> (FunnelOutput, FunnelOutput) {
    let who = caller(&["public"]);
    let s = settings(0.19, 1000, 5, 0, Retrieval::Dense);
    let query = the_axis();
    let sq = dense(&query);
    (super::run(index, &who, &sq, &s, NOW, Detail::Off), super::run(index, &who, &sq, &s, NOW, Detail::Full))
}

/// A hit ruled out by the full heap's floor before it was scored is still a hit left out: when
/// the block has room for it (few large records fill the budget, not the cap), the run must look
/// for it rather than trust the heap. Before this was counted, the small record below went
/// missing from the bounded run.
#[test]
fn a_hit_ruled_out_by_a_full_heap_still_counts_as_left_out() {
    let mut index = TenantIndex::default();
    // Sixty-four large records that all score well, then one small record scoring less.
    for i in 0..64 {
        add_on_the_axis(&mut index, &format!("large-{i:02}"), 0.9 - 0.001 * i as f32, i, 300);
    }
    add_on_the_axis(&mut index, "small", 0.5, 3, 20);
    let (fast, full) = bounded_and_full(&index);
    assert_eq!(injected(&full).0, ["large-00", "large-01", "large-02", "small"]);
    assert_eq!(injected(&fast), injected(&full));
}

/// The scan scores candidates in the order of their int8 bounds, best first, and stops where no
/// bound reaches the heaps' floors. Records added worst first — each would beat the floor the
/// earlier ones set, were they scored in slot order — cost the exact scores of about the best
/// few, not one each; the heaps keep the best, and the run injects what scoring every hit does.
#[test]
fn the_scan_scores_the_best_bounds_first_and_stops_at_the_floor() {
    let mut index = TenantIndex::default();
    let n = 2000;
    for i in 0..n {
        add_on_the_axis(&mut index, &format!("r{i:04}"), 0.2 + 0.7 * i as f32 / n as f32, i, 50);
    }
    let (fast, full) = bounded_and_full(&index);
    assert_eq!(injected(&fast), injected(&full));
    assert_eq!(injected(&full).0, ["r1999", "r1998", "r1997", "r1996", "r1995"]);
    let mut trace = Trace::default();
    let (who, query) = (caller(&["public"]), the_axis());
    let top = TopK::for_cap(5, 0);
    let bounded = semantic::matching_within(
        &index,
        &fast.current,
        Some(&who.scopes),
        &dense(&query),
        top,
        false,
        &mut trace,
    );
    assert_eq!(trace.scanned, n, "every candidate is bounded");
    assert!(
        trace.scored < 3 * top.best,
        "{} of {n} candidates scored exactly, for {} kept",
        trace.scored,
        top.best
    );
    let mut kept: Vec<&str> = bounded
        .hits
        .iter()
        .filter_map(|h| index.slots[h.slot as usize].as_ref())
        .map(|r| r.head.id())
        .collect();
    kept.sort_unstable();
    let best: Vec<String> = (n - top.best..n).map(|i| format!("r{i:04}")).collect();
    assert_eq!(kept, best);

    // A subject's request boosts its own records: each bound carries its own slot's boost, not
    // the most any slot gains, or every row within the boost of the floor would be scored too.
    let own = [index.slot_of("r0100").unwrap_or(u32::MAX)];
    let mut boosted = dense(&query);
    boosted.lift.boost = super::background::Boost { slots: &own, amount: 0.1 };
    let mut trace = Trace::default();
    let bounded =
        semantic::matching_within(&index, &fast.current, Some(&who.scopes), &boosted, top, false, &mut trace);
    assert!(trace.scored < 3 * top.best, "{} scored with a boost", trace.scored);
    assert_eq!(bounded.hits.len(), top.best);
}

/// A block the budget ends, with room for a small record the bounded scan left out: the run
/// finds it by scanning again for what fits the room — the one record of 20 tokens, not the
/// hundreds of large ones — instead of scoring and packing every hit again, and injects what
/// packing every hit injects.
#[test]
fn the_room_a_budget_leaves_is_filled_from_what_fits_it_without_packing_every_hit() {
    let mut index = TenantIndex::default();
    // Three hundred large records that score well, one small one below them, a hundred medium
    // ones below that: three large records leave 100 tokens, which only the small one fits.
    for i in 0..300 {
        add_on_the_axis(&mut index, &format!("large-{i:03}"), 0.9 - 0.001 * i as f32, i, 300);
    }
    add_on_the_axis(&mut index, "small", 0.5, 3, 20);
    for i in 0..100 {
        add_on_the_axis(&mut index, &format!("medium-{i:03}"), 0.45 - 0.001 * i as f32, i, 200);
    }
    let (fast, full) = bounded_and_full(&index);
    assert_eq!(injected(&full).0, ["large-000", "large-001", "large-002", "small"]);
    assert_eq!(injected(&fast), injected(&full));
    assert!(!fast.trace.packed_every_hit);
    let mut first = Trace::default();
    let (who, query) = (caller(&["public"]), the_axis());
    let bounded = semantic::matching_within(
        &index,
        &fast.current,
        Some(&who.scopes),
        &dense(&query),
        TopK::for_cap(5, 0),
        false,
        &mut first,
    );
    assert!(bounded.floor.is_some(), "the bounded scan must leave hits out");
    assert_eq!(first.scanned, 401);
    assert_eq!(
        fast.trace.scanned,
        first.scanned + 1,
        "the second scan reads only the record that fits the room"
    );
}

/// Many large records and some small ones, a budget that ends nearly every block with room: the
/// room is filled, often over several rounds (each round's small records leave a smaller room),
/// and what is injected is what packing every hit injects, dense and hybrid, on the exact scan and
/// the IVF path.
#[test]
fn filling_the_room_injects_what_packing_every_hit_does() {
    let mut rng = Rng(0xf111);
    let vectors = Vectors::new(&mut rng, 32, 6);
    for n in [2000, 9000] {
        let sizes = |rng: &mut Rng| if rng.below(50) == 0 { 5 + rng.below(40) } else { 250 + rng.below(100) };
        let index = tenant_of_sizes(&mut rng, &vectors, n, sizes);
        assert_eq!(index.ann.contains_key("public"), n > 4096);
        let who = caller(&["public"]);
        let (mut filled, mut every_hit) = (0, 0);
        for q in 0..40 {
            let target = index.vector(rng.below(n) as u32).map(|v| v.to_vec()).unwrap_or_default();
            let query = vectors.near(&mut rng, &target, [0.02, 0.06][q % 2]);
            let lexical =
                crate::lexical::LexicalQuery::new(crate::lexical::analyzer(), "sofa courier refund");
            for retrieval in [Retrieval::Dense, Retrieval::HYBRID] {
                let hybrid = match retrieval {
                    Retrieval::Hybrid { lexical_weight, min_lexical } => {
                        Some(Hybrid { query: &lexical, lexical_weight, min_lexical })
                    }
                    Retrieval::Dense => None,
                };
                for (budget, items) in [(919, 64), (1200, 64), (700, 8)] {
                    let sq = SemanticQuery {
                        text: "sofa courier refund",
                        vector: Some(&query),
                        threshold: 0.0,
                        probes: Probes::ALL,
                        hybrid,
                        lift: crate::funnel::semantic::Lift::NONE,
                    };
                    let s = settings(0.0, budget, items, 3, retrieval);
                    let fast = super::run(&index, &who, &sq, &s, NOW, Detail::Off);
                    let full = super::run(&index, &who, &sq, &s, NOW, Detail::Full);
                    assert_eq!(
                        injected(&fast),
                        injected(&full),
                        "n {n} query {q} {retrieval:?} {budget}/{items}"
                    );
                    let semantic = fast.trace.layers.iter().find(|l| l.layer == "semantic");
                    let density = fast.trace.layers.iter().find(|l| l.layer == "token_density");
                    assert_eq!(
                        semantic.map(|l| l.output),
                        density.map(|l| l.input),
                        "one layer's output is the next one's input"
                    );
                    let mut first = Trace::default();
                    let top = TopK::for_cap(items, 3);
                    semantic::matching_within(
                        &index,
                        &fast.current,
                        Some(&who.scopes),
                        &sq,
                        top,
                        false,
                        &mut first,
                    );
                    every_hit += usize::from(fast.trace.packed_every_hit);
                    filled += usize::from(fast.trace.scanned > first.scanned && !fast.trace.packed_every_hit);
                }
            }
        }
        assert!(filled > 40, "n {n}: blocks filled to the last small record: {filled}");
        assert!(
            every_hit < filled,
            "n {n}: packing every hit must be the exception: {every_hit} of {filled}"
        );
    }
}
