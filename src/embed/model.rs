//! Loading the model: check the files and the ONNX Runtime library first (so a missing asset
//! is a clear error, not a panic deep inside ort), build the fastembed session, and derive the
//! model id from everything that shapes the vectors.
//!
//! Two kinds of model folder:
//! - a standard one (any exported BERT-like graph with its `tokenizer.json`): fastembed tokenizes
//!   and pools, as for any user-defined model;
//! - memgate's own int8 build (scripts/assets/quantize_e5.py), marked by a `memgate.json` with
//!   `"input": "id-pairs-512"`: memgate tokenizes with its compact Unigram (`tokenizer.rs`,
//!   ~10 MB instead of the ~290 MB `tokenizers` needs for XLM-R's vocabulary), hands fastembed
//!   the ids as pairs of small numbers, and the graph pools by itself.
//!
//! Session options, for a small resident set and steady latency (docs/embedding.md, "Memory"):
//! fastembed's defaults (all graph optimizations, the CPU arena, memory patterns) plus no
//! spinning when more than one intra-op thread, and ONNX Runtime's exact U8U8 kernels on x86
//! CPUs without VNNI, where the fast U8S8 ones saturate (on VNNI CPUs both agree bit for bit and
//! the exact ones cost 50% more time, so they stay off there).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use fastembed::{
    InitOptionsUserDefined, Pooling, TextEmbedding, TextInitOptions, TokenizerFiles,
    UserDefinedEmbeddingModel,
};
use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::tokenizer::{self, Tokenizer};
use super::{EmbedConfig, EmbedError};

/// The files a local model folder must hold, besides the optional ones.
const MODEL_FILE: &str = "model.onnx";
const EXTERNAL_DATA_FILE: &str = "model.onnx_data";
const TOKENIZER_FILES: [&str; 4] =
    ["tokenizer.json", "config.json", "special_tokens_map.json", "tokenizer_config.json"];
const POOLING_CONFIG: &str = "1_Pooling/config.json";
/// Present in the folders scripts/assets/quantize_e5.py writes: how to feed that graph.
const MANIFEST: &str = "memgate.json";
/// The one input scheme a manifest may name today.
const ID_PAIRS: &str = "id-pairs-512";
/// Token limit of one text (prefix and special tokens included); longer texts are truncated.
pub(super) const MAX_TOKENS: usize = 512;

/// A loaded model: owned by the embedding thread, which is its only user.
pub(super) struct Model {
    embedding: TextEmbedding,
    input: Input,
}

enum Input {
    /// fastembed tokenizes the text with the folder's tokenizer.json.
    Text,
    /// memgate tokenizes; the graph reads each id as two numbers.
    IdPairs(Tokenizer),
}

/// A text ready for a model run: its length in tokens, to plan runs, and what fastembed gets.
pub(super) struct Prepared {
    pub(super) tokens: usize,
    input: String,
}

impl Model {
    /// Tokenizes one already-prefixed text (cut at 512 tokens).
    pub(super) fn prepare(&self, text: String) -> Result<Prepared, EmbedError> {
        match &self.input {
            Input::Text => {
                let encoding = self
                    .embedding
                    .tokenizer
                    .encode(text.as_str(), true)
                    .map_err(|e| EmbedError::Model(format!("tokenizing failed: {e}")))?;
                Ok(Prepared { tokens: encoding.len(), input: text })
            }
            Input::IdPairs(tokenizer) => {
                let ids = tokenizer.encode(&text)?;
                Ok(Prepared { tokens: ids.len(), input: tokenizer::pairs_text(&ids) })
            }
        }
    }

    /// Embeds prepared texts in one run; vectors are L2-normalized by fastembed. The run pads
    /// every text to the longest one.
    pub(super) fn run(&mut self, batch: &[&Prepared]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        let inputs: Vec<&str> = batch.iter().map(|p| p.input.as_str()).collect();
        self.embedding.embed(&inputs, Some(inputs.len())).map_err(|e| EmbedError::Model(e.to_string()))
    }

    /// Prepares and embeds already-prefixed texts in one run (loading, centres).
    pub(super) fn embed(&mut self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let prepared = texts.iter().map(|t| self.prepare(t.clone())).collect::<Result<Vec<_>, _>>()?;
        self.run(&prepared.iter().collect::<Vec<_>>())
    }
}

pub(super) struct Loaded {
    pub(super) model: Model,
    pub(super) model_id: String,
}

