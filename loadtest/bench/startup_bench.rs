//! `startup_bench`: a replica starting on a large PostgreSQL store — how long until its index is
//! built, what the index holds per record, and what a request costs on it.
//!
//! It fills a throw-away database (`memgate_bench_<random>`, dropped at the end) in SQL with
//! `generate_series`: `--profiles` customer profiles (each scoped to its own `user:c<i>`, with a
//! key and an order id in its content), `--public` knowledge-base records and `--team` records
//! over 20 teams, all `active`. Every record gets a stored embedding of the running model's id,
//! drawn from a pool of `--pool` synthetic unit vectors (384-dim, a shared direction, 200 topic
//! centres, noise: like funnel_bench's), so the load embeds nothing: what is timed is reading the
//! rows and vectors and building the index (`MemoryService::load_index`, the code a replica runs
//! at startup). Then, on the loaded index, `funnel::run` (production settings: raw threshold
//! 0.80, 3,000 tokens, 5 items, 3 stubs, the default probes) for two kinds of request: a subject asking
//! about its own order (the query names its order id; its profile must be injected), and a
//! knowledge-base question (a vector near a KB record's).
//!
//! Run: `cargo run --release --example startup_bench -- [--profiles 1000000] [--public 100000]
//! [--team 10000] [--json]`.
#![allow(clippy::print_stdout)]

#[path = "common.rs"]
mod common;

use clap::Parser;
use common::{BoxError, Rng, Summary, normalize};
use memgate::embed::Embedder;
use memgate::funnel::semantic::{DEFAULT_PROBES, SemanticQuery};
use memgate::funnel::trace::Detail;
use memgate::funnel::{self, FunnelSettings, Retrieval};
use memgate::identity::Caller;
use memgate::memory::MemoryService;
use memgate::memory::checks::schemas::SchemaSet;
use memgate::store::Store;
use serde_json::{Value, json};
use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

const TENANT: &str = "crm";

#[derive(Parser, Debug)]
#[command(name = "startup_bench")]
struct Args {
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/postgres")]
    pg_url: String,
    #[arg(long, default_value_t = 1_000_000)]
    profiles: usize,
    #[arg(long, default_value_t = 100_000)]
    public: usize,
    #[arg(long, default_value_t = 10_000)]
    team: usize,
    /// Distinct vectors the records' embeddings are drawn from.
    #[arg(long, default_value_t = 20_000)]
    pool: usize,
    /// Timed requests per kind.
    #[arg(long, default_value_t = 2000)]
    queries: usize,
    /// Times the load runs on the one filled store (the last one is the measured replica).
    #[arg(long, default_value_t = 1)]
    loads: usize,
    /// Leave the records' token counts out of the store, as rows written before memgate kept
    /// them: the load counts every record itself.
    #[arg(long)]
    uncounted: bool,
    #[arg(long)]
    json: bool,
}

fn main() -> Result<(), BoxError> {
    common::export_ort_if_unset();
    let args = Args::parse();
    let embedder = Embedder::load(&common::embed_config(1, 4096))?;
    let schemas = Arc::new(SchemaSet::load(None)?);
    let machine_before = common::machine();
    let mut report = common::with_scratch_postgres(&args.pg_url, |url| {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
        runtime.block_on(bench(url, &args, &embedder, &schemas))
    })?;
    report["machine_before"] = machine_before;
    report["machine_after"] = common::machine();
    if args.json {
        println!("{report}");
    } else {
        println!("{}", serde_json::to_string_pretty(&report)?);
    }
    Ok(())
}

fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// This process's CPU time so far (user + system, every thread), in seconds.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command's closing parenthesis: utime and stime are the 12th and 13th.
    let fields: Vec<&str> = stat.rsplit_once(')').map_or("", |(_, rest)| rest).split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    // In clock ticks of USER_HZ, which Linux fixes at 100 for every program.
    (ticks(11) + ticks(12)) / 100.0
}

