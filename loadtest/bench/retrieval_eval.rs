//! `retrieval_eval`: what the default release injects, measured honestly, in one run.
//!
//! - **LoCoMo, held out.** The ten conversations are split in code (`TUNE`, `HELD_OUT`): settings
//!   are chosen on the tuning five (`--sweep` prints the grid), the figures reported are those of
//!   the other five. Every dialog turn is a record (`common::load_locomo`), embedded with the
//!   production model, loaded into a real `MemoryIndex`; every question of categories 1–4 runs
//!   through `funnel::run` with the release's own settings (threshold, hybrid ranking, cut, cap),
//!   its budget replaced by what a block of 500 / 1,000 / 2,000 tokens holds: the whole rendered
//!   `<MEMORY_CONTEXT>` block, contract included, counted in cl100k tokens, records dropped from
//!   the end if the rendered block is over. Evidence recall: the share of a question's evidence
//!   turns in the block. Category 5 (adversarial) is counted only for what it gets.
//! - **The multilingual support set.** `tests/data/support_records.json` (one tenant) and the 17
//!   questions of `tests/data/support_questions.json` (English, Chinese, Russian; two want two
//!   records), asked as customer u-789 of team support, with the release exactly as it ships:
//!   recall (wanted records injected / wanted) and precision (wanted injected / injected).
//!   Beside them, records the caller must never get: another customer's, an expired one, one
//!   not valid yet, and the same records in another tenant; any of them injected is a violation.
//! - **Tokens** injected per question at the release's own budget, and the **query step** of a
//!   new question (embedding on one ONNX thread without a cache, word analysis, the funnel):
//!   p50 / p99 over held-out questions.
//!
//! Embeddings are cached (`--cache`, default `loadtest/.cache/retrieval`, git-ignored), keyed by
//! the model and the texts: the first run embeds ~5,900 turns (minutes on 2 cores), later ones
//! read them.
//!
//! Run from the repository root:
//! `cargo run --release --example retrieval_eval [-- --sweep] [--json]`.
#![allow(clippy::print_stdout)]

#[path = "common.rs"]
mod common;

use clap::Parser;
use common::{BoxError, LocomoQuestion, Summary, cached_vectors, load_locomo, record_fact};
use memgate::clock::{format_ms, now_ms};
use memgate::config::{Config, ConfigFlags};
use memgate::embed::Embedder;
use memgate::funnel::background::Standout;
use memgate::funnel::cut::Cut;
use memgate::funnel::feedback::{self, Feedback};
use memgate::funnel::semantic::{Hybrid, SemanticQuery};
use memgate::funnel::trace::Detail;
use memgate::funnel::{self, FunnelSettings, Retrieval};
use memgate::identity::Caller;
use memgate::index::{IndexedRecord, MemoryIndex, TenantIndex};
use memgate::inject::{DEFAULT_RELEASE, RenderItem, Templates};
use memgate::lexical::{LexicalQuery, analyzer};
use memgate::memory::passage_text;
use memgate::record::Record;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The conversations settings are tuned on.
const TUNE: [&str; 5] = ["conv-26", "conv-41", "conv-43", "conv-47", "conv-49"];
/// The conversations the figures are reported on; never used to choose a setting.
const HELD_OUT: [&str; 5] = ["conv-30", "conv-42", "conv-44", "conv-48", "conv-50"];
/// The support set's tenant, and another holding the same records (isolation).
const SUPPORT: &str = "support";
const OTHER_TENANT: &str = "support-other";

#[derive(Parser, Debug)]
#[command(name = "retrieval_eval")]
struct Args {
    /// locomo10.json.
    #[arg(long, default_value = "../shared/benchmarks/locomo/locomo10.json")]
    data: PathBuf,
    /// Where embeddings are kept between runs.
    #[arg(long, default_value = "loadtest/.cache/retrieval")]
    cache: PathBuf,
    /// ONNX Runtime threads for embedding the corpus.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// The release measured (default: the one memgate starts with).
    #[arg(long)]
    release: Option<String>,
    /// Block sizes (tokens of the whole rendered block) recall is reported at.
    #[arg(long, default_value = "500,1000,2000")]
    blocks: String,
    /// Also print the calibration grid on the tuning conversations and the support set.
    #[arg(long)]
    sweep: bool,
    /// Held-out questions timed for the query step (0: skip).
    #[arg(long, default_value_t = 300)]
    latency_questions: usize,
    #[arg(long)]
    json: bool,
}

