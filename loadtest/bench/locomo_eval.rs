//! `locomo_eval`: evidence recall of the real retrieval pipeline on LoCoMo.
//!
//! LoCoMo (Maharana et al., ACL 2024; CC BY-NC 4.0) holds 10 long two-person conversations and
//! questions about them, each labelled with the dialog turns (`dia_id`) that hold its answer. The
//! dataset is read from where it lies (`--data`); nothing of it is copied into the repository.
//!
//! Every dialog turn becomes a record — type `fact`, content `{"statement": "<speaker>: <text>"}`,
//! scope `public`, one tenant per conversation — embedded with the production model through
//! `Embedder::embed_passages` (the text `memory::passage_text` gives, as in production), and
//! loaded with `MemoryIndex::load`. Every question is embedded with `embed_query` and run through
//! `funnel::run` for a caller that sees `public` in that tenant:
//! - as production runs it: the release threshold (0.20 for multilingual-e5-small with language
//!   centering, 0.80 raw with `--no-centering`), budget 3000
//!   tokens, 5 items → evidence recall@5 and the injected tokens (the funnel's count, and the
//!   whole rendered v1 block with its contract);
//! - the same with 10 items → recall@10 with the threshold;
//! - with the threshold out of the way (every record passes) → recall@5/@10 of pure top-k.
//!
//! Then an IVF check on real embeddings: every turn of the conversations again in one pooled
//! tenant with an IVF index forced on it (a conversation alone is far below `ANN_MIN_RECORDS`),
//! each question run with the IVF path and with the exact scan (`--no-ivf-check` skips it).
//!
//! Evidence recall of a question: the fraction of its evidence turns among the top k; averaged
//! over questions. Questions without usable evidence are skipped (counted). Category 5
//! (adversarial: the answer is not in the conversation) is reported on its own line and kept out
//! of the headline figures.
//!
//! Run from the repository root:
//! `cargo run --release --example locomo_eval -- [--conversations N] [--json]`.
#![allow(clippy::print_stdout)]

#[path = "common.rs"]
mod common;

use clap::Parser;
use common::{BoxError, Summary};
use futures_util::StreamExt;
use memgate::clock::now_ms;
use memgate::embed::Embedder;
use memgate::funnel::semantic::{DEFAULT_PROBES, EXACT_SCAN_MAX, SemanticQuery};
use memgate::funnel::trace::Detail;
use memgate::funnel::{self, FunnelSettings};
use memgate::identity::Caller;
use memgate::index::{Bodies, IndexedRecord, MemoryIndex, TenantIndex};
use memgate::inject::{RenderItem, Templates};
use memgate::memory::passage_text;
use memgate::record::{OPEN_END_MS, Record, Status};
use memgate::vector::ivf::Probes;
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

/// The tenant that holds every conversation's turns at once, for the IVF check.
const POOLED: &str = "locomo-pooled";

/// Evidence recall@5/@10 and injected tokens of the real pipeline on LoCoMo.
#[derive(Parser, Debug)]
#[command(name = "locomo_eval")]
struct Args {
    /// locomo10.json.
    #[arg(long, default_value = "../shared/benchmarks/locomo/locomo10.json")]
    data: PathBuf,
    /// Use only the first N conversations (embedding all ~5,900 turns takes minutes on 2 cores).
    #[arg(long)]
    conversations: Option<usize>,
    /// The release threshold (default: the calibrated one for the centering in use).
    #[arg(long)]
    threshold: Option<f32>,
    /// Further thresholds to report recall@5 and tokens for (calibration), comma-separated
    /// (default: around the calibrated one).
    #[arg(long)]
    threshold_sweep: Option<String>,
    /// Raw model vectors, without language centering (the thresholds default to the raw ones).
    #[arg(long = "no-centering", action = clap::ArgAction::SetFalse)]
    centering: bool,
    /// ONNX Runtime threads for the embedding model (speed only; the vectors are the same).
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// The release whose template renders the block for the token count.
    #[arg(long, default_value = "v1")]
    release: String,
    /// Skip the IVF check (all turns pooled in one tenant with a forced IVF index).
    #[arg(long = "no-ivf-check", action = clap::ArgAction::SetFalse)]
    ivf_check: bool,
    /// Print one JSON object instead of tables.
    #[arg(long)]
    json: bool,
}

