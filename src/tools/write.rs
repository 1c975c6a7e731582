//! The write tools: add, update and delete, through `MemoryService` (every check an admin write
//! passes), into the caller's own scope, as its author.

use super::definitions::{ADD, DELETE, UPDATE};
use super::input::Input;
use super::read::{readable_record, shown_id};
use super::{ToolCaller, ToolResult};
use crate::memory::checks::envelope::Problem;
use crate::memory::{MemoryError, MemoryService, Writer};
use crate::record::{Status, WriterKind};
use crate::rollout::Release;
use crate::store::memories::Created;
use serde_json::{Map, Value, json};

/// The writer the caller writes as (its scope, credential and bounds), or why it cannot write.
pub(super) fn writer_of<'a>(
    tool: &str,
    caller: &'a ToolCaller,
    release: &'a Release,
    kind: WriterKind,
) -> Result<Writer<'a>, ToolResult> {
    caller.writer(release, kind).ok_or_else(|| {
        ToolResult::refused(format!(
            "{tool}: this caller has no scope of its own to write into (a gateway key, or an end user's subject, is needed); nothing was written"
        ))
    })
}

/// The schema version agents write: the first the release reads.
pub(super) fn schema_version(release: &Release) -> &str {
    release.funnel.schema_versions.first().map_or("v1", String::as_str)
}

/// A refused write in words: a secret by its kind and path alone (the value is never repeated,
/// and nothing else is said about the content, whose other messages could quote it); otherwise
/// every problem with its JSON path.
pub(super) fn refusal(tool: &str, err: MemoryError) -> ToolResult {
    match err {
        MemoryError::Invalid(problems) => {
            let secrets: Vec<&Problem> = problems.iter().filter(|p| p.kind == "secret").collect();
            if !secrets.is_empty() {
                let said: Vec<String> =
                    secrets.iter().map(|p| format!("{}: {}", p.path, p.message)).collect();
                return ToolResult::refused(format!(
                    "{tool}: refused, nothing was written. Secrets never go into memory, and this looks like one ({}). Leave the secret out (say only that one exists, if that matters) and try again.",
                    said.join("; ")
                ));
            }
            let said: Vec<String> = problems.iter().map(|p| format!("{}: {}", p.path, p.message)).collect();
            ToolResult::refused(format!("{tool}: refused, nothing was written: {}", said.join("; ")))
        }
        MemoryError::NotFound(_) => {
            ToolResult::error(format!("{tool}: the record is gone (deleted meanwhile)"))
        }
        MemoryError::TopicTaken => ToolResult::refused(format!(
            "{tool}: another record already holds this key in your scope (written by someone else, of another type, or withdrawn by an operator), and you may not replace it; nothing was written. Use another key, or leave the key out"
        )),
        MemoryError::Conflict { .. }
        | MemoryError::IdTaken(_)
        | MemoryError::NotProposed { .. }
        | MemoryError::StatusConflict { .. } => {
            ToolResult::error(format!("{tool}: the record changed meanwhile; read it again and retry"))
        }
        MemoryError::Store(err) => {
            tracing::warn!(error = %err, tool, "memory tool write failed");
            ToolResult::error(format!("{tool}: memory is unavailable right now; nothing was written"))
        }
    }
}

pub(super) fn status_note(status: Status) -> &'static str {
    match status {
        Status::Proposed => {
            " It awaits review (status proposed): it is not used until an operator approves it."
        }
        _ => "",
    }
}

