//! The in-memory index the funnel reads: per tenant, every record's head (`RecordHead`: what the
//! four layers, the tools' filters and the sync read), its embedding, its exact terms and its
//! token cost, plus lookups by scope and by term. Loaded from the store at startup and updated by
//! `MemoryService` after every committed write, so ranking never touches the database. Each
//! tenant sits behind its own `RwLock`: requests read concurrently, a write to one tenant never
//! blocks another tenant's requests.
//!
//! Record bodies (content, aliases, metadata) are not here: at a million customer profiles they
//! were most of a replica's memory, and a request renders only the few records it injects. Those
//! come from the bounded body cache beside the index (`bodies`, keyed by tenant, id and revision)
//! or from the store (`MemoryService::bodies`). Records with trigger conditions keep their body
//! in the index, since every request that can see them evaluates them.
//!
//! Besides the heads (behind `Arc`, shared with the funnel's output), each tenant keeps what the
//! per-request passes read for every candidate in flat arrays indexed by slot, kept in step by
//! `insert` and `remove`: validity, status and schema (`SlotMeta`, 24 bytes) and the embedding as
//! an int8 row (`quant::Rows`). At 100,000 records a pass that followed each candidate's pointer to
//! its record or its f32 vector paid a cache miss per candidate (~150 ns); the flat arrays are read
//! in slot order. The heads themselves are touched only for the few hits, and for the ids and
//! reasons of a detailed trace.
//!
//! One copy of each embedding: the int8 row. A record's f32 vector arrives with it
//! (`Arriving::vector`) and is quantized on insert, then dropped; the scans and the exact
//! score both read the row (`quant::Rows::score`: the f32 query against the row, off the f32 dot
//! product by ~5·10⁻⁴ for 384-dim unit vectors, measured in docs/benchmarks.md). Only an embedding
//! of another length than the rows' (a model change in progress) is kept in f32, in `odd`.
//!
//! The approximate index is per scope (`ann`): one IVF for each scope holding at least
//! `ANN_MIN_RECORDS` records, so a caller's request probes the lists of its own large scopes
//! (`public`, a big team) and scans its small ones (its `user:` scope) exactly, and never reads
//! the rows of a million other customers' profiles. A live tenant's IVF is (re)built by a
//! builder thread from a copy of the scope's rows, not in the write that found it due
//! (`ann_builds`): requests and writes go on meanwhile.
//!
//! The rows are addressed by slot through one indirection (`quant::Rows::position`), and each
//! (re)build of an IVF lays them out in its lists' order (`lay_out_rows`), so a probed list is one
//! sequential read. Read by slot, every row of a probed list was a cache miss: at 100,000 public
//! records the IVF search took 6.6 ms of a 7.9 ms semantic layer (docs/benchmarks.md).

mod ann_builds;
pub mod bodies;
pub mod lists;
pub mod terms;
#[cfg(test)]
mod tests;
pub mod threads;

pub use bodies::Bodies;

use crate::lexical::LexicalIndex;
use crate::record::{Record, Status};
use crate::slots::SlotSet;
use crate::vector::dot;
use crate::vector::ivf::Ivf;
use crate::vector::quant::Rows;
use smallvec::SmallVec;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// Whether a scope of `size` records among `slots` keeps a bitset beside its list
/// (`TenantIndex::scope_sets`): when it is large, and the bitset (a bit a slot) is no larger
/// than the list (4 bytes a record), so that the sets of a tenant never outweigh its lists.
fn wants_scope_set(size: usize, slots: usize) -> bool {
    size >= SCOPE_SET_MIN_RECORDS.max(slots / 32)
}

/// Below this many records a scope's list is walked slot by slot, which is as fast.
const SCOPE_SET_MIN_RECORDS: usize = 1024;

/// Below this many vectors a scope has no approximate index: an exact scan is as fast.
pub const ANN_MIN_RECORDS: usize = 8192;

/// What the index keeps of a record: what the four layers, the tools' filters, the sync and a
/// trace read. Not its content, aliases or metadata: those are the body (`bodies`), read for the
/// few records a request uses.
///
/// A tenant's million customer profiles keep a million of these, so a head is two pointers and
/// its numbers: the names it shares with the tenant's other heads of the same type, schema and
/// author (`HeadNames`, one allocation for all of them: `TenantIndex::insert` shares it), and
/// its own strings, the id, key and scopes, in one allocation (`text`). In its `Arc` with the
/// rest of `IndexedRecord` it then takes the allocator's 128-byte size class
/// (`a_head_fits_its_size_class`); as five shared names and two boxes it took 192, and as
/// separate strings 256.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordHead {
    names: Arc<HeadNames>,
    /// The id, then the key if there is one, then each scope followed by `SCOPE_END` (`id`,
    /// `key`, `scopes`).
    text: Box<str>,
    pub valid_from_ms: i64,
    pub valid_until_ms: i64,
    pub revision: i64,
    pub updated_at_ms: i64,
    /// `Record::change_seq`: which of two writes of a record is newer.
    pub change_seq: i64,
    /// Where the id and the key end in `text`.
    id_end: u32,
    key_end: u32,
    pub priority: u8,
    pub status: Status,
    keyed: bool,
}

/// The names a head shares with every head of its tenant, type, schema version and author
/// (`RecordHead::names`).
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct HeadNames {
    tenant: Box<str>,
    record_type: Box<str>,
    schema_version: Box<str>,
    author: Option<Box<str>>,
    /// The kind of writer of the live version (`Record::writer`): what a release's
    /// `inject_writers` and the block's framing read.
    writer: crate::record::WriterKind,
}

/// Ends each scope in `RecordHead::text`. A scope never holds one (`record::is_valid_scope`
/// refuses control characters); a record that somehow did is kept without that scope, so it is
/// seen by fewer callers, never by more.
const SCOPE_END: char = '\n';

