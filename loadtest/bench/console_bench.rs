//! `console_bench`: the console's metrics history at a million calls a day (the
//! overview and release charts answer within 200 ms), on SQLite (a temporary file) and on
//! PostgreSQL (a fresh database `memgate_bench_<random>`, dropped at the end).
//!
//! Per backend, through the production code:
//! - fill: `--hours` of traffic (a daily wave) for `--tenants` tenants, `--calls` calls per tenant
//!   per 24 h, spread over `--replicas` replicas and `--releases` releases (shares 70/20/8/2…),
//!   each replica's calls recorded with `MetricsRecorder::record_at` and flushed once per
//!   simulated minute with `flush_at`, as the server's ticker would;
//! - the queries behind the charts, for the first tenant, each `--repeat` times after a warm-up:
//!   `history` over 1 h and 24 h (every release, and one release) and `releases` over 1 h and
//!   24 h.
//!
//! Without a database: the cost of `MetricsRecorder::record` on the request path (one thread, and
//! every core at once), and of `data_health` over `--health-records` records.
//!
//! Run: `cargo run --release --example console_bench -- [--backends sqlite,postgres] [--json]`.
#![allow(clippy::print_stdout)]

#[path = "common.rs"]
mod common;

use clap::Parser;
use common::{BoxError, Rng, Summary, TempDir};
use memgate::console::data_health::data_health;
use memgate::console::history::{self, HistoryParams, HistoryRetention, Window};
use memgate::console::{CallError, CallOutcome, MemoryOutcome, MetricsRecorder};
use memgate::memory::checks::schemas::SchemaSet;
use memgate::store::Store;
use serde_json::{Value, json};
use sqlx::Connection;
use std::sync::Arc;
use std::time::{Duration, Instant};

const MINUTE_MS: i64 = 60_000;

