//! `embed_bench`: what a query embedding costs, alone and under concurrency.
//!
//! With the production model (multilingual-e5-small from `scripts/fetch-assets`) and the
//! production batching embedder, the query cache off and every text unique, for each ONNX Runtime
//! thread count asked for:
//! - one caller, one query at a time: p50/p99 of `embed_query`, for short questions and for
//!   longer messages;
//! - N concurrent callers (each awaiting its answer before sending the next): queries per second,
//!   p50/p99, and how many texts the embedding thread put into each model run;
//! - ingest: `--passages` unique short records through `embed_passages` in calls of
//!   `--passage-call` texts (as an import hands them over), records per second alone, then again
//!   while live queries arrive open-loop at `--query-rate` per second: records per second and
//!   the queries' latency (from their scheduled start) while passages are being embedded;
//! - the process's resident memory (VmRSS after loading, VmHWM at the end).
//!
//! Run from the repository root (it finds `.assets/`; `MEMGATE_MODEL_DIR` picks another model):
//! `cargo run --release --example embed_bench -- [--threads 1,auto] [--concurrency 8,32]
//! [--passages 3000] [--query-rate 20] [--phases queries,ingest] [--json]`.
// A benchmark's callers are plain tasks: nothing here outlives `main`.
#![allow(clippy::disallowed_methods)]
#![allow(clippy::print_stdout)]

#[path = "common.rs"]
mod common;