impl RecordHead {
    pub fn of(record: &Record) -> RecordHead {
        let key = record.key.as_deref().unwrap_or_default();
        let scopes = record.scope.iter().filter(|scope| !scope.contains(SCOPE_END));
        let mut text = String::with_capacity(
            record.id.len() + key.len() + scopes.clone().map(|scope| scope.len() + 1).sum::<usize>(),
        );
        text.push_str(&record.id);
        text.push_str(key);
        for scope in scopes {
            text.push_str(scope);
            text.push(SCOPE_END);
        }
        RecordHead {
            names: Arc::new(HeadNames {
                tenant: Box::from(record.tenant.as_str()),
                record_type: Box::from(record.record_type.as_str()),
                schema_version: Box::from(record.schema_version.as_str()),
                author: record.author.as_deref().map(Box::from),
                writer: record.writer(),
            }),
            text: text.into_boxed_str(),
            valid_from_ms: record.valid_from_ms,
            valid_until_ms: record.valid_until_ms,
            revision: record.revision,
            updated_at_ms: record.updated_at_ms,
            change_seq: record.change_seq,
            // Ids are at most 128 bytes and keys 256 characters (`checks::envelope`): far below
            // `u32`.
            id_end: u32::try_from(record.id.len()).unwrap_or(u32::MAX),
            key_end: u32::try_from(record.id.len() + key.len()).unwrap_or(u32::MAX),
            priority: record.priority,
            status: record.status,
            keyed: record.key.is_some(),
        }
    }

    pub fn tenant(&self) -> &str {
        &self.names.tenant
    }

    pub fn record_type(&self) -> &str {
        &self.names.record_type
    }

    pub fn schema_version(&self) -> &str {
        &self.names.schema_version
    }

    pub fn author(&self) -> Option<&str> {
        self.names.author.as_deref()
    }

    /// The kind of writer of the record's live version.
    pub fn writer(&self) -> crate::record::WriterKind {
        self.names.writer
    }

    pub fn id(&self) -> &str {
        self.text.get(..self.id_end as usize).unwrap_or_default()
    }

    pub fn key(&self) -> Option<&str> {
        self.keyed.then(|| self.text.get(self.id_end as usize..self.key_end as usize).unwrap_or_default())
    }

    /// Who may see the record: its scopes, in the record's order.
    pub fn scopes(&self) -> std::str::SplitTerminator<'_, char> {
        self.text.get(self.key_end as usize..).unwrap_or_default().split_terminator(SCOPE_END)
    }

    /// Whether the record's scopes are exactly `scopes`.
    pub fn has_scopes(&self, scopes: &[String]) -> bool {
        self.scopes().eq(scopes.iter().map(String::as_str))
    }

    /// The head's own strings made again, here: see `TenantIndex::insert`.
    fn reallocate_strings(&mut self) {
        self.text = Box::from(&*self.text);
    }

    pub fn is_valid_at(&self, now_ms: i64) -> bool {
        self.valid_from_ms <= now_ms && now_ms < self.valid_until_ms
    }

    /// Whether `record` (as the store holds it now) may stand for this head's record in what a
    /// request was given: the same record, this revision or a later one, and everything the
    /// funnel decided by (scope, status, validity, type, schema, priority) unchanged. A later
    /// revision that moved the record elsewhere is not shown: the index is about to catch up.
    pub fn admits(&self, record: &Record) -> bool {
        record.tenant == self.tenant()
            && record.id == self.id()
            && record.revision >= self.revision
            && self.has_scopes(&record.scope)
            && record.status == self.status
            && record.valid_from_ms == self.valid_from_ms
            && record.valid_until_ms == self.valid_until_ms
            && record.record_type == self.record_type()
            && record.schema_version == self.schema_version()
            && record.priority == self.priority
    }
}

/// One record as the funnel sees it.
pub struct IndexedRecord {
    pub head: RecordHead,
    /// Approximate tokens of the record's injected line.
    pub tokens: usize,
    /// Once indexed, the ids of its exact terms in `TenantIndex::by_term` (to unlist it there).
    pub terms: Box<[u32]>,
    /// What the record brings into the index, which the index consumes: `None` once indexed.
    /// Behind one pointer, so that the million records an index holds do not each keep its room.
    pub arriving: Option<Box<Arriving>>,
}

/// What a record brings on its way into the index (`IndexedRecord::arriving`).
#[derive(Default)]
pub struct Arriving {
    /// The whole record: the index keeps `head` and hands this to its body cache (`bodies`), so
    /// a record just written is rendered without a store read.
    pub body: Option<Arc<Record>>,
    /// L2-normalized embedding of content and aliases; `None` until embedded. The index keeps it
    /// as its int8 row (`TenantIndex::has_vector`, `similarity`, `vector`).
    pub vector: Option<Arc<[f32]>>,
    /// The record's words as the lexical index takes them (`lexical::record_terms`: analyzed,
    /// its names weighted, with its BM25 length), made here so the analysis runs outside the
    /// tenant's lock (and on every core at startup). `None`: the record has no words to add (the
    /// index keeps what it had).
    pub words: Option<(Vec<String>, u32)>,
    /// Where the record sits in a conversation or document (`metadata.thread`, `position`).
    pub place: Option<threads::Place>,
    /// Normalized exact terms: an operator's key and aliases, and identifiers in the content
    /// (`terms`).
    pub terms: Vec<String>,
    /// The whole record, when it carries `trigger_conditions`: the index keeps it
    /// (`TenantIndex::triggered`).
    pub trigger_body: Option<Arc<Record>>,
}

impl IndexedRecord {
    pub fn new(record: Record, vector: Option<Arc<[f32]>>) -> IndexedRecord {
        let tokens = record.line_tokens();
        IndexedRecord::counted(record, vector, tokens)
    }

