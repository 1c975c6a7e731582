//! The embedding service: text in, L2-normalized vectors out, for the funnel's semantic layer
//! (queries) and for record writes (passages).
//!
//! How a query travels:
//! 1. [`Embedder::embed_query`] looks the text up in a bounded cache (`cache.rs`); a hit returns
//!    the very `Arc` it returned before, without touching the model.
//! 2. A miss puts a job in the query queue of the embedding thread (`batcher.rs`), the one owner
//!    of the model. Queries always go first: the thread takes every waiting query (up to
//!    `max_batch` texts), runs the model once for all of them, and answers each job on its own
//!    oneshot channel. Nothing waits to fill a batch: while one run is busy, the next batch
//!    queues up by itself.
//! 3. Passages ([`Embedder::embed_passages`]: record writes, imports, the backfill) wait in a
//!    second queue and run only when no query waits, in slices of about 20 ms of model time,
//!    shortest texts together; so a query waits for at most one such slice.
//! 4. The model (`model.rs`): tokenize with the prefix (`query: ` / `passage: ` for e5), run the
//!    graph, mean-pool over the attention mask, L2-normalize. memgate's default is an int8 build
//!    of multilingual-e5-small with its own compact tokenizer (`tokenizer.rs`); any other folder
//!    or hub model runs through fastembed as exported. ONNX Runtime itself is a shared library
//!    loaded at first use from `ORT_DYLIB_PATH`.
//!
//! Why a dedicated OS thread rather than a lock and `spawn_blocking`: fastembed's `embed` takes
//! `&mut self`, so runs are serial anyway; a thread that owns the model needs no lock, never
//! blocks the async workers, and can order the work (queries first). ONNX Runtime's own
//! intra-op threads (`threads`, every core by default) parallelize inside one run. One session
//! for both queues: a second one for queries would hold the model twice (~90 MB).
//!
//! 5. Language centering (`centering.rs`, on by default) takes the language's own direction out
//!    of each vector, so a Russian question is compared with an English note by topic rather than
//!    losing to every Russian text.
//!
//! Scores: raw e5 cosines bunch in 0.7–0.9 even for unrelated texts; centered ones spread over
//! about −0.1–0.7. Either way similarity thresholds are calibrated per model and per centering
//! ([`Embedder::model_id`] names both; docs/embedding.md has the figures).

mod batcher;
mod cache;
pub mod centering;
mod model;
pub mod shared;
mod tokenizer;

#[cfg(test)]
mod bench;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::{Semaphore, oneshot};

use self::batcher::{Job, Kind, Queue};
use self::cache::QueryCache;
use self::centering::{Centres, Role};

pub use crate::assets::{DEFAULT_MODEL, ORT_LIBRARY_FILE};

pub use crate::config::embedding::{EmbedConfig, default_threads};

/// Why embedding failed. Load errors say what to run or set.
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    #[error(
        "model file {0} missing: run scripts/fetch-assets (or point MEMGATE_MODEL_DIR at a model folder)"
    )]
    ModelFileMissing(PathBuf),
    #[error("cannot read model file {path}: {source}")]
    ModelFileUnreadable { path: PathBuf, source: std::io::Error },
    #[error("ONNX Runtime library not found at {0}: set ORT_DYLIB_PATH or run scripts/fetch-assets")]
    OrtLibraryMissing(PathBuf),
    #[error(
        "ONNX Runtime library is configured at {configured} but ORT_DYLIB_PATH names {found}: ort loads only what ORT_DYLIB_PATH says, so make them the same file"
    )]
    OrtPathMismatch { configured: PathBuf, found: PathBuf },
    #[error(
        "ONNX Runtime library is configured at {0} but ORT_DYLIB_PATH is not set, and ort reads only that variable: export ORT_DYLIB_PATH={0} (scripts/fetch-assets writes .assets/env.sh to source)"
    )]
    OrtPathNotExported(PathBuf),
    #[error(
        "ONNX Runtime could not be loaded: {0} (set ORT_DYLIB_PATH to an ONNX Runtime >= 1.24 library, or run scripts/fetch-assets)"
    )]
    OrtLoad(String),
    #[error(
        "unknown embedding model name {0:?}: use a fastembed model code such as intfloat/multilingual-e5-small"
    )]
    UnknownModel(String),
    #[error("invalid embedding configuration: {0}")]
    InvalidConfig(String),
    #[error("embedding model failed: {0}")]
    Model(String),
    #[error("the embedding thread has stopped")]
    Stopped,
}

/// The embedding service. Cheap to clone; the model and its thread live as long as any clone.
#[derive(Clone)]
pub struct Embedder {
    inner: Arc<Inner>,
}

struct Inner {
    model_id: String,
    dimensions: usize,
    query_prefix: String,
    passage_prefix: String,
    centres: Option<Centres>,
    cache: QueryCache,
    /// Other replicas' query vectors (Redis), asked after a miss in `cache`.
    shared: std::sync::OnceLock<shared::SharedVectors>,
    counters: Arc<Counters>,
    /// The embedding thread's queues; closed when the last `Embedder` clone is dropped.
    queue: Queue,
    /// Places in the queues: a caller waits for one when `JOB_QUEUE` jobs are waiting.
    permits: Arc<Semaphore>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.queue.close();
    }
}

