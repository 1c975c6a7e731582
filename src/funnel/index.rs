//! The in-memory index the funnel reads: per tenant, every record with its embedding, its exact
//! terms and its token cost, plus lookups by scope and by term. Loaded from the store at startup
//! and updated by `MemoryService` after every committed write, so a request never touches the
//! database. Each tenant sits behind its own `RwLock`: requests read concurrently, a write to one
//! tenant never blocks another tenant's requests.

use super::ivf::Ivf;
use super::terms;
use crate::memory::record::{Record, Status};
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

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
                (self.slots.len() - 1) as u32
            }
        };
        for scope in &item.record.scope {
            self.by_scope.entry(scope.clone()).or_default().push(slot);
        }
        for term in &item.terms {
            self.by_term.entry(term.clone()).or_default().push(slot);
        }
        if let (Some(ann), Some(vector)) = (&mut self.ann, &item.vector) {
            ann.insert(slot, vector);
        }
        self.by_id.insert(item.record.id.clone(), slot);
        self.slots[slot as usize] = Some(item);
        self.live += 1;
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
#[derive(Default)]
pub struct MemoryIndex {
    tenants: RwLock<HashMap<String, Arc<RwLock<TenantIndex>>>>,
}

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

    /// Adds or replaces a record. Records that can never be injected (paused, archived) are kept
    /// out, so the funnel never spends time on them.
    pub fn upsert(&self, item: IndexedRecord) {
        let index = self.tenant_or_create(&item.record.tenant);
        let mut index = index.write().unwrap_or_else(|p| p.into_inner());
        if item.record.status == Status::Active {
            index.upsert(Arc::new(item));
        } else {
            index.remove(&item.record.id);
        }
    }

    pub fn remove(&self, tenant: &str, id: &str) {
        if let Some(index) = self.tenant(tenant) {
            index.write().unwrap_or_else(|p| p.into_inner()).remove(id);
        }
    }

    /// Whether the index holds this record at this revision or a later one.
    pub fn has_revision(&self, tenant: &str, id: &str, revision: i64) -> bool {
        self.tenant(tenant).is_some_and(|index| {
            index
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .get(id)
                .is_some_and(|i| i.record.revision >= revision)
        })
    }

    /// The record's revision if the index holds it and it was last written before `at_ms`.
    pub fn revision_if_older(&self, tenant: &str, id: &str, at_ms: i64) -> Option<i64> {
        let index = self.tenant(tenant)?;
        let index = index.read().unwrap_or_else(|p| p.into_inner());
        index.get(id).filter(|i| i.record.updated_at_ms <= at_ms).map(|i| i.record.revision)
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
    }
}