use clap::Parser;
use common::{BoxError, Summary};
use memgate::embed::Embedder;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// Query embedding latency and throughput with the batching embedder.
#[derive(Parser, Debug)]
#[command(name = "embed_bench")]
struct Args {
    /// ONNX Runtime intra-op thread counts to measure, comma-separated; `auto` is memgate's
    /// default (every core, at most 8).
    #[arg(long, default_value = "auto")]
    threads: String,
    /// Concurrent callers, comma-separated.
    #[arg(long, default_value = "8,32")]
    concurrency: String,
    /// Sequential queries per text length.
    #[arg(long, default_value_t = 200)]
    sequential: usize,
    /// Queries per concurrency phase (spread over the callers).
    #[arg(long, default_value_t = 640)]
    total: usize,
    /// Unique short records for the ingest phase (0 skips it).
    #[arg(long, default_value_t = 3000)]
    passages: usize,
    /// Records per `embed_passages` call in the ingest phase.
    #[arg(long, default_value_t = 256)]
    passage_call: usize,
    /// Live queries per second (open loop) while the ingest phase runs.
    #[arg(long, default_value_t = 20.0)]
    query_rate: f64,
    /// Which phases to run: `queries` (sequential and concurrent queries), `ingest`.
    #[arg(long, default_value = "queries,ingest")]
    phases: String,
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

async fn run(args: Args) -> Result<(), BoxError> {
    let threads: Vec<usize> = args
        .threads
        .split(',')
        .map(|t| match t.trim() {
            "auto" => Ok(memgate::embed::default_threads()),
            t => t.parse(),
        })
        .collect::<Result<_, _>>()?;
    let phases: Vec<&str> = args.phases.split(',').map(str::trim).collect();
    let concurrency: Vec<usize> =
        args.concurrency.split(',').map(|t| t.trim().parse()).collect::<Result<_, _>>()?;
    let machine_before = common::machine();
    let mut texts = Texts::default();
    let mut results = Vec::new();
    for &t in &threads {
        let config = common::embed_config(t, 0);
        let embedder = tokio::task::spawn_blocking(move || Embedder::load(&config)).await??;
        let rss_after_load = memory_kb("VmRSS");
        for _ in 0..20 {
            embedder.embed_query(&texts.short()).await?;
        }
        let mut sequential = Vec::new();
        let query_phases: &[(&str, bool)] =
            if phases.contains(&"queries") { &[("short", false), ("long", true)] } else { &[] };
        for &(label, long) in query_phases {
            let mut times = Vec::with_capacity(args.sequential);
            let mut chars = 0;
            for _ in 0..args.sequential {
                let text = if long { texts.long() } else { texts.short() };
                chars += text.chars().count();
                let started = Instant::now();
                embedder.embed_query(&text).await?;
                times.push(started.elapsed());
            }
            let summary = Summary::of(&times);
            sequential.push(json!({
                "texts": label,
                "mean_chars": chars as f64 / args.sequential.max(1) as f64,
                "latency": summary.json_ms(),
                "queries_per_s": 1.0 / summary.mean.as_secs_f64().max(1e-9),
            }));
            if !args.json {
                eprintln!("threads {t}: sequential {label} done ({})", common::load_line());
            }
        }
        let mut concurrent = Vec::new();
        let concurrency: &[usize] = if phases.contains(&"queries") { &concurrency } else { &[] };
        for &callers in concurrency {
            let per_caller = (args.total / callers).max(1);
            let work: Vec<Vec<String>> =
                (0..callers).map(|_| (0..per_caller).map(|_| texts.short()).collect()).collect();
            let before = embedder.stats();
            let started = Instant::now();
            let tasks: Vec<_> = work
                .into_iter()
                .map(|mine| {
                    let embedder = embedder.clone();
                    tokio::spawn(async move {
                        let mut times = Vec::with_capacity(mine.len());
                        for text in mine {
                            let t = Instant::now();
                            embedder.embed_query(&text).await?;
                            times.push(t.elapsed());
                        }
                        Ok::<Vec<Duration>, memgate::embed::EmbedError>(times)
                    })
                })
                .collect();
            let mut times = Vec::new();
            for task in tasks {
                times.extend(task.await??);
            }
            let elapsed = started.elapsed();
            let after = embedder.stats();
            let runs = after.runs - before.runs;
            concurrent.push(json!({
                "callers": callers,
                "queries": times.len(),
                "seconds": elapsed.as_secs_f64(),
                "queries_per_s": times.len() as f64 / elapsed.as_secs_f64(),
                "latency": Summary::of(&times).json_ms(),
                "texts_per_run": (after.texts - before.texts) as f64 / runs.max(1) as f64,
            }));
            if !args.json {
                eprintln!("threads {t}: {callers} callers done ({})", common::load_line());
            }
        }
        let ingest = if phases.contains(&"ingest") && args.passages > 0 {
            let ingest = ingest(&embedder, &mut texts, &args).await?;
            if !args.json {
                eprintln!("threads {t}: ingest done ({})", common::load_line());
            }
            ingest
        } else {
            Value::Null
        };
        results.push(json!({
            "threads": t,
            "model_id": embedder.model_id(),
            "dimensions": embedder.dimensions(),
            "rss_after_load_kb": rss_after_load,
            "hwm_kb": memory_kb("VmHWM"),
            "sequential": sequential,
            "concurrent": concurrent,
            "ingest": ingest,
        }));
    }
    let report = json!({
        "bench": "embed_bench",
        "cache": "off (cache_entries 0), every text unique",
        "max_batch": common::embed_config(1, 0).max_batch,
        "machine_before": machine_before,
        "machine_after": common::machine(),
        "runs": results,
    });
    if args.json {
        println!("{report}");
    } else {
        print_tables(&report);
    }
    Ok(())
}

/// A line of /proc/self/status, in kB (0 where there is none).
fn memory_kb(key: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':')?.trim().strip_suffix("kB")?.trim().parse().ok())
        .unwrap_or(0)
}

