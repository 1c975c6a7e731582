//! `funnel_bench`: the funnel's latency without embedding, at several tenant sizes.
//!
//! For each size it builds one tenant of synthetic records (realistic content sizes; scopes
//! mixing `public`, teams and users; some expired or not yet valid) with synthetic 384-dim
//! L2-normalized vectors, loads them with `MemoryIndex::load` (which builds the IVF index from
//! `ANN_MIN_RECORDS` on), and times `funnel::run` for many queries whose vectors lie near some
//! record, always for the same caller. Where the tenant has an IVF index it also forces an exact
//! scan (the index taken out) on the same queries, so the crossover is visible, and measures the
//! IVF path's recall: of the exact scan's top-5 above-threshold similarity hits, the fraction the
//! IVF path also returns.
//!
//! The vectors imitate e5's anisotropy: every vector shares one common direction, records of a
//! topic share a centre, plus per-record noise. Unrelated records score about 0.70, records of
//! one topic about 0.85, and a query about 0.88–0.98 to the record it was drawn near, so the
//! production threshold (0.80) lets the target and some of its topic through. The program prints
//! the measured score distribution, so the set-up can be judged.
//!
//! Run: `cargo run --release --example funnel_bench -- [--sizes 1k,10k,100k] [--json]`.
#![allow(clippy::print_stdout)]

#[path = "common.rs"]
mod common;

use clap::Parser;
use common::{BoxError, Rng, Summary, ms, noise, normalize, sentence};
use memgate::clock::now_ms;
use memgate::funnel::semantic::{self, DEFAULT_PROBES, EXACT_SCAN_MAX, SemanticQuery};
use memgate::funnel::trace::{Detail, Trace};
use memgate::funnel::{self, FunnelSettings, density, scope, temporal};
use memgate::identity::Caller;
use memgate::index::terms;
use memgate::index::{IndexedRecord, MemoryIndex, TenantIndex};
use memgate::record::{OPEN_END_MS, Record, Status};
use memgate::vector::dot;
use memgate::vector::ivf::Probes;
use memgate::vector::quant::QuantizedQuery;
use serde_json::{Map, Value, json};
use std::collections::HashSet;
use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

const DIMS: usize = 384;
const TENANT: &str = "bench";
const DAY_MS: i64 = 86_400_000;
/// Squared weights of the common direction and of the topic centre; the rest is noise.
const COMMON: f32 = 0.70;
const TOPIC: f32 = 0.16;
/// Average records per topic.
const TOPIC_SIZE: usize = 40;

/// Funnel latency without embedding, at several tenant sizes, IVF vs exact scan.
#[derive(Parser, Debug)]
#[command(name = "funnel_bench")]
struct Args {
    /// Tenant sizes (records), comma-separated; `k` means thousands.
    #[arg(long, default_value = "1k,10k,100k")]
    sizes: String,
    /// Timed queries per size and path.
    #[arg(long, default_value_t = 1000)]
    queries: usize,
    /// Queries per point of the probe sweep.
    #[arg(long, default_value_t = 500)]
    sweep_queries: usize,
    /// Semantic threshold. The synthetic vectors imitate raw e5 cosines, so the raw default (0.80).
    #[arg(long, default_value_t = memgate::config::RAW_SIMILARITY)]
    threshold: f32,
    /// IVF probes to sweep on the largest size (recall vs latency): `N` lists or `P%` of the
    /// lists; empty for none.
    #[arg(long, default_value = "16,32,48,64,96,6%,8%,10%")]
    probe_sweep: String,
    /// Skip the forced exact scan on sizes that have an IVF index.
    #[arg(long)]
    no_exact: bool,
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Print one JSON object instead of tables.
    #[arg(long)]
    json: bool,
}

fn main() -> Result<(), BoxError> {
    let args = Args::parse();
    let sizes = common::parse_sizes(&args.sizes)?;
    let sweep: Vec<Probes> = if args.probe_sweep.trim().is_empty() {
        Vec::new()
    } else {
        args.probe_sweep.split(',').map(|p| parse_probes(p.trim())).collect::<Result<_, _>>()?
    };
    let machine_before = common::machine();
    let dot_cost = dot_micro(args.seed);
    let largest = sizes.iter().copied().max().unwrap_or(0);
    let mut results = Vec::new();
    for &size in &sizes {
        let probes = if size == largest { sweep.as_slice() } else { &[] };
        let result = bench_size(&args, size, probes)?;
        if !args.json {
            eprintln!("done: {size} records ({})", common::load_line());
        }
        results.push(result);
    }
    let report = json!({
        "bench": "funnel_bench",
        "dims": DIMS,
        "threshold": common::f32r(args.threshold),
        "queries": args.queries,
        "default_probes": DEFAULT_PROBES.to_string(),
        "exact_scan_max": EXACT_SCAN_MAX,
        "dot_product_ns": dot_cost,
        "ann_min_records": memgate::index::ANN_MIN_RECORDS,
        "machine_before": machine_before,
        "machine_after": common::machine(),
        "sizes": results,
    });
    if args.json {
        println!("{report}");
    } else {
        print_tables(&report);
    }
    Ok(())
}