fn main() -> Result<(), BoxError> {
    common::export_ort_if_unset();
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(run(args))
}

struct Question {
    tenant: String,
    text: String,
    category: i64,
    evidence: Vec<String>,
}

async fn run(args: Args) -> Result<(), BoxError> {
    let machine_before = common::machine();
    let bytes = std::fs::read(&args.data).map_err(|err| {
        format!("cannot read {}: {err} (run from the repository root, or pass --data)", args.data.display())
    })?;
    let data: Value = serde_json::from_slice(&bytes)?;
    let samples = data.as_array().ok_or("locomo10.json is not a list of samples")?;
    let take = args.conversations.unwrap_or(samples.len()).min(samples.len());
    let templates = Templates::load(std::path::Path::new("templates"))?;
    let tokenizer = tiktoken_rs::cl100k_base_singleton();

    let mut records: Vec<Record> = Vec::new();
    let mut questions: Vec<Question> = Vec::new();
    let mut known: HashSet<(String, String)> = HashSet::new();
    let base_ms = 1_672_531_200_000; // 2023-01-01, the conversations' time
    for sample in &samples[..take] {
        let tenant = sample["sample_id"].as_str().ok_or("a sample without sample_id")?.to_owned();
        let conversation = sample["conversation"].as_object().ok_or("a sample without conversation")?;
        let mut sessions: Vec<(u32, &Vec<Value>)> = conversation
            .iter()
            .filter_map(|(k, v)| {
                let n = k.strip_prefix("session_")?.parse::<u32>().ok()?;
                Some((n, v.as_array()?))
            })
            .collect();
        sessions.sort_by_key(|(n, _)| *n);
        for (_, turns) in sessions {
            for turn in turns {
                let (Some(id), Some(speaker), Some(text)) =
                    (turn["dia_id"].as_str(), turn["speaker"].as_str(), turn["text"].as_str())
                else {
                    continue;
                };
                if !known.insert((tenant.clone(), id.to_owned())) {
                    continue;
                }
                let at = base_ms + records.len() as i64 * 60_000;
                records.push(Record {
                    tenant: tenant.clone(),
                    id: id.to_owned(),
                    record_type: "fact".into(),
                    schema_version: "v1".into(),
                    scope: vec!["public".into()],
                    valid_from_ms: 0,
                    valid_until_ms: OPEN_END_MS,
                    priority: 3,
                    key: None,
                    aliases: Vec::new(),
                    content: json!({"statement": format!("{speaker}: {text}")}),
                    metadata: Map::new(),
                    revision: 1,
                    status: Status::Active,
                    created_at_ms: at,
                    updated_at_ms: at,
                    last_accessed_at_ms: None,
                    access_count: 0,
                    change_seq: 0,
                    author: None,
                    provenance: None,
                });
            }
        }
        for qa in sample["qa"].as_array().into_iter().flatten() {
            let Some(text) = qa["question"].as_str() else { continue };
            let evidence = qa["evidence"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .flat_map(parse_evidence)
                .collect();
            questions.push(Question {
                tenant: tenant.clone(),
                text: text.to_owned(),
                category: qa["category"].as_i64().unwrap_or(0),
                evidence,
            });
        }
    }

    // Embed every turn with the production model, in chunks so progress can be shown.
    let config = memgate::embed::EmbedConfig {
        language_centering: args.centering,
        ..common::embed_config(args.threads, 4096)
    };
    let embedder = tokio::task::spawn_blocking(move || Embedder::load(&config)).await??;
    let texts: Vec<String> = records.iter().map(passage_text).collect();
    let started = Instant::now();
    let mut vectors: Vec<Vec<f32>> = Vec::with_capacity(texts.len());
    for chunk in texts.chunks(128) {
        vectors.extend(embedder.embed_passages(chunk).await?);
        let done = vectors.len();
        let rate = done as f64 / started.elapsed().as_secs_f64().max(1e-9);
        eprintln!(
            "embedded {done}/{} turns, {rate:.1}/s, about {:.0} s left ({})",
            texts.len(),
            (texts.len() - done) as f64 / rate.max(1e-9),
            common::load_line()
        );
    }
    let passage_seconds = started.elapsed().as_secs_f64();
    let turns = records.len();
    // Each conversation its own tenant; and, for the IVF check, every turn once more in one
    // pooled tenant (ids prefixed with the conversation, as dia_ids repeat across them).
    let mut items = Vec::with_capacity(turns * 2);
    for (record, vector) in records.into_iter().zip(vectors) {
        let vector: Arc<[f32]> = Arc::from(vector);
        if args.ivf_check {
            let mut pooled = record.clone();
            pooled.tenant = POOLED.into();
            pooled.id = format!("{}/{}", record.tenant, record.id);
            items.push(IndexedRecord::new(pooled, Some(vector.clone())));
        }
        items.push(IndexedRecord::new(record, Some(vector)));
    }
    let index = MemoryIndex::with_body_cache(u64::MAX);
    index.load(items);

    // Embed the questions (concurrently, so the embedder batches them as under load).
    let started = Instant::now();
    let query_vectors: Vec<Arc<[f32]>> = futures_util::stream::iter(questions.iter())
        .map(|q| {
            let embedder = embedder.clone();
            async move { embedder.embed_query(&q.text).await }
        })
        .buffered(16)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_, _>>()?;
    let query_seconds = started.elapsed().as_secs_f64();
    eprintln!("embedded {} questions in {query_seconds:.1} s", questions.len());

    let (calibrated, default_sweep) = if args.centering {
        (memgate::config::DEFAULT_SIMILARITY, "0.12,0.16,0.20,0.24,0.28,0.32")
    } else {
        (memgate::config::RAW_SIMILARITY, "0.76,0.78,0.80,0.82,0.84,0.86")
    };
    let threshold = args.threshold.unwrap_or(calibrated);
    let sweep: Vec<f32> = args
        .threshold_sweep
        .as_deref()
        .unwrap_or(default_sweep)
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| s.trim().parse())
        .collect::<Result<_, _>>()?;
    let settings = |threshold: f32, items: usize, budget: usize| FunnelSettings {
        schema_versions: vec!["v1".into()],
        threshold,
        budget_tokens: budget,
        max_items: items,
        max_stubs: 3,
        probes: DEFAULT_PROBES,
        // The dense ranking (hybrid_eval measures the fused one).
        retrieval: memgate::funnel::Retrieval::Dense,
        cut: memgate::funnel::cut::Cut::OFF,
        standout: None,
        subject_boost: 0.0,
        neighbour_weight: 0.0,
        inject_writers: memgate::record::WriterSet::ALL,
    };
    let production = settings(threshold, 5, 3000);
    let production10 = settings(threshold, 10, 3000);
    // Every cosine is above -1.01: the threshold lets everything through, the rank decides.
    let top_k = settings(-1.01, 10, usize::MAX / 2);

    let now = now_ms();
    let mut groups: BTreeMap<String, Group> = BTreeMap::new();
    let mut sweep_groups: Vec<Group> = sweep.iter().map(|_| Group::default()).collect();
    let (mut skipped_no_evidence, mut unresolved_ids) = (0usize, 0usize);
    let mut funnel_times = Vec::new();
    for (q, vector) in questions.iter().zip(&query_vectors) {
        let tenant = index.tenant(&q.tenant).ok_or("a question's conversation is not indexed")?;
        let idx = tenant.read().map_err(|_| "poisoned")?;
        let evidence: Vec<&String> = q.evidence.iter().filter(|id| idx.get(id).is_some()).collect();
        unresolved_ids += q.evidence.len() - evidence.len();
        if evidence.is_empty() {
            skipped_no_evidence += 1;
            continue;
        }
        let caller = caller(&q.tenant);
        let ranked = |s: &FunnelSettings| -> (Vec<String>, usize, Vec<RenderItem>) {
            let out = run_funnel(&idx, &caller, &q.text, vector, s, now, index.bodies());
            let ids = out.0.iter().map(|r| r.id.clone()).collect();
            let items = out.0.iter().map(|r| RenderItem::of(r).into_owned()).collect();
            (ids, out.1, items)
        };
        let started = Instant::now();
        let (prod_ids, prod_tokens, prod_items) = ranked(&production);
        funnel_times.push(started.elapsed());
        let (prod10_ids, _, _) = ranked(&production10);
        let (top_ids, _, _) = ranked(&top_k);
        let block_tokens = if prod_items.is_empty() {
            0
        } else {
            tokenizer.encode_ordinary(&templates.render(&args.release, &prod_items)?).len()
        };
        let recall = |ids: &[String], k: usize| {
            let top: HashSet<&String> = ids.iter().take(k).collect();
            evidence.iter().filter(|e| top.contains(*e)).count() as f64 / evidence.len() as f64
        };
        let sample = Sample {
            funnel5: recall(&prod_ids, 5),
            funnel10: recall(&prod10_ids, 10),
            top5: recall(&top_ids, 5),
            top10: recall(&top_ids, 10),
            injected: prod_ids.len(),
            tokens: prod_tokens,
            block_tokens,
        };
        let key =
            if q.category == 5 { "category 5 (adversarial)".to_owned() } else { "categories 1-4".to_owned() };
        groups.entry(key).or_default().add(&sample);
        if q.category != 5 {
            groups.entry(format!("category {}", q.category)).or_default().add(&sample);
        }
        for (threshold, group) in sweep.iter().zip(sweep_groups.iter_mut()) {
            let (ids, tokens, _) = ranked(&settings(*threshold, 5, 3000));
            if q.category == 5 {
                group.adversarial_injected += ids.len();
                group.adversarial += 1;
                continue;
            }
            group.add(&Sample {
                funnel5: recall(&ids, 5),
                funnel10: 0.0,
                top5: 0.0,
                top10: 0.0,
                injected: ids.len(),
                tokens,
                block_tokens: 0,
            });
        }
    }
    let ivf = if args.ivf_check {
        let production = settings(threshold, 5, 3000);
        ivf_check(&index, &questions, &query_vectors, &production, now)?
    } else {
        Value::Null
    };
    let report = json!({
        "bench": "locomo_eval",
        "ivf_check": ivf,
        "data": args.data.display().to_string(),
        "conversations": take,
        "turns": turns,
        "questions": questions.len(),
        "skipped_without_evidence": skipped_no_evidence,
        "evidence_ids_not_found_in_conversation": unresolved_ids,
        "model_id": embedder.model_id(),
        "embedding_threads": args.threads,
        "passage_embedding_s": passage_seconds,
        "passages_per_s": turns as f64 / passage_seconds.max(1e-9),
        "question_embedding_s": query_seconds,
        "threshold": common::f32r(threshold),
        "language_centering": args.centering,
        "release_for_block_tokens": args.release,
        "funnel_latency": Summary::of(&funnel_times).json_us(),
        "groups": groups.iter().map(|(k, g)| (k.clone(), g.json())).collect::<Map<String, Value>>(),
        "threshold_sweep": sweep.iter().zip(&sweep_groups).map(|(t, g)| json!({
            "threshold": common::f32r(*t),
            "recall_at_5_categories_1_4": g.mean(|s| s.funnel5),
            "injected_mean_categories_1_4": g.mean_usize(|s| s.injected),
            "tokens_mean_categories_1_4": g.mean_usize(|s| s.tokens),
            "empty_share_categories_1_4": g.empty_share(),
            "adversarial_injected_mean": g.adversarial_injected as f64 / g.adversarial.max(1) as f64,
        })).collect::<Vec<_>>(),
        "machine_before": machine_before,
        "machine_after": common::machine(),
    });
    if args.json {
        println!("{report}");
    } else {
        print_tables(&report);
    }
    Ok(())
}

