//! Export and import as JSON Lines. An export line is a record's envelope (`Record::envelope_json`),
//! which is exactly what import accepts, so export → import into an empty store gives the same
//! records. Import first classifies every line (new, existing, invalid, with reasons); a dry run
//! stops there, an apply adds all new lines in one transaction or nothing at all.

use super::checks::envelope::Problem;
use super::{MemoryError, MemoryService};
use crate::clock::{format_ms, now_ms};
use crate::index::IndexedRecord;
use crate::record::Envelope;
use crate::store::Store;
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

/// How far an applied import is from being findable by meaning (`GET /admin/v1/imports/{id}`).
#[derive(Debug, Serialize)]
pub struct ImportProgress {
    pub import_id: String,
    /// Records the import added.
    pub added: i64,
    /// Of them, active and still there (not deleted, undone, paused or archived since): the ones
    /// to embed.
    pub present: i64,
    /// Of those, embedded by the running model: findable by meaning.
    pub embedded: i64,
    /// `embedding`, `ready` (every present record embedded) or `undone`.
    pub state: &'static str,
    pub created_at: String,
    /// Records embedded a second since the import, and the seconds left at that pace.
    pub records_per_second: Option<f64>,
    pub eta_seconds: Option<f64>,
}

impl MemoryService {
    /// Where an import stands (any replica can answer: it reads the store).
    pub async fn import_progress(
        &self,
        tenant: &str,
        import_id: &str,
    ) -> Result<ImportProgress, MemoryError> {
        let (added, created_at, undone_at) = self
            .store
            .import_info(tenant, import_id)
            .await
            .map_err(MemoryError::Store)?
            .ok_or_else(|| MemoryError::NotFound(import_id.to_owned()))?;
        let (present, embedded) = self
            .store
            .import_embedded(tenant, import_id, self.embedder.model_id())
            .await
            .map_err(MemoryError::Store)?;
        let elapsed = (now_ms() - created_at).max(1) as f64 / 1000.0;
        let rate = (embedded > 0).then(|| embedded as f64 / elapsed);
        let state = match (undone_at, embedded >= present) {
            (Some(_), _) => "undone",
            (None, true) => "ready",
            (None, false) => "embedding",
        };
        Ok(ImportProgress {
            import_id: import_id.to_owned(),
            added,
            present,
            embedded,
            state,
            created_at: format_ms(created_at),
            records_per_second: rate.map(|r| (r * 10.0).round() / 10.0),
            eta_seconds: match (state, rate) {
                ("embedding", Some(rate)) => Some(((present - embedded) as f64 / rate).ceil()),
                _ => None,
            },
        })
    }

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
        export(self.store(), tenant, filter).await
    }
}

/// Every matching record of the tenant as JSON Lines, in id order. Reads the store only (no
/// index, no model), so `memgate memory export` runs without loading the embedder.
pub async fn export(store: &Store, tenant: &str, filter: &ListFilter) -> Result<String, MemoryError> {
    let mut out = String::new();
    let mut cursor: Option<String> = None;
    loop {
        let page =
            store.list_memories(tenant, filter, cursor.as_deref(), 500).await.map_err(MemoryError::Store)?;
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

fn invalid(path: &str, kind: &str, message: String) -> LineOutcome {
    LineOutcome::Invalid { problems: vec![Problem::new(path, kind, message)] }
}
