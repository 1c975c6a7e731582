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
//! `{"statement": <the file's text>, "subject": <the path>, "source": "memory tool"}`. Any
//! record of that scope whose key starts with `/memories/` is a file of the tree.
//!
//! The commands and their answers are the reference implementation's (the Python SDK's
//! `BetaLocalFilesystemMemoryTool`), so the model behaves as documented: `tree` runs them on the
//! tree held in memory, and `run` loads the tree before and writes the changes after.

pub mod paths;
pub mod tree;

use super::write::{refusal, schema_version, status_note};
use super::{ToolCaller, ToolResult};
use crate::memory::{MemoryService, Writer};
use crate::record::Status;
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
    let (Some(scope), Some(author)) = (&caller.own_scope, &caller.author) else {
        return ToolResult::refused(
            "memory: this caller has no scope of its own to keep files in (a gateway key, or an end user's subject, is needed)",
        );
    };
    let tenant = &caller.caller.tenant;
    let tree = match load(memories, tenant, scope).await {
        Ok(tree) => tree,
        Err(result) => return result,
    };
    let applied = match tree::apply(&tree, &command) {
        Ok(applied) => applied,
        Err(message) => return ToolResult::error(message),
    };
    let file_writer = FileWriter { memories, tenant, scope, author, release, tree: &tree };
    let mut note = "";
    for change in &applied.changes {
        match file_writer.make(change).await {
            Ok(status) => note = status_note(status),
            Err(result) => return result,
        }
    }
    ToolResult::ok(format!("{}{note}", applied.answer))
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

/// The files of `scope`: its records whose key is a path under `/memories`.
async fn load(memories: &MemoryService, tenant: &str, scope: &str) -> Result<Tree, ToolResult> {
    let filter = ListFilter {
        scope: Some(scope.to_owned()),
        record_type: Some(FILE_TYPE.to_owned()),
        ..ListFilter::default()
    };
    let mut tree = Tree::new();
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
            let text = record.content.get("statement").and_then(Value::as_str).unwrap_or_default();
            tree.insert(
                key.clone(),
                File { text: text.to_owned(), record: Some((record.id.clone(), record.revision)) },
            );
        }
        if page.len() < PAGE as usize || tree.len() > tree::MAX_FILES {
            return Ok(tree);
        }
        cursor = page.last().map(|record| record.id.clone());
    }
}

/// Writes a command's changes as the caller, into its scope.
struct FileWriter<'a> {
    memories: &'a MemoryService,
    tenant: &'a str,
    scope: &'a str,
    author: &'a str,
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
                let writer = Writer { actor: self.author, author: Some(self.author), own_twins_only: true };
                self.memories.create_as(self.tenant, &envelope, &writer).await.map_err(refused)?;
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
                self.memories.delete(self.tenant, id, self.author).await.map_err(refused)?;
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
            .update(self.tenant, id, &Value::Object(patch), Some(*revision), self.author)
            .await
            .map_err(|err| refusal(TOOL_NAME, err))?;
        Ok(record.status)
    }
}

#[cfg(test)]
mod tests;
