//! `hybrid_eval`: dense, lexical (BM25) and fused retrieval on LoCoMo and on the multilingual
//! support set, and what the lexical layer costs at 10,000 and 100,000 records.
//!
//! LoCoMo as `locomo_eval` reads it (every dialog turn a record, content
//! `{"statement": "<speaker>: <text>"}`, one tenant per conversation; questions with their
//! evidence turns; category 5 apart). Turns are embedded with the production model
//! (`memory::passage_text`, `embed_passages`) and questions with `embed_query`; `--cache DIR`
//! keeps both vector sets in DIR (keyed by the model id and the texts) so that trying other
//! fusion settings does not embed 7,900 texts again. Each tenant also gets a `LexicalIndex` over
//! `lexical::record_text`.
//!
//! Per question, the dense ranking (exact cosine over the tenant, as the funnel's exact scan) and
//! the lexical one (`LexicalIndex::search`, top 100) are fused by each variant: dense alone
//! (today), lexical alone, RRF (k 60), and weighted sums `similarity + w · normalized BM25`.
//! Reported per variant, over categories 1–4:
//! - evidence recall@5/@10/@20 of the ranking alone (no gate, no budget);
//! - each injection policy: a gate (dense ≥ the release threshold, or normalized BM25 ≥
//!   `--min-lexical`), an item cap and a token budget (record tokens, as the funnel's density
//!   layer counts them) → recall of what is injected, records, record tokens and the tokens of
//!   the whole v1 block (contract included), mean and max; records injected for category 5.
//!
//! The support set (`tests/data/support_records.json`, the 12 questions of
//! `tests/integration/e2e_memory/multilingual.rs`, 7 records of one tenant): per variant and
//! gate, with the production cap and budget, how many questions get their record, how many get
//! exactly it, how many unrelated and off-topic records are injected.
//!
//! Scale (`--sizes`): LoCoMo turns cycled to N records (each with a unique code), a
//! `LexicalIndex` built over them: build time, heap and RSS added, search p50/p99 over every
//! question with half the slots as candidates, a record replaced; the fusion of 200 dense and
//! 100 lexical hits; and the query embedding of fresh ~30-word questions (1 ONNX thread).
//!
//! Run from the repository root:
//! `cargo run --release --example hybrid_eval -- --cache /tmp/hybrid-cache [--json]`.
#![allow(clippy::print_stdout)]

#[path = "common.rs"]
mod common;

use clap::Parser;
use common::{
    BoxError, LocomoQuestion as Question, Summary, cached_vectors, load_locomo, record_fact as fact, rss_kb,
};
use memgate::embed::Embedder;
use memgate::index::IndexedRecord;
use memgate::inject::{RenderItem, Templates};
use memgate::lexical::fusion::{self, FusedHit, Fusion, Gate};
use memgate::lexical::{
    Analyzer, AnalyzerOptions, Bm25Params, LexicalHit, LexicalIndex, LexicalQuery, record_text,
};
use memgate::memory::passage_text;
use memgate::record::Record;
use memgate::slots::SlotSet;
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How many lexical hits are fused (the dense ranking holds every record of a tenant).
const LEXICAL_K: usize = 100;

#[derive(Parser, Debug)]
#[command(name = "hybrid_eval")]
struct Args {
    /// locomo10.json.
    #[arg(long, default_value = "../shared/benchmarks/locomo/locomo10.json")]
    data: PathBuf,
    /// Use only the first N conversations.
    #[arg(long)]
    conversations: Option<usize>,
    /// Keep and reuse the embeddings here (a folder outside the repository).
    #[arg(long)]
    cache: Option<PathBuf>,
    /// ONNX Runtime threads for embedding the corpus.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// The release threshold on similarity (default: the calibrated one, 0.20 centered).
    #[arg(long)]
    threshold: Option<f32>,
    /// Weights w of `similarity + w · normalized BM25` to report.
    #[arg(long, default_value = "0.5,1,2")]
    weights: String,
    /// k of the RRF variants to report (equal weights).
    #[arg(long, default_value = "60")]
    rrf_k: String,
    /// BM25 term-frequency saturation.
    #[arg(long, default_value_t = 1.2)]
    k1: f32,
    /// BM25 length normalization.
    #[arg(long, default_value_t = 0.75)]
    b: f32,
    /// Analyzer without Snowball stemming.
    #[arg(long)]
    no_stemming: bool,
    /// Analyzer without stop words.
    #[arg(long)]
    no_stop_words: bool,
    /// Analyzer with CJK unigrams besides bigrams.
    #[arg(long)]
    cjk_unigrams: bool,
    /// Gates on normalized BM25 (pass on words) to report.
    #[arg(long, default_value = "0.2,0.3,0.4")]
    min_lexical: String,
    /// Budgets on the whole block's tokens (contract included; no item cap) to report.
    #[arg(long, default_value = "1000")]
    budgets: String,
    /// Budgets on record tokens (the density layer's count; no item cap, no gate) to report: what
    /// a block of record lines alone would hold.
    #[arg(long, default_value = "")]
    record_budgets: String,
    /// Tenant sizes for the lexical cost (empty: skip).
    #[arg(long, default_value = "10k,100k")]
    sizes: String,
    /// Fresh ~30-word questions to time the query embedding with (0: skip).
    #[arg(long, default_value_t = 200)]
    embed_questions: usize,
    /// The release whose template renders the block.
    #[arg(long, default_value = "v1")]
    release: String,
    #[arg(long)]
    json: bool,
}