fn main() -> Result<(), BoxError> {
    common::export_ort_if_unset();
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(run(args))
}

/// One way of running the funnel: the release's settings with some replaced.
#[derive(Clone)]
struct Variant {
    name: String,
    settings: FunnelSettings,
    feedback: Option<Feedback>,
}

struct Question<'a> {
    q: &'a LocomoQuestion,
    vector: &'a [f32],
    lexical: LexicalQuery,
}

/// What one question got.
struct Got {
    ids: Vec<String>,
    block_tokens: usize,
}

struct Bench {
    index: MemoryIndex,
    templates: Templates,
    release: String,
}

impl Bench {
    /// An indexed record's body: the eval's index caches every one.
    fn body(&self, item: &IndexedRecord) -> Arc<Record> {
        let head = &item.head;
        self.index.bodies().get(head.tenant(), head.id(), head.revision).expect("the eval caches every body")
    }

    /// The funnel for one question, then the block rendered, trimmed to `block_limit` tokens.
    fn ask(
        &self,
        tenant: &str,
        caller: &Caller,
        text: &str,
        vector: &[f32],
        lexical: &LexicalQuery,
        variant: &Variant,
        block_limit: Option<usize>,
    ) -> Result<Got, BoxError> {
        let tenant = self.index.tenant(tenant).ok_or("tenant not loaded")?;
        let idx = tenant.read().map_err(|_| "poisoned")?;
        let settings = &variant.settings;
        let mut records = run_funnel(&idx, caller, text, vector, lexical, settings);
        if let Some(fb) = variant.feedback {
            let top: Vec<&IndexedRecord> = records.iter().take(fb.docs).map(|r| r.as_ref()).collect();
            let top_vectors: Vec<Arc<[f32]>> = top
                .iter()
                .filter_map(|r| idx.slot_of(r.head.id()).and_then(|slot| idx.vector(slot)))
                .collect();
            let top_vectors: Vec<&[f32]> = top_vectors.iter().map(|v| &**v).collect();
            let top_bodies: Vec<Arc<Record>> = top.iter().map(|r| self.body(r)).collect();
            let top_bodies: Vec<&Record> = top_bodies.iter().map(|r| &**r).collect();
            let expanded_vector = feedback::expand_vector(vector, &top_vectors, fb.vector_weight);
            let expanded_words =
                feedback::expand_words(analyzer(), &idx.lexical, lexical, &top_bodies, fb.terms);
            let v = expanded_vector.as_deref().unwrap_or(vector);
            records = run_funnel(&idx, caller, text, v, &expanded_words, settings);
        }
        let mut items: Vec<RenderItem> =
            records.iter().map(|r| RenderItem::of(&self.body(r)).into_owned()).collect();
        let mut block_tokens = self.block_tokens(&items)?;
        if let Some(limit) = block_limit {
            while block_tokens > limit && !items.is_empty() {
                items.pop();
                block_tokens = self.block_tokens(&items)?;
            }
        }
        Ok(Got { ids: items.into_iter().map(|i| i.id.into_owned()).collect(), block_tokens })
    }

    fn block_tokens(&self, items: &[RenderItem]) -> Result<usize, BoxError> {
        if items.is_empty() {
            return Ok(0);
        }
        let block = self.templates.render(&self.release, items)?;
        Ok(tiktoken_rs::cl100k_base_singleton().encode_ordinary(&block).len())
    }

