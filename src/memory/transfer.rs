//! Export and import as JSON Lines. An export line is a record's envelope (`Record::envelope_json`),
//! which is exactly what import accepts, so export → import into an empty store gives the same
//! records. Import first classifies every line (new, existing, invalid, with reasons); a dry run
//! stops there, an apply adds all new lines in one transaction or nothing at all.
//!
//! Neither direction holds more than it must. An export is read from the store a page at a time
//! as its reader takes it (`export_pages`), so a tenant of any size costs one page of memory. An
//! import reads each line only if it is within `max_line_bytes` (a longer one is invalid unread),
//! and its report lists the first `MAX_LISTED_INVALID` invalid lines and counts the rest: a body
//! of a million broken lines gets an answer of bounded size, and every valid line is still
//! classified and, on apply, imported as before.

use super::checks::envelope::Problem;
use super::{MemoryError, MemoryService};
use crate::clock::{format_ms, now_ms};
use crate::index::IndexedRecord;
use crate::record::Envelope;
use crate::store::Store;
use crate::store::memories::{ImportMatch, ListFilter};
use futures_util::{Stream, TryStreamExt};
use serde::Serialize;
use serde_json::Value;
use std::collections::HashMap;

/// Records an export reads from the store at a time.
const EXPORT_PAGE: u32 = 500;

/// Invalid lines an import report lists; past this many they are counted in `counts.invalid`
/// and `invalid_not_listed` only.
pub const MAX_LISTED_INVALID: usize = 100;

/// The longest import line read: four times `records.max_content_bytes` (content written with
/// `\u` escapes, plus the envelope and metadata around it), and at least 1 MiB, the largest body
/// `POST /admin/v1/memories` takes, so any record that can be created can be imported.
pub fn max_line_bytes(max_content_bytes: usize) -> usize {
    max_content_bytes.saturating_mul(4).max(1024 * 1024)
}

/// One import line as JSON, or why it is not read: longer than `max_line_bytes` (refused
/// without parsing it), or not JSON.
pub fn parse_line(text: &str, max_line_bytes: usize) -> Result<Value, Problem> {
    if text.len() > max_line_bytes {
        return Err(Problem::new(
            "$",
            "too_large",
            format!(
                "the line is {} bytes; a line may hold at most {max_line_bytes} (four times records.max_content_bytes, at least 1 MiB)",
                text.len()
            ),
        ));
    }
    serde_json::from_str(text)
        .map_err(|err| Problem::new("$", "invalid_json", format!("not a JSON object: {err}")))
}

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
    /// New and existing lines, and the first `MAX_LISTED_INVALID` invalid ones, in body order.
    pub lines: Vec<ImportLine>,
    /// Invalid lines past the first `MAX_LISTED_INVALID`, counted but not listed.
    pub invalid_not_listed: usize,
}

/// The lines of a report as they are classified: every outcome counted, invalid lines past
/// `MAX_LISTED_INVALID` not kept.
#[derive(Debug, Default)]
pub struct ReportLines {
    pub counts: ImportCounts,
    pub lines: Vec<ImportLine>,
    pub invalid_not_listed: usize,
}

impl ReportLines {
    pub fn push(&mut self, line: usize, outcome: LineOutcome) {
        match &outcome {
            LineOutcome::New { .. } => self.counts.new += 1,
            LineOutcome::Existing { .. } => self.counts.existing += 1,
            LineOutcome::Invalid { .. } => {
                self.counts.invalid += 1;
                if self.counts.invalid > MAX_LISTED_INVALID {
                    self.invalid_not_listed += 1;
                    return;
                }
            }
        }
        self.lines.push(ImportLine { line, outcome });
    }

    fn report(self, dry_run: bool, import_id: Option<String>) -> ImportReport {
        ImportReport {
            dry_run,
            applied: import_id.is_some(),
            import_id,
            counts: self.counts,
            lines: self.lines,
            invalid_not_listed: self.invalid_not_listed,
        }
    }
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
        let max_line = max_line_bytes(self.max_content_bytes);
        let mut report = ReportLines::default();
        let mut to_add: Vec<(String, Envelope)> = Vec::new();
        // Within one file, a repeated id or topic is a mistake in the file, named by line.
        let mut seen_ids: HashMap<String, usize> = HashMap::new();
        let mut seen_topics: HashMap<(String, Vec<String>), usize> = HashMap::new();

        for (index, text) in body.lines().enumerate() {
            let line = index + 1;
            if text.trim().is_empty() {
                continue;
            }
            let outcome = match parse_line(text, max_line) {
                Err(problem) => LineOutcome::Invalid { problems: vec![problem] },
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
            report.push(line, outcome);
        }

        // All or nothing: an apply with an invalid line adds nothing.
        if dry_run || report.counts.invalid > 0 {
            return Ok(report.report(dry_run, None));
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
        Ok(report.report(dry_run, Some(import_id)))
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

    /// Every matching record of the tenant as JSON Lines, in id order, in one string (for callers
    /// that want it whole; `export_pages` reads it as a stream).
    pub async fn export(&self, tenant: &str, filter: &ListFilter) -> Result<String, MemoryError> {
        export_pages(self.store.clone(), tenant.to_owned(), filter.clone())
            .try_fold(String::new(), |mut whole, page| async move {
                whole.push_str(&page);
                Ok(whole)
            })
            .await
    }

    /// Every matching record of the tenant as JSON Lines, in id order, a page at a time.
    pub fn export_pages(
        &self,
        tenant: &str,
        filter: &ListFilter,
    ) -> impl Stream<Item = Result<String, MemoryError>> + Send + 'static {
        export_pages(self.store.clone(), tenant.to_owned(), filter.clone())
    }
}

/// Every matching record of the tenant as JSON Lines, in id order: one chunk of lines per page
/// of `EXPORT_PAGE` records, each page read from the store only when the one before has been
/// taken, so a slow reader holds one page and an export of any size never sits in memory whole.
/// Reads the store only (no index, no model), so `memgate memory export` runs without loading the
/// embedder. Pages follow the id order by keyset (after the last id sent), so a record written
/// during an export appears in it if its id sorts after the page being read.
pub fn export_pages(
    store: Store,
    tenant: String,
    filter: ListFilter,
) -> impl Stream<Item = Result<String, MemoryError>> + Send + 'static {
    struct Pages {
        store: Store,
        tenant: String,
        filter: ListFilter,
        /// The last id sent; `None` before the first page.
        after: Option<String>,
        done: bool,
    }
    let pages = Pages { store, tenant, filter, after: None, done: false };
    futures_util::stream::try_unfold(pages, |mut pages| async move {
        if pages.done {
            return Ok(None);
        }
        let page = pages
            .store
            .list_records(&pages.tenant, &pages.filter, pages.after.as_deref(), EXPORT_PAGE)
            .await
            .map_err(MemoryError::Store)?;
        let Some(last) = page.last() else {
            return Ok(None);
        };
        pages.done = page.len() < EXPORT_PAGE as usize;
        pages.after = Some(last.id.clone());
        let mut chunk = String::new();
        for record in &page {
            chunk.push_str(&record.envelope_json().to_string());
            chunk.push('\n');
        }
        Ok(Some((chunk, pages)))
    })
}

fn invalid(path: &str, kind: &str, message: String) -> LineOutcome {
    LineOutcome::Invalid { problems: vec![Problem::new(path, kind, message)] }
}