    /// `new`, with the record's `line_tokens` already known (kept by the store, or counted by an
    /// import on every core before it wrote them).
    pub fn counted(record: Record, vector: Option<Arc<[f32]>>, tokens: u32) -> IndexedRecord {
        let mut terms = Vec::new();
        // An agent's or the observer's key and aliases are words of the record, not names that
        // route it past the semantic layer (`terms`); an alias stored before aliases had to be
        // specific is no route either.
        if terms::exact_route_trusted(record.writer()) {
            if let Some(key) = &record.key {
                terms.push(terms::normalize(key));
            }
            let specific = record.aliases.iter().filter(|a| terms::alias_specificity(a).is_ok());
            terms.extend(specific.map(|a| terms::normalize(a)));
        }
        terms::identifiers_in(&record.content, &mut terms);
        terms.sort();
        terms.dedup();
        terms.retain(|t| !t.is_empty());
        let words = Some(crate::lexical::record_terms(crate::lexical::analyzer(), &record));
        let head = RecordHead::of(&record);
        let body = Arc::new(record);
        let trigger_body = body.content.get("trigger_conditions").is_some().then(|| Arc::clone(&body));
        let place = threads::Place::of(&body.metadata);
        let arriving =
            Some(Box::new(Arriving { body: Some(body), vector, words, place, terms, trigger_body }));
        IndexedRecord { head, tokens: tokens as usize, terms: Box::default(), arriving }
    }

    /// The record's body, if it brought one and has not been indexed.
    pub fn take_body(&mut self) -> Option<Arc<Record>> {
        self.arriving.as_mut().and_then(|arriving| arriving.body.take())
    }
}

/// Which form of a slot's embedding the scans can use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VectorKind {
    /// No embedding yet (or a free slot).
    None,
    /// An int8 row in `TenantIndex::int8_rows`, under the slot.
    Int8,
    /// An embedding of another length than the tenant's int8 rows: scored in f32 only.
    F32Only,
}

/// A slot's record as the passes over `SlotMeta` take it: the funnel injects only `Active` ones;
/// the memory tools also find `Dormant` ones (`record::Status::is_indexed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotState {
    Free,
    Active,
    Dormant,
}

/// What the temporal layer and the exact scan read per slot, copied from the record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotMeta {
    pub valid_from_ms: i64,
    pub valid_until_ms: i64,
    /// Position of the record's schema version in `TenantIndex::schemas`.
    pub schema: u16,
    /// The record's priority (1–5): the semantic layer keeps the best high-priority hits apart,
    /// for the density layer's stubs.
    pub priority: u8,
    pub state: SlotState,
    pub vector: VectorKind,
    /// The record's `IndexedRecord::tokens`, saturating: what the caller's visible records would
    /// cost injected in full (the console's token savings), summed without touching the records.
    pub tokens: u16,
}

impl SlotMeta {
    const FREE: SlotMeta = SlotMeta {
        valid_from_ms: i64::MAX,
        valid_until_ms: i64::MIN,
        schema: 0,
        priority: 0,
        state: SlotState::Free,
        vector: VectorKind::None,
        tokens: 0,
    };
}

/// One tenant's records.
#[derive(Default)]
pub struct TenantIndex {
    /// Slot arena; `None` marks a free slot.
    pub slots: Vec<Option<Arc<IndexedRecord>>>,
    free: Vec<u32>,
    /// Record id → slot. The table holds the slots alone and hashes (with `ids`) the id their
    /// heads hold: a million ids are not kept twice.
    by_id: hashbrown::HashTable<u32>,
    ids: RandomState,
    pub by_scope: lists::SlotLists,
    pub by_term: lists::SlotLists,
    /// The names the heads share (`HeadNames`); names no head holds any more are dropped on
    /// removal, or by the sweep at `names_sweep_at` entries.
    names: HashSet<Arc<HeadNames>>,
    names_sweep_at: usize,
    /// Per scope of at least `ANN_MIN_RECORDS` records, its approximate index over the int8 rows.
    pub ann: BTreeMap<String, Ivf>,
    /// Per scope of `ann`, its records as a bitset: what a scan of the caller's other scopes
    /// leaves out (`SlotSet::and_not`), since the scope's IVF covers it.
    ann_members: HashMap<String, SlotSet>,
    /// Per large scope (`wants_scope_set`), its records as a bitset, kept in step with
    /// `by_scope`: the scope layer adds it to a caller's visible set a word at a time. Slot by
    /// slot, `public`'s 100,000 records were ~17 % of a request's funnel CPU (perf,
    /// docs/benchmarks.md); as words they are ~1,600 ORs.
    scope_sets: HashMap<Box<str>, SlotSet>,
    /// Embeddings of another length than `int8_rows` (`VectorKind::F32Only`), by slot.
    odd: HashMap<u32, Arc<[f32]>>,
    live: usize,
    /// Per slot, in step with `slots`.
    meta: Vec<SlotMeta>,
    /// Every schema version seen in this tenant, interned for `SlotMeta::schema`; only grows.
    schemas: Vec<String>,
    /// By slot, the embedding as int8 (where `SlotMeta::vector` is `Int8`), of one length:
    /// that of most of the tenant's embeddings (see `insert`). `None` until the first one.
    int8_rows: Option<Rows>,
    /// How many slots are `VectorKind::F32Only` and how many `Int8`.
    f32_only: usize,
    int8: usize,
    /// The records' words, by slot, for the lexical ranking of hybrid releases (`lexical`).
    pub lexical: LexicalIndex,
    /// The records that carry `trigger_conditions`, whole, by slot: the few that `triggers`
    /// evaluates against every request that can see them, with no store read on the way, and
    /// without looking into every visible record for them.
    pub triggered: BTreeMap<u32, Arc<Record>>,
    /// The records that say which conversation or document they belong to, in order there.
    pub threads: threads::Threads,
    /// Whether a due approximate index is left to a builder thread (`ann_builds`: the tenants of
    /// a `MemoryIndex`, which serve requests) rather than built in the write that found it due
    /// (an index used on its own: tests, benchmarks).
    defer_ann: bool,
    ann_builds: ann_builds::State,
}

