//! The shape of a memory record, as stored and as answered: the contract's envelope plus the
//! server-kept fields. A leaf: every layer uses these types, and they use no other module of
//! the crate but the time and hash helpers beside them (`clock`, `hash`).

pub mod provenance;

pub use provenance::{AGENT_TYPES, Provenance, WriterKind, WriterSet};

use crate::clock::format_ms;
use serde::Serialize;
use serde_json::{Map, Value, json};

/// `valid_until` of a record with no end: 9999-12-31T23:59:59Z, as the contract writes it.
pub const OPEN_END_MS: i64 = 253_402_300_799_000;

/// Lifecycle of a record. Only `active` records are ever injected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Active,
    Paused,
    Archived,
    /// Written by an agent (a release with `agent_writes = "proposed"`) and awaiting review:
    /// never injected nor found by tools; `activate` approves it.
    Proposed,
    /// Not used for its type's dormancy period (`[records.dormancy]`): never injected, but still
    /// listed and found by the memory tools; a tool's read, or `activate`, makes it active again.
    Dormant,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Active => "active",
            Status::Paused => "paused",
            Status::Archived => "archived",
            Status::Proposed => "proposed",
            Status::Dormant => "dormant",
        }
    }

    /// Whether the in-memory index holds records of this status: what the funnel may inject
    /// (`active`) and what the memory tools may still find (`dormant`).
    pub fn is_indexed(self) -> bool {
        matches!(self, Status::Active | Status::Dormant)
    }

    pub fn parse(text: &str) -> Option<Status> {
        match text {
            "active" => Some(Status::Active),
            "paused" => Some(Status::Paused),
            "archived" => Some(Status::Archived),
            "proposed" => Some(Status::Proposed),
            "dormant" => Some(Status::Dormant),
            _ => None,
        }
    }
}

/// The fields a writer controls (the envelope), checked and normalized.
#[derive(Debug, Clone, PartialEq)]
pub struct Envelope {
    pub id: Option<String>,
    pub record_type: String,
    pub schema_version: String,
    /// Sorted and without repeats, so equal scopes compare equal.
    pub scope: Vec<String>,
    pub valid_from_ms: i64,
    pub valid_until_ms: i64,
    pub priority: u8,
    pub key: Option<String>,
    pub aliases: Vec<String>,
    pub content: Value,
    pub metadata: Map<String, Value>,
    pub status: Option<Status>,
}

/// A stored record. It repeats the envelope's fields rather than holding an `Envelope`: there `id`
/// and `status` are optional (a writer may leave them to memgate), here they are settled, and
/// the funnel reads these fields on every request, flat, without a level of nesting per access.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub tenant: String,
    pub id: String,
    pub record_type: String,
    pub schema_version: String,
    pub scope: Vec<String>,
    pub valid_from_ms: i64,
    pub valid_until_ms: i64,
    pub priority: u8,
    pub key: Option<String>,
    pub aliases: Vec<String>,
    pub content: Value,
    pub metadata: Map<String, Value>,
    pub revision: i64,
    pub status: Status,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    pub last_accessed_at_ms: Option<i64>,
    pub access_count: i64,
    /// The store's sequence number of the record's last write: orders changes between replicas
    /// without trusting anyone's clock (`Store::changed_since`). Never part of the API.
    pub change_seq: i64,
    /// Who wrote the record's live version (`admin:<actor>`, `agent:<key id>`, …); `None` for
    /// records written before memgate kept it, and for imports.
    pub author: Option<String>,
    /// Who wrote the live version and through what (`provenance`); `None` for records written
    /// before memgate kept it.
    pub provenance: Option<Provenance>,
}

impl Record {
    /// The envelope this record was written with, in the shape export and import use.
    pub fn envelope_json(&self) -> Value {
        let mut out = json!({
            "id": self.id,
            "type": self.record_type,
            "schema_version": self.schema_version,
            "scope": self.scope,
            "valid_from": format_ms(self.valid_from_ms),
            "valid_until": format_ms(self.valid_until_ms),
            "priority": self.priority,
            "aliases": self.aliases,
            "content": self.content,
            "metadata": self.metadata,
            "status": self.status.as_str(),
        });
        if let (Some(key), Value::Object(map)) = (&self.key, &mut out) {
            map.insert("key".into(), Value::String(key.clone()));
        }
        out
    }