impl std::fmt::Debug for Embedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embedder")
            .field("model_id", &self.inner.model_id)
            .field("dimensions", &self.inner.dimensions)
            .finish_non_exhaustive()
    }
}

/// How many jobs may wait for the embedding thread before callers wait to enqueue.
const JOB_QUEUE: usize = 1024;

impl Embedder {
    /// Loads the model (a second or two), runs it once to learn its dimensions, and starts the
    /// embedding thread. Blocking: call it at startup, or from `spawn_blocking`.
    pub fn load(config: &EmbedConfig) -> Result<Embedder, EmbedError> {
        if config.threads == 0 {
            return Err(EmbedError::InvalidConfig("threads must be at least 1".into()));
        }
        if config.max_batch == 0 {
            return Err(EmbedError::InvalidConfig("max_batch must be at least 1".into()));
        }
        let mut loaded = model::load(config)?;
        let probe = loaded.model.embed(&[format!("{}memgate", config.query_prefix)])?;
        let dimensions = probe.first().map(Vec::len).unwrap_or(0);
        if dimensions == 0 {
            return Err(EmbedError::Model("the model returned an empty embedding".into()));
        }
        let (model_id, centres) = if config.language_centering {
            let centres = load_centres(&mut loaded.model, config, &loaded.model_id)?;
            (format!("{}+centered-{}", loaded.model_id, centering::fingerprint()), Some(centres))
        } else {
            (loaded.model_id, None)
        };
        let counters = Arc::new(Counters::default());
        let queue = batcher::spawn(loaded.model, config.max_batch, counters.clone())?;
        tracing::info!(
            model_id = %model_id,
            dimensions,
            threads = config.threads,
            max_batch = config.max_batch,
            "embedding model loaded"
        );
        Ok(Embedder {
            inner: Arc::new(Inner {
                model_id,
                dimensions,
                query_prefix: config.query_prefix.clone(),
                passage_prefix: config.passage_prefix.clone(),
                centres,
                shared: std::sync::OnceLock::new(),
                cache: QueryCache::new(config.cache_entries),
                counters,
                queue,
                permits: Arc::new(Semaphore::new(JOB_QUEUE)),
            }),
        })
    }

    /// A stable id of the model, its tokenizer, pooling, prefixes and centering, e.g.
    /// `multilingual-e5-small:3f2a9c0d1e2b4a5c+centered-1a2b3c4d`. Store it beside record embeddings: a different id
    /// means the vectors are not comparable and the records must be embedded again.
    pub fn model_id(&self) -> &str {
        &self.inner.model_id
    }

    /// The length of every vector this embedder returns.
    pub fn dimensions(&self) -> usize {
        self.inner.dimensions
    }

    /// The L2-normalized embedding of a search query (the query prefix is added here), outside
    /// any tenant (benchmarks, tests). Requests go through [`Embedder::embed_query_for`].
    pub async fn embed_query(&self, text: &str) -> Result<Arc<[f32]>, EmbedError> {
        self.embed_query_for("", text).await
    }

    /// The embedding of `tenant`'s query `text`. Repeated texts come from the cache as the same
    /// `Arc`; concurrent misses share model runs. Both caches (this replica's and the one shared
    /// through Redis) are per tenant: whether a text was asked before, and how fast it comes
    /// back, says nothing about another tenant's questions.
    pub async fn embed_query_for(&self, tenant: &str, text: &str) -> Result<Arc<[f32]>, EmbedError> {
        let inner = &self.inner;
        // Tenant names never hold U+001F (`identity::is_valid_tenant`): the key is unambiguous.
        let cache_key = format!("{tenant}\u{1f}{text}");
        if let Some(hit) = inner.cache.get(&cache_key) {
            inner.counters.cache_hits.fetch_add(1, Ordering::Relaxed);
            return Ok(hit);
        }
        inner.counters.cache_misses.fetch_add(1, Ordering::Relaxed);
        let shared = inner.shared.get();
        if let Some(shared) = shared
            && let Some(vector) = shared.get(&inner.model_id, tenant, text, inner.dimensions).await
        {
            inner.counters.shared_hits.fetch_add(1, Ordering::Relaxed);
            return Ok(inner.cache.insert(&cache_key, vector.into()));
        }
        let mut vectors = self.run(Kind::Query, vec![format!("{}{}", inner.query_prefix, text)]).await?;
        let mut vector = vectors.pop().ok_or_else(|| EmbedError::Model("no embedding came back".into()))?;
        if let Some(centres) = &inner.centres {
            centres.apply(Role::Query, text, &mut vector);
        }
        if let Some(shared) = shared {
            shared.put(&inner.model_id, tenant, text, &vector);
        }
        Ok(inner.cache.insert(&cache_key, vector.into()))
    }