struct Query {
    text: String,
    vector: Vec<f32>,
}

/// `N`: N lists; `P%`: P % of the lists (at least the default's minimum).
fn parse_probes(p: &str) -> Result<Probes, BoxError> {
    Ok(match p.strip_suffix('%') {
        Some(percent) => {
            let min = match DEFAULT_PROBES {
                Probes::Share { min, .. } => min,
                Probes::Lists(_) => 1,
            };
            Probes::Share { share: percent.parse::<f32>()? / 100.0, min }
        }
        None => Probes::Lists(p.parse()?),
    })
}

fn bench_size(args: &Args, size: usize, sweep: &[Probes]) -> Result<Value, BoxError> {
    let mut rng = Rng::new(args.seed ^ size as u64);
    let now = now_ms();
    let world = World::new(&mut rng, size);

    let started = Instant::now();
    let records: Vec<(Record, Vec<f32>)> = (0..size).map(|i| world.record(&mut rng, i, now)).collect();
    let generate = started.elapsed();
    let started = Instant::now();
    let items: Vec<IndexedRecord> =
        records.iter().map(|(r, v)| IndexedRecord::new(r.clone(), Some(Arc::from(v.as_slice())))).collect();
    let index_records = started.elapsed();
    let tokens: Vec<usize> = items.iter().map(|i| i.tokens).collect();
    let rss_before = rss_bytes();
    let started = Instant::now();
    let index = MemoryIndex::default();
    index.load(items);
    let load = started.elapsed();
    // What the index holds beyond the records' own bytes: the items' f32 vectors were dropped
    // on insert (freed memory glibc may keep, so an upper bound).
    let rss_after = rss_bytes();
    let tenant = index.tenant(TENANT).ok_or("the tenant was not loaded")?;

    let queries: Vec<Query> = (0..args.queries).map(|_| world.query(&mut rng, &records)).collect();
    let warmup: Vec<Query> = (0..200).map(|_| world.query(&mut rng, &records)).collect();
    let caller = caller();
    let settings = FunnelSettings {
        schema_versions: vec!["v1".into()],
        threshold: args.threshold,
        budget_tokens: 3000,
        max_items: 5,
        max_stubs: 3,
        probes: DEFAULT_PROBES,
        // The dense path alone: this bench measures the vector scans (hybrid_eval the words).
        retrieval: memgate::funnel::Retrieval::Dense,
        cut: memgate::funnel::cut::Cut::OFF,
        standout: None,
        subject_boost: 0.0,
        neighbour_weight: 0.0,
        inject_writers: memgate::record::WriterSet::ALL,
    };

    let (has_ann, lists_note, list_lens) = {
        let idx = tenant.read().map_err(|_| "poisoned")?;
        let mut lens: Vec<usize> = idx.ann.values().flat_map(|a| a.list_lens()).collect();
        lens.sort_unstable();
        let vectors: usize = idx.ann.values().map(|a| a.len()).sum();
        (!idx.ann.is_empty(), (!idx.ann.is_empty()).then_some(vectors), lens)
    };
    let mut paths = Vec::new();

    // The path production takes at this size (IVF when the tenant has one and the candidates
    // exceed EXACT_SCAN_MAX), then the exact scan forced by taking the IVF index out.
    let default_run = {
        let idx = tenant.read().map_err(|_| "poisoned")?;
        run_path(&idx, &caller, &settings, &queries, &warmup, now)
    };
    let uses_ann = has_ann && default_run.candidates_mean > EXACT_SCAN_MAX as f64;
    let mut exact_run = None;
    if has_ann && !args.no_exact {
        let saved = std::mem::take(&mut tenant.write().map_err(|_| "poisoned")?.ann);
        let run = {
            let idx = tenant.read().map_err(|_| "poisoned")?;
            run_path(&idx, &caller, &settings, &queries, &warmup, now)
        };
        tenant.write().map_err(|_| "poisoned")?.ann = saved;
        exact_run = Some(run);
    }
    let recall = exact_run.as_ref().filter(|_| uses_ann).map(|exact| recall_at_5(&default_run, exact));
    let int8_vs_f32 = {
        let idx = tenant.read().map_err(|_| "poisoned")?;
        int8_against_f32(&idx, &caller, &settings, &records, &queries, now)
    };
    paths.push(default_run.json(if uses_ann { "ivf" } else { "exact" }, recall));
    if let Some(exact) = &exact_run {
        paths.push(exact.json("exact (forced)", None));
    }

    let mut sweep_rows = Vec::new();
    if let (true, Some(exact)) = (uses_ann, &exact_run) {
        for &probes in sweep {
            let settings = FunnelSettings { probes, ..settings.clone() };
            let n = queries.len().min(args.sweep_queries);
            let run = {
                let idx = tenant.read().map_err(|_| "poisoned")?;
                run_path(&idx, &caller, &settings, &queries[..n], &warmup, now)
            };
            let recall = recall_at_5(&run, exact);
            sweep_rows.push(json!({
                "probes": probes.to_string(),
                "funnel": run.funnel.json_ms(),
                "semantic_layer": run.semantic.json_ms(),
                "recall_at_5": recall,
            }));
        }
    }

    let mut sorted_tokens = tokens.clone();
    sorted_tokens.sort_unstable();
    Ok(json!({
        "records": size,
        "topics": world.topics.len(),
        "generate_s": generate.as_secs_f64(),
        "index_records_s": index_records.as_secs_f64(),
        "memory_index_load_s": load.as_secs_f64(),
        "ivf_vectors": lists_note,
        "ivf_lists": {
            "count": list_lens.len(),
            "min": list_lens.first(),
            "p50": (!list_lens.is_empty()).then(|| common::percentile(&list_lens, 0.5)),
            "p90": (!list_lens.is_empty()).then(|| common::percentile(&list_lens, 0.9)),
            "max": list_lens.last(),
        },
        "record_tokens": {
            "mean": tokens.iter().sum::<usize>() as f64 / tokens.len().max(1) as f64,
            "p50": common::percentile(&sorted_tokens, 0.5),
            "p95": common::percentile(&sorted_tokens, 0.95),
            "max": sorted_tokens.last().copied().unwrap_or(0),
        },
        "scores": world.score_sample(&mut rng, &records, &queries),
        "int8_vs_f32": int8_vs_f32,
        "rss_bytes_before_load": rss_before,
        "rss_bytes_after_load": rss_after,
        "index_rss_bytes_per_record": rss_after.saturating_sub(rss_before) as f64 / size.max(1) as f64,
        "paths": paths,
        "probe_sweep": sweep_rows,
    }))
}