fn pool_vectors(count: usize, dims: usize) -> Vec<Vec<f32>> {
    let mut rng = Rng::new(11);
    let unit = |rng: &mut Rng| {
        let mut v: Vec<f32> = (0..dims).map(|_| rng.gauss()).collect();
        normalize(&mut v);
        v
    };
    let common_dir = unit(&mut rng);
    let topics: Vec<Vec<f32>> = (0..200).map(|_| unit(&mut rng)).collect();
    (0..count)
        .map(|i| {
            let topic = &topics[i % topics.len()];
            let noise = unit(&mut rng);
            let mut v: Vec<f32> =
                (0..dims).map(|d| 0.83 * common_dir[d] + 0.4 * topic[d] + 0.38 * noise[d]).collect();
            normalize(&mut v);
            v
        })
        .collect()
}

fn encode(vector: &[f32]) -> String {
    use base64::Engine as _;
    let bytes: Vec<u8> = vector.iter().flat_map(|x| x.to_le_bytes()).collect();
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

async fn fill(url: &str, args: &Args, model: &str, pool: &[Vec<f32>]) -> Result<f64, BoxError> {
    use sqlx::Connection;
    let started = Instant::now();
    let mut conn = sqlx::PgConnection::connect(url).await?;
    sqlx::query("CREATE TABLE bench_pool (k BIGINT PRIMARY KEY, vector TEXT NOT NULL)")
        .execute(&mut conn)
        .await?;
    for (chunk_no, chunk) in pool.chunks(500).enumerate() {
        let mut builder = sqlx::QueryBuilder::<sqlx::Postgres>::new("INSERT INTO bench_pool (k, vector) ");
        builder.push_values(chunk.iter().enumerate(), |mut row, (i, v)| {
            row.push_bind((chunk_no * 500 + i) as i64).push_bind(encode(v));
        });
        builder.build().execute(&mut conn).await?;
    }
    let now = memgate::clock::now_ms();
    // (id prefix, count, type, scope, key, content, pool position) as SQL over `i`.
    let kinds = [
        (
            args.profiles,
            "'cust-' || i",
            "customer_profile",
            "'[\"user:c' || i || '\"]'",
            "'customer:c' || i || ':profile'",
            "'{\"name\":\"Customer ' || i || '\",\"preferred_language\":\"en\",\"special_requests\":[\"Order ORD-' || (1000000 + i) || ' goes by courier to the back door\"]}'",
            "(i * 7919) % $3",
        ),
        (
            args.public,
            "'kb-' || i",
            "fact",
            "'[\"public\"]'",
            "NULL",
            "'{\"statement\":\"Knowledge base article ' || i || ': how refunds, returns and deliveries work for topic ' || (i % 200) || '.\"}'",
            "i % $3",
        ),
        (
            args.team,
            "'team-' || i",
            "internal_sop",
            "'[\"team:t' || (i % 20) || '\"]'",
            "NULL",
            "'{\"title\":\"SOP ' || i || '\",\"steps\":[\"Check the order\",\"Call the courier\"]}'",
            "(i * 104729) % $3",
        ),
    ];
    for (count, id, record_type, scope, key, content, _) in &kinds {
        if *count == 0 {
            continue;
        }
        let sql = format!(
            "INSERT INTO memories (tenant, id, record_type, schema_version, scope_json, valid_from, valid_until, \
             priority, topic_key, aliases_json, content_json, metadata_json, content_hash, revision, status, \
             created_at, updated_at, last_accessed_at, access_count, import_id, search_text, change_seq, author) \
             SELECT $1, {id}, '{record_type}', 'v1', {scope}, 0, $2, 3, {key}, '[]', {content}, '{{}}', md5({id}), 1, \
             'active', $4, $4, NULL, 0, NULL, '', 0, NULL FROM generate_series(1, $5) AS i"
        );
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(TENANT)
            .bind(memgate::record::OPEN_END_MS)
            .bind(pool.len() as i64)
            .bind(now)
            .bind(*count as i64)
            .execute(&mut conn)
            .await?;
    }
    for (count, id, _, _, _, _, position) in &kinds {
        if *count == 0 {
            continue;
        }
        let sql = format!(
            "INSERT INTO memory_embeddings (tenant, memory_id, model_id, vector) \
             SELECT $1, {id}, $2, p.vector FROM generate_series(1, $4) AS i JOIN bench_pool p ON p.k = {position}"
        );
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(TENANT)
            .bind(model)
            .bind(pool.len() as i64)
            .bind(*count as i64)
            .execute(&mut conn)
            .await?;
    }
    sqlx::query("DROP TABLE bench_pool").execute(&mut conn).await?;
    if !args.uncounted {
        count_tokens(&mut conn).await?;
    }
    sqlx::query("VACUUM ANALYZE").execute(&mut conn).await?;
    // A replica starts on a store at rest: the fill's dirty pages are written out before the
    // load is timed, not during it (a checkpoint in the middle of a load made it a third slower).
    sqlx::query("CHECKPOINT").execute(&mut conn).await?;
    conn.close().await?;
    Ok(started.elapsed().as_secs_f64())
}

/// Writes each record's `line_tokens` as memgate's own writes do (the SQL fill cannot run the
/// tokenizer), a page at a time, counted on every core.
async fn count_tokens(conn: &mut sqlx::PgConnection) -> Result<(), BoxError> {
    let mut after = String::new();
    loop {
        let rows: Vec<(String, String, String)> = sqlx::query_as(
            "SELECT id, record_type, content_json FROM memories WHERE tenant = $1 AND id > $2 ORDER BY id LIMIT 50000",
        )
        .bind(TENANT)
        .bind(&after)
        .fetch_all(&mut *conn)
        .await?;
        let Some(last) = rows.last() else { break };
        after = last.0.clone();
        let counted = memgate::cpu::map_on_cores(rows, |(id, record_type, content)| {
            let content: Value = serde_json::from_str(&content).unwrap_or(Value::Null);
            let tokens = memgate::record::line_tokens(&id, &record_type, &content);
            (id, i32::try_from(tokens).unwrap_or(i32::MAX))
        });
        let (ids, tokens): (Vec<String>, Vec<i32>) = counted.into_iter().unzip();
        sqlx::query(
            "UPDATE memories m SET line_tokens = u.t FROM unnest($1::text[], $2::int4[]) AS u(id, t) \
             WHERE m.tenant = $3 AND m.id = u.id",
        )
        .bind(ids)
        .bind(tokens)
        .bind(TENANT)
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

async fn bench(
    url: &str,
    args: &Args,
    embedder: &Embedder,
    schemas: &Arc<SchemaSet>,
) -> Result<Value, BoxError> {
    let store = Store::connect(url).await?;
    store.migrate().await?;
    let pool = pool_vectors(args.pool, embedder.dimensions());
    let fill_s = fill(url, args, embedder.model_id(), &pool).await?;
    let records = args.profiles + args.public + args.team;

    let new_service = || {
        MemoryService::new(
            store.clone(),
            schemas.clone(),
            64 * 1024,
            embedder.clone(),
            memgate::config::DEFAULT_DEDUPE,
        )
    };
    // Loads before the measured one, each into a replica dropped at once: the load time of one
    // store, several times, without filling it again (the resident memory is the last load's,
    // whose process has held an index before: read it from a run with `--loads 1`).
    let mut earlier_loads = Vec::new();
    for _ in 1..args.loads.max(1) {
        let service = new_service();
        let started = Instant::now();
        service.load_index().await?;
        earlier_loads.push(started.elapsed().as_secs_f64());
    }
    let service = new_service();
    let rss_before = rss_bytes();
    let cpu_before = cpu_seconds();
    let started = Instant::now();
    let loaded = service.load_index().await?;
    let load_s = started.elapsed().as_secs_f64();
    let load_cpu_s = cpu_seconds() - cpu_before;
    let rss_after = rss_bytes();

    let index = service.index().tenant(TENANT).ok_or("the tenant was not loaded")?;
    let index = index.read().map_err(|_| "poisoned")?;
    let settings = FunnelSettings {
        schema_versions: vec!["v1".into()],
        threshold: memgate::config::RAW_SIMILARITY,
        budget_tokens: 3000,
        max_items: 5,
        max_stubs: 3,
        probes: DEFAULT_PROBES,
        retrieval: Retrieval::Dense,
        cut: memgate::funnel::cut::Cut::OFF,
        standout: None,
        subject_boost: 0.0,
        neighbour_weight: 0.0,
        inject_writers: memgate::record::WriterSet::ALL,
    };
    let mut rng = Rng::new(5);
    let now = memgate::clock::now_ms();
    let mut kinds = Vec::new();
    for kind in ["own order", "knowledge base"] {
        let (mut times, mut scanned, mut wanted_found, mut asked) = (Vec::new(), 0usize, 0usize, 0usize);
        for q in 0..args.queries + 200 {
            let (caller, text, vector, wanted) = if kind == "own order" && args.profiles > 0 {
                let i = 1 + rng.below(args.profiles);
                let mut caller = Caller::new(TENANT, [format!("user:c{i}")]);
                caller.subject = Some(format!("c{i}"));
                let own = index.slot_of(&format!("cust-{i}")).and_then(|s| index.vector(s));
                let mut v: Vec<f32> = own.map(|v| v.to_vec()).unwrap_or_else(|| pool[0].clone());
                v.iter_mut().for_each(|x| *x += 0.02 * rng.gauss());
                normalize(&mut v);
                (
                    caller,
                    format!("Where is my order ORD-{}? It should come today.", 1_000_000 + i),
                    v,
                    Some(format!("cust-{i}")),
                )
            } else {
                let i = 1 + rng.below(args.public.max(1));
                let mut v = pool[i % pool.len()].clone();
                v.iter_mut().for_each(|x| *x += 0.02 * rng.gauss());
                normalize(&mut v);
                let caller = Caller::new(TENANT, ["team:t3".to_owned()]);
                (caller, "How do refunds work for a parcel that never arrived?".to_owned(), v, None)
            };
            let sq = SemanticQuery {
                text: &text,
                vector: Some(&vector),
                threshold: settings.threshold,
                probes: settings.probes,
                hybrid: None,
                lift: memgate::funnel::semantic::Lift::NONE,
            };
            let t = Instant::now();
            let out = funnel::run(&index, &caller, &sq, &settings, now, Detail::Off);
            let elapsed = t.elapsed();
            black_box(&out.packed);
            if q >= 200 {
                times.push(elapsed);
                scanned += out.trace.scanned;
                if let Some(wanted) = wanted {
                    asked += 1;
                    wanted_found +=
                        usize::from(out.packed.injected.iter().any(|c| c.item.head.id() == &*wanted));
                }
            }
        }
        kinds.push(json!({
            "kind": kind,
            "funnel": Summary::of(&times).json_ms(),
            "rows_scanned_mean": scanned as f64 / args.queries.max(1) as f64,
            "own_profile_injected": (asked > 0).then(|| wanted_found as f64 / asked as f64),
        }));
    }
    let ivf: Vec<Value> = index
        .ann
        .iter()
        .map(|(scope, ann)| json!({"scope": scope, "vectors": ann.len(), "lists": ann.list_lens().len()}))
        .collect();
    Ok(json!({
        "bench": "startup_bench",
        "records": records,
        "profiles": args.profiles,
        "public": args.public,
        "team": args.team,
        "vector_pool": args.pool,
        "token_counts_stored": !args.uncounted,
        "fill_store_s": fill_s,
        "load_index_s": load_s,
        "load_cpu_s": load_cpu_s,
        "earlier_loads_s": earlier_loads,
        "loaded": loaded,
        "load_records_per_s": loaded as f64 / load_s.max(1e-9),
        "rss_mb_before_load": rss_before as f64 / 1e6,
        "rss_mb_after_load": rss_after as f64 / 1e6,
        "index_rss_bytes_per_record": rss_after.saturating_sub(rss_before) as f64 / records.max(1) as f64,
        "ivf": ivf,
        "requests": kinds,
    }))
}
