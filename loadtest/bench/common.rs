//! Shared by the benchmark programs in `loadtest/bench/` (each includes it with `#[path]`):
//! a deterministic random source, latency summaries, the machine's state, and how to find the
//! embedding model. Not every program uses every piece.
#![allow(dead_code)]

use serde_json::{Value, json};
use std::error::Error;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub type BoxError = Box<dyn Error + Send + Sync>;

/// xorshift64*: fast, deterministic, good enough to spread synthetic data.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    /// Standard normal (Box–Muller).
    pub fn gauss(&mut self) -> f32 {
        let u1 = self.unit().max(1e-12);
        let u2 = self.unit();
        ((-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()) as f32
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// A small support-desk vocabulary for synthetic text.
pub const WORDS: &[&str] = &[
    "customer",
    "order",
    "delivery",
    "shipping",
    "refund",
    "invoice",
    "warehouse",
    "package",
    "address",
    "account",
    "password",
    "subscription",
    "payment",
    "card",
    "discount",
    "coupon",
    "return",
    "exchange",
    "size",
    "colour",
    "product",
    "warranty",
    "repair",
    "replacement",
    "manager",
    "escalation",
    "ticket",
    "priority",
    "deadline",
    "contract",
    "renewal",
    "plan",
    "premium",
    "basic",
    "enterprise",
    "seats",
    "license",
    "upgrade",
    "downgrade",
    "cancel",
    "prefers",
    "wants",
    "asked",
    "confirmed",
    "reported",
    "complained",
    "requested",
    "promised",
    "before",
    "after",
    "during",
    "next",
    "week",
    "month",
    "quarter",
    "morning",
    "evening",
    "weekday",
    "weekend",
    "holiday",
    "express",
    "standard",
    "tracking",
    "courier",
    "customs",
    "damaged",
    "missing",
    "late",
    "early",
    "partial",
    "full",
    "credit",
    "balance",
    "tax",
    "VAT",
    "company",
    "team",
    "region",
    "Europe",
    "Asia",
    "America",
    "language",
    "Chinese",
    "English",
    "German",
    "Spanish",
    "email",
    "phone",
    "chat",
    "callback",
    "survey",
    "feedback",
    "rating",
    "loyalty",
    "points",
    "tier",
    "gold",
    "silver",
    "bronze",
    "policy",
    "rule",
    "process",
    "step",
    "check",
    "verify",
    "approve",
    "reject",
    "notify",
    "update",
    "record",
    "note",
    "history",
    "the",
    "a",
    "of",
    "to",
    "and",
    "for",
    "with",
    "on",
    "in",
    "is",
    "was",
    "will",
    "should",
    "must",
    "not",
    "only",
    "always",
    "never",
    "within",
    "days",
    "hours",
    "three",
    "two",
    "five",
    "ten",
];

/// A sentence of `min_words..=max_words` words from `WORDS`.
pub fn sentence(rng: &mut Rng, min_words: usize, max_words: usize) -> String {
    let n = min_words + rng.below(max_words - min_words + 1);
    let mut words: Vec<&str> = (0..n).map(|_| *rng.pick(WORDS)).collect();
    if let Some(first) = words.first_mut().filter(|w| **w == "the" || **w == "a") {
        *first = "The";
    }
    format!("{}.", words.join(" "))
}

/// A random vector of `dims` normal components scaled so its expected length is 1.
pub fn noise(rng: &mut Rng, dims: usize) -> Vec<f32> {
    let scale = 1.0 / (dims as f32).sqrt();
    (0..dims).map(|_| rng.gauss() * scale).collect()
}

pub fn normalize(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
    v.iter_mut().for_each(|x| *x /= norm);
}

/// Latency summary of a set of samples.
#[derive(Debug, Clone, Copy)]
pub struct Summary {
    pub count: usize,
    pub mean: Duration,
    pub p50: Duration,
    pub p95: Duration,
    pub p99: Duration,
    pub max: Duration,
}

impl Summary {
    pub fn of(samples: &[Duration]) -> Summary {
        let mut sorted = samples.to_vec();
        sorted.sort();
        let total: Duration = sorted.iter().sum();
        Summary {
            count: sorted.len(),
            mean: if sorted.is_empty() { Duration::ZERO } else { total / sorted.len() as u32 },
            p50: percentile(&sorted, 0.50),
            p95: percentile(&sorted, 0.95),
            p99: percentile(&sorted, 0.99),
            max: sorted.last().copied().unwrap_or_default(),
        }
    }

    /// Milliseconds, for JSON.
    pub fn json_ms(&self) -> Value {
        json!({
            "count": self.count,
            "mean_ms": ms(self.mean),
            "p50_ms": ms(self.p50),
            "p95_ms": ms(self.p95),
            "p99_ms": ms(self.p99),
            "max_ms": ms(self.max),
        })
    }

    /// Microseconds, for JSON.
    pub fn json_us(&self) -> Value {
        json!({
            "count": self.count,
            "mean_us": us(self.mean),
            "p50_us": us(self.p50),
            "p95_us": us(self.p95),
            "p99_us": us(self.p99),
            "max_us": us(self.max),
        })
    }
}

/// Nearest-rank percentile of sorted samples.
pub fn percentile<T: Copy + Default>(sorted: &[T], p: f64) -> T {
    if sorted.is_empty() {
        return T::default();
    }
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

pub fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

pub fn us(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e9).round() / 1e3
}

/// The machine and how busy it is (other builds share it): logical CPUs and load averages.
pub fn machine() -> Value {
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load: Vec<f64> = load.split_whitespace().take(3).filter_map(|x| x.parse().ok()).collect();
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, m)| m.trim().to_owned())
        .unwrap_or_default();
    json!({"cpus": cpus, "cpu_model": model, "loadavg_1_5_15": load})
}