/// What one pass over the queries measured.
struct PathRun {
    funnel: Summary,
    scope: Summary,
    temporal: Summary,
    semantic: Summary,
    density: Summary,
    /// Inside the semantic layer: the query's exact-match phrases, and a bare dot-product scan
    /// over every candidate (the exact scan's floor).
    phrases: Summary,
    dot_scan: Summary,
    /// The IVF index's own search (no candidate filter), where the tenant has one.
    ivf_search: Option<Summary>,
    candidates_mean: f64,
    hits_mean: f64,
    injected_mean: f64,
    /// Per query: the top-5 similarity (non-exact) hits, as slots, and all similarity hits.
    top5: Vec<Vec<u32>>,
    all_hits: Vec<HashSet<u32>>,
}

impl PathRun {
    fn json(&self, path: &str, recall: Option<f64>) -> Value {
        json!({
            "path": path,
            "funnel": self.funnel.json_ms(),
            "layers_p50_ms": {
                "scope": ms(self.scope.p50),
                "temporal": ms(self.temporal.p50),
                "semantic": ms(self.semantic.p50),
                "density": ms(self.density.p50),
                "query_phrases": ms(self.phrases.p50),
                "dot_scan_all_candidates": ms(self.dot_scan.p50),
                "ivf_search": self.ivf_search.map(|s| ms(s.p50)),
            },
            "layers_p99_ms": {
                "scope": ms(self.scope.p99),
                "temporal": ms(self.temporal.p99),
                "semantic": ms(self.semantic.p99),
                "density": ms(self.density.p99),
                "query_phrases": ms(self.phrases.p99),
                "dot_scan_all_candidates": ms(self.dot_scan.p99),
                "ivf_search": self.ivf_search.map(|s| ms(s.p99)),
            },
            "semantic_candidates_mean": self.candidates_mean,
            "semantic_hits_mean": self.hits_mean,
            "injected_mean": self.injected_mean,
            "recall_at_5_vs_exact": recall,
        })
    }
}

