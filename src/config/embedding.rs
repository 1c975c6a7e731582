//! `[embedding]`: the model, its runtime, and the thresholds calibrated for it. `embed` takes the
//! settled `EmbedConfig` and loads the model when the state is built.

use super::{cosine, invalid};
use crate::assets::{DEFAULT_MODEL, ORT_LIBRARY_FILE};
use crate::error::StartupError;
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// The semantic threshold calibrated for memgate's int8 multilingual-e5-small with language
/// centering, the default (docs/embedding.md, "Calibration"): int8 scores run about 0.01 below
/// the float32 model's, and 0.19 keeps LoCoMo's recall and records per question where 0.20 kept
/// them for float32 (which should set `embedding.similarity_threshold = 0.20`).
pub const DEFAULT_SIMILARITY: f32 = 0.19;
/// A near-duplicate write, same model and centering (docs/embedding.md). A twin must also keep
/// the same figures and negations (`memory`), since different short facts can score high too.
pub const DEFAULT_DEDUPE: f32 = 0.90;
/// The same two thresholds for the model's raw cosines (`language_centering = false`), which
/// bunch in 0.7–0.9 even for unrelated texts.
pub const RAW_SIMILARITY: f32 = 0.80;
pub const RAW_DEDUPE: f32 = 0.96;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawEmbedding {
    pub model_dir: Option<PathBuf>,
    pub ort_dylib_path: Option<PathBuf>,
    pub model_name: Option<String>,
    pub query_prefix: Option<String>,
    pub passage_prefix: Option<String>,
    pub threads: Option<usize>,
    pub max_batch: Option<usize>,
    pub cache_entries: Option<usize>,
    pub language_centering: Option<bool>,
    /// Default `DEFAULT_SIMILARITY`, or `RAW_SIMILARITY` without language centering.
    pub similarity_threshold: Option<f32>,
    /// Default `DEFAULT_DEDUPE`, or `RAW_DEDUPE` without language centering.
    pub dedupe_threshold: Option<f32>,
}

#[derive(Debug, Clone)]
pub struct EmbeddingConfig {
    pub model: EmbedConfig,
    /// Default semantic threshold for releases that set none; calibrated per model.
    pub similarity_threshold: f32,
    /// Cosine at or above which a write of the same type and scope updates its near twin.
    pub dedupe_threshold: f32,
}

/// How to build an `embed::Embedder`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmbedConfig {
    /// A local model folder: `model.onnx` (plus `model.onnx_data` if the graph keeps its weights
    /// outside), `tokenizer.json`, `config.json`, `special_tokens_map.json`,
    /// `tokenizer_config.json`, and optionally a sentence-transformers `1_Pooling/config.json`
    /// (CLS pooling when it says so; mean pooling otherwise). With `model_name` set, the folder
    /// where hub downloads are cached instead.
    pub model_dir: PathBuf,
    /// The ONNX Runtime shared library (>= 1.24). ort reads it from the `ORT_DYLIB_PATH`
    /// environment variable, so when this is set the variable must name the same file (see
    /// `embed::export_ort_dylib_path`). `None`: `ORT_DYLIB_PATH`, else the system's library path.
    pub ort_dylib_path: Option<PathBuf>,
    /// A fastembed hub model code (e.g. `intfloat/multilingual-e5-small`), for deployments with
    /// internet access; `None` uses the local `model_dir`.
    pub model_name: Option<String>,
    /// Put in front of every query (`"query: "` for e5 models, `""` for most others).
    pub query_prefix: String,
    /// Put in front of every passage (`"passage: "` for e5 models).
    pub passage_prefix: String,
    /// ONNX Runtime intra-op threads per model run. Default: every core (at most 8), so that
    /// background embedding (imports) uses the machine; queries still go first
    /// (docs/embedding.md, "Throughput").
    pub threads: usize,
    /// The most texts one model run takes (concurrent queries share runs; passage runs are
    /// bounded by time as well).
    pub max_batch: usize,
    /// How many query embeddings the cache keeps (0 turns it off).
    pub cache_entries: usize,
    /// Take each script's mean direction out of every vector (`embed::centering`). Changes every
    /// score: the thresholds must be the ones calibrated for it.
    pub language_centering: bool,
}

impl EmbedConfig {
    /// Defaults for the multilingual-e5-small model that scripts/fetch-assets puts under
    /// `repo_assets` (the repository's `.assets/`).
    pub fn default_for(repo_assets: &Path) -> Self {
        EmbedConfig {
            model_dir: repo_assets.join("models").join(DEFAULT_MODEL),
            ort_dylib_path: Some(repo_assets.join("onnxruntime").join(ORT_LIBRARY_FILE)),
            model_name: None,
            query_prefix: "query: ".to_owned(),
            passage_prefix: "passage: ".to_owned(),
            threads: default_threads(),
            max_batch: 64,
            cache_entries: 4096,
            language_centering: true,
        }
    }
}

/// Every core the process may use, at most 8 (beyond that one short run does not split well).
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get()).min(8)
}

impl RawEmbedding {
    pub fn settle(self) -> Result<EmbeddingConfig, StartupError> {
        // The model and its runtime by the search order of `assets`; a configured model folder
        // inside an assets folder brings the runtime beside it.
        let assets = crate::assets::find().unwrap_or_else(|| PathBuf::from(".assets"));
        let defaults = EmbedConfig::default_for(&assets);
        let ort_beside = self.model_dir.as_deref().and_then(crate::assets::runtime_beside);
        let model = EmbedConfig {
            model_dir: self.model_dir.unwrap_or(defaults.model_dir),
            ort_dylib_path: self.ort_dylib_path.or(ort_beside).or(defaults.ort_dylib_path),
            model_name: self.model_name.filter(|n| !n.is_empty()),
            query_prefix: self.query_prefix.unwrap_or(defaults.query_prefix),
            passage_prefix: self.passage_prefix.unwrap_or(defaults.passage_prefix),
            threads: self.threads.unwrap_or(defaults.threads),
            max_batch: self.max_batch.unwrap_or(defaults.max_batch),
            cache_entries: self.cache_entries.unwrap_or(defaults.cache_entries),
            language_centering: self.language_centering.unwrap_or(defaults.language_centering),
        };
        let (default_similarity, default_dedupe) = if model.language_centering {
            (DEFAULT_SIMILARITY, DEFAULT_DEDUPE)
        } else {
            (RAW_SIMILARITY, RAW_DEDUPE)
        };
        if model.threads == 0 || model.max_batch == 0 {
            return Err(invalid("embedding.threads", "threads and max_batch must be at least 1"));
        }
        Ok(EmbeddingConfig {
            model,
            similarity_threshold: cosine(
                "embedding.similarity_threshold",
                self.similarity_threshold.unwrap_or(default_similarity),
            )?,
            dedupe_threshold: cosine(
                "embedding.dedupe_threshold",
                self.dedupe_threshold.unwrap_or(default_dedupe),
            )?,
        })
    }
}
