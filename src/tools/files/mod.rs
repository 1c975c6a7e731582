//! Anthropic's memory tool (`{"type": "memory_20250818", "name": "memory"}`), executed by memgate
//! on the subject's `/memories` tree when a request asks for it (`X-Memory-Tool-Backend:
//! memgate`) and the caller holds `memory_tool_backend`.
//!
//! Each file is one record, so the tree is memory like any other: listed and edited in the admin
//! API and the console, exported, erased with its scope by `forget`, and written through every
//! check (secrets refused by kind, never echoed; sizes). A file is a `fact` in the caller's own
//! scope (`user:<subject>`, else the key's `agent:<key id>`), written by the caller as author:
//! `key` is the file's normal path (`paths::resolve`), which makes a path one record (a write to
//! the same key supersedes; no near-duplicate merging between files), `content` is
//! `{"statement": <the file's text>, "subject": <the path>, "source": "memory tool"}`.
//!
//! The tree is what recall would show of that scope: its active `fact`s, valid now, whose key is
//! a path under `/memories`, and the caller's own proposals (marked as awaiting review). Paused,
//! archived, expired and dormant records, other writers' proposals and records of other types
//! are not files; their keys stay theirs, and a write that would take one is refused. A file
//! belongs to the writer that wrote it: the memory tool writes as the caller's credential,
//! through the same rule as the six tools (`memory::writers`), so changing or deleting another
//! writer's file needs `memory_write_any`, and nothing written here acts or leaves the
//! caller's scope. The request's tool level decides the commands: `read` allows `view` alone.
//!
//! The commands and their answers are the reference implementation's (the Python SDK's
//! `BetaLocalFilesystemMemoryTool`), so the model behaves as documented: `tree` runs them on the
//! tree held in memory, and `run` loads the tree before and writes the changes after.

pub mod paths;
pub mod tree;

use super::write::{refusal, schema_version, status_note};
use super::{Level, ToolCaller, ToolResult};
use crate::clock::now_ms;
use crate::memory::{MemoryService, Writer};
use crate::record::{Record, Status, WriterKind};
use crate::rollout::Release;
use crate::store::memories::ListFilter;
use serde_json::{Map, Value, json};
use tree::{Change, Command, File, Tree};

/// The tool's `name` and `type` as a request declares it.
pub const TOOL_NAME: &str = "memory";
pub const TOOL_TYPE: &str = "memory_20250818";

/// The record type of a file.
const FILE_TYPE: &str = "fact";
/// What a file's `content.source` says.
const SOURCE: &str = "memory tool";
/// Records read per page when loading a tree.
const PAGE: u32 = 200;

/// Runs one `memory` command of `caller`. Never fails: every problem is a result the model reads.
pub async fn run(
    memories: &MemoryService,
    caller: &ToolCaller,
    release: &Release,
    input: &Value,
) -> ToolResult {
    let command = match command(input) {
        Ok(command) => command,
        Err(message) => return ToolResult::error(message),
    };
    if caller.file_level < Level::Write && !matches!(command, Command::View { .. }) {
        return ToolResult::refused(
            "memory: memory files are read-only in this request (only view is allowed); nothing was written",
        );
    }
    let Some(writer) = caller.writer(release, WriterKind::MemoryTool) else {
        return ToolResult::refused(
            "memory: this caller has no scope of its own to keep files in (a gateway key, or an end user's subject, is needed)",
        );
    };
    let tenant = &caller.caller.tenant;
    let scope = writer.scope().unwrap_or_default();
    let (tree, proposed) = match load(memories, tenant, scope, writer.author).await {
        Ok(loaded) => loaded,
        Err(result) => return result,
    };
    let applied = match tree::apply(&tree, &command) {
        Ok(applied) => applied,
        Err(message) => return ToolResult::error(message),
    };
    let file_writer = FileWriter { memories, tenant, scope, writer: &writer, release, tree: &tree };
    let mut note = "";
    for change in &applied.changes {
        match file_writer.make(change).await {
            Ok(status) => note = status_note(status),
            Err(result) => return result,
        }
    }
    let mut answer = applied.answer;
    if let Command::View { path, .. } = &command {
        answer.push_str(&awaiting_review(&proposed, path));
    }
    ToolResult::ok(format!("{answer}{note}"))
}

/// The line that marks the caller's own proposals among what `view` showed of `shown`.
fn awaiting_review(proposed: &[String], shown: &str) -> String {
    let Ok(path) = paths::resolve(shown) else { return String::new() };
    let listed: Vec<&str> =
        proposed.iter().filter(|p| paths::is_within(p, &path)).map(String::as_str).collect();
    if listed.is_empty() {
        return String::new();
    }
    format!("\n(Awaiting review, not used until an operator approves them: {}.)", listed.join(", "))
}

/// The command in `input`, or what is wrong with it.
fn command(input: &Value) -> Result<Command, String> {
    let Value::Object(map) = input else {
        return Err("memory: the input must be a JSON object with a `command`".to_owned());
    };
    let name = match map.get("command") {
        Some(Value::String(name)) => name.as_str(),
        _ => {
            return Err(
                "memory: `command` is required (view, create, str_replace, insert, delete or rename)"
                    .to_owned(),
            );
        }
    };
    let text = |field: &str| match map.get(field) {
        Some(Value::String(text)) => Ok(text.clone()),
        _ => Err(format!("memory {name}: `{field}` is required (a string)")),
    };
    Ok(match name {
        "view" => Command::View { path: text("path")?, view_range: view_range(map.get("view_range")) },
        "create" => Command::Create { path: text("path")?, file_text: text("file_text")? },
        "str_replace" => Command::StrReplace {
            path: text("path")?,
            old_str: text("old_str")?,
            new_str: if map.get("new_str").is_none_or(Value::is_null) {
                String::new()
            } else {
                text("new_str")?
            },
        },
        "insert" => Command::Insert {
            path: text("path")?,
            insert_line: map
                .get("insert_line")
                .and_then(Value::as_i64)
                .ok_or_else(|| format!("memory {name}: `insert_line` is required (a whole number)"))?,
            insert_text: text("insert_text")?,
        },
        "delete" => Command::Delete { path: text("path")? },
        "rename" => Command::Rename { old_path: text("old_path")?, new_path: text("new_path")? },
        other => {
            let other: String = other.chars().take(40).collect();
            return Err(format!("Unknown command: {other}"));
        }
    })
}