fn run_path(
    index: &TenantIndex,
    caller: &Caller,
    settings: &FunnelSettings,
    queries: &[Query],
    warmup: &[Query],
    now: i64,
) -> PathRun {
    for q in warmup {
        black_box(
            funnel::run(index, caller, &semantic_query(q, settings), settings, now, Detail::Off)
                .packed
                .tokens,
        );
    }
    let mut funnel_times = Vec::with_capacity(queries.len());
    let (mut scope_t, mut temporal_t, mut semantic_t, mut density_t) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut phrases_t, mut scan_t, mut ivf_t) = (Vec::new(), Vec::new(), Vec::new());
    let (mut candidates, mut hits_total, mut injected) = (0usize, 0usize, 0usize);
    let mut top5 = Vec::with_capacity(queries.len());
    let mut all_hits = Vec::with_capacity(queries.len());
    for q in queries {
        let sq = semantic_query(q, settings);
        let started = Instant::now();
        let out = funnel::run(index, caller, &sq, settings, now, Detail::Off);
        funnel_times.push(started.elapsed());
        injected += out.packed.injected.len();
        black_box(&out.packed);

        // The same query layer by layer (untimed as a whole), for the breakdown and the recall.
        let mut trace = Trace::default();
        let t = Instant::now();
        let visible = scope::visible(index, caller, Detail::Off, &mut trace);
        scope_t.push(t.elapsed());
        let t = Instant::now();
        let current = temporal::current(index, &visible, now, &settings.schema_versions, false, &mut trace).0;
        temporal_t.push(t.elapsed());
        candidates += current.len();
        let t = Instant::now();
        let hits = semantic::matching(index, &current, &sq, false, &mut trace);
        semantic_t.push(t.elapsed());
        let t = Instant::now();
        black_box(terms::query_phrases(&q.text).len());
        phrases_t.push(t.elapsed());
        let t = Instant::now();
        let mut sum = 0.0f32;
        for slot in current.iter() {
            sum += index.similarity(slot, &q.vector).unwrap_or(0.0);
        }
        black_box(sum);
        scan_t.push(t.elapsed());
        if !index.ann.is_empty() {
            let t = Instant::now();
            let quantized = QuantizedQuery::new(&q.vector);
            let rows = index.int8_rows();
            let mut reach = 0usize;
            for ann in index.ann.values() {
                for entry in ann.probe(&quantized, settings.probes).flatten() {
                    reach += usize::from(rows.is_some_and(|r| {
                        r.may_reach_at(entry.position as usize, &quantized, settings.threshold)
                    }));
                }
            }
            black_box(reach);
            ivf_t.push(t.elapsed());
        }
        let mut similar: Vec<(u32, f32)> =
            hits.iter().filter(|h| !h.exact).map(|h| (h.slot, h.similarity)).collect();
        similar.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        hits_total += similar.len();
        top5.push(similar.iter().take(5).map(|h| h.0).collect());
        all_hits.push(similar.iter().map(|h| h.0).collect());
        let budget = density::Budget {
            tokens: settings.budget_tokens,
            max_items: settings.max_items,
            max_stubs: settings.max_stubs,
            cut: settings.cut,
        };
        let t = Instant::now();
        black_box(density::pack(index, &hits, &budget, false, &mut trace).tokens);
        density_t.push(t.elapsed());
    }
    let n = queries.len().max(1) as f64;
    PathRun {
        funnel: Summary::of(&funnel_times),
        scope: Summary::of(&scope_t),
        temporal: Summary::of(&temporal_t),
        semantic: Summary::of(&semantic_t),
        density: Summary::of(&density_t),
        phrases: Summary::of(&phrases_t),
        dot_scan: Summary::of(&scan_t),
        ivf_search: (!ivf_t.is_empty()).then(|| Summary::of(&ivf_t)),
        candidates_mean: candidates as f64 / n,
        hits_mean: hits_total as f64 / n,
        injected_mean: injected as f64 / n,
        top5,
        all_hits,
    }
}

/// What one 384-dim dot product costs with the vectors in cache: `ivf::dot` as the funnel uses
/// it, and the same eight-lane sum over fixed-size chunks (no index arithmetic, so no bounds
/// checks in the loop), to show what the scan itself could cost.
fn dot_micro(seed: u64) -> Value {
    let mut rng = Rng::new(seed ^ 0xd07);
    let vectors: Vec<Vec<f32>> = (0..256).map(|_| noise(&mut rng, DIMS)).collect();
    let query = noise(&mut rng, DIMS);
    let rounds = 2000;
    let time = |f: &dyn Fn(&[f32], &[f32]) -> f32| {
        let mut best = f64::MAX;
        for _ in 0..5 {
            let started = Instant::now();
            let mut sum = 0.0f32;
            for _ in 0..rounds {
                for v in &vectors {
                    sum += f(black_box(v), black_box(&query));
                }
            }
            black_box(sum);
            let ns = started.elapsed().as_secs_f64() * 1e9 / (rounds * vectors.len()) as f64;
            best = best.min(ns);
        }
        (best * 10.0).round() / 10.0
    };
    json!({"ivf_dot": time(&dot), "chunked_eight_lanes": time(&dot_chunked), "note": "best of 5 rounds"})
}

