//! `GET /admin/v1/schemas` and `GET /admin/v1/schemas/{version}/{type}` (`console/API.md` §3.5):
//! the schema versions and their types, and one JSON Schema as loaded, from which the console
//! builds the record form.
//!
//! `SchemaSet` keeps compiled validators, not the documents, so a document is found by the
//! schema's origin: a built-in one from the binary (`schemas/` is embedded here too, a few KB),
//! an operator's file read again from its path. A `SchemaSet::document` that keeps the parsed JSON
//! at load time would be exact even if the file changed on disk since (docs/console.md, hooks).

use crate::error::ApiError;
use crate::memory::checks::schemas::SchemaSet;
use serde_json::{Value, json};

#[derive(rust_embed::Embed)]
#[folder = "schemas/"]
struct BuiltinSchemas;

/// `GET /admin/v1/schemas`: `{"data": [{"schema_version", "types": [...]}, ...]}`, sorted.
pub fn list(schemas: &SchemaSet) -> Value {
    let data: Vec<Value> = schemas
        .versions()
        .into_iter()
        .map(|version| json!({"types": schemas.types(&version), "schema_version": version}))
        .collect();
    json!({ "data": data })
}

/// `GET /admin/v1/schemas/{version}/{type}`: the document as loaded; a 404 naming the known
/// versions or types otherwise.
pub fn document(schemas: &SchemaSet, version: &str, record_type: &str) -> Result<Value, ApiError> {
    let Some(origin) = schemas.origin(version, record_type) else {
        let versions = schemas.versions();
        return Err(if versions.iter().any(|v| v == version) {
            ApiError::not_found(format!(
                "no type `{record_type}` in schema version {version}; known types: {}",
                schemas.types(version).join(", ")
            ))
        } else {
            ApiError::not_found(format!("no schema version `{version}`; known: {}", versions.join(", ")))
        });
    };
    let text = if origin.starts_with("built-in ") {
        BuiltinSchemas::get(&format!("{version}/{record_type}.json"))
            .map(|file| String::from_utf8_lossy(&file.data).into_owned())
            .ok_or_else(|| {
                ApiError::internal(format!("built-in schema {version}/{record_type} is not embedded"))
            })?
    } else {
        std::fs::read_to_string(origin)
            .map_err(|err| ApiError::internal(format!("cannot read schema file {origin} again: {err}")))?
    };
    serde_json::from_str(&text)
        .map_err(|err| ApiError::internal(format!("schema file {origin} no longer parses: {err}")))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn built_in_schemas_are_listed_and_served_as_written() {
        let schemas = SchemaSet::load(None).unwrap();
        let listed = list(&schemas);
        assert_eq!(listed["data"][0]["schema_version"], "v1");
        assert!(listed["data"][0]["types"].as_array().unwrap().contains(&json!("fact")));
        let fact = document(&schemas, "v1", "fact").unwrap();
        let on_disk: Value = serde_json::from_str(
            &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/schemas/v1/fact.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(fact, on_disk);
        let unknown_type = document(&schemas, "v1", "nope").unwrap_err();
        assert!(unknown_type.message().contains("customer_profile"), "{}", unknown_type.message());
        let unknown_version = document(&schemas, "v9", "fact").unwrap_err();
        assert!(unknown_version.message().contains("v1, v2"), "{}", unknown_version.message());
    }

    #[test]
    fn an_operators_file_is_read_from_where_it_was_loaded() {
        let dir =
            std::env::temp_dir().join(format!("memgate-console-schemas-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(dir.join("v3")).unwrap();
        let schema = json!({"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "ticket v3", "type": "object"});
        std::fs::write(dir.join("v3/ticket.json"), schema.to_string()).unwrap();
        let schemas = SchemaSet::load(Some(&dir)).unwrap();
        assert_eq!(document(&schemas, "v3", "ticket").unwrap(), schema);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
