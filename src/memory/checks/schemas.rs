//! The JSON Schemas a record's `content` must satisfy: `schemas/<schema_version>/<type>.json`.
//!
//! The built-in sets (`schemas/v1`, `schemas/v2` in the repository) are compiled into the binary;
//! an operator's schema directory adds types and versions, or replaces a built-in file of the same
//! version and type. Everything is compiled once, at startup, into a `SchemaSet`; a file that is
//! not valid JSON, not draft 2020-12, or does not compile stops startup with the file's name.
//! Validation never touches the network or the disk: a `$ref` to anything outside its own file
//! fails at compile time. `docs/schemas.md` describes the built-in types and how versions differ.

use super::json_path::{child_key, from_pointer_in, parent};
use jsonschema::error::ValidationErrorKind;
use jsonschema::{Draft, ValidationError, Validator};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// The schema dialect every file must use (or leave implicit).
const DRAFT_2020_12: &str = "https://json-schema.org/draft/2020-12/schema";

macro_rules! builtin {
    ($version:literal, $type:literal) => {
        ($version, $type, include_str!(concat!("../../../schemas/", $version, "/", $type, ".json")))
    };
}

/// `(schema_version, type, file text)` for every built-in schema.
const BUILTIN: &[(&str, &str, &str)] = &[
    builtin!("v1", "customer_profile"),
    builtin!("v1", "product_spec"),
    builtin!("v1", "internal_sop"),
    builtin!("v1", "conversation_summary"),
    builtin!("v1", "fact"),
    builtin!("v1", "preference"),
    builtin!("v1", "decision"),
    builtin!("v1", "task"),
    builtin!("v2", "customer_profile"),
    builtin!("v2", "product_spec"),
    builtin!("v2", "internal_sop"),
    builtin!("v2", "conversation_summary"),
    builtin!("v2", "fact"),
    builtin!("v2", "preference"),
    builtin!("v2", "decision"),
    builtin!("v2", "task"),
];

/// Why the schemas could not be loaded. Each message names the file to fix.
#[derive(Debug, thiserror::Error)]
pub enum SchemaLoadError {
    #[error("cannot read schema directory {dir}: {source}")]
    ReadDir { dir: String, source: std::io::Error },
    #[error("cannot read schema file {file}: {source}")]
    ReadFile { file: String, source: std::io::Error },
    #[error("schema file {file} is not valid JSON: {source}")]
    Parse { file: String, source: serde_json::Error },
    #[error("schema file {file} does not compile: {message}")]
    Compile { file: String, message: String },
    #[error("schema file {file}: {message}")]
    Invalid { file: String, message: String },
}

/// One problem with a record's content, named by JSON path.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize)]
pub struct SchemaProblem {
    pub path: String,
    /// `schema_violation`, `unknown_type` or `unknown_schema_version`.
    pub kind: String,
    pub message: String,
}

impl SchemaProblem {
    fn new(path: String, kind: &str, message: String) -> Self {
        SchemaProblem { path, kind: kind.to_owned(), message }
    }
}

/// Every schema, compiled: versions → types → validator.
#[derive(Debug)]
pub struct SchemaSet {
    versions: BTreeMap<String, BTreeMap<String, CompiledSchema>>,
}

#[derive(Debug)]
struct CompiledSchema {
    /// Where it came from, for logs: a built-in name or the operator's file path.
    origin: String,
    validator: Validator,
}

/// A schema's text before compiling, and where it came from.
struct SchemaSource {
    origin: String,
    text: String,
}

impl SchemaSet {
    /// Built-in schemas (embedded in the binary from schemas/v1 and schemas/v2) plus every
    /// `*.json` under `dir/<version>/` (a file there overrides a built-in of the same version and
    /// type; a directory that does not exist adds nothing). A schema that does not compile is a
    /// startup error naming its file.
    pub fn load(dir: Option<&Path>) -> Result<SchemaSet, SchemaLoadError> {
        let mut sources: BTreeMap<(String, String), SchemaSource> = BTreeMap::new();
        for (version, record_type, text) in BUILTIN {
            sources.insert(
                ((*version).to_owned(), (*record_type).to_owned()),
                SchemaSource {
                    origin: format!("built-in schemas/{version}/{record_type}.json"),
                    text: (*text).to_owned(),
                },
            );
        }
        if let Some(dir) = dir {
            read_schema_dir(dir, &mut sources)?;
        }
        let mut versions: BTreeMap<String, BTreeMap<String, CompiledSchema>> = BTreeMap::new();
        for ((version, record_type), source) in sources {
            let validator = compile(&source)?;
            versions
                .entry(version)
                .or_default()
                .insert(record_type, CompiledSchema { origin: source.origin, validator });
        }
        Ok(SchemaSet { versions })
    }