fn dot_chunked(a: &[f32], b: &[f32]) -> f32 {
    let mut sums = [0.0f32; 8];
    for (x, y) in a.chunks_exact(8).zip(b.chunks_exact(8)) {
        let (Ok(x), Ok(y)) = (<&[f32; 8]>::try_from(x), <&[f32; 8]>::try_from(y)) else { continue };
        for lane in 0..8 {
            sums[lane] += x[lane] * y[lane];
        }
    }
    let tail = a.len() / 8 * 8;
    let rest: f32 = a[tail..].iter().zip(b.get(tail..).unwrap_or(&[])).map(|(x, y)| x * y).sum();
    sums.iter().sum::<f32>() + rest
}

fn semantic_query<'a>(q: &'a Query, settings: &FunnelSettings) -> SemanticQuery<'a> {
    SemanticQuery {
        text: q.text.as_str(),
        vector: Some(q.vector.as_slice()),
        threshold: settings.threshold,
        probes: settings.probes,
        hybrid: None,
        lift: memgate::funnel::semantic::Lift::NONE,
    }
}

/// Of the exact scan's top-5 similarity hits (over all queries), the fraction `approx` returned.
fn recall_at_5(approx: &PathRun, exact: &PathRun) -> f64 {
    let (mut wanted, mut found) = (0usize, 0usize);
    for (top, got) in exact.top5.iter().zip(&approx.all_hits) {
        wanted += top.len();
        found += top.iter().filter(|slot| got.contains(slot)).count();
    }
    if wanted == 0 { 1.0 } else { found as f64 / wanted as f64 }
}

fn caller() -> Caller {
    let mut caller = Caller::new(TENANT, ["team:sales".to_owned(), "user:u-42".to_owned()]);
    caller.subject = Some("u-42".into());
    caller
}

const TEAMS: [&str; 8] = ["sales", "support", "billing", "logistics", "product", "legal", "hr", "ops"];
const USERS: usize = 5000;

fn order_id(i: usize) -> String {
    format!("ORD-2024-{:05}", i % 100_000)
}

/// Topic centres and the common direction the synthetic vectors are built from.
struct World {
    common: Vec<f32>,
    topics: Vec<Vec<f32>>,
}

impl World {
    fn new(rng: &mut Rng, size: usize) -> World {
        let unit = |rng: &mut Rng| {
            let mut v = noise(rng, DIMS);
            normalize(&mut v);
            v
        };
        let common = unit(rng);
        let topics = (0..(size / TOPIC_SIZE).max(8)).map(|_| unit(rng)).collect();
        World { common, topics }
    }

    /// `normalize(√COMMON·m + √TOPIC·c + σ·g)` with σ² drawn per record.
    fn vector(&self, rng: &mut Rng, topic: Option<usize>, noise_sq: f32) -> Vec<f32> {
        let (a, b, s) = (COMMON.sqrt(), TOPIC.sqrt(), noise_sq.sqrt());
        let g = noise(rng, DIMS);
        let centre = match topic {
            Some(t) => self.topics[t].clone(),
            None => {
                let mut c = noise(rng, DIMS);
                normalize(&mut c);
                c
            }
        };
        let mut v: Vec<f32> = (0..DIMS).map(|i| a * self.common[i] + b * centre[i] + s * g[i]).collect();
        normalize(&mut v);
        v
    }