impl TenantIndex {
    pub fn len(&self) -> usize {
        self.live
    }

    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    pub fn get(&self, id: &str) -> Option<&Arc<IndexedRecord>> {
        self.slot_of(id).and_then(|slot| self.slots[slot as usize].as_ref())
    }

    /// Per slot (same length as `slots`): validity, status, schema and embedding form.
    pub fn meta(&self) -> &[SlotMeta] {
        &self.meta
    }

    /// The schema versions `SlotMeta::schema` points into.
    pub fn schemas(&self) -> &[String] {
        &self.schemas
    }

    /// The records of `scope` as a bitset, if it is large enough to keep one (`scope_sets`);
    /// else its list is the way (`by_scope`).
    pub fn scope_set(&self, scope: &str) -> Option<&SlotSet> {
        self.scope_sets.get(scope)
    }

    /// The records of `scope`, if it has an approximate index.
    pub fn ann_members(&self, scope: &str) -> Option<&SlotSet> {
        self.ann_members.get(scope)
    }

    /// The slots' embeddings as int8 rows, by slot.
    pub fn int8_rows(&self) -> Option<&Rows> {
        self.int8_rows.as_ref()
    }

    /// Schema versions are the few a deployment's schema files name; past 65,535 distinct ones
    /// the last position is shared (and a release reading one of those reads them all).
    fn schema_id(&mut self, version: &str) -> u16 {
        match self.schemas.iter().position(|s| s == version) {
            Some(id) => u16::try_from(id).unwrap_or(u16::MAX),
            None => {
                self.schemas.push(version.to_owned());
                u16::try_from(self.schemas.len() - 1).unwrap_or(u16::MAX)
            }
        }
    }

    /// The slot holding record `id`.
    pub fn slot_of(&self, id: &str) -> Option<u32> {
        let slots = &self.slots;
        let holds = |slot: &u32| slots[*slot as usize].as_ref().is_some_and(|item| item.head.id() == id);
        self.by_id.find(self.ids.hash_one(id), holds).copied()
    }

    /// The shared allocation of `name` in this tenant (`names`).
    fn intern(&mut self, name: &Arc<HeadNames>) -> Arc<HeadNames> {
        if let Some(shared) = self.names.get(&**name) {
            return Arc::clone(shared);
        }
        if self.names.len() >= self.names_sweep_at {
            // Names whose last head went while another copy of it was out (a cloned head).
            self.names.retain(|name| Arc::strong_count(name) > 1);
            self.names_sweep_at = (2 * self.names.len()).max(64);
        }
        self.names.insert(Arc::clone(name));
        Arc::clone(name)
    }

    /// Drops the names of `head`, about to go, if no other head holds them.
    fn release_names(&mut self, head: &RecordHead) {
        if Arc::strong_count(&head.names) == 2 {
            self.names.remove(&*head.names);
        }
    }

    /// Whether the record in `slot` has an embedding.
    pub fn has_vector(&self, slot: u32) -> bool {
        self.meta.get(slot as usize).is_some_and(|m| m.vector != VectorKind::None)
    }

    /// The similarity of the record in `slot` to `query` (a unit vector of the model's length),
    /// scored on its int8 row; `None` without an embedding of that length.
    pub fn similarity(&self, slot: u32, query: &[f32]) -> Option<f32> {
        match self.meta.get(slot as usize)?.vector {
            VectorKind::None => None,
            VectorKind::Int8 => {
                let rows = self.int8_rows.as_ref().filter(|r| r.dims() == query.len())?;
                rows.score(slot as usize, query)
            }
            VectorKind::F32Only => {
                self.odd.get(&slot).filter(|v| v.len() == query.len()).map(|v| dot(query, v))
            }
        }
    }

    /// The embedding of the record in `slot` as the index holds it (from its int8 row:
    /// re-quantizing it gives the same row).
    pub fn vector(&self, slot: u32) -> Option<Arc<[f32]>> {
        match self.meta.get(slot as usize)?.vector {
            VectorKind::None => None,
            VectorKind::Int8 => self.int8_rows.as_ref()?.dequantize(slot as usize).map(Arc::from),
            VectorKind::F32Only => self.odd.get(&slot).cloned(),
        }
    }

    /// Adds or replaces a record (its body, if it came with one, is not kept: `MemoryIndex`
    /// gives it to the body cache).
    pub fn upsert(&mut self, item: IndexedRecord) {
        let scopes: SmallVec<[Box<str>; 2]> = item.head.scopes().map(Box::from).collect();
        self.insert(item);
        for scope in &scopes {
            self.maybe_rebuild_ann(scope);
        }
    }