pub fn load_line() -> String {
    let m = machine();
    format!("cpus {}, load average {}", m["cpus"], m["loadavg_1_5_15"])
}

/// The repository's `.assets` (from `scripts/fetch-assets`), looked up from the working
/// directory (cargo runs examples from where it was invoked; use the repository root).
pub fn assets_dir() -> PathBuf {
    PathBuf::from(".assets")
}

/// Points `ORT_DYLIB_PATH` at the fetched ONNX Runtime library when the environment names none.
///
/// Must run first thing in `main`, before any other thread exists (see
/// `memgate::embed::export_ort_dylib_path`): these programs build their Tokio runtime after it.
pub fn export_ort_if_unset() {
    if std::env::var_os("ORT_DYLIB_PATH").is_some_and(|v| !v.is_empty()) {
        return;
    }
    let library = assets_dir().join("onnxruntime").join(memgate::embed::ORT_LIBRARY_FILE);
    if library.exists() {
        // SAFETY: called at the top of `main`, before the runtime or any other thread starts.
        unsafe { memgate::embed::export_ort_dylib_path(&library) };
    }
}

/// The production embedding configuration (multilingual-e5-small, max_batch 16), with the
/// model folder from `MEMGATE_MODEL_DIR` when set, and the library from `ORT_DYLIB_PATH`.
pub fn embed_config(threads: usize, cache_entries: usize) -> memgate::embed::EmbedConfig {
    let mut config = memgate::embed::EmbedConfig::default_for(&assets_dir());
    if let Some(dir) = std::env::var_os("MEMGATE_MODEL_DIR").filter(|v| !v.is_empty()) {
        config.model_dir = PathBuf::from(dir);
    }
    // ort reads the library only from ORT_DYLIB_PATH (exported above); the check in `load`
    // then looks at that variable alone.
    config.ort_dylib_path = None;
    config.threads = threads;
    config.cache_entries = cache_entries;
    config
}

/// A fresh temporary directory under the system's temp dir; removed by `TempDir::drop`.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(prefix: &str) -> std::io::Result<TempDir> {
        let dir = std::env::temp_dir().join(format!("{prefix}-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir)?;
        Ok(TempDir(dir))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Parses `1000,10000,100000` (also `10k`, `100k`).
pub fn parse_sizes(text: &str) -> Result<Vec<usize>, String> {
    text.split(',')
        .map(|s| {
            let s = s.trim().to_lowercase();
            let (digits, factor) = match s.strip_suffix('k') {
                Some(d) => (d.to_owned(), 1000),
                None => (s.clone(), 1),
            };
            digits.parse::<usize>().map(|n| n * factor).map_err(|_| format!("`{s}` is not a size"))
        })
        .collect()
}

/// A JSON value as plain text (strings without quotes), for width-formatted table cells.
pub fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".to_owned(),
        other => other.to_string(),
    }
}

