//! `embed_bench`: what a query embedding costs, alone and under concurrency.
//!
//! With the production model (multilingual-e5-small from `scripts/fetch-assets`) and the
//! production batching embedder, the query cache off and every text unique, for each ONNX Runtime
//! thread count asked for:
//! - one caller, one query at a time: p50/p99 of `embed_query`, for short questions and for
//!   longer messages;
//! - N concurrent callers (each awaiting its answer before sending the next): queries per second,
//!   p50/p99, and how many texts the embedding thread put into each model run.
//!
//! Run from the repository root (it finds `.assets/`):
//! `cargo run --release --example embed_bench -- [--threads 1,2] [--concurrency 8,32] [--json]`.
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
    /// ONNX Runtime intra-op thread counts to measure, comma-separated.
    #[arg(long, default_value = "1,2")]
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
    let threads: Vec<usize> = args.threads.split(',').map(|t| t.trim().parse()).collect::<Result<_, _>>()?;
    let concurrency: Vec<usize> =
        args.concurrency.split(',').map(|t| t.trim().parse()).collect::<Result<_, _>>()?;
    let machine_before = common::machine();
    let mut texts = Texts::default();
    let mut results = Vec::new();
    for &t in &threads {
        let config = common::embed_config(t, 0);
        let embedder = tokio::task::spawn_blocking(move || Embedder::load(&config)).await??;
        for _ in 0..20 {
            embedder.embed_query(&texts.short()).await?;
        }
        let mut sequential = Vec::new();
        for (label, long) in [("short", false), ("long", true)] {
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
        for &callers in &concurrency {
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
        results.push(json!({
            "threads": t,
            "model_id": embedder.model_id(),
            "dimensions": embedder.dimensions(),
            "sequential": sequential,
            "concurrent": concurrent,
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

impl Texts {
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
    println!("machine before: {}", report["machine_before"]);
    println!("machine after:  {}", report["machine_after"]);
}
