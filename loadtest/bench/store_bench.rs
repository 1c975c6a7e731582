//! `store_bench`: write costs on SQLite (a temporary file) and on PostgreSQL (a fresh database
//! `memgate_bench_<random>`, dropped at the end).
//!
//! Per backend, through the production code:
//! - `MemoryService::import` of N records as JSON Lines (checks, the per-line "already there?"
//!   lookups, one transaction): records/s until the call returns, and then the background
//!   embedding that import leaves behind (`spawn_backfill`: embed + `put_embedding` per record),
//!   watched for `--backfill-seconds` (its rate) and then stopped, so it does not disturb what
//!   follows;
//! - single-record writes, one at a time: `MemoryService::create` (checks, embedding the record,
//!   near-duplicate search, store transaction, storing the embedding, index update), and the
//!   store alone: `Store::create_record` (one transaction: repeat and topic lookups, insert,
//!   scopes, changelog) and `Store::put_embedding`.
//!
//! The embedding model is the production one (multilingual-e5-small, 1 ONNX thread by default,
//! as production); run from the repository root so `.assets/` is found.
//!
//! Run: `cargo run --release --example store_bench -- [--backends sqlite,postgres] [--json]`.
#![allow(clippy::print_stdout)]

#[path = "common.rs"]
mod common;

use clap::Parser;
use common::{BoxError, Rng, Summary, TempDir, sentence};
use memgate::clock::now_ms;
use memgate::embed::Embedder;
use memgate::index::IndexedRecord;
use memgate::memory::MemoryService;
use memgate::memory::checks::envelope::{self, Rules};
use memgate::memory::checks::schemas::SchemaSet;
use memgate::store::Store;
use memgate::store::memories::Created;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Instant;

const TENANT: &str = "bench";
const MAX_CONTENT_BYTES: usize = 64 * 1024;