pub(super) fn load(config: &EmbedConfig) -> Result<Loaded, EmbedError> {
    check_ort_library(config.ort_dylib_path.as_deref())?;
    let mut options =
        InitOptionsUserDefined::new().with_max_length(MAX_TOKENS).with_intra_threads(config.threads);
    // An idle ORT worker spins for a while waiting for more work; with more than one thread on a
    // small machine that spinning steals the CPU from the other requests (docs/embedding.md).
    if config.threads > 1 {
        options = options.with_session_config("session.intra_op.allow_spinning", "0");
    }
    if needs_exact_int8_kernels() {
        options = options.with_session_config("session.x64quantprecision", "1");
    }
    match &config.model_name {
        Some(name) => load_hub(config, name, options),
        None => load_local(config, options),
    }
}

/// x86 CPUs without VNNI multiply u8 by s8 with 16-bit saturation in ONNX Runtime's fast
/// kernels, which can wreck int8 results; the exact kernels are slower but right.
fn needs_exact_int8_kernels() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        !(std::arch::is_x86_feature_detected!("avx512vnni") || std::arch::is_x86_feature_detected!("avxvnni"))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `memgate.json`: how memgate feeds a graph it built itself.
#[derive(Debug, Deserialize)]
struct Manifest {
    input: String,
}

fn load_local(config: &EmbedConfig, options: InitOptionsUserDefined) -> Result<Loaded, EmbedError> {
    let dir = &config.model_dir;
    let manifest_path = dir.join(MANIFEST);
    let manifest = if manifest_path.exists() {
        let bytes = read(&manifest_path)?;
        let manifest: Manifest = serde_json::from_slice(&bytes)
            .map_err(|e| EmbedError::Model(format!("{}: {e}", manifest_path.display())))?;
        if manifest.input != ID_PAIRS {
            return Err(EmbedError::Model(format!(
                "{} asks for input {:?}, which this memgate does not know (it knows {ID_PAIRS:?}): run scripts/fetch-assets again",
                manifest_path.display(),
                manifest.input
            )));
        }
        Some(bytes)
    } else {
        None
    };
    let onnx = read(&dir.join(MODEL_FILE))?;
    let [tokenizer_file, config_file, special_tokens_map_file, tokenizer_config_file] =
        TOKENIZER_FILES.map(|name| read(&dir.join(name)));
    let tokenizer_files = TokenizerFiles {
        tokenizer_file: tokenizer_file?,
        config_file: config_file?,
        special_tokens_map_file: special_tokens_map_file?,
        tokenizer_config_file: tokenizer_config_file?,
    };
    let pooling = pooling_of(dir)?;

    let mut id = IdHasher::new(&config.query_prefix, &config.passage_prefix);
    if let Some(manifest) = &manifest {
        id.part(b"input:id-pairs-512");
        id.part(manifest);
    }
    id.part(if pooling == Pooling::Cls { b"pooling:cls" } else { b"pooling:mean" });
    id.part(&onnx);
    id.part(&tokenizer_files.tokenizer_file);
    id.part(&tokenizer_files.config_file);
    id.part(&tokenizer_files.special_tokens_map_file);
    id.part(&tokenizer_files.tokenizer_config_file);
    let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "model".into());

    if manifest.is_some() {
        let model = UserDefinedEmbeddingModel::new(onnx, pairs_tokenizer_files()).with_pooling(Pooling::Mean);
        let options = options.with_max_length(2 * MAX_TOKENS);
        let embedding = guard_ort(|| TextEmbedding::try_new_from_user_defined(model, options))?;
        let tokenizer = compact_tokenizer(&embedding, &tokenizer_files.tokenizer_file)?;
        let model = Model { embedding, input: Input::IdPairs(tokenizer) };
        return Ok(Loaded { model, model_id: id.finish(&name) });
    }

    let mut model = UserDefinedEmbeddingModel::new(onnx, tokenizer_files).with_pooling(pooling);
    let external = dir.join(EXTERNAL_DATA_FILE);
    if external.exists() {
        let buffer = read(&external)?;
        id.part(&buffer);
        model = model.with_external_initializer(EXTERNAL_DATA_FILE.to_owned(), buffer);
    }
    let embedding = guard_ort(|| TextEmbedding::try_new_from_user_defined(model, options))?;
    Ok(Loaded { model: Model { embedding, input: Input::Text }, model_id: id.finish(&name) })
}