/// The IVF path on real embeddings: every turn of the conversations in one tenant, an IVF index
/// built over them (below `ANN_MIN_RECORDS` the index would not build one by itself), and every
/// question run through the funnel with the IVF path and with the exact scan. Reports how many of
/// the exact scan's injected records the IVF path injects too, and the evidence recall@5 of both.
fn ivf_check(
    index: &MemoryIndex,
    questions: &[Question],
    vectors: &[Arc<[f32]>],
    production: &FunnelSettings,
    now: i64,
) -> Result<Value, BoxError> {
    let tenant = index.tenant(POOLED).ok_or("the pooled tenant was not loaded")?;
    let (records, lists) = {
        let mut idx = tenant.write().map_err(|_| "poisoned")?;
        idx.force_ann("public");
        let records = idx.ann.get("public").map_or(0, |a| a.len());
        (records, (records as f64).sqrt() as usize)
    };
    if records <= EXACT_SCAN_MAX {
        return Ok(
            json!({"skipped": format!("{records} turns: the funnel scans up to {EXACT_SCAN_MAX} candidates exactly")}),
        );
    }
    let caller = caller(POOLED);
    // Evidence as pooled ids, only those that name a turn (a few labels name none).
    let evidence: Vec<Vec<String>> = {
        let idx = tenant.read().map_err(|_| "poisoned")?;
        questions
            .iter()
            .map(|q| {
                let ids = q.evidence.iter().map(|e| format!("{}/{e}", q.tenant));
                ids.filter(|id| idx.get(id).is_some()).collect()
            })
            .collect()
    };
    let pass = |settings: &FunnelSettings| -> Result<(Vec<Vec<String>>, Summary), BoxError> {
        let idx = tenant.read().map_err(|_| "poisoned")?;
        let mut ids = Vec::with_capacity(questions.len());
        let mut times = Vec::with_capacity(questions.len());
        for (q, vector) in questions.iter().zip(vectors) {
            let started = Instant::now();
            let (records, _) = run_funnel(&idx, &caller, &q.text, vector, settings, now, index.bodies());
            times.push(started.elapsed());
            ids.push(records.into_iter().map(|r| r.id.clone()).collect());
        }
        Ok((ids, Summary::of(&times)))
    };
    let evidence_recall = |ids: &[Vec<String>]| {
        let (mut sum, mut n) = (0.0, 0usize);
        for ((q, wanted), got) in questions.iter().zip(&evidence).zip(ids) {
            if q.category == 5 || wanted.is_empty() {
                continue;
            }
            let got: HashSet<&String> = got.iter().collect();
            let found = wanted.iter().filter(|e| got.contains(e)).count();
            sum += found as f64 / wanted.len() as f64;
            n += 1;
        }
        sum / n.max(1) as f64
    };
    let saved = std::mem::take(&mut tenant.write().map_err(|_| "poisoned")?.ann);
    let (exact_ids, exact_time) = pass(production)?;
    tenant.write().map_err(|_| "poisoned")?.ann = saved;
    let mut rows = vec![json!({
        "path": "exact (forced)",
        "funnel": exact_time.json_ms(),
        "evidence_recall_at_5_categories_1_4": evidence_recall(&exact_ids),
    })];
    for probes in [Probes::Lists(4), Probes::Lists(8), DEFAULT_PROBES] {
        let (ids, time) = pass(&FunnelSettings { probes, ..production.clone() })?;
        let (mut wanted, mut found) = (0usize, 0usize);
        for (exact, approx) in exact_ids.iter().zip(&ids) {
            wanted += exact.len();
            found += exact.iter().filter(|id| approx.contains(id)).count();
        }
        rows.push(json!({
            "path": format!("ivf, {probes} probed"),
            "funnel": time.json_ms(),
            "overlap_with_exact_injected": if wanted == 0 { 1.0 } else { found as f64 / wanted as f64 },
            "evidence_recall_at_5_categories_1_4": evidence_recall(&ids),
        }));
    }
    Ok(json!({"records": records, "ivf_lists": lists, "questions": questions.len(), "rows": rows}))
}