    /// Tokens of the block's frame: the rendered block of one record minus that record's line.
    fn overhead(&self) -> Result<usize, BoxError> {
        let item = RenderItem {
            id: "x".into(),
            record_type: "fact".into(),
            priority: 3,
            updated_at: format_ms(0),
            content: std::borrow::Cow::Owned(json!({"statement": "x"})),
            stub: None,
            written_by: None,
        };
        let line = memgate::inject::compact_line(&item);
        let line_tokens = tiktoken_rs::cl100k_base_singleton().encode_ordinary(&line).len();
        Ok(self.block_tokens(&[item])?.saturating_sub(line_tokens))
    }
}

fn run_funnel(
    idx: &TenantIndex,
    caller: &Caller,
    text: &str,
    vector: &[f32],
    lexical: &LexicalQuery,
    settings: &FunnelSettings,
) -> Vec<Arc<IndexedRecord>> {
    let hybrid = match settings.retrieval {
        Retrieval::Hybrid { lexical_weight, min_lexical } => {
            Some(Hybrid { query: lexical, lexical_weight, min_lexical })
        }
        Retrieval::Dense => None,
    };
    let query = SemanticQuery {
        text,
        vector: Some(vector),
        threshold: settings.threshold,
        probes: settings.probes,
        hybrid,
        lift: memgate::funnel::semantic::Lift::NONE,
    };
    let out = funnel::run(idx, caller, &query, settings, now_ms(), Detail::Off);
    out.packed.injected.into_iter().map(|c| c.item).collect()
}

fn parse_list<T: std::str::FromStr>(text: &str) -> Result<Vec<T>, BoxError> {
    text.split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| s.trim().parse::<T>().map_err(|_| format!("`{s}` is not a number").into()))
        .collect()
}

/// Recall over LoCoMo questions of categories 1–4 of the given conversations, with the block
/// limited to `block` tokens (the record budget set to what it holds).
#[derive(Default, Clone)]
struct LocomoFigures {
    questions: usize,
    recall: f64,
    records: f64,
    block_tokens: f64,
    block_tokens_max: usize,
    adversarial_records: f64,
}