    fn record(&self, rng: &mut Rng, i: usize, now: i64) -> (Record, Vec<f32>) {
        let topic = rng.below(self.topics.len());
        let noise_sq = record_noise(rng);
        let vector = self.vector(rng, Some(topic), noise_sq);
        let roll = rng.unit();
        let scope: Vec<String> = if roll < 0.45 {
            vec!["public".into()]
        } else if roll < 0.70 {
            vec![format!("team:{}", rng.pick(&TEAMS))]
        } else if roll < 0.95 {
            vec![format!("user:u-{}", rng.below(USERS))]
        } else {
            vec![format!("team:{}", rng.pick(&TEAMS)), format!("user:u-{}", rng.below(USERS))]
        };
        let user = format!("u-{}", rng.below(USERS));
        let (record_type, content) = match rng.below(20) {
            0..=7 => (
                "fact",
                json!({"statement": sentence(rng, 12, 60), "subject": format!("customer {user}"), "source": "CRM_v4.2"}),
            ),
            8..=11 => (
                "customer_profile",
                json!({
                    "name": format!("Customer {user}"),
                    "preferred_language": *rng.pick(&["en", "zh-CN", "de", "es"]),
                    "special_requests": (0..1 + rng.below(3)).map(|_| sentence(rng, 6, 20)).collect::<Vec<_>>(),
                    "orders": (0..rng.below(4)).map(|_| order_id(rng.below(100_000))).collect::<Vec<_>>(),
                }),
            ),
            12..=14 => (
                "internal_sop",
                json!({
                    "title": sentence(rng, 3, 8),
                    "steps": (0..3 + rng.below(6)).map(|_| sentence(rng, 8, 25)).collect::<Vec<_>>(),
                }),
            ),
            15..=17 => ("preference", json!({"statement": sentence(rng, 5, 15)})),
            _ => ("conversation_summary", json!({"summary": sentence(rng, 40, 120)})),
        };
        let key = (rng.below(5) == 0).then(|| format!("customer:{user}:{record_type}:{i}"));
        let aliases: Vec<String> = if rng.below(10) == 0 {
            (0..1 + rng.below(2)).map(|_| sentence(rng, 2, 4)).collect()
        } else {
            Vec::new()
        };
        let roll = rng.unit();
        let (valid_from_ms, valid_until_ms) = if roll < 0.08 {
            (now - 400 * DAY_MS, now - (1 + rng.below(300) as i64) * DAY_MS) // expired
        } else if roll < 0.10 {
            (now + (1 + rng.below(30) as i64) * DAY_MS, OPEN_END_MS) // not yet valid
        } else {
            (now - rng.below(365) as i64 * DAY_MS - DAY_MS, OPEN_END_MS)
        };
        let updated = now - rng.below(365 * 24) as i64 * 3_600_000;
        let priority = [1u8, 2, 3, 3, 3, 3, 4, 4, 5][rng.below(9)];
        let mut metadata = Map::new();
        metadata.insert("source".into(), json!("bench"));
        let record = Record {
            tenant: TENANT.into(),
            id: format!("mem-{:032x}", (i as u128) * 0x9e37_79b9_7f4a_7c15_u128),
            record_type: record_type.into(),
            schema_version: "v1".into(),
            scope,
            valid_from_ms,
            valid_until_ms,
            priority,
            key,
            aliases,
            content,
            metadata,
            revision: 1,
            status: Status::Active,
            created_at_ms: updated,
            updated_at_ms: updated,
            last_accessed_at_ms: None,
            access_count: 0,
            change_seq: 0,
            author: None,
            provenance: None,
        };
        (record, vector)
    }

    /// 85%: a query drawn near a random record (σ² 0.05–0.30 around it); 15%: about an unseen
    /// topic (nothing should pass). One in ten names an order id that records may contain.
    fn query(&self, rng: &mut Rng, records: &[(Record, Vec<f32>)]) -> Query {
        let vector = if rng.unit() < 0.85 {
            let (_, target) = &records[rng.below(records.len())];
            let g = noise(rng, DIMS);
            let s = (0.05 + 0.25 * rng.unit() as f32).sqrt();
            let mut v: Vec<f32> = target.iter().zip(&g).map(|(t, n)| t + s * n).collect();
            normalize(&mut v);
            v
        } else {
            self.vector(rng, None, 0.10)
        };
        let mut text = sentence(rng, 6, 20);
        if rng.below(10) == 0 {
            text.push_str(&format!(" Where is {}?", order_id(rng.below(100_000))));
        }
        Query { text, vector }
    }

    /// Similarity distribution of the synthetic set: record pairs of one topic, of different
    /// topics, and each query to its nearest record.
    fn score_sample(&self, rng: &mut Rng, records: &[(Record, Vec<f32>)], queries: &[Query]) -> Value {
        let mut same = Vec::new();
        let mut different = Vec::new();
        for _ in 0..2000 {
            let (a, b) = (rng.below(records.len()), rng.below(records.len()));
            different.push(dot(&records[a].1, &records[b].1));
        }
        // Records of one topic: rebuild two vectors of a random topic.
        for _ in 0..2000 {
            let t = rng.below(self.topics.len());
            let (na, nb) = (record_noise(rng), record_noise(rng));
            let a = self.vector(rng, Some(t), na);
            let b = self.vector(rng, Some(t), nb);
            same.push(dot(&a, &b));
        }
        let mut nearest: Vec<f32> = queries
            .iter()
            .take(200)
            .map(|q| records.iter().map(|(_, v)| dot(v, &q.vector)).fold(f32::MIN, f32::max))
            .collect();
        let summary = |v: &mut Vec<f32>| {
            v.sort_by(f32::total_cmp);
            json!({
                "p5": round3(common::percentile(v, 0.05)),
                "p50": round3(common::percentile(v, 0.5)),
                "p95": round3(common::percentile(v, 0.95)),
            })
        };
        json!({
            "different_topic": summary(&mut different),
            "same_topic": summary(&mut same),
            "query_to_nearest_record": summary(&mut nearest),
        })
    }
}

