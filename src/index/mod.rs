//! The in-memory index the funnel reads: per tenant, every record with its embedding, its exact
//! terms and its token cost, plus lookups by scope and by term. Loaded from the store at startup
//! and updated by `MemoryService` after every committed write, so a request never touches the
//! database. Each tenant sits behind its own `RwLock`: requests read concurrently, a write to one
//! tenant never blocks another tenant's requests.
//!
//! Besides the records (behind `Arc`, shared with the funnel's output), each tenant keeps what the
//! per-request passes read for every candidate in flat arrays indexed by slot, kept in step by
//! `insert` and `remove`: validity, status and schema (`SlotMeta`, 24 bytes) and the embedding as
//! an int8 row (`quant::Rows`). At 100,000 records a pass that followed each candidate's pointer to
//! its record or its f32 vector paid a cache miss per candidate (~150 ns); the flat arrays are read
//! in slot order. The records themselves are touched only for the few hits, and for the ids and
//! reasons of a detailed trace.

pub mod terms;

use crate::lexical::LexicalIndex;
use crate::record::{Record, Status};
use crate::vector::ivf::Ivf;
use crate::vector::quant::Rows;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// Below this many vectors a tenant has no approximate index: an exact scan is as fast.
pub const ANN_MIN_RECORDS: usize = 8192;

/// One record as the funnel sees it.
pub struct IndexedRecord {
    pub record: Record,
    /// L2-normalized embedding of content and aliases; `None` until embedded.
    pub vector: Option<Arc<[f32]>>,
    /// Approximate tokens of the record's injected line.
    pub tokens: usize,
    /// Normalized exact terms: key, aliases and identifiers in the content.
    pub terms: Vec<String>,
}

impl IndexedRecord {
    pub fn new(record: Record, vector: Option<Arc<[f32]>>) -> IndexedRecord {
        let mut terms = Vec::new();
        if let Some(key) = &record.key {
            terms.push(terms::normalize(key));
        }
        terms.extend(record.aliases.iter().map(|a| terms::normalize(a)));
        terms::identifiers_in(&record.content, &mut terms);
        terms.sort();
        terms.dedup();
        terms.retain(|t| !t.is_empty());
        let line =
            serde_json::json!({"id": record.id, "type": record.record_type, "content": record.content})
                .to_string();
        let tokens = tiktoken_rs::cl100k_base_singleton().encode_ordinary(&line).len();
        IndexedRecord { record, vector, tokens, terms }
    }
}

/// Which form of a slot's embedding the scans can use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VectorKind {
    /// No embedding yet (or a free slot).
    None,
    /// An int8 row in `TenantIndex::int8_rows` at the slot's position.
    Int8,
    /// An embedding of another length than the tenant's int8 rows: scored in f32 only.
    F32Only,
}

/// What the temporal layer and the exact scan read per slot, copied from the record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotMeta {
    pub valid_from_ms: i64,
    pub valid_until_ms: i64,
    /// Position of the record's schema version in `TenantIndex::schemas`.
    pub schema: u32,
    pub active: bool,
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
        active: false,
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
    by_id: HashMap<String, u32>,
    pub by_scope: HashMap<String, Vec<u32>>,
    pub by_term: HashMap<String, Vec<u32>>,
    pub ann: Option<Ivf>,
    live: usize,
    /// Per slot, in step with `slots`.
    meta: Vec<SlotMeta>,
    /// Every schema version seen in this tenant, interned for `SlotMeta::schema`; only grows.
    schemas: Vec<String>,
    /// Per slot, the embedding as int8 (valid where `SlotMeta::vector` is `Int8`), of one length:
    /// that of most of the tenant's embeddings (see `insert`). `None` until the first one.
    int8_rows: Option<Rows>,
    /// How many slots are `VectorKind::F32Only` and how many `Int8`.
    f32_only: usize,
    int8: usize,
    /// The records' words, by slot, for the lexical ranking of hybrid releases (`lexical`).
    pub lexical: LexicalIndex,
    /// Slots whose records carry `trigger_conditions`: the few that `triggers` evaluates, so a
    /// request does not look into every visible record for them.
    pub triggered: std::collections::BTreeSet<u32>,
}

impl TenantIndex {
    pub fn len(&self) -> usize {
        self.live
    }

    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    pub fn get(&self, id: &str) -> Option<&Arc<IndexedRecord>> {
        self.by_id.get(id).and_then(|slot| self.slots[*slot as usize].as_ref())
    }

    /// Per slot (same length as `slots`): validity, status, schema and embedding form.
    pub fn meta(&self) -> &[SlotMeta] {
        &self.meta
    }

    /// The schema versions `SlotMeta::schema` points into.
    pub fn schemas(&self) -> &[String] {
        &self.schemas
    }

    /// The slots' embeddings as int8 rows, by slot.
    pub fn int8_rows(&self) -> Option<&Rows> {
        self.int8_rows.as_ref()
    }