/// Passages alone, then passages with live queries arriving open-loop.
async fn ingest(embedder: &Embedder, texts: &mut Texts, args: &Args) -> Result<Value, BoxError> {
    let call = args.passage_call.max(1);
    let records: Vec<String> = (0..args.passages).map(|_| texts.record()).collect();
    let mean_chars = records.iter().map(|r| r.chars().count()).sum::<usize>() as f64 / records.len() as f64;
    let before = embedder.stats();
    let started = Instant::now();
    for chunk in records.chunks(call) {
        embedder.embed_passages(chunk).await?;
    }
    let alone = started.elapsed();
    let after = embedder.stats();
    let alone_runs = after.runs - before.runs;

    // Again with new records, while queries arrive at their scheduled times.
    let records: Vec<String> = (0..args.passages).map(|_| texts.record()).collect();
    let queries: Vec<String> =
        (0..(args.query_rate * alone.as_secs_f64() * 4.0) as usize + 16).map(|_| texts.short()).collect();
    let ingesting = {
        let embedder = embedder.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            for chunk in records.chunks(call) {
                embedder.embed_passages(chunk).await?;
            }
            Ok::<Duration, memgate::embed::EmbedError>(started.elapsed())
        })
    };
    let interval = Duration::from_secs_f64(1.0 / args.query_rate.max(0.001));
    let origin = Instant::now();
    let mut asked = Vec::new();
    for (i, query) in queries.into_iter().enumerate() {
        let due = origin + interval * i as u32;
        tokio::time::sleep_until(due.into()).await;
        if ingesting.is_finished() {
            break;
        }
        let embedder = embedder.clone();
        asked.push(tokio::spawn(async move { embedder.embed_query(&query).await.map(|_| due.elapsed()) }));
    }
    let with_queries = ingesting.await??;
    let mut latencies = Vec::new();
    for task in asked {
        latencies.push(task.await??);
    }
    let summary = Summary::of(&latencies);
    Ok(json!({
        "records": args.passages,
        "mean_chars": mean_chars,
        "per_call": call,
        "alone": {
            "seconds": alone.as_secs_f64(),
            "records_per_s": args.passages as f64 / alone.as_secs_f64(),
            "texts_per_run": (after.texts - before.texts) as f64 / alone_runs.max(1) as f64,
        },
        "with_queries": {
            "seconds": with_queries.as_secs_f64(),
            "records_per_s": args.passages as f64 / with_queries.as_secs_f64(),
            "query_rate": args.query_rate,
            "queries": latencies.len(),
            "query_latency": summary.json_ms(),
        },
    }))
}

/// Unique texts: support questions (short) and multi-sentence messages (long), in a few languages.
#[derive(Default)]
struct Texts {
    n: usize,
}

const SHORT: [&str; 6] = [
    "When will order ORD-{} ship to my new address?",
    "订单 {} 什么时候发货？我下周要出差。",
    "Когда придёт заказ {}? Я жду его уже неделю.",
    "How do I reset the password for account {}?",
    "Can I get a refund for invoice {} if the parcel arrived damaged?",
    "Is the premium plan for team {} billed monthly or yearly?",
];

const LONG: [&str; 3] = [
    "Hi, I ordered two pairs of running shoes last week (order {}), and the tracking page has said \
     'label created' for five days now. I need them before a race on the 20th. Could you check \
     with the warehouse whether the parcel actually left, and if it did not, switch it to express \
     shipping at no extra cost? Also, my billing address changed recently; please make sure the \
     invoice shows the new one.",
    "我们公司（客户编号 {}）上个月升级到了企业版，但发票上仍然显示的是基础版的价格。财务部门需要一张\
     正确的增值税专用发票用于报销，请帮忙重新开具，并确认下个季度的续费金额和付款方式是否有变化。",
    "Our team ({}) keeps getting logged out of the dashboard every few minutes since yesterday's \
     update. We already cleared cookies and tried two browsers. It happens to everyone on the \
     European accounts, not the US ones. Is this a known issue, and is there a workaround until \
     it is fixed? We have a client demo tomorrow morning.",
];

/// Short records, like conversation turns and notes (20–35 tokens with the passage prefix).
const RECORD: [&str; 6] = [
    "Customer {} prefers delivery on weekday mornings and asked us to call before the courier arrives.",
    "客户 {} 希望工作日上午送货，并要求快递员到达前先打电话。",
    "Клиент {} просит доставлять по будням до обеда и звонить перед приездом курьера.",
    "Order {} was split into two parcels; the second one ships from the Rotterdam warehouse next week.",
    "Caroline said on 8 May that she went to the LGBTQ support group {} and felt inspired by the stories.",
    "The refund for invoice {} was approved and will reach the original card within five working days.",
];

impl Texts {
    fn record(&mut self) -> String {
        self.n += 1;
        RECORD[self.n % RECORD.len()].replace("{}", &format!("{}", 100_000 + self.n))
    }

    fn short(&mut self) -> String {
        self.n += 1;
        SHORT[self.n % SHORT.len()].replace("{}", &format!("{}", 100_000 + self.n))
    }

