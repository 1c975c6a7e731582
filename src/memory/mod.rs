//! Memory records: their shape (`record`), the checks on the way in (`envelope`), and the write
//! paths the admin API and the CLI share (`MemoryService`). The store keeps them; this module
//! decides what may be written, embeds what is written, and keeps the funnel's in-memory index
//! in step with the store after every committed write.

pub mod access;
pub mod checks;
pub mod dormancy;
pub mod review;
pub mod transfer;
pub mod writers;

pub use writers::{Bounds, Writer};

use crate::clock::now_ms;
use crate::embed::Embedder;
use crate::error::{Code, ErrorCode};
use crate::fanout::{Fanout, Topic};
use crate::index::{IndexedRecord, MemoryIndex, RecordHead};
use crate::memory::checks::schemas::SchemaSet;
use crate::record::collect_text;
use crate::record::{Envelope, Record, Status};
use crate::store::memories::{By, Change, Created, ListFilter};
use crate::store::{Store, StoreError};
use checks::envelope::{self, Problem, Rules};
use checks::problems::Problems;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use tokio_util::task::TaskTracker;

/// Why a memory operation failed; the admin layer maps each to a status.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    #[error("the record has {} problem(s)", .0.len())]
    Invalid(Vec<Problem>),
    #[error("no record `{0}` in this tenant")]
    NotFound(String),
    #[error(
        "revision conflict: If-Match said {expected}, the record is at revision {actual}; read it again and retry"
    )]
    Conflict { expected: i64, actual: i64 },
    #[error("a record with id `{0}` already exists; PATCH it to change it")]
    IdTaken(String),
    #[error("another live record already has this key and scope; change that one, or use another key")]
    TopicTaken,
    #[error(
        "record `{id}` is {status}, not proposed: only a record awaiting review is rejected; DELETE it to remove it"
    )]
    NotProposed { id: String, status: &'static str },
    #[error("record `{id}` is {actual}, and this change takes only {expected} records: nothing was changed")]
    StatusConflict { id: String, actual: &'static str, expected: String },
    #[error(transparent)]
    Store(StoreError),
}

impl MemoryError {
    fn from_store(err: StoreError, id: &str) -> MemoryError {
        match err {
            StoreError::NotFound => MemoryError::NotFound(id.to_owned()),
            StoreError::RevisionConflict { expected, actual } => MemoryError::Conflict { expected, actual },
            StoreError::IdTaken(id) => MemoryError::IdTaken(id),
            StoreError::TopicTaken => MemoryError::TopicTaken,
            other => MemoryError::Store(other),
        }
    }
}

/// What a client reads of a refused operation: each problem of a refused record with its path
/// (`error.problems`), the conflict's code, the store's answer otherwise.
impl ErrorCode for MemoryError {
    fn error_code(&self) -> Code {
        match self {
            MemoryError::Invalid(_) => Code::ValidationFailed,
            MemoryError::NotFound(_) => Code::NotFound,
            MemoryError::Conflict { .. } => Code::RevisionConflict,
            MemoryError::IdTaken(_) => Code::IdTaken,
            MemoryError::TopicTaken => Code::TopicTaken,
            MemoryError::NotProposed { .. } => Code::NotProposed,
            MemoryError::StatusConflict { .. } => Code::StatusConflict,
            MemoryError::Store(err) => err.error_code(),
        }
    }

    fn public_message(&self) -> String {
        match self {
            MemoryError::Invalid(problems) => {
                let summary = problems
                    .iter()
                    .map(|p| format!("{} ({})", p.path, p.kind))
                    .collect::<Vec<_>>()
                    .join(", ");
                format!("the record was refused: {summary}")
            }
            MemoryError::Store(err) => err.public_message(),
            other => other.to_string(),
        }
    }

    fn retry_after_secs(&self) -> Option<u64> {
        match self {
            MemoryError::Store(err) => err.retry_after_secs(),
            _ => None,
        }
    }

    fn details(&self) -> Option<serde_json::Map<String, Value>> {
        match self {
            MemoryError::Invalid(problems) => {
                Some(serde_json::Map::from_iter([("problems".to_owned(), serde_json::json!(problems))]))
            }
            _ => None,
        }
    }
}

/// Records embedded and stored per backfill batch.
const BACKFILL_BATCH: usize = 256;

/// The checks every write passes: the envelope, its type's schema, secrets, and the trigger
/// conditions and actions (a regex too large or an action without a service is refused here,
/// not found to never fire later). Needs no service, so an import checks lines on every core.
fn check_envelope(input: &Value, rules: &Rules<'_>) -> Result<Envelope, Vec<Problem>> {
    let envelope = envelope::check(input, rules)?;
    let problems = crate::triggers::check_conditions(&envelope.content);
    if !problems.is_empty() {
        return Err(problems
            .into_iter()
            .map(|p| Problem { path: p.path, kind: p.kind, message: p.message })
            .collect::<Problems>()
            .into_vec());
    }
    Ok(envelope)
}

#[derive(Default)]
struct BackfillFlags {
    running: std::sync::atomic::AtomicBool,
    again: std::sync::atomic::AtomicBool,
}

/// Records per page of the startup load: large enough that a page's round trip is small beside
/// indexing it, small enough that a page's rows (with their vectors' text, ~2 KB each) stay ~50 MB.
const LOAD_PAGE: i64 = 20_000;

#[derive(Clone)]
pub struct MemoryService {
    store: Store,
    schemas: Arc<SchemaSet>,
    max_content_bytes: usize,
    embedder: Embedder,
    index: Arc<MemoryIndex>,
    dedupe_threshold: f32,
    /// Background embedding of records written without one (imports, startup after a model
    /// change). Closed and awaited on shutdown; what it could not finish is redone at next start.
    tasks: TaskTracker,
    /// The store's sequence number up to which this replica's index has taken in its changes.
    synced_until: Arc<std::sync::atomic::AtomicI64>,
    /// One sync at a time: the ticker and the fan-out listener both start them.
    sync_lock: Arc<tokio::sync::Mutex<()>>,
    /// Whether a backfill runs, and whether it should look again when done (`spawn_backfill`).
    backfill: Arc<BackfillFlags>,
    /// When (ms) the index last took in the store's changes: how stale it may be while the
    /// database is unreachable.
    synced_at_ms: Arc<std::sync::atomic::AtomicI64>,
    /// Injections counted since the last flush to the store.
    accesses: Arc<access::AccessLog>,
    /// Tells other replicas about this one's writes (Redis), so they need not wait for the poll.
    fanout: Fanout,
    /// `[records.dormancy]`: per type, how long a record may go unused (empty: off).
    dormancy: Arc<dormancy::Rules>,
}

impl MemoryService {
    pub fn new(
        store: Store,
        schemas: Arc<SchemaSet>,
        max_content_bytes: usize,
        embedder: Embedder,
        dedupe_threshold: f32,
    ) -> MemoryService {
        MemoryService {
            store,
            schemas,
            max_content_bytes,
            embedder,
            index: Arc::new(MemoryIndex::default()),
            dedupe_threshold,
            tasks: TaskTracker::new(),
            synced_until: Arc::new(std::sync::atomic::AtomicI64::new(0)),
            sync_lock: Arc::default(),
            backfill: Arc::default(),
            synced_at_ms: Arc::new(std::sync::atomic::AtomicI64::new(now_ms())),
            accesses: Arc::default(),
            fanout: Fanout::disabled(),
            dormancy: Arc::default(),
        }
    }

    /// Applies `[records.dormancy]`; every type it names must have a schema.
    pub fn with_dormancy(mut self, rules: dormancy::Rules) -> Result<MemoryService, String> {
        let known: Vec<String> =
            self.schemas.versions().iter().flat_map(|version| self.schemas.types(version)).collect();
        if let Some(unknown) = rules.keys().find(|t| !known.contains(t)) {
            return Err(format!("`{unknown}` is not a record type (no schema names it)"));
        }
        self.dormancy = Arc::new(rules);
        Ok(self)
    }

    /// Bounds the cache of record bodies beside the index (`[memory] body_cache_mb`). Before the
    /// index is loaded or shared: it starts a new, empty one.
    pub fn with_body_cache(mut self, bytes: u64) -> MemoryService {
        self.index = Arc::new(MemoryIndex::with_body_cache(bytes));
        self
    }

    /// Announces every committed write to the other replicas through `fanout`.
    pub fn with_fanout(mut self, fanout: Fanout) -> MemoryService {
        self.fanout = fanout;
        self
    }

    /// This replica changed records in the store: the others should look.
    fn announce(&self) {
        self.fanout.notify(Topic::Memories);
    }

    /// Counts one access of each injected record; written by `flush_accesses`.
    pub fn note_accesses(&self, tenant: &str, ids: &[String]) {
        self.accesses.note(tenant, ids, now_ms());
    }

    /// Writes the counted accesses to the store (the ticker, once a second, and at shutdown).
    /// On failure they are kept for the next try.
    pub async fn flush_accesses(&self) -> Result<(), StoreError> {
        let pending = self.accesses.take();
        if let Err(err) = self.store.add_accesses(&pending).await {
            self.accesses.restore(pending);
            return Err(err);
        }
        Ok(())
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn index(&self) -> &Arc<MemoryIndex> {
        &self.index
    }

    pub fn embedder(&self) -> &Embedder {
        &self.embedder
    }

    /// The schemas records are checked against (built-in and the operator's).
    pub fn schemas(&self) -> &SchemaSet {
        &self.schemas
    }

    pub fn tasks(&self) -> &TaskTracker {
        &self.tasks
    }

    /// The bodies of these indexed records, in the order given: from the index's body cache, and
    /// what it does not hold from the store (one read per tenant; then cached). `None` for a
    /// record the store no longer holds as the index does (`RecordHead::admits`): deleted, or
    /// changed in a way the index has yet to take in. A body is never another revision's than
    /// the store's current one, nor another tenant's.
    pub async fn bodies(&self, heads: &[&RecordHead]) -> Result<Vec<Option<Arc<Record>>>, StoreError> {
        let cache = self.index.bodies();
        let mut out: Vec<Option<Arc<Record>>> =
            heads.iter().map(|head| cache.get(head.tenant(), head.id(), head.revision)).collect();
        let mut missing: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for (position, head) in heads.iter().enumerate().filter(|(position, _)| out[*position].is_none()) {
            missing.entry(head.tenant()).or_default().push(position);
        }
        for (tenant, positions) in missing {
            let ids: Vec<&str> = positions.iter().map(|p| heads[*p].id()).collect();
            let mut found: HashMap<String, Record> =
                self.store.get_records(tenant, &ids).await?.into_iter().map(|r| (r.id.clone(), r)).collect();
            for position in positions {
                let head = heads[position];
                let Some(record) = found.remove(head.id()).filter(|record| head.admits(record)) else {
                    continue;
                };
                let record = Arc::new(record);
                if record.revision == head.revision {
                    cache.insert(Arc::clone(&record));
                    // Removed from the index while it was read: its body must not stay behind.
                    if !self.index.has_revision(tenant, head.id(), head.revision) {
                        cache.remove(tenant, head.id(), head.revision);
                    }
                }
                out[position] = Some(record);
            }
        }
        Ok(out)
    }

    /// Loads every record with its stored embedding into the index, then embeds in the
    /// background the records that have none for the running model.
    pub async fn load_index(&self) -> Result<usize, StoreError> {
        // The cursor is read before the records: whatever commits in between is read again by
        // the next sync, and applying a write twice is harmless.
        let cursor = self.store.sync_cursor().await?;
        let started = std::time::Instant::now();
        let model = self.embedder.model_id().to_owned();
        // Page by page in (tenant, id) order, each page's records indexed on both cores while
        // the next page is read: no moment holds every row, and nothing is embedded here.
        let mut loader = self.index.loader();
        let mut after = (String::new(), String::new());
        let mut page = self.store.records_page(&model, (&after.0, &after.1), LOAD_PAGE).await?;
        let mut read = 0usize;
        // Rows the store kept no token count for (written before it did): counted here, and
        // kept once the replica serves, so that the next start reads them.
        let mut uncounted = Vec::new();
        while !page.is_empty() {
            read += page.len();
            if let Some((last, _, _)) = page.last() {
                after = (last.tenant.clone(), last.id.clone());
            }
            let full = page.len() as i64 == LOAD_PAGE;
            let records: Vec<_> = page
                .into_iter()
                .map(|(record, vector, line_tokens)| crate::index::StoredRecord {
                    record,
                    vector: vector.map(Arc::from),
                    line_tokens,
                })
                .collect();
            let indexing = tokio::task::spawn_blocking(move || {
                let uncounted: Vec<bool> = records.iter().map(|r| r.line_tokens.is_none()).collect();
                let items = crate::index::index_records(records);
                let counted: Vec<_> = items
                    .iter()
                    .zip(uncounted)
                    .filter(|(_, uncounted)| *uncounted)
                    .map(|(item, _)| {
                        let head = &item.head;
                        let tokens = u32::try_from(item.tokens).unwrap_or(u32::MAX);
                        (head.tenant().to_owned(), head.id().to_string(), head.revision, tokens)
                    })
                    .collect();
                loader.add(items);
                (loader, counted)
            });
            let next = async {
                if full {
                    self.store.records_page(&model, (&after.0, &after.1), LOAD_PAGE).await
                } else {
                    Ok(Vec::new())
                }
            };
            let (indexed, next) = tokio::join!(indexing, next);
            let counted;
            (loader, counted) =
                indexed.map_err(|err| StoreError::Corrupt(format!("indexing records: {err}")))?;
            uncounted.extend(counted);
            page = next?;
            tracing::info!(
                read,
                elapsed_ms = started.elapsed().as_millis() as u64,
                "loading the memory index"
            );
        }
        let count = loader.len();
        let index = self.index.clone();
        tokio::task::spawn_blocking(move || index.finish_load(loader))
            .await
            .map_err(|err| StoreError::Corrupt(format!("building the approximate indexes: {err}")))?;
        tracing::info!(
            records = count,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "memory index built"
        );
        self.synced_until.store(cursor, Ordering::SeqCst);
        self.synced_at_ms.store(now_ms(), Ordering::SeqCst);
        self.spawn_backfill();
        self.keep_counts(uncounted);
        Ok(count)
    }

    /// Writes, in the background, the token counts a load had to take itself, a thousand
    /// records a transaction: a store from before counts were kept gets them on its first
    /// start, once. A shutdown in between leaves the rest to be counted at the next start.
    fn keep_counts(&self, counts: Vec<(String, String, i64, u32)>) {
        if counts.is_empty() {
            return;
        }
        let store = self.store.clone();
        self.tasks.spawn(async move {
            for part in counts.chunks(1_000) {
                if let Err(err) = store.keep_line_tokens(part).await {
                    tracing::warn!(
                        error = %err,
                        "keeping records' token counts failed; the next start counts them again"
                    );
                    return;
                }
            }
            tracing::info!(records = counts.len(), "kept the token counts of records stored without them");
        });
    }

    /// Applies what other replicas wrote since the last sync to this replica's index, in the
    /// order the store numbered the writes (`Store::changed_since`): no clock is trusted, so a
    /// replica whose clock runs behind cannot keep a deleted or forgotten record alive. Runs
    /// from the server's ticker and on every fan-out message; applying a change twice is
    /// harmless (the sequence number decides). A replica that fell behind the pruned tombstones
    /// reloads everything.
    pub async fn sync_from_store(&self) -> Result<usize, StoreError> {
        let _one_at_a_time = self.sync_lock.lock().await;
        let cursor = self.synced_until.load(Ordering::SeqCst);
        let Some(changes) = self.store.changed_since(cursor).await? else {
            tracing::warn!(cursor, "this replica fell behind the pruned tombstones; reloading every record");
            return self.load_index().await;
        };
        let mut applied = 0;
        for (tenant, id, seq) in changes.removed {
            applied += usize::from(self.index.remove(&tenant, &id, seq));
        }
        let mut missing = false;
        for record in changes.records {
            if self.index.has_write(&record.tenant, &record.id, record.change_seq) {
                continue;
            }
            let vector = self
                .store
                .embedding(&record.tenant, &record.id, self.embedder.model_id())
                .await?
                .map(Arc::from);
            missing |= vector.is_none();
            applied += usize::from(self.index.upsert(IndexedRecord::new(record, vector)));
        }
        if missing {
            self.spawn_backfill();
        }
        self.synced_until.store(changes.upto, Ordering::SeqCst);
        self.synced_at_ms.store(now_ms(), Ordering::SeqCst);
        self.index.forget_removals_upto(changes.upto);
        Ok(applied)
    }

    /// Embeds, in the background, every indexed record that has no embedding yet.
    ///
    /// One backfill at a time per replica: an import, a sync that brought records without
    /// embeddings and a restart all ask for one, and several running at once would embed the same
    /// records over and over (a 100,000-record import once drove memory past 8 GB that way). A
    /// call while one runs asks it to look once more when it is done.
    pub fn spawn_backfill(&self) {
        if self.backfill.running.swap(true, Ordering::SeqCst) {
            self.backfill.again.store(true, Ordering::SeqCst);
            return;
        }
        let service = self.clone();
        self.tasks.spawn(async move {
            loop {
                service.backfill.again.store(false, Ordering::SeqCst);
                match service.backfill().await {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(records = n, "embedded records that had no embedding"),
                    Err(err) => {
                        tracing::warn!(error = %err, "background embedding stopped; it resumes at the next sync or start")
                    }
                }
                if service.backfill.again.load(Ordering::SeqCst) {
                    continue;
                }
                service.backfill.running.store(false, Ordering::SeqCst);
                // A request that came between the check and the store above found it running.
                if !service.backfill.again.load(Ordering::SeqCst) || service.backfill.running.swap(true, Ordering::SeqCst) {
                    break;
                }
            }
        });
    }

    /// How long ago the index last took in the store's changes.
    pub fn index_age(&self) -> std::time::Duration {
        let age = now_ms() - self.synced_at_ms.load(Ordering::SeqCst);
        std::time::Duration::from_millis(u64::try_from(age).unwrap_or(0))
    }

    /// Whether a backfill is running (or about to look again).
    pub fn is_backfilling(&self) -> bool {
        self.backfill.running.load(Ordering::SeqCst)
    }

    async fn backfill(&self) -> Result<usize, String> {
        let missing = self.index.missing_vectors();
        let mut done = 0;
        // Batches big enough to keep the embedder busy and the store's commits few; the embedder
        // splits them into model runs and lets live queries in between. Two stages: a batch's
        // vectors are stored while the next batch is embedded, so the model does not idle for
        // every commit.
        let mut embedded: Option<(Vec<Arc<Record>>, Vec<Vec<f32>>)> = None;
        for heads in missing.chunks(BACKFILL_BATCH) {
            let heads: Vec<&RecordHead> = heads.iter().collect();
            let chunk: Vec<Arc<Record>> =
                self.bodies(&heads).await.map_err(|e| e.to_string())?.into_iter().flatten().collect();
            let texts: Vec<String> = chunk.iter().map(|record| passage_text(record)).collect();
            let embedding = self.embedder.embed_passages(&texts);
            let vectors = match embedded.take() {
                None => embedding.await,
                Some((previous, vectors)) => {
                    let (next, stored) = tokio::join!(embedding, self.store_vectors(&previous, vectors));
                    done += stored?;
                    next
                }
            };
            embedded = Some((chunk, vectors.map_err(|e| e.to_string())?));
        }
        if let Some((last, vectors)) = embedded {
            done += self.store_vectors(&last, vectors).await?;
        }
        Ok(done)
    }

    /// Stores a backfill batch's vectors and gives the index them; returns how many.
    async fn store_vectors(&self, records: &[Arc<Record>], vectors: Vec<Vec<f32>>) -> Result<usize, String> {
        let items: Vec<(&str, &str, &[f32])> = records
            .iter()
            .zip(&vectors)
            .map(|(record, vector)| (record.tenant.as_str(), record.id.as_str(), vector.as_slice()))
            .collect();
        self.store.put_embeddings(self.embedder.model_id(), &items).await.map_err(|e| e.to_string())?;
        let mut done = 0;
        for (record, vector) in records.iter().zip(vectors) {
            self.index.set_vector(&record.tenant, &record.id, record.revision, Arc::from(vector));
            done += 1;
        }
        Ok(done)
    }

    fn check(&self, input: &Value, now: i64) -> Result<Envelope, MemoryError> {
        let rules = Rules { schemas: &self.schemas, max_content_bytes: self.max_content_bytes, now_ms: now };
        check_envelope(input, &rules).map_err(MemoryError::Invalid)
    }

    /// The checks every write passes (envelope, schema, secrets, triggers), without writing:
    /// for a writer that decides more before it writes (the observer's gates).
    pub fn check_write(&self, input: &Value) -> Result<Envelope, MemoryError> {
        self.check(input, now_ms())
    }

    /// A live record that `envelope` repeats: the same type, scope and content, or — without a
    /// key — one whose embedding is at least the dedupe threshold similar (with the same figures
    /// and negations). With its similarity, `None` for an exact repeat.
    pub async fn twin_of(
        &self,
        tenant: &str,
        envelope: &Envelope,
    ) -> Result<Option<(Record, Option<f32>)>, MemoryError> {
        if let Some(existing) = self.store.exact_repeat(tenant, envelope).await.map_err(MemoryError::Store)? {
            return Ok(Some((existing, None)));
        }
        if envelope.key.is_some() {
            return Ok(None);
        }
        let Some(vector) = self.embed_one(envelope_passage_text(envelope)).await else { return Ok(None) };
        match self.near_twin(tenant, envelope, &vector, None).await {
            Some((id, similarity)) => Ok(Some((self.get(tenant, &id).await?, Some(similarity)))),
            None => Ok(None),
        }
    }

    /// Embeds one record's text; a failure leaves it to the background backfill.
    async fn embed_one(&self, text: String) -> Option<Arc<[f32]>> {
        match self.embedder.embed_passages(&[text]).await {
            Ok(mut vectors) => vectors.pop().map(Arc::from),
            Err(err) => {
                tracing::warn!(error = %err, "embedding a record failed; it will be embedded later");
                None
            }
        }
    }

    /// Stores the embedding and puts the record into the index.
    async fn publish(&self, record: &Record, vector: Option<Arc<[f32]>>) {
        if let Some(vector) = &vector {
            if let Err(err) =
                self.store.put_embedding(&record.tenant, &record.id, self.embedder.model_id(), vector).await
            {
                tracing::warn!(error = %err, id = %record.id, "storing an embedding failed; it will be redone at start");
            }
        }
        self.index.upsert(IndexedRecord::new(record.clone(), vector));
        self.announce();
    }

    pub async fn create(&self, tenant: &str, input: &Value, actor: &str) -> Result<Created, MemoryError> {
        self.create_as(tenant, input, &Writer::operator(actor, None, crate::record::WriterKind::Operator))
            .await
    }

    /// Creates a record as `writer` says: its actor in the history, its author and provenance
    /// on the record, within the writer's bounds (`writers::admit`). A near-duplicate updates
    /// only a twin the writer may change (an agent must not change another author's record by
    /// writing something like it), and a key supersedes only a record the writer may change.
    pub async fn create_as(
        &self,
        tenant: &str,
        input: &Value,
        writer: &Writer<'_>,
    ) -> Result<Created, MemoryError> {
        let by = writer.by();
        let now = now_ms();
        let envelope = self.check(input, now)?;
        writers::admit(writer, &envelope, None).map_err(MemoryError::Invalid)?;
        // An exact repeat is answered with the existing record before any near-duplicate search,
        // which would otherwise "update" the record to itself.
        if let Some(existing) =
            self.store.exact_repeat(tenant, &envelope).await.map_err(MemoryError::Store)?
        {
            return Ok(Created::ExactRepeat(existing));
        }
        let vector = self.embed_one(envelope_passage_text(&envelope)).await;
        if let (Some(vector), None, None) = (&vector, &envelope.key, &envelope.id) {
            let author = (!writer.write_any).then_some(writer.author);
            if let Some((twin, similarity)) = self.near_twin(tenant, &envelope, vector, author).await {
                // The write updates its twin like a PATCH of the fields it names: what it leaves
                // out (validity, priority, aliases, …) stays as the twin had it.
                let current = self.get(tenant, &twin).await?;
                let merged =
                    envelope::merge_patch(&current.envelope_json(), input).map_err(MemoryError::Invalid)?;
                let merged = self.check(&merged, now)?;
                // A twin this writer may not change (one that acts, or of another writer's
                // making) stays as it is: the write is kept as a record of its own.
                if writers::admit(writer, &merged, Some(&current)).is_ok() {
                    let record = self
                        .store
                        .update_record(tenant, &twin, &merged, Some(current.revision), &by, now)
                        .await
                        .map_err(|err| MemoryError::from_store(err, &twin))?;
                    self.publish(&record, Some(vector.clone())).await;
                    return Ok(Created::Deduplicated { record, similarity });
                }
            }
        }
        let new_id = format!("mem-{}", uuid::Uuid::new_v4().simple());
        let may_supersede = |current: &Record| writers::admit(writer, &envelope, Some(current)).is_ok();
        let created = self
            .store
            .create_record_by(tenant, &envelope, &new_id, &by, &may_supersede, now)
            .await
            .map_err(|err| MemoryError::from_store(err, envelope.id.as_deref().unwrap_or(&new_id)))?;
        if let Created::New(record) | Created::Superseded(record) = &created {
            self.publish(record, vector).await;
        }
        Ok(created)
    }

    /// A live record of the same type and scope whose embedding is at least `dedupe_threshold`
    /// similar to `vector`, if any: the best one. Of the most similar `TWIN_CANDIDATES`, whose
    /// bodies are read for the figures check; a scope of that many near-copies has them merged
    /// already.
    /// With `author`, only a twin written by that author counts.
    async fn near_twin(
        &self,
        tenant: &str,
        envelope: &Envelope,
        vector: &[f32],
        author: Option<Option<&str>>,
    ) -> Option<(String, f32)> {
        const TWIN_CANDIDATES: usize = 16;
        let mut candidates: Vec<(RecordHead, f32)> = {
            let index = self.index.tenant(tenant)?;
            let index = index.read().unwrap_or_else(|p| p.into_inner());
            let first_scope = envelope.scope.first()?;
            let mut candidates = Vec::new();
            for slot in index.by_scope.get(first_scope.as_str()).into_iter().flatten() {
                let Some(item) = index.slots[*slot as usize].as_ref() else { continue };
                let head = &item.head;
                if head.record_type() != envelope.record_type
                    || !head.has_scopes(&envelope.scope)
                    || head.key().is_some()
                    || author.is_some_and(|author| head.author() != author)
                {
                    continue;
                }
                match index.similarity(*slot, vector) {
                    Some(similarity) if similarity >= self.dedupe_threshold => {
                        candidates.push((head.clone(), similarity));
                    }
                    _ => {}
                }
            }
            candidates
        };
        candidates.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.id().cmp(b.0.id())));
        candidates.truncate(TWIN_CANDIDATES);
        let heads: Vec<&RecordHead> = candidates.iter().map(|(head, _)| head).collect();
        let bodies = match self.bodies(&heads).await {
            Ok(bodies) => bodies,
            Err(err) => {
                tracing::warn!(error = %err, "could not read near-duplicate candidates; the write is kept as new");
                return None;
            }
        };
        // Embeddings cannot tell "ORD-1001" from "ORD-1002", "50 EUR" from "500 EUR" or "is"
        // from "is not": a twin must also state the same figures and the same negations.
        let new_text = envelope_passage_text(envelope);
        candidates.iter().zip(bodies).find_map(|((head, similarity), body)| {
            let body = body?;
            same_figures_and_negations(&new_text, &passage_text(&body))
                .then(|| (head.id().to_string(), *similarity))
        })
    }

    pub async fn get(&self, tenant: &str, id: &str) -> Result<Record, MemoryError> {
        self.store.get_record(tenant, id).await.map_err(|err| MemoryError::from_store(err, id))
    }

    /// Applies a partial envelope as the operator `actor`; `if_match` is the revision it read.
    pub async fn update(
        &self,
        tenant: &str,
        id: &str,
        patch: &Value,
        if_match: Option<i64>,
        actor: &str,
    ) -> Result<Record, MemoryError> {
        let writer = Writer::operator(actor, None, crate::record::WriterKind::Operator);
        self.update_as(tenant, id, patch, if_match, &writer).await
    }

    /// Applies a partial envelope as `writer`, within its bounds (`writers::admit`); `if_match`
    /// is the revision the writer read.
    pub async fn update_as(
        &self,
        tenant: &str,
        id: &str,
        patch: &Value,
        if_match: Option<i64>,
        writer: &Writer<'_>,
    ) -> Result<Record, MemoryError> {
        let current = self.get(tenant, id).await?;
        if let Some(expected) = if_match {
            if expected != current.revision {
                return Err(MemoryError::Conflict { expected, actual: current.revision });
            }
        }
        let merged = envelope::merge_patch(&current.envelope_json(), patch).map_err(MemoryError::Invalid)?;
        let now = now_ms();
        let envelope = self.check(&merged, now)?;
        writers::admit(writer, &envelope, Some(&current)).map_err(MemoryError::Invalid)?;
        // The read revision guards the write too: a writer that slipped in between loses here.
        let expected = Some(if_match.unwrap_or(current.revision));
        let by = writer.by();
        let record = self
            .store
            .update_record(tenant, id, &envelope, expected, &by, now)
            .await
            .map_err(|err| MemoryError::from_store(err, id))?;
        let vector = self.embed_one(passage_text(&record)).await;
        self.publish(&record, vector).await;
        Ok(record)
    }

    /// An operator's status change (`POST …/{id}/pause`, `…/archive`, `…/activate`, the
    /// console): from whatever status the record has. An operator naming one record is the
    /// contract's way back from a pause or an archive; other writers name what they expect
    /// (`change_status`).
    pub async fn set_status(
        &self,
        tenant: &str,
        id: &str,
        status: Status,
        actor: &str,
    ) -> Result<Record, MemoryError> {
        const ANY: &[Status] =
            &[Status::Active, Status::Paused, Status::Archived, Status::Proposed, Status::Dormant];
        self.change_status(tenant, id, ANY, status, actor).await
    }

    /// Changes the record's status to `status` if it is one of `from`, compared and set in the
    /// store's transaction: one it finds in another status is left as it is
    /// (`MemoryError::StatusConflict`), so a sweep or a tool's read decided on an older view
    /// cannot undo what an operator did since. Already at `status`: nothing changes.
    pub async fn change_status(
        &self,
        tenant: &str,
        id: &str,
        from: &[Status],
        status: Status,
        actor: &str,
    ) -> Result<Record, MemoryError> {
        if status == Status::Active
            && from.contains(&Status::Proposed)
            && let Some(record) = self.approve_replacement(tenant, id, actor).await?
        {
            return Ok(record);
        }
        let changed = self.store.set_record_status(tenant, id, from, status, actor, now_ms()).await;
        let record = match changed {
            Ok(record) => record,
            Err(StoreError::StatusConflict { actual }) => {
                let names: Vec<&str> = from.iter().map(|status| status.as_str()).collect();
                let expected = match names.split_last() {
                    Some((last, [])) => (*last).to_owned(),
                    Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
                    None => "no".to_owned(),
                };
                let id = id.to_owned();
                return Err(MemoryError::StatusConflict { id, actual: actual.as_str(), expected });
            }
            Err(err) => return Err(MemoryError::from_store(err, id)),
        };
        let vector = self.index.vector_of(tenant, id);
        match vector {
            Some(vector) => {
                self.index.upsert(IndexedRecord::new(record.clone(), Some(vector)));
                self.announce();
            }
            // Reactivated (it was out of the index): embed it again.
            None => self.publish(&record, self.embed_one(passage_text(&record)).await).await,
        }
        Ok(record)
    }

    /// Approving a proposal that names the keyed record it would replace
    /// (`metadata.observer.supersedes`, written by the observer under `propose`, where the live
    /// record must stay until a person decides): the live record takes the proposal's content in
    /// place (revision + 1, the old revision in its history, valid from now) and the proposal
    /// goes. `None` when `id` is no such proposal, or the record it names has gone or changed
    /// its key: then approval is a plain activation.
    async fn approve_replacement(
        &self,
        tenant: &str,
        id: &str,
        actor: &str,
    ) -> Result<Option<Record>, MemoryError> {
        let proposal = self.get(tenant, id).await?;
        let target = proposal.metadata.get("observer").and_then(|o| o.get("supersedes"));
        let (Some(old_id), Some(key)) = (
            target.and_then(|t| t.get("id")).and_then(Value::as_str),
            target.and_then(|t| t.get("key")).and_then(Value::as_str),
        ) else {
            return Ok(None);
        };
        if proposal.status != Status::Proposed {
            return Ok(None);
        }
        let Ok(holder) = self.get(tenant, old_id).await else { return Ok(None) };
        if holder.key.as_deref() != Some(key) || holder.scope != proposal.scope {
            return Ok(None);
        }
        let now = now_ms();
        let mut envelope = proposal.envelope_json();
        envelope["id"] = Value::String(holder.id.clone());
        envelope["key"] = Value::String(key.to_owned());
        envelope["status"] = Value::String(Status::Active.as_str().to_owned());
        envelope["valid_from"] = Value::String(crate::clock::format_ms(now));
        if let Some(observer) = envelope.pointer_mut("/metadata/observer").and_then(Value::as_object_mut) {
            observer.remove("supersedes");
            observer.insert("replaced_revision".into(), Value::from(holder.revision));
        }
        let checked = self.check(&envelope, now)?;
        // The live record now says what the proposal's writer said, approved by `actor`.
        let mut provenance = proposal
            .provenance
            .clone()
            .unwrap_or_else(|| crate::record::Provenance::new(proposal.writer(), proposal.author.clone()));
        provenance.approved_by = Some(actor.to_owned());
        let by = By { actor, author: None, provenance: Some(&provenance), claim: None };
        let record = self
            .store
            .update_record(tenant, &holder.id, &checked, Some(holder.revision), &by, now)
            .await
            .map_err(|err| MemoryError::from_store(err, &holder.id))?;
        let vector = self.embed_one(passage_text(&record)).await;
        self.publish(&record, vector).await;
        self.delete(tenant, id, actor).await?;
        Ok(Some(record))
    }

    /// Deletes `id` as `writer`: a bounded writer only a record it may change
    /// (`writers::may_delete`).
    pub async fn delete_as(
        &self,
        tenant: &str,
        id: &str,
        writer: &Writer<'_>,
    ) -> Result<Record, MemoryError> {
        if writer.bounds.is_some() {
            let current = self.get(tenant, id).await?;
            writers::may_delete(writer, &current).map_err(MemoryError::Invalid)?;
        }
        self.delete(tenant, id, writer.actor).await
    }

    pub async fn delete(&self, tenant: &str, id: &str, actor: &str) -> Result<Record, MemoryError> {
        let (record, seq) = self
            .store
            .delete_record(tenant, id, actor, now_ms())
            .await
            .map_err(|err| MemoryError::from_store(err, id))?;
        self.index.remove(tenant, id, seq);
        self.announce();
        Ok(record)
    }

    pub async fn history(&self, tenant: &str, id: &str) -> Result<Vec<Change>, MemoryError> {
        let changes = self.store.record_history(tenant, id).await.map_err(MemoryError::Store)?;
        if changes.is_empty() {
            // No history: either no such record, or `forget` erased every entry of a live one.
            self.get(tenant, id).await?;
        }
        Ok(changes)
    }

    pub async fn list(
        &self,
        tenant: &str,
        filter: &ListFilter,
        cursor: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Record>, MemoryError> {
        self.store.list_records(tenant, filter, cursor, limit).await.map_err(MemoryError::Store)
    }

    /// Erases a scope's records and their history for good; returns (records, changes) erased.
    /// Erases every record in `scope` and its history; returns the erased records' ids and how
    /// many changes went with them.
    pub async fn forget(&self, tenant: &str, scope: &str) -> Result<(Vec<String>, u64), MemoryError> {
        if !crate::record::is_valid_scope(scope) {
            return Err(MemoryError::Invalid(vec![Problem::new(
                "$.scope",
                "invalid_value",
                "a scope is `public` or `kind:value`, e.g. `user:u-789`",
            )]));
        }
        let (ids, changes, seq) = self.store.forget_scope(tenant, scope).await.map_err(MemoryError::Store)?;
        for id in &ids {
            self.index.remove(tenant, id, seq);
        }
        self.announce();
        Ok((ids, changes))
    }
}

/// Whether two texts carry the same numbers and identifiers (any word with a digit) and the same
/// negations — what a paraphrase keeps and a different fact usually changes.
fn same_figures_and_negations(a: &str, b: &str) -> bool {
    const NEGATIONS: [&str; 12] =
        ["not", "no", "never", "none", "cannot", "can't", "don't", "isn't", "не", "нет", "不", "没"];
    fn marks(text: &str) -> Vec<String> {
        let lower = text.to_lowercase();
        let mut marks: Vec<String> = lower
            .split(|c: char| c.is_whitespace() || matches!(c, ',' | ';' | '(' | ')' | '"' | '!' | '?'))
            .map(|w| w.trim_matches(|c: char| c.is_ascii_punctuation() && c != '\''))
            .filter(|w| w.chars().any(|c| c.is_ascii_digit()) || NEGATIONS.contains(w))
            .map(str::to_owned)
            .collect();
        // Chinese and Japanese write negation inside words.
        marks.extend(["不", "没", "無", "无"].iter().filter(|n| lower.contains(*n)).map(|n| (*n).to_owned()));
        marks.sort();
        marks
    }
    marks(a) == marks(b)
}

/// The text a record is embedded from: its type, key, aliases and every string of its content.
pub fn passage_text(record: &Record) -> String {
    text_of(&record.record_type, record.key.as_deref(), &record.aliases, &record.content)
}

fn envelope_passage_text(envelope: &Envelope) -> String {
    text_of(&envelope.record_type, envelope.key.as_deref(), &envelope.aliases, &envelope.content)
}

fn text_of(record_type: &str, key: Option<&str>, aliases: &[String], content: &Value) -> String {
    let mut text = format!("{}\n", record_type.replace('_', " "));
    if let Some(key) = key {
        text.push_str(key);
        text.push('\n');
    }
    for alias in aliases {
        text.push_str(alias);
        text.push('\n');
    }
    collect_text(content, &mut text);
    text
}