    /// Adds or replaces a record without considering an approximate-index rebuild.
    fn insert(&mut self, mut item: IndexedRecord) {
        self.remove(item.head.id());
        // The index keeps one copy of the embedding (the int8 row) and of the words (the lexical
        // postings), and no body: the slot holds the head, its terms and token count.
        let Arriving { vector, words, place, terms, trigger_body, .. } =
            item.arriving.take().map(|a| *a).unwrap_or_default();
        item.head.names = self.intern(&item.head.names);
        // The strings a head keeps were made on whichever thread analyzed the record, among that
        // analysis' short-lived allocations (its words, its body); copied here, on the one thread
        // that inserts, they sit together, and the pages the analysis used empty once it is freed
        // and go back to the system (`release_free_memory` after a load).
        item.head.reallocate_strings();
        let slot = match self.free.pop() {
            Some(slot) => slot,
            None => {
                self.slots.push(None);
                self.meta.push(SlotMeta::FREE);
                (self.slots.len() - 1) as u32
            }
        };
        self.ann_builds.touch(slot);
        item.terms = terms.iter().filter_map(|term| self.by_term.list(term, slot)).collect();
        let item = Arc::new(item);
        let record = &item.head;
        let kind = self.place_vector(slot, vector.as_ref());
        let schema = self.schema_id(record.schema_version());
        self.meta[slot as usize] = SlotMeta {
            valid_from_ms: record.valid_from_ms,
            valid_until_ms: record.valid_until_ms,
            schema,
            priority: record.priority,
            state: match record.status {
                Status::Active => SlotState::Active,
                Status::Dormant => SlotState::Dormant,
                _ => SlotState::Free,
            },
            vector: kind,
            tokens: u16::try_from(item.tokens).unwrap_or(u16::MAX),
        };
        if let Some(body) = trigger_body {
            self.triggered.insert(slot, body);
        }
        for scope in item.head.scopes() {
            self.by_scope.list(scope, slot);
            self.follow_scope_set(scope, slot, true);
        }
        if let Some(vector) = vector.as_deref().filter(|_| kind == VectorKind::Int8) {
            self.list_in_ann(slot, item.head.scopes(), vector);
        }
        let hash = self.ids.hash_one(item.head.id());
        if let Some((words, length)) = words {
            let reach = crate::lexical::Reach::of(item.head.scopes());
            self.lexical.upsert_reached(slot, words, length, reach);
        }
        if let Some(place) = place {
            self.threads.insert(slot, place);
        }
        self.slots[slot as usize] = Some(item);
        let (ids, slots) = (&self.ids, &self.slots);
        let rehash =
            |slot: &u32| slots[*slot as usize].as_ref().map_or(0, |item| ids.hash_one(item.head.id()));
        self.by_id.insert_unique(hash, slot, rehash);
        self.live += 1;
        self.requantize_if_most_are(vector.as_ref().map(|v| v.len()));
    }

    /// Keeps `scope`'s bitset in step with its list, which `slot` just joined (`listed`) or
    /// left: made once the scope is large (`wants_scope_set`), dropped once it is well below that.
    fn follow_scope_set(&mut self, scope: &str, slot: u32, listed: bool) {
        let size = self.by_scope.get(scope).map_or(0, |slots| slots.len());
        let slots = self.slots.len();
        match self.scope_sets.get_mut(scope) {
            Some(_) if !wants_scope_set(2 * size, slots) => {
                self.scope_sets.remove(scope);
            }
            Some(set) if listed => set.insert_growing(slot),
            Some(set) => set.remove(slot),
            None if wants_scope_set(size, slots) => {
                let mut set = SlotSet::new(slots);
                for slot in self.by_scope.get(scope).into_iter().flatten() {
                    set.insert(*slot);
                }
                self.scope_sets.insert(Box::from(scope), set);
            }
            None => {}
        }
    }

    /// Stores `slot`'s embedding in the form the scans use; what `SlotMeta::vector` becomes.
    fn place_vector(&mut self, slot: u32, vector: Option<&Arc<[f32]>>) -> VectorKind {
        let kind = match vector {
            None => VectorKind::None,
            Some(v) => {
                let rows = self.int8_rows.get_or_insert_with(|| Rows::new(v.len()));
                if rows.dims() == v.len() {
                    rows.set(slot as usize, v);
                    self.int8 += 1;
                    VectorKind::Int8
                } else {
                    self.f32_only += 1;
                    self.odd.insert(slot, Arc::clone(v));
                    VectorKind::F32Only
                }
            }
        };
        kind
    }