    /// The L2-normalized embeddings of record texts (the passage prefix is added here), in order.
    /// Any number of texts in one call: the embedding thread runs them in slices of about
    /// 20 ms, shortest first, and lets queries go between slices, so a large call (an import)
    /// is the efficient one.
    pub async fn embed_passages(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let inner = &self.inner;
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let prefixed = texts.iter().map(|t| format!("{}{}", inner.passage_prefix, t)).collect();
        let mut vectors = self.run(Kind::Passage, prefixed).await?;
        if let Some(centres) = &inner.centres {
            for (text, vector) in texts.iter().zip(&mut vectors) {
                centres.apply(Role::Passage, text, vector);
            }
        }
        Ok(vectors)
    }

    /// Asks `shared` (other replicas' query vectors) after a miss in this process's cache, and
    /// offers it what the model computes. Once; later calls change nothing.
    pub fn share_queries_through(&self, shared: shared::SharedVectors) {
        let _ = self.inner.shared.set(shared);
    }

    /// Counters since load, for metrics: how well batching and the cache work.
    pub fn stats(&self) -> EmbedStats {
        let c = &self.inner.counters;
        EmbedStats {
            runs: c.runs.load(Ordering::Relaxed),
            texts: c.texts.load(Ordering::Relaxed),
            cache_hits: c.cache_hits.load(Ordering::Relaxed),
            cache_misses: c.cache_misses.load(Ordering::Relaxed),
            shared_hits: c.shared_hits.load(Ordering::Relaxed),
            shared_puts: self.inner.shared.get().map(shared::SharedVectors::puts).unwrap_or_default(),
        }
    }

    async fn run(&self, kind: Kind, texts: Vec<String>) -> Result<Vec<Vec<f32>>, EmbedError> {
        let expected = texts.len();
        let (reply, answer) = oneshot::channel();
        let permit = self.inner.permits.clone().acquire_owned().await.map_err(|_| EmbedError::Stopped)?;
        self.inner.queue.push(kind, Job { texts, reply, permit })?;
        let vectors = answer.await.map_err(|_| EmbedError::Stopped)??;
        if vectors.len() != expected {
            return Err(EmbedError::Model(format!("asked for {expected} embeddings, got {}", vectors.len())));
        }
        Ok(vectors)
    }
}

/// The language centres of this model: from the cache file beside the model, or computed (about
/// two seconds: every reference sentence as a query and as a passage) and cached.
fn load_centres(
    model: &mut model::Model,
    config: &EmbedConfig,
    model_id: &str,
) -> Result<Centres, EmbedError> {
    let path = centering::cache_path(&config.model_dir, model_id);
    if let Some(centres) = centering::read_cache(&path) {
        return Ok(centres);
    }
    let texts = centering::reference_texts();
    let mut embed_all = |prefix: &str| -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut out = Vec::with_capacity(texts.len());
        for chunk in texts.chunks(config.max_batch) {
            let prefixed: Vec<String> = chunk.iter().map(|t| format!("{prefix}{t}")).collect();
            out.extend(model.embed(&prefixed)?);
        }
        Ok(out)
    };
    let queries = embed_all(&config.query_prefix)?;
    let passages = embed_all(&config.passage_prefix)?;
    let centres = Centres::from_reference(&queries, &passages);
    centering::write_cache(&path, &centres);
    Ok(centres)
}

/// What an [`Embedder`] has done since it was loaded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EmbedStats {
    /// Model runs (one per batch).
    pub runs: u64,
    /// Texts embedded by those runs (identical texts in one run count once).
    pub texts: u64,
    pub cache_hits: u64,
    /// Misses of this process's cache, whether or not Redis then had the vector.
    pub cache_misses: u64,
    /// Misses answered by another replica's vector through Redis (no model run).
    pub shared_hits: u64,
    /// The model's query vectors offered to the other replicas, by outcome.
    pub shared_puts: shared::SharedPuts,
}

#[derive(Default)]
struct Counters {
    runs: AtomicU64,
    texts: AtomicU64,
    cache_hits: AtomicU64,
    cache_misses: AtomicU64,
    shared_hits: AtomicU64,
}

/// Cosine similarity of two L2-normalized vectors: their dot product. Vectors of different
/// lengths (different models) score 0.
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    if a.len() != b.len() {
        return 0.0;
    }
    crate::vector::dot(a, b)
}

/// Sets `ORT_DYLIB_PATH` for this process, so that ort loads the library `path`.
///
/// ort reads the library's location only from that variable (the explicit `ort::init_from` is
/// not reachable through fastembed), and changing the environment is unsound while other threads
/// may read it.
///
/// # Safety
/// Call it before any other thread exists: first thing in `main`, before building the Tokio
/// runtime. Not from tests (the test harness runs tests on many threads).
pub unsafe fn export_ort_dylib_path(path: &Path) {
    // SAFETY: the caller promises that no other thread is running (see above).
    unsafe { std::env::set_var("ORT_DYLIB_PATH", path) };
}