/// The funnel's injected records (in order) and their token count.
fn run_funnel(
    index: &TenantIndex,
    caller: &Caller,
    text: &str,
    vector: &[f32],
    settings: &FunnelSettings,
    now: i64,
    bodies: &Bodies,
) -> (Vec<Arc<Record>>, usize) {
    let query = SemanticQuery {
        text,
        vector: Some(vector),
        threshold: settings.threshold,
        probes: settings.probes,
        hybrid: None,
        lift: memgate::funnel::semantic::Lift::NONE,
    };
    let out = funnel::run(index, caller, &query, settings, now, Detail::Off);
    let body = |h: &memgate::index::RecordHead| {
        bodies.get(h.tenant(), h.id(), h.revision).expect("the eval caches every body")
    };
    (out.packed.injected.iter().map(|c| body(&c.item.head)).collect(), out.packed.tokens)
}

fn caller(tenant: &str) -> Caller {
    Caller::new(tenant, [])
}

/// `D8:6; D9:17`, `D9:1 D4:4`, `D:11:26` → `D8:6`, `D9:17`, … (the labels have a few typos).
fn parse_evidence(text: &str) -> Vec<String> {
    text.split(|c: char| c == ';' || c == ',' || c.is_whitespace())
        .filter_map(|piece| {
            let rest = piece.trim().strip_prefix('D')?.trim_start_matches(':');
            let (session, turn) = rest.split_once(':')?;
            let ok = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
            (ok(session) && ok(turn)).then(|| format!("D{session}:{turn}"))
        })
        .collect()
}

