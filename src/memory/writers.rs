//! Who may write what: the one rule every writer passes, wherever the write comes from.
//!
//! Records are written by operators (the admin API, the console, imports) and by three writers
//! that act for someone else's words: agents (memgate's tools, over a Messages turn or MCP),
//! Anthropic's memory tool backed by memgate, and the observer. A stored text steers later
//! answers, and a record that carries actions sends webhooks, so these three are bounded
//! (`Bounds`), and `admit` holds them to it on every create, supersede and update, after the
//! content checks and before the store:
//! - only into their own scope (`Caller::own_scope`: `user:<subject>`, else `agent:<key id>`);
//! - only the types their release lets them write (`AGENT_TYPES` unless it narrows them);
//! - never priority 5, which is the operators' word for "critical";
//! - never the fields that make a record act (`ACTION_FIELDS`): a record that fires webhooks is
//!   an operator's, always; an agent may not change one either, even with `memory_write_any`;
//! - never over an operator's record (written, imported or approved by one), whatever the
//!   writer holds: what operators say stays theirs to change;
//! - never over a record another author wrote, without `memory_write_any` (which reaches the
//!   records other agents, the memory tool or the observer wrote in the writer's own scope, and
//!   no other: its scope is never `public`); never over one of another type; never reviving a
//!   record an operator paused or archived.
//!
//! Operators are not bounded: the content checks (schema, secrets, triggers) are all they pass.
//! The store applies the same rule to the record a key would supersede, inside the write's
//! transaction (`Store::create_record_by`'s `may_supersede`), so a racing write cannot slip past.

use crate::memory::checks::envelope::Problem;
pub use crate::record::AGENT_TYPES;

use crate::record::{Envelope, Provenance, Record, Status, WriterKind};
use crate::store::memories::By;
use crate::triggers::COOLDOWN_FIELD;
use serde_json::Value;

/// The highest priority a bounded writer may give: 5 ("critical") is an operator's word.
pub const AGENT_MAX_PRIORITY: u8 = 4;

/// The content fields that make a record act (triggers): an operator's alone.
pub const ACTION_FIELDS: [&str; 3] = ["trigger_conditions", "actions", COOLDOWN_FIELD];

/// Who writes a record: named in the history (`actor`), kept on the record (`author`,
/// `provenance`), and what bounds hold it.
pub struct Writer<'a> {
    /// Named in the record's history.
    pub actor: &'a str,
    /// Kept on the record (`Record::author`): whose it is, for the ownership rule.
    pub author: Option<&'a str>,
    /// Kept on the record, set here and never from the writer's input.
    pub provenance: Provenance,
    /// May change records other authors wrote (operators; agents holding `memory_write_any`).
    pub write_any: bool,
    /// `None` for an operator; the scope and types of any other writer.
    pub bounds: Option<Bounds<'a>>,
    /// The observer's claim on the exchange it writes for: the write happens only while it
    /// holds, checked in the write's own transaction (a forget of the scope ends it).
    pub claim: Option<&'a crate::store::observer::Claim>,
}

/// What a writer other than an operator may write.
#[derive(Debug, Clone, Copy)]
pub struct Bounds<'a> {
    /// The one scope it writes into.
    pub scope: &'a str,
    /// The record types it may write.
    pub types: &'a [String],
}

impl<'a> Writer<'a> {
    /// An operator (`kind`: `Operator` or `Import`): every record, every scope.
    pub fn operator(actor: &'a str, author: Option<&'a str>, kind: WriterKind) -> Writer<'a> {
        let credential = author.map(str::to_owned).or_else(|| Some(actor.to_owned()));
        Writer {
            actor,
            author,
            provenance: Provenance::new(kind, credential),
            write_any: true,
            bounds: None,
            claim: None,
        }
    }

    /// Whether this writer may change a record written by `author`.
    pub fn may_change(&self, author: Option<&str>) -> bool {
        self.write_any || (author.is_some() && author == self.author)
    }

    /// The one scope a bounded writer writes into; `None` for an operator.
    pub fn scope(&self) -> Option<&'a str> {
        self.bounds.map(|bounds| bounds.scope)
    }

    /// The writer as the store keeps it on the write (`store::memories::By`).
    pub fn by(&self) -> By<'_> {
        By { actor: self.actor, author: self.author, provenance: Some(&self.provenance), claim: self.claim }
    }
}

