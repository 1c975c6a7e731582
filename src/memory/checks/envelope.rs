//! Checking a record envelope on the way in. Every problem is collected — not just the first — and
//! named by JSON path and kind, so a writer can fix a record in one go (up to
//! `problems::MAX_PROBLEMS` of them; the rest are counted). Secrets are named by kind and path
//! only; the offending text is never repeated back.
//!
//! Sizes come first: content or metadata over `records.max_content_bytes` is refused before its
//! schema is checked or its strings scanned for secrets, so what those checks cost is bounded by
//! the limit rather than by the body.

use crate::clock::parse_rfc3339_ms;
use crate::index::terms::{MIN_ALIAS_WEIGHT, Unspecific, alias_specificity};
pub use crate::memory::checks::problems::Problem;
use crate::memory::checks::problems::Problems;
use crate::memory::checks::schemas::SchemaSet;
use crate::memory::checks::{json_path, secrets};
use crate::record::{Envelope, OPEN_END_MS, Status, is_valid_scope};
use serde_json::{Map, Value};
use std::collections::HashSet;

const FIELDS: [&str; 13] = [
    "id",
    "type",
    "schema_version",
    "scope",
    "valid_from",
    "valid_until",
    "priority",
    "key",
    "aliases",
    "content",
    "metadata",
    "status",
    // Server-kept, accepted on import so an export re-imports; the value is ignored.
    "tenant",
];

/// Server-kept fields that an export carries and an import or update ignores.
const SERVER_FIELDS: [&str; 6] =
    ["revision", "created_at", "updated_at", "last_accessed_at", "access_count", "tenant"];

/// What a record's envelope must satisfy beyond its schema.
pub struct Rules<'a> {
    pub schemas: &'a SchemaSet,
    pub max_content_bytes: usize,
    pub now_ms: i64,
}