/// Import throughput and single-record write latency on SQLite and PostgreSQL.
#[derive(Parser, Debug)]
#[command(name = "store_bench")]
struct Args {
    /// Backends to measure, comma-separated: sqlite, postgres.
    #[arg(long, default_value = "sqlite,postgres")]
    backends: String,
    /// PostgreSQL server to create the throw-away database on (trust auth or a password in it).
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/postgres")]
    pg_url: String,
    /// Records in the import.
    #[arg(long, default_value_t = 5000)]
    import_records: usize,
    /// Single-record writes per measurement.
    #[arg(long, default_value_t = 300)]
    creates: usize,
    /// ONNX Runtime threads for the embedding model (production default: 1).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// How long to watch the background embedding that the import starts before stopping it
    /// (0: let it finish; 5,000 records take several minutes on 2 cores).
    #[arg(long, default_value_t = 30.0)]
    backfill_seconds: f64,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

fn main() -> Result<(), BoxError> {
    common::export_ort_if_unset();
    let args = Args::parse();
    let machine_before = common::machine();
    // Loaded outside any runtime (it blocks); the embedding thread serves every runtime below.
    let embedder = Embedder::load(&common::embed_config(args.threads, 4096))?;
    let schemas = Arc::new(SchemaSet::load(None)?);
    let mut results = Vec::new();
    for backend in args.backends.split(',').map(str::trim).filter(|b| !b.is_empty()) {
        let result = match backend {
            "sqlite" => {
                let dir = TempDir::new("memgate-store-bench")?;
                let url = format!("sqlite://{}", dir.path().join("bench.db").display());
                bench_backend(
                    "sqlite (temp file, WAL, synchronous=NORMAL)",
                    &url,
                    &args,
                    &embedder,
                    &schemas,
                )?
            }
            "postgres" => common::with_scratch_postgres(&args.pg_url, |url| {
                bench_backend("postgres (local, default settings)", url, &args, &embedder, &schemas)
            })?,
            other => return Err(format!("unknown backend `{other}`: use sqlite or postgres").into()),
        };
        if !args.json {
            eprintln!("done: {backend} ({})", common::load_line());
        }
        results.push(result);
    }
    let report = json!({
        "bench": "store_bench",
        "model_id": embedder.model_id(),
        "embedding_threads": args.threads,
        "import_records": args.import_records,
        "creates": args.creates,
        "backends": results,
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

fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread().enable_all().build()
}

/// Two phases, each on its own runtime: the import (whose background embedding is watched for
/// `--backfill-seconds` and then stopped by shutting that runtime down, so it cannot disturb the
/// next phase), then the single-record writes.
fn bench_backend(
    label: &str,
    url: &str,
    args: &Args,
    embedder: &Embedder,
    schemas: &Arc<SchemaSet>,
) -> Result<Value, BoxError> {
    let phase = runtime()?;
    let imported = phase.block_on(import_phase(url, args, embedder, schemas));
    phase.shutdown_background();
    let (import, backfill) = imported?;
    let phase = runtime()?;
    let writes = phase.block_on(write_phase(url, args, embedder, schemas));
    phase.shutdown_background();
    let mut value = writes?;
    value["backend"] = json!(label);
    value["import"] = import;
    value["backfill_embedding"] = backfill;
    Ok(value)
}

fn service(store: &Store, embedder: &Embedder, schemas: &Arc<SchemaSet>) -> MemoryService {
    MemoryService::new(
        store.clone(),
        schemas.clone(),
        MAX_CONTENT_BYTES,
        embedder.clone(),
        memgate::config::DEFAULT_DEDUPE,
    )
}

async fn import_phase(
    url: &str,
    args: &Args,
    embedder: &Embedder,
    schemas: &Arc<SchemaSet>,
) -> Result<(Value, Value), BoxError> {
    let store = Store::connect(url).await?;
    store.migrate().await?;
    let service = service(&store, embedder, schemas);
    service.load_index().await?;
    let mut rng = Rng::new(11);
    let body: String =
        (0..args.import_records).map(|i| envelope_json(&mut rng, i, "imp").to_string() + "\n").collect();
    let started = Instant::now();
    let report = service.import(TENANT, &body, false, "bench").await?;
    let import_time = started.elapsed();
    if !report.applied || report.counts.new != args.import_records {
        return Err(format!(
            "the import was not applied as expected: {} new, {} existing, {} invalid",
            report.counts.new, report.counts.existing, report.counts.invalid
        )
        .into());
    }
    let import = json!({
        "records": args.import_records,
        "seconds": import_time.as_secs_f64(),
        "records_per_s": args.import_records as f64 / import_time.as_secs_f64(),
    });
    // The background embedding import started: embed + put_embedding per record, 32 at a time,
    // so progress moves in steps of 32. The rate is taken at the last step seen (polled every
    // 250 ms), not at the end of the window, which would add a partial step's time.
    let started = Instant::now();
    service.tasks().close();
    let window = std::time::Duration::from_secs_f64(args.backfill_seconds);
    let (mut embedded, mut at) = (0usize, std::time::Duration::ZERO);
    let finished = loop {
        let done =
            tokio::time::timeout(std::time::Duration::from_millis(250), service.tasks().wait()).await.is_ok();
        let now_embedded =
            args.import_records - service.index().missing_vectors().len().min(args.import_records);
        if now_embedded != embedded {
            (embedded, at) = (now_embedded, started.elapsed());
        }
        if done {
            break true;
        }
        if args.backfill_seconds > 0.0 && started.elapsed() >= window {
            break false;
        }
    };
    let backfill = json!({
        "watched_seconds": started.elapsed().as_secs_f64(),
        "finished": finished,
        "records_embedded": embedded,
        "records_per_s": if at.is_zero() { 0.0 } else { embedded as f64 / at.as_secs_f64() },
    });
    Ok((import, backfill))
}

async fn write_phase(
    url: &str,
    args: &Args,
    embedder: &Embedder,
    schemas: &Arc<SchemaSet>,
) -> Result<Value, BoxError> {
    let store = Store::connect(url).await?;
    let service = service(&store, embedder, schemas);
    // The index as startup builds it, without `load_index`'s background embedding of the
    // imported records still missing one (that would compete with the writes measured here).
    let mut vectors = store.embeddings_of_model(embedder.model_id()).await?;
    let items: Vec<IndexedRecord> = store
        .all_records()
        .await?
        .into_iter()
        .map(|record| {
            let vector = vectors.remove(&(record.tenant.clone(), record.id.clone())).map(Arc::from);
            IndexedRecord::new(record, vector)
        })
        .collect();
    let indexed = items.len();
    service.index().load(items);
    let mut rng = Rng::new(12);

    // MemoryService::create, embedding included (two untimed first: the model's run that the
    // stopped import may have left in hand, and warm caches).
    for i in 0..2 {
        service.create(TENANT, &envelope_json(&mut rng, i, "warm"), "bench").await?;
    }
    let mut service_times = Vec::with_capacity(args.creates);
    let mut outcomes = (0usize, 0usize, 0usize);
    for i in 0..args.creates {
        let input = envelope_json(&mut rng, i, "svc");
        let started = Instant::now();
        let created = service.create(TENANT, &input, "bench").await?;
        service_times.push(started.elapsed());
        match created {
            Created::New(_) | Created::Superseded(_) => outcomes.0 += 1,
            Created::Deduplicated { .. } => outcomes.1 += 1,
            Created::ExactRepeat(_) => outcomes.2 += 1,
        }
    }

    // The store alone: create_record, then put_embedding with a stored-size vector.
    let mut store_times = Vec::with_capacity(args.creates);
    let mut embedding_times = Vec::with_capacity(args.creates);
    let vector: Vec<f32> = (0..embedder.dimensions()).map(|i| (i as f32 * 0.37).sin()).collect();
    for i in 0..args.creates {
        let input = envelope_json(&mut rng, i, "sto");
        let now = now_ms();
        let rules = Rules { schemas: schemas.as_ref(), max_content_bytes: MAX_CONTENT_BYTES, now_ms: now };
        let envelope =
            envelope::check(&input, &rules).map_err(|p| format!("invalid synthetic record: {p:?}"))?;
        let id = format!("mem-{}", uuid::Uuid::new_v4().simple());
        let started = Instant::now();
        let created = store.create_record(TENANT, &envelope, &id, "bench", now).await?;
        store_times.push(started.elapsed());
        let stored_id = match created {
            Created::New(r) | Created::Superseded(r) | Created::ExactRepeat(r) => r.id,
            Created::Deduplicated { record, .. } => record.id,
        };
        let started = Instant::now();
        store.put_embedding(TENANT, &stored_id, embedder.model_id(), &vector).await?;
        embedding_times.push(started.elapsed());
    }

    Ok(json!({
        "records_in_tenant_before_writes": indexed,
        "service_create": Summary::of(&service_times).json_ms(),
        "service_create_outcomes": {"new": outcomes.0, "deduplicated": outcomes.1, "exact_repeat": outcomes.2},
        "store_create_memory": Summary::of(&store_times).json_ms(),
        "store_put_embedding": Summary::of(&embedding_times).json_ms(),
    }))
}

/// A valid record envelope of a few kinds and sizes; unique by `i` and `tag`.
fn envelope_json(rng: &mut Rng, i: usize, tag: &str) -> Value {
    let user = format!("u-{}", rng.below(2000));
    let scope = match rng.below(4) {
        0 => json!(["public"]),
        1 => json!([format!("team:{}", rng.pick(&["sales", "support", "billing"]))]),
        _ => json!([format!("user:{user}")]),
    };
    let mut record = match rng.below(10) {
        0..=4 => json!({
            "type": "fact",
            "content": {
                "statement": format!("{} (note {tag}-{i})", sentence(rng, 12, 60)),
                "subject": format!("customer {user}"),
                "source": "CRM_v4.2",
            },
        }),
        5..=6 => json!({
            "type": "preference",
            "content": {"topic": "delivery", "preference": format!("{} ({tag}-{i})", sentence(rng, 5, 20))},
        }),
        7..=8 => json!({
            "type": "customer_profile",
            "content": {
                "name": format!("Customer {user} {tag}-{i}"),
                "preferred_language": "en",
                "special_requests": (0..1 + rng.below(3)).map(|_| sentence(rng, 6, 20)).collect::<Vec<_>>(),
            },
        }),
        _ => json!({
            "type": "internal_sop",
            "content": {
                "title": format!("{} {tag}-{i}", sentence(rng, 3, 8)),
                "steps": (1..4 + rng.below(5)).map(|n| format!("{n}. {}", sentence(rng, 8, 25))).collect::<Vec<_>>().join("\n"),
            },
        }),
    };
    record["scope"] = scope;
    record["priority"] = json!(1 + rng.below(5));
    if rng.below(5) == 0 {
        record["key"] = json!(format!("{tag}:{user}:{i}"));
    }
    record["metadata"] = json!({"source": "store_bench"});
    record
}

fn print_tables(report: &Value) {
    println!(
        "writes through the production code; embedding model {} with {} ONNX thread(s)",
        report["model_id"].as_str().unwrap_or(""),
        report["embedding_threads"]
    );
    println!();
    println!(
        "{:<46} {:>10} {:>10} {:>12} {:>14}",
        "backend", "import n", "import s", "import rec/s", "backfill emb/s"
    );
    for b in report["backends"].as_array().into_iter().flatten() {
        println!(
            "{:<46} {:>10} {:>10.2} {:>12.0} {:>14}",
            b["backend"].as_str().unwrap_or(""),
            common::text(&b["import"]["records"]),
            b["import"]["seconds"].as_f64().unwrap_or(0.0),
            b["import"]["records_per_s"].as_f64().unwrap_or(0.0),
            b["backfill_embedding"]["records_per_s"].as_f64().map_or("-".into(), |r| format!("{r:.1}")),
        );
    }
    println!();
    println!("single-record writes, one at a time ({} each)", report["creates"]);
    println!(
        "{:<46} {:<34} {:>8} {:>8} {:>8} {:>8}",
        "backend", "operation", "p50 ms", "p99 ms", "max ms", "mean ms"
    );
    for b in report["backends"].as_array().into_iter().flatten() {
        for (op, key) in [
            ("MemoryService::create (with embedding)", "service_create"),
            ("Store::create_record", "store_create_memory"),
            ("Store::put_embedding", "store_put_embedding"),
        ] {
            let s = &b[key];
            println!(
                "{:<46} {:<34} {:>8.2} {:>8.2} {:>8.2} {:>8.2}",
                b["backend"].as_str().unwrap_or(""),
                op,
                s["p50_ms"].as_f64().unwrap_or(0.0),
                s["p99_ms"].as_f64().unwrap_or(0.0),
                s["max_ms"].as_f64().unwrap_or(0.0),
                s["mean_ms"].as_f64().unwrap_or(0.0),
            );
        }
        println!("{:<46} outcomes of create: {}", "", b["service_create_outcomes"]);
    }
    println!();
    println!("machine before: {}", report["machine_before"]);
    println!("machine after:  {}", report["machine_after"]);
}
