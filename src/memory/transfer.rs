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
//!
//! A line may carry its embedding (`"embedding": {"model", "vector"}`, as an export with
//! `embeddings=true` writes it), and a vector of the running model is stored without embedding
//! the text again: a restore of a million records is then not hours of model time. A vector is
//! also what the semantic layer trusts: a note about a bird census that carries a refund
//! question's vector is injected for refund questions. So the model embeds the text of a sample
//! of the lines that carry one (`check_vectors`) and a vector further than `MIN_VECTOR_COSINE`
//! from it refuses its line, in the dry run as in the apply; the report says how many were
//! sampled and how many matched. The sample (`sampled`): every line when at most
//! `CHECK_ALL_UP_TO` carry a vector; else the first `ALWAYS_FIRST`, and each other line when a
//! keyed hash of its text and vector falls in a share that keeps the sample at least
//! `CHECK_ALL_UP_TO` lines and 1/`SAMPLE_ONE_IN` of the file. The key is random per process, so a
//! file cannot place its forged lines where no check looks (a position, a pattern of ids), and
//! the same line is decided alike in a dry run and its apply on one replica; each forged line is
//! caught with at least that share's chance, and a forgery that matters (many lines pushed toward
//! one question) is all but certain to be. At ~100 texts a second on two cores, a 100,000-line
//! restore checks ~1,600 lines (~16 s) where embedding it all would take ~17 minutes.

use super::checks::envelope::{Problem, Rules};
use super::{MemoryError, MemoryService};
use crate::clock::{format_ms, now_ms};
use crate::index::{StoredRecord, index_records};
use crate::record::Envelope;
use crate::store::Store;
use crate::store::imports::NewImport;
use crate::store::memories::{ImportMatch, ListFilter};
use base64::Engine as _;
use futures_util::{Stream, TryStreamExt};
use serde::Serialize;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;

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
    /// What became of the embeddings the lines carried; absent when none carried one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub embeddings: Option<EmbeddingCounts>,
}

/// Of the new lines that carried an `embedding`: stored as they came (the running model's, of its
/// dimension), or ignored and embedded again from the text (another model's or dimension's).
/// And of every line that carried the running model's vector: how many the model checked against
/// their text (`sampled`), and how many of those were their text's (`matched`; the others are
/// invalid lines).
#[derive(Debug, Clone, Default, Serialize)]
pub struct EmbeddingCounts {
    pub stored: usize,
    pub re_embedded: usize,
    pub sampled: usize,
    pub matched: usize,
}

/// Carried vectors up to which every one is checked (a few seconds of model time).
pub const CHECK_ALL_UP_TO: usize = 256;
/// Past `CHECK_ALL_UP_TO`, the first this many lines that carry a vector are always checked: a
/// file whose forged lines come first is caught for certain.
pub const ALWAYS_FIRST: usize = 64;
/// Past `CHECK_ALL_UP_TO`, at least one line in this many is checked.
pub const SAMPLE_ONE_IN: usize = 64;
/// The least cosine between a carried vector and the running model's embedding of the line's
/// text. The same text embedded twice differs in the last bits of a batched run (cosine above
/// 0.9999); another text's vector is below this unless the two say nearly the same words.
pub const MIN_VECTOR_COSINE: f32 = 0.99;

/// Whether the `k`-th (from 0) of `n` lines carrying a vector is checked, `hash` being its keyed
/// hash (`sample_hash`): all of a small file, the first `ALWAYS_FIRST`, and the lines whose hash
/// falls in a share of `max(n / SAMPLE_ONE_IN, CHECK_ALL_UP_TO) / n`.
pub fn sampled(k: usize, n: usize, hash: u64) -> bool {
    if n <= CHECK_ALL_UP_TO || k < ALWAYS_FIRST {
        return true;
    }
    let share = (n / SAMPLE_ONE_IN).max(CHECK_ALL_UP_TO);
    let n = u64::try_from(n).unwrap_or(u64::MAX);
    hash % n < u64::try_from(share).unwrap_or(u64::MAX)
}