/// Parses and checks one envelope; `Err` holds every problem found (at most
/// `problems::MAX_PROBLEMS` named, then a count of the rest).
pub fn check(input: &Value, rules: &Rules<'_>) -> Result<Envelope, Vec<Problem>> {
    let Value::Object(map) = input else {
        return Err(vec![Problem::new("$", "invalid_type", "a record must be a JSON object")]);
    };
    let oversized = check_sizes(map, rules.max_content_bytes);
    if !oversized.is_empty() {
        return Err(oversized);
    }
    let mut problems = Problems::default();
    for name in map.keys() {
        if !FIELDS.contains(&name.as_str()) && !SERVER_FIELDS.contains(&name.as_str()) {
            problems.push(Problem::new(
                json_path::child_key("$", name),
                "unknown_field",
                format!("`{name}` is not a record field; fields are {}", FIELDS[..12].join(", ")),
            ));
        }
    }

    let id =
        optional_string(map, "id", &mut problems).inspect(|id| check_token(id, "id", 128, &mut problems));
    let record_type = required_string(map, "type", &mut problems);
    let schema_version =
        optional_string(map, "schema_version", &mut problems).unwrap_or_else(|| "v1".to_owned());
    let scope = check_scope(map.get("scope"), &mut problems);
    let valid_from_ms = optional_date(map, "valid_from", &mut problems).unwrap_or(rules.now_ms);
    let valid_until_ms = optional_date(map, "valid_until", &mut problems).unwrap_or(OPEN_END_MS);
    if (map.contains_key("valid_from") || map.contains_key("valid_until")) && valid_until_ms <= valid_from_ms
    {
        problems.push(Problem::new(
            "$.valid_until",
            "invalid_time_range",
            "valid_until must be after valid_from",
        ));
    }
    let priority = match map.get("priority") {
        None | Some(Value::Null) => 3,
        Some(Value::Number(n)) => match n.as_u64() {
            Some(p @ 1..=5) => p as u8,
            _ => {
                problems.push(Problem::new(
                    "$.priority",
                    "invalid_value",
                    "priority must be an integer from 1 to 5",
                ));
                3
            }
        },
        Some(_) => {
            problems.push(Problem::new(
                "$.priority",
                "invalid_type",
                "priority must be an integer from 1 to 5",
            ));
            3
        }
    };
    let key = optional_string(map, "key", &mut problems).inspect(|key| {
        if key.is_empty() || key.chars().count() > 256 || key.chars().any(char::is_control) {
            problems.push(Problem::new(
                "$.key",
                "invalid_value",
                "key must be 1 to 256 characters, no control characters",
            ));
        }
    });
    let aliases = check_aliases(map.get("aliases"), &mut problems);
    let status = match map.get("status") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Status::parse(s).or_else(|| {
            problems.push(Problem::new(
                "$.status",
                "invalid_value",
                "status must be active, paused, archived, proposed or dormant",
            ));
            None
        }),
        Some(_) => {
            problems.push(Problem::new("$.status", "invalid_type", "status must be a string"));
            None
        }
    };
    let metadata = match map.get("metadata") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => {
            let mut m = m.clone();
            // Server-kept mirror of updated_at; a stale copy from an export is not the writer's.
            m.remove("last_updated");
            check_place(&m, &mut problems);
            m
        }
        Some(_) => {
            problems.push(Problem::new("$.metadata", "invalid_type", "metadata must be a JSON object"));
            Map::new()
        }
    };

    let content = match map.get("content") {
        Some(content @ Value::Object(_)) => {
            if let Some(record_type) = &record_type
                && let Err(found) = rules.schemas.validate(&schema_version, record_type, content, "$.content")
            {
                problems.extend(found.into_iter().map(|p| Problem {
                    // Unknown type and version are about those fields, not the content.
                    path: match p.kind.as_str() {
                        "unknown_type" => "$.type".to_owned(),
                        "unknown_schema_version" => "$.schema_version".to_owned(),
                        _ => p.path,
                    },
                    kind: p.kind,
                    message: p.message,
                }));
            }
            content.clone()
        }
        Some(_) => {
            problems.push(Problem::new("$.content", "invalid_type", "content must be a JSON object"));
            Value::Null
        }
        None => {
            problems.push(Problem::new("$.content", "missing_field", "content is required"));
            Value::Null
        }
    };

    // Secrets anywhere a record can carry text: its content, metadata, key and aliases.
    for (field, value) in [
        ("content", map.get("content")),
        ("metadata", map.get("metadata")),
        ("key", map.get("key")),
        ("aliases", map.get("aliases")),
    ] {
        if let Some(value) = value {
            for finding in secrets::scan(value, &json_path::child_key("$", field)) {
                problems.push(Problem::new(
                    finding.path,
                    "secret",
                    format!(
                        "looks like a secret ({}); memory must not hold credentials",
                        finding.kind.as_str()
                    ),
                ));
            }
        }
    }

    redact_secret_keys(input, problems.kept_mut());
    match (problems.is_empty(), record_type) {
        (true, Some(record_type)) => Ok(Envelope {
            id,
            record_type,
            schema_version,
            scope,
            valid_from_ms,
            valid_until_ms,
            priority,
            key,
            aliases,
            content,
            metadata,
            status,
        }),
        _ => Err(problems.into_vec()),
    }
}

/// Content and metadata within `records.max_content_bytes` each, measured as compact JSON; a
/// problem for each that is over.
fn check_sizes(map: &Map<String, Value>, limit: usize) -> Vec<Problem> {
    ["content", "metadata"]
        .into_iter()
        .filter_map(|field| {
            let size = json_size(map.get(field)?);
            (size > limit).then(|| {
                Problem::new(
                    json_path::child_key("$", field),
                    "too_large",
                    format!("{field} is {size} bytes; the limit is {limit} (records.max_content_bytes)"),
                )
            })
        })
        .collect()
}