/// `memory_add {type, content, key?, aliases?, priority?}`.
pub(super) async fn add(
    memories: &MemoryService,
    caller: &ToolCaller,
    release: &Release,
    input: &Value,
) -> Result<ToolResult, ToolResult> {
    let input = Input::new(ADD, input, &["type", "content", "key", "aliases", "priority"])?;
    let writer = writer_of(ADD, caller, release, WriterKind::Agent)?;
    let scope = writer.scope().unwrap_or_default();
    let record_type = input.text("type")?;
    let content = input.object("content")?;
    let tenant = &caller.caller.tenant;
    // Writing a key again supersedes its record, only if this writer may change it: the store
    // asks `writers::admit` inside the write's transaction, and a refusal is `TopicTaken`.
    let status = release.tools.agent_writes;
    let mut envelope = Map::new();
    envelope.insert("type".into(), json!(record_type));
    envelope.insert("schema_version".into(), json!(schema_version(release)));
    envelope.insert("scope".into(), json!([scope]));
    envelope.insert("content".into(), content.clone());
    envelope.insert("status".into(), json!(status.as_str()));
    for field in ["key", "aliases", "priority"] {
        if let Some(value) = input.get(field) {
            envelope.insert(field.into(), value.clone());
        }
    }
    let created = memories
        .create_as(tenant, &Value::Object(envelope), &writer)
        .await
        .map_err(|err| refusal(ADD, err))?;
    let note = status_note(status);
    Ok(ToolResult::ok(match created {
        Created::New(record) => format!("Saved as {} (scope {scope}).{note}", record.id),
        Created::Superseded(record) => {
            format!(
                "Saved as {} (revision {}): it replaced the earlier record with this key.{note}",
                record.id, record.revision
            )
        }
        // A repeat of a record the caller cannot read (paused, archived, another's proposal) is
        // not named: its id would tell what `memory_get` answers does not exist.
        Created::ExactRepeat(record) if !super::read::is_readable(caller, release, &record) => {
            "Nothing new was written: memory already holds this.".to_owned()
        }
        Created::ExactRepeat(record) => {
            format!("Already in memory as {}; nothing new was written.", record.id)
        }
        Created::Deduplicated { record, .. } => format!(
            "A record very like it was already in memory ({}); it was updated instead of adding a twin (revision {}).{note}",
            record.id, record.revision
        ),
    }))
}

/// The record `id` if the caller may read it and change it.
fn changeable(
    tool: &str,
    memories: &MemoryService,
    caller: &ToolCaller,
    writer: &Writer<'_>,
    release: &Release,
    id: &str,
) -> Result<std::sync::Arc<crate::index::IndexedRecord>, ToolResult> {
    let Some(item) = readable_record(memories, caller, release, id) else {
        return Err(ToolResult::error(format!("{tool}: no record {:?} that you can read", shown_id(id))));
    };
    if !writer.may_change(item.head.author()) {
        return Err(ToolResult::refused(format!(
            "{tool}: {} was written by someone else, and you may change or delete only records you wrote; nothing was changed",
            shown_id(id)
        )));
    }
    Ok(item)
}

/// `memory_update {id, content?, aliases?, priority?}`.
pub(super) async fn update(
    memories: &MemoryService,
    caller: &ToolCaller,
    release: &Release,
    input: &Value,
) -> Result<ToolResult, ToolResult> {
    let input = Input::new(UPDATE, input, &["id", "content", "aliases", "priority"])?;
    let writer = writer_of(UPDATE, caller, release, WriterKind::Agent)?;
    let id = input.text("id")?;
    let mut patch = Map::new();
    if input.get("content").is_some() {
        patch.insert("content".into(), input.object("content")?.clone());
    }
    for field in ["aliases", "priority"] {
        if let Some(value) = input.get(field) {
            patch.insert(field.into(), value.clone());
        }
    }
    if patch.is_empty() {
        return Err(ToolResult::error("memory_update: give content, aliases or priority to change"));
    }
    let item = changeable(UPDATE, memories, caller, &writer, release, id)?;
    // Under review, every agent write waits for it: a change too.
    // A dormant record an agent changes is in use again.
    let status = release.tools.agent_writes;
    if status == Status::Proposed || item.head.status == Status::Dormant {
        patch.insert("status".into(), json!(status.as_str()));
    }
    let record = memories
        .update_as(
            &caller.caller.tenant,
            item.head.id(),
            &Value::Object(patch),
            Some(item.head.revision),
            &writer,
        )
        .await
        .map_err(|err| refusal(UPDATE, err))?;
    Ok(ToolResult::ok(format!(
        "Updated {} (revision {}).{}",
        record.id,
        record.revision,
        status_note(record.status)
    )))
}

/// `memory_delete {id}`.
pub(super) async fn delete(
    memories: &MemoryService,
    caller: &ToolCaller,
    release: &Release,
    input: &Value,
) -> Result<ToolResult, ToolResult> {
    let input = Input::new(DELETE, input, &["id"])?;
    let writer = writer_of(DELETE, caller, release, WriterKind::Agent)?;
    let id = input.text("id")?;
    let item = changeable(DELETE, memories, caller, &writer, release, id)?;
    let record = memories
        .delete_as(&caller.caller.tenant, item.head.id(), &writer)
        .await
        .map_err(|err| refusal(DELETE, err))?;
    Ok(ToolResult::ok(format!("Deleted {}.", record.id)))
}