#[derive(Clone, Copy)]
struct Sample {
    funnel5: f64,
    funnel10: f64,
    top5: f64,
    top10: f64,
    injected: usize,
    tokens: usize,
    block_tokens: usize,
}

#[derive(Default)]
struct Group {
    samples: Vec<Sample>,
    adversarial: usize,
    adversarial_injected: usize,
}

impl Group {
    fn add(&mut self, s: &Sample) {
        self.samples.push(*s);
    }

    fn mean(&self, f: impl Fn(&Sample) -> f64) -> f64 {
        self.samples.iter().map(f).sum::<f64>() / self.samples.len().max(1) as f64
    }

    fn mean_usize(&self, f: impl Fn(&Sample) -> usize) -> f64 {
        self.mean(|s| f(s) as f64)
    }

    fn empty_share(&self) -> f64 {
        self.mean(|s| if s.injected == 0 { 1.0 } else { 0.0 })
    }

    fn distribution(&self, f: impl Fn(&Sample) -> usize) -> Value {
        let mut v: Vec<usize> = self.samples.iter().map(&f).collect();
        v.sort_unstable();
        json!({
            "mean": self.mean_usize(&f),
            "p50": common::percentile(&v, 0.5),
            "p95": common::percentile(&v, 0.95),
            "max": v.last().copied().unwrap_or(0),
        })
    }