/// The compact tokenizer for a Unigram `tokenizer.json`; `embedding` only lends the type of
/// fastembed's tokenizer for the word splitter (see `tokenizer.rs`).
fn compact_tokenizer(embedding: &TextEmbedding, tokenizer_json: &[u8]) -> Result<Tokenizer, EmbedError> {
    let parsed = Tokenizer::parse(tokenizer_json)?;
    let splitter = parse_like(&embedding.tokenizer, &parsed.splitter_json)?;
    let split = move |text: &str| -> Result<Vec<(u32, String)>, String> {
        let encoding = splitter.encode(text, false).map_err(|e| e.to_string())?;
        Ok(encoding.get_ids().iter().copied().zip(encoding.get_tokens().iter().cloned()).collect())
    };
    Tokenizer::new(parsed, split, MAX_TOKENS)
}

/// For tests: a model folder's tokenizer.json as the `tokenizers` crate runs it (ids with the
/// markers, cut at 512 tokens like fastembed cuts them) and as the compact tokenizer does.
#[cfg(test)]
impl Model {
    #[allow(clippy::type_complexity)]
    pub(super) fn tokenizer_pair(
        &self,
        tokenizer_json: &[u8],
    ) -> Result<(impl Fn(&str) -> Vec<u32> + use<>, impl Fn(&str) -> Vec<u32> + use<>), EmbedError> {
        let text = std::str::from_utf8(tokenizer_json).map_err(|e| EmbedError::Model(e.to_string()))?;
        let reference = parse_like(&self.embedding.tokenizer, text)?;
        let reference = move |text: &str| {
            let mut ids = reference.encode(text, true).map(|e| e.get_ids().to_vec()).unwrap_or_default();
            if ids.len() > MAX_TOKENS {
                let last = ids[ids.len() - 1];
                ids.truncate(MAX_TOKENS - 1);
                ids.push(last);
            }
            ids
        };
        let compact = compact_tokenizer(&self.embedding, tokenizer_json)?;
        Ok((reference, move |text: &str| compact.encode(text).unwrap_or_default()))
    }
}

/// fastembed's side of an `id-pairs-512` graph: the words `0` … `511`, padded with `1`.
fn pairs_tokenizer_files() -> TokenizerFiles {
    TokenizerFiles {
        tokenizer_file: tokenizer::pairs_tokenizer_json().into_bytes(),
        config_file: br#"{"pad_token_id": 1}"#.to_vec(),
        special_tokens_map_file: b"{}".to_vec(),
        tokenizer_config_file: format!(r#"{{"model_max_length": {}, "pad_token": "1"}}"#, 2 * MAX_TOKENS)
            .into_bytes(),
    }
}

/// A tokenizer of the same type as `like` (fastembed's, from the `tokenizers` crate, which
/// memgate does not depend on by name), parsed from its JSON.
fn parse_like<T: std::str::FromStr>(_like: &T, json: &str) -> Result<T, EmbedError>
where
    T::Err: std::fmt::Display,
{
    json.parse::<T>().map_err(|e| EmbedError::Model(format!("building the word splitter failed: {e}")))
}

fn load_hub(config: &EmbedConfig, name: &str, options: InitOptionsUserDefined) -> Result<Loaded, EmbedError> {
    let info = TextEmbedding::list_supported_models()
        .into_iter()
        .find(|info| info.model_code.eq_ignore_ascii_case(name) || format!("{:?}", info.model) == name)
        .ok_or_else(|| EmbedError::UnknownModel(name.to_owned()))?;
    let mut hub = TextInitOptions::new(info.model.clone())
        .with_cache_dir(config.model_dir.clone())
        .with_show_download_progress(false)
        .with_max_length(MAX_TOKENS);
    hub.intra_threads = options.intra_threads;
    hub.session_config = options.session_config;
    let mut id = IdHasher::new(&config.query_prefix, &config.passage_prefix);
    id.part(b"fastembed-hub");
    id.part(info.model_code.as_bytes());
    let embedding = guard_ort(|| TextEmbedding::try_new(hub))?;
    Ok(Loaded { model: Model { embedding, input: Input::Text }, model_id: id.finish(&info.model_code) })
}

/// Mean pooling (what e5 and MiniLM want) unless a sentence-transformers pooling config asks
/// for the CLS token.
fn pooling_of(dir: &Path) -> Result<Pooling, EmbedError> {
    let path = dir.join(POOLING_CONFIG);
    if !path.exists() {
        return Ok(Pooling::Mean);
    }
    let value: serde_json::Value = serde_json::from_slice(&read(&path)?)
        .map_err(|e| EmbedError::Model(format!("{}: {e}", path.display())))?;
    let cls = value.get("pooling_mode_cls_token").and_then(serde_json::Value::as_bool).unwrap_or(false);
    Ok(if cls { Pooling::Cls } else { Pooling::Mean })
}

fn read(path: &Path) -> Result<Vec<u8>, EmbedError> {
    std::fs::read(path).map_err(|source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            EmbedError::ModelFileMissing(path.to_path_buf())
        } else {
            EmbedError::ModelFileUnreadable { path: path.to_path_buf(), source }
        }
    })
}