fn main() -> Result<(), BoxError> {
    common::export_ort_if_unset();
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(run(args))
}

/// One conversation: its turns by slot (indexes into the global turn list) and their words.
struct Tenant {
    turns: Vec<usize>,
    by_id: HashMap<String, u32>,
    lexical: LexicalIndex,
    all: SlotSet,
}

/// What the block costs: tokens of the rendered block without records, and per record its line.
struct BlockCost {
    overhead: usize,
    lines: Vec<usize>,
}

fn parse_list<T: std::str::FromStr>(text: &str) -> Result<Vec<T>, BoxError> {
    text.split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| s.trim().parse::<T>().map_err(|_| format!("`{s}` is not a number").into()))
        .collect()
}

async fn run(args: Args) -> Result<(), BoxError> {
    let machine_before = common::machine();
    let threshold = args.threshold.unwrap_or(memgate::config::DEFAULT_SIMILARITY);
    let weights: Vec<f32> = parse_list(&args.weights)?;
    let min_lexicals: Vec<f32> = parse_list(&args.min_lexical)?;
    let budgets: Vec<usize> = parse_list(&args.budgets)?;
    let sizes = if args.sizes.trim().is_empty() { Vec::new() } else { common::parse_sizes(&args.sizes)? };
    let (records, questions) = load_locomo(&args.data, args.conversations)?;
    let analyzer_options = AnalyzerOptions {
        stemming: !args.no_stemming,
        stop_words: !args.no_stop_words,
        cjk_unigrams: args.cjk_unigrams,
    };
    let bm25 = Bm25Params { k1: args.k1, b: args.b };
    let templates = Templates::load(Path::new("templates"))?;
    let config = common::embed_config(args.threads, 8192);
    let embedder = tokio::task::spawn_blocking(move || Embedder::load(&config)).await??;

    let passages: Vec<String> = records.iter().map(passage_text).collect();
    let vectors = cached_vectors(&embedder, args.cache.as_deref(), "passages", &passages, false).await?;
    let question_texts: Vec<String> = questions.iter().map(|q| q.text.clone()).collect();
    let query_vectors =
        cached_vectors(&embedder, args.cache.as_deref(), "queries", &question_texts, true).await?;

    let record_tokens: Vec<usize> =
        records.iter().map(|r| IndexedRecord::new(r.clone(), None).tokens).collect();
    let cost = block_cost(&templates, &args.release, &records)?;
    let mut tenants: BTreeMap<String, Tenant> = BTreeMap::new();
    let started = Instant::now();
    for (i, record) in records.iter().enumerate() {
        let tenant = tenants.entry(record.tenant.clone()).or_insert_with(|| Tenant {
            turns: Vec::new(),
            by_id: HashMap::new(),
            lexical: LexicalIndex::new(Analyzer::new(analyzer_options), bm25),
            all: SlotSet::new(0),
        });
        let slot = tenant.turns.len() as u32;
        tenant.lexical.upsert(slot, &record_text(record));
        tenant.by_id.insert(record.id.clone(), slot);
        tenant.turns.push(i);
    }
    for tenant in tenants.values_mut() {
        tenant.all = SlotSet::new(tenant.turns.len());
        (0..tenant.turns.len() as u32).for_each(|s| tenant.all.insert(s));
    }
    let lexical_build = started.elapsed();

    let mut variants: Vec<(String, Fusion)> =
        vec![("dense (today)".into(), Fusion::Dense), ("lexical (BM25)".into(), Fusion::Lexical)];
    for k in parse_list::<f32>(&args.rrf_k)? {
        variants.push((format!("RRF k={k}"), Fusion::Rrf { k, dense_weight: 1.0, lexical_weight: 1.0 }));
    }
    for w in &weights {
        variants
            .push((format!("weighted w={w}"), Fusion::Weighted { dense_weight: 1.0, lexical_weight: *w }));
    }
    let mut policies: Vec<Policy> = vec![Policy {
        name: format!("today: dense>={threshold}, 5 items, 3000"),
        gate: Gate::dense_only(threshold),
        max_items: 5,
        budget: 3000,
        block: None,
    }];
    for m in &min_lexicals {
        policies.push(Policy {
            name: format!("dense>={threshold} or bm25n>={m}, 5 items, 3000"),
            gate: Gate { min_similarity: threshold, min_lexical: *m, min_fused: f32::NEG_INFINITY },
            max_items: 5,
            budget: 3000,
            block: None,
        });
    }
    for b in parse_list::<usize>(&args.record_budgets)? {
        let name = format!("open, record tokens {b}");
        policies.push(Policy { name, gate: Gate::OPEN, max_items: 1000, budget: b, block: None });
    }
    for b in &budgets {
        let block = Some(*b);
        let open =
            Policy { name: format!("open, block {b}"), gate: Gate::OPEN, max_items: 1000, budget: 0, block };
        policies.push(open);
        for m in &min_lexicals {
            policies.push(Policy {
                name: format!("dense>={threshold} or bm25n>={m}, block {b}"),
                gate: Gate { min_similarity: threshold, min_lexical: *m, min_fused: f32::NEG_INFINITY },
                max_items: 1000,
                budget: 0,
                block,
            });
        }
        policies.push(Policy {
            name: format!("fused>={threshold} (weighted), block {b}"),
            gate: Gate { min_fused: threshold, ..Gate::OPEN },
            max_items: 1000,
            budget: 0,
            block,
        });
    }

    let analyzer = Analyzer::new(analyzer_options);
    let mut stats: Vec<VariantStats> = variants.iter().map(|_| VariantStats::new(policies.len())).collect();
    let (mut analyze_times, mut search_times, mut fuse_times) = (Vec::new(), Vec::new(), Vec::new());
    let (mut skipped, mut unresolved) = (0usize, 0usize);
    for (q, qv) in questions.iter().zip(&query_vectors) {
        let tenant = tenants.get(&q.tenant).ok_or("a question's conversation has no turns")?;
        let evidence: Vec<u32> = q.evidence.iter().filter_map(|e| tenant.by_id.get(e).copied()).collect();
        unresolved += q.evidence.len() - evidence.len();
        if evidence.is_empty() {
            skipped += 1;
            continue;
        }
        let dense: Vec<(u32, f32)> =
            tenant.turns.iter().enumerate().map(|(slot, i)| (slot as u32, dot(qv, &vectors[*i]))).collect();
        let t = Instant::now();
        let query = LexicalQuery::new(&analyzer, &q.text);
        analyze_times.push(t.elapsed());
        let t = Instant::now();
        let lexical = tenant.lexical.search(&query, &tenant.all, LEXICAL_K);
        search_times.push(t.elapsed());
        for ((_, fusion), stat) in variants.iter().zip(stats.iter_mut()) {
            let t = Instant::now();
            let mut fused = fusion::fuse(&dense, &lexical, *fusion);
            if *fusion == Fusion::RRF {
                fuse_times.push(t.elapsed());
            }
            if *fusion == Fusion::Lexical {
                fused.retain(|h| h.lexical.is_some());
            }
            let recall = |slots: &[u32]| {
                evidence.iter().filter(|e| slots.contains(e)).count() as f64 / evidence.len() as f64
            };
            let ranked: Vec<u32> = fused.iter().map(|h| h.slot).collect();
            if q.category == 5 {
                stat.adversarial += 1;
            } else {
                stat.at.push([5, 10, 20, 30].map(|k| recall(&ranked[..k.min(ranked.len())])));
            }
            for (policy, out) in policies.iter().zip(stat.policies.iter_mut()) {
                if !policy.applies_to(*fusion) {
                    continue;
                }
                let turn = |slot: u32| tenant.turns[slot as usize];
                let chosen = pack(
                    &fused,
                    policy,
                    &|slot| (record_tokens[turn(slot)], cost.lines[turn(slot)]),
                    cost.overhead,
                );
                let tokens: usize = chosen.iter().map(|s| record_tokens[tenant.turns[*s as usize]]).sum();
                let block = if chosen.is_empty() {
                    0
                } else {
                    cost.overhead
                        + chosen.iter().map(|s| cost.lines[tenant.turns[*s as usize]]).sum::<usize>()
                };
                if q.category == 5 {
                    out.adversarial_injected += chosen.len();
                } else {
                    out.samples.push(PolicySample {
                        category: q.category,
                        recall: recall(&chosen),
                        injected: chosen.len(),
                        tokens,
                        block,
                    });
                }
            }
        }
    }

    let support = support_check(&embedder, &analyzer, bm25, threshold, &variants, &min_lexicals).await?;
    let scale = sizes.iter().map(|n| scale_check(&records, &questions, *n)).collect::<Vec<_>>();
    let embedding = embed_latency(&questions, args.embed_questions).await?;

    let report = json!({
        "bench": "hybrid_eval",
        "data": args.data.display().to_string(),
        "turns": records.len(),
        "questions": questions.len(),
        "skipped_without_evidence": skipped,
        "evidence_ids_not_found": unresolved,
        "model_id": embedder.model_id(),
        "threshold": common::f32r(threshold),
        "lexical_k": LEXICAL_K,
        "bm25": {"k1": common::f32r(bm25.k1), "b": common::f32r(bm25.b)},
        "analyzer": format!("{analyzer_options:?}"),
        "lexical_build_all_tenants_ms": common::ms(lexical_build),
        "block_overhead_tokens": cost.overhead,
        "latency_per_question": {
            "query_analysis": Summary::of(&analyze_times).json_us(),
            "lexical_search": Summary::of(&search_times).json_us(),
            "rrf_fusion": Summary::of(&fuse_times).json_us(),
        },
        "variants": variants.iter().zip(&stats).map(|((name, _), s)| s.json(name, &policies)).collect::<Vec<_>>(),
        "support_set": support,
        "scale": scale,
        "query_embedding_30_words": embedding,
        "machine_before": machine_before,
        "machine_after": common::machine(),
    });
    if args.json {
        println!("{report}");
    } else {
        print_report(&report);
    }
    Ok(())
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

struct Policy {
    name: String,
    gate: Gate,
    max_items: usize,
    /// Record tokens (the density layer's count), when `block` is `None`.
    budget: usize,
    /// Or: tokens of the whole rendered block, contract included.
    block: Option<usize>,
}

impl Policy {
    /// A gate on the fused score means something only for fusions on the similarity's scale.
    fn applies_to(&self, fusion: Fusion) -> bool {
        self.gate.min_fused == f32::NEG_INFINITY || matches!(fusion, Fusion::Dense | Fusion::Weighted { .. })
    }
}

/// The density layer's rule on the fused order: every hit that passes the gate, best first,
/// while it fits the item cap and the budget (a record that does not fit is skipped, and smaller
/// ones after it may still go in).
fn pack(
    fused: &[FusedHit],
    policy: &Policy,
    cost: &dyn Fn(u32) -> (usize, usize),
    overhead: usize,
) -> Vec<u32> {
    let (mut chosen, mut used) = (Vec::new(), 0usize);
    let budget = policy.block.map_or(policy.budget, |b| b.saturating_sub(overhead));
    for hit in fused.iter().filter(|h| policy.gate.passes(h)) {
        let (tokens, line) = cost(hit.slot);
        let cost = if policy.block.is_some() { line } else { tokens };
        if chosen.len() < policy.max_items && used + cost <= budget {
            used += cost;
            chosen.push(hit.slot);
        }
    }
    chosen
}

struct PolicySample {
    category: i64,
    recall: f64,
    injected: usize,
    tokens: usize,
    block: usize,
}

#[derive(Default)]
struct PolicyStats {
    samples: Vec<PolicySample>,
    adversarial_injected: usize,
}

struct VariantStats {
    at: Vec<[f64; 4]>,
    adversarial: usize,
    policies: Vec<PolicyStats>,
}

impl VariantStats {
    fn new(policies: usize) -> VariantStats {
        VariantStats {
            at: Vec::new(),
            adversarial: 0,
            policies: (0..policies).map(|_| PolicyStats::default()).collect(),
        }
    }

    fn json(&self, name: &str, policies: &[Policy]) -> Value {
        let n = self.at.len().max(1) as f64;
        let at = |i: usize| self.at.iter().map(|r| r[i]).sum::<f64>() / n;
        let rows: Vec<Value> = policies
            .iter()
            .zip(&self.policies)
            .filter(|(_, s)| !s.samples.is_empty())
            .map(|(p, s)| {
                let m = s.samples.len().max(1) as f64;
                let mean = |f: &dyn Fn(&PolicySample) -> f64| s.samples.iter().map(f).sum::<f64>() / m;
                let mut blocks: Vec<usize> = s.samples.iter().map(|x| x.block).collect();
                blocks.sort_unstable();
                json!({
                    "policy": p.name,
                    "recall": mean(&|x| x.recall),
                    "injected_mean": mean(&|x| x.injected as f64),
                    "record_tokens_mean": mean(&|x| x.tokens as f64),
                    "block_tokens_mean": mean(&|x| x.block as f64),
                    "block_tokens_p95": common::percentile(&blocks, 0.95),
                    "block_tokens_max": blocks.last().copied().unwrap_or(0),
                    "nothing_injected_share": mean(&|x| if x.injected == 0 { 1.0 } else { 0.0 }),
                    "adversarial_injected_mean": s.adversarial_injected as f64 / self.adversarial.max(1) as f64,
                    "recall_by_category": (1..=4).map(|c| {
                        let of: Vec<f64> = s.samples.iter().filter(|x| x.category == c).map(|x| x.recall).collect();
                        (c.to_string(), json!(of.iter().sum::<f64>() / of.len().max(1) as f64))
                    }).collect::<Map<String, Value>>(),
                })
            })
            .collect();
        json!({
            "variant": name,
            "questions_1_4": self.at.len(),
            "recall_at_5": at(0),
            "recall_at_10": at(1),
            "recall_at_20": at(2),
            "recall_at_30": at(3),
            "policies": rows,
        })
    }
}

/// The block's tokens as overhead + one line per record: measured by rendering each record
/// alone and two records together (the block is one line per record, so this is exact up to
/// how the tokenizer splits at line ends; checked on pairs).
fn block_cost(templates: &Templates, release: &str, records: &[Record]) -> Result<BlockCost, BoxError> {
    let tokenizer = tiktoken_rs::cl100k_base_singleton();
    let count = |items: &[RenderItem]| -> Result<usize, BoxError> {
        Ok(tokenizer.encode_ordinary(&templates.render(release, items)?).len())
    };
    let items: Vec<RenderItem> = records.iter().map(RenderItem::of).collect();
    let (Some(a), Some(b)) = (items.first(), items.get(1)) else {
        return Err("too few records to measure the block".into());
    };
    let (one_a, one_b, both) =
        (count(std::slice::from_ref(a))?, count(std::slice::from_ref(b))?, count(&[a.clone(), b.clone()])?);
    // both = overhead + line_a + line_b; one_a = overhead + line_a.
    let overhead = one_a + one_b - both;
    let lines = items
        .iter()
        .map(|i| count(std::slice::from_ref(i)).map(|c| c - overhead))
        .collect::<Result<_, _>>()?;
    Ok(BlockCost { overhead, lines })
}

/// The 12 support questions of `tests/integration/e2e_memory/multilingual.rs`.
const SUPPORT_QUERIES: &[(&str, &str)] = &[
    ("Hi, my standing desk still hasn't arrived. When will it be delivered?", "conv-desk-delay"),
    ("我的升降桌怎么还没送到？什么时候能到货？", "conv-desk-delay"),
    ("Здравствуйте, мой стол до сих пор не доставили. Когда его привезут?", "conv-desk-delay"),
    ("I want to return the lamp I bought last week. How long does the refund take?", "sop-refund-zh"),
    ("我想退货，退款多久能到账？", "sop-refund-zh"),
    ("Я хочу вернуть товар. Как быстро мне вернут деньги?", "sop-refund-zh"),
    ("I forgot my password and can't log in to my account. How do I reset it?", "sop-password-ru"),
    ("我忘记密码了，登录不了账户，怎么重置？", "sop-password-ru"),
    ("Я забыл пароль и не могу войти в личный кабинет. Как его сбросить?", "sop-password-ru"),
    ("Which language should I use when replying to this customer?", "profile-li-wei"),
    ("这位客户希望我们用什么语言回复？", "profile-li-wei"),
    ("На каком языке лучше отвечать этому клиенту?", "profile-li-wei"),
];

const OFF_TOPIC: [&str; 3] = ["fact-party-zh", "fact-office-ru", "spec-grinder"];

/// Each variant and gate on the support set, with the production cap (5) and budget (3000).
async fn support_check(
    embedder: &Embedder,
    analyzer: &Analyzer,
    bm25: Bm25Params,
    threshold: f32,
    variants: &[(String, Fusion)],
    min_lexicals: &[f32],
) -> Result<Value, BoxError> {
    let raw: Value = serde_json::from_str(&std::fs::read_to_string("tests/data/support_records.json")?)?;
    let mut records = Vec::new();
    for (i, r) in raw.as_array().ok_or("support_records.json is not a list")?.iter().enumerate() {
        let mut record =
            fact("support", r["id"].as_str().unwrap_or_default(), r["content"].clone(), i as i64);
        record.record_type = r["type"].as_str().unwrap_or("fact").to_owned();
        record.key = r["key"].as_str().map(str::to_owned);
        record.aliases = r["aliases"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect();
        record.priority = r["priority"].as_u64().unwrap_or(3) as u8;
        records.push(record);
    }
    let vectors = embedder.embed_passages(&records.iter().map(passage_text).collect::<Vec<_>>()).await?;
    let mut lexical = LexicalIndex::new(Analyzer::new(analyzer.options()), bm25);
    for (slot, record) in records.iter().enumerate() {
        lexical.upsert(slot as u32, &record_text(record));
    }
    let mut all = SlotSet::new(records.len());
    (0..records.len() as u32).for_each(|s| all.insert(s));
    let mut gates = vec![("dense>=threshold".to_owned(), Gate::dense_only(threshold))];
    for m in min_lexicals {
        gates.push((
            format!("dense>=threshold or bm25n>={m}"),
            Gate { min_similarity: threshold, min_lexical: *m, min_fused: f32::NEG_INFINITY },
        ));
    }
    gates.push(("fused>=threshold (weighted)".to_owned(), Gate { min_fused: threshold, ..Gate::OPEN }));
    let mut per_query = Vec::new();
    // Per question: the dense ranking (slot, similarity) and the lexical hits.
    type Rankings = (Vec<(u32, f32)>, Vec<LexicalHit>);
    let mut rankings: Vec<Rankings> = Vec::new();
    for (text, wanted) in SUPPORT_QUERIES {
        let qv = embedder.embed_query(text).await?;
        let dense: Vec<(u32, f32)> =
            vectors.iter().enumerate().map(|(s, v)| (s as u32, dot(&qv, v))).collect();
        let hits = lexical.search(&LexicalQuery::new(analyzer, text), &all, LEXICAL_K);
        per_query.push(json!({
            "query": text,
            "wanted": wanted,
            "similarity": dense.iter().map(|(s, x)| (records[*s as usize].id.clone(), json!(common::f32r(*x)))).collect::<Map<_, _>>(),
            "bm25_normalized": hits.iter().map(|h| (records[h.slot as usize].id.clone(), json!(common::f32r(h.normalized)))).collect::<Map<_, _>>(),
        }));
        rankings.push((dense, hits));
    }
    let mut rows = Vec::new();
    for (name, fusion) in variants {
        for (gate_name, gate) in &gates {
            let policy =
                Policy { name: gate_name.clone(), gate: *gate, max_items: 5, budget: 3000, block: None };
            if !policy.applies_to(*fusion) {
                continue;
            }
            let (mut found, mut exact, mut unrelated, mut off_topic) = (0, 0, 0, 0);
            for ((_, wanted), (dense, hits)) in SUPPORT_QUERIES.iter().zip(&rankings) {
                let mut fused = fusion::fuse(dense, hits, *fusion);
                if *fusion == Fusion::Lexical {
                    fused.retain(|h| h.lexical.is_some());
                }
                let got: Vec<&str> = pack(&fused, &policy, &|_| (1, 1), 0)
                    .iter()
                    .map(|s| records[*s as usize].id.as_str())
                    .collect();
                found += usize::from(got.contains(wanted));
                exact += usize::from(got == [*wanted]);
                unrelated += got.iter().filter(|id| *id != wanted).count();
                off_topic += got.iter().filter(|id| OFF_TOPIC.contains(id)).count();
            }
            rows.push(json!({"variant": name, "gate": gate_name, "found": found, "exact": exact,
                "unrelated_injected": unrelated, "off_topic_injected": off_topic}));
        }
    }
    Ok(json!({"queries": SUPPORT_QUERIES.len(), "rows": rows, "scores": per_query}))
}

/// The lexical index at `n` records (LoCoMo turns cycled, each with a unique code).
fn scale_check(records: &[Record], questions: &[Question], n: usize) -> Value {
    let texts: Vec<String> =
        (0..n).map(|i| format!("{} r{i}q", record_text(&records[i % records.len()]))).collect();
    let rss_before = rss_kb();
    let started = Instant::now();
    let mut index = LexicalIndex::default();
    for (slot, text) in texts.iter().enumerate() {
        index.upsert(slot as u32, text);
    }
    let build = started.elapsed();
    let rss_added_mb = (rss_kb().saturating_sub(rss_before)) as f64 / 1e3;
    let mut half = SlotSet::new(n);
    (0..n as u32).filter(|s| s % 2 == 0).for_each(|s| half.insert(s));
    let analyzer = Analyzer::default();
    let queries: Vec<LexicalQuery> =
        questions.iter().map(|q| LexicalQuery::new(&analyzer, &q.text)).collect();
    let mut search = Vec::with_capacity(queries.len() * 2);
    for query in queries.iter().chain(&queries) {
        let t = Instant::now();
        std::hint::black_box(index.search(query, &half, LEXICAL_K));
        search.push(t.elapsed());
    }
    let mut replace = Vec::new();
    for i in 0..2000 {
        let slot = (i * 7919) % n;
        let t = Instant::now();
        index.upsert(slot as u32, &texts[(slot + 1) % n]);
        replace.push(t.elapsed());
    }
    // Fusion at this size: 200 dense hits and the lexical top 100 of a query.
    let dense: Vec<(u32, f32)> = (0..200u32).map(|i| (i * 37 % n as u32, 0.5 - i as f32 * 0.001)).collect();
    let hits = queries
        .iter()
        .map(|q| index.search(q, &half, LEXICAL_K))
        .find(|h| h.len() == LEXICAL_K)
        .unwrap_or_default();
    let mut fuse = Vec::new();
    for _ in 0..2000 {
        let t = Instant::now();
        std::hint::black_box(fusion::fuse(&dense, &hits, Fusion::RRF));
        fuse.push(t.elapsed());
    }
    json!({
        "records": n,
        "terms": index.terms(),
        "build_ms": common::ms(build),
        "heap_mb": index.heap_bytes() as f64 / 1e6,
        "rss_added_mb": rss_added_mb,
        "search_half_candidates": Summary::of(&search).json_us(),
        "replace_one_record": Summary::of(&replace).json_us(),
        "rrf_200_dense_100_lexical": Summary::of(&fuse).json_us(),
    })
}

/// Query embedding of fresh ~30-word questions (three LoCoMo questions joined), one ONNX
/// thread and no cache, as production embeds a new question.
async fn embed_latency(questions: &[Question], count: usize) -> Result<Value, BoxError> {
    if count == 0 {
        return Ok(Value::Null);
    }
    let config = common::embed_config(1, 0);
    let embedder = tokio::task::spawn_blocking(move || Embedder::load(&config)).await??;
    let mut texts = Vec::new();
    for i in 0..count {
        let mut words: Vec<&str> = Vec::new();
        let mut j = i * 3;
        while words.len() < 30 {
            words.extend(questions[j % questions.len()].text.split_whitespace());
            j += 1;
        }
        texts.push(words[..30].join(" "));
    }
    embedder.embed_query("warm up").await?;
    let mut times: Vec<Duration> = Vec::with_capacity(count);
    for text in &texts {
        let t = Instant::now();
        embedder.embed_query(text).await?;
        times.push(t.elapsed());
    }
    Ok(json!({"questions": count, "words": 30, "onnx_threads": 1, "latency": Summary::of(&times).json_ms()}))
}

fn print_report(r: &Value) {
    let f = |v: &Value| v.as_f64().unwrap_or(0.0);
    println!(
        "LoCoMo: {} turns, {} questions ({} skipped without evidence), model {}, threshold {}, block overhead {} tokens, BM25 {}, {}",
        r["turns"],
        r["questions"],
        r["skipped_without_evidence"],
        common::text(&r["model_id"]),
        r["threshold"],
        r["block_overhead_tokens"],
        r["bm25"],
        common::text(&r["analyzer"])
    );
    println!("latency per LoCoMo question (~600 records): {}", r["latency_per_question"]);
    println!();
    println!("{:<22} {:>7} {:>7} {:>7} {:>7}", "ranking (cat. 1-4)", "R@5", "R@10", "R@20", "R@30");
    for v in r["variants"].as_array().into_iter().flatten() {
        println!(
            "{:<22} {:>7.3} {:>7.3} {:>7.3} {:>7.3}",
            common::text(&v["variant"]),
            f(&v["recall_at_5"]),
            f(&v["recall_at_10"]),
            f(&v["recall_at_20"]),
            f(&v["recall_at_30"])
        );
    }
    println!();
    println!(
        "{:<22} {:<44} {:>7} {:>6} {:>8} {:>9} {:>6} {:>6} {:>6} {:>7} {:>23}",
        "variant",
        "policy",
        "recall",
        "inj/q",
        "rec tok",
        "block m",
        "p95",
        "max",
        "empty",
        "inj/adv",
        "recall cat. 1/2/3/4"
    );
    for v in r["variants"].as_array().into_iter().flatten() {
        for p in v["policies"].as_array().into_iter().flatten() {
            println!(
                "{:<22} {:<44} {:>7.3} {:>6.2} {:>8.0} {:>9.0} {:>6} {:>6} {:>6.3} {:>7.2} {:>23}",
                common::text(&v["variant"]),
                common::text(&p["policy"]),
                f(&p["recall"]),
                f(&p["injected_mean"]),
                f(&p["record_tokens_mean"]),
                f(&p["block_tokens_mean"]),
                p["block_tokens_p95"],
                p["block_tokens_max"],
                f(&p["nothing_injected_share"]),
                f(&p["adversarial_injected_mean"]),
                ["1", "2", "3", "4"].map(|c| format!("{:.3}", f(&p["recall_by_category"][c]))).join("/"),
            );
        }
    }
    println!();
    println!("support set ({} questions; cap 5, budget 3000):", r["support_set"]["queries"]);
    println!(
        "{:<22} {:<34} {:>6} {:>6} {:>10} {:>10}",
        "variant", "gate", "found", "exact", "unrelated", "off-topic"
    );
    for row in r["support_set"]["rows"].as_array().into_iter().flatten() {
        println!(
            "{:<22} {:<34} {:>6} {:>6} {:>10} {:>10}",
            common::text(&row["variant"]),
            common::text(&row["gate"]),
            row["found"],
            row["exact"],
            row["unrelated_injected"],
            row["off_topic_injected"]
        );
    }
    for q in r["support_set"]["scores"].as_array().into_iter().flatten() {
        println!("  {} (wants {})", common::text(&q["query"]), common::text(&q["wanted"]));
        println!("    similarity {}", q["similarity"]);
        println!("    bm25n      {}", q["bm25_normalized"]);
    }
    println!();
    for s in r["scale"].as_array().into_iter().flatten() {
        println!(
            "lexical at {} records: {} terms, build {} ms, heap {:.1} MB, RSS added {:.1} MB; search p50/p99 {}/{} µs; replace p50/p99 {}/{} µs; RRF p50/p99 {}/{} µs",
            s["records"],
            s["terms"],
            s["build_ms"],
            f(&s["heap_mb"]),
            f(&s["rss_added_mb"]),
            s["search_half_candidates"]["p50_us"],
            s["search_half_candidates"]["p99_us"],
            s["replace_one_record"]["p50_us"],
            s["replace_one_record"]["p99_us"],
            s["rrf_200_dense_100_lexical"]["p50_us"],
            s["rrf_200_dense_100_lexical"]["p99_us"],
        );
    }
    println!("query embedding, 30-word questions: {}", r["query_embedding_30_words"]);
    println!("machine before: {}", r["machine_before"]);
    println!("machine after:  {}", r["machine_after"]);
}