    /// The full record as the admin API answers it: envelope plus server-kept fields.
    /// `metadata.last_updated` mirrors `updated_at`, as the contract says.
    pub fn to_json(&self) -> Value {
        let mut out = self.envelope_json();
        if let Value::Object(map) = &mut out {
            map.insert("tenant".into(), json!(self.tenant));
            map.insert("revision".into(), json!(self.revision));
            map.insert("created_at".into(), json!(format_ms(self.created_at_ms)));
            map.insert("updated_at".into(), json!(format_ms(self.updated_at_ms)));
            map.insert(
                "last_accessed_at".into(),
                self.last_accessed_at_ms.map_or(Value::Null, |ms| json!(format_ms(ms))),
            );
            map.insert("access_count".into(), json!(self.access_count));
            if let Some(author) = &self.author {
                map.insert("author".into(), json!(author));
            }
            let provenance = match &self.provenance {
                Some(provenance) => json!(provenance),
                None => json!({"writer": self.writer().as_str()}),
            };
            map.insert("provenance".into(), provenance);
            if let Some(Value::Object(metadata)) = map.get_mut("metadata") {
                metadata.insert("last_updated".into(), json!(format_ms(self.updated_at_ms)));
            }
        }
        out
    }

    /// The kind of writer of the live version: its provenance's, else what its author says.
    pub fn writer(&self) -> WriterKind {
        self.provenance.as_ref().map_or_else(|| WriterKind::of_author(self.author.as_deref()), |p| p.writer)
    }

    /// Whether this record's triggers may fire: only an operator's record (written by one,
    /// imported, or approved by one) acts. A record an agent, the memory tool or the observer
    /// wrote never sends a webhook, whatever its content says.
    pub fn may_fire(&self) -> bool {
        self.writer().is_operator() || self.provenance.as_ref().is_some_and(|p| p.approved_by.is_some())
    }

    /// `line_tokens` of this record.
    pub fn line_tokens(&self) -> u32 {
        line_tokens(&self.id, &self.record_type, &self.content)
    }

    /// True if `now` lies in `[valid_from, valid_until)`.
    pub fn is_valid_at(&self, now_ms: i64) -> bool {
        self.valid_from_ms <= now_ms && now_ms < self.valid_until_ms
    }
}

/// Tokens (cl100k) of a record's line as the density layer counts them: the JSON object
/// `{"content":…,"id":…,"type":…}`, keys in the order a `serde_json` object sorts them. Fixed by
/// those three fields, so the store keeps it with the record (`memories.line_tokens`) and a
/// replica starting on a million records reads it rather than running the tokenizer over each
/// (about a quarter of a start's CPU). Changing this line or the tokenizer changes what stored counts
/// mean: a migration must then clear the column, and rows without a count are counted at load.
/// Serialized from borrows: a `serde_json::Value` of the line would copy the whole content.
pub fn line_tokens(id: &str, record_type: &str, content: &Value) -> u32 {
    #[derive(serde::Serialize)]
    struct Line<'a> {
        content: &'a Value,
        id: &'a str,
        #[serde(rename = "type")]
        record_type: &'a str,
    }
    let line = serde_json::to_string(&Line { content, id, record_type }).unwrap_or_default();
    let tokens = tiktoken_rs::cl100k_base_singleton().encode_ordinary(&line).len();
    u32::try_from(tokens).unwrap_or(u32::MAX)
}

/// The canonical text of a JSON value: object keys sorted (serde_json's default map is ordered),
/// no insignificant whitespace. Equal content gives equal text.
pub fn canonical_json(value: &Value) -> String {
    value.to_string()
}

/// A 64-bit FNV-1a hash of the canonical content, hex: a cheap index for exact-repeat lookups (a
/// hit is confirmed by comparing the content itself).
pub fn content_hash(record_type: &str, scope: &[String], content: &Value) -> String {
    let text = format!("{record_type}\u{1f}{}\u{1f}{}", scope.join("\u{1e}"), canonical_json(content));
    format!("{:016x}", crate::hash::fnv1a64(&text))
}