    fn json(&self) -> Value {
        json!({
            "questions": self.samples.len(),
            "recall_at_5_funnel": self.mean(|s| s.funnel5),
            "recall_at_10_funnel": self.mean(|s| s.funnel10),
            "recall_at_5_top_k": self.mean(|s| s.top5),
            "recall_at_10_top_k": self.mean(|s| s.top10),
            "injected_mean": self.mean_usize(|s| s.injected),
            "nothing_injected_share": self.empty_share(),
            "record_tokens": self.distribution(|s| s.tokens),
            "block_tokens": self.distribution(|s| s.block_tokens),
        })
    }
}

fn print_tables(report: &Value) {
    println!(
        "LoCoMo: {} conversations, {} turns as records, {} questions ({} without usable evidence skipped, {} evidence ids not found)",
        report["conversations"],
        report["turns"],
        report["questions"],
        report["skipped_without_evidence"],
        report["evidence_ids_not_found_in_conversation"]
    );
    println!(
        "model {}, passages embedded at {:.1}/s ({} ONNX threads), threshold {}, budget 3000 tokens / 5 items",
        report["model_id"].as_str().unwrap_or(""),
        report["passages_per_s"].as_f64().unwrap_or(0.0),
        common::text(&report["embedding_threads"]),
        report["threshold"]
    );
    println!();
    println!(
        "{:<26} {:>6} {:>10} {:>10} {:>10} {:>10} {:>9} {:>8} {:>16} {:>16}",
        "questions",
        "n",
        "funnel@5",
        "funnel@10",
        "top-k@5",
        "top-k@10",
        "inj/q",
        "empty",
        "record tok m/50/95",
        "block tok m/50/95"
    );
    if let Some(groups) = report["groups"].as_object() {
        for (name, g) in groups {
            let tok =
                |v: &Value| format!("{:.0}/{}/{}", v["mean"].as_f64().unwrap_or(0.0), v["p50"], v["p95"]);
            println!(
                "{:<26} {:>6} {:>10.3} {:>10.3} {:>10.3} {:>10.3} {:>9.2} {:>8.3} {:>16} {:>16}",
                name,
                common::text(&g["questions"]),
                g["recall_at_5_funnel"].as_f64().unwrap_or(0.0),
                g["recall_at_10_funnel"].as_f64().unwrap_or(0.0),
                g["recall_at_5_top_k"].as_f64().unwrap_or(0.0),
                g["recall_at_10_top_k"].as_f64().unwrap_or(0.0),
                g["injected_mean"].as_f64().unwrap_or(0.0),
                g["nothing_injected_share"].as_f64().unwrap_or(0.0),
                tok(&g["record_tokens"]),
                tok(&g["block_tokens"]),
            );
        }
    }
    println!();
    println!(
        "threshold sweep (5 items, 3000 tokens; recall, injected, tokens and empty share over categories 1-4; last column category 5)"
    );
    println!(
        "{:>9} {:>9} {:>8} {:>10} {:>8} {:>18}",
        "threshold", "recall@5", "inj/q", "tokens/q", "empty", "inj/q adversarial"
    );
    for row in report["threshold_sweep"].as_array().into_iter().flatten() {
        println!(
            "{:>9.2} {:>9.3} {:>8.2} {:>10.1} {:>8.3} {:>18.2}",
            row["threshold"].as_f64().unwrap_or(0.0),
            row["recall_at_5_categories_1_4"].as_f64().unwrap_or(0.0),
            row["injected_mean_categories_1_4"].as_f64().unwrap_or(0.0),
            row["tokens_mean_categories_1_4"].as_f64().unwrap_or(0.0),
            row["empty_share_categories_1_4"].as_f64().unwrap_or(0.0),
            row["adversarial_injected_mean"].as_f64().unwrap_or(0.0),
        );
    }
    println!();
    if let Some(rows) = report["ivf_check"]["rows"].as_array() {
        println!();
        println!(
            "IVF on real embeddings: all {} turns in one tenant, {} lists (recall over categories 1-4)",
            common::text(&report["ivf_check"]["records"]),
            common::text(&report["ivf_check"]["ivf_lists"])
        );
        println!(
            "{:<16} {:>9} {:>9} {:>22} {:>18}",
            "path", "p50 ms", "p99 ms", "same injected as exact", "evidence recall@5"
        );
        for row in rows {
            println!(
                "{:<16} {:>9.3} {:>9.3} {:>22} {:>18.3}",
                row["path"].as_str().unwrap_or(""),
                row["funnel"]["p50_ms"].as_f64().unwrap_or(0.0),
                row["funnel"]["p99_ms"].as_f64().unwrap_or(0.0),
                row["overlap_with_exact_injected"].as_f64().map_or("-".into(), |o| format!("{o:.4}")),
                row["evidence_recall_at_5_categories_1_4"].as_f64().unwrap_or(0.0),
            );
        }
    } else if let Some(skipped) = report["ivf_check"]["skipped"].as_str() {
        println!("IVF check skipped: {skipped}");
    }
    println!();
    println!("funnel latency per question (production settings): {}", report["funnel_latency"]);
    println!("machine before: {}", report["machine_before"]);
    println!("machine after:  {}", report["machine_after"]);
}
