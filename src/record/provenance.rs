//! Who wrote a record and through what: set by memgate on every write, never by the writer.
//!
//! A record's `provenance` names the kind of writer (`operator`, `agent`, `memory_tool`,
//! `observer`, `import`), the credential that wrote (a gateway key's id, or a JWT's issuer and
//! `sub`), the request that carried the write and, for the observer, the person's words it
//! rests on. It is kept with the record, so the history's before and after carry it, and the
//! admin API, `explain` and the console show it. What it decides: triggers fire only for records
//! an operator wrote (`Record::may_fire`), and a release may inject only some writers' records.
//!
//! Records written before memgate kept provenance have none; their kind is read from their
//! author (`admin:…`/`console:…` or none: an operator or an import; `agent:…`: an agent;
//! `observer`), and an author memgate does not know counts as an agent's: deny by default.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The record types agents, the memory tool and the observer write unless their release narrows
/// them (`agent_types`): what a conversation can establish, nothing that acts or profiles.
pub const AGENT_TYPES: [&str; 4] = ["fact", "preference", "decision", "task"];

/// The kinds of writer, as `provenance.writer` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WriterKind {
    /// The admin API or the console, as a person with the admin token or a console session.
    Operator,
    /// memgate's memory tools, from a Messages turn or MCP.
    Agent,
    /// Anthropic's memory tool, executed by memgate.
    MemoryTool,
    /// The observer, from a finished exchange.
    Observer,
    /// An admin import (JSON Lines).
    Import,
}

impl WriterKind {
    pub const ALL: [WriterKind; 5] = [
        WriterKind::Operator,
        WriterKind::Agent,
        WriterKind::MemoryTool,
        WriterKind::Observer,
        WriterKind::Import,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            WriterKind::Operator => "operator",
            WriterKind::Agent => "agent",
            WriterKind::MemoryTool => "memory_tool",
            WriterKind::Observer => "observer",
            WriterKind::Import => "import",
        }
    }

    pub fn parse(text: &str) -> Option<WriterKind> {
        WriterKind::ALL.into_iter().find(|kind| kind.as_str() == text)
    }

    /// Operators and their imports: the writers whose records may carry actions and fire them.
    pub fn is_operator(self) -> bool {
        matches!(self, WriterKind::Operator | WriterKind::Import)
    }

    /// The kind of a record written before provenance was kept, from its author.
    pub fn of_author(author: Option<&str>) -> WriterKind {
        match author {
            None => WriterKind::Operator,
            Some(author) if author.starts_with("admin:") || author.starts_with("console:") => {
                WriterKind::Operator
            }
            Some("observer") => WriterKind::Observer,
            Some(_) => WriterKind::Agent,
        }
    }
}

/// A set of writer kinds (a release's `inject_writers`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriterSet(u8);

impl WriterSet {
    pub const ALL: WriterSet = WriterSet(0b1_1111);

    pub fn of(kinds: impl IntoIterator<Item = WriterKind>) -> WriterSet {
        WriterSet(kinds.into_iter().fold(0, |bits, kind| bits | WriterSet::bit(kind)))
    }

    fn bit(kind: WriterKind) -> u8 {
        1 << (kind as u8)
    }

    pub fn contains(self, kind: WriterKind) -> bool {
        self.0 & WriterSet::bit(kind) != 0
    }

    pub fn is_all(self) -> bool {
        self == WriterSet::ALL
    }

    /// The kinds in the set, in `WriterKind::ALL`'s order.
    pub fn kinds(self) -> impl Iterator<Item = WriterKind> {
        WriterKind::ALL.into_iter().filter(move |kind| self.contains(*kind))
    }
}

/// `provenance` of a record's live version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    pub writer: WriterKind,
    /// The credential that wrote: `key:<key id>`, `jwt:<issuer>/<sub>`, or the operator's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential: Option<String>,
    /// memgate's id of the request that carried the write (`X-Memory-Request-Id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// The end user the write was for, when the caller named one (`X-Memory-Subject`): said
    /// beside the credential, never instead of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// The observer's evidence: the person's words a record rests on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence: Option<Value>,
    /// The operator who approved a proposed record, once one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved_by: Option<String>,
}

impl Provenance {
    pub fn new(writer: WriterKind, credential: Option<String>) -> Provenance {
        Provenance { writer, credential, request_id: None, subject: None, evidence: None, approved_by: None }
    }

    pub fn with_request(mut self, request_id: Option<String>) -> Provenance {
        self.request_id = request_id;
        self
    }

    pub fn with_subject(mut self, subject: Option<String>) -> Provenance {
        self.subject = subject;
        self
    }

    pub fn with_evidence(mut self, evidence: Option<Value>) -> Provenance {
        self.evidence = evidence;
        self
    }

    /// The stored text (`memories.provenance_json`).
    pub fn to_text(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The stored text read back; `None` for text memgate did not write (it is then read as a
    /// record without provenance, whose kind its author decides).
    pub fn from_text(text: &str) -> Option<Provenance> {
        serde_json::from_str(text).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_round_trip_and_unknown_authors_are_agents() {
        for kind in WriterKind::ALL {
            assert_eq!(WriterKind::parse(kind.as_str()), Some(kind));
        }
        assert_eq!(WriterKind::of_author(None), WriterKind::Operator);
        assert_eq!(WriterKind::of_author(Some("admin:ops")), WriterKind::Operator);
        assert_eq!(WriterKind::of_author(Some("console:ana")), WriterKind::Operator);
        assert_eq!(WriterKind::of_author(Some("observer")), WriterKind::Observer);
        assert_eq!(WriterKind::of_author(Some("agent:k1")), WriterKind::Agent);
        assert_eq!(WriterKind::of_author(Some("someone")), WriterKind::Agent);
    }

    #[test]
    fn a_writer_set_holds_what_it_was_made_of() {
        let set = WriterSet::of([WriterKind::Operator, WriterKind::Import]);
        assert!(set.contains(WriterKind::Import) && !set.contains(WriterKind::Agent));
        assert_eq!(set.kinds().collect::<Vec<_>>(), [WriterKind::Operator, WriterKind::Import]);
        assert!(WriterSet::of(WriterKind::ALL).is_all() && !set.is_all());
    }

    #[test]
    fn provenance_round_trips_through_its_text() {
        let p = Provenance::new(WriterKind::Agent, Some("key:k1".into()))
            .with_request(Some("req-1".into()))
            .with_subject(Some("alice".into()));
        assert_eq!(Provenance::from_text(&p.to_text()), Some(p));
        assert_eq!(Provenance::from_text("not json"), None);
    }
}
