//! Loading the model: check the files and the ONNX Runtime library first (so a missing asset
//! is a clear error, not a panic deep inside ort), build the fastembed session, and derive the
//! model id from everything that shapes the vectors.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use fastembed::{
    InitOptionsUserDefined, Pooling, TextEmbedding, TextInitOptions, TokenizerFiles,
    UserDefinedEmbeddingModel,
};
use sha2::{Digest, Sha256};

use super::{EmbedConfig, EmbedError};

/// The files a local model folder must hold, besides the optional ones.
const MODEL_FILE: &str = "model.onnx";
const EXTERNAL_DATA_FILE: &str = "model.onnx_data";
const TOKENIZER_FILES: [&str; 4] =
    ["tokenizer.json", "config.json", "special_tokens_map.json", "tokenizer_config.json"];
const POOLING_CONFIG: &str = "1_Pooling/config.json";
/// Token limit of one text (prefix and special tokens included); longer texts are truncated.
const MAX_TOKENS: usize = 512;

/// A loaded model: owned by the embedding thread, which is its only user.
pub(super) struct Model {
    embedding: TextEmbedding,
}

impl Model {
    /// Embeds already-prefixed texts in one run; vectors are L2-normalized by fastembed.
    pub(super) fn embed(&mut self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        self.embedding.embed(texts, Some(texts.len())).map_err(|e| EmbedError::Model(e.to_string()))
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
    match &config.model_name {
        Some(name) => load_hub(config, name, options),
        None => load_local(config, options),
    }
}

fn load_local(config: &EmbedConfig, options: InitOptionsUserDefined) -> Result<Loaded, EmbedError> {
    let dir = &config.model_dir;
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
    id.part(if pooling == Pooling::Cls { b"pooling:cls" } else { b"pooling:mean" });
    id.part(&onnx);
    id.part(&tokenizer_files.tokenizer_file);
    id.part(&tokenizer_files.config_file);
    id.part(&tokenizer_files.special_tokens_map_file);
    id.part(&tokenizer_files.tokenizer_config_file);

    let mut model = UserDefinedEmbeddingModel::new(onnx, tokenizer_files).with_pooling(pooling);
    let external = dir.join(EXTERNAL_DATA_FILE);
    if external.exists() {
        let buffer = read(&external)?;
        id.part(&buffer);
        model = model.with_external_initializer(EXTERNAL_DATA_FILE.to_owned(), buffer);
    }
    let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "model".into());
    let embedding = guard_ort(|| TextEmbedding::try_new_from_user_defined(model, options))?;
    Ok(Loaded { model: Model { embedding }, model_id: id.finish(&name) })
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
    Ok(Loaded { model: Model { embedding }, model_id: id.finish(&info.model_code) })
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