/// An `f32` setting as a short `f64` for JSON (0.8 rather than 0.800000011920929).
pub fn f32r(x: f32) -> f64 {
    (f64::from(x) * 1e4).round() / 1e4
}

/// A LoCoMo question: its conversation (tenant), text, category and evidence turn ids.
pub struct LocomoQuestion {
    pub tenant: String,
    pub text: String,
    pub category: i64,
    pub evidence: Vec<String>,
}

/// LoCoMo's dialog turns as records (type `fact`, content `{"statement": "<speaker>: <text>"}`,
/// scope `public`, one tenant per conversation) and its questions with their evidence ids, as
/// `locomo_eval` reads them (used by `hybrid_eval`).
pub fn load_locomo(
    path: &Path,
    conversations: Option<usize>,
) -> Result<(Vec<memgate::record::Record>, Vec<LocomoQuestion>), BoxError> {
    let bytes = std::fs::read(path).map_err(|err| {
        format!("cannot read {}: {err} (run from the repository root, or pass --data)", path.display())
    })?;
    let data: Value = serde_json::from_slice(&bytes)?;
    let samples = data.as_array().ok_or("locomo10.json is not a list of samples")?;
    let take = conversations.unwrap_or(samples.len()).min(samples.len());
    let (mut records, mut questions) = (Vec::new(), Vec::new());
    let mut known: std::collections::HashSet<(String, String)> = std::collections::HashSet::new();
    let base_ms = 1_672_531_200_000;
    for sample in &samples[..take] {
        let tenant = sample["sample_id"].as_str().ok_or("a sample without sample_id")?.to_owned();
        let conversation = sample["conversation"].as_object().ok_or("a sample without conversation")?;
        let mut sessions: Vec<(u32, &Vec<Value>)> = conversation
            .iter()
            .filter_map(|(k, v)| Some((k.strip_prefix("session_")?.parse::<u32>().ok()?, v.as_array()?)))
            .collect();
        sessions.sort_by_key(|(n, _)| *n);
        for turn in sessions.into_iter().flat_map(|(_, turns)| turns) {
            let (Some(id), Some(speaker), Some(text)) =
                (turn["dia_id"].as_str(), turn["speaker"].as_str(), turn["text"].as_str())
            else {
                continue;
            };
            if !known.insert((tenant.clone(), id.to_owned())) {
                continue;
            }
            let at = base_ms + records.len() as i64 * 60_000;
            let mut record = record_fact(&tenant, id, json!({"statement": format!("{speaker}: {text}")}), at);
            // Each session is a thread, its turns in order (`D3:7`: session 3, turn 7), as an
            // import of a conversation would say: what lets a turn lift its neighbours.
            if let Some((session, turn)) = id.rsplit_once(':')
                && let Ok(turn) = turn.parse::<u32>()
            {
                record.metadata.insert("thread".into(), json!(session));
                record.metadata.insert("position".into(), json!(turn));
            }
            records.push(record);
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
            let category = qa["category"].as_i64().unwrap_or(0);
            questions.push(LocomoQuestion {
                tenant: tenant.clone(),
                text: text.to_owned(),
                category,
                evidence,
            });
        }
    }
    Ok((records, questions))
}

/// A `fact` record of `tenant`, public, valid forever, written at `at` (ms).
pub fn record_fact(tenant: &str, id: &str, content: Value, at: i64) -> memgate::record::Record {
    use memgate::record::{OPEN_END_MS, Record, Status};
    Record {
        tenant: tenant.to_owned(),
        id: id.to_owned(),
        record_type: "fact".into(),
        schema_version: "v1".into(),
        scope: vec!["public".into()],
        valid_from_ms: 0,
        valid_until_ms: OPEN_END_MS,
        priority: 3,
        key: None,
        aliases: Vec::new(),
        content,
        metadata: serde_json::Map::new(),
        revision: 1,
        status: Status::Active,
        created_at_ms: at,
        updated_at_ms: at,
        last_accessed_at_ms: None,
        access_count: 0,
        change_seq: 0,
        author: None,
        provenance: None,
    }
}