/// A record's noise weight σ²: 0.08–0.22.
fn record_noise(rng: &mut Rng) -> f32 {
    0.08 + 0.14 * rng.unit() as f32
}

fn round3(x: f32) -> f64 {
    (f64::from(x) * 1000.0).round() / 1000.0
}

fn print_tables(report: &Value) {
    let empty = Vec::new();
    let sizes = report["sizes"].as_array().unwrap_or(&empty);
    println!(
        "funnel latency without embedding ({} queries per size and path, threshold {}, probes {}, exact scan up to {} candidates)",
        report["queries"], report["threshold"], report["default_probes"], report["exact_scan_max"]
    );
    println!(
        "{:>8} {:>15} {:>11} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9}",
        "records", "path", "candidates", "p50 ms", "p99 ms", "max ms", "hits/q", "inj/q", "recall@5"
    );
    for size in sizes {
        for path in size["paths"].as_array().unwrap_or(&empty) {
            let recall = path["recall_at_5_vs_exact"].as_f64().map_or("-".to_owned(), |r| format!("{r:.4}"));
            println!(
                "{:>8} {:>15} {:>11.0} {:>8.3} {:>8.3} {:>8.3} {:>8.1} {:>8.2} {:>9}",
                common::text(&size["records"]),
                path["path"].as_str().unwrap_or(""),
                path["semantic_candidates_mean"].as_f64().unwrap_or(0.0),
                path["funnel"]["p50_ms"].as_f64().unwrap_or(0.0),
                path["funnel"]["p99_ms"].as_f64().unwrap_or(0.0),
                path["funnel"]["max_ms"].as_f64().unwrap_or(0.0),
                path["semantic_hits_mean"].as_f64().unwrap_or(0.0),
                path["injected_mean"].as_f64().unwrap_or(0.0),
                recall
            );
        }
    }
    println!();
    println!(
        "per layer, p50 / p99 ms, layer by layer on the same queries; (phrases) and (dot scan all) are inside semantic: building the query's exact-match phrases, and a bare dot product over every candidate"
    );
    println!(
        "{:>8} {:>15} {:>15} {:>15} {:>15} {:>15} {:>15} {:>15} {:>15}",
        "records",
        "path",
        "scope",
        "temporal",
        "semantic",
        "density",
        "(phrases)",
        "(dot scan all)",
        "(ivf search)"
    );
    for size in sizes {
        for path in size["paths"].as_array().unwrap_or(&empty) {
            let cell = |layer: &str| {
                format!(
                    "{:.3} / {:.3}",
                    path["layers_p50_ms"][layer].as_f64().unwrap_or(0.0),
                    path["layers_p99_ms"][layer].as_f64().unwrap_or(0.0)
                )
            };
            println!(
                "{:>8} {:>15} {:>15} {:>15} {:>15} {:>15} {:>15} {:>15} {:>15}",
                common::text(&size["records"]),
                path["path"].as_str().unwrap_or(""),
                cell("scope"),
                cell("temporal"),
                cell("semantic"),
                cell("density"),
                cell("query_phrases"),
                cell("dot_scan_all_candidates"),
                if path["layers_p50_ms"]["ivf_search"].is_null() {
                    "-".to_owned()
                } else {
                    cell("ivf_search")
                }
            );
        }
    }
    println!();
    println!("set-up");
    println!(
        "{:>8} {:>7} {:>10} {:>10} {:>10} {:>12} {:>22} {:>22} {:>22}",
        "records",
        "topics",
        "gen s",
        "index s",
        "load s",
        "tokens mean",
        "cos same topic p5/50/95",
        "cos diff topic p5/50/95",
        "cos query→nearest"
    );
    for size in sizes {
        let s = &size["scores"];
        let triple = |v: &Value| format!("{}/{}/{}", v["p5"], v["p50"], v["p95"]);
        println!(
            "{:>8} {:>7} {:>10.2} {:>10.2} {:>10.2} {:>12.1} {:>22} {:>22} {:>22}",
            common::text(&size["records"]),
            common::text(&size["topics"]),
            size["generate_s"].as_f64().unwrap_or(0.0),
            size["index_records_s"].as_f64().unwrap_or(0.0),
            size["memory_index_load_s"].as_f64().unwrap_or(0.0),
            size["record_tokens"]["mean"].as_f64().unwrap_or(0.0),
            triple(&s["same_topic"]),
            triple(&s["different_topic"]),
            triple(&s["query_to_nearest_record"]),
        );
    }
    println!();
    println!("the index's one copy of each embedding (int8 rows) against f32, and resident memory");
    println!(
        "{:>8} {:>16} {:>16} {:>16} {:>14} {:>18}",
        "records", "top-5 recall", "max |Δ sim|", "mean |Δ sim|", "RSS after MB", "index B/record"
    );
    for size in sizes {
        let c = &size["int8_vs_f32"];
        println!(
            "{:>8} {:>16.4} {:>16.5} {:>16.6} {:>14.1} {:>18.0}",
            common::text(&size["records"]),
            c["recall_at_5"].as_f64().unwrap_or(0.0),
            c["max_abs_similarity_diff"].as_f64().unwrap_or(0.0),
            c["mean_abs_similarity_diff"].as_f64().unwrap_or(0.0),
            size["rss_bytes_after_load"].as_f64().unwrap_or(0.0) / 1e6,
            size["index_rss_bytes_per_record"].as_f64().unwrap_or(0.0),
        );
    }
    for size in sizes {
        let lists = &size["ivf_lists"];
        if lists["count"].as_u64().unwrap_or(0) > 0 {
            println!(
                "IVF at {} records: {} lists, vectors per list min/p50/p90/max {}/{}/{}/{}",
                size["records"], lists["count"], lists["min"], lists["p50"], lists["p90"], lists["max"]
            );
        }
    }
    for size in sizes {
        let rows = size["probe_sweep"].as_array().unwrap_or(&empty);
        if rows.is_empty() {
            continue;
        }
        println!();
        println!("IVF probes at {} records (recall@5 vs exact scan)", size["records"]);
        println!(
            "{:>30} {:>12} {:>12} {:>16} {:>9}",
            "probes", "funnel p50", "funnel p99", "semantic p50", "recall@5"
        );
        for row in rows {
            println!(
                "{:>30} {:>12.3} {:>12.3} {:>16.3} {:>9.4}",
                common::text(&row["probes"]),
                row["funnel"]["p50_ms"].as_f64().unwrap_or(0.0),
                row["funnel"]["p99_ms"].as_f64().unwrap_or(0.0),
                row["semantic_layer"]["p50_ms"].as_f64().unwrap_or(0.0),
                row["recall_at_5"].as_f64().unwrap_or(0.0)
            );
        }
    }
    println!();
    println!(
        "one 384-dim dot product, vectors in cache: ivf::dot {} ns, fixed-size-chunk version {} ns",
        report["dot_product_ns"]["ivf_dot"], report["dot_product_ns"]["chunked_eight_lanes"]
    );
    println!("machine before: {}", report["machine_before"]);
    println!("machine after:  {}", report["machine_after"]);
}