/// A line's hash under this process's random key: what `sampled` draws by. A file's author
/// cannot know it, so cannot choose lines that go unchecked.
fn sample_hash(text: &str, vector: &[f32]) -> u64 {
    use std::hash::{BuildHasher, Hash, Hasher};
    static KEY: std::sync::OnceLock<std::hash::RandomState> = std::sync::OnceLock::new();
    let mut hasher = KEY.get_or_init(std::hash::RandomState::new).build_hasher();
    text.hash(&mut hasher);
    for x in vector {
        x.to_bits().hash(&mut hasher);
    }
    hasher.finish()
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

    fn report(
        self,
        dry_run: bool,
        import_id: Option<String>,
        embeddings: Option<EmbeddingCounts>,
    ) -> ImportReport {
        ImportReport {
            dry_run,
            applied: import_id.is_some(),
            import_id,
            counts: self.counts,
            lines: self.lines,
            invalid_not_listed: self.invalid_not_listed,
            embeddings,
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
        let running = RunningModel { id: self.embedder.model_id(), dimensions: self.embedder.dimensions() };
        let mut checked = self.check_lines(body, now).await;
        let vectors_checked = self.check_vectors(&mut checked).await;
        let valid: Vec<&Envelope> =
            checked.iter().filter_map(|(_, c)| c.as_ref().ok().map(|(e, _)| e)).collect();
        let mut matches =
            self.store.import_matches(tenant, &valid).await.map_err(MemoryError::Store)?.into_iter();

        let mut report = ReportLines::default();
        let mut to_add: Vec<NewImport> = Vec::new();
        let mut embeddings: Option<EmbeddingCounts> = vectors_checked;
        // Within one file, a repeated id or topic is a mistake in the file, named by line.
        let mut seen_ids: HashMap<String, usize> = HashMap::new();
        let mut seen_topics: HashMap<(String, Vec<String>), usize> = HashMap::new();
        for (line, checked) in checked {
            let outcome = match checked {
                Err(problems) => LineOutcome::Invalid { problems },
                Ok((envelope, carried)) => {
                    let found = matches.next().unwrap_or(ImportMatch::New);
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
                        match found {
                            ImportMatch::Existing(existing) => LineOutcome::Existing { id: existing },
                            ImportMatch::New => {
                                seen_ids.insert(id.clone(), line);
                                if let Some(topic) = topic {
                                    seen_topics.insert(topic, line);
                                }
                                let vector = match carried {
                                    Carried::None => None,
                                    Carried::Running(vector) => {
                                        embeddings.get_or_insert_default().stored += 1;
                                        Some(vector)
                                    }
                                    Carried::Other => {
                                        embeddings.get_or_insert_default().re_embedded += 1;
                                        None
                                    }
                                };
                                to_add.push(NewImport {
                                    id: id.clone(),
                                    envelope,
                                    vector,
                                    line_tokens: None,
                                });
                                LineOutcome::New { id }
                            }
                        }
                    }
                }
            };
            report.push(line, outcome);
        }

        // All or nothing: an apply with an invalid line adds nothing.
        if dry_run || report.counts.invalid > 0 {
            return Ok(report.report(dry_run, None, embeddings));
        }
        // Token counts on every core, once: the store keeps them and the index takes them.
        let to_add = crate::cpu::run(body.len(), move || {
            crate::cpu::map_on_cores(to_add, |mut line| {
                let tokens =
                    crate::record::line_tokens(&line.id, &line.envelope.record_type, &line.envelope.content);
                line.line_tokens = Some(tokens);
                line
            })
        })
        .await;
        let import_id = format!("imp-{}", uuid::Uuid::new_v4().simple());
        let added = self
            .store
            .apply_import_with_vectors(tenant, &import_id, &to_add, running.id, actor, now)
            .await
            .map_err(|err| MemoryError::from_store(err, &import_id))?;
        // Findable by exact terms at once; by similarity at once with a carried vector, else once
        // the background embedding is done. Terms are taken on every core, and the records
        // indexed, off the async workers: thousands of inserts are a stall for every connection
        // a worker serves.
        let stored: Vec<StoredRecord> = added
            .into_iter()
            .zip(to_add)
            .map(|(record, line)| StoredRecord { record, vector: line.vector, line_tokens: line.line_tokens })
            .collect();
        let unembedded = stored.iter().any(|stored| stored.vector.is_none());
        let index = Arc::clone(&self.index);
        crate::cpu::run(body.len(), move || {
            for item in index_records(stored) {
                index.upsert(item);
            }
        })
        .await;
        self.announce();
        if unembedded {
            self.spawn_backfill();
        }
        Ok(report.report(dry_run, Some(import_id), embeddings))
    }

    /// Every non-blank line of `body` read and checked, with its 1-based number, in body order:
    /// on every core and off the async workers once the body is large (a 64 MiB import is
    /// seconds of parsing that would otherwise stall every connection its worker serves).
    async fn check_lines(&self, body: &str, now: i64) -> Vec<(usize, Checked)> {
        let body: Arc<str> = Arc::from(body);
        let schemas = Arc::clone(&self.schemas);
        let max_content_bytes = self.max_content_bytes;
        let model = self.embedder.model_id().to_owned();
        let dimensions = self.embedder.dimensions();
        crate::cpu::run(body.len(), move || {
            let running = RunningModel { id: &model, dimensions };
            let rules = Rules { schemas: &schemas, max_content_bytes, now_ms: now };
            let max_line = max_line_bytes(max_content_bytes);
            let lines: Vec<(usize, &str)> =
                body.lines().enumerate().filter(|(_, text)| !text.trim().is_empty()).collect();
            crate::cpu::map_on_cores(lines, |(index, text)| {
                (index + 1, check_line(text, max_line, &running, &rules))
            })
        })
        .await
    }

    /// Checks the sampled carried vectors of the running model (`sampled`) against the model's
    /// embedding of their lines' text; a line whose vector is not its text's becomes invalid.
    /// Returns the counts (`sampled`, `matched`) when a line carried such a vector. When the
    /// model cannot answer, no carried vector is trusted: each line's text is embedded again
    /// later, as for another model's vector.
    async fn check_vectors(&self, checked: &mut [(usize, Checked)]) -> Option<EmbeddingCounts> {
        let carrying: Vec<usize> =
            (0..checked.len()).filter(|&at| matches!(checked[at].1, Ok((_, Carried::Running(_))))).collect();
        if carrying.is_empty() {
            return None;
        }
        // The sampled lines (by position in `checked`) and their texts, in the same order.
        let (mut sample, mut texts): (Vec<usize>, Vec<String>) = (Vec::new(), Vec::new());
        for (k, &at) in carrying.iter().enumerate() {
            if let Ok((envelope, Carried::Running(vector))) = &checked[at].1 {
                let text = super::envelope_passage_text(envelope);
                if sampled(k, carrying.len(), sample_hash(&text, vector)) {
                    sample.push(at);
                    texts.push(text);
                }
            }
        }
        let embedded = match self.embedder.embed_passages(&texts).await {
            Ok(embedded) => embedded,
            Err(err) => {
                tracing::warn!(error = %err, "the model could not check an import's vectors; its lines are embedded again");
                for &at in &carrying {
                    if let Ok((_, carried)) = &mut checked[at].1 {
                        *carried = Carried::Other;
                    }
                }
                return Some(EmbeddingCounts::default());
            }
        };
        let mut counts = EmbeddingCounts { sampled: sample.len(), ..EmbeddingCounts::default() };
        for (at, model) in sample.iter().zip(embedded) {
            let Ok((_, Carried::Running(vector))) = &checked[*at].1 else { continue };
            let cosine = crate::vector::dot(vector, &model);
            if cosine >= MIN_VECTOR_COSINE {
                counts.matched += 1;
                continue;
            }
            checked[*at].1 = Err(vec![Problem::new(
                "$.embedding.vector",
                "vector_mismatch",
                format!(
                    "the vector is not this line's text as the running model embeds it (cosine {cosine:.3}, at least {MIN_VECTOR_COSINE} expected): a line may carry only its own text's vector; leave `embedding` out to have the text embedded"
                ),
            )]);
        }
        Some(counts)
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

    /// `export_pages`, with each record's stored embedding when `embeddings` is set.
    pub fn export_pages_with(
        &self,
        tenant: &str,
        filter: &ListFilter,
        embeddings: bool,
    ) -> impl Stream<Item = Result<String, MemoryError>> + Send + 'static {
        export_pages_with(self.store.clone(), tenant.to_owned(), filter.clone(), embeddings)
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
    export_pages_with(store, tenant, filter, false)
}

/// `export_pages`, each line with the record's stored embedding when `embeddings` is set:
/// `"embedding": {"model": "<model id>", "vector": "<base64 of little-endian f32>"}`, exactly
/// as stored (whichever model made it; an import decides whether it is of use). A record not
/// embedded yet has no `embedding`.
pub fn export_pages_with(
    store: Store,
    tenant: String,
    filter: ListFilter,
    embeddings: bool,
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
    futures_util::stream::try_unfold(pages, move |mut pages| async move {
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
        let vectors = if embeddings {
            let ids: Vec<&str> = page.iter().map(|r| r.id.as_str()).collect();
            pages.store.stored_embeddings(&pages.tenant, &ids).await.map_err(MemoryError::Store)?
        } else {
            HashMap::new()
        };
        let mut chunk = String::new();
        for record in &page {
            let mut line = record.envelope_json();
            if let (Some((model, vector)), Value::Object(map)) = (vectors.get(&record.id), &mut line) {
                map.insert("embedding".into(), serde_json::json!({"model": model, "vector": vector}));
            }
            chunk.push_str(&line.to_string());
            chunk.push('\n');
        }
        Ok(Some((chunk, pages)))
    })
}

fn invalid(path: &str, kind: &str, message: String) -> LineOutcome {
    LineOutcome::Invalid { problems: vec![Problem::new(path, kind, message)] }
}

/// One import line read: parsed, its carried embedding taken out, its envelope checked.
fn check_line(text: &str, max_line: usize, running: &RunningModel<'_>, rules: &Rules<'_>) -> Checked {
    let mut value = parse_line(text, max_line).map_err(|problem| vec![problem])?;
    let carried = take_embedding(&mut value, running).map_err(|problem| vec![problem])?;
    let envelope = super::check_envelope(&value, rules)?;
    Ok((envelope, carried))
}

/// The model this replica embeds with: a carried vector of it is stored as is.
struct RunningModel<'a> {
    id: &'a str,
    dimensions: usize,
}