/// `D8:6; D9:17`, `D9:1 D4:4`, `D:11:26` → `D8:6`, `D9:17`, … (the labels have a few typos).
pub fn parse_evidence(text: &str) -> Vec<String> {
    text.split(|c: char| c == ';' || c == ',' || c.is_whitespace())
        .filter_map(|piece| {
            let rest = piece.trim().strip_prefix('D')?.trim_start_matches(':');
            let (session, turn) = rest.split_once(':')?;
            let ok = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
            (ok(session) && ok(turn)).then(|| format!("D{session}:{turn}"))
        })
        .collect()
}

/// Embeddings of `texts`, from `<cache>/<name>-<hash>.f32` when there, else computed (and kept).
pub async fn cached_vectors(
    embedder: &memgate::embed::Embedder,
    cache: Option<&Path>,
    name: &str,
    texts: &[String],
    queries: bool,
) -> Result<Vec<Vec<f32>>, BoxError> {
    use futures_util::StreamExt;
    use sha2::{Digest, Sha256};
    let mut hash = Sha256::new();
    hash.update(embedder.model_id().as_bytes());
    hash.update([u8::from(queries)]);
    for text in texts {
        hash.update(text.as_bytes());
        hash.update([0]);
    }
    let digest: String = hash.finalize().iter().take(8).map(|b| format!("{b:02x}")).collect();
    let file = cache.map(|dir| dir.join(format!("{name}-{digest}.f32")));
    if let Some(bytes) = file.as_ref().and_then(|f| std::fs::read(f).ok()) {
        let floats: Vec<f32> =
            bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        let dims = floats.len() / texts.len().max(1);
        if dims > 0 && dims * texts.len() == floats.len() {
            eprintln!(
                "{name}: {} vectors from {}",
                texts.len(),
                file.as_ref().map_or(String::new(), |f| f.display().to_string())
            );
            return Ok(floats.chunks(dims).map(<[f32]>::to_vec).collect());
        }
    }
    let started = std::time::Instant::now();
    let mut vectors: Vec<Vec<f32>> = Vec::with_capacity(texts.len());
    if queries {
        let out: Vec<std::sync::Arc<[f32]>> = futures_util::stream::iter(texts.iter())
            .map(|t| {
                let embedder = embedder.clone();
                async move { embedder.embed_query(t).await }
            })
            .buffered(16)
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .collect::<Result<_, _>>()?;
        vectors.extend(out.iter().map(|v| v.to_vec()));
    } else {
        for chunk in texts.chunks(128) {
            vectors.extend(embedder.embed_passages(chunk).await?);
            let rate = vectors.len() as f64 / started.elapsed().as_secs_f64().max(1e-9);
            eprintln!("{name}: {}/{} embedded, {rate:.1}/s ({})", vectors.len(), texts.len(), load_line());
        }
    }
    eprintln!("{name}: {} embedded in {:.1} s", texts.len(), started.elapsed().as_secs_f64());
    if let Some(file) = file {
        if let Some(dir) = file.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let bytes: Vec<u8> = vectors.iter().flatten().flat_map(|x| x.to_le_bytes()).collect();
        std::fs::write(&file, bytes)?;
    }
    Ok(vectors)
}

/// This process's resident memory, in KiB (0 where /proc is missing).
pub fn rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

/// Runs `bench` on a fresh PostgreSQL database beside `pg_url` (`memgate_bench_<random>`) and
/// always drops it afterwards, also after a failure (FORCE ends any pool connection still
/// closing in the background). The result says which database it was.
pub fn with_scratch_postgres(
    pg_url: &str,
    bench: impl FnOnce(&str) -> Result<Value, BoxError>,
) -> Result<Value, BoxError> {
    use sqlx::Connection;
    let admin = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let name = format!("memgate_bench_{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    let mut conn = admin.block_on(sqlx::PgConnection::connect(pg_url))?;
    admin.block_on(sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}"))).execute(&mut conn))?;
    let mut url = url::Url::parse(pg_url)?;
    url.set_path(&format!("/{name}"));
    let outcome = bench(url.as_str());
    let dropped = admin.block_on(
        sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")))
            .execute(&mut conn),
    );
    admin.block_on(conn.close())?;
    let mut value = outcome?;
    dropped?;
    value["database"] = json!(format!("{name} (dropped)"));
    Ok(value)
}