/// This process's resident memory (VmRSS), in bytes.
fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// The index scores on its one copy of each embedding, the int8 row (`TenantIndex::similarity`):
/// against the records' f32 vectors, per query over the caller's current candidates, the top-5
/// above the threshold by each, their overlap, and the largest difference of a similarity.
fn int8_against_f32(
    index: &TenantIndex,
    caller: &Caller,
    settings: &FunnelSettings,
    records: &[(Record, Vec<f32>)],
    queries: &[Query],
    now: i64,
) -> Value {
    let by_slot: std::collections::HashMap<u32, &[f32]> =
        records.iter().filter_map(|(r, v)| index.slot_of(&r.id).map(|s| (s, v.as_slice()))).collect();
    let (mut found, mut wanted, mut max_diff, mut diff_sum, mut diffs) = (0usize, 0usize, 0f32, 0f64, 0usize);
    for q in queries.iter().take(300) {
        let mut trace = Trace::default();
        let visible = scope::visible(index, caller, Detail::Off, &mut trace);
        let current = temporal::current(index, &visible, now, &settings.schema_versions, false, &mut trace).0;
        let mut f32_scores = Vec::new();
        let mut int8_scores = Vec::new();
        for slot in current.iter() {
            let (Some(v), Some(s8)) = (by_slot.get(&slot), index.similarity(slot, &q.vector)) else {
                continue;
            };
            let s32 = dot(v, &q.vector);
            let d = (s32 - s8).abs();
            max_diff = max_diff.max(d);
            diff_sum += f64::from(d);
            diffs += 1;
            if s32 >= settings.threshold {
                f32_scores.push((slot, s32));
            }
            if s8 >= settings.threshold {
                int8_scores.push((slot, s8));
            }
        }
        let top5 = |mut v: Vec<(u32, f32)>| -> Vec<u32> {
            v.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            v.into_iter().take(5).map(|(s, _)| s).collect()
        };
        let (a, b) = (top5(f32_scores), top5(int8_scores));
        wanted += a.len();
        found += a.iter().filter(|s| b.contains(s)).count();
    }
    json!({
        "recall_at_5": found as f64 / wanted.max(1) as f64,
        "max_abs_similarity_diff": max_diff,
        "mean_abs_similarity_diff": diff_sum / diffs.max(1) as f64,
    })
}