/// An import line as read: its envelope and carried embedding, or its problems.
type Checked = Result<(Envelope, Carried), Vec<Problem>>;

/// The embedding an import line carried.
enum Carried {
    None,
    /// The running model's, of its dimension and unit length: stored without embedding.
    Running(Arc<[f32]>),
    /// Another model's or dimension's: ignored, the text is embedded again (vectors of two
    /// models are never mixed in one index).
    Other,
}

/// How far from unit length a carried vector of the running model may be (f32 rounding of a
/// normalized vector is ~1e-7 per component): the index takes dot products as cosines.
const UNIT_TOLERANCE: f32 = 1e-3;

/// Takes the line's `embedding` out of it (the envelope check knows no such field) and reads
/// it. A malformed one makes the line invalid, whichever model it names: a file that says it
/// carries a vector and does not is a broken file, not one to embed quietly.
fn take_embedding(value: &mut Value, running: &RunningModel<'_>) -> Result<Carried, Problem> {
    let Some(embedding) = value.as_object_mut().and_then(|map| map.remove("embedding")) else {
        return Ok(Carried::None);
    };
    let bad = |path: &str, kind: &str, message: String| Problem::new(path, kind, message);
    let (Some(model), Some(vector)) =
        (embedding.get("model").and_then(Value::as_str), embedding.get("vector").and_then(Value::as_str))
    else {
        return Err(bad(
            "$.embedding",
            "invalid_embedding",
            "embedding must be {\"model\": \"<model id>\", \"vector\": \"<base64 of little-endian f32>\"}"
                .into(),
        ));
    };
    if embedding.as_object().is_some_and(|map| map.len() != 2) {
        return Err(bad(
            "$.embedding",
            "invalid_embedding",
            "embedding holds only `model` and `vector`".into(),
        ));
    }
    let bytes = base64::engine::general_purpose::STANDARD.decode(vector).map_err(|err| {
        bad("$.embedding.vector", "invalid_base64", format!("the vector is not standard base64: {err}"))
    })?;
    if bytes.is_empty() || bytes.len() % 4 != 0 {
        return Err(bad(
            "$.embedding.vector",
            "invalid_length",
            format!(
                "the vector is {} bytes; little-endian f32 take a multiple of 4, at least one",
                bytes.len()
            ),
        ));
    }
    let floats: Vec<f32> =
        bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
    if let Some(at) = floats.iter().position(|x| !x.is_finite()) {
        return Err(bad(
            "$.embedding.vector",
            "not_finite",
            format!("component {at} is not a finite number"),
        ));
    }
    if model != running.id || floats.len() != running.dimensions {
        return Ok(Carried::Other);
    }
    let norm = floats.iter().map(|x| x * x).sum::<f32>().sqrt();
    if (norm - 1.0).abs() > UNIT_TOLERANCE {
        return Err(bad(
            "$.embedding.vector",
            "not_normalized",
            format!("a vector of the running model has unit length; this one has length {norm}"),
        ));
    }
    Ok(Carried::Running(Arc::from(floats)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_file_has_every_vector_checked_and_a_large_one_its_first_and_a_keyed_share() {
        for n in [1, 2, CHECK_ALL_UP_TO] {
            assert!((0..n).all(|k| sampled(k, n, u64::MAX)), "{n}");
        }
        let n = 100_000;
        assert!((0..ALWAYS_FIRST).all(|k| sampled(k, n, u64::MAX)));
        assert!(!sampled(ALWAYS_FIRST, n, u64::MAX - 1));
        // Drawn by the keyed hash: about one line in `SAMPLE_ONE_IN` past the first ones.
        let drawn = (ALWAYS_FIRST..n)
            .filter(|&k| sampled(k, n, sample_hash(&format!("line {k}"), &[0.5, 0.5])))
            .count();
        let expected = (n - ALWAYS_FIRST) / SAMPLE_ONE_IN;
        assert!(
            drawn > expected * 8 / 10 && drawn < expected * 12 / 10,
            "{drawn} of {n} drawn, ~{expected} expected"
        );
        // Just past the bound, the share keeps the sample at `CHECK_ALL_UP_TO` lines or so.
        let n = CHECK_ALL_UP_TO + 44;
        let drawn =
            (ALWAYS_FIRST..n).filter(|&k| sampled(k, n, sample_hash(&format!("line {k}"), &[1.0]))).count();
        assert!(drawn + ALWAYS_FIRST > CHECK_ALL_UP_TO * 8 / 10, "{drawn} drawn of {n}");
    }

    #[test]
    fn the_same_line_is_drawn_alike_in_a_dry_run_and_its_apply() {
        for k in 0..100 {
            let text = format!("Refunds take {k} days.");
            assert_eq!(sample_hash(&text, &[0.6, 0.8]), sample_hash(&text, &[0.6, 0.8]));
            assert_ne!(sample_hash(&text, &[0.6, 0.8]), sample_hash(&text, &[0.8, 0.6]), "the vector counts");
        }
    }
}