/// The metrics history's fill and query costs on SQLite and PostgreSQL.
#[derive(Parser, Debug)]
#[command(name = "console_bench")]
struct Args {
    /// Backends to measure, comma-separated: sqlite, postgres.
    #[arg(long, default_value = "sqlite,postgres")]
    backends: String,
    /// PostgreSQL server to create the throw-away database on (trust auth or a password in it).
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/postgres")]
    pg_url: String,
    /// Calls per tenant per 24 hours.
    #[arg(long, default_value_t = 1_000_000)]
    calls: u64,
    /// Hours of history to fill, ending now.
    #[arg(long, default_value_t = 24)]
    hours: i64,
    /// Tenants with that traffic (the queries read the first).
    #[arg(long, default_value_t = 2)]
    tenants: usize,
    /// Replicas, each flushing its own figures once a minute.
    #[arg(long, default_value_t = 4)]
    replicas: usize,
    /// Releases, named v1, v2, …; shares 70%, 20%, 8%, then 2% split among the rest.
    #[arg(long, default_value_t = 4)]
    releases: usize,
    /// Runs of each query measured (after two warm-up runs).
    #[arg(long, default_value_t = 30)]
    repeat: usize,
    /// `record` calls timed per thread.
    #[arg(long, default_value_t = 5_000_000)]
    record_calls: usize,
    /// Records in the data-health measurement (0 skips it).
    #[arg(long, default_value_t = 100_000)]
    health_records: usize,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

fn main() -> Result<(), BoxError> {
    let args = Args::parse();
    let machine_before = common::machine();
    let recording = record_cost(&args);
    let health = health_cost(&args)?;
    let mut results = Vec::new();
    for backend in args.backends.split(',').map(str::trim).filter(|b| !b.is_empty()) {
        let result = match backend {
            "sqlite" => {
                let dir = TempDir::new("memgate-console-bench")?;
                let url = format!("sqlite://{}", dir.path().join("bench.db").display());
                runtime()?.block_on(bench_backend(
                    "sqlite (temp file, WAL, synchronous=NORMAL)",
                    &url,
                    &args,
                ))?
            }
            "postgres" => common::with_scratch_postgres(&args.pg_url, |url| {
                let phase = runtime()?;
                let outcome = phase.block_on(bench_backend("postgres (local, default settings)", url, &args));
                phase.shutdown_background();
                outcome
            })?,
            other => return Err(format!("unknown backend `{other}`: use sqlite or postgres").into()),
        };
        if !args.json {
            eprintln!("done: {backend} ({})", common::load_line());
        }
        results.push(result);
    }
    let report = json!({
        "bench": "console_bench",
        "calls_per_tenant_per_day": args.calls,
        "hours": args.hours,
        "tenants": args.tenants,
        "replicas": args.replicas,
        "releases": args.releases,
        "repeat": args.repeat,
        "record": recording,
        "data_health": health,
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

fn release_names(n: usize) -> Vec<String> {
    (1..=n.max(1)).map(|i| format!("v{i}")).collect()
}

/// Which release a call goes to: 70%, 20%, 8%, then 2% spread over the rest.
fn pick_release(rng: &mut Rng, names: &[String]) -> usize {
    let u = rng.unit();
    let index = if u < 0.70 {
        0
    } else if u < 0.90 {
        1
    } else if u < 0.98 {
        2
    } else {
        3 + rng.below(names.len().saturating_sub(3).max(1))
    };
    index.min(names.len() - 1)
}

/// One call as a busy support bot's would look: mostly memory ok, a few errors, ~1.3 ms added.
fn outcome(rng: &mut Rng) -> CallOutcome {
    let u = rng.unit();
    let (error, memory) = if u < 0.003 {
        (Some(CallError::Upstream), MemoryOutcome::Ok)
    } else if u < 0.004 {
        (Some(CallError::Memory), MemoryOutcome::Degraded)
    } else if u < 0.010 {
        (Some(CallError::Client), MemoryOutcome::Skipped)
    } else if u < 0.08 {
        (None, MemoryOutcome::Skipped)
    } else {
        (None, MemoryOutcome::Ok)
    };
    let records = if memory == MemoryOutcome::Ok { rng.below(6) as u32 } else { 0 };
    let latency_ms = 1.3 * f64::from(rng.gauss() * 0.5).exp();
    CallOutcome {
        error,
        memory,
        injected_records: records,
        injected_tokens: records * (150 + rng.below(120) as u32),
        visible_tokens: if memory == MemoryOutcome::Ok { 8000 + rng.below(3000) as u64 } else { 0 },
        added_latency: Duration::from_secs_f64(latency_ms / 1000.0),
    }
}

/// Calls in the minute `m` minutes before now: a daily wave between 0.5× and 1.5× the mean.
fn calls_in_minute(calls_per_day: u64, minute_of_day: i64) -> u64 {
    let mean = calls_per_day as f64 / 1440.0;
    let phase = minute_of_day as f64 / 1440.0 * std::f64::consts::TAU;
    (mean * (1.0 + 0.5 * phase.sin())).round() as u64
}

async fn bench_backend(label: &str, url: &str, args: &Args) -> Result<Value, BoxError> {
    let store = Store::connect(url).await?;
    store.migrate().await?;
    let names = release_names(args.releases);
    let tenants: Vec<String> = (0..args.tenants.max(1)).map(|i| format!("tenant-{i}")).collect();
    let now = memgate::clock::now_ms();
    let first_minute = now - now.rem_euclid(MINUTE_MS) - (args.hours * 60 - 1) * MINUTE_MS;
    // One recorder per replica, as in a fleet; history kept long enough for the whole fill.
    let retention = HistoryRetention::new(8, 48);
    let replicas: Vec<MetricsRecorder> =
        (0..args.replicas.max(1)).map(|r| MetricsRecorder::new(format!("replica-{r}"), retention)).collect();
    let mut rng = Rng::new(16);
    let mut recorded = 0u64;
    let mut flushes = Vec::new();
    let fill_started = Instant::now();
    for m in 0..args.hours * 60 {
        let minute = first_minute + m * MINUTE_MS;
        let per_tenant = calls_in_minute(args.calls, minute.rem_euclid(86_400_000) / MINUTE_MS);
        for tenant in &tenants {
            for i in 0..per_tenant {
                let replica = &replicas[(i as usize) % replicas.len()];
                let release = &names[pick_release(&mut rng, &names)];
                let at = minute + (i as i64 * 59_000) / per_tenant.max(1) as i64;
                replica.record_at(at, tenant, release, &outcome(&mut rng));
            }
            recorded += per_tenant;
        }
        for replica in &replicas {
            let started = Instant::now();
            replica.flush_at(&store, minute + MINUTE_MS).await?;
            flushes.push(started.elapsed());
        }
    }
    let fill = fill_started.elapsed();
    let rows = row_counts(&store, url).await?;

    let tenant = &tenants[0];
    let mut queries = serde_json::Map::new();
    let cases: Vec<(&str, Window, Option<String>)> = vec![
        ("history 1h (overview)", Window::Hour, None),
        ("history 1h, one release", Window::Hour, Some(names[names.len().min(2) - 1].clone())),
        ("history 24h (overview)", Window::Day, None),
        ("history 24h, one release", Window::Day, Some(names[names.len().min(2) - 1].clone())),
    ];
    let mut day_calls = 0;
    for (name, window, release) in cases {
        let params = HistoryParams { window, release };
        let mut samples = Vec::new();
        for run in 0..args.repeat + 2 {
            let started = Instant::now();
            let answer =
                history::history(&store, tenant, &params, &names, now).await.map_err(|e| e.to_string())?;
            if run >= 2 {
                samples.push(started.elapsed());
            }
            if window == Window::Day && params.release.is_none() {
                day_calls = answer.totals.calls;
            }
        }
        queries.insert(name.to_owned(), Summary::of(&samples).json_ms());
    }
    for (name, window) in [("releases 1h", Window::Hour), ("releases 24h (release panels)", Window::Day)] {
        let mut samples = Vec::new();
        for run in 0..args.repeat + 2 {
            let started = Instant::now();
            history::releases(&store, tenant, window, &names, now).await.map_err(|e| e.to_string())?;
            if run >= 2 {
                samples.push(started.elapsed());
            }
        }
        queries.insert(name.to_owned(), Summary::of(&samples).json_ms());
    }
    Ok(json!({
        "backend": label,
        "calls_recorded": recorded,
        "calls_in_first_tenants_24h_view": day_calls,
        "fill_seconds": fill.as_secs_f64(),
        "flush": Summary::of(&flushes).json_ms(),
        "rows": rows,
        "queries": queries,
    }))
}

async fn row_counts(_store: &Store, url: &str) -> Result<Value, BoxError> {
    sqlx::any::install_default_drivers();
    let mut conn = sqlx::AnyConnection::connect(url).await?;
    let mut out = serde_json::Map::new();
    for (name, secs) in [("minute_rows", 60_i64), ("five_minute_rows", 300)] {
        let row = sqlx::query("SELECT COUNT(*) FROM metric_buckets WHERE bucket_secs = $1")
            .bind(secs)
            .fetch_one(&mut conn)
            .await?;
        out.insert(name.to_owned(), json!(sqlx::Row::try_get::<i64, _>(&row, 0)?));
    }
    conn.close().await?;
    Ok(Value::Object(out))
}

/// ns per `record` call: one thread, then every core recording at once (each its own shard).
fn record_cost(args: &Args) -> Value {
    let recorder = Arc::new(MetricsRecorder::new("bench", HistoryRetention::default()));
    let mut rng = Rng::new(7);
    let outcomes: Vec<CallOutcome> = (0..1024).map(|_| outcome(&mut rng)).collect();
    let releases = release_names(4);
    let time = |recorder: &MetricsRecorder, calls: usize| {
        let now = memgate::clock::now_ms();
        let started = Instant::now();
        for i in 0..calls {
            recorder.record_at(now, "tenant-0", &releases[i & 3], &outcomes[i & 1023]);
        }
        started.elapsed()
    };
    // Warm up (the first call of a key allocates it), then measure.
    time(&recorder, 10_000);
    let one = time(&recorder, args.record_calls);
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let recorder = recorder.clone();
            let calls = args.record_calls;
            let outcomes = outcomes.clone();
            let releases = releases.clone();
            std::thread::spawn(move || {
                let now = memgate::clock::now_ms();
                let started = Instant::now();
                for i in 0..calls {
                    recorder.record_at(now, "tenant-0", &releases[i & 3], &outcomes[i & 1023]);
                }
                started.elapsed()
            })
        })
        .collect();
    let parallel: Vec<Duration> = handles.into_iter().filter_map(|h| h.join().ok()).collect();
    let worst = parallel.iter().max().copied().unwrap_or_default();
    // `record` (with the clock read) rather than `record_at`: what the request path pays.
    let started = Instant::now();
    for i in 0..args.record_calls {
        recorder.record("tenant-0", &releases[i & 3], &outcomes[i & 1023]);
    }
    let with_clock = started.elapsed();
    json!({
        "calls_per_thread": args.record_calls,
        "one_thread_ns_per_call": one.as_nanos() as f64 / args.record_calls as f64,
        "with_clock_ns_per_call": with_clock.as_nanos() as f64 / args.record_calls as f64,
        "threads": threads,
        "all_threads_ns_per_call_slowest": worst.as_nanos() as f64 / args.record_calls as f64,
    })
}

/// `data_health` over `--health-records` fact records (a tenth failing the schema).
fn health_cost(args: &Args) -> Result<Value, BoxError> {
    if args.health_records == 0 {
        return Ok(Value::Null);
    }
    let schemas = SchemaSet::load(None)?;
    let records: Vec<_> = (0..args.health_records)
        .map(|i| {
            let content = if i % 10 == 0 {
                json!({"tier": "gold"})
            } else {
                json!({"statement": format!("fact number {i}")})
            };
            common::record_fact("bench", &format!("f-{i:07}"), content, 0)
        })
        .collect();
    let mut samples = Vec::new();
    for _ in 0..5 {
        let started = Instant::now();
        let health = data_health(&records, &schemas, memgate::clock::now_ms());
        samples.push(started.elapsed());
        assert_eq!(health.live as usize, args.health_records);
    }
    Ok(json!({"records": args.health_records, "time": Summary::of(&samples).json_ms()}))
}

fn print_tables(report: &Value) {
    let r = &report["record"];
    println!(
        "record(): {:.0} ns/call on one thread, {:.0} ns with the clock read, {:.0} ns on each of {} threads at once",
        r["one_thread_ns_per_call"].as_f64().unwrap_or(0.0),
        r["with_clock_ns_per_call"].as_f64().unwrap_or(0.0),
        r["all_threads_ns_per_call_slowest"].as_f64().unwrap_or(0.0),
        r["threads"]
    );
    if !report["data_health"].is_null() {
        println!(
            "data_health over {} records: p50 {} ms",
            report["data_health"]["records"], report["data_health"]["time"]["p50_ms"]
        );
    }
    for backend in report["backends"].as_array().into_iter().flatten() {
        println!();
        println!("{}", backend["backend"].as_str().unwrap_or(""));
        println!(
            "  filled {} calls in {:.1} s; rows: {} minute, {} five-minute; flush p50 {} ms, max {} ms",
            backend["calls_recorded"],
            backend["fill_seconds"].as_f64().unwrap_or(0.0),
            backend["rows"]["minute_rows"],
            backend["rows"]["five_minute_rows"],
            backend["flush"]["p50_ms"],
            backend["flush"]["max_ms"]
        );
        println!("  {:<34} {:>9} {:>9} {:>9}", "query", "p50 ms", "p95 ms", "max ms");
        for (name, summary) in backend["queries"].as_object().into_iter().flatten() {
            println!(
                "  {:<34} {:>9} {:>9} {:>9}",
                name, summary["p50_ms"], summary["p95_ms"], summary["max_ms"]
            );
        }
    }
    println!();
    println!("machine: {}", report["machine_after"]);
}