fn locomo(
    bench: &Bench,
    questions: &[Question<'_>],
    split: &[&str],
    variant: &Variant,
    block: Option<usize>,
) -> Result<LocomoFigures, BoxError> {
    let overhead = bench.overhead()?;
    let mut v = variant.clone();
    if let Some(block) = block {
        v.settings.budget_tokens = block.saturating_sub(overhead);
    }
    let (mut recall, mut n, mut records, mut tokens, mut max) = (0.0, 0usize, 0usize, 0usize, 0usize);
    let (mut adv, mut adv_records) = (0usize, 0usize);
    for question in questions.iter().filter(|q| split.contains(&q.q.tenant.as_str())) {
        let caller = Caller::new(&question.q.tenant, []);
        let got = bench.ask(
            &question.q.tenant,
            &caller,
            &question.q.text,
            question.vector,
            &question.lexical,
            &v,
            block,
        )?;
        if question.q.category == 5 {
            adv += 1;
            adv_records += got.ids.len();
            continue;
        }
        let evidence = &question.q.evidence;
        let found = evidence.iter().filter(|e| got.ids.contains(*e)).count();
        recall += found as f64 / evidence.len() as f64;
        n += 1;
        records += got.ids.len();
        tokens += got.block_tokens;
        max = max.max(got.block_tokens);
    }
    Ok(LocomoFigures {
        questions: n,
        recall: recall / n.max(1) as f64,
        records: records as f64 / n.max(1) as f64,
        block_tokens: tokens as f64 / n.max(1) as f64,
        block_tokens_max: max,
        adversarial_records: adv_records as f64 / adv.max(1) as f64,
    })
}

struct SupportQuestion {
    text: String,
    language: String,
    wanted: Vec<String>,
    vector: Vec<f32>,
    lexical: LexicalQuery,
}

#[derive(Default)]
struct SupportFigures {
    wanted: usize,
    found: usize,
    injected: usize,
    violations: usize,
    tokens: f64,
    rows: Vec<Value>,
}

impl SupportFigures {
    fn recall(&self) -> f64 {
        self.found as f64 / self.wanted.max(1) as f64
    }

    fn precision(&self) -> f64 {
        if self.injected == 0 { 1.0 } else { self.found as f64 / self.injected as f64 }
    }
}

/// Ids the support caller must never get.
const FORBIDDEN: [&str; 3] = ["conv-desk-other-customer", "sop-refund-expired", "sop-refund-not-yet"];

fn support(
    bench: &Bench,
    questions: &[SupportQuestion],
    variant: &Variant,
) -> Result<SupportFigures, BoxError> {
    let mut caller = Caller::new(SUPPORT, ["team:support".to_owned(), "user:u-789".to_owned()]);
    caller.subject = Some("u-789".into());
    let mut figures = SupportFigures::default();
    let mut tokens = 0usize;
    for q in questions {
        let got = bench.ask(SUPPORT, &caller, &q.text, &q.vector, &q.lexical, variant, None)?;
        let found = q.wanted.iter().filter(|w| got.ids.contains(*w)).count();
        let violations =
            got.ids.iter().filter(|id| FORBIDDEN.contains(&id.as_str()) || id.starts_with("other-")).count();
        figures.wanted += q.wanted.len();
        figures.found += found;
        figures.injected += got.ids.len();
        figures.violations += violations;
        tokens += got.block_tokens;
        figures
            .rows
            .push(json!({"question": q.text, "language": q.language, "wanted": q.wanted, "got": got.ids}));
    }
    figures.tokens = tokens as f64 / questions.len().max(1) as f64;
    Ok(figures)
}

async fn run(args: Args) -> Result<(), BoxError> {
    let machine_before = common::machine();
    let config = Config::load(&ConfigFlags::default(), |_| None)?;
    let templates = Templates::builtin_with(None)?;
    let releases = memgate::rollout::release::load_releases(&config, &templates)?;
    let release_name = args.release.clone().unwrap_or_else(|| DEFAULT_RELEASE.to_owned());
    let release = releases.get(&release_name).ok_or_else(|| format!("no release `{release_name}`"))?;
    let blocks: Vec<usize> = parse_list(&args.blocks)?;

    let embed_config = common::embed_config(args.threads, 8192);
    let embedder = tokio::task::spawn_blocking(move || Embedder::load(&embed_config)).await??;
    let cache = Some(args.cache.as_path());

    // LoCoMo.
    let (records, locomo_questions) = load_locomo(&args.data, None)?;
    let passages: Vec<String> = records.iter().map(passage_text).collect();
    let vectors = cached_vectors(&embedder, cache, "locomo-passages", &passages, false).await?;
    let texts: Vec<String> = locomo_questions.iter().map(|q| q.text.clone()).collect();
    let query_vectors = cached_vectors(&embedder, cache, "locomo-queries", &texts, true).await?;
    let mut items: Vec<IndexedRecord> = records
        .iter()
        .cloned()
        .zip(&vectors)
        .map(|(r, v)| IndexedRecord::new(r, Some(Arc::from(v.as_slice()))))
        .collect();

    // The support set, and what its caller must never see.
    let (support_records, support_questions_raw) = support_set()?;
    let support_passages: Vec<String> = support_records.iter().map(passage_text).collect();
    let support_vectors =
        cached_vectors(&embedder, cache, "support-passages", &support_passages, false).await?;
    for (record, vector) in support_records.iter().zip(&support_vectors) {
        items.push(IndexedRecord::new(record.clone(), Some(Arc::from(vector.as_slice()))));
    }
    let sq_texts: Vec<String> = support_questions_raw.iter().map(|q| q.0.clone()).collect();
    let sq_vectors = cached_vectors(&embedder, cache, "support-queries", &sq_texts, true).await?;
    let support_questions: Vec<SupportQuestion> = support_questions_raw
        .into_iter()
        .zip(sq_vectors)
        .map(|((text, language, wanted), vector)| SupportQuestion {
            lexical: LexicalQuery::new(analyzer(), &text),
            text,
            language,
            wanted,
            vector,
        })
        .collect();

    let index = MemoryIndex::with_body_cache(u64::MAX);
    index.load(items);
    let bench = Bench { index, templates, release: release_name.clone() };

    // Questions whose evidence names turns of their conversation (a few labels name none).
    let mut skipped = 0usize;
    let mut questions: Vec<Question<'_>> = Vec::new();
    for (q, v) in locomo_questions.iter().zip(&query_vectors) {
        let tenant = bench.index.tenant(&q.tenant).ok_or("conversation not loaded")?;
        let known = q.evidence.iter().all(|e| tenant.read().map(|i| i.get(e).is_some()).unwrap_or(false));
        if q.category != 5 && (q.evidence.is_empty() || !known) {
            skipped += 1;
            continue;
        }
        questions.push(Question { q, vector: v, lexical: LexicalQuery::new(analyzer(), &q.text) });
    }

    let shipped = Variant {
        name: format!("{release_name} as shipped"),
        settings: release.funnel.clone(),
        feedback: None,
    };
    let mut ablations = ablations(&shipped);
    // The release it follows, for reference.
    for (name, other) in &releases {
        if name != &release_name && (name == "v3" || name == "v1") {
            ablations.push(Variant {
                name: format!("{name} as shipped"),
                settings: other.funnel.clone(),
                feedback: None,
            });
        }
    }

    // Held-out figures: the release at each block size, and each ranking signal beside it.
    let mut held_out = Vec::new();
    for variant in std::iter::once(&shipped).chain(&ablations) {
        let mut at = Vec::new();
        for block in &blocks {
            let f = locomo(&bench, &questions, &HELD_OUT, variant, Some(*block))?;
            at.push(
                json!({"block": block, "questions": f.questions, "recall": f.recall, "records": f.records,
                "block_tokens_mean": f.block_tokens, "block_tokens_max": f.block_tokens_max}),
            );
        }
        let own = locomo(&bench, &questions, &HELD_OUT, variant, None)?;
        let tune = locomo(&bench, &questions, &TUNE, variant, Some(1000))?;
        let s = support(&bench, &support_questions, variant)?;
        held_out.push(json!({
            "variant": variant.name,
            "held_out": at,
            "held_out_own_budget": {"recall": own.recall, "records": own.records, "block_tokens_mean": own.block_tokens,
                "block_tokens_max": own.block_tokens_max, "adversarial_records": own.adversarial_records},
            "tune_recall_at_1000": tune.recall,
            "support": {"recall": s.recall(), "precision": s.precision(), "found": s.found, "wanted": s.wanted,
                "injected": s.injected, "violations": s.violations, "block_tokens_mean": s.tokens},
        }));
    }
    let shipped_support = support(&bench, &support_questions, &shipped)?;

    let sweep =
        if args.sweep { sweep(&bench, &questions, &support_questions, &shipped)? } else { Value::Null };
    let latency = query_step(&bench, &questions, &shipped, args.latency_questions).await?;

    let report = json!({
        "bench": "retrieval_eval",
        "release": release_name,
        "settings": {
            "threshold": release.funnel.threshold,
            "retrieval": format!("{:?}", release.funnel.retrieval),
            "budget_tokens": release.funnel.budget_tokens,
            "max_items": release.funnel.max_items,
            "cut": format!("{:?}", release.funnel.cut),
            "standout": release.funnel.standout.map(|s| json!({"z": s.z, "floor": s.floor})),
            "subject_boost": release.funnel.subject_boost,
            "neighbour_weight": release.funnel.neighbour_weight,
            "block_overhead_tokens": bench.overhead()?,
        },
        "model_id": embedder.model_id(),
        "tune": TUNE, "held_out_conversations": HELD_OUT,
        "locomo_questions_skipped": skipped,
        "variants": held_out,
        "support_rows": shipped_support.rows,
        "sweep": sweep,
        "query_step": latency,
        "funnel_timeout_ms": config.memory.funnel_timeout.as_millis() as u64,
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

/// The release with one ranking signal changed at a time.
fn ablations(shipped: &Variant) -> Vec<Variant> {
    let with = |name: &str, f: &dyn Fn(&mut Variant)| {
        let mut v = shipped.clone();
        v.name = name.to_owned();
        f(&mut v);
        v
    };
    vec![
        with("without the standout rule", &|v| v.settings.standout = None),
        with("without the subject boost", &|v| v.settings.subject_boost = 0.0),
        with("without neighbours", &|v| v.settings.neighbour_weight = 0.0),
        with("lexical weight 1.0", &|v| {
            if let Retrieval::Hybrid { min_lexical, .. } = v.settings.retrieval {
                v.settings.retrieval = Retrieval::Hybrid { lexical_weight: 1.0, min_lexical };
            }
        }),
        with("dense ranking only", &|v| v.settings.retrieval = Retrieval::Dense),
        with("+ feedback: vector (3 docs, 0.5)", &|v| {
            v.feedback = Some(Feedback { docs: 3, vector_weight: 0.5, terms: 0 })
        }),
        with("+ feedback: words (3 docs, 5 terms)", &|v| {
            v.feedback = Some(Feedback { docs: 3, vector_weight: 0.0, terms: 5 })
        }),
    ]
}

/// The calibration grid: tuning conversations and the support set only.
fn sweep(
    bench: &Bench,
    questions: &[Question<'_>],
    support_questions: &[SupportQuestion],
    shipped: &Variant,
) -> Result<Value, BoxError> {
    let mut rows = Vec::new();
    let mut combos: Vec<Variant> = Vec::new();
    for standout in [None, Some(0.8), Some(0.9), Some(1.0), Some(1.1), Some(1.2), Some(1.5)] {
        for boost in [0.0, 0.05, 0.1, 0.15] {
            let mut v = shipped.clone();
            v.settings.standout = standout.map(|z| Standout { z, floor: 0.10 });
            v.settings.subject_boost = boost;
            v.name = format!("standout {standout:?} boost {boost}");
            combos.push(v);
        }
    }
    for floor in [0.05f32, 0.15, 0.19] {
        let mut v = shipped.clone();
        if let Some(standout) = &mut v.settings.standout {
            standout.floor = floor;
        }
        v.name = format!("standout floor {floor}");
        combos.push(v);
    }
    for weight in [0.25f32, 0.75, 1.0] {
        let mut v = shipped.clone();
        v.settings.neighbour_weight = weight;
        v.name = format!("neighbour weight {weight}");
        combos.push(v);
    }
    for lexical in [0.5f32, 1.0, 2.0] {
        let mut v = shipped.clone();
        if let Retrieval::Hybrid { min_lexical, .. } = v.settings.retrieval {
            v.settings.retrieval = Retrieval::Hybrid { lexical_weight: lexical, min_lexical };
        }
        v.name = format!("lexical weight {lexical}");
        combos.push(v);
    }
    for relative in [0.5f32, 0.6] {
        let mut v = shipped.clone();
        v.settings.cut = Cut { relative: Some(relative), ..Cut::OFF };
        v.name = format!("+ relative cut {relative}");
        combos.push(v);
    }
    for v in &combos {
        let s = support(bench, support_questions, v)?;
        let t = locomo(bench, questions, &TUNE, v, Some(1000))?;
        let t500 = locomo(bench, questions, &TUNE, v, Some(500))?;
        rows.push(json!({"variant": v.name, "tune_recall_500": t500.recall, "tune_recall_1000": t.recall,
                    "tune_records_1000": t.records, "support_recall": s.recall(), "support_precision": s.precision(),
                    "support_injected": s.injected, "violations": s.violations}));
        eprintln!("sweep {}", rows.last().map(Value::to_string).unwrap_or_default());
    }
    // The budget curve of the shipped settings on the tuning conversations.
    let mut curve = Vec::new();
    for block in (3..=20).map(|h| h * 100) {
        let f = locomo(bench, questions, &TUNE, shipped, Some(block))?;
        curve.push(json!({"block": block, "recall": f.recall, "records": f.records, "block_tokens_mean": f.block_tokens}));
    }
    // Where another 100 tokens stop adding a point of recall: the default block's size.
    let knee = curve
        .windows(2)
        .find(|w| w[1]["recall"].as_f64().unwrap_or(0.0) - w[0]["recall"].as_f64().unwrap_or(0.0) < 0.01)
        .map(|w| w[0]["block"].clone());
    Ok(json!({"grid": rows, "budget_curve_tune": curve, "knee_block": knee}))
}

/// A new question's query step: embedding (one ONNX thread, no cache), word analysis, funnel.
async fn query_step(
    bench: &Bench,
    questions: &[Question<'_>],
    shipped: &Variant,
    count: usize,
) -> Result<Value, BoxError> {
    if count == 0 {
        return Ok(Value::Null);
    }
    let config = common::embed_config(1, 0);
    let embedder = tokio::task::spawn_blocking(move || Embedder::load(&config)).await??;
    embedder.embed_query("warm up").await?;
    let held: Vec<&Question<'_>> =
        questions.iter().filter(|q| HELD_OUT.contains(&q.q.tenant.as_str())).collect();
    let (mut total, mut embed, mut rest) = (Vec::new(), Vec::new(), Vec::new());
    for question in held.iter().step_by((held.len() / count.max(1)).max(1)).take(count) {
        let caller = Caller::new(&question.q.tenant, []);
        let started = Instant::now();
        let vector = embedder.embed_query(&question.q.text).await?;
        let embedded = started.elapsed();
        let lexical = LexicalQuery::new(analyzer(), &question.q.text);
        let tenant = bench.index.tenant(&question.q.tenant).ok_or("tenant not loaded")?;
        {
            let idx = tenant.read().map_err(|_| "poisoned")?;
            std::hint::black_box(run_funnel(
                &idx,
                &caller,
                &question.q.text,
                &vector,
                &lexical,
                &shipped.settings,
            ));
        }
        let all = started.elapsed();
        total.push(all);
        embed.push(embedded);
        rest.push(all.saturating_sub(embedded));
    }
    let ms = |v: &[Duration]| Summary::of(v).json_ms();
    Ok(json!({"questions": total.len(), "onnx_threads": 1, "total": ms(&total), "embedding": ms(&embed),
        "words_and_funnel": ms(&rest), "load": common::load_line()}))
}

/// The support records with the ones its caller must never get, and the 17 questions.
#[allow(clippy::type_complexity)]
fn support_set() -> Result<(Vec<Record>, Vec<(String, String, Vec<String>)>), BoxError> {
    let raw: Value = serde_json::from_str(&std::fs::read_to_string("tests/data/support_records.json")?)?;
    let mut records = Vec::new();
    for (i, r) in raw.as_array().ok_or("support_records.json is not a list")?.iter().enumerate() {
        let mut record =
            record_fact(SUPPORT, r["id"].as_str().unwrap_or_default(), r["content"].clone(), i as i64);
        record.record_type = r["type"].as_str().unwrap_or("fact").to_owned();
        record.scope = r["scope"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect();
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
    // The same records in another tenant: a caller of `support` must never get them.
    let copies: Vec<Record> = records
        .iter()
        .map(|r| Record { tenant: OTHER_TENANT.into(), id: format!("other-{}", r.id), ..r.clone() })
        .collect();
    let by_id = |id: &str| records.iter().find(|r| r.id == id).cloned().ok_or(format!("no record {id}"));
    let now = now_ms();
    let mut other_customer = by_id("conv-desk-delay")?;
    other_customer.id = FORBIDDEN[0].into();
    other_customer.scope = vec!["user:u-999".into()];
    let mut expired = by_id("sop-refund-zh")?;
    expired.id = FORBIDDEN[1].into();
    expired.valid_until_ms = now - 86_400_000;
    let mut not_yet = by_id("sop-password-ru")?;
    not_yet.id = FORBIDDEN[2].into();
    not_yet.valid_from_ms = now + 30 * 86_400_000;
    records.extend(copies);
    records.extend([other_customer, expired, not_yet]);

    let raw: Value = serde_json::from_str(&std::fs::read_to_string("tests/data/support_questions.json")?)?;
    let questions = raw
        .as_array()
        .ok_or("support_questions.json is not a list")?
        .iter()
        .map(|q| {
            (
                q["question"].as_str().unwrap_or_default().to_owned(),
                q["language"].as_str().unwrap_or_default().to_owned(),
                q["wanted"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect(),
            )
        })
        .collect();
    Ok((records, questions))
}

fn print_report(r: &Value) {
    let f = |v: &Value| v.as_f64().unwrap_or(0.0);
    println!(
        "release {} ({}), model {}; tuned on {}, reported on {}; {} LoCoMo questions skipped (evidence names no turn)",
        common::text(&r["release"]),
        r["settings"],
        common::text(&r["model_id"]),
        r["tune"],
        r["held_out_conversations"],
        r["locomo_questions_skipped"]
    );
    println!();
    println!(
        "{:<38} {:>22} {:>22} {:>22} {:>24} {:>9} {:>24}",
        "variant",
        "held-out R@500 (rec)",
        "R@1000 (rec)",
        "R@2000 (rec)",
        "own budget R (tok m/max)",
        "tune@1000",
        "support R / P (inj, viol)"
    );
    for v in r["variants"].as_array().into_iter().flatten() {
        let at = |i: usize| {
            let a = &v["held_out"][i];
            format!("{:.3} ({:.1})", f(&a["recall"]), f(&a["records"]))
        };
        let own = &v["held_out_own_budget"];
        let s = &v["support"];
        println!(
            "{:<38} {:>22} {:>22} {:>22} {:>24} {:>9.3} {:>24}",
            common::text(&v["variant"]),
            at(0),
            at(1),
            at(2),
            format!(
                "{:.3} ({:.0}/{})",
                f(&own["recall"]),
                f(&own["block_tokens_mean"]),
                own["block_tokens_max"]
            ),
            f(&v["tune_recall_at_1000"]),
            format!(
                "{:.3} / {:.3} ({}, {})",
                f(&s["recall"]),
                f(&s["precision"]),
                s["injected"],
                s["violations"]
            ),
        );
    }
    println!();
    println!("support set, release as shipped:");
    for row in r["support_rows"].as_array().into_iter().flatten() {
        println!(
            "  [{}] {} wants {} got {}",
            common::text(&row["language"]),
            common::text(&row["question"]),
            row["wanted"],
            row["got"]
        );
    }
    if let Some(grid) = r["sweep"]["grid"].as_array() {
        println!();
        println!("calibration (tuning conversations, support set):");
        println!(
            "{:<34} {:>9} {:>10} {:>8} {:>9} {:>9} {:>5}",
            "variant", "tune@500", "tune@1000", "rec", "sup R", "sup P", "viol"
        );
        for row in grid {
            println!(
                "{:<34} {:>9.3} {:>10.3} {:>8.1} {:>9.3} {:>9.3} {:>5}",
                common::text(&row["variant"]),
                f(&row["tune_recall_500"]),
                f(&row["tune_recall_1000"]),
                f(&row["tune_records_1000"]),
                f(&row["support_recall"]),
                f(&row["support_precision"]),
                row["violations"]
            );
        }
        println!("budget curve (tuning conversations): {}", r["sweep"]["budget_curve_tune"]);
        println!(
            "block past which 100 more tokens add under a point of recall: {}",
            r["sweep"]["knee_block"]
        );
    }
    println!();
    println!("query step of a new question: {}", r["query_step"]);
    println!("funnel budget (memory.funnel_timeout_ms): {} ms", r["funnel_timeout_ms"]);
    println!("machine before: {}", r["machine_before"]);
    println!("machine after:  {}", r["machine_after"]);
}