    /// Adds `slot`'s int8 row to the approximate indexes of its scopes that have one; the rest
    /// is scanned exactly. A new row goes where `Rows::set` put it (a free position or the end),
    /// and its entry to the end of its list: read out of order until the next rebuild.
    fn list_in_ann<'a>(&mut self, slot: u32, scopes: impl Iterator<Item = &'a str>, vector: &[f32]) {
        let Some(position) = self.int8_rows.as_ref().and_then(|rows| rows.position(slot as usize)) else {
            return;
        };
        for scope in scopes {
            if let Some(ann) = self.ann.get_mut(scope) {
                ann.insert(slot, position as u32, vector);
                if let Some(members) = self.ann_members.get_mut(scope) {
                    members.insert_growing(slot);
                }
            }
        }
    }

    /// When most embeddings are no longer of the int8 rows' length (a new one of `dims` just
    /// arrived), the rows are rebuilt for that length.
    fn requantize_if_most_are(&mut self, dims: Option<usize>) {
        if let Some(dims) = dims.filter(|_| self.f32_only > self.int8) {
            self.requantize(dims);
        }
    }

    /// Gives the record in `slot`, indexed without an embedding, its embedding (the backfill):
    /// its head, words and terms stay as they are.
    fn set_slot_vector(&mut self, slot: u32, vector: &Arc<[f32]>) {
        let Some(item) = self.slots[slot as usize].clone() else { return };
        self.ann_builds.touch(slot);
        let kind = self.place_vector(slot, Some(vector));
        self.meta[slot as usize].vector = kind;
        if kind == VectorKind::Int8 {
            self.list_in_ann(slot, item.head.scopes(), vector);
        }
        self.requantize_if_most_are(Some(vector.len()));
        for scope in item.head.scopes() {
            self.maybe_rebuild_ann(scope);
        }
    }

    /// Rebuilds the int8 rows for embeddings of length `dims`. Called when most embeddings no
    /// longer have the rows' length (the embedding model changed, or the tenant's first embedding
    /// was an odd one), so the scans do not fall back to f32 for most records.
    fn requantize(&mut self, dims: usize) {
        let mut rows = Rows::new(dims);
        let (mut int8, mut f32_only) = (0, 0);
        let mut odd = HashMap::new();
        for slot in 0..self.slots.len() as u32 {
            let vector = self.vector(slot);
            let meta = &mut self.meta[slot as usize];
            meta.vector = match vector {
                None => VectorKind::None,
                Some(v) if v.len() == dims => {
                    rows.set(slot as usize, &v);
                    int8 += 1;
                    VectorKind::Int8
                }
                Some(v) => {
                    odd.insert(slot, v);
                    f32_only += 1;
                    VectorKind::F32Only
                }
            };
        }
        (self.int8_rows, self.int8, self.f32_only, self.odd) = (Some(rows), int8, f32_only, odd);
        self.ann_builds.rows_generation += 1;
        self.ann.clear();
        self.ann_members.clear();
        let scopes: Vec<String> = self.by_scope.iter().map(|(scope, _)| scope.to_owned()).collect();
        for scope in scopes {
            self.maybe_rebuild_ann(&scope);
        }
    }

    pub fn remove(&mut self, id: &str) {
        let slots = &self.slots;
        let holds = |slot: &u32| slots[*slot as usize].as_ref().is_some_and(|item| item.head.id() == id);
        let Ok(entry) = self.by_id.find_entry(self.ids.hash_one(id), holds) else { return };
        let (slot, _) = entry.remove();
        let Some(item) = self.slots[slot as usize].take() else { return };
        self.ann_builds.touch(slot);
        for scope in item.head.scopes() {
            self.by_scope.unlist_text(scope, slot);
            self.follow_scope_set(scope, slot, false);
        }
        for term in &item.terms {
            self.by_term.unlist(*term, slot);
        }
        self.release_names(&item.head);
        for scope in item.head.scopes() {
            if let Some(ann) = self.ann.get_mut(scope) {
                ann.remove(slot);
            }
            if let Some(members) = self.ann_members.get_mut(scope) {
                members.remove(slot);
            }
        }
        self.odd.remove(&slot);
        self.lexical.remove(slot);
        self.threads.remove(slot);
        self.triggered.remove(&slot);
        match self.meta[slot as usize].vector {
            VectorKind::Int8 => {
                self.int8 -= 1;
                if let Some(rows) = &mut self.int8_rows {
                    rows.remove(slot as usize);
                }
            }
            VectorKind::F32Only => self.f32_only -= 1,
            VectorKind::None => {}
        }
        self.meta[slot as usize] = SlotMeta::FREE;
        self.free.push(slot);
        self.live -= 1;
    }

    /// Builds a scope's approximate index once it is large enough, and rebuilds it when the
    /// number of its vectors has doubled since, so its lists stay balanced.
    fn maybe_rebuild_ann(&mut self, scope: &str) {
        if !self.ann_is_due(scope) {
            return;
        }
        if self.defer_ann {
            self.ann_builds.mark_due(scope);
        } else {
            self.rebuild_ann(scope);
        }
    }

    /// Whether `scope` wants its approximate index (re)built. The first needs as many int8 rows
    /// in the tenant as the index's minimum: records still waiting for their embedding (a text
    /// import) do not each start a build that finds too few rows.
    fn ann_is_due(&self, scope: &str) -> bool {
        match self.ann.get(scope) {
            None => {
                self.int8 >= ANN_MIN_RECORDS
                    && self.by_scope.get(scope).is_some_and(|slots| slots.len() >= ANN_MIN_RECORDS)
            }
            Some(ann) => ann.len() >= 2 * ann.built_with.max(1),
        }
    }

    /// Builds every scope's approximate index that is due (startup: once, after loading).
    pub fn rebuild_all_ann(&mut self) {
        self.ann_builds.forget_due();
        let scopes: Vec<String> = self
            .by_scope
            .iter()
            .filter(|(_, slots)| slots.len() >= ANN_MIN_RECORDS)
            .map(|(scope, _)| scope.to_string())
            .collect();
        self.ann.retain(|scope, _| scopes.contains(scope));
        self.ann_members.retain(|scope, _| scopes.contains(scope));
        for scope in scopes {
            self.build_ann(&scope, ANN_MIN_RECORDS);
        }
        self.lay_out_rows();
    }

    /// Builds `scope`'s approximate index from its records' int8 rows (read back as f32 one at a
    /// time: no second copy of the vectors is made), and lays the rows out in its lists' order.
    pub fn rebuild_ann(&mut self, scope: &str) {
        self.build_ann(scope, ANN_MIN_RECORDS);
        self.lay_out_rows();
    }

    /// Builds `scope`'s approximate index whatever its size (benchmarks of the IVF path on small
    /// sets); the index keeps it in step until the next rebuild.
    pub fn force_ann(&mut self, scope: &str) {
        self.build_ann(scope, 1);
        self.lay_out_rows();
    }

    /// Moves the int8 rows so that each approximate index's lists are consecutive rows, list
    /// after list, and tells the indexes where their rows went; the other rows follow in slot
    /// order. A record in two indexed scopes is laid out with the larger scope (the one more
    /// requests probe, `public` in practice); the other scope's list reads it out of order.
    /// O(rows) per (re)build, which happens when a scope has doubled: amortized, a few row
    /// copies per insert.
    fn lay_out_rows(&mut self) {
        let Some(rows) = self.int8_rows.as_mut() else { return };
        let mut scopes: Vec<(&String, &Ivf)> = self.ann.iter().collect();
        scopes.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then_with(|| a.0.cmp(b.0)));
        let order: Vec<usize> =
            scopes.iter().flat_map(|(_, ivf)| ivf.slots_in_list_order()).map(|s| s as usize).collect();
        rows.relayout(order);
        for ivf in self.ann.values_mut() {
            ivf.relocate(rows);
        }
    }

    fn build_ann(&mut self, scope: &str, min_records: usize) {
        let Some(rows) = self.int8_rows.as_ref() else { return };
        let slots = self.int8_slots_of(scope);
        if slots.len() < min_records {
            self.ann.remove(scope);
            self.ann_members.remove(scope);
            return;
        }
        let ivf = Ivf::build(rows, &slots);
        let mut members = SlotSet::new(self.slots.len());
        for slot in &slots {
            members.insert(*slot);
        }
        self.ann.insert(scope.to_owned(), ivf);
        self.ann_members.insert(scope.to_owned(), members);
    }
}