    /// Every schema version, sorted.
    pub fn versions(&self) -> Vec<String> {
        self.versions.keys().cloned().collect()
    }

    /// The record types of one version, sorted; empty for an unknown version.
    pub fn types(&self, version: &str) -> Vec<String> {
        self.versions.get(version).map(|types| types.keys().cloned().collect()).unwrap_or_default()
    }

    /// Where the schema for `version` and `record_type` came from: `built-in schemas/v1/fact.json`
    /// or the operator's file path. For startup logs.
    pub fn origin(&self, version: &str, record_type: &str) -> Option<&str> {
        self.versions.get(version)?.get(record_type).map(|schema| schema.origin.as_str())
    }

    /// Ok, or every problem: unknown version, unknown type for that version, or each schema
    /// violation with the JSON path of the offending value under `base` (e.g.
    /// "$.content.preferred_language") and a message that says what is wrong. A missing required
    /// field and a field the schema does not allow are named by their own path
    /// (`$.content.name`). Unknown versions and types are reported at the envelope's
    /// `schema_version` and `type` fields, the siblings of `base` (`$.schema_version`).
    /// Problems come sorted by path. Messages never quote the content's values, which may hold
    /// what should not be echoed into logs.
    pub fn validate(
        &self,
        version: &str,
        record_type: &str,
        content: &Value,
        base: &str,
    ) -> Result<(), Vec<SchemaProblem>> {
        let Some(types) = self.versions.get(version) else {
            let known = self.versions().join(", ");
            return Err(vec![SchemaProblem::new(
                sibling(base, "schema_version"),
                "unknown_schema_version",
                format!("unknown schema_version {}; this gateway has schemas for: {known}", quoted(version)),
            )]);
        };
        let Some(schema) = types.get(record_type) else {
            let known = types.keys().cloned().collect::<Vec<_>>().join(", ");
            return Err(vec![SchemaProblem::new(
                sibling(base, "type"),
                "unknown_type",
                format!(
                    "unknown type {} for schema_version {version}; known types: {known} \
                     (an operator adds a type with a schema file {version}/<type>.json)",
                    quoted(record_type)
                ),
            )]);
        };
        // A set, not a search of the list: content of many unknown fields is one problem each,
        // and a search per problem made checking it quadratic.
        let mut problems: Vec<SchemaProblem> = std::collections::HashSet::<SchemaProblem>::from_iter(
            schema
                .validator
                .iter_errors(content)
                .flat_map(|error| describe(&error, content, base, version, record_type)),
        )
        .into_iter()
        .collect();
        // By path, so that answers do not change with the validator's internal keyword order.
        problems.sort_by(|a, b| (&a.path, &a.message, &a.kind).cmp(&(&b.path, &b.message, &b.kind)));
        if problems.is_empty() { Ok(()) } else { Err(problems) }
    }
}