    fn long(&mut self) -> String {
        self.n += 1;
        LONG[self.n % LONG.len()].replace("{}", &format!("{}", 100_000 + self.n))
    }
}

fn print_tables(report: &Value) {
    let empty = Vec::new();
    println!(
        "query embedding, {} (max_batch {})",
        report["cache"].as_str().unwrap_or(""),
        report["max_batch"]
    );
    println!(
        "{:>8} {:>8} {:>10} {:>9} {:>9} {:>9} {:>9}",
        "threads", "texts", "mean chars", "p50 ms", "p99 ms", "max ms", "q/s"
    );
    for run in report["runs"].as_array().unwrap_or(&empty) {
        for s in run["sequential"].as_array().unwrap_or(&empty) {
            println!(
                "{:>8} {:>8} {:>10.0} {:>9.2} {:>9.2} {:>9.2} {:>9.1}",
                common::text(&run["threads"]),
                s["texts"].as_str().unwrap_or(""),
                s["mean_chars"].as_f64().unwrap_or(0.0),
                s["latency"]["p50_ms"].as_f64().unwrap_or(0.0),
                s["latency"]["p99_ms"].as_f64().unwrap_or(0.0),
                s["latency"]["max_ms"].as_f64().unwrap_or(0.0),
                s["queries_per_s"].as_f64().unwrap_or(0.0),
            );
        }
    }
    println!();
    println!("concurrent callers, short unique texts");
    println!(
        "{:>8} {:>8} {:>8} {:>9} {:>9} {:>9} {:>11}",
        "threads", "callers", "queries", "q/s", "p50 ms", "p99 ms", "texts/run"
    );
    for run in report["runs"].as_array().unwrap_or(&empty) {
        for c in run["concurrent"].as_array().unwrap_or(&empty) {
            println!(
                "{:>8} {:>8} {:>8} {:>9.1} {:>9.2} {:>9.2} {:>11.2}",
                common::text(&run["threads"]),
                common::text(&c["callers"]),
                common::text(&c["queries"]),
                c["queries_per_s"].as_f64().unwrap_or(0.0),
                c["latency"]["p50_ms"].as_f64().unwrap_or(0.0),
                c["latency"]["p99_ms"].as_f64().unwrap_or(0.0),
                c["texts_per_run"].as_f64().unwrap_or(0.0),
            );
        }
    }
    println!();
    println!("ingest: unique short records through embed_passages, then again with live queries");
    println!(
        "{:>8} {:>8} {:>10} {:>11} {:>10} {:>12} {:>8} {:>9} {:>9} {:>9} {:>11} {:>10}",
        "threads",
        "records",
        "mean chars",
        "alone rec/s",
        "texts/run",
        "w/q rec/s",
        "q/s",
        "q p50 ms",
        "q p99 ms",
        "q max ms",
        "RSS load MB",
        "HWM MB"
    );
    for run in report["runs"].as_array().unwrap_or(&empty) {
        let i = &run["ingest"];
        if i.is_null() {
            continue;
        }
        let q = &i["with_queries"]["query_latency"];
        println!(
            "{:>8} {:>8} {:>10.0} {:>11.1} {:>10.1} {:>12.1} {:>8} {:>9.2} {:>9.2} {:>9.2} {:>11.0} {:>10.0}",
            common::text(&run["threads"]),
            common::text(&i["records"]),
            i["mean_chars"].as_f64().unwrap_or(0.0),
            i["alone"]["records_per_s"].as_f64().unwrap_or(0.0),
            i["alone"]["texts_per_run"].as_f64().unwrap_or(0.0),
            i["with_queries"]["records_per_s"].as_f64().unwrap_or(0.0),
            common::text(&i["with_queries"]["query_rate"]),
            q["p50_ms"].as_f64().unwrap_or(0.0),
            q["p99_ms"].as_f64().unwrap_or(0.0),
            q["max_ms"].as_f64().unwrap_or(0.0),
            run["rss_after_load_kb"].as_f64().unwrap_or(0.0) / 1024.0,
            run["hwm_kb"].as_f64().unwrap_or(0.0) / 1024.0,
        );
    }
    println!();
    println!("machine before: {}", report["machine_before"]);
    println!("machine after:  {}", report["machine_after"]);
}