/// All tenants' indexes.
///
/// Changes arrive from this replica's own writes and from other replicas' (through the store's
/// sync), in any order; the store's sequence number (`Record::change_seq`) decides which is newer,
/// never a clock. A removal is remembered for a while (`REMEMBER_REMOVALS`), so that an older
/// write still on its way cannot bring the record back.
#[derive(Default)]
pub struct MemoryIndex {
    tenants: RwLock<HashMap<String, Arc<RwLock<TenantIndex>>>>,
    /// (tenant, id) → sequence number of its removal, and when it was noted.
    removed: Mutex<HashMap<(String, String), (i64, Instant)>>,
    /// The bodies of indexed records' current revisions, as many as fit its bound.
    bodies: Bodies,
}

/// How long a removal is remembered once the sync has passed it.
const REMEMBER_REMOVALS: Duration = Duration::from_secs(60);

impl MemoryIndex {
    /// An empty index whose body cache holds about `bytes` of records.
    pub fn with_body_cache(bytes: u64) -> MemoryIndex {
        MemoryIndex { bodies: Bodies::with_capacity(bytes), ..MemoryIndex::default() }
    }

    /// The cache of indexed records' bodies (`bodies`).
    pub fn bodies(&self) -> &Bodies {
        &self.bodies
    }

    pub fn tenant(&self, tenant: &str) -> Option<Arc<RwLock<TenantIndex>>> {
        self.tenants.read().unwrap_or_else(|p| p.into_inner()).get(tenant).cloned()
    }

    fn tenant_or_create(&self, tenant: &str) -> Arc<RwLock<TenantIndex>> {
        if let Some(index) = self.tenant(tenant) {
            return index;
        }
        let mut tenants = self.tenants.write().unwrap_or_else(|p| p.into_inner());
        let index = tenants.entry(tenant.to_owned()).or_insert_with(|| {
            Arc::new(RwLock::new(TenantIndex { defer_ann: true, ..TenantIndex::default() }))
        });
        Arc::clone(index)
    }

    /// Starts `index`'s builder thread if the write just made under `locked` found an
    /// approximate index due; lets go of the lock first.
    fn build_due_ann(
        index: &Arc<RwLock<TenantIndex>>,
        mut locked: std::sync::RwLockWriteGuard<'_, TenantIndex>,
    ) {
        let start = locked.claim_ann_builder();
        drop(locked);
        if start {
            ann_builds::spawn(Arc::clone(index));
        }
    }

    fn removed_at(&self, tenant: &str, id: &str) -> Option<i64> {
        let removed = self.removed.lock().unwrap_or_else(|p| p.into_inner());
        removed.get(&(tenant.to_owned(), id.to_owned())).map(|(seq, _)| *seq)
    }

    fn note_removal(&self, tenant: &str, id: &str, seq: i64) {
        let mut removed = self.removed.lock().unwrap_or_else(|p| p.into_inner());
        let entry = removed.entry((tenant.to_owned(), id.to_owned())).or_insert((seq, Instant::now()));
        if entry.0 <= seq {
            *entry = (seq, Instant::now());
        }
    }

    /// Forgets removals the sync has passed (`cursor`) a while ago.
    pub fn forget_removals_upto(&self, cursor: i64) {
        let mut removed = self.removed.lock().unwrap_or_else(|p| p.into_inner());
        removed.retain(|_, (seq, at)| *seq > cursor || at.elapsed() < REMEMBER_REMOVALS);
    }

    /// Adds or replaces a record, unless the index already holds a newer write of it or saw it
    /// removed later. Records that can never be injected nor found (paused, archived, proposed)
    /// are kept out, so the
    /// funnel never spends time on them. Returns whether it applied.
    pub fn upsert(&self, mut item: IndexedRecord) -> bool {
        let (tenant, id, seq) =
            (Box::<str>::from(item.head.tenant()), Box::<str>::from(item.head.id()), item.head.change_seq);
        if self.removed_at(&tenant, &id).is_some_and(|removed| removed >= seq) {
            return false;
        }
        let tenant_index = self.tenant_or_create(&tenant);
        let mut index = tenant_index.write().unwrap_or_else(|p| p.into_inner());
        let replaced = match index.get(&id) {
            Some(current) if current.head.change_seq > seq => return false,
            Some(current) => Some(current.head.revision),
            None => None,
        };
        let body = item.take_body();
        if item.head.status.is_indexed() {
            let revision = item.head.revision;
            index.upsert(item);
            MemoryIndex::build_due_ann(&tenant_index, index);
            if let Some(body) = body {
                self.bodies.insert(body);
            }
            if let Some(old) = replaced.filter(|old| *old != revision) {
                self.bodies.remove(&tenant, &id, old);
            }
        } else {
            index.remove(&id);
            MemoryIndex::build_due_ann(&tenant_index, index);
            if let Some(old) = replaced {
                self.bodies.remove(&tenant, &id, old);
            }
            self.note_removal(&tenant, &id, seq);
        }
        true
    }

    /// Removes a record, removed by the write with sequence number `seq`, unless the index holds
    /// a newer write of it. Returns whether it was there.
    pub fn remove(&self, tenant: &str, id: &str, seq: i64) -> bool {
        self.note_removal(tenant, id, seq);
        let Some(index) = self.tenant(tenant) else { return false };
        let mut index = index.write().unwrap_or_else(|p| p.into_inner());
        match index.get(id).map(|current| (current.head.change_seq, current.head.revision)) {
            Some((change_seq, revision)) if change_seq <= seq => {
                index.remove(id);
                drop(index);
                self.bodies.remove(tenant, id, revision);
                true
            }
            _ => false,
        }
    }

    /// Whether `tenant` holds any record under one of `scopes` (active and dormant ones only are indexed).
    pub fn has_visible(&self, tenant: &str, scopes: &std::collections::BTreeSet<String>) -> bool {
        self.tenant(tenant).is_some_and(|index| {
            let index = index.read().unwrap_or_else(|p| p.into_inner());
            scopes
                .iter()
                .any(|scope| index.by_scope.get(scope.as_str()).is_some_and(|slots| !slots.is_empty()))
        })
    }