    fn schema_id(&mut self, version: &str) -> u32 {
        match self.schemas.iter().position(|s| s == version) {
            Some(id) => id as u32,
            None => {
                self.schemas.push(version.to_owned());
                (self.schemas.len() - 1) as u32
            }
        }
    }

    pub fn upsert(&mut self, item: Arc<IndexedRecord>) {
        self.insert(item);
        self.maybe_rebuild_ann();
    }

    /// Adds or replaces a record without considering an approximate-index rebuild.
    fn insert(&mut self, item: Arc<IndexedRecord>) {
        self.remove(&item.record.id);
        let slot = match self.free.pop() {
            Some(slot) => slot,
            None => {
                self.slots.push(None);
                self.meta.push(SlotMeta::FREE);
                (self.slots.len() - 1) as u32
            }
        };
        let record = &item.record;
        let vector = match item.vector.as_deref() {
            None => VectorKind::None,
            Some(v) => {
                let rows = self.int8_rows.get_or_insert_with(|| Rows::new(v.len()));
                if rows.dims() == v.len() {
                    rows.set(slot as usize, v);
                    self.int8 += 1;
                    VectorKind::Int8
                } else {
                    self.f32_only += 1;
                    VectorKind::F32Only
                }
            }
        };
        if let Some(rows) = &mut self.int8_rows {
            rows.resize(self.slots.len()); // a row per slot, set or not
        }
        let schema = self.schema_id(&record.schema_version);
        self.meta[slot as usize] = SlotMeta {
            valid_from_ms: record.valid_from_ms,
            valid_until_ms: record.valid_until_ms,
            schema,
            active: record.status == Status::Active,
            vector,
            tokens: u16::try_from(item.tokens).unwrap_or(u16::MAX),
        };
        if record.content.get("trigger_conditions").is_some() {
            self.triggered.insert(slot);
        }
        for scope in &item.record.scope {
            self.by_scope.entry(scope.clone()).or_default().push(slot);
        }
        for term in &item.terms {
            self.by_term.entry(term.clone()).or_default().push(slot);
        }
        if let (Some(ann), Some(vector)) = (&mut self.ann, &item.vector) {
            ann.insert(slot, vector);
        }
        let switch_to = (self.f32_only > self.int8).then(|| item.vector.as_ref().map(|v| v.len())).flatten();
        self.by_id.insert(item.record.id.clone(), slot);
        self.lexical.upsert_record(slot, &item.record);
        self.slots[slot as usize] = Some(item);
        self.live += 1;
        if let Some(dims) = switch_to {
            self.requantize(dims);
        }
    }

    /// Rebuilds the int8 rows for embeddings of length `dims`. Called when most embeddings no
    /// longer have the rows' length (the embedding model changed, or the tenant's first embedding
    /// was an odd one), so the scans do not fall back to f32 for most records.
    fn requantize(&mut self, dims: usize) {
        let mut rows = Rows::new(dims);
        rows.resize(self.slots.len());
        let (mut int8, mut f32_only) = (0, 0);
        for (slot, (item, meta)) in self.slots.iter().zip(self.meta.iter_mut()).enumerate() {
            meta.vector = match item.as_ref().and_then(|i| i.vector.as_deref()) {
                None => VectorKind::None,
                Some(v) if v.len() == dims => {
                    rows.set(slot, v);
                    int8 += 1;
                    VectorKind::Int8
                }
                Some(_) => {
                    f32_only += 1;
                    VectorKind::F32Only
                }
            };
        }
        (self.int8_rows, self.int8, self.f32_only) = (Some(rows), int8, f32_only);
    }

    pub fn remove(&mut self, id: &str) {
        let Some(slot) = self.by_id.remove(id) else { return };
        let Some(item) = self.slots[slot as usize].take() else { return };
        let unlist = |map: &mut HashMap<String, Vec<u32>>, key: &str| {
            if let Some(list) = map.get_mut(key) {
                list.retain(|s| *s != slot);
                if list.is_empty() {
                    map.remove(key);
                }
            }
        };
        for scope in &item.record.scope {
            unlist(&mut self.by_scope, scope);
        }
        for term in &item.terms {
            unlist(&mut self.by_term, term);
        }
        if let Some(ann) = &mut self.ann {
            ann.remove(slot);
        }
        self.lexical.remove(slot);
        self.triggered.remove(&slot);
        match self.meta[slot as usize].vector {
            VectorKind::Int8 => self.int8 -= 1,
            VectorKind::F32Only => self.f32_only -= 1,
            VectorKind::None => {}
        }
        self.meta[slot as usize] = SlotMeta::FREE;
        self.free.push(slot);
        self.live -= 1;
    }

    /// Builds the approximate index once a tenant is large enough, and rebuilds it when the
    /// number of vectors has doubled since, so its lists stay balanced.
    fn maybe_rebuild_ann(&mut self) {
        let vectors = self.ann.as_ref().map_or(0, |a| a.len());
        let due = match &self.ann {
            None => self.live >= ANN_MIN_RECORDS,
            Some(ann) => vectors >= 2 * ann.built_with.max(1),
        };
        if due {
            self.rebuild_ann();
        }
    }