/// A tenant's name, and a release's: 1 to 64 characters of A-Z a-z 0-9 . _ : -.
pub fn is_valid_tenant(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 64
        && text.bytes().all(|b| b.is_ascii_alphanumeric() || b"._:-".contains(&b))
}

/// `public`, or `kind:value` with a lower-case kind (`user`, `team`, `role`, `agent`, …).
pub fn is_valid_scope(scope: &str) -> bool {
    if scope == "public" {
        return true;
    }
    let Some((kind, value)) = scope.split_once(':') else { return false };
    let kind_ok = !kind.is_empty()
        && kind.len() <= 32
        && kind.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
    let value_ok = !value.is_empty()
        && value.chars().count() <= 200
        && !value.chars().any(|c| c.is_control() || c.is_whitespace());
    kind_ok && value_ok
}

/// One record's accesses since the last flush.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Access {
    pub tenant: String,
    pub id: String,
    pub count: i64,
    pub last_ms: i64,
}

#[cfg(test)]
impl Record {
    /// A record for unit tests: an active, public `fact` of tenant `t`, revision 1, valid from the
    /// epoch on, with `content`.
    pub fn test_fact(id: &str, content: Value) -> Record {
        Record {
            tenant: "t".into(),
            id: id.into(),
            record_type: "fact".into(),
            schema_version: "v1".into(),
            scope: vec!["public".into()],
            valid_from_ms: 0,
            valid_until_ms: OPEN_END_MS,
            priority: 3,
            key: None,
            aliases: Vec::new(),
            content,
            metadata: Map::new(),
            revision: 1,
            status: Status::Active,
            created_at_ms: 0,
            updated_at_ms: 0,
            last_accessed_at_ms: None,
            access_count: 0,
            change_seq: 0,
            author: None,
            provenance: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{format_ms, parse_rfc3339_ms};

    #[test]
    fn dates_round_trip_and_the_open_end_is_the_contracts() {
        assert_eq!(format_ms(OPEN_END_MS), "9999-12-31T23:59:59Z");
        let ms = parse_rfc3339_ms("2024-06-15T09:00:00Z").unwrap();
        assert_eq!(format_ms(ms), "2024-06-15T09:00:00Z");
        assert_eq!(parse_rfc3339_ms("2024-06-15T11:00:00+02:00"), Some(ms));
        assert_eq!(parse_rfc3339_ms("2024-06-15"), None);
        assert_eq!(parse_rfc3339_ms("2024-13-01T00:00:00Z"), None);
    }

    #[test]
    fn canonical_content_ignores_key_order() {
        let a: Value = serde_json::from_str(r#"{"b":1,"a":{"y":2,"x":[1,2]}}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"a":{"x":[1,2],"y":2},"b":1}"#).unwrap();
        assert_eq!(canonical_json(&a), canonical_json(&b));
        let scope = vec!["public".to_string()];
        assert_eq!(content_hash("fact", &scope, &a), content_hash("fact", &scope, &b));
        assert_ne!(content_hash("fact", &scope, &a), content_hash("task", &scope, &a));
    }
}

impl Record {
    /// The text a record is found by words through: its key, its aliases, and every string and
    /// number of its content, one per line; not the type name (a type shared by thousands of
    /// records is no evidence for any of them). The lexical index and the store's `q` search
    /// both read it.
    pub fn words(&self) -> String {
        let mut text = String::new();
        for word in self.key.iter().chain(&self.aliases) {
            text.push_str(word);
            text.push('\n');
        }
        collect_text(&self.content, &mut text);
        text
    }
}

/// Every string and number of a JSON value, one per line, in document order.
pub fn collect_text(value: &Value, out: &mut String) {
    match value {
        Value::String(s) => {
            out.push_str(s);
            out.push('\n');
        }
        Value::Number(n) => {
            out.push_str(&n.to_string());
            out.push('\n');
        }
        Value::Array(items) => items.iter().for_each(|v| collect_text(v, out)),
        Value::Object(map) => map.values().for_each(|v| collect_text(v, out)),
        _ => {}
    }
}