/// The length of `value` as compact JSON, counted without writing it out.
fn json_size(value: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing a `Value` to a writer that never fails cannot fail.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

/// Object keys that are themselves secrets would reappear in the paths and messages of other
/// problems (an unknown field, a schema violation): replace them there. Secret findings name
/// such keys `<redacted>` already and are left as they are.
fn redact_secret_keys(input: &Value, problems: &mut [Problem]) {
    fn keys<'a>(value: &'a Value, out: &mut HashSet<&'a str>) {
        match value {
            Value::Object(map) => {
                for (key, child) in map {
                    if secrets::is_secret_text(key) {
                        out.insert(key);
                    }
                    keys(child, out);
                }
            }
            Value::Array(items) => items.iter().for_each(|v| keys(v, out)),
            _ => {}
        }
    }
    let mut others = problems.iter_mut().filter(|p| p.kind != "secret").peekable();
    if others.peek().is_none() {
        return;
    }
    let mut secret_keys = HashSet::new();
    keys(input, &mut secret_keys);
    for problem in others {
        for key in &secret_keys {
            problem.path = problem.path.replace(key, secrets::REDACTED_KEY);
            problem.message = problem.message.replace(key, secrets::REDACTED_KEY);
        }
    }
}

/// Lays a partial envelope (a PATCH body) over a record's current envelope. Top-level fields
/// present in the patch replace the current ones whole; `null` clears an optional field.
pub fn merge_patch(current: &Value, patch: &Value) -> Result<Value, Vec<Problem>> {
    let (Value::Object(current), Value::Object(patch)) = (current, patch) else {
        return Err(vec![Problem::new(
            "$",
            "invalid_type",
            "an update must be a JSON object of record fields",
        )]);
    };
    let mut merged = current.clone();
    for (name, value) in patch {
        if name == "id" && value.as_str() != current.get("id").and_then(Value::as_str) {
            return Err(vec![Problem::new("$.id", "invalid_value", "a record's id cannot change")]);
        }
        if value.is_null() {
            merged.remove(name);
        } else {
            merged.insert(name.clone(), value.clone());
        }
    }
    Ok(Value::Object(merged))
}

fn required_string(map: &Map<String, Value>, field: &str, problems: &mut Problems) -> Option<String> {
    match map.get(field) {
        Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
        None | Some(Value::Null) => {
            problems.push(Problem::new(
                json_path::child_key("$", field),
                "missing_field",
                format!("{field} is required"),
            ));
            None
        }
        Some(_) => {
            problems.push(Problem::new(
                json_path::child_key("$", field),
                "invalid_type",
                format!("{field} must be a non-empty string"),
            ));
            None
        }
    }
}

fn optional_string(map: &Map<String, Value>, field: &str, problems: &mut Problems) -> Option<String> {
    match map.get(field) {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => {
            problems.push(Problem::new(
                json_path::child_key("$", field),
                "invalid_type",
                format!("{field} must be a string"),
            ));
            None
        }
    }
}

fn optional_date(map: &Map<String, Value>, field: &str, problems: &mut Problems) -> Option<i64> {
    let text = optional_string(map, field, problems)?;
    let parsed = parse_rfc3339_ms(&text);
    if parsed.is_none() {
        problems.push(Problem::new(
            json_path::child_key("$", field),
            "invalid_date",
            format!("{field} must be an RFC 3339 date-time such as 2024-06-15T09:00:00Z"),
        ));
    }
    parsed
}

/// Ids are path segments and cursor material: a conservative alphabet.
fn check_token(text: &str, field: &str, max: usize, problems: &mut Problems) {
    let ok = !text.is_empty()
        && text.len() <= max
        && text.bytes().all(|b| b.is_ascii_alphanumeric() || b"._:-".contains(&b));
    if !ok {
        problems.push(Problem::new(
            json_path::child_key("$", field),
            "invalid_value",
            format!("{field} must be 1 to {max} characters of A-Z, a-z, 0-9, '.', '_', ':' or '-'"),
        ));
    }
}