    pub fn rebuild_ann(&mut self) {
        let items: Vec<(u32, &[f32])> = self
            .slots
            .iter()
            .enumerate()
            .filter_map(|(slot, item)| {
                item.as_ref().and_then(|i| i.vector.as_deref()).map(|v| (slot as u32, v))
            })
            .collect();
        let Some(dims) = items.first().map(|(_, v)| v.len()) else { return };
        if items.len() < ANN_MIN_RECORDS {
            self.ann = None;
            return;
        }
        self.ann = Some(Ivf::build(dims, &items));
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
}

/// How long a removal is remembered once the sync has passed it.
const REMEMBER_REMOVALS: Duration = Duration::from_secs(60);

impl MemoryIndex {
    pub fn tenant(&self, tenant: &str) -> Option<Arc<RwLock<TenantIndex>>> {
        self.tenants.read().unwrap_or_else(|p| p.into_inner()).get(tenant).cloned()
    }

    fn tenant_or_create(&self, tenant: &str) -> Arc<RwLock<TenantIndex>> {
        if let Some(index) = self.tenant(tenant) {
            return index;
        }
        let mut tenants = self.tenants.write().unwrap_or_else(|p| p.into_inner());
        tenants.entry(tenant.to_owned()).or_default().clone()
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
    /// removed later. Records that can never be injected (paused, archived) are kept out, so the
    /// funnel never spends time on them. Returns whether it applied.
    pub fn upsert(&self, item: IndexedRecord) -> bool {
        let (tenant, id, seq) = (item.record.tenant.clone(), item.record.id.clone(), item.record.change_seq);
        if self.removed_at(&tenant, &id).is_some_and(|removed| removed >= seq) {
            return false;
        }
        let index = self.tenant_or_create(&tenant);
        let mut index = index.write().unwrap_or_else(|p| p.into_inner());
        if index.get(&id).is_some_and(|current| current.record.change_seq > seq) {
            return false;
        }
        if item.record.status == Status::Active {
            index.upsert(Arc::new(item));
        } else {
            index.remove(&id);
            drop(index);
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
        match index.get(id) {
            Some(current) if current.record.change_seq <= seq => {
                index.remove(id);
                true
            }
            _ => false,
        }
    }

    /// Whether `tenant` holds any record under one of `scopes` (active ones only are indexed).
    pub fn has_visible(&self, tenant: &str, scopes: &std::collections::BTreeSet<String>) -> bool {
        self.tenant(tenant).is_some_and(|index| {
            let index = index.read().unwrap_or_else(|p| p.into_inner());
            scopes.iter().any(|scope| index.by_scope.get(scope).is_some_and(|slots| !slots.is_empty()))
        })
    }

    /// Whether the index holds this record at this write or a later one.
    pub fn has_write(&self, tenant: &str, id: &str, seq: i64) -> bool {
        self.tenant(tenant).is_some_and(|index| {
            index
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .get(id)
                .is_some_and(|i| i.record.change_seq >= seq)
        })
    }

    /// Records (of any tenant) that have no embedding yet.
    pub fn missing_vectors(&self) -> Vec<Record> {
        let tenants: Vec<_> =
            self.tenants.read().unwrap_or_else(|p| p.into_inner()).values().cloned().collect();
        let mut missing = Vec::new();
        for index in tenants {
            let index = index.read().unwrap_or_else(|p| p.into_inner());
            missing.extend(
                index.slots.iter().flatten().filter(|i| i.vector.is_none()).map(|i| i.record.clone()),
            );
        }
        missing
    }

    /// Gives a record its embedding, unless it changed meanwhile (then its writer embedded it).
    pub fn set_vector(&self, tenant: &str, id: &str, revision: i64, vector: Arc<[f32]>) {
        let Some(index) = self.tenant(tenant) else { return };
        let mut index = index.write().unwrap_or_else(|p| p.into_inner());
        let Some(current) = index.get(id).filter(|i| i.record.revision == revision && i.vector.is_none())
        else {
            return;
        };
        let updated = IndexedRecord {
            record: current.record.clone(),
            vector: Some(vector),
            tokens: current.tokens,
            terms: current.terms.clone(),
        };
        index.upsert(Arc::new(updated));
    }

    /// Replaces everything (startup): builds each tenant's index in one go.
    pub fn load(&self, items: Vec<IndexedRecord>) {
        let mut by_tenant: HashMap<String, TenantIndex> = HashMap::new();
        for item in items.into_iter().filter(|i| i.record.status == Status::Active) {
            // The approximate index is built once at the end, not at every doubling on the way.
            by_tenant.entry(item.record.tenant.clone()).or_default().insert(Arc::new(item));
        }
        for index in by_tenant.values_mut() {
            index.rebuild_ann();
        }
        let loaded = by_tenant.into_iter().map(|(t, i)| (t, Arc::new(RwLock::new(i)))).collect();
        *self.tenants.write().unwrap_or_else(|p| p.into_inner()) = loaded;
        self.removed.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }
}
