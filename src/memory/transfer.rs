//! Export and import as JSON Lines. An export line is a record's envelope (`Record::envelope_json`),
//! which is exactly what import accepts, so export → import into an empty store gives the same
//! records. Import first classifies every line (new, existing, invalid, with reasons); a dry run
//! stops there, an apply adds all new lines in one transaction or nothing at all.

use super::envelope::Problem;
use super::record::{Envelope, now_ms};
use super::{MemoryError, MemoryService};
use crate::funnel::index::IndexedRecord;
use crate::store::memories::{ImportMatch, ListFilter};
use serde::Serialize;
use serde_json::Value;
use std::collections::HashMap;

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum LineOutcome {
    New { id: String },
    Existing { id: String },
    Invalid { problems: Vec<Problem> },
}

#[derive(Debug, Clone, Serialize)]
pub struct ImportLine {
    /// 1-based line number in the body.
    pub line: usize,
    #[serde(flatten)]
    pub outcome: LineOutcome,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct ImportCounts {
    pub new: usize,
    pub existing: usize,
    pub invalid: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct ImportReport {
    pub dry_run: bool,
    /// Set when the import was applied; `POST /admin/v1/imports/{id}/undo` takes it.
    pub import_id: Option<String>,
    pub applied: bool,
    pub counts: ImportCounts,
    pub lines: Vec<ImportLine>,
}

impl MemoryService {
    pub async fn import(
        &self,
        tenant: &str,
        body: &str,
        dry_run: bool,
        actor: &str,
    ) -> Result<ImportReport, MemoryError> {
        let now = now_ms();
        let mut lines = Vec::new();
        let mut to_add: Vec<(String, Envelope)> = Vec::new();
        // Within one file, a repeated id or topic is a mistake in the file, named by line.
        let mut seen_ids: HashMap<String, usize> = HashMap::new();
        let mut seen_topics: HashMap<(String, Vec<String>), usize> = HashMap::new();
        let mut counts = ImportCounts::default();

        for (index, text) in body.lines().enumerate() {
            let line = index + 1;
            if text.trim().is_empty() {
                continue;
            }
            let outcome = match serde_json::from_str::<Value>(text) {
                Err(err) => invalid("$", "invalid_json", format!("not a JSON object: {err}")),
                Ok(value) => match self.check(&value, now) {
                    Err(MemoryError::Invalid(problems)) => LineOutcome::Invalid { problems },
                    Err(other) => return Err(other),
                    Ok(envelope) => {
                        let id = envelope
                            .id
                            .clone()
                            .unwrap_or_else(|| format!("mem-{}", uuid::Uuid::new_v4().simple()));
                        let topic = envelope.key.clone().map(|k| (k, envelope.scope.clone()));
                        if let Some(first) = seen_ids.get(&id) {
                            invalid("$.id", "duplicate", format!("id `{id}` repeats line {first}"))
                        } else if let Some(first) = topic.as_ref().and_then(|t| seen_topics.get(t)) {
                            invalid("$.key", "duplicate", format!("key and scope repeat line {first}"))
                        } else {
                            match self
                                .store
                                .import_match(tenant, &envelope)
                                .await
                                .map_err(MemoryError::Store)?
                            {
                                ImportMatch::Existing(existing) => LineOutcome::Existing { id: existing },
                                ImportMatch::New => {
                                    seen_ids.insert(id.clone(), line);
                                    if let Some(topic) = topic {
                                        seen_topics.insert(topic, line);
                                    }
                                    to_add.push((id.clone(), envelope));
                                    LineOutcome::New { id }
                                }
                            }
                        }
                    }
                },
            };
            match &outcome {
                LineOutcome::New { .. } => counts.new += 1,
                LineOutcome::Existing { .. } => counts.existing += 1,
                LineOutcome::Invalid { .. } => counts.invalid += 1,
            }
            lines.push(ImportLine { line, outcome });
        }

        // All or nothing: an apply with an invalid line adds nothing.
        if dry_run || counts.invalid > 0 {
            return Ok(ImportReport { dry_run, import_id: None, applied: false, counts, lines });
        }
        let import_id = format!("imp-{}", uuid::Uuid::new_v4().simple());
        let added = self
            .store
            .apply_import(tenant, &import_id, &to_add, actor, now)
            .await
            .map_err(|err| MemoryError::from_store(err, &import_id))?;
        // Findable by exact terms at once; by similarity once the background embedding is done.
        for record in added {
            self.index.upsert(IndexedRecord::new(record, None));
        }
        self.announce();
        self.spawn_backfill();
        Ok(ImportReport { dry_run, import_id: Some(import_id), applied: true, counts, lines })
    }

    /// Removes exactly the records that import added; returns their ids.
    pub async fn undo_import(
        &self,
        tenant: &str,
        import_id: &str,
        actor: &str,
    ) -> Result<Vec<String>, MemoryError> {
        let (removed, seq) = self
            .store
            .undo_import(tenant, import_id, actor, now_ms())
            .await
            .map_err(|err| MemoryError::from_store(err, import_id))?;
        for record in &removed {
            self.index.remove(tenant, &record.id, seq);
        }
        self.announce();
        Ok(removed.into_iter().map(|r| r.id).collect())
    }

    /// Every matching record of the tenant as JSON Lines, in id order.
    pub async fn export(&self, tenant: &str, filter: &ListFilter) -> Result<String, MemoryError> {
        let mut out = String::new();
        let mut cursor: Option<String> = None;
        loop {
            let page = self.list(tenant, filter, cursor.as_deref(), 500).await?;
            for record in &page {
                out.push_str(&record.envelope_json().to_string());
                out.push('\n');
            }
            match page.last() {
                Some(last) if page.len() == 500 => cursor = Some(last.id.clone()),
                _ => return Ok(out),
            }
        }
    }
}

fn invalid(path: &str, kind: &str, message: String) -> LineOutcome {
    LineOutcome::Invalid { problems: vec![Problem::new(path, kind, message)] }
}