/// Whether `writer` may write `envelope`: as a new record (`current` is `None`), or as the next
/// version of `current` (an update, or the supersede of the record holding its key). Every
/// problem, by JSON path, in words the writer can act on.
pub fn admit(writer: &Writer<'_>, envelope: &Envelope, current: Option<&Record>) -> Result<(), Vec<Problem>> {
    let Some(bounds) = &writer.bounds else { return Ok(()) };
    let mut problems = Vec::new();
    let refuse = |path: &str, message: String| Problem::new(path, "not_permitted", message);
    if envelope.scope != [bounds.scope] {
        problems
            .push(refuse("$.scope", format!("this writer writes only into its own scope, {}", bounds.scope)));
    }
    if !bounds.types.contains(&envelope.record_type) {
        problems.push(refuse(
            "$.type",
            format!(
                "this writer may write only records of type {}; `{}` is an operator's",
                bounds.types.join(", "),
                envelope.record_type
            ),
        ));
    }
    if envelope.priority > AGENT_MAX_PRIORITY {
        problems.push(refuse(
            "$.priority",
            format!("priority 5 is for operators; use 1 to {AGENT_MAX_PRIORITY}"),
        ));
    }
    for field in action_fields(&envelope.content) {
        problems.push(refuse(
            &format!("$.content.{field}"),
            "records that act (trigger conditions, actions, cooldowns) are written only by operators"
                .to_owned(),
        ));
    }
    if matches!(envelope.status, Some(Status::Paused | Status::Archived))
        || (envelope.status == Some(Status::Dormant) && current.is_none_or(|c| c.status != Status::Dormant))
    {
        problems.push(refuse("$.status", "this writer writes records as active or proposed".to_owned()));
    }
    if let Some(current) = current {
        if let Some(problem) = untouchable(writer, current) {
            problems.push(problem);
        } else if !writer.may_change(current.author.as_deref()) {
            problems.push(refuse(
                "$",
                "another writer wrote this record, and only its own author (or a caller with memory_write_any) may change it"
                    .to_owned(),
            ));
        }
        if !action_fields(&current.content).is_empty() {
            problems.push(refuse(
                "$",
                "this record acts (it carries trigger conditions or actions): only an operator may change it"
                    .to_owned(),
            ));
        }
        if current.record_type != envelope.record_type {
            problems.push(refuse(
                "$.type",
                format!(
                    "the record holding this key is a `{}`, not a `{}`",
                    current.record_type, envelope.record_type
                ),
            ));
        }
        if matches!(current.status, Status::Paused | Status::Archived) {
            problems.push(refuse(
                "$",
                format!(
                    "an operator {} this record: only an operator may bring it back",
                    withdrawn_word(current.status)
                ),
            ));
        }
    }
    if problems.is_empty() { Ok(()) } else { Err(problems) }
}

/// Why a bounded writer may not touch `current` at all, whatever it writes: an operator's record,
/// or one outside its scope.
fn untouchable(writer: &Writer<'_>, current: &Record) -> Option<Problem> {
    let bounds = writer.bounds.as_ref()?;
    if current.writer().is_operator() || current.provenance.as_ref().is_some_and(|p| p.approved_by.is_some())
    {
        return Some(Problem::new(
            "$",
            "not_permitted",
            "an operator wrote this record: only an operator may change or delete it",
        ));
    }
    if current.scope != [bounds.scope] {
        return Some(Problem::new(
            "$.scope",
            "not_permitted",
            format!("this record is not in this writer's own scope, {}", bounds.scope),
        ));
    }
    None
}

/// Whether a bounded writer may delete `current`: the rule of a change, without a next version.
pub fn may_delete(writer: &Writer<'_>, current: &Record) -> Result<(), Vec<Problem>> {
    if writer.bounds.is_none() {
        return Ok(());
    }
    let mut problems: Vec<Problem> = untouchable(writer, current).into_iter().collect();
    if problems.is_empty() && !writer.may_change(current.author.as_deref()) {
        problems.push(Problem::new(
            "$",
            "not_permitted",
            "another writer wrote this record, and only its own author (or a caller with memory_write_any) may delete it",
        ));
    }
    if !action_fields(&current.content).is_empty() {
        problems.push(Problem::new("$", "not_permitted", "this record acts: only an operator may delete it"));
    }
    if problems.is_empty() { Ok(()) } else { Err(problems) }
}

fn withdrawn_word(status: Status) -> &'static str {
    match status {
        Status::Archived => "archived",
        _ => "paused",
    }
}

/// The fields of `content` that make a record act.
pub fn action_fields(content: &Value) -> Vec<&'static str> {
    ACTION_FIELDS.into_iter().filter(|field| content.get(field).is_some()).collect()
}

#[cfg(test)]
mod tests;