    /// Whether the index holds this revision of the record.
    pub fn has_revision(&self, tenant: &str, id: &str, revision: i64) -> bool {
        self.tenant(tenant).is_some_and(|index| {
            index
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .get(id)
                .is_some_and(|i| i.head.revision == revision)
        })
    }

    /// Whether the index holds this record at this write or a later one.
    pub fn has_write(&self, tenant: &str, id: &str, seq: i64) -> bool {
        self.tenant(tenant).is_some_and(|index| {
            index.read().unwrap_or_else(|p| p.into_inner()).get(id).is_some_and(|i| i.head.change_seq >= seq)
        })
    }

    /// Records (of any tenant) that have no embedding yet.
    pub fn missing_vectors(&self) -> Vec<RecordHead> {
        let tenants: Vec<_> =
            self.tenants.read().unwrap_or_else(|p| p.into_inner()).values().cloned().collect();
        let mut missing = Vec::new();
        for index in tenants {
            let index = index.read().unwrap_or_else(|p| p.into_inner());
            missing.extend(index.slots.iter().enumerate().filter_map(|(slot, item)| {
                let item = item.as_ref()?;
                (!index.has_vector(slot as u32)).then(|| item.head.clone())
            }));
        }
        missing
    }

    /// A record's embedding as the index holds it.
    pub fn vector_of(&self, tenant: &str, id: &str) -> Option<Arc<[f32]>> {
        let index = self.tenant(tenant)?;
        let index = index.read().unwrap_or_else(|p| p.into_inner());
        let slot = index.slot_of(id)?;
        index.vector(slot)
    }

    /// Gives a record its embedding, unless it changed meanwhile (then its writer embedded it).
    pub fn set_vector(&self, tenant: &str, id: &str, revision: i64, vector: Arc<[f32]>) {
        let Some(tenant_index) = self.tenant(tenant) else { return };
        let mut index = tenant_index.write().unwrap_or_else(|p| p.into_inner());
        let Some(slot) = index.slot_of(id) else { return };
        let current = index.slots[slot as usize].as_ref().is_some_and(|i| i.head.revision == revision);
        if current && !index.has_vector(slot) {
            index.set_slot_vector(slot, &vector);
            MemoryIndex::build_due_ann(&tenant_index, index);
        }
    }

    /// Replaces everything (startup): builds each tenant's index in one go.
    pub fn load(&self, items: Vec<IndexedRecord>) {
        let mut loader = self.loader();
        loader.add(items);
        self.finish_load(loader);
    }

    /// A loader for a full load into this index: it keeps as many of the records' bodies as
    /// this index's body cache holds, in load order.
    pub fn loader(&self) -> Loader {
        Loader { budget: self.bodies.capacity(), ..Loader::default() }
    }

    /// Replaces everything with what `loader` gathered: the approximate indexes are built once,
    /// here, not at every doubling on the way.
    pub fn finish_load(&self, loader: Loader) {
        let mut by_tenant = loader.by_tenant;
        for index in by_tenant.values_mut() {
            index.rebuild_all_ann();
            index.defer_ann = true;
        }
        let loaded = by_tenant.into_iter().map(|(t, i)| (t, Arc::new(RwLock::new(i)))).collect();
        *self.tenants.write().unwrap_or_else(|p| p.into_inner()) = loaded;
        self.removed.lock().unwrap_or_else(|p| p.into_inner()).clear();
        // The bodies of the index replaced go with it (a record removed meanwhile must not stay
        // here); the loaded records' bodies come in as far as they fit.
        self.bodies.clear();
        for body in loader.bodies {
            self.bodies.insert(body);
        }
        crate::allocator::release_free_memory();
    }
}

/// Tenants' indexes being built from the store, page by page, outside the live index (startup
/// and a replica's full reload): `MemoryIndex::finish_load` swaps them in at once.
#[derive(Default)]
pub struct Loader {
    by_tenant: HashMap<String, TenantIndex>,
    /// Bodies for the body cache, up to `budget` bytes (`bodies::weight`) in all.
    bodies: Vec<Arc<Record>>,
    budget: u64,
    weight: u64,
}

impl Loader {
    pub fn add(&mut self, items: Vec<IndexedRecord>) {
        for mut item in items.into_iter().filter(|i| i.head.status.is_indexed()) {
            if let Some(body) = item.take_body() {
                let weight = bodies::weight(&body);
                if self.weight + weight <= self.budget {
                    self.weight += weight;
                    self.bodies.push(body);
                }
            }
            match self.by_tenant.get_mut(item.head.tenant()) {
                Some(index) => index.insert(item),
                None => {
                    let mut index = TenantIndex::default();
                    let tenant = item.head.tenant().to_owned();
                    index.insert(item);
                    self.by_tenant.insert(tenant, index);
                }
            }
        }
    }

    /// How many records it holds.
    pub fn len(&self) -> usize {
        self.by_tenant.values().map(TenantIndex::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A stored record as the startup load reads it and an import hands it over.
pub struct StoredRecord {
    pub record: Record,
    /// Its stored embedding by the running model.
    pub vector: Option<Arc<[f32]>>,
    /// Its `line_tokens` as the store keeps them; `None` (rows written before the store kept
    /// them) counts them here.
    pub line_tokens: Option<u32>,
}

/// Builds `IndexedRecord`s on every core (their terms, and the token counts the store did not
/// keep, are most of a startup load's and an import's CPU), in the order given. Blocking.
pub fn index_records(records: Vec<StoredRecord>) -> Vec<IndexedRecord> {
    crate::cpu::map_on_cores(records, |StoredRecord { record, vector, line_tokens }| {
        let tokens = line_tokens.unwrap_or_else(|| record.line_tokens());
        IndexedRecord::counted(record, vector, tokens)
    })
}