/// Reads `dir/<version>/*.json` into `sources`, over any built-in of the same version and type.
/// Entries are read in name order, so the first error reported is always the same one.
fn read_schema_dir(
    dir: &Path,
    sources: &mut BTreeMap<(String, String), SchemaSource>,
) -> Result<(), SchemaLoadError> {
    let dir_error = |source| SchemaLoadError::ReadDir { dir: dir.display().to_string(), source };
    let version_dirs = match sorted_entries(dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(error) => return Err(dir_error(error)),
    };
    for version_dir in version_dirs {
        let Some(version) = visible_name(&version_dir) else {
            continue;
        };
        if !version_dir.is_dir() {
            continue;
        }
        if !is_name(&version, |b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_')) {
            return Err(SchemaLoadError::Invalid {
                file: version_dir.display().to_string(),
                message: "a schema version directory is named with letters, digits, `.`, `-` \
                          and `_` only (v1, v2, 2024-06)"
                    .to_owned(),
            });
        }
        let files = sorted_entries(&version_dir)
            .map_err(|source| SchemaLoadError::ReadDir { dir: version_dir.display().to_string(), source })?;
        for file in files {
            let Some(name) = visible_name(&file) else {
                continue;
            };
            let Some(record_type) = name.strip_suffix(".json") else {
                continue;
            };
            if !file.is_file() {
                continue;
            }
            let file_name = file.display().to_string();
            if !is_name(record_type, |b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
                || !record_type.starts_with(|c: char| c.is_ascii_lowercase())
            {
                return Err(SchemaLoadError::Invalid {
                    file: file_name,
                    message: "the file name is the record type: lower-case letters, digits and \
                              `_`, starting with a letter (order_note.json)"
                        .to_owned(),
                });
            }
            let text = std::fs::read_to_string(&file)
                .map_err(|source| SchemaLoadError::ReadFile { file: file_name.clone(), source })?;
            sources
                .insert((version.clone(), record_type.to_owned()), SchemaSource { origin: file_name, text });
        }
    }
    Ok(())
}

fn sorted_entries(dir: &Path) -> std::io::Result<Vec<std::path::PathBuf>> {
    let mut entries =
        std::fs::read_dir(dir)?.map(|entry| entry.map(|e| e.path())).collect::<std::io::Result<Vec<_>>>()?;
    entries.sort();
    Ok(entries)
}

/// The entry's file name, unless it is hidden (`.DS_Store`, editor swap files) or not UTF-8.
fn visible_name(path: &Path) -> Option<String> {
    let name = path.file_name()?.to_str()?;
    (!name.starts_with('.')).then(|| name.to_owned())
}

fn is_name(name: &str, allowed: impl Fn(u8) -> bool) -> bool {
    !name.is_empty() && name.bytes().all(allowed)
}

fn compile(source: &SchemaSource) -> Result<Validator, SchemaLoadError> {
    let file = || source.origin.clone();
    let schema: Value = serde_json::from_str(&source.text)
        .map_err(|error| SchemaLoadError::Parse { file: file(), source: error })?;
    if !schema.is_object() {
        return Err(SchemaLoadError::Invalid {
            file: file(),
            message: "a schema file holds one JSON object".to_owned(),
        });
    }
    match schema.get("$schema") {
        None => {}
        Some(Value::String(dialect)) if dialect.trim_end_matches('#') == DRAFT_2020_12 => {}
        Some(other) => {
            return Err(SchemaLoadError::Invalid {
                file: file(),
                message: format!(
                    "`$schema` is {other}; memgate's schemas are JSON Schema draft 2020-12 \
                     (\"{DRAFT_2020_12}\", or leave `$schema` out)"
                ),
            });
        }
    }
    // Formats are assertions here (2020-12 leaves them as annotations by default): a
    // `"format": "email"` that accepted anything would only pretend to check. An unknown format
    // name is a typo, refused now rather than ignored forever.
    jsonschema::options()
        .with_draft(Draft::Draft202012)
        .should_validate_formats(true)
        .should_ignore_unknown_formats(false)
        .build(&schema)
        .map_err(|error| {
            let location = error.instance_path().as_str();
            let message = if location.is_empty() {
                error.to_string()
            } else {
                format!("{error} (at {location} in the schema)")
            };
            SchemaLoadError::Compile { file: file(), message }
        })
}

/// The problems one validation error stands for. Missing and unexpected fields become one
/// problem per field, at the field's own path, which is the place the writer has to edit.
fn describe(
    error: &ValidationError<'_>,
    content: &Value,
    base: &str,
    version: &str,
    record_type: &str,
) -> Vec<SchemaProblem> {
    let path = from_pointer_in(base, error.instance_path().as_str(), content);
    let violation = |path: String, message: String| SchemaProblem::new(path, "schema_violation", message);
    match error.kind() {
        ValidationErrorKind::Required { property } => {
            let name = property.as_str().map_or_else(|| property.to_string(), str::to_owned);
            vec![violation(child_key(&path, &name), format!("required field `{name}` is missing"))]
        }
        ValidationErrorKind::AdditionalProperties { unexpected }
        | ValidationErrorKind::UnevaluatedProperties { unexpected } => unexpected
            .iter()
            .map(|name| {
                violation(
                    child_key(&path, name),
                    format!(
                        "field `{name}` is not part of the {record_type} {version} schema \
                         (misspelt, or meant for another schema_version?)"
                    ),
                )
            })
            .collect(),
        _ => vec![violation(path, error.masked().to_string())],
    }
}

/// The path of the envelope field `name` beside `base` (`$.content` → `$.schema_version`).
fn sibling(base: &str, name: &str) -> String {
    parent(base).map_or_else(|| base.to_owned(), |up| child_key(up, name))
}

/// A caller's string, quoted and cut short, for a message.
fn quoted(value: &str) -> String {
    const MAX_CHARS: usize = 64;
    if value.chars().count() > MAX_CHARS {
        let cut: String = value.chars().take(MAX_CHARS).collect();
        format!("{cut:?}…")
    } else {
        format!("{value:?}")
    }
}

#[cfg(test)]
mod tests;
