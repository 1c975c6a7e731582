//! Where the embedding model and ONNX Runtime are, so that one binary runs from any directory.
//!
//! Everything else memgate needs ships inside the binary (schemas, templates, migrations); these
//! two are ~150 MB, fetched by `scripts/fetch-assets` into an `assets` folder laid out as
//! `models/<model>/` and `onnxruntime/<library>`. Search order, first match wins:
//!
//! 1. `MEMGATE_MODEL_DIR` / `embedding.model_dir` and `ORT_DYLIB_PATH` / `embedding.ort_dylib_path`,
//!    when set; a model folder that sits in an assets folder (`…/models/<model>`) also names the
//!    runtime beside it (`…/onnxruntime/`);
//! 2. `.assets/` in the working directory (a checkout);
//! 3. `.assets/` beside the binary or in a folder above it (`target/release/memgate` of a checkout);
//! 4. `/opt/memgate/` (the container image);
//! 5. `$XDG_DATA_HOME/memgate/`, else `~/.local/share/memgate/`.
//!
//! When none holds the model, the embedder's error lists where it looked and what to run.

use std::path::{Path, PathBuf};

/// The ONNX Runtime library file that scripts/fetch-assets extracts, under `onnxruntime/`.
pub const ORT_LIBRARY_FILE: &str = "libonnxruntime.so.1.31.1";
/// The default model's folder name under `models/`.
pub const DEFAULT_MODEL: &str = "multilingual-e5-small";

/// The assets folders to look in, in order (step 2 onward of the module comment).
pub fn candidates() -> Vec<PathBuf> {
    let mut out = vec![PathBuf::from(".assets")];
    if let Some(dir) = std::env::current_exe().ok().and_then(|exe| exe.parent().map(Path::to_path_buf)) {
        out.extend(dir.ancestors().map(|ancestor| ancestor.join(".assets")));
    }
    out.push(PathBuf::from("/opt/memgate"));
    match std::env::var_os("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
        Some(data) => out.push(PathBuf::from(data).join("memgate")),
        None => {
            if let Some(home) = std::env::var_os("HOME").filter(|v| !v.is_empty()) {
                out.push(PathBuf::from(home).join(".local/share/memgate"));
            }
        }
    }
    out
}

/// The first candidate that holds the default model, if any.
pub fn find() -> Option<PathBuf> {
    candidates().into_iter().find(|dir| holds_model(dir))
}

fn holds_model(dir: &Path) -> bool {
    dir.join("models").join(DEFAULT_MODEL).join("model.onnx").is_file()
}

/// The runtime that belongs with a model folder inside an assets folder, if it is there.
pub fn runtime_beside(model_dir: &Path) -> Option<PathBuf> {
    let assets = model_dir.parent()?.parent()?;
    let library = assets.join("onnxruntime").join(ORT_LIBRARY_FILE);
    library.is_file().then_some(library)
}

/// The runtime library by the search order: beside `MEMGATE_MODEL_DIR`'s model, else in the
/// first assets folder that holds the model.
pub fn runtime() -> Option<PathBuf> {
    let from_env = std::env::var_os("MEMGATE_MODEL_DIR").filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(beside) = from_env.as_deref().and_then(runtime_beside) {
        return Some(beside);
    }
    let library = find()?.join("onnxruntime").join(ORT_LIBRARY_FILE);
    library.is_file().then_some(library)
}

/// What to tell an operator when the model is nowhere: where it was looked for, and how to get it.
pub fn not_found_help() -> String {
    let looked: Vec<String> =
        candidates().iter().map(|dir| dir.join("models").join(DEFAULT_MODEL).display().to_string()).collect();
    format!(
        "the embedding model was not found (looked in {}); run scripts/fetch-assets in a memgate checkout, \
         or set MEMGATE_MODEL_DIR to the model folder and ORT_DYLIB_PATH to libonnxruntime",
        looked.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_model_in_an_assets_folder_brings_its_runtime() {
        let root = std::env::temp_dir().join(format!("memgate-assets-{}", uuid::Uuid::new_v4().simple()));
        let model = root.join("models").join(DEFAULT_MODEL);
        std::fs::create_dir_all(&model).unwrap();
        assert_eq!(runtime_beside(&model), None);
        std::fs::create_dir_all(root.join("onnxruntime")).unwrap();
        std::fs::write(root.join("onnxruntime").join(ORT_LIBRARY_FILE), b"").unwrap();
        assert_eq!(runtime_beside(&model), Some(root.join("onnxruntime").join(ORT_LIBRARY_FILE)));
        assert!(!holds_model(&root));
        std::fs::write(model.join("model.onnx"), b"").unwrap();
        assert!(holds_model(&root));
        let _ = std::fs::remove_dir_all(root);
    }

    #[test]
    fn the_search_starts_in_the_working_directory_and_says_where_it_looked() {
        assert_eq!(candidates()[0], PathBuf::from(".assets"));
        assert!(candidates().contains(&PathBuf::from("/opt/memgate")));
        assert!(not_found_help().contains("scripts/fetch-assets"));
    }
}