/// ort loads the library named by `ORT_DYLIB_PATH` at its first use and panics if it cannot.
/// Check beforehand what can be checked, so the usual mistakes get a message that says what to do.
fn check_ort_library(configured: Option<&Path>) -> Result<(), EmbedError> {
    let exported = std::env::var_os("ORT_DYLIB_PATH").filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(configured) = configured.filter(|path| !path.exists()) {
        return Err(EmbedError::OrtLibraryMissing(configured.into()));
    }
    if let Some(exported) = exported.as_ref().filter(|path| !path.exists()) {
        return Err(EmbedError::OrtLibraryMissing(exported.clone()));
    }
    match (configured, exported) {
        (Some(configured), Some(exported)) if !same_file(configured, &exported) => {
            Err(EmbedError::OrtPathMismatch { configured: configured.into(), found: exported })
        }
        (Some(configured), None) => Err(EmbedError::OrtPathNotExported(configured.into())),
        // Both unset: ort looks for libonnxruntime.so on the system's library path, and
        // guard_ort reports it if that fails.
        _ => Ok(()),
    }
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// Runs a fastembed constructor, turning ort's panic on a library that fails to load (wrong
/// file, too old, missing dependencies) into an error.
fn guard_ort<T>(build: impl FnOnce() -> fastembed::Result<T>) -> Result<T, EmbedError> {
    match catch_unwind(AssertUnwindSafe(build)) {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(EmbedError::Model(e.to_string())),
        Err(panic) => {
            let message = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("ort panicked while loading");
            Err(EmbedError::OrtLoad(message.to_owned()))
        }
    }
}

/// Files up to this size are hashed whole for the model id; larger ones are sampled.
const HASH_WHOLE_UP_TO: usize = 8 << 20;
/// How many windows of a large file the model id hashes, and how big each is (4 MiB in all).
const SAMPLE_WINDOWS: usize = 256;
const SAMPLE_WINDOW: usize = 16 << 10;

/// Builds the model id: `<name>:<16 hex digits>` over everything that changes the vectors.
///
/// A large file (the ONNX graph, a big tokenizer.json) enters by its length and 256 windows
/// spread evenly over it, first and last included, rather than whole: hashing 150 MB costs
/// seconds in unoptimized builds (tests, end-to-end runs), and any retrained, re-quantized or
/// re-converted model differs in length or in those windows. The id tells models apart; it is
/// not an integrity check (scripts/fetch-assets pins full sha256 hashes for that).
struct IdHasher(Sha256);

impl IdHasher {
    fn new(query_prefix: &str, passage_prefix: &str) -> Self {
        let mut hasher = IdHasher(Sha256::new());
        hasher.part(b"memgate-embed-v1");
        hasher.part(query_prefix.as_bytes());
        hasher.part(passage_prefix.as_bytes());
        hasher
    }

    /// Length-prefixed, so parts cannot run into each other.
    fn part(&mut self, bytes: &[u8]) {
        self.0.update((bytes.len() as u64).to_le_bytes());
        if bytes.len() <= HASH_WHOLE_UP_TO {
            self.0.update(bytes);
            return;
        }
        let last_start = bytes.len() - SAMPLE_WINDOW;
        for i in 0..SAMPLE_WINDOWS {
            let start = last_start * i / (SAMPLE_WINDOWS - 1);
            self.0.update(&bytes[start..start + SAMPLE_WINDOW]);
        }
    }

    fn finish(self, name: &str) -> String {
        let digest = self.0.finalize();
        let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
        format!("{name}:{hex}")
    }
}