fn check_scope(value: Option<&Value>, problems: &mut Problems) -> Vec<String> {
    let Some(Value::Array(items)) = value else {
        let kind = if value.is_none() { "missing_field" } else { "invalid_type" };
        problems.push(Problem::new(
            "$.scope",
            kind,
            "scope must be a non-empty array such as [\"public\"] or [\"user:u-789\"]",
        ));
        return Vec::new();
    };
    if items.is_empty() {
        problems.push(Problem::new(
            "$.scope",
            "invalid_value",
            "scope must name at least one audience; use [\"public\"] for everyone in the tenant",
        ));
    }
    let mut scope = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        match item.as_str() {
            Some(s) if is_valid_scope(s) => scope.push(s.to_owned()),
            _ => problems.push(Problem::new(
                json_path::child_index("$.scope", i),
                "invalid_value",
                "a scope is `public` or `kind:value`, e.g. `user:u-789`, `team:sales`",
            )),
        }
    }
    scope.sort();
    scope.dedup();
    scope
}

fn check_aliases(value: Option<&Value>, problems: &mut Problems) -> Vec<String> {
    match value {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => {
            if items.len() > 32 {
                problems.push(Problem::new("$.aliases", "too_large", "at most 32 aliases"));
            }
            let mut aliases = Vec::new();
            for (i, item) in items.iter().enumerate() {
                let path = || json_path::child_index("$.aliases", i);
                match item.as_str() {
                    Some(s) if !s.trim().is_empty() && s.chars().count() <= 256 => {
                        match alias_specificity(s) {
                            Ok(()) => aliases.push(s.to_owned()),
                            Err(why) => {
                                problems.push(Problem::new(path(), "unspecific_alias", unspecific(why)))
                            }
                        }
                    }
                    _ => problems.push(Problem::new(
                        path(),
                        "invalid_value",
                        "an alias is a non-empty string of at most 256 characters",
                    )),
                }
            }
            aliases
        }
        Some(_) => {
            problems.push(Problem::new("$.aliases", "invalid_type", "aliases must be an array of strings"));
            Vec::new()
        }
    }
}

/// What a writer reads of an alias refused as unspecific. The alias itself is not repeated: the
/// path names it.
fn unspecific(why: Unspecific) -> String {
    match why {
        Unspecific::StopWords => "an alias must name the record: this one is only stop words or single letters (the, my, what, is, …), which nearly every question holds; use a phrase people would ask with, such as \"next week delivery\"".to_owned(),
        Unspecific::TooShort => format!(
            "an alias must name the record: this one is too short to (at least {MIN_ALIAS_WEIGHT} letters or digits, a Chinese, Japanese or Korean character counting two)"
        ),
    }
}

/// The longest `metadata.thread` name taken, in bytes.
pub const MAX_THREAD_BYTES: usize = 256;

/// `metadata.thread` and `metadata.position` say where a record sits in a conversation or
/// document (`index::threads`): both or neither, a thread name of 1 to `MAX_THREAD_BYTES` bytes
/// and a position from 0 to 4,294,967,295. A malformed pair would otherwise be silently ignored.
fn check_place(metadata: &Map<String, Value>, problems: &mut Problems) {
    let (thread, position) = (metadata.get("thread"), metadata.get("position"));
    match thread {
        None => {}
        Some(Value::String(name)) if !name.is_empty() && name.len() <= MAX_THREAD_BYTES => {}
        Some(_) => problems.push(Problem::new(
            "$.metadata.thread",
            "invalid_value",
            format!("metadata.thread names the conversation or document: a string of 1 to {MAX_THREAD_BYTES} bytes"),
        )),
    }
    match position {
        None => {}
        Some(Value::Number(n)) if n.as_u64().is_some_and(|p| u32::try_from(p).is_ok()) => {}
        Some(_) => problems.push(Problem::new(
            "$.metadata.position",
            "invalid_value",
            "metadata.position is the record's place in its thread: an integer from 0 to 4294967295",
        )),
    }
    if thread.is_some() != position.is_some() {
        let (path, missing) = if thread.is_some() {
            ("$.metadata.position", "position")
        } else {
            ("$.metadata.thread", "thread")
        };
        problems.push(Problem::new(
            path,
            "missing_field",
            format!("metadata.thread and metadata.position go together: add metadata.{missing}"),
        ));
    }
}