/// `view_range` when it is two whole numbers; the reference ignores any other shape.
fn view_range(value: Option<&Value>) -> Option<(i64, i64)> {
    match value?.as_array()?.as_slice() {
        [first, last] => Some((first.as_i64()?, last.as_i64()?)),
        _ => None,
    }
}

/// The files of `scope` that `author` may see (the module comment says which), and the paths of
/// the author's own proposals among them.
async fn load(
    memories: &MemoryService,
    tenant: &str,
    scope: &str,
    author: Option<&str>,
) -> Result<(Tree, Vec<String>), ToolResult> {
    let filter = ListFilter {
        scope: Some(scope.to_owned()),
        record_type: Some(FILE_TYPE.to_owned()),
        ..ListFilter::default()
    };
    let mut tree = Tree::new();
    let mut proposed = Vec::new();
    let now = now_ms();
    let mut cursor: Option<String> = None;
    loop {
        let page = memories.list(tenant, &filter, cursor.as_deref(), PAGE).await.map_err(|err| {
            tracing::warn!(error = %err, "loading the memory tool's files failed");
            ToolResult::error("memory: memory is unavailable right now; nothing was read or written")
        })?;
        for record in &page {
            let Some(key) = &record.key else { continue };
            if record.scope != [scope] || !paths::is_within(key, paths::ROOT) || key == paths::ROOT {
                continue;
            }
            if !shown_as_file(record, author, now) {
                continue;
            }
            if record.status == Status::Proposed {
                proposed.push(key.clone());
            }
            let text = record.content.get("statement").and_then(Value::as_str).unwrap_or_default();
            tree.insert(
                key.clone(),
                File { text: text.to_owned(), record: Some((record.id.clone(), record.revision)) },
            );
        }
        if page.len() < PAGE as usize || tree.len() > tree::MAX_FILES {
            return Ok((tree, proposed));
        }
        cursor = page.last().map(|record| record.id.clone());
    }
}

/// Whether `record` is a file `author` sees: what recall would show (active, valid now), and
/// the author's own proposals.
fn shown_as_file(record: &Record, author: Option<&str>, now: i64) -> bool {
    let own = author.is_some() && record.author.as_deref() == author;
    record.is_valid_at(now) && (record.status == Status::Active || (record.status == Status::Proposed && own))
}

/// Writes a command's changes as the caller, into its scope.
struct FileWriter<'a> {
    memories: &'a MemoryService,
    tenant: &'a str,
    scope: &'a str,
    writer: &'a Writer<'a>,
    release: &'a Release,
    tree: &'a Tree,
}

impl FileWriter<'_> {
    fn content(text: &str, path: &str) -> Value {
        json!({"statement": text, "subject": path, "source": SOURCE})
    }

    fn record_of(&self, path: &str) -> Result<&(String, i64), ToolResult> {
        self.tree
            .get(path)
            .and_then(|file| file.record.as_ref())
            .ok_or_else(|| ToolResult::error(format!("The path {path} does not exist")))
    }

    /// One change; the status the written record has.
    async fn make(&self, change: &Change) -> Result<Status, ToolResult> {
        let status = self.release.tools.agent_writes;
        let refused = |err| refusal(TOOL_NAME, err);
        match change {
            Change::Create { path, text } => {
                let envelope = json!({
                    "type": FILE_TYPE,
                    "schema_version": schema_version(self.release),
                    "scope": [self.scope],
                    "key": path,
                    "content": Self::content(text, path),
                    "status": status.as_str(),
                });
                self.memories.create_as(self.tenant, &envelope, self.writer).await.map_err(refused)?;
                Ok(status)
            }
            Change::Write { path, text } => {
                let mut patch = Map::new();
                patch.insert("content".into(), Self::content(text, path));
                self.update(path, patch, status).await
            }
            Change::Move { from, to } => {
                let text = self.tree.get(from).map_or("", |file| file.text.as_str());
                let mut patch = Map::new();
                patch.insert("key".into(), json!(to));
                patch.insert("content".into(), Self::content(text, to));
                self.update(from, patch, status).await
            }
            Change::Delete { path } => {
                let (id, _) = self.record_of(path)?;
                self.memories.delete_as(self.tenant, id, self.writer).await.map_err(refused)?;
                Ok(status)
            }
        }
    }

    async fn update(
        &self,
        path: &str,
        mut patch: Map<String, Value>,
        status: Status,
    ) -> Result<Status, ToolResult> {
        let (id, revision) = self.record_of(path)?;
        // Under review, every agent write waits for it: a change too.
        if status == Status::Proposed {
            patch.insert("status".into(), json!(status.as_str()));
        }
        let record = self
            .memories
            .update_as(self.tenant, id, &Value::Object(patch), Some(*revision), self.writer)
            .await
            .map_err(|err| refusal(TOOL_NAME, err))?;
        Ok(record.status)
    }
}

#[cfg(test)]
mod tests;
